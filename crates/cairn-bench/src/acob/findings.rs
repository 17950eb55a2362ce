//! The paper's findings (DeWitt et al. §5–6), checked on the measured rows
//! as yes/no lines with the figures behind them. A finding whose points
//! were not run (a single point, or another sweep) is left out, not
//! guessed.

use super::measure::{Query, Row};
use super::systems::Arch;

/// One finding, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// What the paper found.
    pub finding: &'static str,
    /// Whether Cairn's figures show it.
    pub holds: bool,
    /// The figures.
    pub evidence: String,
}

/// The step's time of `system` at the point matching `at`.
fn ms(rows: &[Row], system: Arch, query: Query, at: impl Fn(&Row) -> bool) -> Option<f64> {
    rows.iter()
        .find(|r| r.system == system && r.query == query && at(r))
        .map(|r| r.ms)
}

/// The times of `system` for `query` along a sweep's points that `on`
/// keeps, by the x value `x` gives, in x order.
fn series(
    rows: &[Row],
    system: Arch,
    query: Query,
    on: impl Fn(&Row) -> bool,
    x: impl Fn(&Row) -> u32,
) -> Vec<(u32, f64)> {
    let mut s: Vec<(u32, f64)> = rows
        .iter()
        .filter(|r| r.system == system && r.query == query && on(r))
        .map(|r| (x(r), r.ms))
        .collect();
    s.sort_by_key(|p| p.0);
    s
}

fn spread(s: &[(u32, f64)]) -> Option<f64> {
    let max = s.iter().map(|p| p.1).fold(f64::NAN, f64::max);
    let min = s.iter().map(|p| p.1).fold(f64::NAN, f64::min);
    (s.len() >= 2 && min > 0.0).then(|| max / min)
}

/// The lowest clustering factor at which `a`'s random read is at least as
/// fast as `b`'s along `s_a`, `s_b` (same x values), if any.
fn crossover(s_a: &[(u32, f64)], s_b: &[(u32, f64)]) -> Option<u32> {
    s_a.iter()
        .zip(s_b)
        .find(|((xa, ta), (xb, tb))| xa == xb && ta <= tb)
        .map(|((x, _), _)| *x)
}

