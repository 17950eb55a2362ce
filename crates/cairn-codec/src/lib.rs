//! Little-endian bytes: the one place Cairn reads and writes them. Every
//! crate's decoders (log records, protocol messages, object records,
//! methods, the users file) use this [`Reader`], and its encoders this
//! [`Writer`].
//!
//! Two shapes of use:
//! - **At an offset** in a buffer whose size the caller has already checked
//!   (a page of known size, a fixed header): [`get_u16`] … [`put_u64`]. They
//!   panic on an out-of-range offset, which is a bug in the caller's layout
//!   constants, never a property of the data.
//! - **A cursor over untrusted bytes** (a log record, a message body, an
//!   object): [`Reader`] checks every length against the bytes left
//!   *before* taking them, checks a count of elements against the bytes
//!   left before the caller allocates for them ([`Reader::count32`],
//!   [`Reader::get_count`], [`Reader::check_count`]), and
//!   [`Reader::finish`] rejects trailing bytes. Each read names the field
//!   it reads, and a reader made [`Reader::within`] a context (a message
//!   kind) names that too, so a [`DecodeError`] says what was being read,
//!   at which byte, and why it failed; the caller wraps it in an error
//!   naming the page, the log position or the connection.

/// Reads a `u16` at `off`.
#[inline]
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(b[off..off + 2].try_into().expect("2 bytes"))
}

/// Reads a `u32` at `off`.
#[inline]
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// Reads a `u64` at `off`.
#[inline]
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Reads a `u128` at `off`.
#[inline]
pub fn get_u128(b: &[u8], off: usize) -> u128 {
    u128::from_le_bytes(b[off..off + 16].try_into().expect("16 bytes"))
}

