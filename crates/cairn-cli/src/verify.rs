//! `cairn verify`: checks a database written by `cairn torture` against the
//! logs of commits torture acknowledged, trusting neither.
//!
//! Inputs: any number of logs (lines `committed <txid> <digest>`: one log
//! per torture process that ran at the same time as others, or one that
//! many runs appended to, or both; other lines, a last line without its
//! newline, and commit lines torn by a kill are ignored — torn ones are
//! counted on stderr), and the records of the `torture` group, read after
//! opening the database (which runs recovery). Checks, each problem one line
//! naming key, OID, transaction and log:
//!
//! - **corrupt**: every record decodes whole (header, checksum, filler, its
//!   own write-set entry — see [`crate::format`]); no key has two objects or
//!   two tombstones; every run record of `torture-runs` decodes;
//!   `cairn_storage::check::check_database` finds nothing (run after the
//!   database is closed).
//! - **lost**: for every key, the highest version acknowledged in any log
//!   is present — the object's version may be higher (a commit that was
//!   durable but killed before its line was printed), never lower — or the
//!   key has a tombstone whose version is at least that one; where the
//!   versions are equal, the record's checksum and transaction are the ones
//!   acknowledged. A key whose deletion was acknowledged has no object and
//!   the tombstone that very transaction wrote. Two acknowledgements of one
//!   version of a key with different records, or of two different deletions
//!   of a key, are lost too (at most one of them can be in the database).
//! - **partial** (atomicity): for every record, each other entry of its
//!   write set is visible: a written `(key, version)` is present at that
//!   version or later (at that version, by the same transaction) or
//!   tombstoned at that version or later; a deleted key has no object and
//!   has the tombstone that transaction wrote. No key is both live and
//!   tombstoned.
//!
//! **Many writers.** A key is changed by one process at a time — the owner
//! of its key space (see [`crate::torture`]) — and a key space passes to
//! another run only after its owner ended or died, so the versions of a key
//! rise one by one across all the logs, whichever process wrote them: the
//! union of the logs is checked with the same rules as one log. Txids are
//! each process's own numbering (two clients of one server print the same
//! txids), so "the same transaction" means the same txid *and* the same
//! write set, which every record and commit line carry.
//!
//! Tombstones are what make "absent" provable: a delete whose commit was
//! never acknowledged still left its tombstone, so an absent key without one
//! was lost, never deleted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use cairn_storage::check::check_database;
use cairn_storage::{Db, DbOptions, Error, Oid, VolumeOptions};

use crate::format::{decode, decode_run, parse_commit_line, DigestEntry, Entry, Kind, Record, DELETED};
use crate::torture::{GROUP, RUNS_GROUP};

/// What verify found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Acknowledged commits read from the log.
    pub commits: u64,
    /// Commit lines that did not parse (torn by a kill).
    pub malformed_lines: u64,
    /// Live objects found.
    pub objects: u64,
    /// Tombstones found.
    pub tombstones: u64,
    /// Run records found (torture processes that registered).
    pub runs: u64,
    /// Acknowledged writes or deletes not in the database.
    pub lost: Vec<String>,
    /// Transactions visible only in part.
    pub partial: Vec<String>,
    /// Damaged records and checker problems.
    pub corrupt: Vec<String>,
}

impl Report {
    /// True if nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.lost.is_empty() && self.partial.is_empty() && self.corrupt.is_empty()
    }

    /// The final line: `verified N commits, 0 lost, 0 partial` on success.
    pub fn summary_line(&self) -> String {
        if self.is_ok() {
            format!("verified {} commits, 0 lost, 0 partial", self.commits)
        } else {
            format!(
                "FAILED: {} commits, {} lost, {} partial, {} corrupt",
                self.commits,
                self.lost.len(),
                self.partial.len(),
                self.corrupt.len()
            )
        }
    }

    /// Every problem, one line each, prefixed by its class.
    pub fn problem_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.corrupt.iter().map(|p| format!("corrupt: {p}")));
        out.extend(self.lost.iter().map(|p| format!("lost: {p}")));
        out.extend(self.partial.iter().map(|p| format!("partial: {p}")));
        out
    }
}

/// A transaction's write set, in key order: what tells two transactions
/// with one txid apart.
fn write_set_of(entries: &[Entry]) -> Vec<Entry> {
    let mut ws = entries.to_vec();
    ws.sort_unstable_by_key(|e| e.key);
    ws
}

