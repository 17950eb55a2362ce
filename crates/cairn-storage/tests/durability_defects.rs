//! Regression tests for the defects the durability review found (issue 10),
//! one test named after each. The log-level ones (a hole in the unsynced
//! tail, a foreign log, segment names near `u64::MAX`) are in
//! `src/wal/tests.rs`; the deferred-free one is in `src/txn/tests.rs`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cairn_storage::check::check_database;
use cairn_storage::io::{FaultyVfs, FileLock, FileOp, OsVfs, StorageFile, Vfs};
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid};

fn opts_with(vfs: Arc<dyn Vfs>, txn_memory_bytes: usize) -> DbOptions {
    DbOptions {
        volume: VolumeOptions {
            buffer_frames: 64,
            vfs,
            ..VolumeOptions::default()
        },
        background: false,
        txn_memory_bytes,
        ..DbOptions::default()
    }
}

fn os_opts() -> DbOptions {
    opts_with(Arc::new(OsVfs), 64 << 20)
}

fn is_spill(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "spill")
}

fn is_log(p: &Path) -> bool {
    p.components().any(|c| c.as_os_str() == "wal")
}

/// Defect 1: once the COMMIT record is durable the outcome is decided. A
/// failure while installing the pages (here: reading a spilled private page
/// back) must not roll the transaction back — that would log FREE for pages
/// the durable commit wrote — but poison the database, and reopening must
/// show the commit in full.
#[test]
fn a_commit_that_fails_after_its_commit_record_is_durable_is_never_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let faulty = Arc::new(FaultyVfs::new(Arc::new(OsVfs)));
    // Four pages of private memory: the transaction below spills.
    let db = Db::create(&path, &opts_with(faulty.clone(), 4 * 4096)).unwrap();
    let mut t = db.begin().unwrap();
    let mut objects: Vec<(Oid, Vec<u8>)> = Vec::new();
    for i in 0..24u32 {
        let data = vec![i as u8 + 1; 3000];
        objects.push((t.create(GroupId::DEFAULT, &data).unwrap(), data));
    }
    // From the commit's log fsync on, every spill read fails.
    let log_synced = Arc::new(AtomicBool::new(false));
    let flag = log_synced.clone();
    faulty.set_rule(Some(Arc::new(move |op, p: &Path, _n| {
        if op == FileOp::Sync && is_log(p) {
            flag.store(true, Ordering::SeqCst);
        }
        op == FileOp::Read && is_spill(p) && flag.load(Ordering::SeqCst)
    })));
    let err = t.commit().unwrap_err();
    assert!(
        log_synced.load(Ordering::SeqCst),
        "the fault came after the COMMIT was durable: {err}"
    );
    assert!(
        cairn_storage::txn::poisoned_reason(&db).is_some(),
        "a decided commit that failed poisons the database"
    );
    assert!(matches!(db.begin(), Err(Error::Poisoned(_))));
    faulty.set_rule(None);
    drop(db);

    let db = Db::open(&path, &os_opts()).unwrap();
    let mut t = db.begin().unwrap();
    for (oid, data) in &objects {
        assert_eq!(&t.read(*oid).unwrap(), data, "{oid} was committed durably");
    }
    t.commit().unwrap();
    db.close().unwrap();
    let report = check_database(&path, &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// Defect 2: a second opener — `cairn check`, `inspect`, another process —
/// must never run recovery against a live database.
#[test]
fn a_second_opener_of_a_live_database_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::create(&path, &os_opts()).unwrap();
    let mut t = db.begin().unwrap();
    let oid = t.create(GroupId::DEFAULT, b"live").unwrap();
    t.commit().unwrap();
    match Db::open(&path, &os_opts()) {
        Err(Error::InUse { path: p, holder }) => {
            assert_eq!(p, path);
            assert_eq!(holder, format!("process {}", std::process::id()));
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    let report = check_database(&path, &VolumeOptions::default());
    assert!(
        report.problems.iter().any(|p| p.message.contains("in use by process")),
        "{:?}",
        report.problems
    );
    drop(db);
    let db = Db::open(&path, &os_opts()).unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(oid).unwrap(), b"live");
    t.commit().unwrap();
}

/// A file system that records the directories it fsynced.
#[derive(Debug, Default)]
struct DirSyncs {
    synced: Mutex<Vec<PathBuf>>,
}

impl Vfs for DirSyncs {
    fn open(&self, path: &Path, create: bool) -> std::io::Result<Arc<dyn StorageFile>> {
        OsVfs.open(path, create)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.synced.lock().unwrap().push(dir.to_path_buf());
        OsVfs.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        OsVfs.create_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        OsVfs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        OsVfs.remove_file(path)
    }
    fn exists(&self, path: &Path) -> bool {
        OsVfs.exists(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        OsVfs.list_dir(dir)
    }
    fn lock_exclusive(&self, path: &Path, note: &str) -> std::io::Result<Result<Box<dyn FileLock>, String>> {
        OsVfs.lock_exclusive(path, note)
    }
}

/// Defect 5: a new database directory (and any parent created with it) is
/// fsynced into the directory that holds it, or a power loss could remove a
/// database whose commits were acknowledged.
#[test]
fn creating_a_database_fsyncs_every_new_directory_into_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a").join("b").join("db");
    let vfs = Arc::new(DirSyncs::default());
    let db = Db::create(&path, &opts_with(vfs.clone(), 64 << 20)).unwrap();
    db.close().unwrap();
    let synced = vfs.synced.lock().unwrap().clone();
    for parent in [
        dir.path().to_path_buf(),
        dir.path().join("a"),
        dir.path().join("a").join("b"),
        path.clone(),
    ] {
        assert!(
            synced.contains(&parent),
            "{} was never fsynced: {synced:?}",
            parent.display()
        );
    }
}

/// Defect 6: after an error in the middle of a change (here a spill write
/// failing while a large object is being written), the transaction is
/// doomed: every call but abort refuses, so a later commit can never be
/// partial.
#[test]
fn a_transaction_is_doomed_after_an_error_in_the_middle_of_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let faulty = Arc::new(FaultyVfs::new(Arc::new(OsVfs)));
    let db = Db::create(&path, &opts_with(faulty.clone(), 4 * 4096)).unwrap();
    let mut t = db.begin().unwrap();
    let kept = t.create(GroupId::DEFAULT, &[1u8; 100]).unwrap();
    faulty.set_rule(Some(Arc::new(|op, p: &Path, _n| op == FileOp::Write && is_spill(p))));
    let err = t.create(GroupId::DEFAULT, &vec![7u8; 200_000]).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    faulty.set_rule(None);
    assert!(t.is_doomed());
    for result in [
        t.read(kept).map(|_| ()),
        t.create(GroupId::DEFAULT, b"more").map(|_| ()),
        t.update(kept, b"changed").map(|_| ()),
    ] {
        assert!(matches!(result, Err(Error::TxnDoomed { .. })), "{result:?}");
    }
    let pages_before = db.groups()[0].pages_used;
    match t.commit() {
        Err(Error::TxnDoomed { cause, .. }) => assert!(cause.contains("spill"), "{cause}"),
        other => panic!("expected TxnDoomed, got {other:?}"),
    }
    // The failed commit rolled back: its pages are given back.
    assert!(db.groups()[0].pages_used < pages_before);
    let mut t = db.begin().unwrap();
    assert!(matches!(t.read(kept), Err(Error::NotFound { .. })));
    t.commit().unwrap();
    db.close().unwrap();
    let report = check_database(&path, &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// Defect 6, the other half: an error that changed nothing (a missing
/// object) leaves the transaction usable.
#[test]
fn an_error_that_changed_nothing_leaves_the_transaction_usable() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(&dir.path().join("db"), &os_opts()).unwrap();
    let mut t = db.begin().unwrap();
    let a = t.create(GroupId::DEFAULT, b"a").unwrap();
    t.delete(a).unwrap();
    assert!(matches!(t.read(a), Err(Error::NotFound { .. })));
    assert!(!t.is_doomed());
    let b = t.create(GroupId::DEFAULT, b"b").unwrap();
    t.commit().unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(b).unwrap(), b"b");
}

