//! Little-endian fixed-width integers: the one place the storage layer reads
//! and writes them.
//!
//! Two shapes of use:
//! - **At an offset** in a buffer whose size the caller has already checked
//!   (a page of known size, a fixed header): [`get_u16`] … [`put_u64`]. They
//!   panic on an out-of-range offset, which is a bug in the caller's layout
//!   constants, never a property of the data.
//! - **A cursor over untrusted bytes** (a log record, a descriptor):
//!   [`Reader`] checks every length against the bytes left *before* taking
//!   them, [`Reader::count`] checks a count of elements against the bytes
//!   left before the caller allocates for them, and [`Reader::finish`]
//!   rejects trailing bytes. Its errors ([`DecodeError`]) say what was short
//!   and by how much; the caller wraps them in an error naming the page or
//!   the log position.

use std::fmt;

/// Reads a `u16` at `off`.
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(b[off..off + 2].try_into().expect("2 bytes"))
}

/// Reads a `u32` at `off`.
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// Reads a `u64` at `off`.
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Reads a `u128` at `off`.
pub fn get_u128(b: &[u8], off: usize) -> u128 {
    u128::from_le_bytes(b[off..off + 16].try_into().expect("16 bytes"))
}

/// Writes a `u16` at `off`.
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u32` at `off`.
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u64` at `off`.
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u128` at `off`.
pub fn put_u128(b: &mut [u8], off: usize, v: u128) {
    b[off..off + 16].copy_from_slice(&v.to_le_bytes());
}

/// Why untrusted bytes could not be decoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DecodeError {
    /// A field needs more bytes than are left.
    Short {
        /// Byte offset of the field.
        at: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// A count of elements cannot fit in the bytes left (checked before
    /// anything is allocated for them).
    TooMany {
        /// Byte offset just past the count.
        at: usize,
        /// The count read.
        count: u64,
        /// The least bytes one element takes.
        element_bytes: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// Bytes are left after the last field.
    Trailing {
        /// How many.
        count: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Short { at, needed, remaining } => {
                write!(f, "at byte {at} a field needs {needed} bytes, {remaining} are left")
            }
            DecodeError::TooMany {
                at,
                count,
                element_bytes,
                remaining,
            } => write!(
                f,
                "at byte {at} a count of {count} elements of at least {element_bytes} bytes \
                 cannot fit in the {remaining} bytes left"
            ),
            DecodeError::Trailing { count } => write!(f, "{count} trailing bytes"),
        }
    }
}

/// A cursor over untrusted bytes: see the module docs.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    /// Bytes not yet taken.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Bytes taken so far.
    #[expect(
        dead_code,
        reason = "the one cursor says where it is for the next decoder's errors; nothing in the crate asks yet"
    )]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Short {
                at: self.pos,
                needed: n,
                remaining: self.remaining(),
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Takes a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    /// Takes a `u8`.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    /// Takes a `u16`.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the one cursor offers every width for the next decoder; nothing in the crate takes this one yet"
        )
    )]
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// Takes a `u32`.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Takes a `u64`.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Takes a `u128`.
    #[expect(
        dead_code,
        reason = "the one cursor offers every width for the next decoder; nothing in the crate takes this one yet"
    )]
    pub fn u128(&mut self) -> Result<u128, DecodeError> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    /// Takes a `u32` count of elements, each at least `element_bytes` long,
    /// and checks they can fit in the bytes left, so the caller may allocate
    /// for `count` elements.
    pub fn count(&mut self, element_bytes: usize) -> Result<usize, DecodeError> {
        let count = self.u32()?;
        let fits = (count as u64).saturating_mul(element_bytes as u64) <= self.remaining() as u64;
        if !fits {
            return Err(DecodeError::TooMany {
                at: self.pos,
                count: u64::from(count),
                element_bytes,
                remaining: self.remaining(),
            });
        }
        Ok(count as usize)
    }

    /// Succeeds only if every byte was taken.
    pub fn finish(self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::Trailing { count }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_takes_fields_in_order_and_rejects_short_and_trailing_input() {
        let mut b = vec![7u8];
        b.extend_from_slice(&0x1234u16.to_le_bytes());
        b.extend_from_slice(&0xdead_beefu32.to_le_bytes());
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut r = Reader::new(&b);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u16().unwrap(), 0x1234);
        assert_eq!(r.u32().unwrap(), 0xdead_beef);
        assert_eq!(r.u64().unwrap(), u64::MAX);
        r.clone().finish().unwrap();
        assert!(matches!(
            r.u8(),
            Err(DecodeError::Short {
                at: 15,
                needed: 1,
                remaining: 0
            })
        ));
        let r = Reader::new(&b[..3]);
        assert_eq!(r.finish(), Err(DecodeError::Trailing { count: 3 }));
    }

    #[test]
    fn a_count_that_cannot_fit_is_refused_before_allocation() {
        let mut b = u32::MAX.to_le_bytes().to_vec();
        b.extend_from_slice(&[0u8; 12]);
        let mut r = Reader::new(&b);
        let err = r.count(4).unwrap_err();
        assert!(matches!(err, DecodeError::TooMany { count, .. } if count == u64::from(u32::MAX)));
        let mut b = 3u32.to_le_bytes().to_vec();
        b.extend_from_slice(&[0u8; 12]);
        assert_eq!(Reader::new(&b).count(4).unwrap(), 3);
        assert!(Reader::new(&b).count(5).is_err());
    }

    #[test]
    fn offset_helpers_round_trip() {
        let mut b = [0u8; 32];
        put_u16(&mut b, 1, 0xabcd);
        put_u32(&mut b, 3, 0x0102_0304);
        put_u64(&mut b, 7, 0x1122_3344_5566_7788);
        put_u128(&mut b, 15, u128::MAX - 5);
        assert_eq!(get_u16(&b, 1), 0xabcd);
        assert_eq!(get_u32(&b, 3), 0x0102_0304);
        assert_eq!(get_u64(&b, 7), 0x1122_3344_5566_7788);
        assert_eq!(get_u128(&b, 15), u128::MAX - 5);
    }
}
