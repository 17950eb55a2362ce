//! [`Field`] for the standard types, and order-preserving index keys.
//!
//! The encodings are those of `docs/encoding.md` (and the [`crate::codec`]
//! module doc): little-endian fixed-width numbers; `bool` as one byte, 0 or
//! 1; `String` as a LEB128 byte length then UTF-8; `Vec<T>` as a LEB128 count
//! then the elements; `Option<T>` as a tag byte (0 none, 1 some) then the
//! value.
//!
//! Invariants:
//!
//! - Every value encodes to at least [`min_encoded_size`] of its type
//!   descriptor, and that minimum is never 0 (`#[derive(Persistent)]` refuses
//!   field-less structs). A decoder therefore checks each count against the
//!   bytes left *before* allocating, so a hostile count allocates nothing.
//! - Decoding is strict: a `bool` byte or option tag other than 0 or 1, or a
//!   string that is not UTF-8, is a [`DecodeError`], never a guess.
//! - [`Field::from_value`] accepts only the [`Value`] variant that
//!   [`crate::codec::decode_value`] produces for the same type descriptor, and
//!   range-checks it: `Value::U(300)` into a `u8` is an error, not a wrap.
//!   Its errors carry byte offset 0, since a `Value` has no position.
//! - [`IndexKey`] bytes compare (as byte strings) exactly as the values
//!   compare; each key is self-delimiting, so keys can be concatenated (tuples).

use crate::codec::{DecodeError, Field, Reader, TypeDesc, Value, Writer};
use cairn_storage::Oid;

/// The fewest bytes any value of type `ty` encodes to (at least 1 for every
/// type a derived struct can hold). Used to bound counts before allocating.
pub fn min_encoded_size(ty: &TypeDesc) -> usize {
    match ty {
        TypeDesc::Bool | TypeDesc::U8 | TypeDesc::I8 => 1,
        TypeDesc::U16 | TypeDesc::I16 => 2,
        TypeDesc::U32 | TypeDesc::I32 | TypeDesc::F32 => 4,
        TypeDesc::U64 | TypeDesc::I64 | TypeDesc::F64 => 8,
        // A length or count byte, or a tag byte.
        TypeDesc::String | TypeDesc::Seq(_) | TypeDesc::Set(_) | TypeDesc::Map(..) | TypeDesc::Option(_) => 1,
        TypeDesc::Struct(_, fields) => fields
            .iter()
            .fold(0usize, |n, (_, t)| n.saturating_add(min_encoded_size(t))),
        TypeDesc::Ref(_) => Oid::ENCODED_SIZE,
    }
}

/// A [`DecodeError`] from [`Field::from_value`]: there is no byte offset.
fn value_error(what: &str, reason: impl Into<String>) -> DecodeError {
    DecodeError {
        what: what.to_string(),
        offset: 0,
        reason: reason.into(),
    }
}

/// A short name of a value's variant, for error messages.
fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::U(_) => "an unsigned integer",
        Value::I(_) => "a signed integer",
        Value::F(_) => "a float",
        Value::Str(_) => "a string",
        Value::Seq(_) => "a sequence",
        Value::Opt(_) => "an option",
        Value::Struct(_) => "a struct",
        Value::Ref(_) => "a reference",
    }
}

/// The error for a value of the wrong variant.
fn wrong_value(what: &str, expected: &str, v: &Value) -> DecodeError {
    value_error(what, format!("expected {expected}, found {}", value_kind(v)))
}

impl Field for bool {
    type View<'a> = bool;
    const FIXED_SIZE: Option<usize> = Some(1);

    fn type_desc() -> TypeDesc {
        TypeDesc::Bool
    }

    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        bool::decode(r).map(|_| ())
    }

    fn skip(b: &[u8]) -> usize {
        b.len().min(1)
    }

    fn view(b: &[u8]) -> bool {
        b.first() == Some(&1)
    }

    fn encode(&self, w: &mut Writer) {
        w.put(&[u8::from(*self)]);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let start = r.offset();
        match r.take(1, "bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError {
                what: "bool".into(),
                offset: start,
                reason: format!("byte {other} is neither 0 nor 1"),
            }),
        }
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::U(0) => Ok(false),
            Value::U(1) => Ok(true),
            Value::U(n) => Err(value_error("bool", format!("value {n} is neither 0 nor 1"))),
            other => Err(wrong_value("bool", "an unsigned integer", &other)),
        }
    }
}

