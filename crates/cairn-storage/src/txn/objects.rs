//! Object-level locking: a transaction that locks single objects instead of
//! whole pages, so that two transactions change different objects of one
//! page at the same time.
//!
//! **Locks.** Reading an object takes IS on its page and S on the object
//! ([`Resource::Object`], the OID); changing it takes IX on the page and X
//! on the object. Everything that changes a page's structure — placing a
//! new record, forwarding, freeing a page, large-object pages, B+-tree
//! pages — still takes X on the page, which the intention locks make wait
//! for every object-level reader and writer of that page (and the other way
//! round). A page-level read (a scan, a whole-page fetch) takes S on the
//! page, which waits for object-level writers.
//!
//! **Coarse reads.** Two locks per object read cost a single transaction
//! about twice what page locking costs it (OO1's reads: 1.5-2.1x). So in an
//! embedded database ([`Txn::set_coarse_reads`], on with object locking) a
//! read of an object whose page nobody writes takes **S on the page**
//! instead — one request for all the page's objects, asked with `try_lock`
//! so it never waits: if another transaction holds or waits for IX (or
//! stronger) there, the read takes IS and S on the object as above. The
//! transaction notes each object it reads under such a page (one list, a
//! push per read). Before it **changes** an object of that page it
//! *de-escalates*: it takes S on each object it read there (granted at once:
//! nobody else holds IX on the page, so nobody holds X on its objects),
//! lowers the page's S to IS ([`LockManager::downgrade`], which grants the
//! writers the S kept out), and then takes IX and X for the change. What it
//! read stays locked throughout, object by object, so strict two-phase
//! locking holds; two transactions that read a page and then change
//! different objects of it still do not wait for each other to end (each
//! waits at most for the other to de-escalate). What coarse reads give up:
//! a writer that comes *after* a reader of its page waits for that reader
//! to end or to change something there, as under page locking (a reader
//! that wants no such effect reads at a snapshot, `Db::begin_read_only`).
//! A page locked S for a page-level access (a scan, `page_objects`) is
//! never de-escalated: its lock covers objects the transaction never
//! noted. Before a transaction waits for any lock it lowers every coarse
//! lock it holds ([`Txn::lower_coarse_locks`]), so coarse reads close no
//! deadlock cycle; key-range reads do the same with a whole tree
//! (`keys.rs`).
//!
//! [`LockManager::downgrade`]: crate::lock::LockManager::downgrade
//!
//! **Changes are kept per record, not per page.** An object-level change is
//! an after-image of one record (or its deletion) in [`ObjectChanges`]; the
//! transaction keeps no private copy of the page, because the page's other
//! records belong to other transactions. Reads of a changed record answer
//! from the after-image; reads of any other record go to the committed
//! page. A page-level access to a page with record changes first takes the
//! page-level lock, and then sees (S) or takes over (X, *folding* the
//! changes into a private copy) the committed page with the changes
//! applied.
//!
//! **Room is reserved.** A record that grows needs room on its page at
//! commit, when other transactions' growths may have taken it. So a
//! transaction whose changes on a page grow it by `n` bytes in total holds
//! a reservation of `n` bytes there ([`Backend::reserve_room`]); a backend
//! grants it only while the page's room (its free gap and garbage) covers
//! every transaction's reservation. When it cannot, the record does not fit
//! there: its body moves to a page with room (placing a record takes X on
//! that page, never waiting) and its slot keeps a forwarding stub, a change
//! that shrinks it. Only past the transaction's budget of record bytes (or
//! for a backend that keeps no reservations) does a change *escalate*: the
//! transaction takes X on the page and goes on at page level there. Applying a page's changes shrinking ones first
//! ([`apply`]) then never runs out of room.
//!
//! **Commit** applies each page's changes to the newest image of the page —
//! the committed one, or the one a commit logged ahead of it and has not
//! installed yet — and logs the difference as an ordinary PAGE record
//! (byte runs of the records it changed, or a full image on the page's
//! first change since a checkpoint began), so recovery and torn-page repair
//! are the page-level ones: the redo records of one page are applied in log
//! order to the page as it stands (`commit.rs`).
//!
//! [`Backend::reserve_room`]: super::Backend::reserve_room

