//! Opening a connection ([`Client::connect`]): the socket (TCP, Unix, or TLS over TCP), then the
//! handshake (HELLO; for a login, the server's CHALLENGE answered with AUTH; WELCOME, which must
//! prove the server knows the password), all by the connect deadline; frames that came with the
//! WELCOME are handed out before the client is returned.

use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{
    lock, tls, Client, ClientOptions, Inner, ReadSide, Round, Sock, State, Writer, READ_BUF, READ_POLL, WRITE_STALL,
};
use crate::error::{Error, Result};
use crate::frame::FrameDecoder;
use crate::message::{ErrorCode, Fault, Hello, Message, Welcome};
use crate::scram::ClientFirst;
use crate::transport::Address;

impl Client {
    /// Connects (with TLS when [`ClientOptions::tls`] asks for it), says HELLO and waits for
    /// WELCOME, all within [`ClientOptions::connect_timeout`]. A REFUSAL is [`Error::Refused`]; a
    /// TLS failure (a certificate that does not verify, a server without TLS, a CA file that
    /// cannot be used) is [`Error::Tls`], saying why.
    pub fn connect(addr: &Address, opts: &ClientOptions) -> Result<Client> {
        let deadline = Instant::now() + opts.connect_timeout;
        let sock = match (addr, &opts.tls) {
            (Address::Tcp(a), settings) => {
                // The TLS settings first: a CA file that cannot be used fails before connecting.
                let tls_config = match settings {
                    Some(settings) => Some(settings.config(a.ip()).map_err(|e| Error::Tls(e.to_string()))?),
                    None => None,
                };
                let s = TcpStream::connect_timeout(a, opts.connect_timeout).map_err(|e| Error::io("connecting", e))?;
                s.set_nodelay(true).map_err(|e| Error::io("connecting", e))?;
                match tls_config {
                    Some((config, name)) => Sock::Tls(Box::new(tls::TlsSock::connect(s, config, name, deadline)?)),
                    None => Sock::Tcp(s),
                }
            }
            (Address::Unix(p), Some(_)) => {
                return Err(Error::Tls(format!(
                    "TLS is for TCP connections; {} is a Unix socket",
                    p.display()
                )))
            }
            (Address::Unix(p), None) => Sock::Unix(UnixStream::connect(p).map_err(|e| Error::io("connecting", e))?),
        };
        let (mut dec, welcome) = handshake(&sock, opts, deadline)?;
        sock.set_timeouts(Some(READ_POLL), Some(WRITE_STALL))
            .map_err(|e| Error::io("configuring the socket", e))?;
        // Frames that came in the same read as the WELCOME (a notice sent as the connection was
        // accepted) are handed out now: the reader decodes only after reading, and a poll of the
        // socket would not see them.
        let mut round = Round {
            frames: Vec::new(),
            failure: None,
            bytes: 0,
        };
        loop {
            match dec.decode() {
                Ok(Some(f)) => round.frames.push(f),
                Ok(None) => break,
                Err(e) => {
                    round.failure = Some(Error::Frame(e));
                    break;
                }
            }
        }
        let side = ReadSide {
            dec,
            buf: vec![0u8; READ_BUF].into_boxed_slice(),
        };
        let inner = Arc::new(Inner {
            sock,
            writer: Mutex::new(Writer {
                queued: Vec::new(),
                next_id: 1,
            }),
            has_queued: AtomicBool::new(false),
            state: Mutex::new(State::new(side)),
            changed: Condvar::new(),
            noticed: Condvar::new(),
            welcome,
        });
        if !round.frames.is_empty() || round.failure.is_some() {
            let mut st = lock(&inner.state);
            let side = st.read_side.take().expect("a new client's reading side is free");
            drop(inner.hand_out(st, side, round));
        }
        Ok(Client { inner })
    }
}

