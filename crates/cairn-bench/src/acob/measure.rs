//! What a run of ACOB measures: the queries, the points of a sweep, and a
//! row of results (a system at a point running a query), which the report,
//! the findings and the plots all read.

use std::collections::BTreeMap;

use super::systems::Arch;

/// A query of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Query {
    /// Every record of every object in physical order.
    Scan,
    /// 300 random objects followed depth-first to depth 6.
    RandomRead,
    /// The random read, rewriting the depth-6 records.
    RandomUpdate,
}

impl Query {
    /// The steps in the paper's order.
    pub const ALL: [Query; 3] = [Query::Scan, Query::RandomRead, Query::RandomUpdate];

    /// Its name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Query::Scan => "scan",
            Query::RandomRead => "random_read",
            Query::RandomUpdate => "random_update",
        }
    }

    /// The query named `name` in reports and JSON.
    pub fn by_name(name: &str) -> Option<Query> {
        Query::ALL.into_iter().find(|q| q.name() == name)
    }
}

/// One point of a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// The sweep it belongs to ("point" for a single run).
    pub sweep: &'static str,
    /// Clustering factor, percent.
    pub clustering: u32,
    /// Clustering region, pages.
    pub region: u32,
    /// Client buffer, pages (the server's is [`super::run::AcobRun::server_buffer_pages`]).
    pub client_buffer_pages: usize,
    /// Whether the sets are smeared.
    pub smeared: bool,
}

/// One measured (system, point, query): the time over the five sets and
/// what the client counted.
#[derive(Clone, Debug)]
pub struct Row {
    /// The system.
    pub system: Arch,
    /// The point.
    pub point: Point,
    /// The query.
    pub query: Query,
    /// Milliseconds for the step (all five sets).
    pub ms: f64,
    /// Records read and written, round trips, bytes shipped, pages shipped
    /// and revalidated, objects read under rights, callbacks; pages read
    /// from disk (embedded).
    pub counters: BTreeMap<&'static str, f64>,
}
