//! `--plot DIR`: the paper's figures as PNGs, one per sweep and query that
//! was run, `acob-{sweep}-{query}[-smeared|-region-R|-f-F].png`: the step's
//! time (ms) against the swept value on the left, round trips on the
//! right, one line per system. Drawn with plotters and the font OO1's
//! figure uses.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::measure::{Query, Row};
use super::systems::Arch;
use crate::oo1::plot::{line_panel, plot_err, register_font};
use crate::oo1::system::{Error, Result};

/// One colour per system, in [`Arch::ALL`] order.
const COLORS: [RGBColor; 5] = [
    RGBColor(0x33, 0x33, 0x33),
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0xc4, 0x4e, 0x52),
    RGBColor(0x55, 0xa8, 0x68),
    RGBColor(0x81, 0x72, 0xb2),
];

fn color(a: Arch) -> RGBColor {
    COLORS[Arch::ALL.iter().position(|&x| x == a).unwrap_or(0)]
}

/// One figure: which rows, and the x value of each.
struct Figure<'a> {
    name: String,
    title: String,
    x_desc: &'static str,
    rows: Vec<&'a Row>,
    x: fn(&Row) -> f64,
}

/// One panel: `value` of each system's rows against the figure's x.
fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    fig: &Figure<'_>,
    title: &str,
    value: impl Fn(&Row) -> f64,
) -> Result<()> {
    let lines = Arch::ALL
        .into_iter()
        .map(|a| {
            let pts = fig
                .rows
                .iter()
                .filter(|r| r.system == a)
                .map(|r| ((fig.x)(r), value(r)))
                .collect();
            (a.name().to_string(), color(a), pts)
        })
        .collect();
    line_panel(area, title, fig.x_desc, title, lines)
}

/// The figures the rows make: per query, the clustering sweep smeared and
/// not, the region sweep per region, the buffer sweep per clustering factor.
fn figures(rows: &[Row]) -> Vec<Figure<'_>> {
    let mut out = Vec::new();
    for q in Query::ALL {
        let of = |keep: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| r.query == q && keep(r)).collect::<Vec<_>>();
        for smeared in [false, true] {
            let rs = of(&|r| r.point.sweep == "clustering" && r.point.smeared == smeared);
            let tag = if smeared { "-smeared" } else { "" };
            out.push(Figure {
                name: format!("acob-clustering-{}{tag}", q.name()),
                title: format!(
                    "ACOB {} by clustering factor{}",
                    q.name(),
                    if smeared { ", smeared" } else { "" }
                ),
                x_desc: "clustering factor, %",
                rows: rs,
                x: |r| f64::from(r.point.clustering),
            });
        }
        for region in [1, 5, 9] {
            out.push(Figure {
                name: format!("acob-region-{}-region-{region}", q.name()),
                title: format!("ACOB {} by clustering factor, region {region} pages", q.name()),
                x_desc: "clustering factor, %",
                rows: of(&|r| r.point.sweep == "region" && r.point.region == region),
                x: |r| f64::from(r.point.clustering),
            });
        }
        for f in [30, 90] {
            out.push(Figure {
                name: format!("acob-buffer-{}-f-{f}", q.name()),
                title: format!("ACOB {} by client buffer, f = {f}%", q.name()),
                x_desc: "client buffer, pages",
                rows: of(&|r| r.point.sweep == "buffer" && r.point.clustering == f),
                x: |r| r.point.client_buffer_pages as f64,
            });
        }
    }
    out.retain(|f| f.rows.len() >= 2);
    out
}

/// Draws every figure the rows make into `dir` (created if missing);
/// returns their paths.
pub fn draw(dir: &Path, rows: &[Row]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    register_font()?;
    let mut out = Vec::new();
    for fig in figures(rows) {
        let path = dir.join(format!("{}.png", fig.name));
        let file = path.clone();
        let root = BitMapBackend::new(&file, (1400, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let (title, body) = root.split_vertically(44);
        title.titled(&fig.title, ("sans-serif", 24)).map_err(plot_err)?;
        let (left, right) = body.split_horizontally(700);
        panel(&left, &fig, "ms", |r| r.ms)?;
        panel(&right, &fig, "round trips", |r| {
            r.counters.get("round_trips").copied().unwrap_or(0.0)
        })?;
        root.present().map_err(plot_err)?;
        out.push(path);
    }
    Ok(out)
}