use std::collections::BTreeMap;

use crate::access::PageAccess;
use crate::error::{Error, Result};
use crate::fxhash::FxHashMap;
use crate::ids::{Oid, PageId, SlotIdx, Uniq};
use crate::lock::{LockMode, Resource};
use crate::record::object::{change_in_page, slot_in};
use crate::record::slotted::{self, SlotRef};

use super::Txn;

/// The list of objects read under coarse pages is sorted and deduplicated
/// once it is twice as long as after the last time, and at least this long
/// (768 KiB): repeated reads of the same objects keep it at most about twice
/// the objects read, and a transaction reading fewer (nearly all) never
/// sorts it unless it changes an object on a page it read.
const COARSE_DEDUP_AT: usize = 1 << 16;

/// How a read of an object is covered ([`Txn::lock_object_to_read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageRead {
    /// By the object's own lock (or the page is the transaction's own
    /// copy): the page's other objects may change meanwhile, so an image of
    /// the page kept from before is used only if its LSN is still the
    /// committed one, read now.
    Object,
    /// By S on the whole page, which the transaction has not changed: no
    /// commit can change the page until the transaction ends. An image of
    /// it kept from before is current if the cache that keeps it drops a
    /// page's images when a commit installs the page, before the commit's
    /// locks go, and refuses images read before an install
    /// ([`crate::txn::Db::set_install_hook`]; the typed layer's dual
    /// buffer does).
    Whole,
}

/// What a transaction under coarse reads keeps to lower a page's or a
/// tree's S later ([`Txn::de_escalate`], `Txn::de_escalate_tree`): the
/// objects read under pages held S and the entry and gap locks a tree
/// held S covered (no entry per page or tree, so a read costs a push), and
/// the pages locked S or stronger by page-level accesses (a scan), which
/// are never lowered.
#[derive(Debug, Default)]
pub(crate) struct CoarseReads {
    /// Whether a coarse lock may be held (set when one is taken, cleared
    /// when [`Txn::lower_coarse_locks`] lowers them all).
    pub(super) active: bool,
    read: Noted<Oid>,
    pub(super) keys: Noted<Resource>,
    pub(super) page_level: crate::fxhash::FxHashSet<PageId>,
}

impl CoarseReads {
    fn note_read(&mut self, at: Oid) {
        self.read.note(at);
    }

    /// The objects of `page` read, taken out of the list (OIDs order by
    /// page first).
    fn take_page(&mut self, page: PageId) -> Vec<Oid> {
        self.read.take(|o| o.page.cmp(&page))
    }
}

/// A list of things noted, deduplicated now and then (see
/// [`COARSE_DEDUP_AT`]).
#[derive(Debug)]
pub(crate) struct Noted<T> {
    items: Vec<T>,
    /// Whether `items` is sorted and free of duplicates.
    sorted: bool,
    /// The length at which `items` is deduplicated next.
    dedup_at: usize,
}

impl<T> Default for Noted<T> {
    fn default() -> Self {
        Noted {
            items: Vec::new(),
            sorted: true,
            dedup_at: COARSE_DEDUP_AT,
        }
    }
}

impl<T: Ord + Copy> Noted<T> {
    pub(super) fn note(&mut self, x: T) {
        if self.items.last() == Some(&x) {
            return;
        }
        self.items.push(x);
        self.sorted = false;
        if self.items.len() >= self.dedup_at {
            self.sort();
            self.dedup_at = (2 * self.items.len()).max(COARSE_DEDUP_AT);
        }
    }

    fn sort(&mut self) {
        if !self.sorted {
            self.items.sort_unstable();
            self.items.dedup();
            self.sorted = true;
        }
    }

