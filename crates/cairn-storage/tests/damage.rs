//! Damage tests: a flipped byte in any page, a truncated volume, a wrong
//! header, a forwarding loop. Each gives a named error and no panic, and
//! `check` names the damaged page.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use cairn_storage::access::PageAccess;
use cairn_storage::check::check_database;
use cairn_storage::record::object::KIND_FORWARD;
use cairn_storage::record::slotted;
use cairn_storage::volume::manifest::{MANIFEST_FILE, VOLUME_FILE};
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid, PageId};

fn vopts() -> VolumeOptions {
    VolumeOptions {
        buffer_frames: 16,
        ..VolumeOptions::default()
    }
}

fn opts() -> DbOptions {
    DbOptions {
        volume: vopts(),
        background: false,
        ..DbOptions::default()
    }
}

/// Builds a database with small, moved and large objects; returns the OIDs
/// (with contents) and the OID of a moved object.
fn build(db: &Path) -> (Vec<(Oid, Vec<u8>)>, Oid) {
    let d = Db::create(db, &opts()).unwrap();
    let g = d.create_group("things").unwrap();
    let mut s = d.begin().unwrap();
    let mut objs = Vec::new();
    let first = s.create(g, &[1u8; 100]).unwrap();
    objs.push((first, vec![1u8; 100]));
    // Fill the first page so that growing `first` must move it.
    loop {
        let data = vec![objs.len() as u8; 100];
        let oid = s.create(g, &data).unwrap();
        objs.push((oid, data));
        if oid.page != first.page {
            break;
        }
    }
    let grown = vec![9u8; 900];
    s.update(first, &grown).unwrap();
    objs[0].1 = grown;
    assert!(s.object_stats().records_moved >= 1, "the grown record moved");
    let big: Vec<u8> = (0..50_000u32).map(|i| (i % 253) as u8).collect();
    let l = s.create(GroupId::DEFAULT, &big).unwrap();
    objs.push((l, big));
    s.commit().unwrap();
    d.close().unwrap();
    (objs, first)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn flip(path: &Path, offset: u64) {
    let f = OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, offset).unwrap();
}

/// Reads every object; returns the first error (there must be no panic).
fn read_all(db: &Path, objs: &[(Oid, Vec<u8>)]) -> Result<(), Error> {
    let d = Db::open(db, &opts())?;
    let mut s = d.begin()?;
    for (oid, data) in objs {
        let got = s.read(*oid)?;
        assert_eq!(&got, data, "a read that succeeds returns the right bytes");
    }
    Ok(())
}

#[test]
fn a_flipped_byte_in_any_page_is_named_by_check_and_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (objs, _) = build(&db);
    let pages = std::fs::metadata(db.join(VOLUME_FILE)).unwrap().len() / 4096;
    assert!(pages > 10);
    for p in 0..pages {
        let copy: PathBuf = dir.path().join(format!("copy{p}"));
        copy_dir(&db, &copy);
        // Vary the position inside the page: header, body, last byte.
        let within = [5u64, 30, 700, 4095][p as usize % 4];
        flip(&copy.join(VOLUME_FILE), p * 4096 + within);
        let report = check_database(&copy, &vopts());
        assert!(
            report.problems.iter().any(|pr| pr.page == Some(PageId(p as u32))),
            "check must name page {p}; got {:?}",
            report.problems
        );
        if let Err(e) = read_all(&copy, &objs) {
            match e {
                Error::Corrupt { page, .. } => assert_eq!(page, PageId(p as u32), "{e}"),
                other => panic!("damage to page {p} gave an unexpected error: {other}"),
            }
        }
        std::fs::remove_dir_all(&copy).unwrap();
    }
}

