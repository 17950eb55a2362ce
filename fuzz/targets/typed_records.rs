//! The typed record decoders on arbitrary bytes, for a few derived types
//! that use every kind of field (numbers, floats, bool, strings, byte
//! vectors, options, references, `List`, `Set`, `Map`, a nested struct).
//! The first input byte picks the type; the rest is a record body. Decoding
//! with the type (`decode_fields`), without it (`decode_value` with the
//! type's descriptor, then `from_values`, as for an older schema version)
//! and re-encoding must never panic: a record that decodes re-encodes to
//! bytes that decode to the same encoding (LEB128 lengths may be written
//! longer than needed, so the input bytes themselves need not come back).
//!
//! Views (`cairn::view`): `Field::check` must accept exactly the bytes the
//! typed decoder accepts; every accessor of the view must read any bytes
//! without panicking; and on bytes that decode, every field read in place
//! must equal the decoded one.

use cairn::codec::{decode_value, Field, Persistent, Reader, TypeDesc, Value, Writer};
use cairn::{List, Map, Ref, Set};

/// A nested struct (stored inline).
#[derive(cairn::Persistent, Debug, Clone, PartialEq)]
pub struct Point {
    pub x: i32,
    pub y: f64,
}

/// Numbers, strings, options, references and collections.
#[derive(cairn::Persistent, Debug, Clone, PartialEq)]
pub struct Part {
    #[cairn(index)]
    pub id: u32,
    pub name: String,
    pub weight: f64,
    pub at: Point,
    pub next: Option<Ref<Part>>,
    pub to: List<Ref<Part>>,
    pub tags: Set<String>,
    pub sizes: Map<u16, i64>,
}

/// Bytes, bools, small and nested options, nested vectors.
#[derive(cairn::Persistent, Debug, Clone, PartialEq)]
pub struct Blob {
    pub bytes: Vec<u8>,
    pub flag: bool,
    pub small: u8,
    pub maybe: Option<Option<i16>>,
    pub rows: Vec<Vec<u64>>,
    #[cairn(default)]
    pub note: String,
}

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => {
            record::<Part>(body);
            view_part(body);
        }
        1 => {
            record::<Blob>(body);
            view_blob(body);
        }
        _ => {
            record::<Point>(body);
            view_point(body);
        }
    }
    // The untyped decoder on a few descriptors the types above do not cover.
    for ty in [
        TypeDesc::Map(
            Box::new(TypeDesc::String),
            Box::new(TypeDesc::Seq(Box::new(TypeDesc::Bool))),
        ),
        TypeDesc::Option(Box::new(TypeDesc::Ref("Part".into()))),
        TypeDesc::Set(Box::new(TypeDesc::I8)),
    ] {
        let mut r = Reader::new(body);
        let _ = decode_value(&ty, &mut r);
    }
}

/// Decodes `body` as a `T` both ways and checks what decodes.
fn record<T: Persistent + Field>(body: &[u8]) {
    let mut r = Reader::new(body);
    let typed = T::decode_fields(&mut r).and_then(|v| r.finish("record").map(|()| v));
    let fields = T::fields();
    let mut r = Reader::new(body);
    let mut values = Vec::with_capacity(fields.len());
    let mut untyped_ok = true;
    for f in &fields {
        match decode_value(&f.ty, &mut r) {
            Ok(v) => values.push((f.name.clone(), v)),
            Err(_) => {
                untyped_ok = false;
                break;
            }
        }
    }
    let untyped_ok = untyped_ok && r.finish("record").is_ok();
    let rebuilt = if untyped_ok {
        T::from_values(values.clone()).ok()
    } else {
        None
    };
    // As a whole struct value too (how a nested struct is decoded).
    let _ = T::from_value(Value::Struct(values));
    if let Ok(v) = typed {
        let once = encode(&v);
        let mut r = Reader::new(&once);
        let again = T::decode_fields(&mut r).expect("a re-encoded record decodes");
        r.finish("record").expect("a re-encoded record has no trailing bytes");
        assert_eq!(encode(&again), once, "decoding is not stable under re-encoding");
        if let Some(w) = rebuilt {
            assert_eq!(encode(&w), once, "the typed and untyped decoders disagree");
        }
        let _ = v.index_keys();
    }
}

/// The typed decoding of `body` as a whole record, if it decodes; and
/// checks that `Field::check` agrees with it.
fn decoded<T: Persistent>(body: &[u8]) -> Option<T> {
    let mut r = Reader::new(body);
    let typed = T::decode_fields(&mut r).and_then(|v| r.finish("record").map(|()| v));
    let mut r = Reader::new(body);
    let checked = T::check(&mut r).and_then(|()| r.finish("record"));
    match (&typed, &checked) {
        (Ok(_), Ok(())) | (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => panic!("check refuses a record that decodes: {e}"),
        (Err(e), Ok(())) => panic!("check accepts a record that does not decode: {e}"),
    }
    if typed.is_ok() {
        assert_eq!(T::skip(body), body.len(), "skip disagrees with the record's length");
    }
    assert!(T::skip(body) <= body.len(), "skip ran past the bytes");
    typed.ok()
}

fn view_point(body: &[u8]) {
    let v = Point::view(body);
    let (x, y) = (v.x(), v.y());
    if let Some(p) = decoded::<Point>(body) {
        assert_eq!((x, y.to_bits()), (p.x, p.y.to_bits()));
    }
}

fn view_part(body: &[u8]) {
    let v = Part::view(body);
    let read = (
        v.id(),
        v.name().to_string(),
        v.weight().to_bits(),
        (v.at().x(), v.at().y().to_bits()),
        v.next().map(|r| r.oid()),
        v.to().iter().map(|r| r.oid()).collect::<Vec<_>>(),
        v.tags().iter().map(str::to_string).collect::<Vec<_>>(),
        v.sizes().iter().collect::<Vec<_>>(),
    );
    assert!(v.to().len() <= body.len() && v.tags().len() <= body.len());
    if let Some(p) = decoded::<Part>(body) {
        let owned = (
            p.id,
            p.name.clone(),
            p.weight.to_bits(),
            (p.at.x, p.at.y.to_bits()),
            p.next.as_ref().map(|r| r.oid()),
            p.to.iter().map(|r| r.oid()).collect::<Vec<_>>(),
            p.tags.iter().cloned().collect::<Vec<_>>(),
            p.sizes.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
        );
        assert_eq!(read, owned, "a view disagrees with the decoded record");
    }
}

fn view_blob(body: &[u8]) {
    let v = Blob::view(body);
    let read = (
        v.bytes().iter().collect::<Vec<u8>>(),
        v.flag(),
        v.small(),
        v.maybe(),
        v.rows()
            .iter()
            .map(|row| row.iter().collect::<Vec<u64>>())
            .collect::<Vec<_>>(),
        v.note().to_string(),
    );
    if let Some(b) = decoded::<Blob>(body) {
        let owned = (
            b.bytes.clone(),
            b.flag,
            b.small,
            b.maybe,
            b.rows.clone(),
            b.note.clone(),
        );
        assert_eq!(read, owned, "a view disagrees with the decoded record");
    }
}

fn encode<T: Persistent>(v: &T) -> Vec<u8> {
    let mut w = Writer::new();
    v.encode_fields(&mut w);
    w.into_bytes()
}