    /// The items in the run where `place` answers `Equal` (the items
    /// order by it), taken out of the list.
    pub(super) fn take(&mut self, place: impl Fn(&T) -> std::cmp::Ordering) -> Vec<T> {
        self.sort();
        let from = self.items.partition_point(|x| place(x).is_lt());
        let to = from + self.items[from..].partition_point(|x| place(x).is_eq());
        self.items.drain(from..to).collect()
    }

    /// The items `keep` refuses, taken out of the list (deduplicated).
    pub(super) fn take_unless(&mut self, keep: impl Fn(&T) -> bool) -> Vec<T> {
        self.sort();
        let mut taken = Vec::new();
        self.items.retain(|x| {
            keep(x) || {
                taken.push(*x);
                false
            }
        });
        taken
    }
}

/// Record bytes of object-level changes a transaction keeps in memory
/// before further changes escalate to page level (whose private pages
/// spill to disk): a fraction of its private-page budget.
const CHANGE_BYTES_SHARE: usize = 2;

/// A transaction's object-level changes, per page.
#[derive(Debug, Default)]
pub(super) struct ObjectChanges {
    pub(super) pages: FxHashMap<PageId, PageChanges>,
    /// Payload bytes held in all after-images (and appends' growth).
    pub(super) bytes: usize,
}

/// The changes of one transaction to records of one page.
#[derive(Debug, Default)]
pub(super) struct PageChanges {
    pub(super) slots: BTreeMap<SlotIdx, SlotChange>,
    /// Σ (new length − committed length) over the changed records.
    pub(super) net: isize,
    /// Bytes of room the backend reserved for this transaction here.
    pub(super) reserved: usize,
}

#[derive(Debug)]
pub(super) struct SlotChange {
    pub(super) uniq: Uniq,
    /// The record's payload length in the committed page when the change
    /// was made (fixed while the transaction holds the object's X lock;
    /// under an append lock only other appends change it).
    pub(super) committed_len: usize,
    pub(super) after: After,
}

/// What a transaction's change makes of a record.
#[derive(Debug)]
pub(super) enum After {
    /// The record's new kind and payload.
    Image(u8, Vec<u8>),
    /// The record deleted.
    Deleted,
    /// Appends kept logically (`txn/append.rs`), applied in order at commit
    /// to the record as it then stands; `growth` bounds what they add, and
    /// is what the page's reservation counts for them.
    Merges {
        merges: Vec<std::sync::Arc<dyn super::RecordMerge>>,
        growth: usize,
    },
}

impl SlotChange {
    /// The payload length the change leaves (for appends, its bound).
    fn len(&self) -> usize {
        match &self.after {
            After::Image(_, p) => p.len(),
            After::Deleted => 0,
            After::Merges { growth, .. } => self.committed_len + growth,
        }
    }

    /// Bytes the change holds in memory, counted against the budget.
    fn held(&self) -> usize {
        match &self.after {
            After::Image(_, p) => p.len(),
            After::Deleted => 0,
            After::Merges { growth, .. } => *growth,
        }
    }

    /// What the change adds to its page's net growth.
    fn net(&self) -> isize {
        self.len() as isize - self.committed_len as isize
    }
}

impl ObjectChanges {
    pub(super) fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    pub(super) fn contains(&self, page: PageId) -> bool {
        self.pages.contains_key(&page)
    }

    pub(super) fn clear(&mut self) {
        self.pages.clear();
        self.bytes = 0;
    }

    pub(super) fn take(&mut self, page: PageId) -> Option<PageChanges> {
        let ch = self.pages.remove(&page)?;
        self.bytes -= ch.slots.values().map(SlotChange::held).sum::<usize>();
        Some(ch)
    }

