//! ACOB, the Altair Complex-Object Benchmark (DeWitt et al. 1990, "A study of
//! three alternative workstation-server architectures", §4–5), with the
//! targets in `docs/benchmarks.md` ("Targets"). Today: the workload
//! generator and a set stored and queried in Cairn; the systems, sweeps and
//! report of `cairn bench acob` are to come.
//!
//! The workload:
//!
//! - A **set** is 1,500 complex objects. Each is 7 records of 112 bytes
//!   forming a binary tree of depth 2 (a root, 2 interior records, 4 leaves),
//!   all 7 on one page when created: 5 objects per 4 KiB page, 300 pages per
//!   set. Five identical sets, A–E, are built. Each leaf has `left` and
//!   `right` references to 2 attached component objects (8 per object).
//! - **Clustering factor** `f` (0–100): for each attachment, with probability
//!   `f`% a random object within the clustering region (the object's page
//!   and `(region − 1) / 2` pages on each side; regions of 1, 5 and 9 pages),
//!   else any object of the set.
//! - **Smearing** (optional): a random quarter of the objects; each of their
//!   2 interior and 4 leaf records is, with probability 0.25, swapped with
//!   the corresponding record of another random object, so an object's
//!   records end up on other pages.
//! - **Queries**, the seed reset at the start of each step: *scan* (all
//!   objects of a set in physical order, breadth-first over the 7 records,
//!   components not read); *random read* (300 random objects, from each a
//!   depth-first traversal to depth 6, the root at depth 0, each step taken
//!   with probability 0.8: about 43 records, 17 of them at depth 6); *random
//!   update* (as random read, every depth-6 record read is rewritten in
//!   place, commit at the end). Steps run over sets A–E in order: build,
//!   scans, random reads, random updates.
//! - **Sweeps**: clustering factor 10–90% with client and server buffers of
//!   50 pages, smeared and not; clustering region 1, 5, 9 pages; client
//!   buffer 50–300 pages at `f` = 30% and 90%; over the embedded, page-server,
//!   object-server, file-server and adaptive systems, with the paper's
//!   findings checked as yes/no lines.
//!
//! Code map:
//!
//! | file | what it is |
//! |---|---|
//! | `generate.rs` | [`AcobConfig`], the [`Set`] (where every record lives, what every leaf references), the plans [`scan_order`], [`random_read`], [`random_update`] as lists of [`Visit`]s |
//! | `findings.rs` | the paper's findings checked on the rows as yes/no lines with their figures (only those the sweeps run can tell) |
//! | `plot.rs` | `--plot DIR`: the paper's figures as PNGs (time and round trips against the swept value, a line per system) |
//! | `run.rs` | `cairn bench acob`: the sweeps' points, each built once by the embedded engine and copied for every system, the three steps from cold caches with the seed reset, timed with the client's counters (each `--repeat N` times, the systems taking turns repeat by repeat, the median reported); the table and the JSON |
//! | `store.rs` | a set stored in Cairn (records of 106 bytes, 35 to a page, in the planned layout, placement checked) and a plan run against any architecture's transaction ([`store::AcobTxn`]), each record checked against the plan |
//! | `systems.rs` | the architectures under test over one directory (embedded, and page, object and file clients of a `cairn serve` child), buffers sized in pages, cold caches on demand |
//! | `tests.rs` | the generator's unit tests |
//!
//! Where the paper had to be interpreted (the clustering region at the ends
//! of a set, which record is the "corresponding" one when smearing, what
//! "identical" sets means, and why 43.07 records per random-read start
//! rather than the paper's 44) is written down in [`generate`]'s docs.
//!
//! Invariant: everything is a function of the configuration and the seed;
//! the same seed gives the same sets and the same visits, so every system
//! under test does the identical work and a run replays from its seed.

pub mod findings;
pub mod generate;
pub mod measure;
pub mod plot;
pub mod run;
pub mod store;
pub mod systems;

#[cfg(test)]
mod tests;

pub use generate::{
    generate_sets, random_read, random_update, scan_order, AcobConfig, AcobError, ObjectIdx, PageIdx, Place, RecordIdx,
    Set, Visit,
};
