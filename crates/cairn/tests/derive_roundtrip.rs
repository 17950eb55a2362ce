//! `#[derive(Persistent)]` round trips: every supported field type at its
//! edges, random values, strict rejection of truncated and padded records,
//! no panics on random bytes, and schema evolution at the codec level
//! (decoding with an old version's type descriptors, rebuilding by name).

use cairn::codec::{decode_value, DecodeError, Field, FieldDesc, Persistent as PersistentTrait, TypeDesc, Value};
use cairn::fields::IndexKey;
use cairn::{Persistent, Reader, Writer};
use proptest::prelude::*;

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Ints {
    a: u8,
    b: u16,
    c: u32,
    d: u64,
    e: i8,
    f: i16,
    g: i32,
    h: i64,
}

/// Floats are compared by bits, so that NaN payloads and -0.0 count.
#[derive(Persistent, Debug, Clone)]
struct Floats {
    x: f32,
    y: f64,
}

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Mixed {
    flag: bool,
    s: String,
    bytes: Vec<u8>,
    nums: Vec<i64>,
    words: Vec<String>,
    nested: Vec<Vec<String>>,
    maybe: Option<u32>,
    maybe_s: Option<String>,
    opts: Vec<Option<bool>>,
}

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Point {
    x: i32,
    y: i32,
}

#[derive(Persistent, Debug, Clone, PartialEq)]
struct Segment {
    from: Point,
    to: Point,
    label: String,
}

/// Two levels of nested plain structs: `Drawing` → `Segment` → `Point`.
#[derive(Persistent, Debug, Clone, PartialEq)]
struct Drawing {
    name: String,
    main: Segment,
    segments: Vec<Segment>,
    origin: Option<Point>,
}

/// Index options, and field names that could clash with generated code.
#[derive(Persistent, Debug, Clone, PartialEq)]
struct Indexed {
    #[cairn(index)]
    id: u32,
    #[cairn(index, default)]
    r#type: String,
    r: u8,
    w: u8,
    v: u8,
    e: u8,
}

fn encode<T: PersistentTrait>(x: &T) -> Vec<u8> {
    let mut w = Writer::new();
    x.encode_fields(&mut w);
    w.into_bytes()
}

/// Decodes a whole record's fields: trailing bytes are an error.
fn decode<T: PersistentTrait>(bytes: &[u8]) -> Result<T, DecodeError> {
    let mut r = Reader::new(bytes);
    let x = T::decode_fields(&mut r)?;
    r.finish(T::NAME)?;
    Ok(x)
}

/// Decodes a record written with the schema `fields` into named values, as
/// the typed layer does for an old schema version.
fn decode_values(fields: &[FieldDesc], bytes: &[u8]) -> Result<Vec<(String, Value)>, DecodeError> {
    let mut r = Reader::new(bytes);
    let mut values = Vec::with_capacity(fields.len());
    for f in fields {
        values.push((f.name.clone(), decode_value(&f.ty, &mut r)?));
    }
    r.finish("record")?;
    Ok(values)
}

/// Checks both decoding paths (typed, and by value through `from_values`)
/// and that every strict prefix and every padded record is refused.
fn round_trip<T: PersistentTrait + PartialEq + std::fmt::Debug>(x: &T) {
    let bytes = encode(x);
    assert_eq!(&decode::<T>(&bytes).unwrap(), x);
    let values = decode_values(&T::fields(), &bytes).unwrap();
    assert_eq!(&T::from_values(values).unwrap(), x);
    rejects_cuts_and_padding::<T>(&bytes);
}

fn rejects_cuts_and_padding<T: PersistentTrait>(bytes: &[u8]) {
    for cut in 0..bytes.len() {
        assert!(decode::<T>(&bytes[..cut]).is_err(), "prefix of {cut} bytes decoded");
        assert!(
            decode_values(&T::fields(), &bytes[..cut]).is_err(),
            "prefix of {cut} bytes decoded by value"
        );
    }
    for extra in [&[0u8][..], &[1], &[0, 0, 0]] {
        let padded = [bytes, extra].concat();
        let e = decode::<T>(&padded).err().expect("trailing bytes decoded");
        assert!(e.reason.contains("trailing"), "{e}");
        assert!(decode_values(&T::fields(), &padded).is_err());
    }
}