/// `Field` for a fixed-width integer: little-endian; `from_value` takes the
/// given `Value` variant and range-checks it.
macro_rules! int_field {
    ($($t:ty => $desc:ident, $variant:ident, $kind:literal;)*) => {$(
        impl Field for $t {
            type View<'a> = $t;
            const FIXED_SIZE: Option<usize> = Some(std::mem::size_of::<$t>());

            fn type_desc() -> TypeDesc {
                TypeDesc::$desc
            }

            fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
                r.take(std::mem::size_of::<$t>(), stringify!($t)).map(|_| ())
            }

            #[inline]
            fn skip(b: &[u8]) -> usize {
                b.len().min(std::mem::size_of::<$t>())
            }

            #[inline]
            fn view(b: &[u8]) -> $t {
                <$t>::from_le_bytes(crate::view::le_bytes(b))
            }

            fn encode(&self, w: &mut Writer) {
                w.put(&self.to_le_bytes());
            }

            fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.take_array(stringify!($t))?))
            }

            fn from_value(v: Value) -> Result<Self, DecodeError> {
                match v {
                    Value::$variant(n) => <$t>::try_from(n).map_err(|_| {
                        value_error(stringify!($t), format!("value {n} is out of range"))
                    }),
                    other => Err(wrong_value(stringify!($t), $kind, &other)),
                }
            }
        }
    )*};
}

int_field! {
    u8 => U8, U, "an unsigned integer";
    u16 => U16, U, "an unsigned integer";
    u32 => U32, U, "an unsigned integer";
    u64 => U64, U, "an unsigned integer";
    i8 => I8, I, "a signed integer";
    i16 => I16, I, "a signed integer";
    i32 => I32, I, "a signed integer";
    i64 => I64, I, "a signed integer";
}

impl Field for f32 {
    type View<'a> = f32;
    const FIXED_SIZE: Option<usize> = Some(4);

    fn type_desc() -> TypeDesc {
        TypeDesc::F32
    }

    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        r.take(4, "f32").map(|_| ())
    }

    fn skip(b: &[u8]) -> usize {
        b.len().min(4)
    }

    fn view(b: &[u8]) -> f32 {
        f32::from_le_bytes(crate::view::le_bytes(b))
    }

    fn encode(&self, w: &mut Writer) {
        w.put(&self.to_le_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(f32::from_le_bytes(r.take_array("f32")?))
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            // `decode_value` widens an f32 exactly, so narrowing back is
            // exact too; anything that does not survive is not an f32.
            Value::F(x) => {
                let y = x as f32;
                if x.is_nan() || f64::from(y) == x {
                    Ok(y)
                } else {
                    Err(value_error("f32", format!("value {x} is not an f32")))
                }
            }
            other => Err(wrong_value("f32", "a float", &other)),
        }
    }
}

impl Field for f64 {
    type View<'a> = f64;
    const FIXED_SIZE: Option<usize> = Some(8);

    fn type_desc() -> TypeDesc {
        TypeDesc::F64
    }

    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        r.take(8, "f64").map(|_| ())
    }

    fn skip(b: &[u8]) -> usize {
        b.len().min(8)
    }

    fn view(b: &[u8]) -> f64 {
        f64::from_le_bytes(crate::view::le_bytes(b))
    }

    fn encode(&self, w: &mut Writer) {
        w.put(&self.to_le_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(f64::from_le_bytes(r.take_array("f64")?))
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::F(x) => Ok(x),
            other => Err(wrong_value("f64", "a float", &other)),
        }
    }
}

impl Field for String {
    type View<'a> = &'a str;

