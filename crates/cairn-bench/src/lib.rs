//! The benchmark harness (issues 5 and 6): [`commit`] (group commit),
//! [`refs`] (following a reference against the in-memory floor), [`oo1`],
//! [`oo7`], [`acob`], [`rpc`], [`connect`] and [`attack`], with their peers,
//! reports and plots; [`report`] renders their `--json` documents as the
//! tables of `docs/benchmarks.md`.

pub mod acob;
pub mod attack;
pub mod commit;
pub mod connect;
pub mod oo1;
pub mod oo7;
pub mod refs;
pub mod report;
pub mod rpc;
