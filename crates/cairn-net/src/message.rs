//! Messages: what a frame's kind, flags and body mean.
//!
//! The kind space is split in two (`docs/protocol.md` has the byte diagrams):
//!
//! | kind | message | direction | id |
//! |---|---|---|---|
//! | `0x0001` HELLO | [`Hello`]: architecture, SCRAM client-first message (or none), client name | client → server, first frame | 0 |
//! | `0x0002` WELCOME | [`Welcome`]: version, capabilities, limits, session id | server → client | 0 |
//! | `0x0003` REFUSAL | [`Fault`]: why the handshake failed; the server closes | server → client | 0 |
//! | `0x0004` GOODBYE | [`Fault`]: why the server is closing the connection | server → client | 0 or the offending request |
//! | `0x0005` PING | empty request answered by the RPC layer itself | client → server | request |
//! | `0x0006` NOTICE | opaque body (the handler's): a message the server sends unasked, at any time | server → client | 0 |
//! | `0x0007` CHALLENGE | the SCRAM server-first message (`crate::scram`) | server → client, after a HELLO with a client-first message | 0 |
//! | `0x0008` AUTH | the SCRAM client-final message | client → server, answering CHALLENGE | 0 |
//! | `0x0009..=0x00FF` | reserved for the envelope; a peer sending one gets UNKNOWN_KIND and is closed | | |
//! | `0x0100..=0xFFFF` | service requests, handed to the server's [`crate::rpc::Handler`] | client → server | request |
//!
//! A reply carries its request's kind and id with the REPLY flag: a part has MORE, the final
//! reply has neither MORE nor ERROR, an error reply has ERROR and a [`Fault`] body. So the
//! database-specific services (issue 6 on) only define kinds from `0x0100` and their bodies; the
//! envelope, matching and streaming stay the same.
//!
//! A NOTICE answers nothing and is answered by nothing: it carries no flags and id 0, so it can
//! never be mistaken for a reply (a frame of kind `0x0006` *with* the REPLY flag is a reply, like
//! any kind's, and a client rejects it as a reply to no request). Its body is opaque here; the
//! server's handler and the code above the client agree on its meaning (cache callbacks). A
//! client sending one breaks the protocol like any other server-to-client message.
//!
//! Decoding follows the frame rule: lengths are checked against what is there before anything is
//! taken, and trailing bytes are an error.

use bytes::Bytes;

pub use crate::frame::Kind;
use crate::frame::{Flags, Frame, FrameHeader, RequestId};

impl Kind {
    /// The client's first frame.
    pub const HELLO: Kind = Kind(0x0001);
    /// The server's acceptance of a HELLO.
    pub const WELCOME: Kind = Kind(0x0002);
    /// The server's refusal of a HELLO; the connection closes after it.
    pub const REFUSAL: Kind = Kind(0x0003);
    /// The server closes the connection, saying why.
    pub const GOODBYE: Kind = Kind(0x0004);
    /// A request answered by the RPC layer itself with an empty final reply.
    pub const PING: Kind = Kind(0x0005);
    /// A message the server sends unasked (server → client only, no flags, id 0, opaque body).
    pub const NOTICE: Kind = Kind(0x0006);
    /// The server's SCRAM server-first message, answering a HELLO that asked to log in.
    pub const CHALLENGE: Kind = Kind(0x0007);
    /// The client's SCRAM client-final message, answering a CHALLENGE.
    pub const AUTH: Kind = Kind(0x0008);
    /// The first kind the server hands to its handler.
    pub const SERVICE_MIN: Kind = Kind(0x0100);

    /// Whether the kind is a service kind (handed to the handler).
    pub const fn is_service(self) -> bool {
        self.0 >= Self::SERVICE_MIN.0
    }
}

/// The client architecture a connection asks for (ARCHITECTURE.md, the four client kinds). The RPC layer only carries it;
/// the server's handler decides whether it serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Architecture(pub u16);

impl Architecture {
    /// Plain RPC, no database session (benchmarks, tests, health checks).
    pub const RPC: Architecture = Architecture(0);
    /// Page server.
    pub const PAGE: Architecture = Architecture(1);
    /// Object server.
    pub const OBJECT: Architecture = Architecture(2);
    /// File server.
    pub const FILE: Architecture = Architecture(3);
}

