//! Frames: the fixed 32-byte little-endian header and the body that follows it.
//!
//! ```text
//!  0       4    5     6       8               16        20        24        28        32
//!  | magic | ver| flags| kind  |  request id   | body len| body crc| reserved| hdr crc |  body ...
//!    u32    u8   u8     u16      u64             u32       u32       u32=0     u32
//! ```
//!
//! `hdr crc` is CRC32C of bytes 0..28; `body crc` is CRC32C of the body (0 for an empty body).
//! `docs/protocol.md` has the full description.
//!
//! Invariants:
//! - [`FrameHeader::decode`] checks, in this order, the magic, the version, the header checksum,
//!   the flags and the reserved word, so a peer that is not speaking Cairn at all is told
//!   [`FrameError::BadMagic`], and a later version of Cairn is told [`FrameError::UnsupportedVersion`]
//!   (bytes 0..5 keep their meaning in every version).
//! - [`FrameDecoder`] never reserves more than it has been sent: the body length is checked
//!   against the limit as soon as the header is complete, and the buffer then grows only with bytes
//!   that actually arrived ([`FrameDecoder::read_hint`] caps each read at [`READ_CHUNK`]).
//! - A frame is handed out only whole and with both checksums verified.

use bytes::{Buf, Bytes, BytesMut};

/// The first four bytes of every frame: `"CRN\x01"` read as a little-endian `u32`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"CRN\x01");
/// The protocol version this crate speaks (byte 4 of every frame). Version 2 made callback
/// locking's messages one set for every client kind (`rights`); version 1's page and object
/// forms are gone. Version 3 lets a right cover a B+-tree's gap (a key-range server's
/// lookups kept by its clients), in callbacks, releases and the rights of a lookup's reply.
pub const PROTOCOL_VERSION: u8 = 3;
/// Size of the frame header in bytes.
pub const HEADER_SIZE: usize = 32;
/// Default largest body accepted after the handshake (16 MiB).
pub const BODY_MAX_DEFAULT: u32 = 16 << 20;
/// Default largest body accepted before the handshake has completed (4 KiB).
pub const HANDSHAKE_BODY_MAX_DEFAULT: u32 = 4 << 10;
/// The most a decoder asks to read at once: the buffer grows with what arrives, never with what
/// a length field claims.
pub const READ_CHUNK: usize = 64 << 10;

/// Offset of the header checksum; it covers the bytes before it.
const HEADER_CRC_OFFSET: usize = 28;

/// The header's layout: the size assertion keeps the diagram in the module doc honest.
#[repr(C)]
struct WireHeader {
    magic: u32,
    version: u8,
    flags: u8,
    kind: u16,
    request_id: u64,
    body_len: u32,
    body_crc: u32,
    reserved: u32,
    header_crc: u32,
}
const _: () = assert!(std::mem::size_of::<WireHeader>() == HEADER_SIZE);
const _: () = assert!(HEADER_CRC_OFFSET + 4 == HEADER_SIZE);

/// The id a client gives a request; every reply frame carries it back. Id 0 is the connection
/// itself (handshake frames, NOTICE and GOODBYE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RequestId(pub u64);

impl RequestId {
    /// The connection-level id carried by handshake frames, NOTICE and GOODBYE.
    pub const CONNECTION: RequestId = RequestId(0);
}

/// A message kind (bytes 6..8). `docs/protocol.md` and [`crate::message::Kind`] list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kind(pub u16);

/// The flag byte (byte 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// No flags: a request, or a connection-level message.
    pub const NONE: Flags = Flags(0);
    /// The frame answers a request (its id names the request).
    pub const REPLY: Flags = Flags(1);
    /// With `REPLY`: a partial reply; more parts follow. Without it the reply is final.
    pub const MORE: Flags = Flags(2);
    /// With `REPLY`: the final reply is an error (the body is a [`crate::message::Fault`]).
    pub const ERROR: Flags = Flags(4);
    /// Every bit with a meaning; any other bit set is a bad frame.
    pub const KNOWN: u8 = 0b111;

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of bits.
    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Whether the combination is one the protocol defines: no unknown bits, and `MORE`/`ERROR`
    /// only on a reply and never together.
    pub const fn is_valid(self) -> bool {
        if self.0 & !Self::KNOWN != 0 {
            return false;
        }
        let reply = self.contains(Self::REPLY);
        let more = self.contains(Self::MORE);
        let error = self.contains(Self::ERROR);
        if !reply {
            !more && !error
        } else {
            !(more && error)
        }
    }
}

