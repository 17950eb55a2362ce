//! Unit tests of the simulated disk: durability, torn writes, crashes, faults, locks.

use super::*;
use crate::io::Vfs;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn read_all(d: &SimDisk, path: &str) -> Option<Vec<u8>> {
    d.file_bytes(&p(path))
}

#[test]
fn fsync_makes_writes_durable_and_a_synced_image_drops_the_rest() {
    let d = SimDisk::new();
    d.make_durable_dir(&p("/db"));
    let f = d.open(&p("/db/f"), true).unwrap();
    d.sync_dir(&p("/db")).unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(b"world", 5).unwrap();
    assert_eq!(read_all(&d, "/db/f").unwrap(), b"helloworld");
    let img = d.image(ImageKind::Synced, 1);
    assert_eq!(read_all(&img, "/db/f").unwrap(), b"hello");
    let img = d.image(ImageKind::Everything, 1);
    assert_eq!(read_all(&img, "/db/f").unwrap(), b"helloworld");
}

#[test]
fn names_need_a_directory_fsync_and_their_parents_too() {
    let d = SimDisk::new();
    d.create_dir_all(&p("/a/b")).unwrap();
    let f = d.open(&p("/a/b/f"), true).unwrap();
    f.write_all_at(b"x", 0).unwrap();
    f.sync_data().unwrap();
    d.sync_dir(&p("/a/b")).unwrap();
    // /a/b itself is not durable in /a, nor /a in /.
    assert!(!d.image(ImageKind::Synced, 0).exists(&p("/a/b/f")));
    d.sync_dir(&p("/a")).unwrap();
    assert!(!d.image(ImageKind::Synced, 0).exists(&p("/a/b/f")));
    d.sync_dir(&p("/")).unwrap();
    let img = d.image(ImageKind::Synced, 0);
    assert_eq!(read_all(&img, "/a/b/f").unwrap(), b"x");
    // A rename not followed by a directory fsync is undone.
    d.rename(&p("/a/b/f"), &p("/a/b/g")).unwrap();
    let img = d.image(ImageKind::Synced, 0);
    assert!(img.exists(&p("/a/b/f")) && !img.exists(&p("/a/b/g")));
    let img = d.image(ImageKind::Everything, 0);
    assert!(!img.exists(&p("/a/b/f")) && img.exists(&p("/a/b/g")));
    d.remove_file(&p("/a/b/g")).unwrap();
    assert!(d.image(ImageKind::Synced, 0).exists(&p("/a/b/f")));
    assert_eq!(d.list_dir(&p("/a/b")).unwrap().len(), 0);
}

#[test]
fn a_torn_write_keeps_whole_sectors_only() {
    let d = SimDisk::new();
    let f = d.open(&p("/f"), true).unwrap();
    d.sync_dir(&p("/")).unwrap();
    f.write_all_at(&[1u8; 2048], 0).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(&[2u8; 2048], 0).unwrap();
    let mut seen = BTreeSet::new();
    for seed in 0..64 {
        let img = d.image(ImageKind::TornLast, seed);
        let bytes = read_all(&img, "/f").unwrap();
        let twos = bytes.iter().take_while(|b| **b == 2).count();
        assert_eq!(twos % SECTOR_SIZE as usize, 0);
        assert!(bytes[twos..].iter().all(|b| *b == 1));
        assert!(twos < 2048, "a torn write never survives whole");
        seen.insert(twos);
    }
    assert!(seen.len() > 1);
}

#[test]
fn a_crash_stops_every_later_operation() {
    let d = SimDisk::new();
    let f = d.open(&p("/f"), true).unwrap();
    d.set_crash_at(Some(3));
    f.write_all_at(b"a", 0).unwrap();
    f.sync_data().unwrap();
    assert!(f.write_all_at(b"b", 1).is_err());
    assert!(f.read_exact_at(&mut [0u8; 1], 0).is_err());
    assert_eq!(d.crashed_at(), Some(3));
    assert_eq!(d.stats().ops, 4, "nothing counts after the crash");
    // The file's name was never made durable; a process crash keeps it.
    assert!(d.image(ImageKind::Synced, 0).file_paths().is_empty());
    assert_eq!(read_all(&d.image(ImageKind::Everything, 0), "/f").unwrap(), b"a");
}

#[test]
fn faults_fire_once_or_forever_and_a_failed_fsync_loses_the_writes() {
    let d = SimDisk::new();
    let f = d.open(&p("/f"), true).unwrap();
    d.sync_dir(&p("/")).unwrap();
    d.add_fault(Fault {
        kind: FaultKind::SyncEio,
        from_op: 0,
        forever: false,
        path_contains: None,
    });
    f.write_all_at(b"abc", 0).unwrap();
    assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(EIO));
    f.sync_data().unwrap();
    assert_eq!(read_all(&d, "/f").unwrap(), b"abc", "reads still see the lost write");
    assert_eq!(read_all(&d.image(ImageKind::Synced, 0), "/f").unwrap(), b"");
    d.add_fault(Fault {
        kind: FaultKind::ShortWrite,
        from_op: 0,
        forever: true,
        path_contains: Some("f".into()),
    });
    assert!(f.write_all_at(&[9u8; 1500], 0).is_err());
    assert!(f.write_all_at(&[9u8; 1500], 0).is_err());
    assert_eq!(read_all(&d, "/f").unwrap().len(), 512);
    d.clear_faults();
    f.write_all_at(b"z", 0).unwrap();
    assert_eq!(d.stats().faults_fired, 3);
}

#[test]
fn the_lock_table_refuses_a_second_holder_until_the_first_lets_go() {
    let d = SimDisk::new();
    let l = d.lock_exclusive(&p("/LOCK"), "one").unwrap().unwrap();
    assert_eq!(d.lock_exclusive(&p("/LOCK"), "two").unwrap().unwrap_err(), "one");
    assert!(d
        .image(ImageKind::Everything, 0)
        .lock_exclusive(&p("/LOCK"), "three")
        .unwrap()
        .is_ok());
    drop(l);
    assert!(d.lock_exclusive(&p("/LOCK"), "two").unwrap().is_ok());
}