/// Why something failed, as sent in error replies, refusals and goodbyes. Codes below
/// [`ErrorCode::APPLICATION_MIN`] belong to the protocol; the handler uses the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    /// A frame failed its checks (magic, header checksum, flags, reserved word).
    pub const BAD_FRAME: ErrorCode = ErrorCode(1);
    /// A body over the limit.
    pub const TOO_LARGE: ErrorCode = ErrorCode(2);
    /// A body that does not match its checksum.
    pub const BAD_CHECKSUM: ErrorCode = ErrorCode(3);
    /// The stream ended, or stalled past the frame timeout, inside a frame.
    pub const TRUNCATED: ErrorCode = ErrorCode(4);
    /// A message kind the receiver does not know, or not expected in that direction.
    pub const UNKNOWN_KIND: ErrorCode = ErrorCode(5);
    /// A well-formed message at the wrong time (e.g. a request before HELLO) or a malformed body.
    pub const PROTOCOL: ErrorCode = ErrorCode(6);
    /// A protocol version the server does not speak.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(7);
    /// The login failed: an unknown user or a wrong password (never said which), a server that
    /// wants a user and got none, or a server that could not prove it knows the password.
    pub const AUTH_FAILED: ErrorCode = ErrorCode(8);
    /// The architecture asked for is not served.
    pub const UNSUPPORTED_ARCHITECTURE: ErrorCode = ErrorCode(9);
    /// The server is at its connection limit.
    pub const TOO_MANY_CONNECTIONS: ErrorCode = ErrorCode(10);
    /// The handshake did not complete in time.
    pub const HANDSHAKE_TIMEOUT: ErrorCode = ErrorCode(11);
    /// The server is shutting down.
    pub const SHUTTING_DOWN: ErrorCode = ErrorCode(12);
    /// The handler failed without answering (it panicked or was cancelled).
    pub const INTERNAL: ErrorCode = ErrorCode(13);
    /// Too many failed logins from this address lately: refused without checking the password;
    /// retry later.
    pub const TOO_MANY_FAILED_LOGINS: ErrorCode = ErrorCode(14);
    /// The first code the server's handler may use for its own errors.
    pub const APPLICATION_MIN: ErrorCode = ErrorCode(0x1000);
}

/// A reason with a code: the body of ERROR replies, REFUSAL and GOODBYE.
///
/// ```text
/// code u16 | message_len u16 | message (UTF-8) | detail_len u32 | detail
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// What kind of failure.
    pub code: ErrorCode,
    /// For people.
    pub message: String,
    /// For programs (handler-defined; empty for protocol faults).
    pub detail: Bytes,
}

impl Fault {
    /// A fault without detail. The message is cut to 65,535 bytes (at a character boundary).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Fault {
        let mut message = message.into();
        if message.len() > u16::MAX as usize {
            let mut end = u16::MAX as usize;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        Fault {
            code,
            message,
            detail: Bytes::new(),
        }
    }

    /// Encodes the body.
    pub fn encode(&self) -> Vec<u8> {
        let message = &self.message.as_bytes()[..self.message.len().min(u16::MAX as usize)];
        let mut w = Writer::with_capacity(8 + message.len() + self.detail.len());
        w.put(&self.code.0.to_le_bytes());
        w.put(&(message.len() as u16).to_le_bytes());
        w.put(message);
        w.put(&(self.detail.len() as u32).to_le_bytes());
        w.put(&self.detail);
        w.into_bytes()
    }

    /// Decodes a body.
    pub fn decode(body: &[u8]) -> Result<Fault, MessageError> {
        let mut r = Reader::within("fault", body);
        let code = ErrorCode(r.u16("code")?);
        let message = r.str16("message").map(str::to_owned)?;
        let detail = Bytes::copy_from_slice(r.bytes32("detail")?);
        r.finish("the body")?;
        Ok(Fault { code, message, detail })
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code.0)
    }
}

/// The client's first frame.
///
/// ```text
/// architecture u16 | auth_len u16 | auth | name_len u16 | client name (UTF-8)
/// ```
/// `auth` is the SCRAM client-first message (`n,,n=USER,r=NONCE`, see [`crate::scram`]), or
/// empty for a client that does not log in (a server with users refuses it).
/// The magic and protocol version are the frame header's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The architecture asked for.
    pub architecture: Architecture,
    /// The SCRAM client-first message, or empty.
    pub auth: Bytes,
    /// The client's name, for logs.
    pub client_name: String,
}

