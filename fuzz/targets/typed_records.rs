//! The typed record decoders on arbitrary bytes, for a few derived types
//! that use every kind of field (numbers, floats, bool, strings, byte
//! vectors, options, references, `List`, `Set`, `Map`, a nested struct).
//! The first input byte picks the type; the rest is a record body. Decoding
//! with the type (`decode_fields`), without it (`decode_value` with the
//! type's descriptor, then `from_values`, as for an older schema version)
//! and re-encoding must never panic: a record that decodes re-encodes to
//! bytes that decode to the same encoding (LEB128 lengths may be written
//! longer than needed, so the input bytes themselves need not come back).

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
        0 => record::<Part>(body),
        1 => record::<Blob>(body),
        _ => record::<Point>(body),
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

fn encode<T: Persistent>(v: &T) -> Vec<u8> {
    let mut w = Writer::new();
    v.encode_fields(&mut w);
    w.into_bytes()
}