    fn type_desc() -> TypeDesc {
        TypeDesc::String
    }

    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        let n = r.get_count("string", 1)?;
        let start = r.offset();
        let bytes = r.take(n, "string")?;
        std::str::from_utf8(bytes).map(|_| ()).map_err(|e| DecodeError {
            what: "string".into(),
            offset: start + e.valid_up_to(),
            reason: "not UTF-8".into(),
        })
    }

    #[inline]
    fn skip(b: &[u8]) -> usize {
        let (n, k) = crate::view::leb128(b);
        usize::try_from(n).unwrap_or(usize::MAX).saturating_add(k).min(b.len())
    }

    #[inline]
    fn view(b: &[u8]) -> &str {
        let (n, k) = crate::view::leb128(b);
        let end = usize::try_from(n).unwrap_or(usize::MAX).saturating_add(k).min(b.len());
        // Checked when the view was made; checked again here rather than
        // trusted, so that no bytes can make an invalid `&str`.
        std::str::from_utf8(b.get(k..end).unwrap_or(&[])).unwrap_or("")
    }

    fn encode(&self, w: &mut Writer) {
        w.put_len(self.len() as u64);
        w.put(self.as_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.get_count("string", 1)?;
        let start = r.offset();
        let bytes = r.take(n, "string")?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(DecodeError {
                what: "string".into(),
                offset: start + e.valid_up_to(),
                reason: "not UTF-8".into(),
            }),
        }
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::Str(s) => Ok(s),
            other => Err(wrong_value("string", "a string", &other)),
        }
    }
}

impl<T: Field> Field for Vec<T> {
    type View<'a> = crate::view::SeqView<'a, T>;

    fn type_desc() -> TypeDesc {
        TypeDesc::Seq(Box::new(T::type_desc()))
    }

    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        crate::view::seq::check::<T>(r, "sequence", T::MIN_SIZE)
    }

    fn skip(b: &[u8]) -> usize {
        crate::view::seq::skip::<T>(b)
    }

    fn view(b: &[u8]) -> crate::view::SeqView<'_, T> {
        crate::view::SeqView::at(b)
    }

    fn encode(&self, w: &mut Writer) {
        w.put_len(self.len() as u64);
        for x in self {
            x.encode(w);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // The count is checked against the bytes left, at the element type's
        // minimum size, before the vector is allocated.
        let n = r.get_count("sequence", T::MIN_SIZE)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(T::decode(r)?);
        }
        Ok(v)
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::Seq(items) => items.into_iter().map(T::from_value).collect(),
            other => Err(wrong_value("sequence", "a sequence", &other)),
        }
    }
}

impl<T: Field> Field for Option<T> {
    type View<'a> = Option<T::View<'a>>;

    fn type_desc() -> TypeDesc {
        TypeDesc::Option(Box::new(T::type_desc()))
    }

    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        let start = r.offset();
        match r.take(1, "option tag")?[0] {
            0 => Ok(()),
            1 => T::check(r),
            other => Err(DecodeError {
                what: "option tag".into(),
                offset: start,
                reason: format!("tag {other} is neither 0 nor 1"),
            }),
        }
    }

    fn skip(b: &[u8]) -> usize {
        match b.first() {
            Some(1) => (1 + T::skip(crate::view::rest(b, 1))).min(b.len()),
            _ => b.len().min(1),
        }
    }

    fn view(b: &[u8]) -> Option<T::View<'_>> {
        match b.first() {
            Some(1) => Some(T::view(crate::view::rest(b, 1))),
            _ => None,
        }
    }

    fn encode(&self, w: &mut Writer) {
        match self {
            None => w.put(&[0]),
            Some(x) => {
                w.put(&[1]);
                x.encode(w);
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let start = r.offset();
        match r.take(1, "option tag")?[0] {
            0 => Ok(None),
            1 => Ok(Some(T::decode(r)?)),
            other => Err(DecodeError {
                what: "option tag".into(),
                offset: start,
                reason: format!("tag {other} is neither 0 nor 1"),
            }),
        }
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::Opt(None) => Ok(None),
            Value::Opt(Some(x)) => Ok(Some(T::from_value(*x)?)),
            other => Err(wrong_value("option", "an option", &other)),
        }
    }
}

