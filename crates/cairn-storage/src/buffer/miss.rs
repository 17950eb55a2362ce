//! The miss path: pinning a page, choosing and claiming a frame for it, and
//! loading it, with the read-ahead run around it when misses cluster.

use std::sync::atomic::Ordering;

use super::{Access, BufferPool, Counters, FrameIdx, FrameMeta, FrameState, FrameWrite, State, Victim, RECENT_RUNS};
use crate::error::{Error, Result};
use crate::ids::{Lsn, PageId};
use crate::page;

impl BufferPool {
    /// Pins the frame holding `id`, bringing the page in on a miss. Returns
    /// the frame, and its write lock if this thread already holds it (after a
    /// load or a create into a fresh frame).
    pub(super) fn pin(&self, id: PageId, access: Access) -> Result<(FrameIdx, Option<FrameWrite<'_>>)> {
        let mut st = self.lock_live()?;
        loop {
            if let Some(&frame) = st.page_table.get(&id) {
                match st.metas[frame.0].state {
                    FrameState::Cached => {
                        st.metas[frame.0].pin_count += 1;
                        st.replacer.record_access(frame);
                        if access != Access::Create {
                            Counters::bump(&self.counters.hits);
                        }
                        return Ok((frame, None));
                    }
                    FrameState::Loading | FrameState::WritingBack => {
                        st = self.wait(st)?;
                        continue;
                    }
                    FrameState::Free => panic!("free {frame:?} is in the page table for {id}"),
                }
            }
            let frame = match self.find_victim(&mut st) {
                Victim::Ready(frame) => frame,
                Victim::Dirty(frame) => {
                    st = self.clean_unpinned(st, frame)?;
                    // We let go of `state` during the write: another thread
                    // may have brought `id` in meanwhile.
                    if st.page_table.contains_key(&id) {
                        continue;
                    }
                    // Nobody can pin a frame that is being written back, so
                    // it is still ours to take.
                    assert!(st.metas[frame.0].evictable() && !st.metas[frame.0].dirty);
                    frame
                }
                Victim::Busy => {
                    st = self.wait(st)?;
                    continue;
                }
                Victim::AllPinned => {
                    let n = self.frames.len() as u64;
                    return Err(Error::LimitExceeded {
                        what: "pinned buffer frames",
                        value: n + 1,
                        limit: n,
                    });
                }
            };
            return match access {
                Access::Create => {
                    self.claim(&mut st, frame, id, FrameState::Cached);
                    st.metas[frame.0].pin_count = 1;
                    st.replacer.record_access(frame);
                    let data = self.lock_frame_unheld(frame);
                    Ok((frame, Some(data)))
                }
                Access::Read | Access::Write => {
                    self.claim(&mut st, frame, id, FrameState::Loading);
                    Counters::bump(&self.counters.misses);
                    let ahead = if access == Access::Read {
                        self.claim_read_ahead(&mut st, id)
                    } else {
                        Vec::new()
                    };
                    drop(st);
                    if ahead.is_empty() {
                        self.load(frame, id).map(|data| (frame, Some(data)))
                    } else {
                        self.load_run(frame, id, ahead).map(|data| (frame, Some(data)))
                    }
                }
            };
        }
    }

    /// Claims free frames (`Loading`) for the uncached pages of `id`'s
    /// read-ahead run; never evicts.
    fn claim_read_ahead(&self, st: &mut State, id: PageId) -> Vec<(PageId, FrameIdx)> {
        let ahead = self.read_ahead.load(Ordering::Relaxed);
        // A cold pool (more than half its frames free) reads around every
        // miss when asked to, in its own (larger) runs; otherwise only a run
        // that missed recently: misses scattered over a large volume read
        // one page each; misses that cluster (in space and time) read their
        // run.
        let around = self.read_around_cold.load(Ordering::Relaxed);
        let cold = around > 1 && st.free.len() * 2 > self.frames.len();
        let n = if cold { around.max(ahead) } else { ahead } as u32;
        if n <= 1 || st.free.is_empty() {
            return Vec::new();
        }
        let start = id.0 & !(n - 1);
        match st.missed_runs.iter().position(|&r| r == start) {
            _ if cold => {}
            Some(i) => {
                st.missed_runs.remove(i);
            }
            None => {
                if st.missed_runs.len() == RECENT_RUNS {
                    st.missed_runs.pop_front();
                }
                st.missed_runs.push_back(start);
                return Vec::new();
            }
        }
        // Reading around while cold never takes the pool past half full.
        let mut room = if cold {
            st.free.len() - self.frames.len() / 2
        } else {
            st.free.len()
        };
        let mut out = Vec::new();
        for p in (start..start.saturating_add(n)).map(PageId) {
            if p == id || p == PageId(0) || st.page_table.contains_key(&p) {
                continue;
            }
            if room == 0 {
                break;
            }
            room -= 1;
            let Some(frame) = st.free.pop() else { break };
            self.claim(st, frame, p, FrameState::Loading);
            out.push((p, frame));
        }
        out
    }

