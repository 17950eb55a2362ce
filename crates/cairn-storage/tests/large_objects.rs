//! Large objects through transactions on a real volume: streaming a big
//! object in 1 MiB appends (a transaction larger than its memory budget
//! spills), sampled range reads, range writes, truncation, and a clean check.
//! `CAIRN_LARGE_OBJECT_MIB` sets the size (default 32; 1024 for the 1 GiB run).

use cairn_storage::check::check_database;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, GroupId};

fn chunk(i: u64) -> Vec<u8> {
    let mut v = vec![0u8; 1 << 20];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i as usize * 7 + j / 4096) as u8;
    }
    v
}

fn expected_byte(offset: u64) -> u8 {
    let i = offset >> 20;
    let j = (offset & ((1 << 20) - 1)) as usize;
    (i as usize * 7 + j / 4096) as u8
}

#[test]
fn a_large_object_streams_in_and_reads_back_in_ranges() {
    let mib: u64 = std::env::var("CAIRN_LARGE_OBJECT_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let opts = DbOptions {
        volume: VolumeOptions {
            buffer_frames: 256,
            extent_pages: 64,
            ..VolumeOptions::default()
        },
        // 4 MiB of private pages, so an 8 MiB transaction spills.
        txn_memory_bytes: 4 << 20,
        checkpoint_log_bytes: 16 << 20,
        ..DbOptions::default()
    };
    let db = Db::create(&path, &opts).unwrap();
    let g = db.create_group("blobs").unwrap();
    let mut t = db.begin().unwrap();
    let oid = t.create(g, &chunk(0)).unwrap();
    assert!(t.is_large(oid).unwrap());
    for i in 1..mib {
        t.append(oid, &chunk(i)).unwrap();
        if i % 8 == 0 {
            t.commit().unwrap();
            t = db.begin().unwrap();
        }
    }
    t.commit().unwrap();
    assert!(
        db.stats().pages_spilled > 0,
        "an 8 MiB transaction spills past a 4 MiB budget"
    );
    let len = mib << 20;
    db.close().unwrap();

    let db = Db::open(&path, &opts).unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.len(oid).unwrap(), len);
    let mut buf = vec![0u8; 10_000];
    for k in 0..64u64 {
        let at = (k * 7_777_777) % (len - buf.len() as u64);
        t.read_range(oid, at, &mut buf).unwrap();
        for (n, b) in buf.iter().enumerate() {
            assert_eq!(*b, expected_byte(at + n as u64), "byte {}", at + n as u64);
        }
    }
    // Overwrite across a page boundary in the middle; read it back.
    let mid = len / 2 - 3;
    t.write_range(oid, mid, b"hello, large world").unwrap();
    let mut got = [0u8; 18];
    t.read_range(oid, mid, &mut got).unwrap();
    assert_eq!(&got, b"hello, large world");
    assert!(
        t.read_range(oid, len - 5, &mut [0u8; 10]).is_err(),
        "a range past the end is refused"
    );
    t.commit().unwrap();

    // Truncation gives pages back to the group.
    let used = |db: &Db| db.groups().iter().find(|x| x.id == g).unwrap().pages_used;
    let used_before = used(&db);
    let mut t = db.begin().unwrap();
    t.truncate(oid, 5000).unwrap();
    t.commit().unwrap();
    let used_after = used(&db);
    assert!(used_after < used_before / 100, "{used_before} -> {used_after}");
    let mut t = db.begin().unwrap();
    let mut head = vec![0u8; 5000];
    t.read_range(oid, 0, &mut head).unwrap();
    assert!(head.iter().enumerate().all(|(n, b)| *b == expected_byte(n as u64)));
    let other = t.create(GroupId::DEFAULT, b"small").unwrap();
    assert_eq!(t.read(other).unwrap(), b"small");
    t.commit().unwrap();
    db.close().unwrap();
    let report = check_database(&path, &opts.volume);
    assert!(report.is_ok(), "{:?}", report.problems);
}
