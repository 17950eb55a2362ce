//! Kemper & Kossmann's dual-buffering strategies (§3) and the one place
//! that turns a strategy and a buffer size into [`cairn::Options`]:
//! [`options_for`].
//!
//! | name | copying | relocation |
//! |---|---|---|
//! | NOC | none: pages only | — |
//! | EOC/LRL | eager (on object fault) | lazy (on the copy's replacement) |
//! | LOC/LRL | lazy (on the home page's replacement) | lazy |
//! | LOC/ERL | lazy | eager (when the home page is reloaded) |
//! | LOC−/ERL | lazy, never from a modified page | eager |
//! | LOC+/ERL | lazy, and eagerly on first modification | eager |

use std::str::FromStr;

use cairn::storage::buffer::Policy;
use cairn::Options;

/// A dual-buffer management strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// No object copying: a page buffer.
    Noc,
    /// Eager object copying, lazy relocation.
    EocLrl,
    /// Lazy object copying, lazy relocation.
    LocLrl,
    /// Lazy object copying, eager relocation (the paper's winner).
    LocErl,
    /// LOC⁻ (no copying from modified pages), eager relocation.
    LocMinusErl,
    /// LOC⁺ (copying on first modification), eager relocation.
    LocPlusErl,
}

impl Strategy {
    /// All six, in report order.
    pub const ALL: [Strategy; 6] = [
        Strategy::Noc,
        Strategy::EocLrl,
        Strategy::LocLrl,
        Strategy::LocErl,
        Strategy::LocMinusErl,
        Strategy::LocPlusErl,
    ];

