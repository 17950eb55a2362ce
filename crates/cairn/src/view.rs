//! Objects read in place: views of encoded records, with no decoding and no
//! allocation.
//!
//! Every [`Field`] type has a *view*, [`Field::View`], read straight from its
//! encoded bytes (see [`crate::codec`] for the encoding): numbers are read
//! as themselves, a `String` as `&str`, a `Ref<T>` as a `Ref<T>`, a `Vec<T>`
//! or [`List<T>`](crate::List) as a [`SeqView`] whose items are `T`'s views,
//! an `Option<T>` as an `Option` of `T`'s view, a [`Map`](crate::Map) as a
//! [`MapView`], and a struct with `#[derive(Persistent)]` as the generated
//! `{Name}View<'a>`, which has one method per field, named like the field.
//!
//! [`Obj<T>`] is what [`crate::Transaction::view`] returns: the record's
//! bytes (a range of a page image in the client's buffer, or a copy of the
//! object) and its OID; [`Obj::get`] gives `T`'s view of them.
//!
//! # Checked once, then read without checks
//!
//! An `Obj` is made only from bytes that [`Field::check`] accepted: the same
//! bytes [`Field::decode`] accepts (every length against the bytes left,
//! every `bool` and option tag, every string's UTF-8, set and map order, no
//! trailing bytes). Damaged bytes are therefore an error naming the object
//! (and so its page) when the view is made, never later. The accessors then
//! read without returning errors: [`Field::skip`] and [`Field::view`] never
//! panic and never read outside the slice they are given, whatever the bytes
//! (on bytes `check` did not accept they return some harmless value), so
//! even a bug that skipped the check could not cause undefined behaviour.
//! There is no `unsafe` in this module: a string view re-checks its UTF-8
//! (a few nanoseconds for the short strings records hold) rather than trust
//! the earlier check.
//!
//! The bytes an `Obj` holds never change: a page image or object copy is
//! shared through an `Arc<[u8]>` and replaced, never written, when the page
//! changes. A view is a snapshot of the committed object as the transaction
//! read it, like the `Arc<T>` that [`crate::Transaction::get`] returns.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use cairn_storage::Oid;

use crate::codec::{DecodeError, Field, Persistent, Reader};

/// What a record was checked as when a view was made of it: its class and
/// schema version. Whoever holds the bytes it was checked in (the dual
/// buffer, with a page's image or an object's copy; an object-server
/// client, with the bytes it keeps under a right) keeps the mark with
/// them, so the record viewed again as the same class is not checked
/// again; the mark goes with the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CheckedAs {
    /// The class id.
    pub class: u32,
    /// The class's schema version.
    pub version: u16,
}

/// The `N` bytes at the start of `b`, or zeros if `b` is shorter.
#[inline]
pub fn le_bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    match b.get(..N) {
        Some(s) => s.try_into().unwrap_or([0; N]),
        None => [0; N],
    }
}

/// A LEB128 number at the start of `b` and the bytes it takes; never
/// panics (a number that does not end within 10 bytes or the slice reads as
/// what it has so far).
#[inline]
pub fn leb128(b: &[u8]) -> (u64, usize) {
    let mut n: u64 = 0;
    for (i, &byte) in b.iter().take(10).enumerate() {
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (n, i + 1);
        }
    }
    (n, b.len().min(10))
}

/// `b` from `at` on (empty if `at` is past its end).
#[inline]
pub fn rest(b: &[u8], at: usize) -> &[u8] {
    b.get(at..).unwrap_or(&[])
}

/// The fixed size of a struct whose fields have these fixed sizes, if all do.
pub const fn sum_fixed(sizes: &[Option<usize>]) -> Option<usize> {
    let mut total = 0;
    let mut i = 0;
    while i < sizes.len() {
        match sizes[i] {
            Some(n) => total += n,
            None => return None,
        }
        i += 1;
    }
    Some(total)
}

/// The least size of a struct whose fields take at least these sizes
/// (saturating).
pub const fn sum_min(sizes: &[usize]) -> usize {
    let mut total: usize = 0;
    let mut i = 0;
    while i < sizes.len() {
        total = total.saturating_add(sizes[i]);
        i += 1;
    }
    total
}