/// A value usable as a B+-tree index key: its bytes sort as the value does.
///
/// For any two values `a` and `b` of one type, `a.cmp(&b)` equals the
/// byte-wise comparison of their keys (for floats, `f64::total_cmp`). Every
/// key is self-delimiting (no key is a proper prefix of another key of the
/// same type), so a tuple's key is its parts' keys concatenated.
///
/// | type | key bytes |
/// |---|---|
/// | `u8`..`u64` | big-endian |
/// | `i8`..`i64` | big-endian with the sign bit flipped |
/// | `bool` | `0x00` or `0x01` |
/// | `f32`, `f64` | big-endian bits; negative: all bits flipped, else the sign bit flipped |
/// | `str`, `String`, `[u8]`, `Vec<u8>` | the bytes, `0x00` escaped as `0x00 0xFF`, then `0x00 0x00` |
/// | `Option<T>` | `0x00` for none; `0x01` then `T`'s key |
/// | `(A, B)` | `A`'s key then `B`'s key |
pub trait IndexKey {
    /// Appends this value's key bytes to `out`.
    fn key_bytes(&self, out: &mut Vec<u8>);

    /// The stored type of a field whose keys these are (`&str` and `String`
    /// are both [`TypeDesc::String`]): an index query checks it against the
    /// indexed field's type, so a key of the wrong type is an error rather
    /// than an empty answer.
    fn key_type() -> TypeDesc;

    /// This value's key bytes in a new vector.
    fn to_key(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.key_bytes(&mut out);
        out
    }
}

/// Unsigned integers: big-endian, so the most significant byte compares first.
macro_rules! unsigned_key {
    ($($t:ty),*) => {$(
        impl IndexKey for $t {
            fn key_bytes(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }

            fn key_type() -> TypeDesc {
                <$t as Field>::type_desc()
            }
        }
    )*};
}

unsigned_key!(u8, u16, u32, u64);

/// Signed integers: flipping the sign bit maps `MIN..=MAX` onto
/// `0..=UMAX` in order, which then sorts big-endian like an unsigned one.
macro_rules! signed_key {
    ($($t:ty => $u:ty),*) => {$(
        impl IndexKey for $t {
            fn key_bytes(&self, out: &mut Vec<u8>) {
                let flipped = (*self as $u) ^ (1 << (<$u>::BITS - 1));
                out.extend_from_slice(&flipped.to_be_bytes());
            }

            fn key_type() -> TypeDesc {
                <$t as Field>::type_desc()
            }
        }
    )*};
}

signed_key!(i8 => u8, i16 => u16, i32 => u32, i64 => u64);

impl IndexKey for bool {
    fn key_bytes(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }

    fn key_type() -> TypeDesc {
        TypeDesc::Bool
    }
}

impl IndexKey for f64 {
    /// The total order of [`f64::total_cmp`]: `-NaN < -∞ < … < -0.0 < +0.0 < … < +∞ < +NaN`.
    fn key_bytes(&self, out: &mut Vec<u8>) {
        let bits = self.to_bits();
        // Negative numbers: flip every bit, so larger magnitudes sort lower and
        // all of them below the positives. Positive: set the sign bit.
        let key = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
        out.extend_from_slice(&key.to_be_bytes());
    }

    fn key_type() -> TypeDesc {
        TypeDesc::F64
    }
}

impl IndexKey for f32 {
    /// The total order of [`f32::total_cmp`], as for `f64`.
    fn key_bytes(&self, out: &mut Vec<u8>) {
        let bits = self.to_bits();
        let key = if bits >> 31 == 1 { !bits } else { bits | (1 << 31) };
        out.extend_from_slice(&key.to_be_bytes());
    }

    fn key_type() -> TypeDesc {
        TypeDesc::F32
    }
}

