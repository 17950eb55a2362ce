//! Appends that commute (`txn/append.rs`): transactions that append to one
//! object hold its append lock at once and neither waits for the other;
//! a reader or writer of the object waits for all of them and sees every
//! append of a committed transaction or none; an appender reads its own
//! appends; commit applies each transaction's appends to the newest
//! record (whichever commits first), abort drops them, and what commits
//! survives a crash. A record that has no room for the growth is not
//! appended to (the caller changes it whole instead), and a moved record
//! is appended to in its moved body. Under page locking the appends are
//! kept to commit (`Txn::defer_merge`), holding no lock until then.

use std::sync::Arc;
use std::time::Duration;

use cairn_storage::check::check_database;
use cairn_storage::record::object::home_record;
use cairn_storage::txn::RecordMerge;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid};

/// The test's merge: `bytes` added at the end of the record.
#[derive(Debug)]
struct Tail(Vec<u8>);

impl RecordMerge for Tail {
    fn apply(&self, record: &[u8]) -> Result<Vec<u8>, String> {
        if record.first() == Some(&0xFF) {
            return Err("a record starting 0xFF takes no appends".into());
        }
        let mut r = record.to_vec();
        r.extend_from_slice(&self.0);
        Ok(r)
    }

    fn max_growth(&self) -> usize {
        self.0.len()
    }

    /// Bytes added at the end: an edit in place of any record it applies
    /// to (nothing overwritten).
    fn edit(&self, head: &[u8], _len: u64) -> Option<cairn_storage::txn::RecordEdit> {
        (head.first() != Some(&0xFF)).then(|| cairn_storage::txn::RecordEdit {
            writes: Vec::new(),
            append: self.0.clone(),
        })
    }
}

fn tail(b: &[u8]) -> Arc<dyn RecordMerge> {
    Arc::new(Tail(b.to_vec()))
}

/// Object locking, and lock waits that fail after `timeout` (a request
/// that must be granted at once is asserted with a short one).
fn opts(timeout: Duration) -> DbOptions {
    DbOptions {
        lock_timeout: timeout,
        background: false,
        object_locking: true,
        ..DbOptions::default()
    }
}

fn seed(db: &Db, records: &[Vec<u8>]) -> Vec<Oid> {
    let mut t = db.begin().unwrap();
    let oids = records.iter().map(|r| t.create(GroupId::DEFAULT, r).unwrap()).collect();
    t.commit().unwrap();
    oids
}

/// Crashes `db`, recovers it, and checks every page and structure of what
/// recovery left (the check reads the volume as it is: it does not redo
/// the log itself).
fn reopen_after_crash(db: Db, path: &std::path::Path, o: &DbOptions) -> Db {
    db.crash();
    Db::open(path, o).unwrap().close().unwrap();
    let report = check_database(path, &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
    Db::open(path, o).unwrap()
}

/// Joins the appending threads, checks both ways of appending were taken,
/// and crashes and recovers the database.
fn join_and_recover(
    handles: Vec<std::thread::JoinHandle<()>>,
    db: Arc<Db>,
    path: &std::path::Path,
    o: &DbOptions,
) -> Db {
    for h in handles {
        h.join().unwrap();
    }
    let st = db.stats();
    assert!(st.appends_kept > 0 && st.appends_whole > 0, "both paths taken: {st:?}");
    let db = Arc::try_unwrap(db).ok().unwrap();
    reopen_after_crash(db, path, o)
}

/// `tail` is whole tokens of `N` bytes, each once, and exactly `committed`.
fn assert_tokens<const N: usize>(what: &str, tail: &[u8], committed: &std::collections::BTreeSet<[u8; N]>) {
    assert_eq!(tail.len() % N, 0, "{what}: whole tokens");
    let found: Vec<[u8; N]> = tail.chunks(N).map(|c| c.try_into().unwrap()).collect();
    let set: std::collections::BTreeSet<[u8; N]> = found.iter().copied().collect();
    assert_eq!(set.len(), found.len(), "{what}: a token twice");
    let lost: Vec<_> = committed.difference(&set).collect();
    let extra: Vec<_> = set.difference(committed).collect();
    assert!(
        lost.is_empty() && extra.is_empty(),
        "{what}: lost {lost:?}, not committed {extra:?}"
    );
}

#[test]
fn two_appenders_of_one_object_run_at_once_and_a_reader_waits_for_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = opts(Duration::from_millis(300));
    let db = Db::create(&path, &o).unwrap();
    let oids = seed(&db, &[b"list:".to_vec(), b"other".to_vec()]);
    let (list, other) = (oids[0], oids[1]);

    let mut t1 = db.begin().unwrap();
    let mut t2 = db.begin().unwrap();
    // Neither waits for the other (a wait would time out).
    assert!(t1.merge(list, tail(b"a")).unwrap());
    assert!(t2.merge(list, tail(b"b")).unwrap());
    assert!(t1.merge(list, tail(b"c")).unwrap());
    // Another object of the page is read and written freely meanwhile.
    let mut t3 = db.begin().unwrap();
    assert_eq!(t3.read(other).unwrap(), b"other");
    t3.commit().unwrap();
    // A reader of the list waits for the appenders.
    let mut t4 = db.begin().unwrap();
    assert!(matches!(t4.read(list), Err(Error::LockTimeout { .. })));
    t4.abort().unwrap();
    // So does an appender that reads, for the other appender.
    assert!(matches!(t1.read(list), Err(Error::LockTimeout { .. })));
    // (The timed-out read dooms t1: it aborts, and its appends go.)
    assert!(t1.commit().is_err());
    t2.commit().unwrap();

    let expect = |db: &Db, want: &[u8]| {
        let mut t = db.begin().unwrap();
        assert_eq!(t.read(list).unwrap(), want);
        t.commit().unwrap();
    };
    expect(&db, b"list:b");
    let db = reopen_after_crash(db, &path, &o);
    expect(&db, b"list:b");
    db.close().unwrap();
}

