//! Readers of the space view (`Volume::view`) never wait for the volume: a
//! system action stuck in log I/O while holding the volume's mutex does not
//! stop them, and they never see an action's changes before its batch is in
//! the log and its pages are in the buffer pool — nor, if the action fails,
//! at all.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::Duration;

use cairn_storage::access::PageAccess;
use cairn_storage::io::{FaultRule, FaultyVfs, FileOp, OsVfs, Vfs};
use cairn_storage::page::{self, PageType};
use cairn_storage::volume::manifest::Manifest;
use cairn_storage::volume::{SpaceView, Volume, VolumeOptions};
use cairn_storage::wal::redo::Redo;
use cairn_storage::wal::{LogSink, Wal, WalOptions, WAL_DIR};
use cairn_storage::{Error, GroupId, PageId};

const WAIT: Duration = Duration::from_secs(20);

/// Creates a database in `db` and opens its volume with a log attached, as
/// the engine does (the log is new, so there is nothing to recover).
fn create_logged(db: &Path, opts: &VolumeOptions) -> Volume {
    Volume::create(db, opts).unwrap().close().unwrap();
    let m = Manifest::read(opts.vfs.as_ref(), db).unwrap();
    let (wal, _) = Wal::open(
        db,
        WalOptions {
            vfs: opts.vfs.clone(),
            creation_id: m.creation_id,
            proves_durable: Redo::is_checkpoint,
            ..WalOptions::default()
        },
    )
    .unwrap();
    let wal = Arc::new(wal);
    let mut vol = Volume::open(db, opts).unwrap();
    vol.attach_log(LogSink {
        wal: wal.clone(),
        redo_lsn: Arc::new(AtomicU64::new(0)),
        gate: Arc::new(RwLock::new(())),
        next_id: Arc::new(AtomicU64::new(1)),
    });
    vol.pool().set_before_write(Box::new(move |_id, lsn| wal.flush(lsn)));
    vol
}

/// The page count, whether each page is in use and its group, and whether
/// each group exists.
type Answers = (u32, Vec<(bool, Option<GroupId>)>, Vec<bool>);

/// Everything the view answers about pages below `pages` and groups up to
/// `group_id_max`.
fn answers(view: &SpaceView, pages: u32, group_id_max: u32) -> Answers {
    (
        view.page_count(),
        (0..pages)
            .map(|p| (view.is_page_in_use(PageId(p)), view.group_of_page(PageId(p))))
            .collect(),
        (0..=group_id_max).map(|g| view.group_exists(GroupId(g))).collect(),
    )
}

fn is_log_path(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == WAL_DIR)
}

/// A file system whose log writes, once armed, stop until released.
struct StallingLog {
    vfs: Arc<FaultyVfs>,
    armed: Arc<AtomicBool>,
    stalled: mpsc::Receiver<PathBuf>,
    release: mpsc::Sender<()>,
}

fn stalling_log() -> StallingLog {
    let vfs = Arc::new(FaultyVfs::new(Arc::new(OsVfs)));
    let armed = Arc::new(AtomicBool::new(false));
    let (stalled_tx, stalled) = mpsc::channel::<PathBuf>();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let armed_in_rule = armed.clone();
    let rule: Arc<FaultRule> = Arc::new(move |op, path, _n| {
        if op == FileOp::Write && is_log_path(path) && armed_in_rule.swap(false, Ordering::SeqCst) {
            let _ = stalled_tx.send(path.to_path_buf());
            let _ = release_rx.lock().unwrap().recv_timeout(WAIT);
        }
        false
    });
    vfs.set_rule(Some(rule));
    StallingLog {
        vfs,
        armed,
        stalled,
        release,
    }
}

#[test]
fn a_reader_answers_while_an_action_is_stuck_in_log_io() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let stall = stalling_log();
    let opts = VolumeOptions {
        vfs: stall.vfs.clone() as Arc<dyn Vfs>,
        buffer_frames: 256,
        ..VolumeOptions::default()
    };
    let mut vol = create_logged(&db, &opts);
    let parts = vol.create_group("parts").unwrap();
    let first = vol.allocate(parts, None, PageType::Slotted).unwrap();
    let view = vol.view();
    let next_group = GroupId(vol.header().next_group_id);
    let before = answers(&view, vol.page_count() + 64, next_group.0 + 1);
    let vol = Arc::new(Mutex::new(vol));

    // The writer holds the volume's mutex (as the engine does) for a group
    // creation whose log write stalls.
    stall.armed.store(true, Ordering::SeqCst);
    let writer = {
        let vol = vol.clone();
        thread::spawn(move || {
            let mut v = vol.lock().unwrap();
            let g = v.create_group("late")?;
            let p = v.allocate(g, None, PageType::Slotted)?;
            Ok::<_, Error>((g, p))
        })
    };
    stall.stalled.recv_timeout(WAIT).expect("the log write stalls");
    assert!(vol.try_lock().is_err(), "the action holds the volume's mutex");

    // A reader, on a thread of its own so that blocking fails the test
    // instead of hanging it.
    let (done_tx, done_rx) = mpsc::channel();
    let reader = {
        let view = view.clone();
        let pages = before.1.len() as u32;
        thread::spawn(move || {
            let seen = answers(&view, pages, next_group.0 + 1);
            let _ = done_tx.send((seen, view.is_page_in_use(first)));
        })
    };
    let answered = done_rx.recv_timeout(Duration::from_secs(5));
    stall.release.send(()).unwrap();
    let (seen, first_in_use) = answered.expect("the reader answered while the action was stuck");
    reader.join().unwrap();
    assert_eq!(seen, before, "the stuck action is not visible before it is logged");
    assert!(first_in_use);

    let (g, p) = writer.join().unwrap().unwrap();
    assert_eq!(g, next_group);
    assert!(view.group_exists(g), "visible once the action is over");
    assert!(view.is_page_in_use(p));
    assert_eq!(view.group_of_page(p), Some(g));
    let v = vol.lock().unwrap();
    assert_eq!(view.page_count(), v.page_count());
    v.check_invariants();
}

