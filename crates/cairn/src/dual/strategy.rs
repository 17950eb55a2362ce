//! The dual-buffering strategies (paper §3) and the buffer's configuration.

use crate::error::{Error, Result};

/// When an object is copied out of its home page (paper §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Copying {
    /// No copying: pages only (a page-based buffer).
    Noc,
    /// Eager: an object is copied when it is first used.
    Eoc,
    /// Lazy: the objects of a page still in the object segment are copied
    /// when the page is displaced.
    Loc,
    /// Lazy, but never from a page holding the running transactions'
    /// changes: such a page stays (LOC−).
    LocMinus,
    /// Lazy, and an object is copied as soon as it is changed (LOC+).
    LocPlus,
}

/// When a copy is given back to its home page (paper §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Relocation {
    /// Eager: when the home page is loaded again.
    Eager,
    /// Lazy: when the copy itself is displaced.
    Lazy,
}

/// A dual-buffering strategy: copying, relocation and the overlap ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Strategy {
    /// When objects are copied.
    pub copying: Copying,
    /// When copies are relocated (meaningless under NOC).
    pub relocation: Relocation,
    /// A page whose objects in the object segment fill more than this
    /// fraction of it is kept whole while another victim exists (0.6 by
    /// default; 1.0 or more turns it off).
    pub overlap_ratio: f64,
}

impl Strategy {
    /// The default overlap-ratio threshold (paper §4.3).
    pub const OVERLAP_RATIO: f64 = 0.6;

    /// Pages only.
    pub const NOC: Strategy = Strategy::new(Copying::Noc, Relocation::Lazy);
    /// Eager copying, lazy relocation (ORION's).
    pub const EOC_LRL: Strategy = Strategy::new(Copying::Eoc, Relocation::Lazy);
    /// Lazy copying, lazy relocation.
    pub const LOC_LRL: Strategy = Strategy::new(Copying::Loc, Relocation::Lazy);
    /// Lazy copying, eager relocation: the paper's winner, and Cairn's default.
    pub const LOC_ERL: Strategy = Strategy::new(Copying::Loc, Relocation::Eager);
    /// LOC− with eager relocation.
    pub const LOC_MINUS_ERL: Strategy = Strategy::new(Copying::LocMinus, Relocation::Eager);
    /// LOC+ with eager relocation.
    pub const LOC_PLUS_ERL: Strategy = Strategy::new(Copying::LocPlus, Relocation::Eager);

    /// The paper's six strategies, in its order.
    pub const ALL: [Strategy; 6] = [
        Strategy::NOC,
        Strategy::EOC_LRL,
        Strategy::LOC_LRL,
        Strategy::LOC_ERL,
        Strategy::LOC_MINUS_ERL,
        Strategy::LOC_PLUS_ERL,
    ];

    /// `copying` with `relocation` and the default overlap ratio.
    pub const fn new(copying: Copying, relocation: Relocation) -> Strategy {
        Strategy {
            copying,
            relocation,
            overlap_ratio: Strategy::OVERLAP_RATIO,
        }
    }

    /// The paper's name: `NOC`, `EOC/LRL`, `LOC-/ERL`, …
    pub fn name(&self) -> String {
        let c = match self.copying {
            Copying::Noc => return "NOC".into(),
            Copying::Eoc => "EOC",
            Copying::Loc => "LOC",
            Copying::LocMinus => "LOC-",
            Copying::LocPlus => "LOC+",
        };
        let r = match self.relocation {
            Relocation::Eager => "ERL",
            Relocation::Lazy => "LRL",
        };
        format!("{c}/{r}")
    }

    /// Parses a name as [`Strategy::name`] writes it (case-insensitive; a
    /// copying strategy alone takes eager relocation, EOC lazy).
    pub fn parse(s: &str) -> Result<Strategy> {
        let up = s.trim().to_ascii_uppercase();
        let (c, r) = match up.split_once('/') {
            Some((c, r)) => (c, Some(r)),
            None => (up.as_str(), None),
        };
        let copying = match c {
            "NOC" => Copying::Noc,
            "EOC" => Copying::Eoc,
            "LOC" => Copying::Loc,
            "LOC-" | "LOC−" => Copying::LocMinus,
            "LOC+" => Copying::LocPlus,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown dual-buffering strategy {s:?} (NOC, EOC/LRL, LOC/LRL, LOC/ERL, LOC-/ERL, LOC+/ERL)"
                )))
            }
        };
        let relocation = match r {
            Some("ERL") => Relocation::Eager,
            Some("LRL") => Relocation::Lazy,
            None if matches!(copying, Copying::Eoc | Copying::Noc) => Relocation::Lazy,
            None => Relocation::Eager,
            Some(other) => {
                return Err(Error::InvalidArgument(format!(
                    "unknown relocation {other:?} in strategy {s:?} (ERL or LRL)"
                )))
            }
        };
        Ok(Strategy::new(copying, relocation))
    }

    /// The share of the budget the page segment's locality set gets by
    /// default: all of it under NOC, a quarter under EOC (copies do the
    /// work; the paper: "object segments large compared to the page
    /// segments"), half under the lazy strategies.
    pub fn default_page_share(&self) -> f64 {
        match self.copying {
            Copying::Noc => 1.0,
            Copying::Eoc => 0.25,
            _ => 0.5,
        }
    }
}

impl Default for Strategy {
    fn default() -> Strategy {
        Strategy::LOC_ERL
    }
}

/// How a dual buffer is sized and run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DualConfig {
    /// Bytes of page images and copies held at most.
    pub budget_bytes: usize,
    /// The page size (a page image's charge).
    pub page_size: usize,
    /// The strategy.
    pub strategy: Strategy,
    /// The page segment's locality set, as a share of the budget (the rest
    /// is the object segment's); `None`: the strategy's default.
    pub page_share: Option<f64>,
}

impl DualConfig {
    /// A buffer of `pages` pages of `page_size` bytes under `strategy`.
    pub fn pages(pages: usize, page_size: usize, strategy: Strategy) -> DualConfig {
        DualConfig {
            budget_bytes: pages.saturating_mul(page_size),
            page_size,
            strategy,
            page_share: None,
        }
    }
}

/// The size and strategy of a client's dual buffer (`super`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DualBufferOptions {
    /// Bytes of page images and object copies held at most (64 MiB by
    /// default; at least four pages).
    pub bytes: usize,
    /// The dual-buffering strategy: NOC (pages only) by default. The
    /// paper's winner, LOC/ERL, keeps a descriptor per object used, and
    /// copying pays only where pages mix a few hot objects with many cold
    /// ones, which neither OO1 nor OO7 does here (docs/benchmarks.md, "OO7
    /// and the dual buffer", and the notebook in docs/history/); choose it
    /// per client where that holds.
    pub strategy: Strategy,
    /// The page segment's share of `bytes` (`None`: the strategy's
    /// default, [`Strategy::default_page_share`]).
    pub page_share: Option<f64>,
}

impl Default for DualBufferOptions {
    fn default() -> Self {
        DualBufferOptions {
            bytes: 64 << 20,
            strategy: Strategy::NOC,
            page_share: None,
        }
    }
}