#[test]
fn each_commit_applies_its_appends_to_the_newest_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = opts(Duration::from_millis(300));
    let db = Db::create(&path, &o).unwrap();
    let list = seed(&db, &[b"L".to_vec()])[0];
    for first_commits_first in [true, false] {
        let mut t1 = db.begin().unwrap();
        let mut t2 = db.begin().unwrap();
        assert!(t1.merge(list, tail(b"12")).unwrap());
        assert!(t2.merge(list, tail(b"3")).unwrap());
        assert!(t1.merge(list, tail(b"4")).unwrap());
        if first_commits_first {
            t1.commit().unwrap();
            t2.commit().unwrap();
        } else {
            t2.commit().unwrap();
            t1.commit().unwrap();
        }
    }
    let want = b"L1243" // t1 then t2
        .iter()
        .chain(b"3124") // t2 then t1
        .copied()
        .collect::<Vec<u8>>();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(list).unwrap(), want);
    t.commit().unwrap();
    let db = reopen_after_crash(db, &path, &o);
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(list).unwrap(), want);
    t.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn an_appender_reads_its_own_appends_and_a_later_rewrite_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(Duration::from_millis(300));
    let db = Db::create(&dir.path().join("db"), &o).unwrap();
    // A record shorter than a forwarding stub is stored padded.
    let oids = seed(&db, &[b"ab".to_vec(), b"xyz".to_vec()]);
    let (short, aborted) = (oids[0], oids[1]);
    let mut t = db.begin().unwrap();
    assert!(t.merge(short, tail(b"cdefghijkl")).unwrap());
    assert_eq!(t.read(short).unwrap(), b"abcdefghijkl", "grows out of its padding");
    assert!(t.merge(short, tail(b"m")).unwrap(), "appends again after reading");
    assert_eq!(t.len(short).unwrap(), 13);
    // A rewrite of what it read replaces the appends; one after it is
    // applied to the rewrite.
    let mut now = t.read(short).unwrap();
    now.reverse();
    t.update(short, &now).unwrap();
    assert!(
        !t.merge(short, tail(b"!")).unwrap(),
        "changed whole: the caller rewrites it"
    );
    t.commit().unwrap();
    // An aborted append leaves nothing.
    let mut t = db.begin().unwrap();
    assert!(t.merge(aborted, tail(b"lost")).unwrap());
    t.abort().unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(short).unwrap(), b"mlkjihgfedcba");
    assert_eq!(t.read(aborted).unwrap(), b"xyz");
    t.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn an_append_that_does_not_apply_or_fit_is_left_to_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(Duration::from_millis(300));
    let db = Db::create(&dir.path().join("db"), &o).unwrap();
    // A page nearly full (about 450 bytes left); a quarter page (about
    // 1,000 bytes) is the largest small record.
    let mut records = vec![vec![0xFFu8; 20], vec![1u8; 100]];
    records.extend((0..4).map(|i| vec![i as u8; 850]));
    let oids = seed(&db, &records);
    assert!(oids.iter().all(|x| x.page == oids[0].page));
    let mut t = db.begin().unwrap();
    assert!(!t.merge(oids[0], tail(b"x")).unwrap(), "the merge refuses the record");
    assert!(
        !t.merge(oids[2], tail(&[7u8; 200])).unwrap(),
        "past the largest small record"
    );
    assert!(!t.merge(oids[1], tail(&[7u8; 600])).unwrap(), "no room on the page");
    assert!(t.merge(oids[1], tail(&[7u8; 300])).unwrap(), "room for this one");
    assert!(!t.merge(oids[1], tail(&[7u8; 300])).unwrap(), "but not for both");
    t.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn a_moved_record_is_appended_to_in_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = opts(Duration::from_millis(300));
    let db = Db::create(&path, &o).unwrap();
    let oids = seed(&db, &(0..5).map(|i| vec![i as u8; 700]).collect::<Vec<_>>());
    assert!(oids.iter().all(|x| x.page == oids[0].page));
    // Grow two past the page's room: one's body moves, a stub stays home.
    let mut t = db.begin().unwrap();
    t.set_object_locking(false).unwrap();
    t.update(oids[0], &[9u8; 1000]).unwrap();
    t.update(oids[1], &[8u8; 1000]).unwrap();
    let image = t.page_image(oids[1].page).unwrap().unwrap();
    assert_eq!(home_record(&image, oids[1]).unwrap(), None, "moved off its page");
    t.commit().unwrap();
    let mut t1 = db.begin().unwrap();
    let mut t2 = db.begin().unwrap();
    assert!(t1.merge(oids[1], tail(b"one")).unwrap());
    assert!(t2.merge(oids[1], tail(b"two")).unwrap());
    t2.commit().unwrap();
    t1.commit().unwrap();
    let mut want = vec![8u8; 1000];
    want.extend_from_slice(b"twoone");
    let db = reopen_after_crash(db, &path, &o);
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oids[1]).unwrap(), want);
    t.commit().unwrap();
    db.close().unwrap();
}

