//! The message grammar both sides share: a peer message's checks as text, its comma-separated
//! `LETTER=VALUE` attributes read in order ([`Attributes`]), extensions, base64 keys, the GS2
//! header's flag, and the `=2C`/`=3D` escaping of user names.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use super::checks::check_username;
use super::{Result, ScramError, KEY_LEN, MAX_MESSAGE_LEN};

/// Attribute names RFC 5802 defines; none may appear as an optional extension.
const RFC_ATTRIBUTES: &[u8] = b"acimnprsv";

pub(super) const CLIENT_FIRST: &str = "client-first-message";
pub(super) const SERVER_FIRST: &str = "server-first-message";
pub(super) const CLIENT_FINAL: &str = "client-final-message";
pub(super) const SERVER_FINAL: &str = "server-final-message";

/// The GS2 channel binding flags accepted (`p=` is refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gs2Flag {
    /// `n`: the client does not support channel binding.
    NoServerSupport,
    /// `y`: the client supports channel binding but thinks the server does not.
    NoClientSupport,
}

impl Gs2Flag {
    pub(super) fn header(self) -> &'static str {
        match self {
            Gs2Flag::NoServerSupport => "n,,",
            Gs2Flag::NoClientSupport => "y,,",
        }
    }
}

/// `,` → `=2C`, `=` → `=3D`.
pub(super) fn escape_username(user: &str) -> String {
    let mut out = String::with_capacity(user.len());
    for c in user.chars() {
        match c {
            ',' => out.push_str("=2C"),
            '=' => out.push_str("=3D"),
            c => out.push(c),
        }
    }
    out
}

/// The inverse of [`escape_username`]; any other `=` is an error (RFC 5802 §5.1), as is a name
/// that breaks [`check_username`]'s rules once unescaped.
pub(super) fn unescape_username(escaped: &str) -> Result<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at + 1..at + 3) {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => {
                return Err(ScramError::InvalidUsername {
                    reason: "'=' not followed by 2C or 3D",
                })
            }
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    check_username(&out)?;
    Ok(out)
}

/// Base64 that must decode to exactly [`KEY_LEN`] bytes (a proof or a signature).
pub(super) fn decode_key(message: &'static str, attribute: char, value: &str) -> Result<[u8; KEY_LEN]> {
    let bytes = BASE64
        .decode(value)
        .map_err(|_| ScramError::InvalidBase64 { message, attribute })?;
    bytes.try_into().map_err(|bytes: Vec<u8>| ScramError::WrongLength {
        message,
        attribute,
        len: bytes.len(),
        expected: KEY_LEN,
    })
}

/// Checks a peer message's length, encoding and bytes, and returns it as text.
pub(super) fn message_text<'a>(message: &'static str, bytes: &'a [u8]) -> Result<&'a str> {
    if bytes.len() > MAX_MESSAGE_LEN {
        return Err(ScramError::MessageTooLong {
            message,
            len: bytes.len(),
            max: MAX_MESSAGE_LEN,
        });
    }
    if bytes.is_empty() {
        return Err(ScramError::EmptyMessage { message });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ScramError::NotUtf8 { message })?;
    if text.contains('\0') {
        return Err(ScramError::NulByte { message });
    }
    Ok(text)
}

/// Splits `LETTER=VALUE`, refusing anything else and an empty value.
pub(super) fn split_attribute<'a>(message: &'static str, part: &'a str) -> Result<(char, &'a str)> {
    let bytes = part.as_bytes();
    if bytes.len() < 2 || !bytes[0].is_ascii_alphabetic() || bytes[1] != b'=' {
        return Err(ScramError::MalformedAttribute {
            message,
            reason: "an attribute must be a letter, '=' and a value",
        });
    }
    if bytes.len() == 2 {
        return Err(ScramError::MalformedAttribute {
            message,
            reason: "empty attribute value",
        });
    }
    Ok((char::from(bytes[0]), &part[2..]))
}

/// Refuses `m=` and attributes RFC 5802 defines in the place of an optional extension.
pub(super) fn check_extension(message: &'static str, name: char) -> Result<()> {
    if name == 'm' {
        return Err(ScramError::MandatoryExtension { message });
    }
    if u8::try_from(name).is_ok_and(|b| RFC_ATTRIBUTES.contains(&b)) {
        return Err(ScramError::MisplacedAttribute {
            message,
            attribute: name,
        });
    }
    Ok(())
}

/// The comma-separated attributes of a message, read in order. Attribute values never contain
/// ',' (base64, printable nonces and escaped names cannot), so splitting on ',' is exact.
pub(super) struct Attributes<'a> {
    message: &'static str,
    text: &'a str,
    /// Where the next part starts.
    pub(super) pos: usize,
    done: bool,
}

impl<'a> Attributes<'a> {
    pub(super) fn new(message: &'static str, text: &'a str) -> Attributes<'a> {
        Attributes {
            message,
            text,
            pos: 0,
            done: false,
        }
    }

    pub(super) fn next_part(&mut self) -> Option<&'a str> {
        if self.done {
            return None;
        }
        let rest = &self.text[self.pos..];
        match rest.find(',') {
            Some(at) => {
                self.pos += at + 1;
                Some(&rest[..at])
            }
            None => {
                self.pos = self.text.len();
                self.done = true;
                Some(rest)
            }
        }
    }

    /// The next attribute, which must be `name`; returns its value.
    pub(super) fn expect(&mut self, name: char) -> Result<&'a str> {
        let message = self.message;
        let Some(part) = self.next_part() else {
            return Err(ScramError::MissingAttribute {
                message,
                expected: name,
            });
        };
        let (found, value) = split_attribute(message, part)?;
        if found == name {
            Ok(value)
        } else if found == 'm' {
            Err(ScramError::MandatoryExtension { message })
        } else {
            Err(ScramError::UnexpectedAttribute {
                message,
                expected: name,
                found,
            })
        }
    }

    /// The rest of the message: optional extensions, which are checked and ignored.
    pub(super) fn extensions(mut self) -> Result<()> {
        while let Some(part) = self.next_part() {
            let (name, _) = split_attribute(self.message, part)?;
            check_extension(self.message, name)?;
        }
        Ok(())
    }
}
