//! `--plot DIR`: `DIR/oo1.png`, one panel per measure, a cold and a warm bar
//! per system (median ms, log scale, with the min–max as a whisker), drawn
//! with plotters and the DejaVu Sans font embedded by the `dejavu` crate (so
//! no system font library is needed).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::report::{Phase, Row};
use super::system::{Error, Result};
use super::workload::Measure;

const COLD: RGBColor = RGBColor(0x4c, 0x72, 0xb0);
const WARM: RGBColor = RGBColor(0xdd, 0x84, 0x52);

/// A plotting error as the benchmark's error.
pub(crate) fn plot_err(e: impl std::fmt::Display) -> Error {
    Error::Plot(e.to_string())
}

/// Registers the embedded font once per process.
pub(crate) fn register_font() -> Result<()> {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ONCE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Plot("the embedded font did not load".into()))
    }
}

/// One line of a [`line_panel`]: its label, colour and points.
pub(crate) type Line = (String, RGBColor, Vec<(f64, f64)>);

/// A panel of lines (OO7's and ACOB's figures): `title` above, `y_desc`
/// up the side, `x_desc` along the bottom, one line with dots and a legend
/// entry per element of `lines` (its points in x order), the axes fitted to
/// the points.
pub(crate) fn line_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: Vec<Line>,
) -> Result<()> {
    let pts = || lines.iter().flat_map(|l| l.2.iter().copied());
    let x_lo = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_hi = pts().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let (x_lo, x_hi) = if x_lo <= x_hi { (x_lo, x_hi) } else { (0.0, 1.0) };
    let y_hi = pts().map(|p| p.1).fold(0.0, f64::max).max(1.0);
    let pad = ((x_hi - x_lo) * 0.05).max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_lo - pad..x_hi + pad, 0.0..y_hi * 1.1)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(plot_err)?;
    for (label, c, mut points) in lines {
        if points.is_empty() {
            continue;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(std::iter::once(PathElement::new(points.clone(), c.stroke_width(2))))
            .map_err(plot_err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

/// Draws the figure into `dir` (created if missing); returns its path.
pub fn draw(dir: &Path, parts: u32, systems: &[&str], rows: &[Row]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    register_font()?;
    let path = dir.join("oo1.png");
    let file = path.clone();
    let root = BitMapBackend::new(&file, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (title, body) = root.split_vertically(50);
    title
        .titled(
            &format!("OO1, {parts} parts: median ms per run (log scale), cold and warm"),
            ("sans-serif", 24),
        )
        .map_err(plot_err)?;
    // The legend, once, in the title bar's right corner.
    for (k, (label, color)) in [("cold", COLD), ("warm", WARM)].into_iter().enumerate() {
        let x = 1180 + 90 * k as i32;
        title
            .draw(&Rectangle::new([(x, 18), (x + 18, 36)], color.filled()))
            .map_err(plot_err)?;
        title
            .draw(&Text::new(label, (x + 24, 18), ("sans-serif", 18)))
            .map_err(plot_err)?;
    }
    let panels = body.split_evenly((2, 2));
    for (panel, m) in panels.iter().zip(Measure::ALL) {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.measure == m).collect();
        let lo = mine.iter().map(|r| r.min_ms).fold(f64::INFINITY, f64::min).max(1e-4);
        let hi = mine.iter().map(|r| r.max_ms).fold(0.0, f64::max).max(lo * 10.0);
        let n = systems.len().max(1);
        let mut chart = ChartBuilder::on(panel)
            .caption(m.name(), ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, (lo / 2.0..hi * 2.0).log_scale())
            .map_err(plot_err)?;
        let names: Vec<String> = systems.iter().map(|s| s.to_string()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.05 && i < names.len() {
                    names[i].clone()
                } else {
                    String::new()
                }
            })
            .y_desc("ms")
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(plot_err)?;
        for (i, sys) in systems.iter().enumerate() {
            for (k, phase, color) in [(0, Phase::Cold, COLD), (1, Phase::Warm, WARM)] {
                let Some(r) = mine.iter().find(|r| r.system == *sys && r.phase == phase) else {
                    continue;
                };
                let x0 = i as f64 + 0.12 + 0.38 * f64::from(k);
                let x1 = x0 + 0.36;
                let xm = (x0 + x1) / 2.0;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, lo / 2.0), (x1, r.median_ms.max(lo / 2.0))],
                        color.filled(),
                    )))
                    .map_err(plot_err)?;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(xm, r.min_ms.max(lo / 2.0)), (xm, r.max_ms.max(lo / 2.0))],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(plot_err)?;
            }
        }
    }
    root.present().map_err(plot_err)?;
    Ok(path)
}