#[test]
fn integers_at_their_extremes() {
    round_trip(&Ints {
        a: 0,
        b: 0,
        c: 0,
        d: 0,
        e: 0,
        f: 0,
        g: 0,
        h: 0,
    });
    round_trip(&Ints {
        a: u8::MAX,
        b: u16::MAX,
        c: u32::MAX,
        d: u64::MAX,
        e: i8::MAX,
        f: i16::MAX,
        g: i32::MAX,
        h: i64::MAX,
    });
    let min = Ints {
        a: 1,
        b: 1,
        c: 1,
        d: 1,
        e: i8::MIN,
        f: i16::MIN,
        g: i32::MIN,
        h: i64::MIN,
    };
    round_trip(&min);
    // Fixed widths, little-endian, in declaration order.
    assert_eq!(encode(&min).len(), 1 + 2 + 4 + 8 + 1 + 2 + 4 + 8);
    assert_eq!(
        encode(&min)[15..],
        [0x80, 0x00, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x80]
    );
}

#[test]
fn floats_keep_their_bits() {
    let specials_64 = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::from_bits(0x7FF0_0000_0000_0001),
        -f64::NAN,
        f64::MIN_POSITIVE,
        f64::MAX,
    ];
    let specials_32 = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0x7FC0_1234),
        f32::MIN,
        1.5e-45,
    ];
    for &y in &specials_64 {
        for &x in &specials_32 {
            let v = Floats { x, y };
            let bytes = encode(&v);
            let back: Floats = decode(&bytes).unwrap();
            assert_eq!((back.x.to_bits(), back.y.to_bits()), (x.to_bits(), y.to_bits()));
            let by_value = Floats::from_values(decode_values(&Floats::fields(), &bytes).unwrap()).unwrap();
            assert_eq!(by_value.y.to_bits(), y.to_bits());
            // Through `Value` an f32 is widened to f64 and back: exact for
            // numbers; a NaN stays a NaN.
            assert!(by_value.x.to_bits() == x.to_bits() || (x.is_nan() && by_value.x.is_nan()));
            rejects_cuts_and_padding::<Floats>(&bytes);
        }
    }
}

#[test]
fn bools_strings_vecs_and_options() {
    round_trip(&Mixed {
        flag: false,
        s: String::new(),
        bytes: Vec::new(),
        nums: Vec::new(),
        words: Vec::new(),
        nested: Vec::new(),
        maybe: None,
        maybe_s: None,
        opts: Vec::new(),
    });
    round_trip(&Mixed {
        flag: true,
        s: "naïve 日本語 🦀 \0 end".into(),
        bytes: vec![0, 0xFF, 0x80, 0x7F, 0],
        nums: vec![i64::MIN, -1, 0, 1, i64::MAX],
        words: vec![String::new(), "é".into(), "x".repeat(300)],
        nested: vec![vec![], vec![String::new()], vec!["a".into(), "ßü".into()]],
        maybe: Some(u32::MAX),
        maybe_s: Some(String::new()),
        opts: vec![None, Some(false), Some(true)],
    });
}

