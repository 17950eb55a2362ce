//! `Ref<T>`: a typed reference to a persistent object.
//!
//! On disk a reference is the target's 10-byte OID. In memory it also
//! carries its **swizzle**: once followed, the object cache slot and
//! generation of the target, packed in one atomic word, so following it again
//! reads the slot by index (no hash lookup). When the target is evicted or
//! changed, the slot's generation moves on and the swizzle no longer matches:
//! the reference falls back to a lookup by OID, and never yields another
//! object. A reference is `Send + Sync` whatever `T` is (it holds no `T`).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_storage::Oid;

use crate::codec::{DecodeError, Field, Persistent, Reader, TypeDesc, Value, Writer};

/// A typed reference to an object of type `T`.
pub struct Ref<T> {
    oid: Oid,
    /// 0: not swizzled; else `(slot + 1) << 32 | generation`.
    swizzle: AtomicU64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Ref<T> {
    /// A reference to the object with this OID.
    pub fn from_oid(oid: Oid) -> Ref<T> {
        Ref {
            oid,
            swizzle: AtomicU64::new(0),
            _t: PhantomData,
        }
    }

    /// The target's OID.
    pub fn oid(&self) -> Oid {
        self.oid
    }

    /// The swizzle: (cache slot, generation), if bound.
    pub(crate) fn swizzled(&self) -> Option<(u32, u32)> {
        match self.swizzle.load(Ordering::Relaxed) {
            0 => None,
            v => Some(((v >> 32) as u32 - 1, v as u32)),
        }
    }

    /// Binds the reference to a cache slot.
    pub(crate) fn swizzle(&self, slot: u32, gen: u32) {
        self.swizzle
            .store((u64::from(slot) + 1) << 32 | u64::from(gen), Ordering::Relaxed);
    }

    /// Forgets the cache slot.
    pub(crate) fn unswizzle(&self) {
        self.swizzle.store(0, Ordering::Relaxed);
    }

    /// True if the reference is bound to a cache slot right now (it may still
    /// turn out stale when followed).
    pub fn is_swizzled(&self) -> bool {
        self.swizzled().is_some()
    }

    /// The same reference, viewed as a reference to another type (checked
    /// when followed).
    pub fn cast<U>(&self) -> Ref<U> {
        Ref::from_oid(self.oid)
    }
}

impl<T> Clone for Ref<T> {
    fn clone(&self) -> Self {
        Ref {
            oid: self.oid,
            swizzle: AtomicU64::new(self.swizzle.load(Ordering::Relaxed)),
            _t: PhantomData,
        }
    }
}

impl<T> PartialEq for Ref<T> {
    fn eq(&self, other: &Self) -> bool {
        self.oid == other.oid
    }
}

impl<T> Eq for Ref<T> {}

impl<T> PartialOrd for Ref<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Ref<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.oid.cmp(&other.oid)
    }
}

impl<T> Hash for Ref<T> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.oid.hash(h)
    }
}

impl<T> fmt::Debug for Ref<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Ref<{}>({})",
            std::any::type_name::<T>().rsplit("::").next().unwrap_or("?"),
            self.oid
        )
    }
}

impl<T: Persistent> Field for Ref<T> {
    type View<'a> = Ref<T>;
    const FIXED_SIZE: Option<usize> = Some(Oid::ENCODED_SIZE);

    fn type_desc() -> TypeDesc {
        TypeDesc::Ref(T::NAME.to_string())
    }

    fn check(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        r.take(Oid::ENCODED_SIZE, "reference").map(|_| ())
    }

    #[inline]
    fn skip(b: &[u8]) -> usize {
        b.len().min(Oid::ENCODED_SIZE)
    }

    #[inline]
    fn view(b: &[u8]) -> Ref<T> {
        Ref::from_oid(Oid::from_bytes(&crate::view::le_bytes(b)))
    }

    fn encode(&self, w: &mut Writer) {
        w.put(&self.oid.to_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let b: [u8; Oid::ENCODED_SIZE] = r.take_array("reference")?;
        Ok(Ref::from_oid(Oid::from_bytes(&b)))
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        match v {
            Value::Ref(oid) => Ok(Ref::from_oid(oid)),
            other => Err(DecodeError {
                what: "reference".into(),
                offset: 0,
                reason: format!("expected a reference, found {other:?}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_storage::{PageId, SlotIdx, Uniq};

    #[test]
    fn swizzle_packs_slot_and_generation() {
        let r: Ref<u8> = Ref::from_oid(Oid {
            page: PageId(1),
            slot: SlotIdx(2),
            uniq: Uniq(3),
        });
        assert!(r.swizzled().is_none());
        r.swizzle(0, 0);
        assert_eq!(r.swizzled(), Some((0, 0)));
        r.swizzle(u32::MAX - 1, u32::MAX);
        assert_eq!(r.swizzled(), Some((u32::MAX - 1, u32::MAX)));
        let c = r.clone();
        assert_eq!(c.swizzled(), r.swizzled());
        r.unswizzle();
        assert!(!r.is_swizzled());
        assert_eq!(c, r, "equality is by OID");
    }
}
