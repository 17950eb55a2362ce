//! A whole (small) volume made of fuzzer bytes, with a valid manifest and
//! header where the input asks for them: opening, reading every object of
//! every group, and checking must return errors, never panic.

use cairn_storage::check::check_database;
use cairn_storage::page;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions};

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let vopts = VolumeOptions {
        buffer_frames: 8,
        ..VolumeOptions::default()
    };
    let opts = DbOptions {
        volume: vopts.clone(),
        background: false,
        ..DbOptions::default()
    };
    Db::create(&db, &opts).unwrap().close().unwrap();
    // Overlay the input onto the volume after the header page, resealing each
    // page so the structure decoders (not only the checksum) are exercised.
    let vol = db.join("volume.cairn");
    let mut bytes = std::fs::read(&vol).unwrap();
    let pages = (data.len() / 4096 + 1).min(16);
    bytes.resize((pages + 3) * 4096, 0);
    for (i, chunk) in data.chunks(4096).take(16).enumerate() {
        let p = i + 1;
        let page = &mut bytes[p * 4096..(p + 1) * 4096];
        page[..chunk.len()].copy_from_slice(chunk);
        page[4..8].copy_from_slice(&(p as u32).to_le_bytes());
        page::seal(page);
    }
    std::fs::write(&vol, &bytes).unwrap();
    if let Ok(d) = Db::open(&db, &opts) {
        if let Ok(mut t) = d.begin() {
            for g in d.groups().into_iter().map(|g| g.id) {
                if let Ok(oids) = t.scan_all(g) {
                    for oid in oids.into_iter().take(64) {
                        let _ = t.read(oid);
                    }
                }
            }
        }
    }
    let _ = check_database(&db, &vopts);
}
