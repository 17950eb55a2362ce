//! Large objects through the store on a real volume file: streaming a big
//! object in 1 MiB appends with bounded memory, sampled range reads, range
//! writes, truncation, and a clean check. `CAIRN_LARGE_OBJECT_MIB` sets the
//! size (default 64; 1024 for the 1 GiB run).

use cairn_storage::check::check_database;
use cairn_storage::store::Store;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::GroupId;

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
        .unwrap_or(64);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let opts = VolumeOptions {
        buffer_frames: 256,
        extent_pages: 64,
        ..VolumeOptions::default()
    };
    let mut s = Store::create_database(&db, &opts).unwrap();
    let g = s.create_group("blobs").unwrap();
    let oid = s.create(g, &chunk(0)).unwrap();
    assert!(s.is_large(oid).unwrap());
    for i in 1..mib {
        s.append(oid, &chunk(i)).unwrap();
    }
    let len = mib << 20;
    assert_eq!(s.len(oid).unwrap(), len);
    s.close().unwrap();

    let mut s = Store::open(&db, &opts).unwrap();
    let mut buf = vec![0u8; 10_000];
    for k in 0..64u64 {
        let at = (k * 7_777_777) % (len - buf.len() as u64);
        s.read_range(oid, at, &mut buf).unwrap();
        for (n, b) in buf.iter().enumerate() {
            assert_eq!(*b, expected_byte(at + n as u64), "byte {}", at + n as u64);
        }
    }
    // Overwrite across a page boundary in the middle; read it back.
    let mid = len / 2 - 3;
    s.write_range(oid, mid, b"hello, large world").unwrap();
    let mut got = [0u8; 18];
    s.read_range(oid, mid, &mut got).unwrap();
    assert_eq!(&got, b"hello, large world");
    assert!(
        s.read_range(oid, len - 5, &mut [0u8; 10]).is_err(),
        "a range past the end is refused"
    );

    // Truncation gives pages back to the group.
    let used_before = s
        .volume()
        .groups()
        .iter()
        .find(|x| x.id == g)
        .unwrap()
        .pages_used;
    s.truncate(oid, 5000).unwrap();
    let used_after = s
        .volume()
        .groups()
        .iter()
        .find(|x| x.id == g)
        .unwrap()
        .pages_used;
    assert!(
        used_after < used_before / 100,
        "{used_before} -> {used_after}"
    );
    let mut head = vec![0u8; 5000];
    s.read_range(oid, 0, &mut head).unwrap();
    assert!(head
        .iter()
        .enumerate()
        .all(|(n, b)| *b == expected_byte(n as u64)));
    let other = s.create(GroupId::DEFAULT, b"small").unwrap();
    assert_eq!(s.read(other).unwrap(), b"small");
    s.close().unwrap();
    let report = check_database(&db, &opts);
    assert!(report.is_ok(), "{:?}", report.problems);
}
