//! An object-protocol transaction's fetches: OBJ_FETCH of objects by
//! name (streamed, one part each) and, for the adaptive client, of pages
//! of objects (one reply) and of pages read ahead (one pipelined request
//! each, the reply taken in when its page is wanted, every one before the
//! transaction's end is sent), and what each brings is kept.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_net::object_service::{
    decode_fetched_batch, FetchedObject, ObjectRequest, FETCH_OBJECTS_MAX, OBJ_S, OBJ_S_PAGE, OBJ_S_PAGE_AHEAD, OBJ_X,
};
use cairn_storage::fxhash::FxHashMap;
use cairn_storage::{Oid, PageId, Result};

use super::super::adaptive::FetchMode;
use super::super::rights::FetchInFlight;
use super::rights::RightsState;
use super::{ObjectStore, ObjectTxn, Read};

/// How [`ObjectTxn::fetch`] asks for its objects ([`ObjectTxn::plan_fetch`]).
struct FetchPlan {
    /// Objects fetched with their pages ([`OBJ_S_PAGE`]).
    by_page: Vec<Oid>,
    /// Objects fetched alone, in the mode asked for.
    alone: Vec<Oid>,
    /// Pages to ask for ahead once those requests are sent.
    read_ahead: Vec<PageId>,
}

impl ObjectTxn {
    /// Fetches `oids` in `mode`, pipelined, and keeps what comes back
    /// (objects sent with a right, across transactions too). An adaptive
    /// client asks for the objects of runs fetching pages with their pages
    /// ([`OBJ_S_PAGE`]).
    pub(super) fn fetch(&mut self, oids: &[Oid], mode: u8) -> Result<()> {
        let store = self.store.clone();
        let _flight = store.rights.fetch();
        self.on_server = true;
        // Pages read ahead that are wanted now: their replies first, then
        // only what they did not bring is fetched.
        let mut came_to = Vec::new();
        let rest: Vec<Oid>;
        let mut oids = oids;
        if mode == OBJ_S && !self.ahead.is_empty() && self.take_wanted_ahead(oids, &mut came_to)? {
            rest = oids.iter().copied().filter(|o| !self.local(*o)).collect();
            oids = &rest;
        }
        let FetchPlan {
            by_page,
            alone,
            read_ahead,
        } = self.plan_fetch(&store, oids, mode, came_to);
        let mut requests: Vec<(u8, &[Oid])> = Vec::new();
        requests.extend(by_page.chunks(FETCH_OBJECTS_MAX).map(|c| (OBJ_S_PAGE, c)));
        requests.extend(alone.chunks(FETCH_OBJECTS_MAX).map(|c| (mode, c)));
        let mut calls = Vec::new();
        for (mode, chunk) in requests {
            if let Some(a) = &store.adaptive {
                super::super::lock(a).note_fetch(mode == OBJ_S_PAGE);
            }
            let call = self.send_fetch(mode, chunk)?;
            calls.push((call, mode, chunk));
        }
        // Read ahead once the requests wanted now are on their way.
        if !read_ahead.is_empty() {
            self.ask_ahead(read_ahead)?;
        }
        for (mut call, mode, chunk) in calls {
            if mode == OBJ_S_PAGE {
                self.take_pages(&mut call, chunk, &[])?;
                continue;
            }
            self.take_objects(&store, &mut call, mode, chunk)?;
        }
        Ok(())
    }

    /// Takes in the replies of the pages read ahead that `oids` are on, in
    /// page order, and notes each in `came_to` as a page come to ahead.
    /// Returns whether there was any (then some of `oids` may be local now).
    fn take_wanted_ahead(&mut self, oids: &[Oid], came_to: &mut Vec<(PageId, bool)>) -> Result<bool> {
        let mut wanted: Vec<PageId> = oids
            .iter()
            .map(|o| o.page)
            .filter(|p| self.ahead.iter().any(|a| a.page == *p))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        for &p in &wanted {
            self.take_ahead_through(p)?;
            came_to.push((p, true));
        }
        Ok(!wanted.is_empty())
    }