impl IndexKey for [u8] {
    /// The terminator `0x00 0x00` sorts below every escaped or plain byte that
    /// could follow, so a prefix sorts before any longer string.
    fn key_bytes(&self, out: &mut Vec<u8>) {
        out.reserve(self.len() + 2);
        for &b in self {
            out.push(b);
            if b == 0 {
                out.push(0xFF);
            }
        }
        out.extend_from_slice(&[0, 0]);
    }

    fn key_type() -> TypeDesc {
        TypeDesc::Seq(Box::new(TypeDesc::U8))
    }
}

impl IndexKey for Vec<u8> {
    fn key_bytes(&self, out: &mut Vec<u8>) {
        self.as_slice().key_bytes(out);
    }

    fn key_type() -> TypeDesc {
        <[u8]>::key_type()
    }
}

impl IndexKey for str {
    /// UTF-8 byte order is code-point order, which is `str`'s `Ord`.
    fn key_bytes(&self, out: &mut Vec<u8>) {
        self.as_bytes().key_bytes(out);
    }

    fn key_type() -> TypeDesc {
        TypeDesc::String
    }
}

impl IndexKey for String {
    fn key_bytes(&self, out: &mut Vec<u8>) {
        self.as_str().key_bytes(out);
    }

    fn key_type() -> TypeDesc {
        TypeDesc::String
    }
}

impl<T: IndexKey> IndexKey for Option<T> {
    fn key_bytes(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(x) => {
                out.push(1);
                x.key_bytes(out);
            }
        }
    }

    fn key_type() -> TypeDesc {
        TypeDesc::Option(Box::new(T::key_type()))
    }
}

impl<A: IndexKey, B: IndexKey> IndexKey for (A, B) {
    /// Correct because `A`'s key is self-delimiting: the first differing byte
    /// lies in `A`'s key unless the `A`s are equal.
    fn key_bytes(&self, out: &mut Vec<u8>) {
        self.0.key_bytes(out);
        self.1.key_bytes(out);
    }

    /// No field has a tuple type, so a pair key matches no index: it is for
    /// keys built by hand.
    fn key_type() -> TypeDesc {
        TypeDesc::Struct(
            "tuple".to_string(),
            vec![("0".to_string(), A::key_type()), ("1".to_string(), B::key_type())],
        )
    }
}

impl<T: IndexKey + ?Sized> IndexKey for &T {
    fn key_bytes(&self, out: &mut Vec<u8>) {
        (**self).key_bytes(out);
    }

    fn key_type() -> TypeDesc {
        T::key_type()
    }
}

/// Helpers called by the code `#[derive(Persistent)]` generates. Not a
/// stable API: application code should not call them.
#[doc(hidden)]
pub mod derive_support {
    use crate::codec::DecodeError;

    /// Prefixes a field's decoding error with the struct and field it came
    /// from (`Part.x`), keeping the byte offset.
    pub fn in_field(e: DecodeError, type_name: &str, field: &str) -> DecodeError {
        DecodeError {
            what: format!("{type_name}.{field}"),
            offset: e.offset,
            reason: format!("{}: {}", e.what, e.reason),
        }
    }

    /// The error for a field an older record lacks and that has no default.
    pub fn missing_field(type_name: &str, field: &str) -> DecodeError {
        DecodeError {
            what: format!("{type_name}.{field}"),
            offset: 0,
            reason: format!("field `{field}` of `{type_name}` is missing and has no #[cairn(default)]"),
        }
    }

    /// The error for a field given twice to `from_values`.
    pub fn duplicate_field(type_name: &str, field: &str) -> DecodeError {
        DecodeError {
            what: format!("{type_name}.{field}"),
            offset: 0,
            reason: "field given twice".into(),
        }
    }