/// Defect 6, the deadlock case: a victim may be in the middle of a
/// multi-page change (a B+-tree split, freeing a large object's pages); it
/// must abort to give its locks up, so it is doomed.
#[test]
fn a_deadlock_victim_is_doomed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::create(&dir.path().join("db"), &os_opts()).unwrap());
    let g1 = db.create_group("one").unwrap();
    let g2 = db.create_group("two").unwrap();
    let mut t = db.begin().unwrap();
    let a = t.create(g1, b"a").unwrap();
    let b = t.create(g2, b"b").unwrap();
    t.commit().unwrap();
    assert_ne!(a.page, b.page);

    // Each side, if it is the victim, must find itself doomed and abort,
    // which lets the other finish.
    fn side(mut t: cairn_storage::Txn, first: Oid, second: Oid, barrier: Arc<std::sync::Barrier>) -> bool {
        t.update(first, b"first").unwrap();
        barrier.wait();
        match t.update(second, b"second") {
            Ok(()) => {
                t.commit().unwrap();
                false
            }
            Err(Error::Deadlock { .. }) => {
                assert!(t.is_doomed());
                assert!(matches!(t.read(first), Err(Error::TxnDoomed { .. })));
                assert!(matches!(t.create(GroupId::DEFAULT, b"x"), Err(Error::TxnDoomed { .. })));
                t.abort().unwrap();
                true
            }
            Err(e) => panic!("expected a deadlock or success, got {e}"),
        }
    }
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let (t1, t2) = (db.begin().unwrap(), db.begin().unwrap());
    let b1 = barrier.clone();
    let h1 = std::thread::spawn(move || side(t1, a, b, b1));
    let h2 = std::thread::spawn(move || side(t2, b, a, barrier));
    let victims = u32::from(h1.join().unwrap()) + u32::from(h2.join().unwrap());
    assert_eq!(victims, 1, "exactly one side is the deadlock victim");
}
