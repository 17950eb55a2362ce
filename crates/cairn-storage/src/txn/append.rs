//! Appends that commute: a change to an object that adds to it without
//! reading it, kept logically and applied at commit to the object's newest
//! record, so that many transactions append to one object at once.
//!
//! **Locks.** An append takes IX on the object's page (and on the page of
//! its moved body, if it was moved) and the append mode `A` on the object
//! (and on the body's address, as a change there takes X on it). `A` is
//! compatible with itself and conflicts with `S`, `SIX` and `X`
//! ([`LockMode::A`]): appenders of one object do not wait for each other,
//! and whoever reads or rewrites the object waits for them all — so what
//! a reader sees holds every append of a transaction or none, and strict
//! two-phase locking still orders every reader after the appenders it
//! sees. A transaction that reads what it appended converts to `SIX`,
//! which waits for the other appenders to end.
//!
//! **Kept logically.** The append is a [`RecordMerge`]: a function of the
//! record's bytes. The transaction keeps it with the record's other
//! object-level changes (`objects.rs`, `After::Merges`), reads of the
//! record apply it to the committed record, and commit applies the
//! transaction's merges, in order, to the record as it stands in the
//! page's newest image — the committed one, or one another appender's
//! commit logged ahead of it — and logs the page's difference as any
//! object-level change does. Recovery redoes page images, so it is
//! unchanged.
//!
//! **Room.** Each append reserves its bound ([`RecordMerge::max_growth`])
//! on the page of the record, as an object-level change that grows does;
//! the page's room covers every transaction's reservations, so applying
//! them at commit cannot run out of room. Under `A` nobody moves the
//! record (a move needs X), so its page is fixed until the appenders end.
//!
//! **Under page locking** there is no append lock: [`Txn::defer_merge`]
//! keeps the append in the transaction, holding nothing, and commit takes
//! X on the pages of all the objects appended to together, in page order,
//! and applies each object's appends in order ([`Txn::apply_deferred`]):
//! appenders of one page wait for each other only while they commit.
//!
//! **When an append is not kept.** [`Txn::merge`] answers `false`, and the
//! caller takes X, reads the object, applies the merge and writes it back,
//! when the transaction locks pages rather than objects, holds the page as
//! a private copy, already changed the record as a whole, or when the
//! record is large, the page has no room for the growth, the growth would
//! take the record past the largest small record, or the merge does not
//! apply to the record as it stands (a record of an older schema version
//! that lacks the field). A record may still grow past the largest small
//! record by many appenders at once (each checks only its own growth);
//! it stays a small record, and the next rewrite makes it large.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ids::{Oid, PageId};
use crate::lock::{LockMode, Resource};
use crate::record::object::{
    self, decode_padded, small_max, small_payload, KIND_FORWARD, KIND_LARGE, KIND_MOVED_SMALL, KIND_SMALL,
    KIND_SMALL_PADDED,
};
use crate::record::slotted::SlotRef;

use super::objects::{After, SlotChange};
use super::Txn;

/// A change to an object's bytes that commutes with every other change of
/// its kind to the same object: applying two in either order gives
/// records that mean the same (an append to a list: the elements of both,
/// in the order the commits applied them). Kept by a transaction and
/// applied at its commit to the newest record ([`Txn::merge`]).
pub trait RecordMerge: Send + Sync + fmt::Debug {
    /// The record with this change applied, or why it does not apply to
    /// these bytes.
    fn apply(&self, record: &[u8]) -> std::result::Result<Vec<u8>, String>;

    /// At most how many bytes [`RecordMerge::apply`] adds to any record it
    /// applies to (the room reserved for it).
    fn max_growth(&self) -> usize;

    /// The change as an edit in place of a record kept as a large object,
    /// which rewritten whole has every page of it locked, changed and
    /// logged: given the record's first bytes `head` (its first data
    /// page's, or all of it) and its length `len`, the bytes to overwrite and those to
    /// add at its end ([`RecordEdit`]). `None` (the default) if it cannot
    /// be made so: the record is then rewritten whole with
    /// [`RecordMerge::apply`]. Applying the edit must give exactly what
    /// `apply` gives.
    fn edit(&self, head: &[u8], len: u64) -> Option<RecordEdit> {
        let _ = (head, len);
        None
    }