#[test]
fn bad_bytes_inside_fields_are_refused() {
    let base = Mixed {
        flag: true,
        s: "é".into(),
        bytes: vec![],
        nums: vec![],
        words: vec![],
        nested: vec![],
        maybe: None,
        maybe_s: None,
        opts: vec![],
    };
    let good = encode(&base);
    // flag 2 instead of 1.
    let mut b = good.clone();
    b[0] = 2;
    let e = decode::<Mixed>(&b).unwrap_err();
    assert_eq!((e.what.as_str(), e.offset), ("Mixed.flag", 0), "{e}");
    // Invalid UTF-8 in `s` (0xC3 0xA9 → 0xC3 0x28).
    let mut b = good.clone();
    b[3] = 0x28;
    let e = decode::<Mixed>(&b).unwrap_err();
    assert_eq!(e.what, "Mixed.s", "{e}");
    assert!(decode_values(&Mixed::fields(), &b).is_err());
    // Option tag 2 in `maybe` (after flag, s, and five empty sequences).
    let mut b = good.clone();
    b[1 + 3 + 4] = 2;
    let e = decode::<Mixed>(&b).unwrap_err();
    assert_eq!(e.what, "Mixed.maybe", "{e}");
    // A huge count for `bytes` fails on the count, before any allocation.
    let mut b = good[..4].to_vec();
    b.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]);
    let e = decode::<Mixed>(&b).unwrap_err();
    assert!(e.reason.contains("cannot fit"), "{e}");
}

#[test]
fn nested_structs_two_levels_deep() {
    let p = |x, y| Point { x, y };
    let seg = |a, b, label: &str| Segment {
        from: a,
        to: b,
        label: label.into(),
    };
    let d = Drawing {
        name: "plan".into(),
        main: seg(p(i32::MIN, 0), p(0, i32::MAX), "main"),
        segments: vec![seg(p(1, 2), p(3, 4), ""), seg(p(-1, -2), p(-3, -4), "back")],
        origin: Some(p(7, 8)),
    };
    round_trip(&d);
    round_trip(&Drawing {
        origin: None,
        segments: vec![],
        ..d.clone()
    });
    // A nested struct is its fields inline: no header, no length.
    assert_eq!(encode(&p(1, 2)), [1, 0, 0, 0, 2, 0, 0, 0]);
    let point = TypeDesc::Struct(
        "Point".into(),
        vec![("x".into(), TypeDesc::I32), ("y".into(), TypeDesc::I32)],
    );
    let segment = TypeDesc::Struct(
        "Segment".into(),
        vec![
            ("from".into(), point.clone()),
            ("to".into(), point.clone()),
            ("label".into(), TypeDesc::String),
        ],
    );
    assert_eq!(Segment::type_desc(), segment);
    let names: Vec<_> = Drawing::fields()
        .into_iter()
        .map(|f| (f.name, f.ty, f.has_default))
        .collect();
    assert_eq!(
        names,
        [
            ("name".to_string(), TypeDesc::String, false),
            ("main".to_string(), segment.clone(), false),
            ("segments".to_string(), TypeDesc::Seq(Box::new(segment)), false),
            ("origin".to_string(), TypeDesc::Option(Box::new(point)), false),
        ]
    );
    assert_eq!(Drawing::NAME, "Drawing");
    // An error deep inside names the innermost field and keeps the offset.
    let bytes = encode(&d);
    let e = decode::<Drawing>(&bytes[..1 + 4 + 6]).unwrap_err();
    assert_eq!(e.what, "Drawing.main", "{e}");
    assert!(e.reason.contains("Segment.from") && e.reason.contains("Point.y"), "{e}");
    assert_eq!(e.offset, 1 + 4 + 4);
}

#[test]
fn index_keys_of_indexed_fields() {
    let x = Indexed {
        id: 258,
        r#type: "a\0".into(),
        r: 1,
        w: 2,
        v: 3,
        e: 4,
    };
    round_trip(&x);
    assert_eq!(
        x.index_keys(),
        [("id", vec![0, 0, 1, 2]), ("type", vec![b'a', 0, 0xFF, 0, 0])]
    );
    assert_eq!(x.index_keys()[0].1, x.id.to_key());
    let descs = Indexed::fields();
    assert_eq!(descs[1].name, "type");
    assert!(descs[1].has_default && !descs[0].has_default);
    // A type without index fields has no keys.
    assert!(Point { x: 1, y: 2 }.index_keys().is_empty());
}

fn arb_point() -> impl Strategy<Value = Point> {
    (any::<i32>(), any::<i32>()).prop_map(|(x, y)| Point { x, y })
}