    /// How `oids` are fetched in `mode`: an adaptive client fetching S asks
    /// for each object with its page or alone as its policy says for the
    /// page, tells the policy the pages it came to (`came_to`: those taken
    /// from replies read ahead, and now those fetched by page), and gets
    /// back the pages to read ahead (none asked for already, or fetched now,
    /// or that the client has). Any other fetch asks for every object alone.
    fn plan_fetch(
        &mut self,
        store: &ObjectStore,
        oids: &[Oid],
        mode: u8,
        mut came_to: Vec<(PageId, bool)>,
    ) -> FetchPlan {
        let mut by_page = Vec::new();
        let mut alone = Vec::new();
        let mut read_ahead = Vec::new();
        match (&store.adaptive, mode) {
            // At a snapshot, single objects: the pages whole would come
            // under rights (the present).
            (Some(a), OBJ_S) if !self.snapshot => {
                let mut a = super::super::lock(a);
                for o in oids {
                    match a.mode_for(o.page) {
                        FetchMode::Pages => by_page.push(*o),
                        FetchMode::Objects => alone.push(*o),
                    }
                }
                came_to.extend(by_page.iter().map(|o| (o.page, false)));
                came_to.sort_unstable();
                came_to.dedup_by_key(|c| c.0);
                for &(page, ahead) in &came_to {
                    read_ahead.extend(a.came_to(&mut self.sequence, page, ahead));
                }
                read_ahead.sort_unstable();
                read_ahead.dedup();
                read_ahead.retain(|p| {
                    !by_page.iter().any(|o| o.page == *p)
                        && !self.ahead.iter().any(|x| x.page == *p)
                        && store.wants_page(*p)
                });
                a.note_read_ahead(read_ahead.len());
            }
            _ => alone.extend_from_slice(oids),
        }
        FetchPlan {
            by_page,
            alone,
            read_ahead,
        }
    }

    /// Takes in the reply of an OBJ_FETCH of `chunk` in `mode` (not of
    /// pages): one part per object, in order, then an empty final part.
    /// Each object is kept as this transaction's read, and one sent S with
    /// a right across transactions too.
    fn take_objects(
        &mut self,
        store: &ObjectStore,
        call: &mut cairn_net::rpc::Call,
        mode: u8,
        chunk: &[Oid],
    ) -> Result<()> {
        let conn = &store.conn;
        let mut got = 0usize;
        loop {
            let part = call.next_part().map_err(|e| conn.error_for(e, self.id))?;
            let Some(part) = part else { break };
            let body = part.body;
            conn.bytes_received.fetch_add(body.len() as u64, Ordering::Relaxed);
            if part.last {
                if !body.is_empty() {
                    return Err(conn.protocol("an empty final OBJ_FETCH reply"));
                }
                break;
            }
            let f = FetchedObject::decode(&body).map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
            conn.objects_shipped.fetch_add(1, Ordering::Relaxed);
            let Some(&oid) = chunk.get(got) else {
                return Err(conn.protocol("one OBJ_FETCH part per object"));
            };
            if f.oid != oid.to_bytes() {
                return Err(conn.protocol("the objects asked for, in order"));
            }
            got += 1;
            let read = Read::of(&f);
            if mode == OBJ_X && f.found {
                self.exclusive.insert(oid, ());
            }
            // Never a right to an object this transaction holds X on:
            // what the server sent may be its own uncommitted version
            // (an object it created, read again once let go of).
            // A snapshot's read comes with one when the object's version
            // is the committed one (the server took S for a moment): kept
            // for later transactions and snapshots, not used by this one
            // (it came after the snapshot began; what it read is its own).
            if let (Read::Whole(bytes), r @ 1.., OBJ_S) = (&read, f.right, mode) {
                if !self.exclusive.contains_key(&oid) {
                    store.take_object(oid, r, bytes);
                }
            }
            if let (Some(a), Read::Whole(b)) = (&store.adaptive, &read) {
                super::super::lock(a).note_object_bytes(b.len());
            }
            self.keep(oid, read);
        }
        if got != chunk.len() {
            return Err(conn.protocol("one OBJ_FETCH part per object"));
        }
        Ok(())
    }

