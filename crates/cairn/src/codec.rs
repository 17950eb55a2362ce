//! The encoding of persistent objects (see `docs/encoding.md`).
//!
//! An object's record is `class id (u32) | schema version (u16) | fields`,
//! fields in declaration order, each encoded by its type's [`Field`] impl:
//! little-endian fixed-width numbers, `bool` as one byte (0 or 1), strings
//! as a LEB128 length then the UTF-8 bytes, `Vec<T>` as a LEB128
//! count then the elements, `Option<T>` as a tag byte (0 none, 1 some) then
//! the value, nested plain structs as their fields in order, `Ref<T>` as the
//! 10-byte OID. Records written with an older schema version are decoded
//! field by field with that version's type descriptors (from the catalog)
//! into [`Value`]s and rebuilt by name ([`Persistent::from_values`]).
//!
//! Decoding never trusts a length: every count is checked against the bytes
//! left before anything is allocated, and trailing bytes are an error.

use cairn_storage::Oid;

/// The one byte reader and writer of the database (the `cairn-codec`
/// crate): records are read and written with the same cursor as log
/// records and protocol messages.
pub use cairn_codec::{DecodeError, Reader, Writer};

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

/// A type that can be a field of a persistent object.
///
/// Besides encoding and decoding, every field type can be read in place
/// (see [`crate::view`]): [`Field::check`] accepts exactly the bytes
/// [`Field::decode`] accepts, without building the value, and then
/// [`Field::skip`] and [`Field::view`] read them without checks — and
/// without panicking or reading outside their slice on any bytes at all.
pub trait Field: Sized {
    /// The value read in place from its encoded bytes (`u32` for a `u32`,
    /// `&str` for a `String`, a [`crate::view::SeqView`] for a `Vec`, the
    /// generated `{Name}View` for a derived struct).
    type View<'a>;
    /// The number of bytes every encoding of this type takes, if that is
    /// fixed (numbers, `bool`, `Ref`, structs of those).
    const FIXED_SIZE: Option<usize> = None;
    /// The fewest bytes any encoding of this type takes:
    /// [`crate::fields::min_encoded_size`] of its [`Field::type_desc`],
    /// known without building the descriptor (a sequence's count is
    /// checked against it at every decode). The fixed size if there is
    /// one, else a length, count or tag byte; a derived struct sums its
    /// fields'.
    const MIN_SIZE: usize = match Self::FIXED_SIZE {
        Some(n) => n,
        None => 1,
    };
    /// The stored type, for the catalog.
    fn type_desc() -> TypeDesc;
    /// Appends the encoding.
    fn encode(&self, w: &mut Writer);
    /// Decodes one value.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
    /// Converts a value decoded with an older schema (same type descriptor).
    fn from_value(v: Value) -> Result<Self, DecodeError>;
    /// Checks the value at the reader's position and steps over it: `Ok`
    /// exactly when [`Field::decode`] would succeed there (with the same
    /// error otherwise), but nothing is built or allocated.
    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError>;
    /// The number of bytes the value at the start of `b` takes. Exact on
    /// bytes [`Field::check`] accepted; on any other bytes some number no
    /// larger than `b.len()`. Never panics.
    fn skip(b: &[u8]) -> usize;
    /// The value at the start of `b`, read in place. Equal to what
    /// [`Field::decode`] gives on bytes [`Field::check`] accepted; on any
    /// other bytes some harmless value. Never panics.
    fn view(b: &[u8]) -> Self::View<'_>;
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

/// A persistent type: `#[derive(Persistent)]` implements it.
pub trait Persistent: Field + Send + Sync + 'static {
    /// The type's name in the catalog (the struct's name).
    const NAME: &'static str;
    /// The names of the `#[cairn(index)]` fields, in declaration order: the
    /// fields [`Persistent::index_keys`] returns keys for. The catalog keeps
    /// exactly these indexes (building a new one from the existing objects
    /// and dropping one no longer listed when the type is registered), and
    /// an index query on any other field is an error.
    const INDEXED_FIELDS: &'static [&'static str] = &[];
    /// The fields, in order.
    fn fields() -> Vec<FieldDesc>;
    /// Encodes the fields (current schema), without the record header.
    fn encode_fields(&self, w: &mut Writer);
    /// Decodes the fields written with the current schema.
    fn decode_fields(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
    /// Rebuilds from fields decoded with an older schema, by name; fields the
    /// old schema lacks take their default.
    fn from_values(values: Vec<(String, Value)>) -> Result<Self, DecodeError>;
    /// Index keys of `#[cairn(index)]` fields: (field name, order-preserving key bytes).
    fn index_keys(&self) -> Vec<(&'static str, Vec<u8>)> {
        Vec::new()
    }
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
