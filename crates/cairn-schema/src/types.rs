//! The types of stored fields as the schema catalog records them
//! ([`TypeDesc`], [`FieldDesc`]), and a field value decoded without knowing
//! its Rust type ([`Value`], [`decode_value`]): what the catalog, the
//! methods the server runs and records of an older schema version are read
//! with. The encoding itself is the typed layer's (`cairn::codec`; the byte
//! layout is in the repository's `docs/encoding.md`).

use cairn_codec::{DecodeError, Reader};
use cairn_storage::Oid;

/// The type of a stored field, as recorded in the schema catalog.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TypeDesc {
    /// `bool`.
    Bool,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `String`.
    String,
    /// `Vec<T>` (and `List<T>`; a `Vec<u8>` is a sequence of `U8`, which
    /// encodes as a length and the bytes).
    Seq(Box<TypeDesc>),
    /// `Set<T>`: a sorted sequence without duplicates.
    Set(Box<TypeDesc>),
    /// `Map<K, V>`: sorted (key, value) pairs.
    Map(Box<TypeDesc>, Box<TypeDesc>),
    /// `Option<T>`.
    Option(Box<TypeDesc>),
    /// A nested plain struct: its name and fields.
    Struct(String, Vec<(String, TypeDesc)>),
    /// `Ref<T>`: the target type's name.
    Ref(String),
}

/// Printed as the Rust type it stands for (`u32`, `Vec<u8>`, `Option<String>`,
/// `Ref<Part>`), for error messages.
impl std::fmt::Display for TypeDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TypeDesc::Bool => f.write_str("bool"),
            TypeDesc::U8 => f.write_str("u8"),
            TypeDesc::U16 => f.write_str("u16"),
            TypeDesc::U32 => f.write_str("u32"),
            TypeDesc::U64 => f.write_str("u64"),
            TypeDesc::I8 => f.write_str("i8"),
            TypeDesc::I16 => f.write_str("i16"),
            TypeDesc::I32 => f.write_str("i32"),
            TypeDesc::I64 => f.write_str("i64"),
            TypeDesc::F32 => f.write_str("f32"),
            TypeDesc::F64 => f.write_str("f64"),
            TypeDesc::String => f.write_str("String"),
            TypeDesc::Seq(t) => write!(f, "Vec<{t}>"),
            TypeDesc::Set(t) => write!(f, "Set<{t}>"),
            TypeDesc::Map(k, v) => write!(f, "Map<{k}, {v}>"),
            TypeDesc::Option(t) => write!(f, "Option<{t}>"),
            TypeDesc::Struct(name, _) => f.write_str(name),
            TypeDesc::Ref(name) => write!(f, "Ref<{name}>"),
        }
    }
}

/// A field value decoded without knowing its Rust type (old schema versions).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Any unsigned integer or bool.
    U(u64),
    /// Any signed integer.
    I(i64),
    /// Any float.
    F(f64),
    /// A string.
    Str(String),
    /// A sequence, set or map (maps as 2-element sequences).
    Seq(Vec<Value>),
    /// An option.
    Opt(Option<Box<Value>>),
    /// A nested struct's fields by name.
    Struct(Vec<(String, Value)>),
    /// A reference.
    Ref(Oid),
}

/// A field of a stored schema version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldDesc {
    /// The field's name.
    pub name: String,
    /// Its stored type.
    pub ty: TypeDesc,
    /// True if `#[cairn(default)]`: old records without it read as `Default`.
    pub has_default: bool,
}

/// Decodes one value of type `ty` without knowing its Rust type.
pub fn decode_value(ty: &TypeDesc, r: &mut Reader<'_>) -> Result<Value, DecodeError> {
    Ok(match ty {
        TypeDesc::Bool => Value::U(u64::from(r.take(1, "bool")?[0])),
        TypeDesc::U8 => Value::U(u64::from(r.take(1, "u8")?[0])),
        TypeDesc::U16 => Value::U(u64::from(u16::from_le_bytes(r.take_array("u16")?))),
        TypeDesc::U32 => Value::U(u64::from(u32::from_le_bytes(r.take_array("u32")?))),
        TypeDesc::U64 => Value::U(u64::from_le_bytes(r.take_array("u64")?)),
        TypeDesc::I8 => Value::I(i64::from(i8::from_le_bytes(r.take_array("i8")?))),
        TypeDesc::I16 => Value::I(i64::from(i16::from_le_bytes(r.take_array("i16")?))),
        TypeDesc::I32 => Value::I(i64::from(i32::from_le_bytes(r.take_array("i32")?))),
        TypeDesc::I64 => Value::I(i64::from_le_bytes(r.take_array("i64")?)),
        TypeDesc::F32 => Value::F(f64::from(f32::from_le_bytes(r.take_array("f32")?))),
        TypeDesc::F64 => Value::F(f64::from_le_bytes(r.take_array("f64")?)),
        TypeDesc::String => {
            let n = r.get_count("string", 1)?;
            let b = r.take(n, "string")?;
            Value::Str(String::from_utf8(b.to_vec()).map_err(|_| r.error("string", "not UTF-8"))?)
        }
        TypeDesc::Seq(t) | TypeDesc::Set(t) => {
            let n = r.get_count("sequence", 1)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(decode_value(t, r)?);
            }
            Value::Seq(v)
        }
        TypeDesc::Map(k, val) => {
            let n = r.get_count("map", 2)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(Value::Seq(vec![decode_value(k, r)?, decode_value(val, r)?]));
            }
            Value::Seq(v)
        }
        TypeDesc::Option(t) => match r.take(1, "option tag")?[0] {
            0 => Value::Opt(None),
            1 => Value::Opt(Some(Box::new(decode_value(t, r)?))),
            other => return Err(r.error("option tag", format!("tag {other} is neither 0 nor 1"))),
        },
        TypeDesc::Struct(_, fields) => {
            let mut v = Vec::with_capacity(fields.len());
            for (name, t) in fields {
                v.push((name.clone(), decode_value(t, r)?));
            }
            Value::Struct(v)
        }
        TypeDesc::Ref(_) => {
            let b: [u8; Oid::ENCODED_SIZE] = r.take_array("reference")?;
            Value::Ref(Oid::from_bytes(&b))
        }
    })
}

