//! Recovery: torn pages rebuilt from full images in the log, recovery that is
//! itself interrupted, uncommitted allocations given back, and the WAL rule
//! (no page reaches the volume before the log describing it is durable),
//! checked by watching every write the engine makes.

mod common;

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_storage::check::check_database;
use cairn_storage::io::{OsVfs, StorageFile, Vfs};
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, GroupId, Oid, PageId};
use common::opts;

fn tear(path: &Path, page: PageId) {
    let f = OpenOptions::new().write(true).open(path.join("volume.cairn")).unwrap();
    // The second half of the page never made it: zeros, as after a torn write.
    f.write_all_at(&[0u8; 2048], u64::from(page.0) * 4096 + 2048).unwrap();
}

#[test]
fn a_torn_page_is_rebuilt_from_the_full_image_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::create(&path, &opts()).unwrap();
    let mut t = db.begin().unwrap();
    let a = t.create(GroupId::DEFAULT, &[1u8; 300]).unwrap();
    let b = t.create(GroupId::DEFAULT, &[2u8; 300]).unwrap();
    t.commit().unwrap();
    db.checkpoint().unwrap();
    // The page's first change since the checkpoint logs a full image.
    let mut t = db.begin().unwrap();
    t.update(a, &[3u8; 500]).unwrap();
    t.commit().unwrap();
    // Write the page out (as the background writer would), then crash.
    db.evict_cache().unwrap();
    drop(db);
    tear(&path, a.page);

    let db = Db::open(&path, &opts()).unwrap();
    assert!(db.recovery().rebuilt.contains(&a.page), "{:?}", db.recovery());
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(a).unwrap(), vec![3u8; 500]);
    assert_eq!(t.read(b).unwrap(), vec![2u8; 300]);
    t.commit().unwrap();
    db.close().unwrap();
    assert!(check_database(&path, &VolumeOptions::default()).is_ok());
}

#[test]
fn a_page_damaged_outside_the_log_is_reported_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::create(&path, &opts()).unwrap();
    let g = db.create_group("cold").unwrap();
    let mut t = db.begin().unwrap();
    let cold = t.create(g, &[7u8; 300]).unwrap();
    t.commit().unwrap();
    db.close().unwrap();
    tear(&path, cold.page);
    let db = Db::open(&path, &opts()).unwrap();
    let mut t = db.begin().unwrap();
    let err = t.read(cold).unwrap_err();
    assert!(
        matches!(err, cairn_storage::Error::Corrupt { page, .. } if page == cold.page),
        "{err}"
    );
    drop(t);
    drop(db);
    let report = check_database(&path, &VolumeOptions::default());
    assert!(
        report.problems.iter().any(|p| p.page == Some(cold.page)),
        "{:?}",
        report.problems
    );
}