    /// The pages with changes, in page order (the order a commit logs them).
    pub(super) fn page_ids(&self) -> Vec<PageId> {
        let mut ids: Vec<PageId> = self.pages.keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}

/// Applies `ch` to `image` (an image of `page`): deletions and shrinking
/// records first, then growing ones, so that room reserved for the sum of
/// the growths suffices whatever the order of the slots. Every changed
/// record must still be in the image with the uniquifier it had when it
/// was changed (nobody else changes a record under its X lock).
pub(super) fn apply(image: &mut [u8], page: PageId, ch: &PageChanges) -> Result<()> {
    for growing in [false, true] {
        for (&slot, c) in &ch.slots {
            if (c.len() > c.committed_len) != growing {
                continue;
            }
            let at = Oid {
                page,
                slot,
                uniq: c.uniq,
            };
            if slot_in(image, at)?.is_none() {
                return Err(Error::corrupt(
                    page,
                    format!("object {at} changed by a transaction is gone from its page"),
                ));
            }
            let merged;
            let (kind, payload) = match &c.after {
                After::Deleted => {
                    slotted::delete(image, slot)?;
                    continue;
                }
                After::Image(kind, payload) => (*kind, payload.as_slice()),
                After::Merges { merges, .. } => {
                    let rec = slot_in(image, at)?.expect("checked above");
                    merged = super::append::merged_record(rec.kind, rec.data, at, merges)?;
                    (merged.0, merged.1.as_slice())
                }
            };
            if !slotted::update(image, slot, kind, payload)? {
                return Err(Error::Internal(format!(
                    "object {at} does not fit its page in the room reserved for it"
                )));
            }
        }
    }
    Ok(())
}

impl Txn {
    /// Locks single objects from now on instead of whole pages (see the
    /// module docs of `txn::objects`); false turns it off for the changes
    /// that follow. Refused if the backend cannot keep object-level changes
    /// (a page-server client, today).
    pub fn set_object_locking(&mut self, on: bool) -> Result<()> {
        if on && !self.db.object_locking() {
            return Err(Error::InvalidArgument(
                "this backend locks pages, not objects".to_string(),
            ));
        }
        self.object_locks = on;
        Ok(())
    }

    /// Lets reads take S on a whole page (under object locking) or tree
    /// (under key-range locking) while nobody writes there, instead of a
    /// lock per object or per entry (see the module docs, "Coarse reads").
    /// On by default for an embedded database's transactions under either;
    /// off for a server's sessions.
    pub fn set_coarse_reads(&mut self, on: bool) {
        self.coarse_reads = on;
    }

    /// Whether this transaction reads all of `page` under one lock: it
    /// holds S or stronger on the page (a coarse read's, a scan's, or page
    /// locking's) and has no object-level change there. The page's
    /// committed image then cannot change until the transaction ends, so a
    /// typed layer may read it in place and decode its other objects, as
    /// under page locking.
    pub fn reads_page_whole(&self, page: PageId) -> bool {
        self.holds(Resource::Page(page), LockMode::S) && !self.changed_objects_on(page)
    }

    /// Whether the transaction has object-level changes on `page`.
    fn changed_objects_on(&self, page: PageId) -> bool {
        !self.objects.pages.is_empty() && self.objects.pages.contains_key(&page)
    }

    /// True if this transaction locks single objects.
    pub fn object_locking(&self) -> bool {
        self.object_locks
    }

    /// True if an access to `page` goes through the object-level path: the
    /// transaction locks objects and holds no private copy of the page.
    pub(super) fn object_level(&self, page: PageId) -> bool {
        self.object_locks && !self.pages.contains(page)
    }