    /// The merge as [`std::any::Any`], for a backend that sends merges of
    /// a kind it knows to a server ([`super::Backend::keep_merges`]);
    /// `None` (the default) if it is not to be sent.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// An object and the appends to it, in the order they were made (what
/// [`super::Backend::keep_merges`] and [`Txn::keep_merges_on`] take).
pub type ObjectMerges = (Oid, Vec<Arc<dyn RecordMerge>>);

/// A [`RecordMerge`] as an edit of a record in place ([`RecordMerge::edit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordEdit {
    /// Bytes overwritten, at offsets within the record's head.
    pub writes: Vec<(usize, Vec<u8>)>,
    /// Bytes added at the record's end.
    pub append: Vec<u8>,
}

/// The object's bytes in `kind`/`data` (a home record or a moved body at
/// `at`) with `merges` applied, encoded back as a record of the same place:
/// (kind, payload).
pub(super) fn merged_record(kind: u8, data: &[u8], at: Oid, merges: &[Arc<dyn RecordMerge>]) -> Result<(u8, Vec<u8>)> {
    let (bytes, back) = object_bytes(kind, data, at)?;
    let bytes = apply_merges(bytes, at, merges)?;
    Ok(match back {
        None => {
            let (kind, payload) = small_payload(&bytes);
            (kind, payload.into_owned())
        }
        Some(back) => {
            let mut p = back.to_vec();
            p.extend_from_slice(&bytes);
            (KIND_MOVED_SMALL, p)
        }
    })
}

/// The object's bytes in a small record (`kind`, `data`) at `at`, with
/// the back pointer of a moved body.
fn object_bytes(kind: u8, data: &[u8], at: Oid) -> Result<(Vec<u8>, Option<&[u8]>)> {
    match kind {
        KIND_SMALL => Ok((data.to_vec(), None)),
        KIND_SMALL_PADDED => Ok((decode_padded(data, at)?, None)),
        KIND_MOVED_SMALL if data.len() >= Oid::ENCODED_SIZE => {
            let (back, body) = data.split_at(Oid::ENCODED_SIZE);
            Ok((body.to_vec(), Some(back)))
        }
        other => Err(Error::corrupt(
            at.page,
            format!("object {at} was appended to, but its slot now holds a record of kind {other}"),
        )),
    }
}

/// `bytes` with `merges` applied in order.
fn apply_merges(mut bytes: Vec<u8>, at: Oid, merges: &[Arc<dyn RecordMerge>]) -> Result<Vec<u8>> {
    for m in merges {
        bytes = m.apply(&bytes).map_err(|why| {
            Error::corrupt(
                at.page,
                format!("an append to object {at} no longer applies to its record: {why}"),
            )
        })?;
    }
    Ok(bytes)
}

/// Where an append goes: the slot of the record and what it holds now.
struct Target {
    at: Oid,
    kind: u8,
    data: Vec<u8>,
}

impl Txn {
    /// Appends to object `oid` with `merge`, without reading it (see the
    /// module docs): true if the append is kept, to be applied at commit
    /// to the newest record; false if it cannot be kept here, and the
    /// caller must change the object as a whole instead (take X, read it,
    /// apply the merge, write it). Either way the transaction may now hold
    /// the object's append lock.
    pub fn merge(&mut self, oid: Oid, merge: Arc<dyn RecordMerge>) -> Result<bool> {
        self.check_active()?;
        self.refuse_if_doomed()?;
        if !self.object_level(oid.page) {
            return Ok(false);
        }
        // Where the record is and whether its page has room, asked before
        // the append lock (a hint, read without a lock and checked again
        // under it): a large record, or one whose page has no room, is
        // rewritten whole under the caller's X, which would otherwise
        // have to wait for every other appender to give up its append
        // lock (two appenders raising A to X deadlock).
        if !self.holds_append(oid) {
            let room = match self.peek_target(oid)? {
                Some(page) if self.object_level(page) => {
                    // A reservation holds only under an intention lock on
                    // the page: a page-level writer (X) takes room without
                    // looking at reservations, and waits for IX holders.
                    self.de_escalate(page)?;
                    self.lock(Resource::Page(page), LockMode::IX)?;
                    let room = self.reserve_on(page, merge.max_growth())?;
                    self.forget_if_unchanged(page);
                    room
                }
                _ => false,
            };
            if !room {
                self.db.note_append(false);
                return Ok(false);
            }
        }
        self.lock_to_append(oid)?;
        let kept = self.keep_merge(oid, merge)?;
        self.db.note_append(kept);
        Ok(kept)
    }