impl Hello {
    /// Encodes the body. Auth and name are cut to 65,535 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let token = &self.auth[..self.auth.len().min(u16::MAX as usize)];
        let name = truncate_str(&self.client_name, u16::MAX as usize);
        let mut w = Writer::with_capacity(6 + token.len() + name.len());
        w.put(&self.architecture.0.to_le_bytes());
        w.put(&(token.len() as u16).to_le_bytes());
        w.put(token);
        w.put(&(name.len() as u16).to_le_bytes());
        w.put(name.as_bytes());
        w.into_bytes()
    }

    /// Decodes a body.
    pub fn decode(body: &[u8]) -> Result<Hello, MessageError> {
        let mut r = Reader::within("hello", body);
        let architecture = Architecture(r.u16("architecture")?);
        let auth = Bytes::copy_from_slice(r.bytes16("auth")?);
        let client_name = r.str16("client name").map(str::to_owned)?;
        r.finish("the body")?;
        Ok(Hello {
            architecture,
            auth,
            client_name,
        })
    }
}

/// Capability bits a WELCOME announces. The low 16 bits belong to this layer; the handler
/// supplies the rest ([`crate::rpc::Handler::capabilities`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Capabilities(pub u64);

impl Capabilities {
    /// Replies may come in parts.
    pub const PARTIAL_REPLIES: Capabilities = Capabilities(1);
    /// PING is answered.
    pub const PING: Capabilities = Capabilities(2);
    /// Everything this layer offers.
    pub const NET: Capabilities = Capabilities(3);
}

/// The server's acceptance.
///
/// ```text
/// version u16 | capabilities u64 | body_max u32 | in_flight_max u32 | session u64 | name_len u16 | server name
/// | auth_len u16 | auth
/// ```
/// `auth` is the SCRAM server-final message (`v=SIGNATURE`) after a login, else empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The protocol version the server speaks on this connection.
    pub version: u16,
    /// What the server offers.
    pub capabilities: Capabilities,
    /// The largest body the server accepts from now on.
    pub body_max: u32,
    /// Requests the server runs at once for this connection; more wait in the socket.
    pub in_flight_max: u32,
    /// The session's id (for logs on both sides).
    pub session: u64,
    /// The server's name and version, for logs.
    pub server_name: String,
    /// The SCRAM server-final message, or empty.
    pub auth: Bytes,
}

impl Welcome {
    /// Encodes the body.
    pub fn encode(&self) -> Vec<u8> {
        let name = truncate_str(&self.server_name, u16::MAX as usize);
        let mut w = Writer::with_capacity(32 + name.len());
        w.put(&self.version.to_le_bytes());
        w.put(&self.capabilities.0.to_le_bytes());
        w.put(&self.body_max.to_le_bytes());
        w.put(&self.in_flight_max.to_le_bytes());
        w.put(&self.session.to_le_bytes());
        w.put(&(name.len() as u16).to_le_bytes());
        w.put(name.as_bytes());
        let auth = &self.auth[..self.auth.len().min(u16::MAX as usize)];
        w.put(&(auth.len() as u16).to_le_bytes());
        w.put(auth);
        w.into_bytes()
    }

    /// Decodes a body.
    pub fn decode(body: &[u8]) -> Result<Welcome, MessageError> {
        let mut r = Reader::within("welcome", body);
        let w = Welcome {
            version: r.u16("version")?,
            capabilities: Capabilities(r.u64("capabilities")?),
            body_max: r.u32("body max")?,
            in_flight_max: r.u32("in flight max")?,
            session: r.u64("session")?,
            server_name: r.str16("server name").map(str::to_owned)?,
            auth: Bytes::copy_from_slice(r.bytes16("auth")?),
        };
        r.finish("the body")?;
        Ok(w)
    }
}