    /// [`ObjectSpace::with_slot`](crate::record::object::ObjectSpace::with_slot)
    /// for a transaction.
    pub(super) fn slot_with<R>(&mut self, at: Oid, f: impl FnOnce(Option<SlotRef<'_>>) -> R) -> Result<R> {
        if !self.object_level(at.page) {
            return PageAccess::read(self, at.page, |b| -> Result<R> { Ok(f(slot_in(b, at)?)) })?;
        }
        self.take_object_locks(at, false)?;
        if let Some(c) = self.objects.pages.get(&at.page).and_then(|ch| ch.slots.get(&at.slot)) {
            let r = match &c.after {
                After::Image(kind, data) if c.uniq == at.uniq => Some(SlotRef {
                    kind: *kind,
                    uniq: c.uniq,
                    data,
                }),
                After::Merges { .. } => return self.slot_with_merges(at, f),
                _ => None,
            };
            return Ok(f(r));
        }
        self.committed_slot(at, f)
    }

    /// Calls `f` with the record `at` names in the committed page (see
    /// [`slot_in`]); the caller holds the object's lock.
    pub(super) fn committed_slot<R>(&mut self, at: Oid, f: impl FnOnce(Option<SlotRef<'_>>) -> R) -> Result<R> {
        let mut f = Some(f);
        let mut out = None;
        let r = self.db.read_committed(at.page, &mut |b| {
            out = Some(slot_in(b, at).map(|r| f.take().map(|f| f(r))));
        });
        r.inspect_err(|e| self.doom_if_fatal(e))?;
        match out {
            Some(Ok(Some(r))) => Ok(r),
            Some(Err(e)) => Err(e),
            _ => Err(Error::Internal(format!("the backend did not read page {}", at.page))),
        }
    }

    /// Takes, ahead of the operation, the locks a read (`exclusive` false)
    /// or a change of the object `at` takes: IS on its page and S on the
    /// object, or IX and X, when the transaction locks objects and has no
    /// private copy of the page; else S or X on the page. An object server
    /// locks what a client is about to change this way.
    pub fn lock_object(&mut self, at: Oid, exclusive: bool) -> Result<()> {
        self.check_active()?;
        if !self.object_level(at.page) {
            return self.lock_page(at.page, exclusive);
        }
        self.take_object_locks(at, exclusive)
    }

    /// [`Txn::lock_object`] for a read, answering how the object's page
    /// is covered ([`PageRead`]) — the one call a typed layer makes before
    /// it reads an object under object-level locking.
    pub fn lock_object_to_read(&mut self, at: Oid) -> Result<PageRead> {
        self.check_active()?;
        if !self.object_level(at.page) {
            // The transaction's own copy of the page: read as it is.
            self.lock_page(at.page, false)?;
            return Ok(PageRead::Object);
        }
        if !self.lock_object_for_read(at)? || self.changed_objects_on(at.page) {
            return Ok(PageRead::Object);
        }
        Ok(PageRead::Whole)
    }

    /// The intention lock on `at`'s page and the object's own lock — or,
    /// for a read under coarse reads, S on the page (see the module docs).
    fn take_object_locks(&mut self, at: Oid, exclusive: bool) -> Result<()> {
        if exclusive {
            self.de_escalate(at.page)?;
            self.lock(Resource::Page(at.page), LockMode::IX)?;
            return self.lock(Resource::Object(at), LockMode::X);
        }
        self.lock_object_for_read(at).map(|_| ())
    }

    /// The locks of a read of `at` at object level: a lock on the whole
    /// page ([`Txn::read_under_page_lock`]: true), or IS on the page and S
    /// on the object (false).
    fn lock_object_for_read(&mut self, at: Oid) -> Result<bool> {
        if self.read_under_page_lock(at)? {
            return Ok(true);
        }
        self.lock(Resource::Page(at.page), LockMode::IS)?;
        self.lock(Resource::Object(at), LockMode::S)?;
        Ok(false)
    }

    /// A read of `at` covered by a lock on its whole page: one held already
    /// (S or stronger), or — under coarse reads — S taken now because
    /// nobody holds or waits for a conflicting lock there. The object is
    /// noted for [`Txn::de_escalate`]. False if the read must lock the
    /// object itself.
    fn read_under_page_lock(&mut self, at: Oid) -> Result<bool> {
        let page = Resource::Page(at.page);
        match self.held.get(&page) {
            Some(m) if m.covers(LockMode::S) => {}
            Some(_) => return Ok(false),
            None if !self.coarse_reads || self.snapshot.is_some() => return Ok(false),
            None => {
                if !self.db.try_lock(self.owner, page, LockMode::S)? {
                    return Ok(false);
                }
                self.held.insert(page, LockMode::S);
                self.coarse.active = true;
            }
        }
        if self.coarse_reads {
            self.coarse.note_read(at);
        }
        Ok(true)
    }

    /// Before a change of an object on `page`: if the page is held S for
    /// coarse reads (S exactly, and not for a page-level access), locks
    /// each object read under it (S, granted at once: nobody else can hold
    /// X on an object of a page this transaction holds S on) and lowers the
    /// page's lock to IS, so that the change's IX does not exclude other
    /// transactions' object-level writers of the page — the reads stay
    /// locked object by object. A backend that cannot lower a lock keeps
    /// the page's S (the change's IX then makes it SIX).
    pub(super) fn de_escalate(&mut self, page: PageId) -> Result<()> {
        if !self.coarse_reads
            || !self.object_locks
            || self.held.get(&Resource::Page(page)) != Some(&LockMode::S)
            || self.coarse.page_level.contains(&page)
        {
            return Ok(());
        }
        for oid in self.coarse.take_page(page) {
            self.lock(Resource::Object(oid), LockMode::S)?;
        }
        if self.db.downgrade_lock(self.owner, Resource::Page(page), LockMode::IS)? {
            self.held.insert(Resource::Page(page), LockMode::IS);
        }
        Ok(())
    }

    /// Lowers every coarse lock the transaction holds — pages held S for
    /// object reads ([`Txn::de_escalate`]) and trees held S for key-range
    /// reads (`Txn::de_escalate_tree`) — before it does anything that may
    /// wait for another transaction. So **a waiting transaction holds no
    /// coarse lock**: a writer that waits for a coarse lock waits for a
    /// transaction that is running, never for one that waits in turn, and
    /// coarse reads close no deadlock cycle that object and key locks
    /// would not.
    pub(super) fn lower_coarse_locks(&mut self) -> Result<()> {
        if !self.coarse.active {
            return Ok(());
        }
        self.coarse.active = false;
        let mut pages = Vec::new();
        let mut trees = Vec::new();
        for (res, mode) in &self.held {
            match (res, mode) {
                (Resource::Page(p), LockMode::S) => pages.push(*p),
                (Resource::Tree(root), LockMode::S) => trees.push(*root),
                _ => {}
            }
        }
        for p in pages {
            self.de_escalate(p)?;
        }
        for root in trees {
            self.de_escalate_tree(root)?;
        }
        Ok(())
    }

    /// [`ObjectSpace::update_slot`](crate::record::object::ObjectSpace::update_slot)
    /// and `delete_slot` for a transaction: `after` is the new kind and
    /// payload, or `None` to delete. Answers what the page-level operation
    /// would: for an update, whether it fit; for a deletion, whether the
    /// page is now empty (never, at object level: the page is not this
    /// transaction's to free).
    pub(super) fn change_slot(&mut self, at: Oid, after: Option<(u8, &[u8])>) -> Result<bool> {
        if self.object_level(at.page) {
            if let Some(done) = self.change_record(at, after)? {
                return Ok(done);
            }
            // Escalated: the page is this transaction's private copy now.
        }
        PageAccess::modify(self, at.page, |b| change_in_page(b, at, after))
    }

    /// The object-level change of [`Txn::change_slot`]; `None` if it had to
    /// escalate to page level instead (the page is folded, nothing changed).
    fn change_record(&mut self, at: Oid, after: Option<(u8, &[u8])>) -> Result<Option<bool>> {
        self.refuse_if_doomed()?;
        self.take_object_locks(at, true)?;
        // The record's committed length, fixed now that the transaction
        // holds X: a change made before under X knows it; an append made
        // under A (when others could append too) does not.
        let old = self
            .objects
            .pages
            .get(&at.page)
            .and_then(|ch| ch.slots.get(&at.slot))
            .map(|c| match c.after {
                After::Merges { .. } => (c.net(), None),
                _ => (c.net(), Some(c.committed_len)),
            });
        let (old_net, known_len) = old.unwrap_or((0, None));
        let committed_len = match known_len {
            Some(len) => len,
            None => {
                let len = self.committed_slot(at, |r| r.map(|r| r.data.len()))?;
                len.ok_or(Error::NotFound { oid: at })?
            }
        };
        let new_len = after.map_or(0, |(_, p)| p.len());
        let (net_before, reserved) = self
            .objects
            .pages
            .get(&at.page)
            .map_or((0, 0), |ch| (ch.net, ch.reserved));
        let net = net_before - old_net + new_len as isize - committed_len as isize;
        let need = usize::try_from(net).unwrap_or(0);
        let mut reserved = reserved;
        let over_budget = self.objects.bytes + new_len > self.object_bytes_max;
        if need > reserved || over_budget {
            let granted = !over_budget && self.db.reserve_room(self.owner(), at.page, need)?;
            if !granted && !over_budget && after.is_some() {
                // No room for the growth here: the record "does not fit"
                // (nothing changed), and the caller moves its body to a
                // page with room, leaving a stub in its slot — a change
                // that shrinks the record, so it needs no room. No X on
                // the page: escalating took one that waited for every
                // reader of the page, often at an object-server client's
                // commit, where it made most of that client's deadlocks.
                return Ok(Some(false));
            }
            if !granted {
                self.db.note_escalated();
                self.fold(at.page)?;
                return Ok(None);
            }
            reserved = need;
        }
        let ch = self.objects.pages.entry(at.page).or_default();
        ch.net = net;
        ch.reserved = reserved;
        let old = ch.slots.insert(
            at.slot,
            SlotChange {
                uniq: at.uniq,
                committed_len,
                after: after.map_or(After::Deleted, |(k, p)| After::Image(k, p.to_vec())),
            },
        );
        self.objects.bytes = self.objects.bytes + new_len - old.map_or(0, |c| c.held());
        self.changes += 1;
        Ok(Some(after.is_some()))
    }

    /// Moves the object-level changes of `page` into a private copy of it,
    /// under the page's X lock: from here on the page is changed at page
    /// level, as if the transaction had locked pages all along.
    pub(super) fn fold(&mut self, page: PageId) -> Result<()> {
        self.lock(Resource::Page(page), LockMode::X)?;
        let Some(ch) = self.objects.take(page) else {
            return Ok(());
        };
        let mut image = self.committed_image(page)?;
        apply(&mut image, page, &ch)?;
        let spilled = self.pages.insert(page, &image);
        self.changes += 1;
        let spilled = spilled.inspect_err(|e| self.doom(e))?;
        self.db.note_spilled(spilled);
        Ok(())
    }

    /// A page-level read of `page`, on which this transaction has
    /// object-level changes: under the page's S lock (nobody else changes
    /// it meanwhile), the committed image with the changes applied.
    pub(super) fn image_with_changes(&mut self, page: PageId) -> Result<Option<Vec<u8>>> {
        if !self.objects.contains(page) {
            return Ok(None);
        }
        self.lock(Resource::Page(page), LockMode::S)?;
        let mut image = self.committed_image(page)?;
        if let Some(ch) = self.objects.pages.get(&page) {
            apply(&mut image, page, ch)?;
        }
        Ok(Some(image))
    }

    /// Per page with object-level changes, the committed-or-newer `base`
    /// with this transaction's changes applied: what its commit installs.
    pub(super) fn rebase(&self, page: PageId, base: &[u8]) -> Result<Vec<u8>> {
        let mut image = base.to_vec();
        if let Some(ch) = self.objects.pages.get(&page) {
            apply(&mut image, page, ch)?;
        }
        Ok(image)
    }
}

/// The budget of object-level change bytes for a transaction whose private
/// pages may take `memory_bytes`.
pub(super) fn change_bytes_max(memory_bytes: usize) -> usize {
    memory_bytes / CHANGE_BYTES_SHARE
}