    /// Before appending to each of `oids`: takes X now, in OID order, on
    /// those whose appends cannot be kept because their records are large
    /// (the caller rewrites them whole), so a transaction appending to
    /// many objects takes its exclusive locks in one global order rather
    /// than in the order of its appends. The others are left to their
    /// append locks.
    pub fn lock_for_appends(&mut self, oids: &[Oid]) -> Result<()> {
        self.check_active()?;
        let mut oids = oids.to_vec();
        oids.sort_unstable();
        oids.dedup();
        for oid in oids {
            if self.object_level(oid.page) && self.peek_kind(oid)? == Some(KIND_LARGE) {
                self.lock_object(oid, true)?;
            }
        }
        Ok(())
    }

    /// The kind of `oid`'s committed home record, read without a lock: a
    /// hint, which the locked path checks again.
    fn peek_kind(&mut self, oid: Oid) -> Result<Option<u8>> {
        Ok(self.peek_home(oid)?.map(|(kind, _)| kind))
    }

    /// `oid`'s committed home record, read without a lock (and without a
    /// copy): its kind, and where a forwarding stub points.
    fn peek_home(&mut self, oid: Oid) -> Result<Option<(u8, Option<Oid>)>> {
        if oid.page.0 >= self.db.page_count() {
            return Ok(None);
        }
        self.committed_slot(oid, |r| {
            r.map(|r| {
                (
                    r.kind,
                    (r.kind == KIND_FORWARD).then(|| Oid::from_slice(r.data)).flatten(),
                )
            })
        })
    }

    /// The page an append to `oid` would grow, read without a lock: its
    /// home's, or its moved body's; `None` for a large record.
    fn peek_target(&mut self, oid: Oid) -> Result<Option<crate::ids::PageId>> {
        Ok(match self.peek_home(oid)? {
            Some((KIND_LARGE, _)) => None,
            Some((KIND_FORWARD, Some(body))) => Some(body.page),
            _ => Some(oid.page),
        })
    }

    /// Drops the entry of `page` in the transaction's object-level changes
    /// if it holds no change (a reservation made ahead of one): commit
    /// goes through every page with an entry. The backend's reservation
    /// stays (it ends with the transaction) and is replaced by the next.
    fn forget_if_unchanged(&mut self, page: crate::ids::PageId) {
        if self.objects.pages.get(&page).is_some_and(|ch| ch.slots.is_empty()) {
            self.objects.pages.remove(&page);
        }
    }

    /// Whether the transaction holds the object's append lock already.
    fn holds_append(&self, oid: Oid) -> bool {
        self.held.get(&Resource::Object(oid)) == Some(&LockMode::A)
    }