/// A decoded, verified frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame is.
    pub kind: Kind,
    /// Reply / more / error.
    pub flags: Flags,
    /// The request the frame belongs to.
    pub request_id: RequestId,
    /// Length of the body in bytes.
    pub body_len: u32,
    /// CRC32C of the body.
    pub body_crc: u32,
}

/// Why a frame was rejected. Every variant is something a peer sent; none is a local failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Bytes 0..4 are not [`MAGIC`]: the peer is not speaking this protocol.
    #[error("bad frame: wrong magic {found:#010x}")]
    BadMagic {
        /// What was there instead.
        found: u32,
    },
    /// A version this side does not speak.
    #[error("unsupported protocol version {found} (this side speaks {PROTOCOL_VERSION})")]
    UnsupportedVersion {
        /// The version in the frame.
        found: u8,
    },
    /// The header checksum does not match: nothing in the header can be trusted.
    #[error("bad frame: header checksum {found:#010x}, computed {computed:#010x}")]
    HeaderChecksum {
        /// The checksum in the frame.
        found: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
    /// Flag bits the protocol does not define, or a combination it forbids.
    #[error("bad frame: flags {flags:#04x}")]
    BadFlags {
        /// The flag byte.
        flags: u8,
        /// The frame's (checksummed, so trustworthy) request id.
        request_id: RequestId,
    },
    /// The reserved word is not zero.
    #[error("bad frame: reserved word {found:#x} is not zero")]
    Reserved {
        /// What was there.
        found: u32,
        /// The frame's request id.
        request_id: RequestId,
    },
    /// Kind 0 is never valid.
    #[error("bad frame: message kind 0")]
    ZeroKind {
        /// The frame's request id.
        request_id: RequestId,
    },
    /// The body is longer than this side accepts. Nothing was allocated for it.
    #[error("frame body of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The length the header claims.
        len: u32,
        /// The limit in force.
        max: u32,
        /// The frame's kind.
        kind: Kind,
        /// The frame's request id.
        request_id: RequestId,
    },
    /// The body does not match its checksum.
    #[error("bad frame: body checksum {found:#010x}, computed {computed:#010x}")]
    BodyChecksum {
        /// The checksum in the header.
        found: u32,
        /// The checksum of the body received.
        computed: u32,
        /// The frame's kind.
        kind: Kind,
        /// The frame's request id.
        request_id: RequestId,
    },
    /// The stream ended inside a frame.
    #[error("truncated frame: the stream ended {have} bytes into a frame of {need}")]
    Truncated {
        /// Bytes of the frame received.
        have: usize,
        /// Bytes the frame needs (the header alone while the header is incomplete).
        need: usize,
    },
}

impl FrameError {
    /// The request the bad frame belongs to, when its header was verified and so the id can be
    /// trusted enough to address an error reply to it.
    pub fn request(&self) -> Option<(Kind, RequestId)> {
        match *self {
            FrameError::TooLarge { kind, request_id, .. } | FrameError::BodyChecksum { kind, request_id, .. } => {
                Some((kind, request_id))
            }
            _ => None,
        }
    }
}

impl FrameHeader {
    /// Encodes the header, computing its checksum.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = PROTOCOL_VERSION;
        b[5] = self.flags.0;
        b[6..8].copy_from_slice(&self.kind.0.to_le_bytes());
        b[8..16].copy_from_slice(&self.request_id.0.to_le_bytes());
        b[16..20].copy_from_slice(&self.body_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.body_crc.to_le_bytes());
        // 24..28 reserved, zero.
        let crc = crc32c::crc32c(&b[..HEADER_CRC_OFFSET]);
        b[HEADER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and verifies a header (magic, version, checksum, flags, reserved word, kind). The
    /// body length is not checked against a limit here; [`FrameDecoder`] does that.
    pub fn decode(b: &[u8; HEADER_SIZE]) -> Result<FrameHeader, FrameError> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(FrameError::BadMagic { found: magic });
        }
        if b[4] != PROTOCOL_VERSION {
            return Err(FrameError::UnsupportedVersion { found: b[4] });
        }
        let found = u32_at(HEADER_CRC_OFFSET);
        let computed = crc32c::crc32c(&b[..HEADER_CRC_OFFSET]);
        if found != computed {
            return Err(FrameError::HeaderChecksum { found, computed });
        }
        let request_id = RequestId(u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")));
        let flags = Flags(b[5]);
        if !flags.is_valid() {
            return Err(FrameError::BadFlags {
                flags: b[5],
                request_id,
            });
        }
        let reserved = u32_at(24);
        if reserved != 0 {
            return Err(FrameError::Reserved {
                found: reserved,
                request_id,
            });
        }
        let kind = Kind(u16::from_le_bytes([b[6], b[7]]));
        if kind.0 == 0 {
            return Err(FrameError::ZeroKind { request_id });
        }
        Ok(FrameHeader {
            kind,
            flags,
            request_id,
            body_len: u32_at(16),
            body_crc: u32_at(20),
        })
    }
}

