//! The server's structural checks of the pages a page-server or file-server
//! client changed: what makes a client's page image safe to log.
//!
//! A page or file client runs the record, large-object and B+-tree code
//! itself and ships after-images (`remote.rs`, `unwritten.rs`). The server
//! trusts none of it. Two layers of checks run before anything reaches the
//! log; a refusal is [`Error::InvalidArgument`] naming the record, the page
//! and what is wrong, and the transaction is rolled back.
//!
//! **Each image on its own** ([`check_client_image`], when a record is
//! staged), against the page's committed image (its *before*):
//!
//! - it is of a kind a client may make, and the same kind as before: a
//!   page's kind changes only through ALLOCATE and FREE. The one exception
//!   is a B+-tree root, which stays on its page for life and turns from a
//!   leaf into an inner node when it splits (and back when it shrinks);
//! - it is well formed for its kind: a slotted page (`slotted::check`,
//!   and every record one of the kinds the object layer writes, shaped as
//!   that kind is: [`check_records`]); a
//!   B+-tree node (header, bounds, cells disjoint, entries in order:
//!   `btree::check_page`); a large-object page (header, level, count, child
//!   slots inside the volume and the unused ones zero:
//!   `large::page_links`);
//! - a page it did not allocate keeps its identity: a B+-tree page keeps
//!   its root flag, and a root its unique flag and group; a non-root keeps
//!   its level; a large-object page keeps its owner tag, level and first
//!   data page.
//!
//! **The links between pages** ([`Txn::check_client_links`], once before
//! the commit is logged, when every batch is staged). The pages form a
//! forest of *child* links: a B+-tree inner node's children, a large-object
//! index page's children, and a slotted page's large-object descriptors
//! (each naming its object's root). A commit may only move links:
//!
//! - **provenance**: a child link a changed page gains names a page this
//!   transaction allocated, or a page that some changed or freed page linked
//!   to before — never a page of another tree or object (which would make
//!   two parents, or link a foreign page into this tree);
//! - **one parent**: no page is the child of two changed pages;
//! - **conservation**: a page some changed or freed page linked to before
//!   is linked to after, or freed by this transaction (nothing is lost
//!   as a leak);
//! - **place**: a gained child is at the place its link gives it — a
//!   B+-tree node one level below, not a root; a large-object page of the
//!   same owner at the level and first data page its slot implies; a
//!   descriptor's root at the object's depth (and the descriptor valid for
//!   the volume);
//! - **siblings**: a changed leaf's left and right links name leaves that
//!   link back to it.
//!
//! Unchanged links were checked when they were made, and the pages they
//! name keep their identity (above), so only gained links are read. What
//! these checks do not cover: the *contents* a client writes into its
//! objects and index entries (a client with the right to write may write
//! wrong index entries for its own objects; `cairn check` finds that).

use std::collections::{HashMap, HashSet};

use crate::btree;
use crate::error::{Error, Result};
use crate::ids::{Oid, PageId};
use crate::page::{self, PageType};
use crate::record::large::{self, LargeDescriptor};
use crate::record::object::{
    ObjectSpace, FORWARD_SIZE, KIND_FORWARD, KIND_LARGE, KIND_MOVED_LARGE, KIND_MOVED_SMALL, KIND_SMALL,
    KIND_SMALL_PADDED,
};
use crate::record::slotted;

use super::Txn;

/// The error refusing a client's record `index` of page `page`.
pub(super) fn refuse(index: usize, page: PageId, why: String) -> Error {
    Error::InvalidArgument(format!("redo record {index} (page {page}): {why}"))
}

/// Where a child link says its page belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Place {
    /// A non-root B+-tree node at this level.
    BTree { level: u8 },
    /// A page of the large object `owner` at `level` whose first data page
    /// is `first`.
    Large { owner: u64, level: u8, first: u64 },
}

/// A page's child links, in order, each with the place it gives its page.
type Links = Vec<(PageId, Place)>;

