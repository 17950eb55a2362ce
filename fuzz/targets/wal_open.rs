//! A log segment whose records are fuzzer bytes after a valid segment header:
//! (creation id 0, the default options') opening the log (torn-tail repair) and reading every record must return
//! records or errors, never panic, and never allocate what a length claims.

use cairn_storage::wal::{format, Wal, WalOptions};
use cairn_storage::Lsn;

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let wal_dir = dir.path().join("wal");
    std::fs::create_dir_all(&wal_dir).unwrap();
    let mut bytes = format::encode_segment_header(Lsn(0), 0).to_vec();
    bytes.extend_from_slice(data);
    std::fs::write(wal_dir.join("0000000000000000.log"), &bytes).unwrap();
    if let Ok((wal, _)) = Wal::open(dir.path(), WalOptions::default()) {
        if let Ok(reader) = wal.read_from(wal.first_lsn()) {
            for r in reader.take(10_000) {
                if r.is_err() {
                    break;
                }
            }
        }
        let _ = wal.append(&[b"after the fuzz"]);
    }
}