/// A whole, verified frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The verified header.
    pub header: FrameHeader,
    /// The body (`header.body_len` bytes, checksum verified).
    pub body: Bytes,
}

/// Appends one frame (header and body) to `out`.
///
/// # Panics
/// If the body is 4 GiB or longer (a caller's bug: every sender checks its limit first).
pub fn encode_frame(kind: Kind, flags: Flags, request_id: RequestId, body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&encode_header(kind, flags, request_id, body));
    out.extend_from_slice(body);
}

/// The header of a frame carrying `body`.
///
/// # Panics
/// If the body is 4 GiB or longer.
pub fn encode_header(kind: Kind, flags: Flags, request_id: RequestId, body: &[u8]) -> [u8; HEADER_SIZE] {
    debug_assert!(flags.is_valid(), "invalid flags {flags:?}");
    let body_len = u32::try_from(body.len()).expect("frame body under 4 GiB");
    let body_crc = if body.is_empty() { 0 } else { crc32c::crc32c(body) };
    FrameHeader {
        kind,
        flags,
        request_id,
        body_len,
        body_crc,
    }
    .encode()
}

/// An incremental frame decoder: bytes go into [`FrameDecoder::buffer_mut`] as they arrive (in
/// any split), whole frames come out of [`FrameDecoder::decode`].
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    body_max: u32,
    /// The verified header of the frame whose body is being received.
    current: Option<FrameHeader>,
}

impl FrameDecoder {
    /// A decoder accepting bodies of up to `body_max` bytes.
    pub fn new(body_max: u32) -> FrameDecoder {
        FrameDecoder {
            buf: BytesMut::new(),
            body_max,
            current: None,
        }
    }

    /// Changes the body limit (raised after the handshake). Applies to frames whose header has
    /// not yet been decoded.
    pub fn set_body_max(&mut self, body_max: u32) {
        self.body_max = body_max;
    }

    /// The body limit in force.
    pub fn body_max(&self) -> u32 {
        self.body_max
    }

    /// The buffer incoming bytes are appended to.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Appends received bytes (for callers that do not read into [`FrameDecoder::buffer_mut`]).
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet handed out as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The verified header of the frame now being received, if its header is complete.
    pub fn current(&self) -> Option<&FrameHeader> {
        self.current.as_ref()
    }

    /// Makes room for the next read and returns how many bytes to ask for: what the current frame
    /// still needs, at least a header's worth, at most [`READ_CHUNK`].
    pub fn read_hint(&mut self) -> usize {
        let need = match self.current {
            Some(h) => HEADER_SIZE + h.body_len as usize,
            None => HEADER_SIZE,
        };
        let want = need.saturating_sub(self.buf.len()).clamp(HEADER_SIZE, READ_CHUNK);
        self.buf.reserve(want);
        want
    }

    /// The next whole frame, `None` if more bytes are needed. After an error the stream is out of
    /// step and the connection must be closed.
    pub fn decode(&mut self) -> Result<Option<Frame>, FrameError> {
        let header = match self.current {
            Some(h) => h,
            None => {
                if self.buf.len() < HEADER_SIZE {
                    return Ok(None);
                }
                let raw: &[u8; HEADER_SIZE] = self.buf[..HEADER_SIZE].try_into().expect("header size");
                let h = FrameHeader::decode(raw)?;
                if h.body_len > self.body_max {
                    return Err(FrameError::TooLarge {
                        len: h.body_len,
                        max: self.body_max,
                        kind: h.kind,
                        request_id: h.request_id,
                    });
                }
                self.current = Some(h);
                h
            }
        };
        let need = HEADER_SIZE + header.body_len as usize;
        if self.buf.len() < need {
            return Ok(None);
        }
        self.current = None;
        self.buf.advance(HEADER_SIZE);
        let body = self.buf.split_to(header.body_len as usize).freeze();
        let computed = if body.is_empty() { 0 } else { crc32c::crc32c(&body) };
        if computed != header.body_crc {
            return Err(FrameError::BodyChecksum {
                found: header.body_crc,
                computed,
                kind: header.kind,
                request_id: header.request_id,
            });
        }
        Ok(Some(Frame { header, body }))
    }