/// Checks client record `index`'s image `after` of page `id` on its own,
/// against `before`, the page's committed image (see the module docs).
/// `allocated`: the transaction allocated the page (its before is only a
/// formatted header).
pub(super) fn check_client_image(
    index: usize,
    id: PageId,
    before: &[u8],
    after: &[u8],
    allocated: bool,
    page_count: u32,
) -> Result<()> {
    let after_type = page::page_type(after);
    let Some(ak) = after_type.filter(|k| k.is_client_kind()) else {
        return Err(refuse(
            index,
            id,
            format!("the change makes it a page of kind {after_type:?}, which a client may not make"),
        ));
    };
    if page::page_id(after) != id {
        return Err(refuse(
            index,
            id,
            format!("the image claims to be page {}", page::page_id(after)),
        ));
    }
    let bk = page::page_type(before);
    if bk != Some(ak) && !kind_change_allowed(bk, ak, before, after, allocated) {
        return Err(refuse(
            index,
            id,
            format!(
                "the change turns a {} page into a {} page; a page's kind changes only through ALLOCATE and FREE",
                bk.map_or("unknown", PageType::name),
                ak.name()
            ),
        ));
    }
    let malformed = |e: Error| refuse(index, id, format!("the changed page is malformed: {}", reason(&e)));
    match ak {
        PageType::Slotted => {
            slotted::check(after).map_err(malformed)?;
            check_records(after).map_err(|why| refuse(index, id, why))
        }
        PageType::BTreeLeaf | PageType::BTreeInner => {
            let a = btree::page_links(after).map_err(malformed)?;
            if allocated {
                return Ok(());
            }
            let b = btree::page_links(before).map_err(|e| committed_damaged(index, id, &e))?;
            let kept = a.root == b.root && (!a.root || (a.unique == b.unique && a.group == b.group));
            if !kept || (!a.root && a.level != b.level) {
                return Err(refuse(
                    index,
                    id,
                    "the change moves the b-tree page to another place (root flag, unique flag, group or level)".into(),
                ));
            }
            Ok(())
        }
        PageType::LargeIndex | PageType::LargeData => {
            let a = large::page_links(after, page_count).map_err(malformed)?;
            if allocated {
                return Ok(());
            }
            let b = large::page_links(before, page_count).map_err(|e| committed_damaged(index, id, &e))?;
            if (a.owner, a.level, a.first) != (b.owner, b.level, b.first) {
                return Err(refuse(
                    index,
                    id,
                    format!(
                        "the change moves the large-object page from (owner {:#x}, level {}, first {}) to (owner {:#x}, level {}, first {})",
                        b.owner, b.level, b.first, a.owner, a.level, a.first
                    ),
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A B+-tree root turns between leaf and inner node in place; a page the
/// transaction allocated (a formatted header, no contents yet) may become
/// either B+-tree kind.
/// Every record of a slotted page is one of the kinds the object layer
/// writes, shaped as that kind is (what `cairn check` holds a slotted page
/// to): a padded small object is one forwarding stub's size with its
/// padding count inside it; a forwarding stub is exactly an OID; a moved
/// body starts with its home's OID (a moved large one's descriptor follows
/// it, checked with the links). The error names the slot.
fn check_records(img: &[u8]) -> std::result::Result<(), String> {
    for s in slotted::iter(img) {
        let (slot, r) = s.map_err(|e| reason(&e))?;
        let bad = |what: &str| Err(format!("slot {} {what}", slot.0));
        let shaped = match r.kind {
            KIND_SMALL | KIND_LARGE => true,
            KIND_SMALL_PADDED => r.data.len() == FORWARD_SIZE && (r.data[FORWARD_SIZE - 1] as usize) < FORWARD_SIZE,
            KIND_FORWARD => r.data.len() == FORWARD_SIZE && Oid::from_slice(r.data).is_some(),
            KIND_MOVED_SMALL | KIND_MOVED_LARGE => Oid::from_slice(r.data).is_some(),
            other => return bad(&format!("has unknown kind {other}")),
        };
        if !shaped {
            return bad(&format!("holds a malformed record of kind {}", r.kind));
        }
    }
    Ok(())
}

fn kind_change_allowed(bk: Option<PageType>, ak: PageType, before: &[u8], after: &[u8], allocated: bool) -> bool {
    let is_btree = |k: Option<PageType>| matches!(k, Some(PageType::BTreeLeaf | PageType::BTreeInner));
    if !is_btree(bk) || !is_btree(Some(ak)) {
        return false;
    }
    if allocated {
        return true;
    }
    let root = |img: &[u8]| btree::page_links(img).is_ok_and(|l| l.root);
    root(before) && root(after)
}

/// The reason of a storage error, without the page prefix it may carry.
fn reason(e: &Error) -> String {
    match e {
        Error::Corrupt { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// The committed image of a page a client changed does not parse: damage
/// on the server's side, reported as such (never blamed on the client).
fn committed_damaged(index: usize, id: PageId, e: &Error) -> Error {
    Error::corrupt(
        id,
        format!(
            "client record {index} changes the page, whose committed image is damaged: {}",
            reason(e)
        ),
    )
}

/// The child links of page image `img` (see the module docs); a page kind
/// without links has none. `Err` for an image that does not parse.
fn child_links(img: &[u8], id: PageId, page_count: u32) -> Result<Links> {
    match page::page_type(img) {
        Some(PageType::BTreeInner) => {
            let l = btree::page_links(img)?;
            let level = l.level - 1;
            Ok(l.children.into_iter().map(|c| (c, Place::BTree { level })).collect())
        }
        Some(PageType::LargeIndex) => {
            let l = large::page_links(img, page_count)?;
            let span = large_span(img.len(), l.level - 1);
            Ok(l.children
                .into_iter()
                .enumerate()
                .map(|(slot, c)| {
                    let first = u64::from(l.first).saturating_add(span.saturating_mul(slot as u64));
                    (
                        c,
                        Place::Large {
                            owner: l.owner,
                            level: l.level - 1,
                            first,
                        },
                    )
                })
                .collect())
        }
        Some(PageType::Slotted) => descriptor_links(img, id, page_count),
        _ => Ok(Vec::new()),
    }
}

/// Data pages under one large-object page at `level` (the fanout to the
/// `level`th power, saturating).
fn large_span(page_size: usize, level: u8) -> u64 {
    (large::index_fanout(page_size) as u64).saturating_pow(u32::from(level))
}

/// The roots the large-object descriptors of a slotted page name, each
/// checked against the volume.
fn descriptor_links(img: &[u8], id: PageId, page_count: u32) -> Result<Links> {
    let mut out = Vec::new();
    for slot in slotted::iter(img) {
        let (_, s) = slot?;
        let bytes = match s.kind {
            KIND_LARGE => s.data,
            KIND_MOVED_LARGE if s.data.len() >= FORWARD_SIZE => &s.data[FORWARD_SIZE..],
            KIND_MOVED_LARGE => return Err(Error::corrupt(id, "a moved large-object body is too short")),
            _ => continue,
        };
        let d = LargeDescriptor::decode(bytes, id)?;
        if d.len == 0 {
            continue;
        }
        large::check_fits(&d, img.len(), page_count, id)?;
        if d.root.0 >= page_count {
            return Err(Error::corrupt(
                id,
                format!("a large-object descriptor names page {}", d.root),
            ));
        }
        out.push((
            d.root,
            Place::Large {
                owner: d.owner,
                level: d.depth,
                first: 0,
            },
        ));
    }
    Ok(out)
}

/// Checks that image `img` of page `c` is at `place`.
fn check_place(img: &[u8], place: Place, page_count: u32) -> std::result::Result<(), String> {
    match place {
        Place::BTree { level } => {
            let l = btree::page_links(img).map_err(|e| format!("which is not a b-tree page: {}", reason(&e)))?;
            if l.root || l.level != level {
                return Err(format!(
                    "which is a b-tree {} at level {}, expected a non-root node at level {level}",
                    if l.root { "root" } else { "node" },
                    l.level
                ));
            }
        }
        Place::Large { owner, level, first } => {
            let l = large::page_links(img, page_count)
                .map_err(|e| format!("which is not a large-object page: {}", reason(&e)))?;
            if (l.owner, l.level, u64::from(l.first)) != (owner, level, first) {
                return Err(format!(
                    "which is at (owner {:#x}, level {}, first {}), expected (owner {owner:#x}, level {level}, first {first})",
                    l.owner, l.level, l.first
                ));
            }
        }
    }
    Ok(())
}

impl Txn {
    /// Checks the links between the pages client records changed (see the
    /// module docs), before the commit is logged. Nothing to do for a
    /// transaction that is not a client's ([`Txn::set_client_checked`]),
    /// or that changed and freed nothing.
    pub(super) fn check_client_links(&mut self) -> Result<()> {
        self.make_commit_checks()?;
        if !self.client_checked
            || (self.client_pages.is_empty() && self.to_free.is_empty() && self.allocated.is_empty())
        {
            return Ok(());
        }
        let page_count = self.page_count();
        // The server's own pages (a catalog request's) are not the client's
        // to link to: they count as neither allocated nor changed by it.
        let allocated: HashSet<PageId> = self
            .allocated
            .iter()
            .copied()
            .filter(|p| !self.server_pages.contains(p))
            .collect();
        let changed: Vec<PageId> = self.client_pages.iter().copied().collect();
        // Every link a changed or freed page had before: who linked where.
        let mut before_links: HashMap<PageId, PageId> = HashMap::new();
        let mut own_before: HashMap<PageId, HashSet<(PageId, Place)>> = HashMap::new();
        let freed: Vec<PageId> = self.to_free.iter().copied().collect();
        for &p in changed.iter().chain(freed.iter()) {
            if allocated.contains(&p) || own_before.contains_key(&p) {
                continue;
            }
            let img = self.committed_image(p)?;
            let links = child_links(&img, p, page_count).unwrap_or_default();
            for &(c, _) in &links {
                before_links.insert(c, p);
            }
            own_before.insert(p, links.into_iter().collect());
        }
        self.check_frees_let_go(&before_links)?;
        let mut parent_after: HashMap<PageId, PageId> = HashMap::new();
        for &p in &changed {
            if self.to_free.contains(&p) {
                continue;
            }
            let img = self.current_image(p)?;
            let links = child_links(&img, p, page_count)
                .map_err(|e| link_refusal(p, format!("its links do not parse: {}", reason(&e))))?;
            for (c, place) in links {
                if let Some(other) = parent_after.insert(c, p) {
                    return Err(link_refusal(
                        p,
                        format!("it links to page {c}, which page {other} links to too"),
                    ));
                }
                if own_before.get(&p).is_some_and(|b| b.contains(&(c, place))) {
                    continue;
                }
                self.check_gained_link(p, c, place, &allocated, &before_links, page_count)?;
            }
            if page::page_type(&img) == Some(PageType::BTreeLeaf) {
                self.check_siblings(p, &img)?;
            }
        }
        // A page the transaction allocated and keeps must be linked from
        // somewhere, or it leaks: a large-object page or a B+-tree node
        // below a root from a page it changed (a slotted page, a B+-tree
        // root, hold objects or are named by the catalog).
        let kept: Vec<PageId> = allocated
            .iter()
            .copied()
            .filter(|p| !self.to_free.contains(p))
            .collect();
        for p in kept {
            if parent_after.contains_key(&p) {
                continue;
            }
            let img = self.current_image(p)?;
            let dangling = match page::page_type(&img) {
                Some(PageType::LargeIndex | PageType::LargeData) => true,
                Some(PageType::BTreeLeaf | PageType::BTreeInner) => !btree::page_links(&img).is_ok_and(|l| l.root),
                _ => false,
            };
            if dangling {
                return Err(link_refusal(
                    p,
                    "the transaction allocated it and no page links to it: it would leak".into(),
                ));
            }
        }
        for (c, p) in before_links {
            if !parent_after.contains_key(&c) && !self.to_free.contains(&c) {
                return Err(link_refusal(
                    p,
                    format!("page {c} was linked from it and is now linked from no page nor freed: the commit would lose it"),
                ));
            }
        }
        Ok(())
    }

    /// Every page the transaction frees is let go of: a slotted page holds
    /// no object any more; a B+-tree page below a root, or a large-object
    /// page, was linked from a page this transaction changed or freed (its
    /// parent — whose new image must no longer link to it, see
    /// [`Txn::check_client_links`]); a B+-tree root only by an
    /// unrestricted transaction, or one whose catalog change let go of it
    /// ([`Txn::release_root`]: an index dropped). A FREE of a page
    /// still in use — another client's objects, a leaf under an unchanged
    /// parent — would lose data or leave a dangling link.
    /// `before_links`: every page a changed or freed page linked to before,
    /// with that parent ([`Txn::check_client_links`] reads them once).
    fn check_frees_let_go(&mut self, before_links: &HashMap<PageId, PageId>) -> Result<()> {
        let freed: Vec<PageId> = self.to_free.iter().copied().collect();
        let may_drop_roots = self.may_change_schema();
        for p in freed {
            if self.allocated.contains(&p) {
                continue;
            }
            let img = self.current_image(p)?;
            let refuse =
                |why: String| Error::InvalidArgument(format!("the client's FREE of page {p} is refused: {why}"));
            let kind = page::page_type(&img);
            let tree_or_large = matches!(
                kind,
                Some(PageType::BTreeLeaf | PageType::BTreeInner | PageType::LargeIndex | PageType::LargeData)
            );
            let root = matches!(kind, Some(PageType::BTreeLeaf | PageType::BTreeInner))
                && btree::page_links(&img).is_ok_and(|l| l.root);
            if kind == Some(PageType::Slotted) {
                let live = slotted::live_count(&img).unwrap_or(usize::MAX);
                if live > 0 {
                    return Err(refuse(format!("it still holds {live} objects")));
                }
            } else if root && !may_drop_roots && !self.released_roots.contains(&p) {
                return Err(refuse(
                    "it is a B+-tree root no catalog change of the transaction let go of (only an admin's CATALOG \
                     request drops an index)"
                        .into(),
                ));
            } else if tree_or_large && !root && !before_links.contains_key(&p) {
                return Err(refuse(
                    "nothing the transaction changed or freed linked to it: its parent still does".into(),
                ));
            }
        }
        Ok(())
    }

    /// A link page `p` gains to `c` at `place`: a page the transaction
    /// allocated or one a changed page linked to before, not freed, and at
    /// that place.
    fn check_gained_link(
        &mut self,
        p: PageId,
        c: PageId,
        place: Place,
        allocated: &HashSet<PageId>,
        before_links: &HashMap<PageId, PageId>,
        page_count: u32,
    ) -> Result<()> {
        if c.0 >= page_count || c == p {
            return Err(link_refusal(p, format!("it links to page {c}")));
        }
        if self.to_free.contains(&c) {
            return Err(link_refusal(
                p,
                format!("it links to page {c}, which the transaction frees"),
            ));
        }
        if !allocated.contains(&c) && !before_links.contains_key(&c) {
            return Err(link_refusal(
                p,
                format!(
                    "it gains a link to page {c}, which the transaction neither allocated nor took from a page it changed"
                ),
            ));
        }
        let img = self.current_image(c)?;
        check_place(&img, place, page_count).map_err(|why| link_refusal(p, format!("it links to page {c}, {why}")))
    }

    /// A changed leaf's sibling links name leaves that link back to it.
    fn check_siblings(&mut self, p: PageId, img: &[u8]) -> Result<()> {
        let l = btree::page_links(img)?;
        if l.root && (l.prev != PageId(0) || l.next != PageId(0)) {
            return Err(link_refusal(p, "a root leaf has siblings".into()));
        }
        for (s, left) in [(l.prev, true), (l.next, false)] {
            if s == PageId(0) {
                continue;
            }
            if s.0 >= self.page_count() || s == p {
                return Err(link_refusal(p, format!("its sibling link names page {s}")));
            }
            let simg = self.current_image(s)?;
            let back = btree::page_links(&simg)
                .ok()
                .filter(|sl| sl.level == 0 && !sl.root)
                .map(|sl| if left { sl.next } else { sl.prev });
            if back != Some(p) {
                return Err(link_refusal(
                    p,
                    format!(
                        "its {} sibling, page {s}, is not a leaf linking back to it",
                        if left { "left" } else { "right" }
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The error refusing a commit whose changed page `p` links wrongly.
fn link_refusal(p: PageId, why: String) -> Error {
    Error::InvalidArgument(format!("the client's change of page {p} is refused: {why}"))
}