#[test]
fn recovery_interrupted_and_run_again_gives_the_same_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::create(&path, &opts()).unwrap();
    let mut objs: Vec<(Oid, Vec<u8>)> = Vec::new();
    for i in 0..30u32 {
        let mut t = db.begin().unwrap();
        let data = vec![i as u8; 100 + (i as usize * 97) % 3000];
        let oid = t.create(GroupId::DEFAULT, &data).unwrap();
        if i % 3 == 0 && !objs.is_empty() {
            let (o, _) = objs[(i as usize * 7) % objs.len()];
            let upd = vec![0xF0 | (i as u8 & 0xF); 700];
            t.update(o, &upd).unwrap();
            objs.iter_mut().find(|(x, _)| *x == o).unwrap().1 = upd;
        }
        t.commit().unwrap();
        objs.push((oid, data));
    }
    // An uncommitted transaction that allocated pages when the crash came.
    let mut t = db.begin().unwrap();
    t.create(GroupId::DEFAULT, &vec![9u8; 50_000]).unwrap();
    std::mem::forget(t);
    let pages_used = db.groups()[0].pages_used;
    db.crash();

    // A recovery that redid everything and then "crashed" before finishing.
    let manifest = cairn_storage::volume::manifest::Manifest::read(&cairn_storage::io::OsVfs, &path).unwrap();
    let wal_opts = cairn_storage::wal::WalOptions {
        creation_id: manifest.creation_id,
        ..Default::default()
    };
    let (wal, _) = cairn_storage::wal::Wal::open(&path, wal_opts).unwrap();
    let first = cairn_storage::recovery::run(&path, &VolumeOptions::default(), &Arc::new(wal), None).unwrap();
    assert!(first.applied > 0);
    assert!(
        !first.to_free.is_empty(),
        "the uncommitted allocation is to be given back"
    );

    let db = Db::open(&path, &opts()).unwrap();
    // Full images are applied again whatever the page says (a cached page
    // may only look current), and the diffs after them with them; the second
    // run sees the same records and finds no page damaged.
    let second = db.recovery();
    assert_eq!(
        (second.applied + second.skipped, second.rebuilt.len()),
        (first.applied + first.skipped, 0),
        "{second:?} after {first:?}"
    );
    assert!(
        db.groups()[0].pages_used < pages_used,
        "the uncommitted large object's pages were given back"
    );
    let mut t = db.begin().unwrap();
    for (oid, data) in &objs {
        assert_eq!(&t.read(*oid).unwrap(), data);
    }
    t.commit().unwrap();
    db.close().unwrap();
    let report = check_database(&path, &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// A file system that checks the WAL rule on every volume write: the page's
/// LSN must not be past what the log has made durable.
#[derive(Debug, Default)]
struct WalRuleVfs {
    /// Bytes of the (single) log segment at its last fsync.
    synced_log_len: Arc<AtomicU64>,
    violations: Arc<Mutex<Vec<String>>>,
    volume_writes: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Watched {
    inner: Arc<dyn StorageFile>,
    path: PathBuf,
    synced_log_len: Arc<AtomicU64>,
    violations: Arc<Mutex<Vec<String>>>,
    volume_writes: Arc<AtomicU64>,
}

/// The first segment starts at LSN 0, after its header.
const SEGMENT_HEADER: u64 = cairn_storage::wal::SEGMENT_HEADER_SIZE as u64;

impl StorageFile for Watched {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.path.ends_with("volume.cairn") && buf.len() == 4096 {
            self.volume_writes.fetch_add(1, Ordering::Relaxed);
            let lsn = u64::from_le_bytes(buf[8..16].try_into().unwrap());
            let durable = self
                .synced_log_len
                .load(Ordering::SeqCst)
                .saturating_sub(SEGMENT_HEADER);
            if lsn > durable {
                self.violations.lock().unwrap().push(format!(
                    "page {} written with LSN {lsn}, log durable to {durable}",
                    offset / 4096
                ));
            }
        }
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()?;
        if self.path.extension().is_some_and(|e| e == "log") {
            self.synced_log_len.store(self.inner.len()?, Ordering::SeqCst);
        }
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl Vfs for WalRuleVfs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let inner = OsVfs.open(path, create)?;
        if path.extension().is_some_and(|e| e == "log") && !create {
            self.synced_log_len.store(inner.len()?, Ordering::SeqCst);
        }
        Ok(Arc::new(Watched {
            inner,
            path: path.to_path_buf(),
            synced_log_len: self.synced_log_len.clone(),
            violations: self.violations.clone(),
            volume_writes: self.volume_writes.clone(),
        }))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsVfs.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsVfs.create_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsVfs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        OsVfs.remove_file(path)
    }
    fn lock_exclusive(
        &self,
        path: &Path,
        note: &str,
    ) -> io::Result<std::result::Result<Box<dyn cairn_storage::io::FileLock>, String>> {
        OsVfs.lock_exclusive(path, note)
    }
    fn exists(&self, path: &Path) -> bool {
        OsVfs.exists(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        OsVfs.list_dir(dir)
    }
}

#[test]
fn no_page_reaches_the_volume_before_its_log_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let vfs = Arc::new(WalRuleVfs::default());
    let opts = DbOptions {
        // A tiny pool: allocation's system pages and committed pages are
        // evicted (written) all the time, often before the next commit's fsync.
        volume: VolumeOptions {
            buffer_frames: 8,
            vfs: vfs.clone(),
            ..VolumeOptions::default()
        },
        // One segment, so log offsets map to LSNs simply.
        wal_segment_bytes: 1 << 30,
        background: false,
        ..DbOptions::default()
    };
    Db::create(&path, &opts).unwrap().close().unwrap();
    let db = Db::open(&path, &opts).unwrap();
    let g = db.create_group("g").unwrap();
    for i in 0..60u32 {
        let mut t = db.begin().unwrap();
        for j in 0..5u32 {
            t.create(g, &vec![(i + j) as u8; 200 + (j as usize * 300)]).unwrap();
        }
        if i % 4 == 3 {
            t.abort().unwrap();
        } else {
            t.commit().unwrap();
        }
    }
    db.close().unwrap();
    let v = vfs.violations.lock().unwrap();
    assert!(
        vfs.volume_writes.load(Ordering::Relaxed) > 50,
        "the test must make the engine write pages"
    );
    assert!(v.is_empty(), "WAL rule broken: {:?}", &v[..v.len().min(5)]);
}
