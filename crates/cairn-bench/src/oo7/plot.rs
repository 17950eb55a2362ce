//! `--plot DIR`: one PNG per clustering × traversal of the cold runs,
//! `oo7-{clustering}-{traversal}.png`, as the paper's figures 4, 6, 8, 10,
//! 13 and 15: response time (median ms) against buffer size on the left,
//! page faults against buffer size on the right, one line per strategy.
//! Drawn with plotters and the DejaVu Sans font embedded by the `dejavu`
//! crate, as OO1's figure is.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::build::Clustering;
use super::report::Row;
use super::run::Phase;
use super::strategy::Strategy;
use super::traverse::Traversal;
use crate::oo1::plot::{line_panel, plot_err, register_font};
use crate::oo1::system::{Error, Result};

/// One colour per strategy, in [`Strategy::ALL`] order.
const COLORS: [RGBColor; 6] = [
    RGBColor(0x33, 0x33, 0x33),
    RGBColor(0xdd, 0x84, 0x52),
    RGBColor(0x55, 0xa8, 0x68),
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0x81, 0x72, 0xb2),
    RGBColor(0xc4, 0x4e, 0x52),
];

fn color(s: Strategy) -> RGBColor {
    let i = Strategy::ALL.iter().position(|&x| x == s).unwrap_or(0);
    COLORS[i]
}

/// One panel: `value` of each strategy's cold rows against buffer pages.
fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    rows: &[&Row],
    value: impl Fn(&Row) -> Option<f64>,
) -> Result<()> {
    let lines = Strategy::ALL
        .into_iter()
        .map(|s| {
            let pts = rows
                .iter()
                .filter(|r| r.strategy == s)
                .filter_map(|r| value(r).map(|v| (r.buffer_pages as f64, v)))
                .collect();
            (s.name().to_string(), color(s), pts)
        })
        .collect();
    line_panel(area, title, "buffer, pages", y_desc, lines)
}

/// Draws one figure per clustering × traversal that has cold rows into
/// `dir` (created if missing); returns their paths.
pub fn draw(dir: &Path, rows: &[Row]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    register_font()?;
    let mut out = Vec::new();
    for c in Clustering::ALL {
        for t in Traversal::ALL {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| r.clustering == c && r.traversal == t && r.phase == Phase::Cold)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let path = dir.join(format!("oo7-{}-{}.png", c.name(), t.name()));
            let file = path.clone();
            let root = BitMapBackend::new(&file, (1400, 600)).into_drawing_area();
            root.fill(&WHITE).map_err(plot_err)?;
            let (title, body) = root.split_vertically(44);
            title
                .titled(
                    &format!("OO7 cold {} traversal, {} clustering", t.name(), c.label()),
                    ("sans-serif", 24),
                )
                .map_err(plot_err)?;
            let (left, right) = body.split_horizontally(700);
            panel(&left, "response time", "median ms", &mine, |r| Some(r.median_ms))?;
            panel(&right, "page faults", "page faults", &mine, |r| {
                r.counters.get("page_faults").map(|&v| v as f64)
            })?;
            root.present().map_err(plot_err)?;
            out.push(path);
        }
    }
    Ok(out)
}