/// Says HELLO (and, to log in, answers the server's CHALLENGE with AUTH) and reads up to
/// WELCOME; returns the decoder (it may already hold frames that followed the WELCOME) and the
/// WELCOME. After a login the WELCOME must carry the server's proof that it knows the password.
fn handshake(sock: &Sock, opts: &ClientOptions, deadline: Instant) -> Result<(FrameDecoder, Welcome)> {
    let first = match &opts.login {
        Some(login) => Some(
            ClientFirst::new(&login.user)
                .map_err(|e| Error::Protocol(format!("cannot log in as {:?}: {e}", login.user)))?,
        ),
        None => None,
    };
    send_message(
        sock,
        &Message::Hello(Hello {
            architecture: opts.architecture,
            auth: first
                .as_ref()
                .map_or_else(Bytes::new, |f| Bytes::copy_from_slice(f.message())),
            client_name: opts.client_name.clone(),
        }),
        deadline,
        "sending HELLO",
    )?;
    let mut dec = FrameDecoder::new(opts.body_max);
    let mut pending = first;
    let mut proving = None;
    loop {
        match read_message(sock, &mut dec, deadline, "waiting for WELCOME")? {
            Message::Challenge(server_first) => {
                let (Some(first), Some(login)) = (pending.take(), &opts.login) else {
                    return Err(Error::Protocol(
                        "the server sent a CHALLENGE that nothing asked for".into(),
                    ));
                };
                let last = first
                    .receive_server_first(&server_first, &login.password)
                    .map_err(|e| Error::Protocol(format!("the server's login challenge: {e}")))?;
                let auth = Message::Auth(Bytes::copy_from_slice(last.message()));
                send_message(sock, &auth, deadline, "sending AUTH")?;
                proving = Some(last);
            }
            Message::Welcome(welcome) => {
                if pending.is_some() {
                    return Err(Error::Refused(Fault::new(
                        ErrorCode::AUTH_FAILED,
                        "the server accepted the connection without checking the password",
                    )));
                }
                if let Some(last) = proving {
                    last.verify_server_final(&welcome.auth).map_err(|e| {
                        Error::Refused(Fault::new(
                            ErrorCode::AUTH_FAILED,
                            format!("the server did not prove it knows the password: {e}"),
                        ))
                    })?;
                }
                return Ok((dec, welcome));
            }
            Message::Refusal(fault) => return Err(Error::Refused(fault)),
            Message::Goodbye { fault, .. } => return Err(Error::Closed(fault)),
            other => return Err(Error::Protocol(format!("expected WELCOME, got {other:?}"))),
        }
    }
}

/// Writes one handshake message whole by `deadline`.
fn send_message(sock: &Sock, m: &Message, deadline: Instant, what: &'static str) -> Result<()> {
    let mut bytes = Vec::new();
    m.encode(&mut bytes);
    let mut off = 0;
    loop {
        sock.set_timeouts(Some(time_left(deadline)), Some(time_left(deadline)))
            .map_err(|e| Error::io("configuring the socket", e))?;
        // Over TLS the last records may stay queued after the writes: the flush sends them.
        let written = if off < bytes.len() {
            sock.write(&bytes[off..])
        } else {
            sock.flush().map(|()| 0)
        };
        match written {
            Ok(0) if off >= bytes.len() => return Ok(()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Error::Timeout(what))
            }
            Err(e) => return Err(Error::io(what, e)),
        }
    }
}

/// Reads the next handshake message by `deadline`.
fn read_message(sock: &Sock, dec: &mut FrameDecoder, deadline: Instant, what: &'static str) -> Result<Message> {
    let mut buf = vec![0u8; 4096];
    loop {
        if let Some(frame) = dec.decode()? {
            return Ok(Message::from_frame(frame)?);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(what));
        }
        sock.set_timeouts(Some(time_left(deadline)), Some(time_left(deadline)))
            .map_err(|e| Error::io("configuring the socket", e))?;
        match sock.read(&mut buf) {
            Ok(0) => {
                dec.finish()?;
                return Err(Error::Disconnected);
            }
            Ok(n) => dec.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Error::Timeout(what))
            }
            Err(e) => return Err(Error::io(what, e)),
        }
    }
}

/// The time left until `deadline` (at least a millisecond: a zero timeout means none).
fn time_left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}