    /// The paper's name: `NOC`, `EOC/LRL`, `LOC/LRL`, `LOC/ERL`, `LOC-/ERL`,
    /// `LOC+/ERL`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Noc => "NOC",
            Strategy::EocLrl => "EOC/LRL",
            Strategy::LocLrl => "LOC/LRL",
            Strategy::LocErl => "LOC/ERL",
            Strategy::LocMinusErl => "LOC-/ERL",
            Strategy::LocPlusErl => "LOC+/ERL",
        }
    }

    /// Other spellings accepted (lower case): with `-` or `_` for `/`, and
    /// `minus`/`plus` (or `m`/`p`) for LOC⁻/LOC⁺.
    fn aliases(self) -> &'static [&'static str] {
        match self {
            Strategy::Noc => &["noc"],
            Strategy::EocLrl => &["eoc-lrl", "eoclrl"],
            Strategy::LocLrl => &["loc-lrl", "loclrl"],
            Strategy::LocErl => &["loc-erl", "locerl"],
            Strategy::LocMinusErl => &["loc--erl", "locminus-erl", "loc-minus-erl", "locm-erl", "loc−/erl"],
            Strategy::LocPlusErl => &["loc+-erl", "locplus-erl", "loc-plus-erl", "locp-erl", "loc+erl"],
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;

    /// The paper's name in any case (`LOC-/ERL`, `loc/erl`), or a spelling
    /// without the slash (`loc-erl`, `loc_erl`, `locminus-erl`, `loc+-erl`).
    fn from_str(s: &str) -> Result<Strategy, String> {
        let t = s.trim().to_lowercase();
        let dashed = t.replace('_', "-");
        Strategy::ALL
            .into_iter()
            .find(|st| st.name().to_lowercase() == t || st.aliases().contains(&dashed.as_str()))
            .ok_or_else(|| {
                format!(
                    "unknown strategy {:?}; the strategies are {}",
                    s.trim(),
                    Strategy::ALL.map(Strategy::name).join(", ")
                )
            })
    }
}

/// Bytes of the object cache of decoded objects: small, so that the dual
/// buffer is what the sweep varies (the traversals read objects in place,
/// [`cairn::Transaction::view`]).
pub const OBJECT_CACHE_BYTES: usize = 16 * 4096;

/// The smallest buffer the sweep accepts, in pages (a B+-tree descent and
/// a commit pin a few frames at once).
pub const BUFFER_PAGES_MIN: usize = 16;

/// The embedded engine's page buffer under the client's dual buffer, in
/// pages: it stands for the paper's server buffer, "approximately half the
/// size of the object base" (1,000 of about 2,000 pages there; the small
/// database is about 1,230 pages here).
pub const SERVER_BUFFER_PAGES: usize = 640;

impl Strategy {
    /// The dual buffer's strategy of this name (default overlap ratio).
    pub fn dual(self) -> cairn::Strategy {
        use cairn::Strategy as S;
        match self {
            Strategy::Noc => S::NOC,
            Strategy::EocLrl => S::EOC_LRL,
            Strategy::LocLrl => S::LOC_LRL,
            Strategy::LocErl => S::LOC_ERL,
            Strategy::LocMinusErl => S::LOC_MINUS_ERL,
            Strategy::LocPlusErl => S::LOC_PLUS_ERL,
        }
    }
}

/// The options a run of `strategy` with a client buffer of `buffer_pages`
/// pages opens the database with. Every database the benchmark opens gets
/// its options here.
///
/// The client buffer is the dual buffer ([`cairn::DualBufferOptions`]): `buffer_pages`
/// pages of page images and object copies under `strategy`, with the
/// strategy's default split between the page and object segments. Under it,
/// the embedded engine's page buffer ([`SERVER_BUFFER_PAGES`], LRU) plays
/// the server's buffer; against a server, the client's own page pool is
/// kept at its minimum so that the dual buffer is the client's cache, with
/// rights to cache four times `buffer_pages` (the default ratio). No
/// read-ahead: the paper's client faults one page at a time. No background
/// checkpoints run during a timed traversal.
pub fn options_for(strategy: Strategy, buffer_pages: usize) -> Options {
    let mut o = Options {
        cache_bytes: OBJECT_CACHE_BYTES,
        dual_buffer: cairn::DualBufferOptions {
            bytes: buffer_pages * 4096,
            strategy: strategy.dual(),
            page_share: None,
        },
        client_buffer_pages: BUFFER_PAGES_MIN,
        client_rights_max: 4 * buffer_pages,
        // OO7's strategies are the page client's dual buffer.
        arch: cairn::Arch::Page,
        ..Options::default()
    };
    o.storage.volume.buffer_frames = SERVER_BUFFER_PAGES;
    o.storage.volume.policy = Policy::Lru;
    o.storage.volume.read_ahead_pages = 1;
    // T2b changes every atomic part's page in one transaction: keep its
    // private pages in memory.
    o.storage.txn_memory_bytes = 256 << 20;
    o.storage.background = false;
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_papers() {
        let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["NOC", "EOC/LRL", "LOC/LRL", "LOC/ERL", "LOC-/ERL", "LOC+/ERL"]);
    }

    #[test]
    fn every_name_parses_back_in_any_case() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
            assert_eq!(s.name().to_lowercase().parse::<Strategy>(), Ok(s));
            assert_eq!(format!(" {s} ").parse::<Strategy>(), Ok(s));
        }
    }

    #[test]
    fn dashed_spellings_parse() {
        assert_eq!("loc-erl".parse::<Strategy>(), Ok(Strategy::LocErl));
        assert_eq!("LOC_ERL".parse::<Strategy>(), Ok(Strategy::LocErl));
        assert_eq!("eoc-lrl".parse::<Strategy>(), Ok(Strategy::EocLrl));
        assert_eq!("loc-lrl".parse::<Strategy>(), Ok(Strategy::LocLrl));
        assert_eq!("locminus-erl".parse::<Strategy>(), Ok(Strategy::LocMinusErl));
        assert_eq!("loc--erl".parse::<Strategy>(), Ok(Strategy::LocMinusErl));
        assert_eq!("locplus-erl".parse::<Strategy>(), Ok(Strategy::LocPlusErl));
        assert_eq!("loc+-erl".parse::<Strategy>(), Ok(Strategy::LocPlusErl));
        assert!("loc".parse::<Strategy>().is_err());
        assert!("eoc/erl".parse::<Strategy>().is_err());
    }

    #[test]
    fn the_buffer_size_and_strategy_reach_the_dual_buffer() {
        for s in Strategy::ALL {
            let o = options_for(s, 300);
            assert_eq!(o.dual_buffer.bytes, 300 * 4096);
            assert_eq!(o.dual_buffer.strategy.name(), s.name());
            assert_eq!(o.storage.volume.buffer_frames, SERVER_BUFFER_PAGES);
            assert_eq!(o.client_buffer_pages, BUFFER_PAGES_MIN);
            assert!(!o.storage.background);
            assert_eq!(o.cache_bytes, OBJECT_CACHE_BYTES);
        }
    }
}