fn arb_segment() -> impl Strategy<Value = Segment> {
    (arb_point(), arb_point(), any::<String>()).prop_map(|(from, to, label)| Segment { from, to, label })
}

fn arb_drawing() -> impl Strategy<Value = Drawing> {
    (
        any::<String>(),
        arb_segment(),
        prop::collection::vec(arb_segment(), 0..4),
        prop::option::of(arb_point()),
    )
        .prop_map(|(name, main, segments, origin)| Drawing {
            name,
            main,
            segments,
            origin,
        })
}

fn arb_ints() -> impl Strategy<Value = Ints> {
    (any::<(u8, u16, u32, u64)>(), any::<(i8, i16, i32, i64)>()).prop_map(|((a, b, c, d), (e, f, g, h))| Ints {
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        h,
    })
}

fn arb_mixed() -> impl Strategy<Value = Mixed> {
    (
        any::<bool>(),
        any::<String>(),
        any::<Vec<u8>>(),
        any::<Vec<i64>>(),
        prop::collection::vec(any::<String>(), 0..4),
        prop::collection::vec(prop::collection::vec(any::<String>(), 0..3), 0..3),
        any::<Option<u32>>(),
        any::<Option<String>>(),
        any::<Vec<Option<bool>>>(),
    )
        .prop_map(|(flag, s, bytes, nums, words, nested, maybe, maybe_s, opts)| Mixed {
            flag,
            s,
            bytes,
            nums,
            words,
            nested,
            maybe,
            maybe_s,
            opts,
        })
}

/// Random bytes, and random bytes that start like a real record so that
/// decoding gets past the first fields.
fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        (
            arb_drawing(),
            prop::collection::vec(any::<u8>(), 0..8),
            any::<prop::sample::Index>()
        )
            .prop_map(|(d, junk, at)| {
                let mut b = encode(&d);
                let cut = at.index(b.len() + 1);
                b.truncate(cut);
                b.extend(junk);
                b
            }),
    ]
}

proptest! {
    #[test]
    fn random_values_round_trip(d in arb_drawing(), i in arb_ints(), m in arb_mixed()) {
        prop_assert_eq!(&decode::<Drawing>(&encode(&d)).unwrap(), &d);
        prop_assert_eq!(&Drawing::from_values(decode_values(&Drawing::fields(), &encode(&d)).unwrap()).unwrap(), &d);
        prop_assert_eq!(&decode::<Ints>(&encode(&i)).unwrap(), &i);
        prop_assert_eq!(&decode::<Mixed>(&encode(&m)).unwrap(), &m);
        prop_assert_eq!(&Mixed::from_values(decode_values(&Mixed::fields(), &encode(&m)).unwrap()).unwrap(), &m);
    }

    #[test]
    fn random_floats_round_trip(x_bits: u32, y_bits: u64) {
        let v = Floats { x: f32::from_bits(x_bits), y: f64::from_bits(y_bits) };
        let back: Floats = decode(&encode(&v)).unwrap();
        prop_assert_eq!((back.x.to_bits(), back.y.to_bits()), (x_bits, y_bits));
    }

    #[test]
    fn decoding_random_bytes_never_panics(bytes in arb_bytes()) {
        // Each may fail; none may panic, loop or allocate without bound.
        let _ = decode::<Drawing>(&bytes);
        let _ = decode::<Mixed>(&bytes);
        let _ = decode::<Ints>(&bytes);
        let _ = decode::<Indexed>(&bytes);
        if let Ok(values) = decode_values(&Drawing::fields(), &bytes) {
            let _ = Drawing::from_values(values);
        }
        if let Ok(values) = decode_values(&Mixed::fields(), &bytes) {
            let _ = Mixed::from_values(values);
        }
    }
}

/// Two versions of one persistent type, named alike as in an application
/// that edited its struct between releases.
mod v1 {
    #[derive(cairn::Persistent, Debug, Clone, PartialEq)]
    pub struct Part {
        pub id: u32,
        pub kind: String,
        pub removed_later: i64,
        pub at: super::Point,
    }
}

