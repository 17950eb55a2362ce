//! Collections usable as fields of persistent objects: [`List`], [`Set`] and
//! [`Map`], typically of references (`List<Ref<Part>>`,
//! `Map<String, Ref<Part>>`). They are stored inside their owner's record
//! (a count, then the elements; sets and maps in ascending order, which
//! decoding verifies), so they are read and written with it; a collection
//! that outgrows a quarter page makes its owner a large object.
//!
//! For an index over all objects of a type, see [`crate::Index`].

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};

use crate::codec::{DecodeError, Field, Reader, TypeDesc, Value, Writer};

fn mismatch(what: &str, v: &Value) -> DecodeError {
    DecodeError {
        what: what.into(),
        offset: 0,
        reason: format!("expected a sequence, found {v:?}"),
    }
}

/// An ordered list.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct List<T>(pub Vec<T>);

impl<T> List<T> {
    /// An empty list.
    pub fn new() -> List<T> {
        List(Vec::new())
    }
}

impl<T> Deref for List<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> DerefMut for List<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T> FromIterator<T> for List<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        List(iter.into_iter().collect())
    }
}

impl<T: Field> Field for List<T> {
    type View<'a> = crate::view::SeqView<'a, T>;
    fn type_desc() -> TypeDesc {
        TypeDesc::Seq(Box::new(T::type_desc()))
    }
    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        crate::view::seq::check::<T>(r, "list", 1)
    }
    fn skip(b: &[u8]) -> usize {
        crate::view::seq::skip::<T>(b)
    }
    fn view(b: &[u8]) -> crate::view::SeqView<'_, T> {
        crate::view::SeqView::at(b)
    }
    fn encode(&self, w: &mut Writer) {
        w.put_len(self.0.len() as u64);
        for x in &self.0 {
            x.encode(w);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.get_count("list", 1)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(T::decode(r)?);
        }
        Ok(List(v))
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::Seq(items) => items.into_iter().map(T::from_value).collect::<Result<_, _>>().map(List),
            other => Err(mismatch("list", &other)),
        }
    }
}

/// A set, kept in ascending order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Set<T: Ord>(pub BTreeSet<T>);

impl<T: Ord> Set<T> {
    /// An empty set.
    pub fn new() -> Set<T> {
        Set(BTreeSet::new())
    }
}

impl<T: Ord> Deref for Set<T> {
    type Target = BTreeSet<T>;
    fn deref(&self) -> &BTreeSet<T> {
        &self.0
    }
}

impl<T: Ord> DerefMut for Set<T> {
    fn deref_mut(&mut self) -> &mut BTreeSet<T> {
        &mut self.0
    }
}

impl<T: Field + Ord> Field for Set<T> {
    type View<'a> = crate::view::SeqView<'a, T>;
    fn type_desc() -> TypeDesc {
        TypeDesc::Set(Box::new(T::type_desc()))
    }
    /// Decodes to check the order of the elements (a set is rarely on the
    /// hot path of a traversal).
    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        Self::decode(r).map(|_| ())
    }
    fn skip(b: &[u8]) -> usize {
        crate::view::seq::skip::<T>(b)
    }
    fn view(b: &[u8]) -> crate::view::SeqView<'_, T> {
        crate::view::SeqView::at(b)
    }
    fn encode(&self, w: &mut Writer) {
        w.put_len(self.0.len() as u64);
        for x in &self.0 {
            x.encode(w);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.get_count("set", 1)?;
        let mut s = BTreeSet::new();
        for _ in 0..n {
            let x = T::decode(r)?;
            if s.last().is_some_and(|l| *l >= x) {
                return Err(r.error("set", "elements are not in strictly ascending order"));
            }
            s.insert(x);
        }
        Ok(Set(s))
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::Seq(items) => items.into_iter().map(T::from_value).collect::<Result<_, _>>().map(Set),
            other => Err(mismatch("set", &other)),
        }
    }
}

/// A map, kept in ascending key order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Map<K: Ord, V>(pub BTreeMap<K, V>);

impl<K: Ord, V> Map<K, V> {
    /// An empty map.
    pub fn new() -> Map<K, V> {
        Map(BTreeMap::new())
    }
}

impl<K: Ord, V> Deref for Map<K, V> {
    type Target = BTreeMap<K, V>;
    fn deref(&self) -> &BTreeMap<K, V> {
        &self.0
    }
}

impl<K: Ord, V> DerefMut for Map<K, V> {
    fn deref_mut(&mut self) -> &mut BTreeMap<K, V> {
        &mut self.0
    }
}

impl<K: Field + Ord, V: Field> Field for Map<K, V> {
    type View<'a> = crate::view::MapView<'a, K, V>;
    fn type_desc() -> TypeDesc {
        TypeDesc::Map(Box::new(K::type_desc()), Box::new(V::type_desc()))
    }
    /// Decodes to check the order of the keys.
    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        Self::decode(r).map(|_| ())
    }
    fn skip(b: &[u8]) -> usize {
        let (n, k) = crate::view::leb128(b);
        let mut at = k;
        for _ in 0..n {
            if at >= b.len() {
                break;
            }
            at += K::skip(crate::view::rest(b, at)).max(1);
            at += V::skip(crate::view::rest(b, at)).max(1);
        }
        at.min(b.len())
    }
    fn view(b: &[u8]) -> crate::view::MapView<'_, K, V> {
        crate::view::MapView::at(b)
    }
    fn encode(&self, w: &mut Writer) {
        w.put_len(self.0.len() as u64);
        for (k, v) in &self.0 {
            k.encode(w);
            v.encode(w);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.get_count("map", 2)?;
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let k = K::decode(r)?;
            if m.last_key_value().is_some_and(|(l, _)| *l >= k) {
                return Err(r.error("map", "keys are not in strictly ascending order"));
            }
            let v = V::decode(r)?;
            m.insert(k, v);
        }
        Ok(Map(m))
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::Seq(items) => {
                let mut m = BTreeMap::new();
                for item in items {
                    match item {
                        Value::Seq(mut kv) if kv.len() == 2 => {
                            let v = V::from_value(kv.pop().expect("2"))?;
                            let k = K::from_value(kv.pop().expect("2"))?;
                            m.insert(k, v);
                        }
                        other => return Err(mismatch("map entry", &other)),
                    }
                }
                Ok(Map(m))
            }
            other => Err(mismatch("map", &other)),
        }
    }
}