    /// [`Txn::merge`] under the append lock: false if it cannot be kept.
    fn keep_merge(&mut self, oid: Oid, merge: Arc<dyn RecordMerge>) -> Result<bool> {
        let Some(target) = self.append_target(oid)? else {
            return Ok(false);
        };
        // The object as this transaction's commit will find it, but for
        // other transactions' appends: its own earlier appends applied.
        let (bytes, _) = object_bytes(target.kind, &target.data, target.at)?;
        let body = apply_merges(bytes, target.at, &self.merges_at(target.at))?;
        let Ok(after) = merge.apply(&body) else {
            return Ok(false);
        };
        if after.len() > small_max(self.db.page_size()) {
            return Ok(false);
        }
        let growth = merge.max_growth().max(after.len().saturating_sub(body.len()));
        if !self.reserve_on(target.at.page, growth)? {
            return Ok(false);
        }
        let committed_len = target.data.len();
        let ch = self.objects.pages.entry(target.at.page).or_default();
        ch.net += growth as isize;
        let c = ch.slots.entry(target.at.slot).or_insert_with(|| SlotChange {
            uniq: target.at.uniq,
            committed_len,
            after: After::Merges {
                merges: Vec::new(),
                growth: 0,
            },
        });
        if let After::Merges { merges, growth: g } = &mut c.after {
            merges.push(merge);
            *g += growth;
        }
        self.objects.bytes += growth;
        self.changes += 1;
        Ok(true)
    }

    /// IX on the page and A on the object.
    fn lock_to_append(&mut self, at: Oid) -> Result<()> {
        self.de_escalate(at.page)?;
        self.lock(Resource::Page(at.page), LockMode::IX)?;
        self.lock(Resource::Object(at), LockMode::A)
    }

