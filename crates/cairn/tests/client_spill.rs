//! A page client's transaction larger than its memory budget spills its
//! private pages to a temporary directory, which exists only while it is
//! needed: a client that never spills creates none, and a dropped client
//! leaves none behind (every remote client used to leave an empty
//! `cairn-client-PID-N` directory in the temporary directory). One test in
//! this file, so that no other test of this process makes such directories.

mod common;

use cairn::storage::GroupId;
use cairn::tools::{parse_url, RemoteStore};

/// The client spill directories of this process now.
fn spill_dirs() -> Vec<std::path::PathBuf> {
    let prefix = format!("cairn-client-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

#[test]
fn a_client_makes_a_spill_directory_only_to_spill_and_leaves_none() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("db"));
    let connect = |memory: usize| {
        RemoteStore::connect(
            parse_url(&format!("cairn://{}", server.addr)).unwrap(),
            &cairn::tools::Connect::default(),
            256,
            memory,
            1024,
        )
        .unwrap()
    };
    // Small transactions: nothing spills, no directory.
    let small = connect(16 << 20);
    let mut t = small.begin().unwrap();
    let kept = t.create(GroupId::DEFAULT, &[1u8; 100]).unwrap();
    t.commit().unwrap();
    assert_eq!(spill_dirs(), Vec::<std::path::PathBuf>::new());
    drop(small);

    // A transaction over a budget of 4 pages spills, and commits whole.
    let big = connect(4 * 4096);
    let mut t = big.begin().unwrap();
    let oids: Vec<_> = (0..60u8)
        .map(|i| t.create(GroupId::DEFAULT, &[i; 1000]).unwrap())
        .collect();
    assert_eq!(spill_dirs().len(), 1, "it spilled");
    t.commit().unwrap();
    let mut t = big.begin().unwrap();
    for (i, o) in oids.iter().enumerate() {
        assert_eq!(t.read(*o).unwrap(), vec![i as u8; 1000]);
    }
    assert_eq!(t.read(kept).unwrap(), vec![1u8; 100]);
    t.commit().unwrap();
    drop(big);
    assert_eq!(
        spill_dirs(),
        Vec::<std::path::PathBuf>::new(),
        "dropped with its client"
    );
    server.stop();
}