fn rounds() -> u32 {
    std::env::var("CAIRN_APPEND_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

/// Threads append tokens to three objects of one page, abort some of
/// their transactions, and now and then read an object and rewrite it
/// whole as read (so a read that missed an append would lose it). Every
/// token of a committed transaction is in the end state exactly once and
/// no aborted one is, after a crash too. `CAIRN_APPEND_ROUNDS` scales the run (default 60).
#[test]
fn threads_appending_and_rewriting_lose_no_append() {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = opts(Duration::from_secs(60));
    let db = Arc::new(Db::create(&path, &o).unwrap());
    let lists = seed(&db, &[b"A".to_vec(), b"B".to_vec(), b"C".to_vec()]);
    const TOKEN: usize = 24;
    // Per object, the committed tokens (each token a thread and round).
    let committed: Arc<Mutex<Vec<BTreeSet<[u8; TOKEN]>>>> = Arc::new(Mutex::new(vec![BTreeSet::new(); 3]));
    let handles: Vec<_> = (0..4u8)
        .map(|me| {
            let (db, lists, committed) = (Arc::clone(&db), lists.clone(), Arc::clone(&committed));
            std::thread::spawn(move || {
                for round in 0..rounds() {
                    let r = (round as u16).to_be_bytes();
                    let mut token = [0xA0u8; TOKEN];
                    token[..3].copy_from_slice(&[me, r[0], r[1]]);
                    let mut t = db.begin().unwrap();
                    let mut mine = Vec::new();
                    let go = (|| -> cairn_storage::Result<()> {
                        // New records placed on the lists' pages (under
                        // their X locks) take the room appends need.
                        t.create_near(lists[0], &[0xEE; 150])?;
                        for (i, l) in lists.iter().enumerate() {
                            if (round + u32::from(me) + i as u32).is_multiple_of(3) {
                                continue;
                            }
                            if (round * 7 + u32::from(me)).is_multiple_of(11) {
                                // Rewritten as read: a stale read loses appends.
                                let now = t.read(*l)?;
                                t.update(*l, &now)?;
                            }
                            if !t.merge(*l, tail(&token))? {
                                // Changed whole already: so is the append.
                                let mut now = t.read(*l)?;
                                now.extend_from_slice(&token);
                                t.update(*l, &now)?;
                            }
                            mine.push(i);
                        }
                        Ok(())
                    })();
                    let abort = round % 5 == 4;
                    match go {
                        Ok(()) if !abort => {
                            // Noted before the commit's locks go, so a
                            // reader never sees a token not yet noted.
                            let mut c = committed.lock().unwrap();
                            t.commit().unwrap();
                            for i in mine {
                                assert!(c[i].insert(token));
                            }
                        }
                        Ok(()) => t.abort().unwrap(),
                        Err(Error::Deadlock { .. }) => drop(t),
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    let db = join_and_recover(handles, db, &path, &o);
    let mut t = db.begin().unwrap();
    let committed = committed.lock().unwrap();
    for (i, l) in lists.iter().enumerate() {
        let bytes = t.read(*l).unwrap();
        assert_eq!(bytes[0], b"ABC"[i]);
        assert_tokens(&format!("object {i}"), &bytes[1..], &committed[i]);
    }
    t.commit().unwrap();
    db.close().unwrap();
}

/// OO1's insert against appends, in small: threads each create records
/// near random lists (taking room on the lists' pages under page X locks)
/// and append small tokens to several random lists of many, some of
/// which grow past their page's room (moved) or past the largest small
/// record (large), now and then rewriting a list whole as read. Every
/// committed token is in the end state once, and the recovered database
/// checks clean. `CAIRN_APPEND_ROUNDS` scales it.
#[test]
fn many_lists_under_appends_creates_and_moves_check_clean_after_a_crash() {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    const LISTS: usize = 48;
    const TOKEN: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = opts(Duration::from_secs(60));
    let db = Arc::new(Db::create(&path, &o).unwrap());
    let lists = seed(&db, &(0..LISTS).map(|i| vec![i as u8; 60 + i * 7]).collect::<Vec<_>>());
    let committed: Arc<Mutex<Vec<BTreeSet<[u8; TOKEN]>>>> = Arc::new(Mutex::new(vec![BTreeSet::new(); LISTS]));
    let handles: Vec<_> = (0..4u8)
        .map(|me| {
            let (db, lists, committed) = (Arc::clone(&db), lists.clone(), Arc::clone(&committed));
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9u64 ^ u64::from(me) << 32;
                let mut next = move |n: usize| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % n as u64) as usize
                };
                for round in 0..rounds() * 2 {
                    let r = round.to_be_bytes();
                    let mut token = [0xB0u8; TOKEN];
                    token[..5].copy_from_slice(&[me, r[0], r[1], r[2], r[3]]);
                    let mut picks: Vec<usize> = (0..6).map(|_| next(LISTS)).collect();
                    picks.dedup();
                    picks.sort_unstable_by_key(|&i| (i * 31) % LISTS);
                    picks.dedup();
                    let (filler, rewrite) = (next(LISTS), next(8) == 0);
                    let mut t = db.begin().unwrap();
                    let go = (|| -> cairn_storage::Result<()> {
                        t.create_near(lists[filler], &[0xEE; 120])?;
                        t.lock_for_appends(&picks.iter().map(|&i| lists[i]).collect::<Vec<_>>())?;
                        for (k, &i) in picks.iter().enumerate() {
                            let l = lists[i];
                            if rewrite && k == 0 {
                                let now = t.read(l)?;
                                t.update(l, &now)?;
                            }
                            if !t.merge(l, tail(&token))? {
                                let mut now = t.read(l)?;
                                now.extend_from_slice(&token);
                                t.update(l, &now)?;
                            }
                        }
                        Ok(())
                    })();
                    match go {
                        Ok(()) => {
                            let mut c = committed.lock().unwrap();
                            t.commit().unwrap();
                            for &i in &picks {
                                c[i].insert(token);
                            }
                        }
                        Err(Error::Deadlock { .. }) => drop(t),
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    let db = join_and_recover(handles, db, &path, &o);
    let mut t = db.begin().unwrap();
    let committed = committed.lock().unwrap();
    for (i, l) in lists.iter().enumerate() {
        let bytes = t.read(*l).unwrap();
        let base = 60 + i * 7;
        assert_eq!(&bytes[..base], &vec![i as u8; base][..]);
        assert_tokens(&format!("list {i}"), &bytes[base..], &committed[i]);
    }
    t.commit().unwrap();
    db.close().unwrap();
}

/// Page locking (the store of the page and file clients), lock waits that
/// fail after `timeout`.
fn page_opts(timeout: Duration) -> DbOptions {
    DbOptions {
        object_locking: false,
        ..opts(timeout)
    }
}

#[test]
fn under_page_locks_appends_hold_no_lock_until_their_commit_applies_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = page_opts(Duration::from_millis(300));
    let db = Db::create(&path, &o).unwrap();
    let oids = seed(&db, &[b"list:".to_vec(), b"other".to_vec()]);
    let (list, other) = (oids[0], oids[1]);
    assert_eq!(list.page, other.page, "one page");

    let mut t1 = db.begin().unwrap();
    let mut t2 = db.begin().unwrap();
    t1.defer_merge(list, tail(b"a")).unwrap();
    t2.defer_merge(list, tail(b"b")).unwrap();
    t1.defer_merge(list, tail(b"c")).unwrap();
    assert_eq!((t1.deferred_merges(), t2.deferred_merges()), (2, 1));
    // The page is free meanwhile: another transaction changes it and
    // commits (a wait for the appenders would time out).
    let mut t3 = db.begin().unwrap();
    t3.update(other, b"OTHER").unwrap();
    t3.commit().unwrap();
    // Each commit applies its appends, in order, to the record as the
    // commits before it left it.
    t1.commit().unwrap();
    t2.commit().unwrap();
    let read = |db: &Db, oid: Oid| {
        let mut t = db.begin().unwrap();
        let r = t.read(oid).unwrap();
        t.commit().unwrap();
        r
    };
    assert_eq!(read(&db, list), b"list:acb");
    assert_eq!(read(&db, other), b"OTHER");

    // An appender reads its own appends (they are applied then, under X),
    // and appends again after.
    let mut t = db.begin().unwrap();
    t.defer_merge(list, tail(b"d")).unwrap();
    assert_eq!(t.read(list).unwrap(), b"list:acbd");
    assert_eq!(t.deferred_merges(), 0, "applied by the read");
    t.defer_merge(list, tail(b"e")).unwrap();
    assert_eq!(t.len(list).unwrap(), 10);
    t.commit().unwrap();
    assert_eq!(read(&db, list), b"list:acbde");

    // A rewrite drops the appends made before it; a deletion too; an
    // abort drops them all.
    let mut t = db.begin().unwrap();
    t.defer_merge(list, tail(b"x")).unwrap();
    t.update(list, b"new:").unwrap();
    t.defer_merge(list, tail(b"y")).unwrap();
    t.defer_merge(other, tail(b"z")).unwrap();
    t.delete(other).unwrap();
    t.commit().unwrap();
    assert_eq!(read(&db, list), b"new:y");
    let mut t = db.begin().unwrap();
    assert!(!t.exists(other).unwrap());
    t.defer_merge(list, tail(b"lost")).unwrap();
    t.abort().unwrap();

    let db = reopen_after_crash(db, &path, &o);
    assert_eq!(read(&db, list), b"new:y");
    db.close().unwrap();
}

#[test]
fn under_page_locks_an_append_that_no_longer_applies_fails_its_commit_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = page_opts(Duration::from_secs(5));
    let db = Db::create(&path, &o).unwrap();
    let oids = seed(&db, &[b"list:".to_vec(), vec![0xFF, 1], b"gone".to_vec()]);
    let (list, refuses, gone) = (oids[0], oids[1], oids[2]);

    let mut t = db.begin().unwrap();
    t.defer_merge(list, tail(b"a")).unwrap();
    t.defer_merge(refuses, tail(b"b")).unwrap();
    let err = t.commit().unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains(&refuses.to_string())),
        "{err}"
    );

    // An object deleted by another transaction before the appender's
    // commit: that commit fails, naming it.
    let mut t = db.begin().unwrap();
    t.defer_merge(list, tail(b"c")).unwrap();
    t.defer_merge(gone, tail(b"d")).unwrap();
    let mut d = db.begin().unwrap();
    d.delete(gone).unwrap();
    d.commit().unwrap();
    assert!(matches!(t.commit(), Err(Error::NotFound { oid }) if oid == gone));

    let mut t = db.begin().unwrap();
    assert_eq!(t.read(list).unwrap(), b"list:", "neither commit left anything");
    assert_eq!(t.read(refuses).unwrap(), [0xFF, 1]);
    t.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn an_append_to_a_large_record_changes_its_last_pages_not_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = page_opts(Duration::from_secs(5));
    let db = Db::create(&path, &o).unwrap();
    let big: Vec<u8> = (0..40_000u32).map(|i| i as u8 | 1).collect();
    let oids = seed(&db, std::slice::from_ref(&big));
    let list = oids[0];

    let mut t = db.begin().unwrap();
    assert!(t.is_large(list).unwrap());
    t.defer_merge(list, tail(b"one")).unwrap();
    t.defer_merge(list, tail(b"two")).unwrap();
    t.apply_deferred().unwrap();
    let changed = t.changed_pages();
    assert!(
        changed.len() <= 3,
        "an edit at the end changes the last data page, an index page and the home: {changed:?}"
    );
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    let mut want = big.clone();
    want.extend_from_slice(b"onetwo");
    assert_eq!(t.read(list).unwrap(), want);
    t.commit().unwrap();
    // A record the merge does not apply to: refused, nothing changed.
    let mut t = db.begin().unwrap();
    let mut refusing = want.clone();
    refusing[0] = 0xFF;
    t.update(list, &refusing).unwrap();
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    t.merge_whole(list, &[tail(b"x")]).unwrap_err();
    t.abort().unwrap();

    let db = reopen_after_crash(db, &path, &o);
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(list).unwrap(), refusing);
    t.commit().unwrap();
    db.close().unwrap();
}

/// How a server keeps a page client's appends (`Txn::keep_merges_on`):
/// transactions that lock pages keep appends to objects of one page at
/// object grain — IX on the page, A on each object — so two keep theirs
/// at once, a page-level reader waits for both, and each commit applies
/// its own to the record as the other's left it (and survives a crash). A
/// page's appends are kept all or none: one that does not apply, or a
/// record moved off its page, leaves the page with nothing kept.
#[test]
fn appends_kept_on_a_page_by_page_locking_transactions_run_at_once_all_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let o = page_opts(Duration::from_millis(300));
    let db = Db::create(&path, &o).unwrap();
    let mut records = vec![b"a:".to_vec(), b"b:".to_vec(), vec![0xFF; 4]];
    records.extend((0..5).map(|i| vec![i as u8; 700]));
    let oids = seed(&db, &records);
    let page = oids[0].page;
    assert!(oids.iter().all(|x| x.page == page), "one page");

    let mut t1 = db.begin().unwrap();
    let mut t2 = db.begin().unwrap();
    assert!(t1
        .keep_merges_on(page, &[(oids[0], vec![tail(b"1"), tail(b"2")])])
        .unwrap());
    assert!(t2
        .keep_merges_on(page, &[(oids[0], vec![tail(b"3")]), (oids[1], vec![tail(b"4")])])
        .unwrap());
    assert_eq!(t1.pages_changed_at_object_grain(), vec![page]);
    assert!(t1.changed_at_object_grain(page));
    let mut reader = db.begin().unwrap();
    assert!(
        reader.read(oids[1]).is_err(),
        "a page-level read waits for the appenders"
    );
    reader.abort().unwrap();

    // All or none: the 0xFF record refuses its append, so the other
    // object's is not kept either.
    let mut t3 = db.begin().unwrap();
    let both = [(oids[1], vec![tail(b"5")]), (oids[2], vec![tail(b"6")])];
    assert!(!t3.keep_merges_on(page, &both).unwrap());
    assert!(t3.pages_changed_at_object_grain().is_empty());
    assert!(matches!(
        t3.keep_merges_on(
            oids[3].page,
            &[(
                Oid {
                    page: cairn_storage::PageId(page.0 + 1),
                    ..oids[3]
                },
                vec![tail(b"7")]
            )]
        ),
        Err(Error::InvalidArgument(_))
    ));
    t3.abort().unwrap();
    t2.commit().unwrap();
    t1.commit().unwrap();

    // A record moved off the page (its body grew past the page's room):
    // appends to it are not kept here, nor its neighbours'.
    let mut t = db.begin().unwrap();
    t.update(oids[3], &[5u8; 1000]).unwrap();
    t.update(oids[4], &[6u8; 1000]).unwrap();
    let image = t.page_image(page).unwrap().unwrap();
    assert_eq!(home_record(&image, oids[4]).unwrap(), None, "moved off its page");
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    let moved = [(oids[0], vec![tail(b"8")]), (oids[4], vec![tail(b"9")])];
    assert!(!t.keep_merges_on(page, &moved).unwrap());
    t.commit().unwrap();

    let db = reopen_after_crash(db, &path, &o);
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oids[0]).unwrap(), b"a:312");
    assert_eq!(t.read(oids[1]).unwrap(), b"b:4");
    assert_eq!(t.read(oids[2]).unwrap(), vec![0xFF; 4]);
    t.commit().unwrap();
    db.close().unwrap();
}
