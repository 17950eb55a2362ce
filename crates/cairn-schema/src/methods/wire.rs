//! A method's and an answer's wire form: what an object-server client
//! sends in its METHOD request and what the server answers, encoded with
//! the one byte codec, every count and length bounded ([`TERMS_MAX`],
//! [`TEXT_MAX`]) and damage refused with an error naming the field.

use std::ops::Bound;

use cairn_codec::{DecodeError, Reader, Writer};
use cairn_storage::Oid;

use super::{Answer, Cmp, Literal, Method, Predicate, Source, TERMS_MAX, TEXT_MAX};
use crate::error::{Error, Result};

/// A method's bytes that do not decode: the error names what is wrong.
fn malformed(e: DecodeError) -> Error {
    Error::InvalidArgument(format!("malformed method: {e}"))
}

/// A `u16` length, then at most [`TEXT_MAX`] bytes.
fn bytes16(r: &mut Reader<'_>, what: &str) -> std::result::Result<Vec<u8>, DecodeError> {
    let b = r.bytes16(what)?;
    if b.len() > TEXT_MAX {
        return Err(r.error(what, format!("is longer than {TEXT_MAX} bytes")));
    }
    Ok(b.to_vec())
}

/// [`bytes16`] as UTF-8 text.
fn text(r: &mut Reader<'_>, what: &str) -> std::result::Result<String, DecodeError> {
    String::from_utf8(bytes16(r, what)?).map_err(|_| r.error(what, "is not UTF-8"))
}

fn oid(r: &mut Reader<'_>, what: &str) -> std::result::Result<Oid, DecodeError> {
    Ok(Oid::from_exact(r.take(Oid::ENCODED_SIZE, what)?).expect("10 bytes"))
}

fn bound(r: &mut Reader<'_>) -> std::result::Result<Bound<Vec<u8>>, DecodeError> {
    Ok(match r.u8("a bound")? {
        0 => Bound::Unbounded,
        1 => Bound::Included(bytes16(r, "a key")?),
        2 => Bound::Excluded(bytes16(r, "a key")?),
        _ => return Err(r.error("a bound", "is 0, 1 or 2")),
    })
}

/// A `u16` count of at most [`TERMS_MAX`] terms.
fn terms(r: &mut Reader<'_>, what: &str) -> std::result::Result<usize, DecodeError> {
    let n = r.u16(what)? as usize;
    if n > TERMS_MAX {
        return Err(r.error(what, format!("more than {TERMS_MAX}")));
    }
    Ok(n)
}

/// A text, cut at [`TEXT_MAX`] bytes (the decoder refuses more).
fn put_text(w: &mut Writer, b: &[u8]) {
    w.put_bytes16(&b[..b.len().min(TEXT_MAX)]);
}

fn put_bound(w: &mut Writer, b: &Bound<Vec<u8>>) {
    match b {
        Bound::Unbounded => w.put_u8(0),
        Bound::Included(k) => {
            w.put_u8(1);
            put_text(w, k);
        }
        Bound::Excluded(k) => {
            w.put_u8(2);
            put_text(w, k);
        }
    }
}