/// Every message of the envelope, decoded from a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// HELLO.
    Hello(Hello),
    /// WELCOME.
    Welcome(Welcome),
    /// REFUSAL.
    Refusal(Fault),
    /// GOODBYE, naming the request that caused it if any.
    Goodbye {
        /// The offending request, or [`RequestId::CONNECTION`].
        request_id: RequestId,
        /// Why.
        fault: Fault,
    },
    /// A request (PING or a service kind).
    Request {
        /// The request's kind.
        kind: Kind,
        /// Its id.
        id: RequestId,
        /// Its body.
        body: Bytes,
    },
    /// A partial reply: more parts follow.
    ReplyPart {
        /// The request's kind.
        kind: Kind,
        /// The request's id.
        id: RequestId,
        /// This part.
        body: Bytes,
    },
    /// The final reply.
    Reply {
        /// The request's kind.
        kind: Kind,
        /// The request's id.
        id: RequestId,
        /// The reply.
        body: Bytes,
    },
    /// The final reply, an error.
    ErrorReply {
        /// The request's kind.
        kind: Kind,
        /// The request's id.
        id: RequestId,
        /// Why.
        fault: Fault,
    },
    /// NOTICE: a message from the server that answers no request.
    Notice {
        /// Opaque to this layer (the handler's).
        body: Bytes,
    },
    /// CHALLENGE: the SCRAM server-first message.
    Challenge(Bytes),
    /// AUTH: the SCRAM client-final message.
    Auth(Bytes),
}

/// Why a well-framed message was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// A kind in the envelope's reserved range, or an envelope kind with the wrong flags or id.
    #[error("unknown message kind {:#06x} with flags {flags:#04x}", kind.0)]
    UnknownKind {
        /// The kind.
        kind: Kind,
        /// The flags.
        flags: u8,
        /// The frame's request id.
        request_id: RequestId,
    },
    /// A body that does not decode.
    #[error("malformed {what} body: {problem}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
    /// A body whose bytes do not decode: a field cut short, a count that
    /// cannot fit, text that is not UTF-8, bytes after the end.
    #[error("malformed body: {0}")]
    Body(#[from] cairn_codec::DecodeError),
}

impl Message {
    /// The frame fields of the message: kind, flags, id and body.
    pub fn to_parts(&self) -> (Kind, Flags, RequestId, Bytes) {
        let conn = RequestId::CONNECTION;
        match self {
            Message::Hello(h) => (Kind::HELLO, Flags::NONE, conn, h.encode().into()),
            Message::Welcome(w) => (Kind::WELCOME, Flags::NONE, conn, w.encode().into()),
            Message::Refusal(f) => (Kind::REFUSAL, Flags::NONE, conn, f.encode().into()),
            Message::Goodbye { request_id, fault } => (Kind::GOODBYE, Flags::NONE, *request_id, fault.encode().into()),
            Message::Request { kind, id, body } => (*kind, Flags::NONE, *id, body.clone()),
            Message::ReplyPart { kind, id, body } => (*kind, Flags::REPLY.with(Flags::MORE), *id, body.clone()),
            Message::Reply { kind, id, body } => (*kind, Flags::REPLY, *id, body.clone()),
            Message::ErrorReply { kind, id, fault } => {
                (*kind, Flags::REPLY.with(Flags::ERROR), *id, fault.encode().into())
            }
            Message::Notice { body } => (Kind::NOTICE, Flags::NONE, conn, body.clone()),
            Message::Challenge(body) => (Kind::CHALLENGE, Flags::NONE, conn, body.clone()),
            Message::Auth(body) => (Kind::AUTH, Flags::NONE, conn, body.clone()),
        }
    }

    /// Appends the message as one frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, flags, id, body) = self.to_parts();
        crate::frame::encode_frame(kind, flags, id, &body, out);
    }

    /// Interprets a verified frame.
    pub fn from_frame(frame: Frame) -> Result<Message, MessageError> {
        let Frame { header, body } = frame;
        let FrameHeader {
            kind,
            flags,
            request_id,
            ..
        } = header;
        let unknown = MessageError::UnknownKind {
            kind,
            flags: flags.0,
            request_id,
        };
        // A reply echoes its request's kind, whatever it was (even an unknown kind's error
        // reply), so replies are recognised by the flag alone.
        if kind.is_service() || kind == Kind::PING || flags.contains(Flags::REPLY) {
            return Ok(if !flags.contains(Flags::REPLY) {
                Message::Request {
                    kind,
                    id: request_id,
                    body,
                }
            } else if flags.contains(Flags::MORE) {
                Message::ReplyPart {
                    kind,
                    id: request_id,
                    body,
                }
            } else if flags.contains(Flags::ERROR) {
                Message::ErrorReply {
                    kind,
                    id: request_id,
                    fault: Fault::decode(&body)?,
                }
            } else {
                Message::Reply {
                    kind,
                    id: request_id,
                    body,
                }
            });
        }
        if flags != Flags::NONE {
            return Err(unknown);
        }
        let connection_level = request_id == RequestId::CONNECTION;
        match kind {
            Kind::HELLO if connection_level => Ok(Message::Hello(Hello::decode(&body)?)),
            Kind::WELCOME if connection_level => Ok(Message::Welcome(Welcome::decode(&body)?)),
            Kind::REFUSAL if connection_level => Ok(Message::Refusal(Fault::decode(&body)?)),
            Kind::GOODBYE => Ok(Message::Goodbye {
                request_id,
                fault: Fault::decode(&body)?,
            }),
            Kind::NOTICE if connection_level => Ok(Message::Notice { body }),
            Kind::CHALLENGE if connection_level => Ok(Message::Challenge(body)),
            Kind::AUTH if connection_level => Ok(Message::Auth(body)),
            _ => Err(unknown),
        }
    }
}

