//! Newtypes for the identifiers the storage manager hands out.
//!
//! Keeping page ids, slot indexes, uniquifiers, LSNs and group ids in distinct
//! types means the compiler catches a slot passed where a page was meant. All of
//! them have a fixed little-endian width on disk; none is ever a `usize` there.

use std::fmt;

/// The number of a page in the volume file. Page 0 is the volume header.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PageId(pub u32);

impl PageId {
    /// The volume header page.
    pub const HEADER: PageId = PageId(0);

    /// The page id as an index into the volume file (in pages).
    pub fn index(self) -> u64 {
        u64::from(self.0)
    }
}

impl fmt::Debug for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {}", self.0)
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A log sequence number: the byte position in the write-ahead log just past
/// the record that last changed a page. `Lsn(0)` means "never logged".
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Lsn(pub u64);

/// The index of a slot in a slotted page's slot directory.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct SlotIdx(pub u16);

/// A uniquifier: a number a page hands out once per slot allocation, so that an
/// OID whose slot has since been reused for another object is detected.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Uniq(pub u32);

/// The id of an object group (a named set of extents).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct GroupId(pub u32);

impl GroupId {
    /// The group every database has, named `default`.
    pub const DEFAULT: GroupId = GroupId(0);
}

/// A transaction's id. Ids are unique for the life of a database (they are
/// never reused, across restarts included).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct TxnId(pub u64);

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn {}", self.0)
    }
}

/// The id of a client (a session of a remote workstation, or the embedded
/// process itself, which is client 0). Lock holders are (client, txn) pairs,
/// never threads, so a remote client can later be called back.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct ClientId(pub u32);

/// A physical object identifier: the page and slot of the object's home
/// record, and the uniquifier that slot had when the object was created.
///
/// The OID stays valid for the life of the object: if the record moves, its
/// home slot keeps a forwarding stub. On disk it is [`Oid::ENCODED_SIZE`]
/// bytes: page (u32 LE), slot (u16 LE), uniquifier (u32 LE).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Oid {
    /// The page holding the home slot.
    pub page: PageId,
    /// The home slot.
    pub slot: SlotIdx,
    /// The uniquifier the home slot was given when the object was created.
    pub uniq: Uniq,
}

impl Oid {
    /// Bytes of an encoded OID.
    pub const ENCODED_SIZE: usize = 10;

    /// Encodes the OID into its fixed 10-byte form.
    pub fn to_bytes(self) -> [u8; Self::ENCODED_SIZE] {
        let mut out = [0u8; Self::ENCODED_SIZE];
        out[0..4].copy_from_slice(&self.page.0.to_le_bytes());
        out[4..6].copy_from_slice(&self.slot.0.to_le_bytes());
        out[6..10].copy_from_slice(&self.uniq.0.to_le_bytes());
        out
    }

    /// Decodes an OID from exactly [`Oid::ENCODED_SIZE`] bytes.
    pub fn from_bytes(bytes: &[u8; Self::ENCODED_SIZE]) -> Oid {
        Oid {
            page: PageId(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            slot: SlotIdx(u16::from_le_bytes([bytes[4], bytes[5]])),
            uniq: Uniq(u32::from_le_bytes([bytes[6], bytes[7], bytes[8], bytes[9]])),
        }
    }

    /// Decodes an OID from exactly [`Oid::ENCODED_SIZE`] bytes, or `None`
    /// for any other length (a stored OID value).
    pub fn from_exact(bytes: &[u8]) -> Option<Oid> {
        bytes.try_into().ok().map(Oid::from_bytes)
    }

    /// Decodes an OID from the front of `bytes`, or `None` if it is too short.
    pub fn from_slice(bytes: &[u8]) -> Option<Oid> {
        let arr: &[u8; Self::ENCODED_SIZE] = bytes.get(..Self::ENCODED_SIZE)?.try_into().ok()?;
        Some(Oid::from_bytes(arr))
    }
}

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oid({}.{}#{})", self.page.0, self.slot.0, self.uniq.0)
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}#{}", self.page.0, self.slot.0, self.uniq.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oid_round_trips_through_bytes() {
        let oid = Oid {
            page: PageId(0xDEAD_BEEF),
            slot: SlotIdx(0x1234),
            uniq: Uniq(0x89AB_CDEF),
        };
        let bytes = oid.to_bytes();
        assert_eq!(Oid::from_bytes(&bytes), oid);
        assert_eq!(Oid::from_slice(&bytes), Some(oid));
        assert_eq!(Oid::from_slice(&bytes[..9]), None);
        assert_eq!(format!("{oid}"), "3735928559.4660#2309737967");
    }
}