impl Method {
    /// The method as it travels: `tag u8` (1 select, 2 traverse), then for
    /// a selection `count_only u8, limit u32, class text, source (1 group:
    /// text | 2 index: field text, lo bound, hi bound), count u16,
    /// (path text, cmp u8, literal) × count`; for a traversal `start oid,
    /// depth u32, limit u32, count u16, path text × count`. (`text` is `len
    /// u16, UTF-8`; a literal is `tag u8` 1 i64, 2 u64, 3 f64, 4 bool u8,
    /// 5 text.)
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Method::Select {
                class,
                source,
                preds,
                count_only,
                limit,
            } => {
                w.put_u8(1);
                w.put_u8(u8::from(*count_only));
                w.put_u32(*limit);
                put_text(&mut w, class.as_bytes());
                match source {
                    Source::Group(g) => {
                        w.put_u8(1);
                        put_text(&mut w, g.as_bytes());
                    }
                    Source::Index { field, lo, hi } => {
                        w.put_u8(2);
                        put_text(&mut w, field.as_bytes());
                        put_bound(&mut w, lo);
                        put_bound(&mut w, hi);
                    }
                }
                let preds = &preds[..preds.len().min(TERMS_MAX)];
                w.put_u16(preds.len() as u16);
                for p in preds {
                    put_text(&mut w, p.path.as_bytes());
                    w.put_u8(p.cmp as u8);
                    match &p.value {
                        Literal::Int(v) => {
                            w.put_u8(1);
                            w.put(&v.to_le_bytes());
                        }
                        Literal::UInt(v) => {
                            w.put_u8(2);
                            w.put(&v.to_le_bytes());
                        }
                        Literal::Float(v) => {
                            w.put_u8(3);
                            w.put(&v.to_le_bytes());
                        }
                        Literal::Bool(v) => {
                            w.put_u8(4);
                            w.put_u8(u8::from(*v));
                        }
                        Literal::Str(v) => {
                            w.put_u8(5);
                            put_text(&mut w, v.as_bytes());
                        }
                    }
                }
            }
            Method::Traverse {
                start,
                paths,
                depth,
                limit,
            } => {
                w.put_u8(2);
                w.put(&start.to_bytes());
                w.put_u32(*depth);
                w.put_u32(*limit);
                let paths = &paths[..paths.len().min(TERMS_MAX)];
                w.put_u16(paths.len() as u16);
                for p in paths {
                    put_text(&mut w, p.as_bytes());
                }
            }
        }
        w.into_bytes()
    }

    /// Decodes [`Method::encode`]'s bytes; anything else is an error naming
    /// what is wrong.
    pub fn decode(b: &[u8]) -> Result<Method> {
        let mut r = Reader::within("a method", b);
        let m = Method::read(&mut r).map_err(malformed)?;
        r.finish("its end").map_err(malformed)?;
        Ok(m)
    }

    fn read(c: &mut Reader<'_>) -> std::result::Result<Method, DecodeError> {
        Ok(match c.u8("the method tag")? {
            1 => {
                let count_only = match c.u8("the count flag")? {
                    0 => false,
                    1 => true,
                    _ => return Err(c.error("the count flag", "is 0 or 1")),
                };
                let limit = c.u32("the limit")?;
                let class = text(c, "the class name")?;
                let source = match c.u8("the source tag")? {
                    1 => Source::Group(text(c, "the group name")?),
                    2 => Source::Index {
                        field: text(c, "the index field")?,
                        lo: bound(c)?,
                        hi: bound(c)?,
                    },
                    _ => return Err(c.error("the source tag", "is 1 (group) or 2 (index)")),
                };
                let n = terms(c, "predicates")?;
                let mut preds = Vec::with_capacity(n);
                for _ in 0..n {
                    let path = text(c, "a path")?;
                    let cmp = match c.u8("a comparison")? {
                        0 => Cmp::Eq,
                        1 => Cmp::Ne,
                        2 => Cmp::Lt,
                        3 => Cmp::Le,
                        4 => Cmp::Gt,
                        5 => Cmp::Ge,
                        _ => return Err(c.error("a comparison", "is 0 to 5")),
                    };
                    let value = match c.u8("a literal tag")? {
                        1 => Literal::Int(c.u64("an i64")? as i64),
                        2 => Literal::UInt(c.u64("a u64")?),
                        3 => Literal::Float(f64::from_bits(c.u64("an f64")?)),
                        4 => Literal::Bool(match c.u8("a bool")? {
                            0 => false,
                            1 => true,
                            _ => return Err(c.error("a bool", "is 0 or 1")),
                        }),
                        5 => Literal::Str(text(c, "a string")?),
                        _ => return Err(c.error("a literal tag", "is 1 to 5")),
                    };
                    preds.push(Predicate { path, cmp, value });
                }
                Method::Select {
                    class,
                    source,
                    preds,
                    count_only,
                    limit,
                }
            }
            2 => {
                let start = oid(c, "the start")?;
                let depth = c.u32("the depth")?;
                let limit = c.u32("the limit")?;
                let n = terms(c, "paths")?;
                let paths = (0..n)
                    .map(|_| text(c, "a path"))
                    .collect::<std::result::Result<_, _>>()?;
                Method::Traverse {
                    start,
                    paths,
                    depth,
                    limit,
                }
            }
            _ => return Err(c.error("the method tag", "is 1 (select) or 2 (traverse)")),
        })
    }
}

impl Answer {
    /// `tag u8` (1 OIDs: `count u32, oid × count`; 2 count: `u64`).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Answer::Oids(oids) => {
                w.put_u8(1);
                w.put_u32(oids.len() as u32);
                for o in oids {
                    w.put(&o.to_bytes());
                }
            }
            Answer::Count(n) => {
                w.put_u8(2);
                w.put_u64(*n);
            }
        }
        w.into_bytes()
    }

    /// Decodes what [`Answer::encode`] wrote.
    pub fn decode(b: &[u8]) -> Result<Answer> {
        let mut r = Reader::within("a method's answer", b);
        let a = Answer::read(&mut r).map_err(malformed)?;
        r.finish("its end").map_err(malformed)?;
        Ok(a)
    }

    fn read(c: &mut Reader<'_>) -> std::result::Result<Answer, DecodeError> {
        Ok(match c.u8("the answer tag")? {
            1 => {
                let n = c.count32("the OID count", Oid::ENCODED_SIZE)?;
                let oids = (0..n)
                    .map(|_| oid(c, "an OID"))
                    .collect::<std::result::Result<_, _>>()?;
                Answer::Oids(oids)
            }
            2 => Answer::Count(c.u64("the count")?),
            _ => return Err(c.error("the answer tag", "is 1 or 2")),
        })
    }
}