/// Writes a `u16` at `off`.
#[inline]
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u32` at `off`.
#[inline]
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u64` at `off`.
#[inline]
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u128` at `off`.
#[inline]
pub fn put_u128(b: &mut [u8], off: usize, v: u128) {
    b[off..off + 16].copy_from_slice(&v.to_le_bytes());
}

/// A decoding failure: what was being read, at which byte offset, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {what} at byte {offset}: {reason}")]
pub struct DecodeError {
    /// What was being read (a field or type name, after the reader's
    /// context if it has one).
    pub what: String,
    /// The byte offset in the bytes decoded.
    pub offset: usize,
    /// Why it failed.
    pub reason: String,
}

/// Builds little-endian bytes: numbers, LEB128 lengths, raw bytes.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    #[inline]
    pub fn new() -> Writer {
        Writer::default()
    }

    /// An empty writer with room for `bytes` before it grows.
    #[inline]
    pub fn with_capacity(bytes: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(bytes),
        }
    }

    /// The bytes written.
    #[inline]
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// The bytes written so far.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Appends raw bytes.
    #[inline]
    pub fn put(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Appends a `u8`.
    #[inline]
    pub fn put_u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Appends a `u16`.
    #[inline]
    pub fn put_u16(&mut self, v: u16) {
        self.put(&v.to_le_bytes());
    }

    /// Appends a `u32`.
    #[inline]
    pub fn put_u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }

    /// Appends a `u64`.
    #[inline]
    pub fn put_u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }

    /// Appends a `u16` length, then the bytes (at most `u16::MAX` of them:
    /// a longer slice is cut there, which the caller's own limit, always
    /// lower, rules out).
    #[inline]
    pub fn put_bytes16(&mut self, b: &[u8]) {
        let n = b.len().min(u16::MAX as usize);
        self.put_u16(n as u16);
        self.put(&b[..n]);
    }

    /// Appends a `u32` length, then the bytes (at most `u32::MAX`).
    #[inline]
    pub fn put_bytes32(&mut self, b: &[u8]) {
        let n = b.len().min(u32::MAX as usize);
        self.put_u32(n as u32);
        self.put(&b[..n]);
    }

    /// Appends an unsigned LEB128 number (lengths and counts).
    #[inline]
    pub fn put_len(&mut self, mut n: u64) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.buf.push(byte);
                return;
            }
            self.buf.push(byte | 0x80);
        }
    }
}

/// A cursor over untrusted bytes: see the module docs.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// What the bytes are (a message kind), named before the field in
    /// errors; empty for none.
    context: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            context: "",
        }
    }

    /// A reader over `buf`, which holds a `context` (e.g. "OBJ_FETCH
    /// request"): errors name it before the field.
    #[inline]
    pub fn within(context: &'static str, buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0, context }
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The current offset.
    #[inline]
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// A decode error at the current offset, reading `what`.
    #[cold]
    pub fn error(&self, what: &str, reason: impl Into<String>) -> DecodeError {
        let what = if self.context.is_empty() {
            what.to_string()
        } else {
            format!("{}, {what}", self.context)
        };
        DecodeError {
            what,
            offset: self.pos,
            reason: reason.into(),
        }
    }

    /// Takes `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.error(what, format!("needs {n} bytes, {} left", self.remaining())));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Takes exactly `N` bytes.
    #[inline]
    pub fn take_array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }

    /// Takes a `u8`.
    #[inline]
    pub fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    /// Takes a `u16`.
    #[inline]
    pub fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take_array(what)?))
    }

    /// Takes a `u32`.
    #[inline]
    pub fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take_array(what)?))
    }

    /// Takes a `u64`.
    #[inline]
    pub fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take_array(what)?))
    }

    /// Takes a `u16` length, then that many bytes.
    #[inline]
    pub fn bytes16(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let n = self.u16(what)? as usize;
        self.take(n, what)
    }

    /// Takes a `u32` length, then that many bytes.
    #[inline]
    pub fn bytes32(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }

    /// Takes a `u16` length, then that much UTF-8 text.
    #[inline]
    pub fn str16(&mut self, what: &str) -> Result<&'a str, DecodeError> {
        let at = self.pos;
        let raw = self.bytes16(what)?;
        std::str::from_utf8(raw).map_err(|_| {
            let mut e = self.error(what, "text is not UTF-8");
            e.offset = at;
            e
        })
    }

    /// Reads an unsigned LEB128 number (at most 10 bytes).
    #[inline]
    pub fn get_len(&mut self, what: &str) -> Result<u64, DecodeError> {
        let mut n: u64 = 0;
        for i in 0..10 {
            let b = self.take(1, what)?[0];
            n |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(self.error(what, "length runs past 10 bytes"))
    }

    /// Checks that `count` elements, each at least `min_elem_bytes` long,
    /// can be in the bytes left (so a hostile count allocates nothing).
    #[inline]
    pub fn check_count(&self, what: &str, count: u64, min_elem_bytes: usize) -> Result<usize, DecodeError> {
        let limit = (self.remaining() / min_elem_bytes.max(1)) as u64;
        if count > limit {
            return Err(self.error(
                what,
                format!(
                    "a count of {count} elements of at least {min_elem_bytes} bytes cannot fit in the {} bytes left",
                    self.remaining()
                ),
            ));
        }
        Ok(count as usize)
    }

    /// Reads a LEB128 count of elements, each at least `min_elem_bytes`
    /// long, checked against the bytes left ([`Reader::check_count`]).
    #[inline]
    pub fn get_count(&mut self, what: &str, min_elem_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.get_len(what)?;
        self.check_count(what, n, min_elem_bytes)
    }

    /// Reads a `u32` count, checked as [`Reader::get_count`].
    #[inline]
    pub fn count32(&mut self, what: &str, min_elem_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32(what)?;
        self.check_count(what, u64::from(n), min_elem_bytes)
    }

    /// Fails unless every byte was read.
    #[inline]
    pub fn finish(&self, what: &str) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(self.error(what, format!("{} trailing bytes", self.remaining())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_takes_fields_in_order_and_rejects_short_and_trailing_input() {
        let mut w = Writer::new();
        w.put_u8(7);
        w.put_u16(0x1234);
        w.put_u32(0xdead_beef);
        w.put_u64(u64::MAX);
        w.put_bytes16(b"abc");
        w.put_len(300);
        let b = w.into_bytes();
        let mut r = Reader::new(&b);
        assert_eq!(r.u8("a").unwrap(), 7);
        assert_eq!(r.u16("b").unwrap(), 0x1234);
        assert_eq!(r.u32("c").unwrap(), 0xdead_beef);
        assert_eq!(r.u64("d").unwrap(), u64::MAX);
        assert_eq!(r.str16("e").unwrap(), "abc");
        assert_eq!(r.get_len("f").unwrap(), 300);
        r.finish("end").unwrap();
        let e = r.u8("g").unwrap_err();
        assert_eq!((e.what.as_str(), e.offset), ("g", 22));
        assert_eq!(e.reason, "needs 1 bytes, 0 left");
        let e = Reader::within("TEST message", &b[..3]).finish("the end").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot decode TEST message, the end at byte 0: 3 trailing bytes"
        );
    }

    #[test]
    fn a_count_that_cannot_fit_is_refused_before_allocation() {
        let mut b = u32::MAX.to_le_bytes().to_vec();
        b.extend_from_slice(&[0u8; 12]);
        let e = Reader::new(&b).count32("pages", 4).unwrap_err();
        assert!(e.reason.contains("4294967295 elements"), "{e}");
        let mut b = 3u32.to_le_bytes().to_vec();
        b.extend_from_slice(&[0u8; 12]);
        assert_eq!(Reader::new(&b).count32("pages", 4).unwrap(), 3);
        assert!(Reader::new(&b).count32("pages", 5).is_err());
        let r = Reader::new(&[1, 1]);
        assert_eq!(r.check_count("x", 2, 1).unwrap(), 2);
        assert!(r.check_count("x", 3, 1).is_err());
    }

    #[test]
    fn text_must_be_utf8_and_a_length_must_end() {
        let e = Reader::new(&[2, 0, 0xff, 0xfe]).str16("name").unwrap_err();
        assert_eq!((e.offset, e.reason.as_str()), (0, "text is not UTF-8"));
        let e = Reader::new(&[0x80; 11]).get_len("len").unwrap_err();
        assert_eq!(e.reason, "length runs past 10 bytes");
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