mod v2 {
    /// Adds fields with defaults, drops `removed_later`, reorders.
    #[derive(cairn::Persistent, Debug, Clone, PartialEq)]
    pub struct Part {
        pub kind: String,
        pub id: u32,
        #[cairn(default)]
        pub tags: Vec<String>,
        #[cairn(default)]
        pub weight: Option<f64>,
        pub at: super::Point,
    }
}

mod v2_no_default {
    /// Adds `color` without a default: old records cannot be read.
    #[derive(cairn::Persistent, Debug)]
    pub struct Part {
        pub id: u32,
        pub kind: String,
        pub color: u32,
    }
}

mod v2_narrowed {
    /// Retypes `id` to `u8`: rebuilding range-checks rather than wraps.
    #[derive(cairn::Persistent, Debug)]
    pub struct Part {
        pub id: u8,
        pub kind: String,
    }
}

fn old_record() -> (v1::Part, Vec<(String, Value)>) {
    let old = v1::Part {
        id: 300,
        kind: "bolt".into(),
        removed_later: -5,
        at: Point { x: 1, y: -1 },
    };
    let values = decode_values(&v1::Part::fields(), &encode(&old)).unwrap();
    (old, values)
}

#[test]
fn evolution_added_field_with_default_reads_old_records() {
    let (old, values) = old_record();
    let new = v2::Part::from_values(values).unwrap();
    assert_eq!(
        new,
        v2::Part {
            kind: old.kind,
            id: old.id,
            tags: vec![],
            weight: None,
            at: old.at
        }
    );
    assert!(v2::Part::fields()
        .iter()
        .filter(|f| f.has_default)
        .map(|f| f.name.as_str())
        .eq(["tags", "weight"]));
    // The new version's own records still round-trip.
    round_trip(&v2::Part {
        tags: vec!["m4".into()],
        weight: Some(-0.5),
        ..new
    });
}

#[test]
fn evolution_added_field_without_default_is_an_error() {
    let (_, values) = old_record();
    let e = v2_no_default::Part::from_values(values).unwrap_err();
    assert_eq!(e.what, "Part.color", "{e}");
    assert!(
        e.reason.contains("`color`") && e.reason.contains("`Part`") && e.reason.contains("default"),
        "{e}"
    );
}

#[test]
fn evolution_narrowed_field_is_range_checked() {
    let (_, values) = old_record();
    let e = v2_narrowed::Part::from_values(values).unwrap_err();
    assert_eq!(e.what, "Part.id", "{e}");
    assert!(e.reason.contains("300"), "{e}");
    // A value of the wrong kind (the catalog should have refused the retype).
    let e = v2_narrowed::Part::from_values(vec![("id".into(), Value::Str("x".into()))]).unwrap_err();
    assert_eq!(e.what, "Part.id", "{e}");
}

#[test]
fn from_values_refuses_a_field_given_twice() {
    let values = vec![
        ("x".into(), Value::I(1)),
        ("y".into(), Value::I(2)),
        ("x".into(), Value::I(3)),
    ];
    let e = Point::from_values(values).unwrap_err();
    assert_eq!(e.what, "Point.x", "{e}");
    assert!(Point::from_value(Value::I(1)).is_err());
}

/// The record example of `docs/encoding.md` (fields part; the header is the
/// typed layer's).
#[test]
fn documented_record_example() {
    #[derive(Persistent, Debug, PartialEq)]
    struct Part {
        id: u32,
        kind: String,
        tags: Vec<u16>,
        note: Option<u8>,
    }
    let p = Part {
        id: 7,
        kind: "ab".into(),
        tags: vec![1],
        note: None,
    };
    assert_eq!(encode(&p), [0x07, 0, 0, 0, 0x02, 0x61, 0x62, 0x01, 0x01, 0x00, 0x00]);
    round_trip(&p);
    assert_eq!((1u8, "x").to_key(), [0x01, 0x78, 0x00, 0x00]);
    assert_eq!(0i16.to_key(), [0x80, 0x00]);
}