    /// Loads `id` into `frame` (both claimed, `Loading`) together with the
    /// read-ahead pages in `ahead`, with one device read over the run they
    /// span. The read-ahead pages that verify become cached and unpinned;
    /// the others go back to the free list. `id` ends as [`BufferPool::load`]
    /// leaves it.
    fn load_run(&self, frame: FrameIdx, id: PageId, ahead: Vec<(PageId, FrameIdx)>) -> Result<FrameWrite<'_>> {
        let ps = self.page_size;
        let lo = ahead.iter().map(|(p, _)| p.0).chain([id.0]).min().unwrap_or(id.0);
        let hi = ahead.iter().map(|(p, _)| p.0).chain([id.0]).max().unwrap_or(id.0);
        let mut run = vec![0u8; (hi - lo + 1) as usize * ps];
        let read = self.device.read_pages(PageId(lo), &mut run);
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for (p, f) in ahead {
            let off = (p.0 - lo) as usize * ps;
            let image = &run[off..off + ps];
            if read.is_ok() && page::verify(image, p).is_ok() {
                self.lock_frame_write(f).copy_from_slice(image);
                kept.push((p, f, page::lsn(image)));
            } else {
                dropped.push((p, f));
            }
        }
        {
            let mut st = self.lock_state();
            for &(_, f, lsn) in &kept {
                let meta = &mut st.metas[f.0];
                assert_eq!(meta.state, FrameState::Loading);
                meta.state = FrameState::Cached;
                meta.pin_count = 0;
                meta.lsn = lsn;
                st.replacer.record_access(f);
            }
            for &(p, f) in &dropped {
                let removed = st.page_table.remove(&p);
                assert_eq!(removed, Some(f), "page table entry for {p}");
                st.metas[f.0] = FrameMeta::free();
                st.free.push(f);
            }
        }
        self.counters.reads.fetch_add(kept.len() as u64, Ordering::Relaxed);
        self.counters.read_ahead.fetch_add(kept.len() as u64, Ordering::Relaxed);
        self.changed.notify_all();
        // The page asked for: from the run when it verifies, else (a failed
        // run read, say) through the ordinary path, which reports its error.
        let off = (id.0 - lo) as usize * ps;
        let image = &run[off..off + ps];
        if read.is_ok() && page::verify(image, id).is_ok() {
            let mut data = self.lock_frame_write(frame);
            data.copy_from_slice(image);
            return Ok(self.finish_load(frame, data));
        }
        self.load(frame, id)
    }

    /// Chooses a frame for a miss: a free one, else the replacer's victim.
    fn find_victim(&self, st: &mut State) -> Victim {
        if let Some(frame) = st.free.pop() {
            return Victim::Ready(frame);
        }
        let State { metas, replacer, .. } = st;
        match replacer.victim(&|f: FrameIdx| metas[f.0].evictable()) {
            Some(frame) if metas[frame.0].dirty => Victim::Dirty(frame),
            Some(frame) => Victim::Ready(frame),
            None if metas
                .iter()
                .any(|m| matches!(m.state, FrameState::Loading | FrameState::WritingBack)) =>
            {
                Victim::Busy
            }
            None => Victim::AllPinned,
        }
    }

    /// Gives `frame` (free, or cached, clean and unpinned) to page `id`,
    /// evicting the page it held.
    fn claim(&self, st: &mut State, frame: FrameIdx, id: PageId, state: FrameState) {
        let meta = &mut st.metas[frame.0];
        assert!(
            meta.state == FrameState::Free || (meta.evictable() && !meta.dirty),
            "claiming {frame:?} in use: {meta:?}"
        );
        if let Some(old) = meta.page.take() {
            let removed = st.page_table.remove(&old);
            assert_eq!(removed, Some(frame), "page table entry for {old}");
            Counters::bump(&self.counters.evictions);
        }
        st.replacer.remove(frame);
        st.metas[frame.0] = FrameMeta {
            page: Some(id),
            state,
            pin_count: 0,
            dirty: false,
            lsn: Lsn(0),
        };
        let previous = st.page_table.insert(id, frame);
        assert_eq!(previous, None, "{id} was already cached");
    }

    /// Reads page `id` into `frame` (in `Loading`, owned by this thread) and
    /// makes it `Cached`, pinned once; on failure frees the frame.
    fn load(&self, frame: FrameIdx, id: PageId) -> Result<FrameWrite<'_>> {
        let mut data = self.lock_frame_write(frame);
        let result = self.device.read_page(id, &mut data);
        if let Err(e) = result {
            drop(data);
            let mut st = self.lock_state();
            let removed = st.page_table.remove(&id);
            assert_eq!(removed, Some(frame), "page table entry for {id}");
            st.metas[frame.0] = FrameMeta::free();
            st.free.push(frame);
            drop(st);
            self.changed.notify_all();
            return Err(e);
        }
        Ok(self.finish_load(frame, data))
    }

    /// Makes `frame` (`Loading`, its page now in `data`) cached and pinned
    /// once by the loader, and wakes those waiting for it.
    fn finish_load<'a>(&'a self, frame: FrameIdx, data: FrameWrite<'a>) -> FrameWrite<'a> {
        Counters::bump(&self.counters.reads);
        let mut st = self.lock_state();
        let meta = &mut st.metas[frame.0];
        assert_eq!(meta.state, FrameState::Loading);
        meta.state = FrameState::Cached;
        meta.pin_count = 1;
        meta.lsn = page::lsn(&data);
        st.replacer.record_access(frame);
        drop(st);
        self.changed.notify_all();
        data
    }
}