pub(crate) fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The one byte reader and writer, which every decoder and encoder of the
/// protocol uses.
pub(crate) use cairn_codec::{Reader, Writer};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameDecoder;

    pub(crate) fn every_message() -> Vec<Message> {
        let fault = Fault {
            code: ErrorCode(0x1234),
            message: "nope".into(),
            detail: Bytes::from_static(b"\x01\x02"),
        };
        vec![
            Message::Hello(Hello {
                architecture: Architecture::OBJECT,
                auth: Bytes::from_static(b"n,,n=user,r=abc"),
                client_name: "test client".into(),
            }),
            Message::Welcome(Welcome {
                version: 1,
                capabilities: Capabilities(0x1_0003),
                body_max: 1 << 24,
                in_flight_max: 256,
                session: 99,
                server_name: "cairn".into(),
                auth: Bytes::from_static(b"v=sig"),
            }),
            Message::Refusal(Fault::new(ErrorCode::AUTH_FAILED, "authentication failed")),
            Message::Challenge(Bytes::from_static(b"r=abcdef,s=c2FsdA==,i=4096")),
            Message::Auth(Bytes::from_static(b"c=biws,r=abcdef,p=cHJvb2Y=")),
            Message::Goodbye {
                request_id: RequestId(5),
                fault: fault.clone(),
            },
            Message::Request {
                kind: Kind::PING,
                id: RequestId(1),
                body: Bytes::new(),
            },
            Message::Request {
                kind: Kind(0x0101),
                id: RequestId(2),
                body: Bytes::from_static(b"request"),
            },
            Message::ReplyPart {
                kind: Kind(0x0101),
                id: RequestId(2),
                body: Bytes::from_static(b"part"),
            },
            Message::Reply {
                kind: Kind(0xFFFF),
                id: RequestId(u64::MAX),
                body: Bytes::from_static(b"final"),
            },
            Message::ErrorReply {
                kind: Kind(0x0101),
                id: RequestId(3),
                fault,
            },
            Message::Notice {
                body: Bytes::from_static(b"callback"),
            },
            Message::Notice { body: Bytes::new() },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in every_message() {
            let mut bytes = Vec::new();
            m.encode(&mut bytes);
            let mut d = FrameDecoder::new(1 << 20);
            d.push(&bytes);
            let frame = d.decode().unwrap().unwrap();
            assert_eq!(Message::from_frame(frame).unwrap(), m);
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn reserved_kinds_and_trailing_bytes_are_rejected() {
        let frame = |kind: u16, flags: Flags, id: u64, body: &[u8]| {
            let mut bytes = Vec::new();
            crate::frame::encode_frame(Kind(kind), flags, RequestId(id), body, &mut bytes);
            let mut d = FrameDecoder::new(1 << 20);
            d.push(&bytes);
            d.decode().unwrap().unwrap()
        };
        assert!(matches!(
            Message::from_frame(frame(0x77, Flags::NONE, 1, b"")),
            Err(MessageError::UnknownKind { .. })
        ));
        assert!(matches!(
            Message::from_frame(frame(1, Flags::NONE, 3, b"")),
            Err(MessageError::UnknownKind { .. })
        ));
        assert!(matches!(
            Message::from_frame(frame(0x77, Flags::REPLY, 3, b"")),
            Ok(Message::Reply { .. })
        ));
        let mut body = Fault::new(ErrorCode::PROTOCOL, "x").encode();
        body.push(0);
        assert!(matches!(
            Message::from_frame(frame(4, Flags::NONE, 0, &body)),
            Err(MessageError::Body(e)) if e.reason == "1 trailing bytes"
        ));
        assert!(matches!(
            Message::from_frame(frame(1, Flags::NONE, 0, &[1])),
            Err(MessageError::Body(e)) if e.reason.starts_with("needs")
        ));
    }

    fn frame_of(kind: Kind, flags: Flags, id: u64, body: &[u8]) -> Frame {
        let mut bytes = Vec::new();
        crate::frame::encode_frame(kind, flags, RequestId(id), body, &mut bytes);
        let mut d = FrameDecoder::new(1 << 20);
        d.push(&bytes);
        d.decode().unwrap().unwrap()
    }

    #[test]
    fn notice_is_kind_6_without_flags_on_the_connection_id() {
        let m = Message::Notice {
            body: Bytes::from_static(b"page 7"),
        };
        let (kind, flags, id, body) = m.to_parts();
        assert_eq!((kind, flags, id), (Kind(0x0006), Flags::NONE, RequestId::CONNECTION));
        assert_eq!(body, Bytes::from_static(b"page 7"));
        assert_eq!(
            Message::from_frame(frame_of(Kind::NOTICE, Flags::NONE, 0, b"page 7")).unwrap(),
            m
        );
        // The body is opaque: any bytes, or none, decode.
        assert_eq!(
            Message::from_frame(frame_of(Kind::NOTICE, Flags::NONE, 0, &[0xFF; 3])).unwrap(),
            Message::Notice {
                body: Bytes::from_static(&[0xFF; 3])
            }
        );
    }

    #[test]
    fn notice_with_a_request_id_is_unknown() {
        for id in [1, 42, u64::MAX] {
            assert_eq!(
                Message::from_frame(frame_of(Kind::NOTICE, Flags::NONE, id, b"x")),
                Err(MessageError::UnknownKind {
                    kind: Kind::NOTICE,
                    flags: 0,
                    request_id: RequestId(id),
                })
            );
        }
    }

    #[test]
    fn notice_kind_with_flags_is_never_a_notice() {
        // The only flag combinations a frame may carry at all are reply ones, and a reply echoes
        // its request's kind whatever it is: such a frame is a reply (to a request of kind 6,
        // which no client sends, so the client rejects it as a reply to no request).
        for flags in [
            Flags::REPLY,
            Flags::REPLY.with(Flags::MORE),
            Flags::REPLY.with(Flags::ERROR),
        ] {
            let body = Fault::new(ErrorCode::PROTOCOL, "x").encode();
            let m = Message::from_frame(frame_of(Kind::NOTICE, flags, 0, &body)).unwrap();
            assert!(!matches!(m, Message::Notice { .. }), "flags {flags:?} decoded as {m:?}");
        }
        // Any other flag bits are refused by the frame decoder before the message is looked at.
        for bits in [Flags::MORE.0, Flags::ERROR.0, 0x08, 0x80] {
            let mut bytes = Vec::new();
            crate::frame::encode_frame(Kind::NOTICE, Flags::NONE, RequestId(0), b"", &mut bytes);
            bytes[5] = bits;
            let crc = crc32c::crc32c(&bytes[..28]);
            bytes[28..32].copy_from_slice(&crc.to_le_bytes());
            let mut d = FrameDecoder::new(1 << 20);
            d.push(&bytes);
            assert!(
                matches!(d.decode(), Err(crate::frame::FrameError::BadFlags { .. })),
                "flags {bits:#04x}"
            );
        }
    }

    #[test]
    fn kind_9_is_still_reserved() {
        assert!(matches!(
            Message::from_frame(frame_of(Kind(0x0009), Flags::NONE, 0, b"")),
            Err(MessageError::UnknownKind { .. })
        ));
        assert!(
            matches!(
                Message::from_frame(frame_of(Kind::CHALLENGE, Flags::NONE, 3, b"")),
                Err(MessageError::UnknownKind { .. })
            ),
            "a CHALLENGE belongs to the connection, not a request"
        );
        assert!(!Kind::NOTICE.is_service());
    }
}