    /// The error for a nested struct whose value is not a `Value::Struct`.
    pub fn not_a_struct(type_name: &str) -> DecodeError {
        DecodeError {
            what: type_name.to_string(),
            offset: 0,
            reason: "expected a struct value".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::decode_value;
    use proptest::prelude::*;

    fn enc<T: Field>(x: &T) -> Vec<u8> {
        let mut w = Writer::new();
        x.encode(&mut w);
        w.into_bytes()
    }

    fn dec<T: Field>(b: &[u8]) -> Result<T, DecodeError> {
        let mut r = Reader::new(b);
        let x = T::decode(&mut r)?;
        r.finish("test")?;
        Ok(x)
    }

    /// Encodes, decodes both ways (typed and via `Value`), and checks both.
    fn round_trip<T: Field + PartialEq + std::fmt::Debug>(x: T) {
        let b = enc(&x);
        assert!(b.len() >= min_encoded_size(&T::type_desc()));
        assert_eq!(
            T::MIN_SIZE,
            min_encoded_size(&T::type_desc()),
            "{}",
            std::any::type_name::<T>()
        );
        assert_eq!(dec::<T>(&b).unwrap(), x);
        let mut r = Reader::new(&b);
        let v = decode_value(&T::type_desc(), &mut r).unwrap();
        r.finish("test").unwrap();
        assert_eq!(T::from_value(v).unwrap(), x);
    }

    /// The byte examples in `docs/encoding.md`.
    #[test]
    fn documented_examples() {
        assert_eq!(enc(&true), [0x01]);
        assert_eq!(enc(&0x1234u16), [0x34, 0x12]);
        assert_eq!(enc(&-2i32), [0xFE, 0xFF, 0xFF, 0xFF]);
        assert_eq!(enc(&1.0f64), [0, 0, 0, 0, 0, 0, 0xF0, 0x3F]);
        assert_eq!(enc(&"hé".to_string()), [0x03, b'h', 0xC3, 0xA9]);
        assert_eq!(enc(&"x".repeat(200))[..2], [0xC8, 0x01]);
        assert_eq!(enc(&vec![1u16, 2]), [0x02, 0x01, 0x00, 0x02, 0x00]);
        assert_eq!(enc(&Some(7u8)), [0x01, 0x07]);
        assert_eq!(enc(&None::<u8>), [0x00]);
        assert_eq!(5u16.to_key(), [0x00, 0x05]);
        assert_eq!((-1i16).to_key(), [0x7F, 0xFF]);
        assert_eq!("a\0b".to_key(), [b'a', 0x00, 0xFF, b'b', 0x00, 0x00]);
        assert_eq!(1.0f64.to_key(), [0xBF, 0xF0, 0, 0, 0, 0, 0, 0]);
        assert_eq!((-1.0f64).to_key(), [0x40, 0x0F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
    }

    #[test]
    fn extremes_round_trip() {
        round_trip(u8::MAX);
        round_trip(u64::MAX);
        round_trip(i64::MIN);
        round_trip(i8::MIN);
        round_trip(f64::NEG_INFINITY);
        round_trip(f32::MIN_POSITIVE);
        round_trip(String::new());
        round_trip(vec![Some(vec![String::from("ä")]), None]);
    }

    #[test]
    fn strict_bytes_are_rejected() {
        assert!(dec::<bool>(&[2]).is_err());
        assert!(dec::<Option<u8>>(&[2, 0]).is_err());
        let e = dec::<String>(&[3, b'a', 0xFF, b'b']).unwrap_err();
        assert_eq!(e.offset, 2, "{e}");
        // A count far beyond the bytes left fails before allocating.
        assert!(dec::<Vec<u64>>(&[0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        // Two u64s need 16 bytes; 9 are left.
        assert!(dec::<Vec<u64>>(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(dec::<u32>(&[1, 2, 3]).is_err());
    }

    #[test]
    fn from_value_is_range_checked() {
        assert!(u8::from_value(Value::U(300)).is_err());
        assert_eq!(u8::from_value(Value::U(255)), Ok(255));
        assert!(i8::from_value(Value::I(-129)).is_err());
        assert!(u32::from_value(Value::I(1)).is_err());
        assert!(bool::from_value(Value::U(2)).is_err());
        assert!(f32::from_value(Value::F(0.1)).is_err());
        assert!(f32::from_value(Value::F(f64::NAN)).unwrap().is_nan());
        assert!(String::from_value(Value::U(0)).is_err());
        assert!(Vec::<u8>::from_value(Value::Seq(vec![Value::U(1), Value::U(256)])).is_err());
        assert!(Option::<u8>::from_value(Value::Opt(Some(Box::new(Value::U(256))))).is_err());
    }

    /// Byte strings rich in 0x00 and 0xFF, the escape's edge cases.
    fn edgy_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop_oneof![Just(0u8), Just(0xFF), Just(1), any::<u8>()], 0..8)
    }

    /// Strings with NULs, ASCII and multi-byte characters.
    fn edgy_string() -> impl Strategy<Value = String> {
        prop_oneof!["[\\x00\\x01ab\u{e9}\u{10000}]{0,6}", any::<String>()]
    }

    /// Asserts that key order equals value order for one pair.
    fn same_order<T: IndexKey + Ord>(a: &T, b: &T) -> Result<(), TestCaseError> {
        prop_assert_eq!(a.cmp(b), a.to_key().cmp(&b.to_key()));
        Ok(())
    }

    proptest! {
        #[test]
        fn key_order_unsigned(a: u64, b: u64, c: u8, d: u8, e: u16, f: u16, g: u32, h: u32) {
            same_order(&a, &b)?;
            same_order(&c, &d)?;
            same_order(&e, &f)?;
            same_order(&g, &h)?;
        }

        #[test]
        fn key_order_signed(a: i64, b: i64, c: i8, d: i8, e: i16, f: i16, g: i32, h: i32) {
            same_order(&a, &b)?;
            same_order(&c, &d)?;
            same_order(&e, &f)?;
            same_order(&g, &h)?;
            same_order(&a, &a.wrapping_add(1))?;
        }

        #[test]
        fn key_order_bool(a: bool, b: bool) {
            same_order(&a, &b)?;
        }

        #[test]
        fn key_order_string(a in edgy_string(), b in edgy_string()) {
            same_order(&a, &b)?;
            // A string against its own extensions, the prefix case.
            same_order(&a, &format!("{a}\0"))?;
            same_order(&a, &format!("{a}{b}"))?;
        }

        #[test]
        fn key_order_bytes(a in edgy_bytes(), b in edgy_bytes()) {
            same_order(&a, &b)?;
            let ab: Vec<u8> = a.iter().chain(&b).copied().collect();
            same_order(&a, &ab)?;
        }

        #[test]
        fn key_order_f64(
            a in prop_oneof![any::<f64>(), Just(0.0), Just(-0.0), Just(f64::NAN), Just(-f64::NAN),
                Just(f64::INFINITY), Just(f64::NEG_INFINITY)],
            bits: u64,
        ) {
            let b = f64::from_bits(bits);
            prop_assert_eq!(a.total_cmp(&b), a.to_key().cmp(&b.to_key()));
            let (c, d) = (a as f32, f32::from_bits(bits as u32));
            prop_assert_eq!(c.total_cmp(&d), c.to_key().cmp(&d.to_key()));
        }

        #[test]
        fn key_order_option(a: Option<i32>, b: Option<i32>) {
            same_order(&a, &b)?;
        }

        #[test]
        fn key_order_pairs(
            a in (edgy_string(), any::<i32>()),
            b in (edgy_string(), any::<i32>()),
            c in (edgy_bytes(), edgy_bytes()),
            d in (edgy_bytes(), edgy_bytes()),
            e: (u8, bool),
            f: (u8, bool),
        ) {
            same_order(&a, &b)?;
            same_order(&c, &d)?;
            same_order(&e, &f)?;
            // Equal first parts: the second decides.
            same_order(&(a.0.clone(), a.1), &(a.0.clone(), b.1))?;
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            let _ = dec::<Vec<Option<String>>>(&bytes);
            let _ = dec::<Vec<Vec<u64>>>(&bytes);
            let _ = dec::<Option<f32>>(&bytes);
        }
    }
}