#[test]
fn a_failed_action_never_reaches_the_view() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let vfs = Arc::new(FaultyVfs::new(Arc::new(OsVfs)));
    let opts = VolumeOptions {
        vfs: vfs.clone() as Arc<dyn Vfs>,
        buffer_frames: 256,
        ..VolumeOptions::default()
    };
    let mut vol = create_logged(&db, &opts);
    let parts = vol.create_group("parts").unwrap();
    vol.allocate(parts, None, PageType::Slotted).unwrap();
    let view = vol.view();
    let next_group = GroupId(vol.header().next_group_id);
    let before = answers(&view, vol.page_count() + 64, next_group.0 + 1);

    // The log write of a group creation fails: the volume is poisoned, and
    // its in-memory state has run ahead of the pages.
    let fail_log: Arc<FaultRule> = Arc::new(|op, path, _| op == FileOp::Write && is_log_path(path));
    vfs.set_rule(Some(fail_log));
    assert!(vol.create_group("late").is_err());
    assert!(vol.group_name(next_group).is_some(), "the volume's own state ran ahead");
    assert!(matches!(
        vol.allocate(parts, None, PageType::Slotted),
        Err(Error::Poisoned(_))
    ));
    assert_eq!(answers(&view, before.1.len() as u32, next_group.0 + 1), before);
    assert!(!view.group_exists(next_group));
    view.check_invariants();
    vol.check_invariants();
}

#[test]
fn a_reader_never_sees_a_page_in_use_before_its_image_is_in_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let opts = VolumeOptions {
        buffer_frames: 512,
        extent_pages: 8,
        ..VolumeOptions::default()
    };
    let mut vol = create_logged(&db, &opts);
    let view = vol.view();
    let pool = vol.pool_arc();
    let done = Arc::new(AtomicBool::new(false));

    // Readers sweep every page the view shows, reading those in use from
    // the buffer pool, while the writer only allocates: a page once in use
    // stays in use in the same group, the page count never shrinks, and a
    // page in use is never the free page it was before its action.
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (view, pool, done) = (view.clone(), pool.clone(), done.clone());
            thread::spawn(move || {
                let mut owner: Vec<Option<GroupId>> = Vec::new();
                let mut page_count = 0;
                let mut sweeps = 0u64;
                while !done.load(Ordering::SeqCst) || sweeps == 0 {
                    let pc = view.page_count();
                    assert!(pc >= page_count, "the page count shrank from {page_count} to {pc}");
                    page_count = pc;
                    owner.resize(pc as usize, None);
                    for p in 0..pc {
                        let id = PageId(p);
                        if !view.is_page_in_use(id) {
                            assert!(owner[p as usize].is_none(), "page {p} was in use and is no longer");
                            continue;
                        }
                        let g = view.group_of_page(id);
                        assert!(g.is_some(), "page {p} is in use in no group");
                        assert!(owner[p as usize].is_none_or(|o| Some(o) == g), "page {p} changed group");
                        owner[p as usize] = g;
                        let ty = pool
                            .read(id)
                            .map(|b| page::page_type(&b))
                            .unwrap_or_else(|e| panic!("page {p} is in use but cannot be read: {e}"));
                        assert!(
                            ty.is_some() && ty != Some(PageType::Free),
                            "page {p} is in use but the pool holds {ty:?}"
                        );
                    }
                    sweeps += 1;
                }
                sweeps
            })
        })
        .collect();

    let mut groups = vec![GroupId::DEFAULT];
    for i in 0..1500u32 {
        if i % 300 == 0 {
            groups.push(vol.create_group(&format!("g{i}")).unwrap());
        }
        let g = groups[(i as usize * 7) % groups.len()];
        vol.allocate(g, None, PageType::Slotted).unwrap();
    }
    done.store(true, Ordering::SeqCst);
    for r in readers {
        assert!(r.join().expect("a reader saw a wrong state") > 0);
    }
    vol.check_invariants();
}
