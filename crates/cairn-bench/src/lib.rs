//! The benchmark harness (issues 5 and 6): OO1, ACOB, OO7 and RPC workloads,
//! peers, reports and plots. Today: [`commit`], the group-commit benchmark, and [`refs`], the cost of
//! following a reference against the in-memory floor.

pub mod acob;
pub mod attack;
pub mod commit;
pub mod connect;
pub mod oo1;
pub mod oo7;
pub mod refs;
pub mod rpc;