    /// Sends OBJ_FETCH of `oids` in `mode` (a round trip in the
    /// counters); the reply is the returned call's.
    fn send_fetch(&self, mode: u8, oids: &[Oid]) -> Result<cairn_net::rpc::Call> {
        let conn = &self.store.conn;
        let req = ObjectRequest::Fetch {
            txn: self.id.0,
            mode,
            oids: oids.iter().map(|o| o.to_bytes()).collect(),
        };
        let (kind, body) = req.encode();
        conn.round_trips.fetch_add(1, Ordering::Relaxed);
        conn.bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
        conn.client.invoke(kind, body).map_err(|e| conn.error_for(e, self.id))
    }

    /// Takes in the reply of an [`OBJ_S_PAGE`] fetch of `chunk`: the
    /// objects asked for, in order, kept as this transaction's reads (and
    /// across transactions under their rights), then the other objects of
    /// their pages, kept under their rights until a transaction reads them
    /// (one sent without a right is this transaction's: the server holds
    /// it S for it).
    ///
    /// A reply to pages read ahead (`ahead`: the pages asked for; `chunk`
    /// empty) holds pages only. Returns the pages that came whole.
    fn take_pages(&mut self, call: &mut cairn_net::rpc::Call, chunk: &[Oid], ahead: &[PageId]) -> Result<usize> {
        let store = self.store.clone();
        let conn = &store.conn;
        let mut body = None;
        while let Some(part) = call.next_part().map_err(|e| conn.error_for(e, self.id))? {
            conn.bytes_received.fetch_add(part.body.len() as u64, Ordering::Relaxed);
            if !part.last || body.is_some() {
                return Err(conn.protocol("an OBJ_FETCH of pages answered in one reply"));
            }
            body = Some(part.body);
        }
        let body = body.ok_or_else(|| conn.protocol("an OBJ_FETCH of pages answered in one reply"))?;
        let batch = decode_fetched_batch(&body).map_err(|e| conn.error(cairn_net::Error::Message(e)))?;
        let objects = &batch.objects;
        if objects.len() < chunk.len() {
            return Err(conn.protocol("every object asked for in an OBJ_FETCH of pages"));
        }
        conn.objects_shipped.fetch_add(objects.len() as u64, Ordering::Relaxed);
        // Objects per page, and of those the ones that came along.
        let mut on_page: FxHashMap<PageId, (usize, usize)> = FxHashMap::default();
        let mut kept = Vec::with_capacity(objects.len());
        let mut bytes_seen = Vec::with_capacity(chunk.len());
        for (i, f) in objects.iter().enumerate() {
            let oid = Oid::from_bytes(&f.oid);
            let asked = i < chunk.len();
            if asked && oid != chunk[i] {
                return Err(conn.protocol("the objects asked for, in order"));
            }
            if !asked && (!chunk.iter().any(|o| o.page == oid.page) || chunk.contains(&oid)) {
                return Err(conn.protocol("then objects of the pages asked for, not those asked for"));
            }
            let e = on_page.entry(oid.page).or_default();
            e.0 += 1;
            e.1 += usize::from(!asked);
            let read = Read::of(f);
            if let Read::Whole(b) = &read {
                if f.right != 0 && !self.exclusive.contains_key(&oid) {
                    kept.push((oid, f.right, b.clone()));
                }
                if asked {
                    bytes_seen.push(b.len());
                }
            }
            // Asked for; or come along without a right (the server holds it
            // S for this transaction).
            let along_unkept = f.right == 0 && matches!(read, Read::Whole(_)) && !self.read.contains_key(&oid);
            if asked || along_unkept {
                self.keep(oid, read);
            }
        }
        store.take_objects(&kept);
        for p in &batch.pages {
            let page = PageId(p.page);
            let asked = chunk.iter().any(|o| o.page == page) || ahead.contains(&page);
            if !asked || on_page.get(&page).is_some_and(|n| n.1 > 0) {
                return Err(conn.protocol("a page asked for, whole or in objects"));
            }
            if p.image.len() != store.page_size() {
                return Err(conn.protocol("a page image of the volume's page size"));
            }
            conn.pages_shipped.fetch_add(1, Ordering::Relaxed);
            let image: Arc<[u8]> = Arc::from(p.image);
            // Its objects, the asked for ones already counted.
            let mut small = Vec::new();
            cairn_storage::record::object::image_objects(page, &image, |o, _| small.push(o))
                .map_err(|_| conn.protocol("a page image that reads as a slotted page"))?;
            let e = on_page.entry(page).or_default();
            let asked = e.0;
            e.0 = small.len().max(asked);
            e.1 = e.0 - asked;
            if !store.take_page(page, p.right, image.clone()) {
                // No right to it now (called back already, or a
                // transaction of this client is changing an object of it):
                // the server holds the page S for this transaction, whose
                // reads its objects are.
                for o in small {
                    if !self.read.contains_key(&o) {
                        if let Some(r) = cairn_storage::record::object::home_record(&image, o).ok().flatten() {
                            self.keep(o, Read::Whole(Arc::from(&image[r])));
                        }
                    }
                }
            }
        }
        if let Some(a) = &store.adaptive {
            let mut a = super::super::lock(a);
            for n in bytes_seen {
                a.note_object_bytes(n);
            }
            for (page, (objects, along)) in on_page {
                a.note_page(page, objects, along);
            }
        }
        Ok(batch.pages.len())
    }