/// The highest acknowledged write of a key.
#[derive(Clone, Debug)]
struct Acked {
    version: u64,
    crc: u32,
    txid: u64,
    /// The log that acknowledged it (index into `Log::names`).
    log: usize,
}

/// An acknowledged deletion of a key.
#[derive(Clone, Debug)]
struct AckedDelete {
    txid: u64,
    log: usize,
    /// The deleting transaction's write set, sorted.
    write_set: Vec<Entry>,
}

/// What the logs acknowledge, together.
#[derive(Default)]
struct Log {
    names: Vec<String>,
    writes: BTreeMap<u64, Acked>,
    deletes: BTreeMap<u64, AckedDelete>,
}

impl Log {
    /// `txn N in LOG`, or `txn N` when there is one log.
    fn txn(&self, txid: u64, log: usize) -> String {
        if self.names.len() > 1 {
            format!("txn {txid} in {}", self.names[log])
        } else {
            format!("txn {txid}")
        }
    }
}

fn read_log(path: &Path, log: &mut Log, report: &mut Report) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let index = log.names.len();
    log.names.push(path.display().to_string());
    // The text after the last newline is a line the writer never finished.
    let complete = match text.rfind('\n') {
        Some(i) => &text[..i],
        None => "",
    };
    for line in complete.lines() {
        match parse_commit_line(line) {
            None => {}
            Some(Err(why)) => {
                report.malformed_lines += 1;
                eprintln!("verify: ignoring {why} in {}", path.display());
            }
            Some(Ok(c)) => {
                report.commits += 1;
                let ws: Vec<Entry> = c
                    .entries
                    .iter()
                    .map(|e| match *e {
                        DigestEntry::Write { key, version, .. } => Entry { key, version },
                        DigestEntry::Delete { key } => Entry { key, version: DELETED },
                    })
                    .collect();
                for e in c.entries {
                    match e {
                        DigestEntry::Write { key, version, crc } => {
                            let new = Acked {
                                version,
                                crc,
                                txid: c.txid,
                                log: index,
                            };
                            match log.writes.get(&key) {
                                None => {
                                    log.writes.insert(key, new);
                                }
                                Some(a) if version > a.version => {
                                    log.writes.insert(key, new);
                                }
                                Some(a) if version == a.version && crc != a.crc => {
                                    let first = log.txn(a.txid, a.log);
                                    report.lost.push(format!(
                                        "key {key:016x}: v{version} was acknowledged twice, as {first} checksum \
                                         {:08x} and as {} checksum {crc:08x} (two writers of one key: at most \
                                         one can be in the database)",
                                        a.crc,
                                        log.txn(c.txid, index)
                                    ));
                                }
                                Some(_) => {}
                            }
                        }
                        DigestEntry::Delete { key } => {
                            let new = AckedDelete {
                                txid: c.txid,
                                log: index,
                                write_set: write_set_of(&ws),
                            };
                            match log.deletes.get(&key) {
                                None => {
                                    log.deletes.insert(key, new);
                                }
                                Some(d) if d.txid != new.txid || d.write_set != new.write_set => {
                                    report.lost.push(format!(
                                        "key {key:016x}: its deletion was acknowledged twice, as {} and as {}",
                                        log.txn(d.txid, d.log),
                                        log.txn(c.txid, index)
                                    ));
                                }
                                Some(_) => {}
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The records present, by key.
#[derive(Default)]
struct Present {
    live: BTreeMap<u64, (Oid, Record)>,
    tombs: BTreeMap<u64, (Oid, Record)>,
}

/// True if two records were written by one transaction: the same txid and
/// the same write set (txids alone repeat across processes).
fn same_txn(a: &Record, b: &Record) -> bool {
    a.txid == b.txid && write_set_of(&a.write_set) == write_set_of(&b.write_set)
}

fn scan(dir: &Path, report: &mut Report) -> anyhow::Result<Present> {
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let db = Db::open(dir, &opts).with_context(|| format!("opening (recovering) {}", dir.display()))?;
    let mut present = Present::default();
    let group = match db.group(GROUP) {
        Ok(g) => Some(g),
        Err(Error::GroupNotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(group) = group {
        let mut txn = db.begin()?;
        for oid in txn.scan_all(group)? {
            let bytes = match txn.read(oid) {
                Ok(b) => b,
                Err(e) => {
                    report.corrupt.push(format!("object {oid} cannot be read: {e}"));
                    continue;
                }
            };
            let rec = match decode(&bytes) {
                Ok(r) => r,
                Err(d) => {
                    report
                        .corrupt
                        .push(format!("object {oid} is a partial/corrupt object: {d}"));
                    continue;
                }
            };
            let (map, what) = match rec.kind {
                Kind::Object => (&mut present.live, "object"),
                Kind::Tombstone => (&mut present.tombs, "tombstone"),
            };
            if let Some((other, _)) = map.get(&rec.key) {
                report
                    .corrupt
                    .push(format!("key {:016x} has two {what}s: {other} and {oid}", rec.key));
                continue;
            }
            map.insert(rec.key, (oid, rec));
        }
        txn.commit()?;
    }
    match db.group(RUNS_GROUP) {
        Ok(runs) => {
            let mut txn = db.begin()?;
            for oid in txn.scan_all(runs)? {
                match txn.read(oid).map(|b| decode_run(&b)) {
                    Ok(Ok(_)) => report.runs += 1,
                    Ok(Err(d)) => report.corrupt.push(format!("run record {oid} is damaged: {d}")),
                    Err(e) => report.corrupt.push(format!("run record {oid} cannot be read: {e}")),
                }
            }
            txn.commit()?;
        }
        Err(Error::GroupNotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    db.close()?;
    report.objects = present.live.len() as u64;
    report.tombstones = present.tombs.len() as u64;
    Ok(present)
}

fn check_lost(log: &Log, p: &Present, report: &mut Report) {
    for (&key, a) in &log.writes {
        let acked = log.txn(a.txid, a.log);
        if let Some((oid, r)) = p.live.get(&key) {
            if r.version < a.version {
                report.lost.push(format!(
                    "key {key:016x}: v{} was acknowledged ({acked}), but object {oid} has v{} (txn {})",
                    a.version, r.version, r.txid
                ));
            } else if r.version == a.version && (r.checksum != a.crc || r.txid != a.txid) {
                report.lost.push(format!(
                    "key {key:016x}: v{} was acknowledged as {acked} checksum {:08x}, but object {oid} \
                     holds a v{} by txn {} checksum {:08x}",
                    a.version, a.crc, r.version, r.txid, r.checksum
                ));
            }
        } else if let Some((oid, t)) = p.tombs.get(&key) {
            if t.version < a.version {
                report.lost.push(format!(
                    "key {key:016x}: v{} was acknowledged ({acked}), but tombstone {oid} (txn {}) deleted v{}",
                    a.version, t.txid, t.version
                ));
            }
        } else {
            report.lost.push(format!(
                "key {key:016x}: v{} was acknowledged ({acked}), but there is no object and no tombstone",
                a.version
            ));
        }
    }
    for (&key, d) in &log.deletes {
        let acked = log.txn(d.txid, d.log);
        if let Some((oid, r)) = p.live.get(&key) {
            report.lost.push(format!(
                "key {key:016x}: its deletion was acknowledged ({acked}), but object {oid} holds v{} (txn {})",
                r.version, r.txid
            ));
        }
        match p.tombs.get(&key) {
            None => report.lost.push(format!(
                "key {key:016x}: its deletion was acknowledged ({acked}), but there is no tombstone"
            )),
            Some((oid, t)) if t.txid != d.txid || write_set_of(&t.write_set) != d.write_set => {
                report.lost.push(format!(
                    "key {key:016x}: its deletion was acknowledged as {acked}, but tombstone {oid} is from \
                     another transaction (txn {})",
                    t.txid
                ))
            }
            Some(_) => {}
        }
    }
}

fn check_partial(p: &Present, report: &mut Report) {
    for (&key, (oid, _)) in &p.live {
        if let Some((toid, t)) = p.tombs.get(&key) {
            report.partial.push(format!(
                "key {key:016x} is both live (object {oid}) and deleted (tombstone {toid}, txn {})",
                t.txid
            ));
        }
    }
    for (oid, r) in p.live.values().chain(p.tombs.values()) {
        let what = match r.kind {
            Kind::Object => format!("object {oid} (key {:016x} v{}, txn {})", r.key, r.version, r.txid),
            Kind::Tombstone => format!("tombstone {oid} (key {:016x}, txn {})", r.key, r.txid),
        };
        for e in &r.write_set {
            if e.key == r.key {
                continue;
            }
            let k = e.key;
            if e.is_delete() {
                if let Some((o2, r2)) = p.live.get(&k) {
                    report.partial.push(format!(
                        "{what} deleted key {k:016x}, but object {o2} holds it at v{} (txn {})",
                        r2.version, r2.txid
                    ));
                }
                match p.tombs.get(&k) {
                    None => report
                        .partial
                        .push(format!("{what} deleted key {k:016x}, but it has no tombstone")),
                    Some((o2, t)) if !same_txn(t, r) => report.partial.push(format!(
                        "{what} deleted key {k:016x}, but its tombstone {o2} is from another transaction (txn {})",
                        t.txid
                    )),
                    Some(_) => {}
                }
                continue;
            }
            let v = e.version;
            if let Some((o2, r2)) = p.live.get(&k) {
                if r2.version < v {
                    report.partial.push(format!(
                        "{what} wrote key {k:016x} v{v}, but object {o2} has v{} (txn {})",
                        r2.version, r2.txid
                    ));
                } else if r2.version == v && !same_txn(r2, r) {
                    report.partial.push(format!(
                        "{what} wrote key {k:016x} v{v}, but object {o2} holds a v{v} by another transaction \
                         (txn {})",
                        r2.txid
                    ));
                }
            } else if let Some((o2, t)) = p.tombs.get(&k) {
                if t.version < v {
                    report.partial.push(format!(
                        "{what} wrote key {k:016x} v{v}, but tombstone {o2} (txn {}) deleted v{}",
                        t.txid, t.version
                    ));
                }
            } else {
                report.partial.push(format!(
                    "{what} wrote key {k:016x} v{v}, which is missing (no object, no tombstone)"
                ));
            }
        }
    }
}

/// Verifies the database in `dir` against the torture logs `logs`, together
/// (see the module docs).
///
/// An error means verification could not run (unreadable log, the database
/// does not open); problems found are in the report.
pub fn run(dir: &Path, logs: &[PathBuf]) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let mut log = Log::default();
    for path in logs {
        read_log(path, &mut log, &mut report)?;
    }
    let present = scan(dir, &mut report)?;
    check_lost(&log, &present, &mut report);
    check_partial(&present, &mut report);
    let check = check_database(dir, &VolumeOptions::default());
    report
        .corrupt
        .extend(check.problems.iter().map(|p| format!("check: {p}")));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{format_commit_line, DigestEntry};

    fn log_file(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        p
    }

    #[test]
    fn logs_are_read_together_and_conflicts_named() {
        let tmp = tempfile::tempdir().unwrap();
        let w = |key, version, crc| DigestEntry::Write { key, version, crc };
        // Two processes, the same txids; key 1 passes from one to the other.
        let a = log_file(
            tmp.path(),
            "a.log",
            &[
                format_commit_line(1, &[w(1, 1, 10), w(2, 1, 20)]),
                format_commit_line(2, &[w(1, 2, 11)]),
            ],
        );
        let b = log_file(
            tmp.path(),
            "b.log",
            &[
                format_commit_line(1, &[w(3, 1, 30)]),
                format_commit_line(2, &[w(1, 3, 12), DigestEntry::Delete { key: 3 }]),
            ],
        );
        let mut report = Report::default();
        let mut log = Log::default();
        read_log(&a, &mut log, &mut report).unwrap();
        read_log(&b, &mut log, &mut report).unwrap();
        assert_eq!(report.commits, 4);
        assert!(report.lost.is_empty(), "{:?}", report.lost);
        assert_eq!(log.writes[&1].version, 3);
        assert_eq!(log.writes[&1].log, 1);
        assert_eq!(log.writes[&2].version, 1);
        assert_eq!(log.deletes[&3].write_set.len(), 2);
        assert!(log.txn(2, 1).ends_with("b.log"));

        // A third process that also acknowledged v3 of key 1: two writers.
        let c = log_file(tmp.path(), "c.log", &[format_commit_line(7, &[w(1, 3, 99)])]);
        read_log(&c, &mut log, &mut report).unwrap();
        assert_eq!(report.lost.len(), 1, "{:?}", report.lost);
        assert!(report.lost[0].contains("acknowledged twice"), "{}", report.lost[0]);
        assert!(report.lost[0].contains("b.log") && report.lost[0].contains("c.log"));
        // The same lines twice (a log given twice) are no conflict.
        read_log(&b, &mut log, &mut report).unwrap();
        assert_eq!(report.lost.len(), 1);
    }
}
