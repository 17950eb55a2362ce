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

/// The one byte reader and writer of the database (the `cairn-codec`
/// crate): records are read and written with the same cursor as log
/// records and protocol messages.
pub use cairn_codec::{DecodeError, Reader, Writer};

pub use cairn_schema::types::{decode_value, FieldDesc, TypeDesc, Value};

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