/// The length of a sequence of `n` encoded `T`s at the start of `b`.
#[inline]
fn skip_items<T: Field>(b: &[u8], n: u64) -> usize {
    if let Some(size) = T::FIXED_SIZE {
        let total = usize::try_from(n).unwrap_or(usize::MAX).saturating_mul(size);
        return total.min(b.len());
    }
    let mut at = 0;
    for _ in 0..n {
        if at >= b.len() {
            break;
        }
        // Every encoding takes at least one byte; a skip of 0 can only come
        // from bytes `check` did not accept, and must not loop forever.
        at += T::skip(rest(b, at)).max(1);
    }
    at.min(b.len())
}

/// The items of an encoded sequence (`Vec<T>`, `List<T>`, `Set<T>`), read in
/// place: each item is `T`'s view.
pub struct SeqView<'a, T> {
    len: usize,
    items: &'a [u8],
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for SeqView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SeqView<'_, T> {}

impl<'a, T: Field> SeqView<'a, T> {
    /// The view of the sequence encoded at the start of `b`.
    pub fn at(b: &'a [u8]) -> SeqView<'a, T> {
        let (n, k) = leb128(b);
        let items = rest(b, k);
        let len = items.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        let end = skip_items::<T>(items, len as u64);
        SeqView {
            len,
            items: items.get(..end).unwrap_or(items),
            _t: PhantomData,
        }
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items in order.
    pub fn iter(&self) -> SeqIter<'a, T> {
        SeqIter {
            left: self.len,
            rest: self.items,
            _t: PhantomData,
        }
    }

    /// Item `i`: direct when items have a fixed size, else by stepping over
    /// the items before it.
    pub fn get(&self, i: usize) -> Option<T::View<'a>> {
        if i >= self.len {
            return None;
        }
        match T::FIXED_SIZE {
            Some(size) => Some(T::view(rest(self.items, i.saturating_mul(size)))),
            None => self.iter().nth(i),
        }
    }

    /// Decodes the items into owned values.
    pub fn to_vec(&self) -> Result<Vec<T>, DecodeError> {
        let mut r = Reader::new(self.items);
        (0..self.len).map(|_| T::decode(&mut r)).collect()
    }
}

impl<'a, T: Field> IntoIterator for SeqView<'a, T> {
    type Item = T::View<'a>;
    type IntoIter = SeqIter<'a, T>;
    fn into_iter(self) -> SeqIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: Field> IntoIterator for &SeqView<'a, T> {
    type Item = T::View<'a>;
    type IntoIter = SeqIter<'a, T>;
    fn into_iter(self) -> SeqIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: Field> fmt::Debug for SeqView<'a, T>
where
    T::View<'a>: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The iterator of a [`SeqView`].
pub struct SeqIter<'a, T> {
    left: usize,
    rest: &'a [u8],
    _t: PhantomData<fn() -> T>,
}

impl<'a, T: Field> Iterator for SeqIter<'a, T> {
    type Item = T::View<'a>;

    #[inline]
    fn next(&mut self) -> Option<T::View<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let item = T::view(self.rest);
        let n = T::FIXED_SIZE.unwrap_or_else(|| T::skip(self.rest)).max(1);
        self.rest = rest(self.rest, n);
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<T: Field> ExactSizeIterator for SeqIter<'_, T> {}

/// The entries of an encoded [`Map`](crate::Map), read in place, in key order.
pub struct MapView<'a, K, V> {
    len: usize,
    entries: &'a [u8],
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for MapView<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for MapView<'_, K, V> {}

impl<'a, K: Field, V: Field> MapView<'a, K, V> {
    /// The view of the map encoded at the start of `b`.
    pub fn at(b: &'a [u8]) -> MapView<'a, K, V> {
        let (n, k) = leb128(b);
        let entries = rest(b, k);
        let len = entries.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        let mut at = 0;
        for _ in 0..len {
            if at >= entries.len() {
                break;
            }
            at += K::skip(rest(entries, at)).max(1);
            at += V::skip(rest(entries, at)).max(1);
        }
        MapView {
            len,
            entries: entries.get(..at).unwrap_or(entries),
            _t: PhantomData,
        }
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries in ascending key order.
    pub fn iter(&self) -> impl Iterator<Item = (K::View<'a>, V::View<'a>)> + 'a {
        let mut rest_b = self.entries;
        (0..self.len).map(move |_| {
            let k = K::view(rest_b);
            rest_b = rest(rest_b, K::skip(rest_b).max(1));
            let v = V::view(rest_b);
            rest_b = rest(rest_b, V::skip(rest_b).max(1));
            (k, v)
        })
    }
}

impl<'a, K: Field, V: Field> fmt::Debug for MapView<'a, K, V>
where
    K::View<'a>: fmt::Debug,
    V::View<'a>: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The helpers `Field` impls of sequences share.
pub(crate) mod seq {
    use super::*;

