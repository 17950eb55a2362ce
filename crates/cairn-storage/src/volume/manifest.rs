//! The manifest: a small file naming what the directory holds.
//!
//! ```text
//!  offset size field
//!  0      8    magic           b"CAIRNMF\0"
//!  8      4    format_version  FORMAT_VERSION
//!  12     4    page_size       bytes per page of the volume
//!  16     16   creation_id     random id shared with the volume header
//!  32     4    checksum        CRC32C of bytes 0..32
//! ```
//!
//! It is written once, at creation, to a temporary name, fsynced, renamed into
//! place and the directory fsynced, so it is either absent or whole. The volume
//! header repeats its fields; opening checks that both agree, so a volume file
//! from another database (or with another page size) is refused.

use std::path::Path;

use crate::error::{Error, Result};
use crate::io::Vfs;

/// The manifest's file name inside a database directory.
pub const MANIFEST_FILE: &str = "MANIFEST";
/// The volume's file name inside a database directory.
pub const VOLUME_FILE: &str = "volume.cairn";
/// The volume's name while a database is being created: it is renamed to
/// [`VOLUME_FILE`] only after the manifest is durable, so a `volume.cairn`
/// without a manifest never comes from an interrupted creation.
pub const VOLUME_NEW_FILE: &str = "volume.cairn.new";
/// The on-disk format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"CAIRNMF\0";
/// Bytes of the manifest file.
pub const MANIFEST_SIZE: usize = 36;

/// What the manifest records.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Manifest {
    /// The volume's page size.
    pub page_size: u32,
    /// The id given to the database when it was created.
    pub creation_id: u128,
}

impl Manifest {
    /// Encodes the manifest.
    pub fn encode(&self) -> [u8; MANIFEST_SIZE] {
        let mut b = [0u8; MANIFEST_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..32].copy_from_slice(&self.creation_id.to_le_bytes());
        let sum = crc32c::crc32c(&b[0..32]);
        b[32..36].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and validates manifest bytes read from `path`.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Manifest> {
        if bytes.len() < 8 || &bytes[0..8] != MAGIC {
            return Err(Error::NotADatabase {
                path: path.to_path_buf(),
                reason: "the manifest does not start with the Cairn magic".into(),
            });
        }
        if bytes.len() != MANIFEST_SIZE {
            return Err(Error::CorruptFile {
                path: path.to_path_buf(),
                reason: format!("manifest is {} bytes, expected {MANIFEST_SIZE}", bytes.len()),
            });
        }
        let stored = u32::from_le_bytes(bytes[32..36].try_into().expect("4 bytes"));
        let actual = crc32c::crc32c(&bytes[0..32]);
        if stored != actual {
            return Err(Error::CorruptFile {
                path: path.to_path_buf(),
                reason: format!("manifest checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
            });
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let page_size = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
        crate::page::validate_page_size(page_size as usize).map_err(|_| Error::CorruptFile {
            path: path.to_path_buf(),
            reason: format!("manifest names an impossible page size {page_size}"),
        })?;
        let creation_id = u128::from_le_bytes(bytes[16..32].try_into().expect("16 bytes"));
        Ok(Manifest { page_size, creation_id })
    }

    /// Reads the manifest of database directory `dir`.
    pub fn read(vfs: &dyn Vfs, dir: &Path) -> Result<Manifest> {
        if !vfs.exists(dir) {
            return Err(Error::NotADatabase {
                path: dir.to_path_buf(),
                reason: "no such directory".into(),
            });
        }
        let path = dir.join(MANIFEST_FILE);
        if !vfs.exists(&path) {
            return Err(Error::NotADatabase {
                path: dir.to_path_buf(),
                reason: format!("it has no {MANIFEST_FILE} file"),
            });
        }
        let file = vfs
            .open(&path, false)
            .map_err(|e| Error::io("open manifest", &path, e))?;
        let len = file.len().map_err(|e| Error::io("stat manifest", &path, e))?;
        // Cheap size check before reading: a manifest is tiny.
        let len = usize::try_from(len.min(MANIFEST_SIZE as u64 + 1)).expect("small");
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| Error::io("read manifest", &path, e))?;
        Manifest::decode(&buf, &path)
    }

    /// Writes the manifest of a new database atomically (temp file, fsync,
    /// rename, fsync of the directory).
    pub fn write_new(&self, vfs: &dyn Vfs, dir: &Path) -> Result<()> {
        let tmp = dir.join("MANIFEST.tmp");
        if vfs.exists(&tmp) {
            vfs.remove_file(&tmp)
                .map_err(|e| Error::io("remove stale manifest", &tmp, e))?;
        }
        let file = vfs
            .open(&tmp, true)
            .map_err(|e| Error::io("create manifest", &tmp, e))?;
        file.write_all_at(&self.encode(), 0)
            .map_err(|e| Error::io("write manifest", &tmp, e))?;
        file.sync_data().map_err(|e| Error::io("fsync manifest", &tmp, e))?;
        let path = dir.join(MANIFEST_FILE);
        vfs.rename(&tmp, &path)
            .map_err(|e| Error::io("rename manifest", &path, e))?;
        vfs.sync_dir(dir).map_err(|e| Error::io("fsync directory", dir, e))?;
        Ok(())
    }
}

/// A fresh, practically unique id for a new database, from the clock, the
/// process id and a counter (no randomness source needed).
pub fn new_creation_id() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let pid = u128::from(std::process::id());
    let n = u128::from(COUNTER.fetch_add(1, Ordering::Relaxed));
    let mixed = nanos ^ (pid << 96) ^ (n << 64);
    // Never 0, so a zeroed header can't match.
    mixed | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_damage_is_named() {
        let m = Manifest {
            page_size: 8192,
            creation_id: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
        };
        let p = Path::new("/db/MANIFEST");
        assert_eq!(Manifest::decode(&m.encode(), p).unwrap(), m);

        let mut bad = m.encode();
        bad[20] ^= 1;
        assert!(matches!(Manifest::decode(&bad, p), Err(Error::CorruptFile { .. })));

        let mut other = m.encode();
        other[0] = b'X';
        assert!(matches!(Manifest::decode(&other, p), Err(Error::NotADatabase { .. })));

        let mut v2 = m.encode();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let sum = crc32c::crc32c(&v2[0..32]);
        v2[32..36].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(
            Manifest::decode(&v2, p),
            Err(Error::UnsupportedVersion { found: 2, .. })
        ));

        assert!(matches!(
            Manifest::decode(&m.encode()[..20], p),
            Err(Error::CorruptFile { .. })
        ));
    }

    #[test]
    fn creation_ids_differ() {
        assert_ne!(new_creation_id(), new_creation_id());
    }
}