#[test]
fn a_truncated_volume_is_refused_and_check_names_the_first_lost_page() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    build(&db);
    let vol = db.join(VOLUME_FILE);
    let len = std::fs::metadata(&vol).unwrap().len();
    let keep_pages = len / 4096 - 3;
    OpenOptions::new()
        .write(true)
        .open(&vol)
        .unwrap()
        .set_len(keep_pages * 4096 + 100)
        .unwrap();
    let err = Db::open(&db, &opts()).unwrap_err();
    assert!(
        matches!(err, Error::CorruptFile { .. }) && err.to_string().contains("truncated"),
        "{err}"
    );
    let report = check_database(&db, &vopts());
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].page, Some(PageId(keep_pages as u32)));

    OpenOptions::new().write(true).open(&vol).unwrap().set_len(100).unwrap();
    let err = Db::open(&db, &opts()).unwrap_err();
    assert!(matches!(err, Error::CorruptFile { .. }), "{err}");
}

#[test]
fn wrong_headers_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    build(&db);

    // Not a database at all.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(Db::open(&empty, &opts()), Err(Error::NotADatabase { .. })));
    let report = check_database(&empty, &vopts());
    assert!(!report.is_ok());

    // The manifest claims another page size than the volume has.
    let c = dir.path().join("pagesize");
    copy_dir(&db, &c);
    let m = c.join(MANIFEST_FILE);
    let mut bytes = std::fs::read(&m).unwrap();
    bytes[12..16].copy_from_slice(&8192u32.to_le_bytes());
    let sum = crc32c::crc32c(&bytes[0..32]);
    bytes[32..36].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&m, &bytes).unwrap();
    let err = Db::open(&c, &opts()).unwrap_err();
    assert!(
        err.to_string().contains("page size 4096, the manifest says 8192"),
        "{err}"
    );

    // Another format version in the manifest.
    let c = dir.path().join("version");
    copy_dir(&db, &c);
    let m = c.join(MANIFEST_FILE);
    let mut bytes = std::fs::read(&m).unwrap();
    bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
    let sum = crc32c::crc32c(&bytes[0..32]);
    bytes[32..36].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&m, &bytes).unwrap();
    assert!(matches!(
        Db::open(&c, &opts()),
        Err(Error::UnsupportedVersion { found: 7, .. })
    ));

    // A volume whose header magic is gone.
    let c = dir.path().join("magic");
    copy_dir(&db, &c);
    flip(&c.join(VOLUME_FILE), 24);
    assert!(matches!(Db::open(&c, &opts()), Err(Error::NotADatabase { .. })));
    let report = check_database(&c, &vopts());
    assert_eq!(report.problems[0].page, Some(PageId(0)));

    // A volume from another database.
    let other = dir.path().join("other");
    Db::create(&other, &opts()).unwrap().close().unwrap();
    let c = dir.path().join("swapped");
    copy_dir(&db, &c);
    std::fs::copy(other.join(MANIFEST_FILE), c.join(MANIFEST_FILE)).unwrap();
    let err = Db::open(&c, &opts()).unwrap_err();
    assert!(err.to_string().contains("another database"), "{err}");
}

#[test]
fn a_forwarding_loop_is_a_named_error_and_check_names_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (_objs, moved) = build(&db);
    {
        let d = Db::open(&db, &opts()).unwrap();
        let mut s = d.begin().unwrap();
        // Point the stub at itself: a loop of one.
        s.modify(moved.page, |b| {
            let stub = moved.to_bytes();
            assert!(slotted::update(b, moved.slot, KIND_FORWARD, &stub)?);
            Ok(())
        })
        .unwrap();
        s.commit().unwrap();
        let mut s = d.begin().unwrap();
        let err = s.read(moved).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { page, .. } if page == moved.page),
            "{err}"
        );
        assert!(err.to_string().contains("forwarding"), "{err}");
        drop(s);
        d.close().unwrap();
    }
    let report = check_database(&db, &vopts());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.page == Some(moved.page) && p.message.contains("forwarding")),
        "{:?}",
        report.problems
    );
}