    /// `check` for a sequence whose count is bounded at `min_item` bytes an
    /// item, exactly as its `decode` bounds it.
    pub fn check<T: Field>(r: &mut Reader<'_>, what: &str, min_item: usize) -> Result<(), DecodeError> {
        let n = r.get_count(what, min_item)?;
        for _ in 0..n {
            T::check(r)?;
        }
        Ok(())
    }

    /// `skip` for a sequence.
    pub fn skip<T: Field>(b: &[u8]) -> usize {
        let (n, k) = leb128(b);
        (k + skip_items::<T>(rest(b, k), n)).min(b.len())
    }
}

/// An object read in place: its record's fields (without the record header)
/// in a page image or an object copy, checked when the `Obj` was made.
/// Cloning it clones an `Arc`.
pub struct Obj<T> {
    bytes: Arc<[u8]>,
    start: usize,
    end: usize,
    oid: Oid,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Obj<T> {
    fn clone(&self) -> Self {
        Obj {
            bytes: Arc::clone(&self.bytes),
            start: self.start,
            end: self.end,
            oid: self.oid,
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Obj<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Obj")
            .field("oid", &self.oid)
            .field("bytes", &(self.end - self.start))
            .finish()
    }
}

impl<T: Persistent> Obj<T> {
    /// Checks the fields encoded in `bytes[range]` (current schema, no
    /// header) and makes an `Obj` of them; damaged bytes are the
    /// [`DecodeError`] `decode` would give.
    pub fn new(bytes: Arc<[u8]>, range: Range<usize>, oid: Oid) -> Result<Obj<T>, DecodeError> {
        let Some(fields) = bytes.get(range.clone()) else {
            return Err(DecodeError {
                what: T::NAME.into(),
                offset: 0,
                reason: format!("range {range:?} is outside the {} bytes given", bytes.len()),
            });
        };
        let mut r = Reader::new(fields);
        T::check(&mut r)?;
        r.finish(T::NAME)?;
        Ok(Obj {
            bytes,
            start: range.start,
            end: range.end,
            oid,
            _t: PhantomData,
        })
    }

    /// An `Obj` of bytes [`Obj::new`] checked before (the same bytes: they
    /// never change). Unchecked bytes make no unsafety, only a view of
    /// harmless values (see the module doc).
    pub(crate) fn checked(bytes: Arc<[u8]>, range: Range<usize>, oid: Oid) -> Obj<T> {
        Obj {
            bytes,
            start: range.start,
            end: range.end,
            oid,
            _t: PhantomData,
        }
    }

    /// The object's view: one method per field.
    #[inline]
    pub fn get(&self) -> T::View<'_> {
        T::view(self.fields())
    }

    /// The object's OID.
    pub fn oid(&self) -> Oid {
        self.oid
    }

    /// The encoded fields.
    pub fn fields(&self) -> &[u8] {
        self.bytes.get(self.start..self.end).unwrap_or(&[])
    }

    /// Decodes the object into an owned value.
    pub fn to_owned(&self) -> Result<T, DecodeError> {
        let mut r = Reader::new(self.fields());
        let v = T::decode_fields(&mut r)?;
        r.finish(T::NAME)?;
        Ok(v)
    }

    /// True if `self` and `other` share the same bytes (the same page image
    /// or copy), for tests and counters.
    pub fn same_bytes(&self, other: &Obj<T>) -> bool {
        Arc::ptr_eq(&self.bytes, &other.bytes) && self.start == other.start
    }
}