    /// Asks for `pages` ahead ([`OBJ_S_PAGE_AHEAD`]), one request each (so
    /// each is taken in when it is wanted, and the transaction coming to it
    /// moves the read-ahead on): the reply taken in when its page is wanted
    /// ([`ObjectTxn::take_ahead_through`]) or before the transaction ends
    /// ([`ObjectTxn::settle_ahead`]).
    fn ask_ahead(&mut self, pages: Vec<PageId>) -> Result<()> {
        for page in pages {
            let flight = self.store.rights.fetch();
            // The page's number is what counts; the slot is ignored.
            let oid = Oid {
                page,
                slot: cairn_storage::SlotIdx(0),
                uniq: cairn_storage::Uniq(0),
            };
            let call = self.send_fetch(OBJ_S_PAGE_AHEAD, &[oid])?;
            self.ahead.push_back(Ahead {
                page,
                call,
                _flight: flight,
            });
        }
        Ok(())
    }

    /// Takes in the replies of pages read ahead, oldest first, through the
    /// one of `page`. A page that did not come ends the sequence (the pages
    /// further on are fetched when wanted).
    fn take_ahead_through(&mut self, page: PageId) -> Result<()> {
        while let Some(mut a) = self.ahead.pop_front() {
            if self.take_pages(&mut a.call, &[], &[a.page])? == 0 {
                self.sequence.stop();
            }
            if a.page == page {
                break;
            }
        }
        Ok(())
    }

    /// Takes in every reply of pages read ahead still on its way: a
    /// transaction's requests are all answered before its end is sent
    /// (the server must not see one after it). What they bring stays
    /// cached under its rights; an error is the next request's to report.
    pub(super) fn settle_ahead(&mut self) {
        while let Some(mut a) = self.ahead.pop_front() {
            let _ = self.take_pages(&mut a.call, &[], &[a.page]);
        }
    }
}

/// A page asked for ahead, its reply not taken in yet.
pub(super) struct Ahead {
    /// The page asked for.
    page: PageId,
    call: cairn_net::rpc::Call,
    /// Counts as a fetch in flight until taken in (rights may come).
    _flight: FetchInFlight<RightsState>,
}