/// The bytes every encoding of `ty` takes, if that is fixed (numbers,
/// `bool`, references, structs of those).
pub fn fixed_size(ty: &TypeDesc) -> Option<usize> {
    match ty {
        TypeDesc::Bool | TypeDesc::U8 | TypeDesc::I8 => Some(1),
        TypeDesc::U16 | TypeDesc::I16 => Some(2),
        TypeDesc::U32 | TypeDesc::I32 | TypeDesc::F32 => Some(4),
        TypeDesc::U64 | TypeDesc::I64 | TypeDesc::F64 => Some(8),
        TypeDesc::Ref(_) => Some(Oid::ENCODED_SIZE),
        TypeDesc::Struct(_, fields) => fields.iter().map(|(_, t)| fixed_size(t)).sum(),
        TypeDesc::String | TypeDesc::Seq(_) | TypeDesc::Set(_) | TypeDesc::Map(..) | TypeDesc::Option(_) => None,
    }
}

/// Steps over one value of type `ty`, checking it as [`decode_value`]
/// does, without building it.
pub fn skip_value(ty: &TypeDesc, r: &mut Reader<'_>) -> Result<(), DecodeError> {
    if let Some(n) = fixed_size(ty) {
        r.take(n, "value")?;
        return Ok(());
    }
    match ty {
        TypeDesc::String => {
            let n = r.get_count("string", 1)?;
            let b = r.take(n, "string")?;
            std::str::from_utf8(b).map_err(|_| r.error("string", "not UTF-8"))?;
        }
        TypeDesc::Seq(t) | TypeDesc::Set(t) => skip_elements(t, r.get_count("sequence", 1)?, r)?,
        TypeDesc::Map(k, v) => {
            for _ in 0..r.get_count("map", 2)? {
                skip_value(k, r)?;
                skip_value(v, r)?;
            }
        }
        TypeDesc::Option(t) => match r.take(1, "option tag")?[0] {
            0 => {}
            1 => skip_value(t, r)?,
            other => return Err(r.error("option tag", format!("tag {other} is neither 0 nor 1"))),
        },
        TypeDesc::Struct(_, fields) => {
            for (_, t) in fields {
                skip_value(t, r)?;
            }
        }
        _ => unreachable!("fixed-size types are stepped over above"),
    }
    Ok(())
}

/// Steps over `n` values of type `ty` (a sequence's elements).
pub fn skip_elements(ty: &TypeDesc, n: usize, r: &mut Reader<'_>) -> Result<(), DecodeError> {
    match fixed_size(ty) {
        Some(size) => {
            let bytes = n
                .checked_mul(size)
                .ok_or_else(|| r.error("sequence", format!("{n} elements of {size} bytes overflow")))?;
            r.take(bytes, "sequence")?;
        }
        None => {
            for _ in 0..n {
                skip_value(ty, r)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn types() -> Vec<TypeDesc> {
        let b = Box::new;
        vec![
            TypeDesc::U32,
            TypeDesc::String,
            TypeDesc::Seq(b(TypeDesc::U16)),
            TypeDesc::Seq(b(TypeDesc::String)),
            TypeDesc::Map(b(TypeDesc::U8), b(TypeDesc::Option(b(TypeDesc::I64)))),
            TypeDesc::Struct(
                "P".into(),
                vec![("a".into(), TypeDesc::Ref("P".into())), ("b".into(), TypeDesc::Bool)],
            ),
            TypeDesc::Set(b(TypeDesc::Struct("Q".into(), vec![("s".into(), TypeDesc::String)]))),
        ]
    }

    proptest! {
        /// Stepping over a value agrees with decoding it: on any bytes,
        /// both succeed or both fail, and both stop at the same byte.
        #[test]
        fn skipping_agrees_with_decoding(bytes in proptest::collection::vec(any::<u8>(), 0..40), which in 0..7usize) {
            let ty = &types()[which];
            let mut d = Reader::new(&bytes);
            let mut s = Reader::new(&bytes);
            let decoded = decode_value(ty, &mut d);
            let skipped = skip_value(ty, &mut s);
            prop_assert_eq!(decoded.is_ok(), skipped.is_ok(), "{:?} on {:?}", ty, bytes);
            if decoded.is_ok() {
                prop_assert_eq!(d.offset(), s.offset());
            }
        }
    }
}