    /// The slot an append to `oid` changes — its home, or its moved body,
    /// locked to append too — with what it holds in the committed page;
    /// `None` if the append cannot be kept (large, the transaction changed
    /// the record as a whole, or the page is its private copy). Under the
    /// append lock the record stays where it is.
    fn append_target(&mut self, oid: Oid) -> Result<Option<Target>> {
        if self.changed_whole(oid) {
            return Ok(None);
        }
        let home = self.committed_slot(oid, |r| r.map(|r| (r.kind, r.data.to_vec())))?;
        let (kind, data) = home.ok_or(Error::NotFound { oid })?;
        match kind {
            KIND_SMALL | KIND_SMALL_PADDED => Ok(Some(Target { at: oid, kind, data })),
            KIND_FORWARD => {
                let Some(body) = Oid::from_slice(&data).filter(|_| data.len() == Oid::ENCODED_SIZE) else {
                    return Ok(None);
                };
                if !self.object_level(body.page) || self.changed_whole(body) {
                    return Ok(None);
                }
                self.lock_to_append(body)?;
                let rec = self.committed_slot(body, |r| r.map(|r| (r.kind, r.data.to_vec())))?;
                match rec {
                    Some((KIND_MOVED_SMALL, data)) if Oid::from_slice(&data) == Some(oid) => Ok(Some(Target {
                        at: body,
                        kind: KIND_MOVED_SMALL,
                        data,
                    })),
                    // Damaged: the whole-object path reports it.
                    _ => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }

    /// Whether the transaction changed the record at `at` as a whole (an
    /// after-image or a deletion, under X).
    fn changed_whole(&self, at: Oid) -> bool {
        self.objects
            .pages
            .get(&at.page)
            .and_then(|ch| ch.slots.get(&at.slot))
            .is_some_and(|c| !matches!(c.after, After::Merges { .. }))
    }

    /// The appends the transaction keeps for the record at `at`.
    fn merges_at(&self, at: Oid) -> Vec<Arc<dyn RecordMerge>> {
        match self.objects.pages.get(&at.page).and_then(|ch| ch.slots.get(&at.slot)) {
            Some(SlotChange {
                after: After::Merges { merges, .. },
                ..
            }) => merges.clone(),
            _ => Vec::new(),
        }
    }

    /// Reserves room for `growth` more bytes on `page` besides what the
    /// transaction's changes there already need: false if the page has no
    /// room for it or the transaction's budget of change bytes is spent.
    fn reserve_on(&mut self, page: crate::ids::PageId, growth: usize) -> Result<bool> {
        if self.objects.bytes + growth > self.object_bytes_max {
            return Ok(false);
        }
        let (net, reserved) = self.objects.pages.get(&page).map_or((0, 0), |ch| (ch.net, ch.reserved));
        let need = usize::try_from(net + growth as isize).unwrap_or(0);
        if need <= reserved {
            return Ok(true);
        }
        if !self.db.reserve_room(self.owner(), page, need)? {
            return Ok(false);
        }
        self.objects.pages.entry(page).or_default().reserved = need;
        Ok(true)
    }

    /// [`Txn::slot_with`] for a record the transaction appended to: the
    /// committed record with its appends applied, read under the record's
    /// lock (which the read raised to `SIX`, so no other appender is left).
    pub(super) fn slot_with_merges<R>(&mut self, at: Oid, f: impl FnOnce(Option<SlotRef<'_>>) -> R) -> Result<R> {
        let merges = self.merges_at(at);
        let rec = self.committed_slot(at, |r| r.map(|r| (r.kind, r.uniq, r.data.to_vec())))?;
        let Some((kind, uniq, data)) = rec else {
            return Ok(f(None));
        };
        let (kind, payload) = merged_record(kind, &data, at, &merges)?;
        Ok(f(Some(SlotRef {
            kind,
            uniq,
            data: &payload,
        })))
    }
}

/// Appends a transaction that locks pages keeps until it commits
/// ([`Txn::defer_merge`]): by object, in OID order (the order commit
/// applies them in), each object's in the order they were made.
#[derive(Default)]
pub(super) struct Deferred {
    merges: std::collections::BTreeMap<Oid, Vec<Arc<dyn RecordMerge>>>,
    /// The pages whose appends the backend keeps ([`Txn::apply_deferred_at_commit`]).
    kept_by_backend: Vec<PageId>,
    /// Those appends, by object: applied here after all if the
    /// transaction changes one of those pages itself.
    kept: std::collections::BTreeMap<Oid, Vec<Arc<dyn RecordMerge>>>,
}

impl Deferred {
    /// True if no append waits for `oid`: the test every object access
    /// makes, a length check when none is deferred.
    #[inline]
    fn none_for(&self, oid: Oid) -> bool {
        self.merges.is_empty() || !self.merges.contains_key(&oid)
    }
}

impl Txn {
    /// Under page locking: keeps `merge` for object `oid` until the
    /// transaction commits, taking no lock now. Commit takes X on the
    /// pages of every object appended to, together and in page order, and
    /// applies each object's appends in the order they were made (see
    /// [`Txn::apply_deferred`]); a read or partial change of the object
    /// before that applies them first ([`Txn::settle_merges`]), and a
    /// whole rewrite or a deletion of it drops them (the object is what the
    /// transaction then wrote, as when its changes are kept by object).
    ///
    /// Appends made so hold their page locks only while the transaction
    /// commits, not from the append on: appenders of objects on one page
    /// (OO1's inserts, adding to the reverse lists of the newest parts)
    /// wait for each other only at their commits. Under object locking,
    /// [`Txn::merge`] keeps appends under append locks instead.
    pub fn defer_merge(&mut self, oid: Oid, merge: Arc<dyn RecordMerge>) -> Result<()> {
        self.check_active()?;
        self.refuse_if_doomed()?;
        if self.snapshot.is_some() {
            return Err(Error::ReadOnlyTxn(self.id));
        }
        self.deferred.merges.entry(oid).or_default().push(merge);
        self.db.note_append(true);
        Ok(())
    }

    /// How many appends the transaction defers to its commit.
    pub fn deferred_merges(&self) -> usize {
        self.deferred.merges.values().map(Vec::len).sum()
    }

    /// Applies the appends deferred for `oid` ([`Txn::defer_merge`]) now:
    /// under X on its page, the object read, each append applied in order,
    /// the object written back. Nothing if none waits.
    pub fn settle_merges(&mut self, oid: Oid) -> Result<()> {
        if self.deferred.none_for(oid) {
            return Ok(());
        }
        let merges = self.deferred.merges.remove(&oid).unwrap_or_default();
        self.run(|t| t.merge_whole(oid, &merges))
    }

    /// Forgets the appends deferred for `oid`: the object is about to be
    /// rewritten whole or deleted.
    pub(super) fn drop_merges(&mut self, oid: Oid) {
        if !self.deferred.none_for(oid) {
            self.deferred.merges.remove(&oid);
        }
    }

    /// Every deferred append applied ([`Txn::defer_merge`]): what commit
    /// does first, and what a layer above calls just before it when it
    /// must act under the appends' locks (drop its cached copies of the
    /// objects before the locks go). The objects' pages (and their moved
    /// bodies') are locked X first, all together in page order
    /// ([`Txn::lock_objects_for_update`]: one round trip for a page
    /// client), so two committing appenders never hold one page each and
    /// wait for the other; then each object's appends are applied in
    /// order, objects in OID order. An error dooms the transaction.
    pub fn apply_deferred(&mut self) -> Result<()> {
        if self.deferred.merges.is_empty() {
            return Ok(());
        }
        let by_object = std::mem::take(&mut self.deferred.merges);
        let oids: Vec<Oid> = by_object.keys().copied().collect();
        self.run(|t| {
            t.lock_objects_for_update(&oids)?;
            t.lock_large_edges(&oids)?;
            for (oid, merges) in &by_object {
                t.merge_whole(*oid, merges)?;
            }
            Ok(())
        })
    }

    /// [`Txn::apply_deferred`] at commit, when nothing reads the objects
    /// appended to any more: first the appends on pages the transaction
    /// neither changed nor holds X on are offered to the backend to keep
    /// at object grain ([`super::Backend::keep_merges`]: a page client's
    /// server keeps them under append locks and applies them at the
    /// commit, so appenders of one page do not exclude each other); the
    /// rest are applied here as [`Txn::apply_deferred`] applies them. The
    /// pages kept are in [`Txn::pages_kept_by_backend`]: the commit changes
    /// them without this transaction holding their images.
    ///
    /// Applying the rest here may change a page whose appends the backend
    /// keeps (an object's moved body lives there): that page's appends are
    /// then applied here too, into the transaction's image of it, which
    /// the commit ships (and the backend's server then forgets what it
    /// kept there), until no page is both. An error dooms the transaction.
    pub fn apply_deferred_at_commit(&mut self) -> Result<()> {
        if self.deferred.merges.is_empty() {
            return Ok(());
        }
        if self.snapshot.is_none() && !self.object_locks && self.db.keeps_merges() {
            let offered: Vec<ObjectMerges> = self
                .deferred
                .merges
                .iter()
                .filter(|(oid, _)| !self.pages.contains(oid.page) && !self.holds(Resource::Page(oid.page), LockMode::X))
                .map(|(oid, m)| (*oid, m.clone()))
                .collect();
            if !offered.is_empty() {
                let owner = self.owner();
                let kept = self.run(|t| t.db.keep_merges(owner, &offered))?;
                if !kept.is_empty() {
                    let mut rest = std::mem::take(&mut self.deferred.merges);
                    for (oid, merges) in std::mem::take(&mut rest) {
                        if kept.contains(&oid.page) {
                            self.deferred.kept.insert(oid, merges);
                        } else {
                            rest.insert(oid, merges);
                        }
                    }
                    self.deferred.merges = rest;
                    self.deferred.kept_by_backend.extend(kept);
                    self.changes += 1;
                }
            }
        }
        self.apply_deferred()?;
        self.take_back_changed_pages()
    }

    /// The pages the backend keeps appends on that this transaction
    /// changed itself after all: their appends applied into its images
    /// (under the X it holds on them), and the pages no longer counted
    /// kept. Applying them may change another kept page (a moved body):
    /// repeated until none is left.
    fn take_back_changed_pages(&mut self) -> Result<()> {
        loop {
            let changed: Vec<PageId> = self
                .deferred
                .kept_by_backend
                .iter()
                .copied()
                .filter(|p| self.pages.contains(*p))
                .collect();
            if changed.is_empty() {
                return Ok(());
            }
            self.deferred.kept_by_backend.retain(|p| !changed.contains(p));
            let mut taken = Vec::new();
            self.deferred.kept.retain(|oid, merges| {
                let take = changed.contains(&oid.page);
                if take {
                    taken.push((*oid, std::mem::take(merges)));
                }
                !take
            });
            self.run(|t| {
                for (oid, merges) in &taken {
                    t.merge_whole(*oid, merges)?;
                }
                Ok(())
            })?;
        }
    }

    /// Forgets the object-level changes the transaction keeps on `page`
    /// (a server's, for a page client's appends it kept there: the
    /// client's commit ships its own image of the page, with those
    /// appends applied, instead; see [`Txn::apply_deferred_at_commit`]).
    /// The locks stay.
    pub fn forget_object_changes_on(&mut self, page: PageId) {
        self.objects.take(page);
    }

    /// The pages whose appends the backend keeps and applies at commit
    /// ([`Txn::apply_deferred_at_commit`]), in page order: changed by the
    /// commit, though the transaction holds no image of them.
    pub fn pages_kept_by_backend(&self) -> &[PageId] {
        &self.deferred.kept_by_backend
    }

    /// Keeps `appends` (by object, every one of them on `page`, each a
    /// record at its home) at object grain under append locks — IX on the
    /// page, A on each object, as [`Txn::merge`] keeps them — whether or
    /// not the transaction locks objects: how a server keeps a page
    /// client's appends ([`super::Backend::keep_merges`]). All or none:
    /// false, with nothing kept on the page, if any one cannot be (the
    /// transaction holds the page as a private copy or changed it at
    /// object grain before, a record is not a small one at its home — moved
    /// or large —, the page has no room for the growth, or an append does
    /// not apply); the locks taken stay until the transaction ends.
    pub fn keep_merges_on(&mut self, page: PageId, appends: &[ObjectMerges]) -> Result<bool> {
        self.check_active()?;
        self.refuse_if_doomed()?;
        if self.snapshot.is_some() {
            return Err(Error::ReadOnlyTxn(self.id));
        }
        if appends.iter().any(|(oid, _)| oid.page != page) {
            return Err(Error::InvalidArgument(format!(
                "appends kept on page {page} name an object of another page"
            )));
        }
        if !self.db.object_locking() || self.pages.contains(page) || self.objects.contains(page) {
            return Ok(false);
        }
        let was = std::mem::replace(&mut self.object_locks, true);
        let kept = self.keep_all_on(page, appends);
        self.object_locks = was;
        if !matches!(kept, Ok(true)) {
            self.objects.take(page);
        }
        kept
    }

    /// [`Txn::keep_merges_on`] under object locking, with nothing undone.
    fn keep_all_on(&mut self, page: PageId, appends: &[ObjectMerges]) -> Result<bool> {
        // Looked at first without a lock (a hint): a page that will not
        // take them is given up before its IX, which its caller would
        // otherwise raise to X — two such callers, each holding IX,
        // deadlocked raising it.
        if !self.may_keep_all_on(page, appends)? {
            return Ok(false);
        }
        // Under IX on the page nobody moves a record of it (a move takes
        // X), so a record seen at home now stays there.
        self.lock(Resource::Page(page), LockMode::IX)?;
        for (oid, _) in appends {
            if !matches!(self.peek_kind(*oid)?, Some(KIND_SMALL | KIND_SMALL_PADDED)) {
                return Ok(false);
            }
        }
        for (oid, merges) in appends {
            for m in merges {
                if !self.merge(*oid, Arc::clone(m))? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Whether [`Txn::keep_all_on`] may keep `appends` on `page`, read
    /// without a lock: every record a small one at its home, and room on
    /// the page for all of them besides every other transaction's
    /// reservation there.
    fn may_keep_all_on(&mut self, page: PageId, appends: &[ObjectMerges]) -> Result<bool> {
        for (oid, _) in appends {
            if !matches!(self.peek_kind(*oid)?, Some(KIND_SMALL | KIND_SMALL_PADDED)) {
                return Ok(false);
            }
        }
        let need: usize = appends
            .iter()
            .flat_map(|(_, merges)| merges.iter().map(|m| m.max_growth()))
            .sum();
        Ok(self.db.room_left(self.owner(), page)?.is_none_or(|room| need <= room))
    }

    /// The pages on which the transaction keeps object-level changes (its
    /// own under object locking, or appends kept with
    /// [`Txn::keep_merges_on`]), in page order: a server names them to
    /// the client in its commit's reply.
    pub fn pages_changed_at_object_grain(&self) -> Vec<PageId> {
        self.objects.page_ids()
    }

    /// Whether the transaction keeps object-level changes on `page` (see
    /// [`Txn::pages_changed_at_object_grain`]).
    pub fn changed_at_object_grain(&self, page: PageId) -> bool {
        self.objects.contains(page)
    }

    /// Before the appends of [`Txn::apply_deferred`] are applied, under X
    /// on the objects' homes, where a lock costs a round trip
    /// ([`super::Backend::locks_remotely`]: a page or file client): the
    /// pages the large objects' edits in place read and change — each
    /// one's root, then its first and (unless full) last data pages
    /// ([`crate::record::large::edge_pages`]) — locked X, a level at a
    /// time for all of them together, in page order (a round trip per
    /// level). Else each head is read under S, then upgraded, and each
    /// last page locked, one round trip apiece: OO1's inserts on a page
    /// client sent about 200 per insert so. Nobody else can be changing
    /// them (their homes are held X), so the order cannot deadlock.
    fn lock_large_edges(&mut self, oids: &[Oid]) -> Result<()> {
        if self.object_locks || !self.db.locks_remotely() || self.snapshot.is_some() {
            return Ok(());
        }
        let mut large = Vec::new();
        for &oid in oids {
            if let Some(d) = object::large_descriptor(self, oid)? {
                large.push(d);
            }
        }
        let roots: Vec<PageId> = large.iter().filter(|d| d.len > 0).map(|d| d.root).collect();
        if roots.is_empty() {
            return Ok(());
        }
        self.prefetch_pages_exclusive(&roots)?;
        let mut data = Vec::new();
        for d in large.iter().filter(|d| d.depth > 0) {
            data.extend(crate::record::large::edge_pages(self, d)?);
        }
        self.prefetch_pages_exclusive(&data)
    }

    /// Applies `merges` to object `oid` in order under X, not kept: a large
    /// object is edited in place where every merge can say how
    /// ([`RecordMerge::edit`]: its head and the pages past its old end are
    /// changed, not every page of it); any other object is read, changed
    /// and written whole.
    pub fn merge_whole(&mut self, oid: Oid, merges: &[Arc<dyn RecordMerge>]) -> Result<()> {
        self.lock_object(oid, true)?;
        if self.is_large(oid)? && self.edit_large(oid, merges)? {
            return Ok(());
        }
        let mut bytes = self.read(oid)?;
        for m in merges {
            bytes = m.apply(&bytes).map_err(|why| {
                Error::InvalidArgument(format!("an append to object {oid} does not apply to it: {why}"))
            })?;
        }
        self.update(oid, &bytes)
    }

    /// [`Txn::merge_whole`] of a large object as edits in place: false,
    /// with nothing changed, if a merge cannot say how (or its writes fall
    /// past the head read).
    fn edit_large(&mut self, oid: Oid, merges: &[Arc<dyn RecordMerge>]) -> Result<bool> {
        let mut len = self.len(oid)?;
        // The head is the first data page's bytes: an edit of it changes
        // that page alone (the one `lock_large_edges` locked).
        let first_page = crate::record::large::data_payload_size(self.db.page_size()) as u64;
        let mut head = vec![0u8; len.min(first_page) as usize];
        self.read_range(oid, 0, &mut head)?;
        // Every edit planned before any is made, each on the record as the
        // ones before it leave it.
        let mut edits = Vec::with_capacity(merges.len());
        for m in merges {
            let Some(e) = m.edit(&head, len) else {
                return Ok(false);
            };
            for (at, bytes) in &e.writes {
                match head.get_mut(*at..at + bytes.len()) {
                    Some(h) => h.copy_from_slice(bytes),
                    None => return Ok(false),
                }
            }
            len += e.append.len() as u64;
            edits.push(e);
        }
        for e in edits {
            for (at, bytes) in &e.writes {
                self.write_range(oid, *at as u64, bytes)?;
            }
            if !e.append.is_empty() {
                self.append(oid, &e.append)?;
            }
        }
        Ok(true)
    }
}
