//! The storage fuzz targets' corpora, replayed on stable (see
//! `fuzz/replay.rs`), and the generator of the seeds of the B+-tree and
//! large-object targets (`cargo test --test fuzz_corpus -- --ignored`).
#![expect(
    clippy::duplicate_mod,
    reason = "btree_nodes and large_object_pages each include mem_pages.rs, as their libFuzzer binaries need"
)]

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[path = "../../../fuzz/targets/btree_nodes.rs"]
mod btree_nodes;
#[path = "../../../fuzz/targets/large_object_pages.rs"]
mod large_object_pages;
#[path = "../../../fuzz/targets/log_records.rs"]
mod log_records;
#[path = "../../../fuzz/targets/page_decoders.rs"]
mod page_decoders;
#[path = "../../../fuzz/targets/volume_open.rs"]
mod volume_open;
#[path = "../../../fuzz/targets/wal_open.rs"]
mod wal_open;

use cairn_storage::btree::BTree;
use cairn_storage::record::large;
use cairn_storage::wal::{format, Wal, WalOptions};
use cairn_storage::{GroupId, Lsn};

#[test]
fn page_decoders_corpus_replays_without_panics() {
    replay::replay("page_decoders", page_decoders::run);
}

#[test]
fn volume_open_corpus_replays_without_panics() {
    replay::replay("volume_open", volume_open::run);
}

#[test]
fn log_records_corpus_replays_without_panics() {
    replay::replay("log_records", log_records::run);
}

#[test]
fn wal_open_corpus_replays_without_panics() {
    replay::replay("wal_open", wal_open::run);
}

#[test]
fn btree_nodes_corpus_replays_without_panics() {
    replay::replay("btree_nodes", btree_nodes::run);
}

#[test]
fn large_object_pages_corpus_replays_without_panics() {
    replay::replay("large_object_pages", large_object_pages::run);
}

/// Trees built by the real code, root at page 1, as the `btree_nodes` input.
fn btree_seed(unique: bool, keys: u32, bulk: bool) -> Vec<u8> {
    let mut a = btree_nodes::mem_pages::MemPages::new(btree_nodes::PAGE_SIZE);
    let entries = (0..keys).map(|i| (format!("key-{i:04}").into_bytes(), format!("value {i}").into_bytes()));
    let tree = if bulk {
        BTree::bulk_load(&mut a, GroupId::DEFAULT, unique, entries).unwrap()
    } else {
        let t = BTree::create(&mut a, GroupId::DEFAULT, unique).unwrap();
        for (k, v) in entries {
            t.insert(&mut a, &k, &v).unwrap();
        }
        t
    };
    assert_eq!(tree.root().0, 1);
    tree.check(&mut a).unwrap();
    a.to_bytes()
}

/// A large object built by the real code, as the `large_object_pages` input.
fn large_seed(len: usize) -> Vec<u8> {
    let mut a = large_object_pages::mem_pages::MemPages::new(large_object_pages::PAGE_SIZE);
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let d = large::create(&mut a, GroupId::DEFAULT, None, &data).unwrap();
    large::check(&mut a, &d).unwrap();
    let mut out = d.encode().to_vec();
    out.extend(a.to_bytes());
    out
}

/// Records appended by the real log, as the `wal_open` input: the bytes of
/// its first segment after the segment header (which the target writes).
fn wal_seed(records: &[&[u8]]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let lsns = wal.append(records).unwrap();
    wal.flush(*lsns.last().unwrap()).unwrap();
    drop(wal);
    let segment = std::fs::read(dir.path().join("wal").join("0000000000000000.log")).unwrap();
    let header = format::encode_segment_header(Lsn(0), 0);
    assert_eq!(segment[..header.len()], header[..], "the target writes this header");
    segment[header.len()..].to_vec()
}

#[test]
#[ignore = "rewrites the seed inputs of fuzz/corpus/{btree_nodes,large_object_pages,wal_open}"]
fn write_storage_seeds() {
    replay::write_seed("wal_open", "one_record", &wal_seed(&[b"one record"]));
    replay::write_seed("wal_open", "three_records", &wal_seed(&[b"a", b"", &[7u8; 300]]));
    replay::write_seed("btree_nodes", "empty", &btree_seed(false, 0, false));
    replay::write_seed("btree_nodes", "one_leaf", &btree_seed(false, 10, false));
    replay::write_seed("btree_nodes", "unique_one_leaf", &btree_seed(true, 10, false));
    replay::write_seed("btree_nodes", "two_levels", &btree_seed(false, 400, false));
    replay::write_seed("btree_nodes", "bulk_two_levels", &btree_seed(true, 300, true));
    replay::write_seed("large_object_pages", "empty", &large_seed(0));
    replay::write_seed("large_object_pages", "one_page", &large_seed(50));
    replay::write_seed("large_object_pages", "depth_1", &large_seed(1_000));
    replay::write_seed("large_object_pages", "depth_2", &large_seed(5_000));
    replay::write_seed("large_object_pages", "depth_3", &large_seed(43_000));
}

/// The seeds are what the generator writes today: a format change that
/// made them stale would otherwise go unnoticed (they would only be
/// rejected early, testing less).
#[test]
fn storage_seeds_are_current() {
    let dir = replay::fuzz_dir().join("corpus");
    let read = |t: &str, n: &str| std::fs::read(dir.join(t).join(n)).unwrap();
    assert_eq!(read("btree_nodes", "two_levels"), btree_seed(false, 400, false));
    assert_eq!(read("large_object_pages", "depth_2"), large_seed(5_000));
    assert_eq!(read("wal_open", "one_record"), wal_seed(&[b"one record"]));
}