    /// Called at end of stream: an error if a frame was left incomplete.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let need = self.current.map_or(HEADER_SIZE, |h| HEADER_SIZE + h.body_len as usize);
        Err(FrameError::Truncated {
            have: self.buf.len(),
            need,
        })
    }

    /// Checks the decoder's invariants (tests and debug builds).
    pub fn check_invariants(&self) {
        if let Some(h) = self.current {
            assert!(
                h.body_len <= self.body_max || self.body_max == 0,
                "current frame over the limit"
            );
            assert!(self.buf.len() >= HEADER_SIZE, "current header without its bytes");
            assert!(
                self.buf.len() < HEADER_SIZE + h.body_len as usize,
                "a complete frame left undecoded"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u16, flags: Flags, id: u64, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_frame(Kind(kind), flags, RequestId(id), body, &mut out);
        out
    }

    #[test]
    fn header_round_trip() {
        let bytes = frame(0x101, Flags::REPLY.with(Flags::MORE), 42, b"hello");
        let h = FrameHeader::decode(bytes[..HEADER_SIZE].try_into().unwrap()).unwrap();
        assert_eq!(h.kind, Kind(0x101));
        assert_eq!(h.flags, Flags(3));
        assert_eq!(h.request_id, RequestId(42));
        assert_eq!(h.body_len, 5);
        assert_eq!(h.body_crc, crc32c::crc32c(b"hello"));
    }

    #[test]
    fn every_header_field_is_checked() {
        let good = frame(0x101, Flags::NONE, 7, b"x");
        let decode = |b: &[u8]| FrameHeader::decode(b[..HEADER_SIZE].try_into().unwrap());
        let mut b = good.clone();
        b[0] ^= 1;
        assert!(matches!(decode(&b), Err(FrameError::BadMagic { .. })));
        let mut b = good.clone();
        b[4] = 9;
        assert_eq!(decode(&b), Err(FrameError::UnsupportedVersion { found: 9 }));
        for i in 5..HEADER_SIZE {
            let mut b = good.clone();
            b[i] ^= 0x10;
            assert!(matches!(decode(&b), Err(FrameError::HeaderChecksum { .. })), "byte {i}");
        }
        for (flags, ok) in [
            (0u8, true),
            (1, true),
            (3, true),
            (5, true),
            (2, false),
            (4, false),
            (7, false),
            (8, false),
        ] {
            let mut b = good.clone();
            b[5] = flags;
            let crc = crc32c::crc32c(&b[..28]);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(decode(&b).is_ok(), ok, "flags {flags}");
        }
    }

    #[test]
    fn hostile_length_allocates_nothing_of_it() {
        let mut d = FrameDecoder::new(u32::MAX);
        let mut b = frame(0x101, Flags::NONE, 1, b"");
        b[16..20].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        d.push(&b);
        assert_eq!(d.decode(), Ok(None));
        let hint = d.read_hint();
        assert!(hint <= READ_CHUNK);
        assert!(d.buffer_mut().capacity() <= 2 * READ_CHUNK + HEADER_SIZE);
        d.check_invariants();
        let mut small = FrameDecoder::new(1024);
        small.push(&b);
        assert!(matches!(small.decode(), Err(FrameError::TooLarge { len, max: 1024, .. }) if len == u32::MAX - 1));
    }

    #[test]
    fn body_checksum_and_truncation() {
        let mut b = frame(0x101, Flags::NONE, 3, b"body");
        let last = b.len() - 1;
        b[last] ^= 1;
        let mut d = FrameDecoder::new(100);
        d.push(&b);
        assert!(matches!(
            d.decode(),
            Err(FrameError::BodyChecksum {
                request_id: RequestId(3),
                ..
            })
        ));

        let b = frame(0x101, Flags::NONE, 3, b"body");
        let mut d = FrameDecoder::new(100);
        d.push(&b[..b.len() - 1]);
        assert_eq!(d.decode(), Ok(None));
        assert_eq!(d.finish(), Err(FrameError::Truncated { have: 35, need: 36 }));
        let mut d = FrameDecoder::new(100);
        d.push(&b[..10]);
        assert_eq!(d.finish(), Err(FrameError::Truncated { have: 10, need: 32 }));
    }
}