fn fmt(s: &[(u32, f64)]) -> String {
    s.iter()
        .map(|(x, t)| format!("{x}: {t:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A point of the clustering sweep (the unsmeared one): the sweep most
/// findings are judged on.
fn on_clustering_sweep(r: &Row) -> bool {
    r.point.sweep == "clustering" && !r.point.smeared
}

/// Every finding the rows can tell, in the paper's order, then the adaptive
/// client's targets.
pub fn check(rows: &[Row]) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(page_ahead_on_scans(rows));
    out.extend(clustering_sensitivity(rows));
    out.extend(object_ahead_on_updates(rows));
    out.extend(file_writes_slow(rows));
    out.extend(crossover_rises_with_region(rows));
    out.extend(buffer_sensitivity(rows));
    out.extend(adaptive(rows));
    out
}

/// Finding 1. Scans: the page server far ahead (the paper: about 11×).
fn page_ahead_on_scans(rows: &[Row]) -> Option<Finding> {
    let ratios: Vec<f64> = rows
        .iter()
        .filter(|r| r.system == Arch::Page && r.query == Query::Scan)
        .filter_map(|p| ms(rows, Arch::Object, Query::Scan, |o| o.point == p.point).map(|o| o / p.ms.max(1e-9)))
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    Some(Finding {
        finding: "the page server is far ahead of the object server on scans (the paper: about 11x)",
        holds: min >= 3.0,
        evidence: format!(
            "object/page scan time {min:.1}x to {max:.1}x over {} points",
            ratios.len()
        ),
    })
}

/// Findings 2 and 3: the object server largely insensitive to clustering;
/// the page and file servers improving with it.
fn clustering_sensitivity(rows: &[Row]) -> Vec<Finding> {
    let mut out = Vec::new();
    let object = series(rows, Arch::Object, Query::RandomRead, on_clustering_sweep, |r| {
        r.point.clustering
    });
    if let Some(s) = spread(&object) {
        out.push(Finding {
            finding: "the object server is largely insensitive to clustering (random read)",
            holds: s <= 1.5,
            evidence: format!("object random read ms by f: {} (max/min {s:.2})", fmt(&object)),
        });
    }
    for arch in [Arch::Page, Arch::File] {
        let s = series(rows, arch, Query::RandomRead, on_clustering_sweep, |r| {
            r.point.clustering
        });
        if let (Some(first), Some(last)) = (s.first(), s.last()) {
            if s.len() >= 2 {
                out.push(Finding {
                    finding: if arch == Arch::Page {
                        "the page server improves with clustering (random read)"
                    } else {
                        "the file server improves with clustering (random read)"
                    },
                    holds: last.1 < first.1 * 0.8,
                    evidence: format!("{} random read ms by f: {}", arch.name(), fmt(&s)),
                });
            }
        }
    }
    out
}

/// Finding 4. The object server ahead on random update at low clustering
/// and a small buffer.
fn object_ahead_on_updates(rows: &[Row]) -> Option<Finding> {
    let low = |r: &Row| on_clustering_sweep(r) && r.point.clustering == 10 && r.point.client_buffer_pages <= 50;
    let o = ms(rows, Arch::Object, Query::RandomUpdate, low)?;
    let p = ms(rows, Arch::Page, Query::RandomUpdate, low)?;
    Some(Finding {
        finding: "the object server is ahead on random update at low clustering and small buffers",
        holds: o < p,
        evidence: format!("f=10, 50-page buffers: object {o:.0} ms, page {p:.0} ms"),
    })
}

/// Finding 5. File-server writes slow: random update slower than the page
/// server's at most points.
fn file_writes_slow(rows: &[Row]) -> Option<Finding> {
    let updates: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.system == Arch::File && r.query == Query::RandomUpdate)
        .filter_map(|f| ms(rows, Arch::Page, Query::RandomUpdate, |p| p.point == f.point).map(|p| (f.ms, p)))
        .collect();
    if updates.is_empty() {
        return None;
    }
    let slower = updates.iter().filter(|(f, p)| f > p).count();
    Some(Finding {
        finding: "file-server writes are slow (random update slower than the page server's)",
        holds: slower * 2 > updates.len(),
        evidence: format!("file slower than page at {slower} of {} points", updates.len()),
    })
}

/// Finding 6. The page/object crossover on random read rises with the
/// region; judged only when all three regions were run.
fn crossover_rises_with_region(rows: &[Row]) -> Option<Finding> {
    let mut crossings = Vec::new();
    for region in [1, 5, 9] {
        let on = |r: &Row| r.point.sweep == "region" && r.point.region == region;
        let page = series(rows, Arch::Page, Query::RandomRead, on, |r| r.point.clustering);
        let object = series(rows, Arch::Object, Query::RandomRead, on, |r| r.point.clustering);
        if page.len() >= 2 && page.len() == object.len() {
            crossings.push((region, crossover(&page, &object)));
        }
    }
    if crossings.len() != 3 {
        return None;
    }
    let xs: Vec<u32> = crossings.iter().map(|(_, c)| c.unwrap_or(100)).collect();
    Some(Finding {
        finding: "the page-vs-object crossover clustering factor on random read rises with the region (paper: ~30%, ~55%, ~65% at 1, 5, 9 pages)",
        holds: xs.windows(2).all(|w| w[0] <= w[1]) && xs[0] < xs[2],
        evidence: crossings
            .iter()
            .map(|(r, c)| match c {
                Some(f) => format!("region {r}: page catches up at f={f}%"),
                None => format!("region {r}: no crossover up to 90%"),
            })
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// Findings 7 and 8: the object server levels off with buffers past ~150
/// pages, and the page server is more sensitive to buffer size than to
/// clustering.
fn buffer_sensitivity(rows: &[Row]) -> Vec<Finding> {
    let mut out = Vec::new();
    let buffer_at = |f: u32| move |r: &Row| r.point.sweep == "buffer" && r.point.clustering == f;
    // Judged on round trips, which decide the object server's time here
    // and do not move with the machine's noise; the times are shown too.
    let object_buf = series(rows, Arch::Object, Query::RandomRead, buffer_at(30), |r| {
        r.point.client_buffer_pages as u32
    });
    let object_trips: Vec<(u32, f64)> = rows
        .iter()
        .filter(|r| r.system == Arch::Object && r.query == Query::RandomRead && buffer_at(30)(r))
        .map(|r| {
            (
                r.point.client_buffer_pages as u32,
                r.counters.get("round_trips").copied().unwrap_or(0.0),
            )
        })
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect();
    let past: Vec<(u32, f64)> = object_trips.iter().copied().filter(|(b, _)| *b >= 150).collect();
    let before: Vec<(u32, f64)> = object_trips.iter().copied().filter(|(b, _)| *b <= 150).collect();
    if let (Some(level), Some(fall)) = (spread(&past), spread(&before)) {
        out.push(Finding {
            finding: "the object server levels off with client buffers past ~150 pages (random read, f=30%)",
            holds: level <= 1.05 && fall > level,
            evidence: format!(
                "object random read round trips by buffer: {}; ms: {}",
                fmt(&object_trips),
                fmt(&object_buf)
            ),
        });
    }
    let page_buf = series(rows, Arch::Page, Query::RandomRead, buffer_at(30), |r| {
        r.point.client_buffer_pages as u32
    });
    let page_clu = series(rows, Arch::Page, Query::RandomRead, on_clustering_sweep, |r| {
        r.point.clustering
    });
    if let (Some(b), Some(c)) = (spread(&page_buf), spread(&page_clu)) {
        out.push(Finding {
            finding: "the page server is more sensitive to buffer size than to clustering (random read)",
            holds: b > c,
            evidence: format!("page random read max/min over buffers 50-300: {b:.2}; over f 10-90%: {c:.2}"),
        });
    }
    out
}

/// The adaptive client's targets (issue 14): within 10% of the best fixed
/// client-server architecture at every measured point, and strictly
/// better than each of them somewhere. Judged twice: against the page and
/// object servers (the architectures that ship data over the network, as
/// the adaptive client does), and against all three (the file server here
/// reads the volume file on the same machine: no network at all).
fn adaptive(rows: &[Row]) -> Vec<Finding> {
    let mut out = Vec::new();
    let points: Vec<&Row> = rows.iter().filter(|r| r.system == Arch::Adaptive).collect();
    if points.is_empty() {
        return out;
    }
    let same = |a: &Row, b: &Row| a.point == b.point && a.query == b.query;
    for (finding, against) in [
        (
            "the adaptive client is within 10% of the best of the page and object servers at every point",
            &[Arch::Page, Arch::Object][..],
        ),
        (
            "the adaptive client is within 10% of the best fixed client-server architecture (page, object, file) at every point",
            &[Arch::Page, Arch::Object, Arch::File][..],
        ),
    ] {
        let mut worst: Option<(f64, String)> = None;
        let mut measured = 0;
        for a in &points {
            let best = rows
                .iter()
                .filter(|r| against.contains(&r.system) && same(r, a))
                .min_by(|x, y| x.ms.total_cmp(&y.ms));
            let Some(best) = best else { continue };
            measured += 1;
            let ratio = a.ms / best.ms.max(1e-9);
            if worst.as_ref().is_none_or(|w| ratio > w.0) {
                let where_ = format!(
                    "{} f={} region={} buffer={}{} {}: adaptive {:.0} ms, {} {:.0} ms",
                    a.point.sweep,
                    a.point.clustering,
                    a.point.region,
                    a.point.client_buffer_pages,
                    if a.point.smeared { " smeared" } else { "" },
                    a.query.name(),
                    a.ms,
                    best.system.name(),
                    best.ms
                );
                worst = Some((ratio, where_));
            }
        }
        if let Some((ratio, at)) = worst {
            out.push(Finding {
                finding,
                holds: ratio <= 1.10,
                evidence: format!("worst of {measured} points: {ratio:.2}× the best ({at})"),
            });
        }
    }
    let mut beats = Vec::new();
    let mut all = true;
    for arch in [Arch::Page, Arch::Object, Arch::File] {
        let wins = points
            .iter()
            .filter(|a| rows.iter().any(|r| r.system == arch && same(r, a) && a.ms < r.ms))
            .count();
        let compared = points
            .iter()
            .filter(|a| rows.iter().any(|r| r.system == arch && same(r, a)))
            .count();
        if compared > 0 {
            all &= wins > 0;
            beats.push(format!("{}: faster at {wins} of {compared}", arch.name()));
        }
    }
    if !beats.is_empty() {
        out.push(Finding {
            finding: "the adaptive client is strictly better than each fixed architecture somewhere",
            holds: all,
            evidence: beats.join("; "),
        });
    }
    out
}

/// The findings as printed lines.
pub fn lines(findings: &[Finding]) -> String {
    let mut o = String::from("findings (DeWitt et al. 1990):\n");
    for f in findings {
        o.push_str(&format!(
            "  {} {}: {}\n",
            if f.holds { "yes" } else { "NO " },
            f.finding,
            f.evidence
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::acob::run::Point;

    fn row(system: Arch, query: Query, f: u32, ms: f64) -> Row {
        Row {
            system,
            point: Point {
                sweep: "clustering",
                clustering: f,
                region: 5,
                client_buffer_pages: 50,
                smeared: false,
            },
            query,
            ms,
            counters: BTreeMap::new(),
        }
    }

    #[test]
    fn findings_follow_the_figures_and_unmeasured_ones_are_left_out() {
        let mut rows = Vec::new();
        for f in [10, 50, 90] {
            rows.push(row(Arch::Page, Query::Scan, f, 10.0));
            rows.push(row(Arch::Object, Query::Scan, f, 120.0));
            rows.push(row(Arch::Page, Query::RandomRead, f, 1000.0 / f as f64));
            rows.push(row(Arch::Object, Query::RandomRead, f, 30.0));
            rows.push(row(Arch::Page, Query::RandomUpdate, f, 50.0));
            rows.push(row(Arch::Object, Query::RandomUpdate, f, 40.0));
        }
        let found = check(&rows);
        let by = |s: &str| found.iter().find(|f| f.finding.contains(s)).cloned();
        assert!(by("far ahead of the object server on scans").unwrap().holds);
        assert!(by("object server is largely insensitive").unwrap().holds);
        assert!(by("page server improves with clustering").unwrap().holds);
        assert!(by("ahead on random update at low clustering").unwrap().holds);
        // No file server, region or buffer sweep: those are not told.
        assert!(by("file server improves").is_none());
        assert!(by("crossover").is_none());
        assert!(by("levels off").is_none());
        // Figures that say otherwise give "no".
        for r in rows
            .iter_mut()
            .filter(|r| r.system == Arch::Object && r.query == Query::Scan)
        {
            r.ms = 11.0;
        }
        assert!(!check(&rows)[0].holds);
        assert!(lines(&check(&rows)).contains("NO "));
    }

    #[test]
    fn the_adaptive_targets_are_judged_point_by_point() {
        let mut rows = Vec::new();
        for f in [10, 50, 90] {
            rows.push(row(Arch::Page, Query::RandomRead, f, 1000.0 / f as f64));
            rows.push(row(Arch::Object, Query::RandomRead, f, 30.0));
            // Never worse than 5% over the best, better than the page
            // server at f = 10% and the object server at f = 90%.
            rows.push(row(
                Arch::Adaptive,
                Query::RandomRead,
                f,
                (1000.0 / f as f64).min(30.0) * 1.05,
            ));
        }
        rows.push(row(Arch::Adaptive, Query::Scan, 10, 10.0));
        let found = check(&rows);
        let by = |s: &str| found.iter().find(|f| f.finding.contains(s)).cloned();
        let within = by("best of the page and object servers").unwrap();
        assert!(within.holds, "{within:?}");
        assert!(within.evidence.contains("of 3 points"), "{within:?}");
        assert!(by("strictly better").unwrap().holds);
        // 20% over the best at one point: no.
        rows.iter_mut()
            .find(|r| r.system == Arch::Adaptive && r.point.clustering == 50 && r.query == Query::RandomRead)
            .unwrap()
            .ms = 24.0;
        let found = check(&rows);
        let within = found.iter().find(|f| f.finding.contains("best of the page")).unwrap();
        assert!(!within.holds && within.evidence.contains("1.20×"), "{within:?}");
        // Never faster than the object server: not strictly better.
        for r in rows.iter_mut().filter(|r| r.system == Arch::Adaptive) {
            r.ms = 31.0;
        }
        assert!(
            !check(&rows)
                .iter()
                .find(|f| f.finding.contains("strictly"))
                .unwrap()
                .holds
        );
    }
}
