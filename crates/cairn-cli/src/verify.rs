//! `cairn verify`: checks a database written by `cairn torture` against the
//! log of commits torture acknowledged, trusting neither.
//!
//! Inputs: the log (lines `committed <txid> <digest>`, from any number of
//! runs; other lines, a last line without its newline, and commit lines torn
//! by a kill are ignored — torn ones are counted on stderr), and the records
//! of the `torture` group, read after opening the database (which runs
//! recovery). Checks, each problem one line naming key, OID and transaction:
//!
//! - **corrupt**: every record decodes whole (header, checksum, filler, its
//!   own write-set entry — see [`crate::format`]); no key has two objects or
//!   two tombstones; `cairn_storage::check::check_database` finds nothing
//!   (run after the database is closed).
//! - **lost**: for every key, the highest version acknowledged is present
//!   — the object's version may be higher (a commit that was durable but
//!   killed before its line was printed), never lower — or the key has a
//!   tombstone whose version is at least that one; where the versions are
//!   equal, the record's checksum and transaction are the ones acknowledged.
//!   A key whose deletion was acknowledged has a tombstone and no object.
//! - **partial** (atomicity): for every record, each other entry of its
//!   write set is visible: a written `(key, version)` is present at that
//!   version or later (at that version, by the same transaction) or
//!   tombstoned at that version or later; a deleted key has no object and
//!   has the tombstone that transaction wrote. No key is both live and
//!   tombstoned.
//!
//! Tombstones are what make "absent" provable: a delete whose commit was
//! never acknowledged still left its tombstone, so an absent key without one
//! was lost, never deleted.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use cairn_storage::check::check_database;
use cairn_storage::{Db, DbOptions, Error, Oid, VolumeOptions};

use crate::format::{decode, parse_commit_line, DigestEntry, Kind, Record};
use crate::torture::GROUP;

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

/// The highest acknowledged write of a key.
#[derive(Clone, Copy, Debug)]
struct Acked {
    version: u64,
    crc: u32,
    txid: u64,
}

/// What the log acknowledges.
#[derive(Default)]
struct Log {
    writes: BTreeMap<u64, Acked>,
    deletes: BTreeMap<u64, u64>,
}

fn read_log(path: &Path, report: &mut Report) -> anyhow::Result<Log> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let mut log = Log::default();
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
                eprintln!("verify: ignoring {why}");
            }
            Some(Ok(c)) => {
                report.commits += 1;
                for e in c.entries {
                    match e {
                        DigestEntry::Write { key, version, crc } => {
                            let a = log.writes.entry(key).or_insert(Acked {
                                version,
                                crc,
                                txid: c.txid,
                            });
                            if version > a.version {
                                *a = Acked {
                                    version,
                                    crc,
                                    txid: c.txid,
                                };
                            }
                        }
                        DigestEntry::Delete { key } => {
                            log.deletes.insert(key, c.txid);
                        }
                    }
                }
            }
        }
    }
    Ok(log)
}

/// The records present, by key.
#[derive(Default)]
struct Present {
    live: BTreeMap<u64, (Oid, Record)>,
    tombs: BTreeMap<u64, (Oid, Record)>,
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
    db.close()?;
    report.objects = present.live.len() as u64;
    report.tombstones = present.tombs.len() as u64;
    Ok(present)
}

fn check_lost(log: &Log, p: &Present, report: &mut Report) {
    for (&key, a) in &log.writes {
        if let Some((oid, r)) = p.live.get(&key) {
            if r.version < a.version {
                report.lost.push(format!(
                    "key {key:016x}: v{} was acknowledged (txn {}), but object {oid} has v{} (txn {})",
                    a.version, a.txid, r.version, r.txid
                ));
            } else if r.version == a.version && (r.checksum != a.crc || r.txid != a.txid) {
                report.lost.push(format!(
                    "key {key:016x}: v{} was acknowledged as txn {} checksum {:08x}, but object {oid} \
                     holds a v{} by txn {} checksum {:08x}",
                    a.version, a.txid, a.crc, r.version, r.txid, r.checksum
                ));
            }
        } else if let Some((oid, t)) = p.tombs.get(&key) {
            if t.version < a.version {
                report.lost.push(format!(
                    "key {key:016x}: v{} was acknowledged (txn {}), but tombstone {oid} (txn {}) deleted v{}",
                    a.version, a.txid, t.txid, t.version
                ));
            }
        } else {
            report.lost.push(format!(
                "key {key:016x}: v{} was acknowledged (txn {}), but there is no object and no tombstone",
                a.version, a.txid
            ));
        }
    }
    for (&key, &txid) in &log.deletes {
        if let Some((oid, r)) = p.live.get(&key) {
            report.lost.push(format!(
                "key {key:016x}: its deletion was acknowledged (txn {txid}), but object {oid} holds v{} (txn {})",
                r.version, r.txid
            ));
        }
        match p.tombs.get(&key) {
            None => report.lost.push(format!(
                "key {key:016x}: its deletion was acknowledged (txn {txid}), but there is no tombstone"
            )),
            Some((oid, t)) if t.txid != txid => report.lost.push(format!(
                "key {key:016x}: its deletion was acknowledged as txn {txid}, but tombstone {oid} is from txn {}",
                t.txid
            )),
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
                    Some((o2, t)) if t.txid != r.txid => report.partial.push(format!(
                        "{what} deleted key {k:016x}, but its tombstone {o2} is from txn {}",
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
                } else if r2.version == v && r2.txid != r.txid {
                    report.partial.push(format!(
                        "{what} wrote key {k:016x} v{v}, but object {o2} holds a v{v} by txn {}",
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

/// Verifies the database in `dir` against the torture log `log`.
///
/// An error means verification could not run (unreadable log, the database
/// does not open); problems found are in the report.
pub fn run(dir: &Path, log: &Path) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let log = read_log(log, &mut report)?;
    let present = scan(dir, &mut report)?;
    check_lost(&log, &present, &mut report);
    check_partial(&present, &mut report);
    let check = check_database(dir, &VolumeOptions::default());
    report
        .corrupt
        .extend(check.problems.iter().map(|p| format!("check: {p}")));
    Ok(report)
}
