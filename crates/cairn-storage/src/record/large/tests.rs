//! Unit tests of large objects over `MemPages`.

use proptest::prelude::*;

use super::checked::child_offset;
use super::*;
use crate::access::testing::MemPages;
use crate::page;

const G: GroupId = GroupId::DEFAULT;
const PS: usize = 4096;

/// A byte that depends on its position, so misplaced bytes show.
fn byte_at(seed: u64, pos: u64) -> u8 {
    let x = (pos ^ seed.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ pos as u8
}

fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|k| byte_at(seed, offset + k)).collect()
}

fn read_all<A: PageAccess>(a: &mut A, d: &LargeDescriptor) -> Vec<u8> {
    let mut buf = vec![0u8; d.len as usize];
    read(a, d, 0, &mut buf).unwrap();
    buf
}

fn geometry(page_size: usize) -> Geometry {
    Geometry::new(page_size).unwrap()
}

/// Pages (data and index) of a tree over `len` bytes.
fn tree_page_count(page_size: usize, len: u64) -> usize {
    let g = geometry(page_size);
    let n = g.pages_for(len);
    let mut total = n;
    for level in 1..=g.depth_for(n) {
        total += n.div_ceil(g.span(level));
    }
    total as usize
}

/// Checks `d` against the model; the store must hold only this object.
fn assert_matches(a: &mut MemPages, d: &LargeDescriptor, model: &[u8]) {
    assert_eq!(d.len, model.len() as u64);
    check(a, d).unwrap();
    assert!(read_all(a, d) == model, "content differs from the model");
    let all = pages(a, d).unwrap();
    assert_eq!(all.len(), tree_page_count(a.page_size, d.len));
    assert_eq!(a.pages.len(), all.len(), "pages leaked or lost");
    let g = geometry(a.page_size);
    assert_eq!(d.depth, g.depth_for(g.pages_for(d.len)));
    assert_eq!(LargeDescriptor::decode(&d.encode(), PageId(77)).unwrap(), *d);
}

fn poke(a: &mut MemPages, id: PageId, off: usize, bytes: &[u8]) {
    a.pages.get_mut(&id).unwrap()[off..off + bytes.len()].copy_from_slice(bytes);
}

fn index_pages(a: &mut MemPages, d: &LargeDescriptor) -> Vec<PageId> {
    let all = pages(a, d).unwrap();
    all.into_iter()
        .filter(|id| page::page_type(&a.pages[id]) == Some(PageType::LargeIndex))
        .collect()
}

fn child(a: &MemPages, id: PageId, slot: u64) -> PageId {
    PageId(get_u32(&a.pages[&id], child_offset(slot)))
}

fn corrupt_page(r: Result<impl fmt::Debug>) -> PageId {
    match r {
        Err(Error::Corrupt { page, .. }) => page,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// A `PageAccess` that records allocation hints and can run out of space.
struct Recorder {
    inner: MemPages,
    allocs: Vec<(PageId, Option<PageId>, PageType)>,
    allocs_max: usize,
}

impl PageAccess for Recorder {
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }
    fn read<R>(&mut self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.inner.read(id, f)
    }
    fn modify<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        self.inner.modify(id, f)
    }
    fn allocate(&mut self, group: GroupId, near: Option<PageId>, ty: PageType) -> Result<PageId> {
        if self.allocs.len() >= self.allocs_max {
            return Err(Error::VolumeFull("test limit".to_string()));
        }
        let id = self.inner.allocate(group, near, ty)?;
        self.allocs.push((id, near, ty));
        Ok(id)
    }
    fn free(&mut self, id: PageId) -> Result<()> {
        self.inner.free(id)
    }
}

#[test]
fn layout_constants_match_the_docs() {
    assert_eq!(data_payload_size(4096), 4056);
    assert_eq!(index_fanout(4096), 1014);
    let g = geometry(4096);
    assert_eq!(g.len_max(), LARGE_OBJECT_LEN_MAX);
    assert_eq!(g.depth_for(g.pages_for(LARGE_OBJECT_LEN_MAX)), 3);
    assert_eq!(geometry(65536).len_max(), LARGE_OBJECT_LEN_MAX);
    assert!(Geometry::new(47).is_err());
    assert!(Geometry::new(131072).is_err());
}

#[test]
fn descriptor_round_trips_and_rejects_nonsense() {
    let d = LargeDescriptor {
        len: 123_456,
        root: PageId(42),
        depth: 1,
        owner: 0x0000_0007_0000_0001,
    };
    let bytes = d.encode();
    assert_eq!(bytes.len(), LargeDescriptor::ENCODED_SIZE);
    assert_eq!(LargeDescriptor::decode(&bytes, PageId(9)).unwrap(), d);
    let e = LargeDescriptor::EMPTY;
    assert_eq!(LargeDescriptor::decode(&e.encode(), PageId(9)).unwrap(), e);

    let mut bad = Vec::new();
    bad.push(bytes[..23].to_vec()); // short
    let mut long = bytes.to_vec();
    long.push(0);
    bad.push(long); // trailing byte
    let mut b = bytes;
    b[13] = 2; // format
    bad.push(b.to_vec());
    let mut b = bytes;
    b[15] = 1; // reserved
    bad.push(b.to_vec());
    let mut b = bytes;
    b[0..8].copy_from_slice(&(LARGE_OBJECT_LEN_MAX + 1).to_le_bytes());
    bad.push(b.to_vec());
    let mut b = bytes;
    b[12] = LARGE_DEPTH_MAX + 1;
    bad.push(b.to_vec());
    let mut b = bytes;
    b[8..12].fill(0); // no root for a non-empty object
    bad.push(b.to_vec());
    let mut b = bytes;
    b[16..24].fill(0); // no owner for a non-empty object
    bad.push(b.to_vec());
    let mut b = e.encode();
    b[8] = 5; // a root for an empty object
    bad.push(b.to_vec());
    for bytes in bad {
        let err = LargeDescriptor::decode(&bytes, PageId(9)).unwrap_err();
        assert!(matches!(err, Error::Corrupt { page: PageId(9), .. }), "{err}");
    }
}

#[test]
fn large_descriptor_length_is_checked_against_the_volume() {
    let g = geometry(PS);
    let len = LARGE_OBJECT_LEN_MAX;
    let d = LargeDescriptor {
        len,
        root: PageId(5),
        depth: g.depth_for(g.pages_for(len)),
        owner: 1,
    };
    // A consistent descriptor for 1 TiB cannot fit a volume of 100 pages.
    let err = check_fits(&d, PS, 100, PageId(9)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { page: PageId(9), .. }), "{err}");
    assert!(err.to_string().contains("data pages"), "{err}");
    check_fits(&d, PS, u32::MAX, PageId(9)).unwrap();
    // A depth that does not go with the length names the descriptor's page.
    let wrong_depth = LargeDescriptor { depth: 1, ..d };
    let err = check_fits(&wrong_depth, PS, u32::MAX, PageId(9)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { page: PageId(9), .. }), "{err}");
    check_fits(&LargeDescriptor::EMPTY, PS, 1, PageId(9)).unwrap();
}

#[test]
fn round_trips_at_page_and_index_boundaries() {
    for page_size in [PS, 128] {
        let g = geometry(page_size);
        let p = g.payload;
        let f = g.fanout;
        let sizes = [
            (0, 0),
            (1, 0),
            (p - 1, 0),
            (p, 0),
            (p + 1, 1),
            (2 * p, 1),
            (f * p, 1),         // exactly fills one index page
            (f * p + 1, 2),     // one more byte: depth 2
            (f * f * p, 2),     // fills depth 2
            (f * f * p + 1, 3), // depth 3
        ];
        for (len, depth) in sizes {
            if page_size == PS && len > 8 << 20 {
                continue; // depth >= 2 on 4 KiB pages is checked with 128-byte pages
            }
            let mut a = MemPages::new(page_size);
            let data = pattern(len, 0, len as usize);
            let d = create(&mut a, G, None, &data).unwrap();
            assert_eq!(d.depth, depth, "page size {page_size}, len {len}");
            assert_matches(&mut a, &d, &data);
            // Ranges that straddle every page boundary near the middle and the end.
            for start in [len / 2, len.saturating_sub(p + 3)] {
                let end = min(len, start + 2 * p + 5);
                let mut buf = vec![0u8; (end - start) as usize];
                read(&mut a, &d, start, &mut buf).unwrap();
                assert!(buf == data[start as usize..end as usize]);
            }
            destroy(&mut a, d).unwrap();
            assert!(a.pages.is_empty());
        }
    }
}

/// `edge_pages` names the object's first data page, and its last unless
/// full (in which appended bytes do not land), at every depth: against
/// the data pages in order as the whole walk finds them.
#[test]
fn edge_pages_are_the_first_data_page_and_the_last_unless_full() {
    let page_size = 128;
    let g = geometry(page_size);
    let (p, f) = (g.payload, g.fanout);
    for len in [0, 1, p - 1, p, p + 1, 3 * p, 3 * p + 5, f * p, f * p + 1, f * f * p + 7] {
        let mut a = MemPages::new(page_size);
        let d = create(&mut a, G, None, &pattern(len, 0, len as usize)).unwrap();
        let data: Vec<PageId> = pages(&mut a, &d)
            .unwrap()
            .into_iter()
            .filter(|id| page::page_type(&a.pages[id]) == Some(PageType::LargeData))
            .collect();
        let mut want: Vec<PageId> = data.first().copied().into_iter().collect();
        if data.len() > 1 && len % p != 0 {
            want.push(*data.last().unwrap());
        }
        assert_eq!(edge_pages(&mut a, &d).unwrap(), want, "len {len}, depth {}", d.depth);
    }
}

#[test]
fn ranges_past_the_end_are_invalid_arguments() {
    let mut a = MemPages::new(PS);
    let data = pattern(1, 0, 10_000);
    let mut d = create(&mut a, G, None, &data).unwrap();
    let mut buf = [0u8; 10];
    read(&mut a, &d, 9_990, &mut buf).unwrap();
    read(&mut a, &d, 10_000, &mut []).unwrap();
    let err = read(&mut a, &d, 9_991, &mut buf).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("offset 9991"), "{err}");
    let err = read(&mut a, &d, u64::MAX, &mut buf).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = write(&mut a, &mut d, G, 10_001, b"x").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = truncate(&mut a, &mut d, 10_001).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_matches(&mut a, &d, &data);
}

#[test]
fn range_writes_overwrite_and_extend() {
    let mut a = MemPages::new(PS);
    let p = data_payload_size(PS);
    let mut model = pattern(2, 0, 5 * p + 100);
    let mut d = create(&mut a, G, None, &model).unwrap();

    let mut apply = |a: &mut MemPages, d: &mut LargeDescriptor, offset: usize, data: &[u8]| {
        write(a, d, G, offset as u64, data).unwrap();
        let end = offset + data.len();
        if end > model.len() {
            model.resize(end, 0);
        }
        model[offset..end].copy_from_slice(data);
        assert_matches(a, d, &model);
    };
    apply(&mut a, &mut d, 10, &pattern(3, 0, 20)); // inside one page
    apply(&mut a, &mut d, 2 * p - 7, &pattern(4, 0, 14)); // across a boundary
    apply(&mut a, &mut d, p, &pattern(5, 0, 3 * p)); // whole pages
    apply(&mut a, &mut d, 5 * p, &pattern(6, 0, 2 * p)); // past the end
    let len = d.len as usize;
    apply(&mut a, &mut d, len, &pattern(7, 0, 1)); // at the end
    apply(&mut a, &mut d, 0, &[]); // nothing

    let before = a.modify_count;
    write(&mut a, &mut d, G, 3, &[]).unwrap();
    assert_eq!(a.modify_count, before, "an empty write touches nothing");
}

#[test]
fn append_grows_the_tree_through_three_levels() {
    let page_size = 128;
    let g = geometry(page_size);
    let mut a = MemPages::new(page_size);
    let mut d = create(&mut a, G, None, &[]).unwrap();
    assert_eq!(d, LargeDescriptor::EMPTY);
    assert!(a.pages.is_empty());
    let mut model = Vec::new();
    let target = g.fanout * g.fanout * g.payload + 3 * g.payload;
    let mut step = 1usize;
    while (model.len() as u64) < target {
        let chunk = pattern(8, model.len() as u64, step);
        append(&mut a, &mut d, G, &chunk).unwrap();
        model.extend_from_slice(&chunk);
        assert_matches(&mut a, &d, &model);
        step = step * 3 / 2 + 1;
    }
    assert_eq!(d.depth, 3);
}

#[test]
fn truncate_frees_exactly_the_pages_no_longer_needed() {
    let g = geometry(PS);
    let p = g.payload as usize;
    let f = g.fanout as usize;
    let mut a = MemPages::new(PS);
    let len = f * p + 3 * p + 10; // depth 2
    let mut model = pattern(9, 0, len);
    let mut d = create(&mut a, G, None, &model).unwrap();
    assert_eq!(d.depth, 2);
    // f + 4 data pages, 2 level-1 pages, 1 root.
    assert_eq!(a.pages.len(), f + 4 + 2 + 1);

    for (new_len, pages_left) in [
        (f * p + 2 * p + 5, f + 3 + 2 + 1), // mid-page: one data page freed
        (f * p + p, f + 1 + 2 + 1),         // page boundary
        (f * p, f + 1),                     // depth 2 -> 1
        (5 * p + 1, 6 + 1),
        (p, 1), // depth 1 -> 0
        (17, 1),
        (0, 0),
    ] {
        truncate(&mut a, &mut d, new_len as u64).unwrap();
        model.truncate(new_len);
        assert_eq!(a.pages.len(), pages_left, "after truncating to {new_len}");
        assert_matches(&mut a, &d, &model);
    }
    assert_eq!(d.root, PageId(0));
    // An emptied object grows again, keeping its owner tag.
    let owner = d.owner;
    append(&mut a, &mut d, G, b"again").unwrap();
    assert_eq!(d.owner, owner);
    assert_matches(&mut a, &d, b"again");
}

#[test]
fn destroy_frees_every_page_and_only_those() {
    let page_size = 128;
    let mut a = MemPages::new(page_size);
    let keep_data = pattern(10, 0, 3_000);
    let keep = create(&mut a, G, None, &keep_data).unwrap();
    let kept_pages = a.pages.len();
    let gone = create(&mut a, G, None, &pattern(11, 0, 50_000)).unwrap();
    assert_eq!(gone.depth, 3);
    assert_ne!(keep.owner, gone.owner);
    destroy(&mut a, gone).unwrap();
    assert_eq!(a.pages.len(), kept_pages);
    assert_matches(&mut a, &keep, &keep_data);
    destroy(&mut a, LargeDescriptor::EMPTY).unwrap();
    // A new object on recycled pages gets a new owner tag.
    let again = create(&mut a, G, None, b"x").unwrap();
    assert_ne!(again.owner, gone.owner);
    assert_ne!(again.owner, keep.owner);
}

#[test]
fn data_pages_are_allocated_near_their_predecessor() {
    let mut a = Recorder {
        inner: MemPages::new(128),
        allocs: Vec::new(),
        allocs_max: usize::MAX,
    };
    let mut d = create(&mut a, G, Some(PageId(500)), &pattern(12, 0, 1_000)).unwrap();
    append(&mut a, &mut d, G, &pattern(12, 1_000, 5_000)).unwrap();
    let data_pages: Vec<_> = a
        .allocs
        .iter()
        .filter(|(_, _, ty)| *ty == PageType::LargeData)
        .copied()
        .collect();
    assert_eq!(data_pages[0].1, Some(PageId(500)), "first page near the hint");
    for pair in data_pages.windows(2) {
        assert_eq!(pair[1].1, Some(pair[0].0));
    }
    // The data pages are in object order.
    let in_tree: Vec<_> = pages(&mut a, &d)
        .unwrap()
        .into_iter()
        .filter(|id| a.inner.pages[id][16] == PageType::LargeData as u8)
        .collect();
    let allocated: Vec<_> = data_pages.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(in_tree, allocated);
}

#[test]
fn running_out_of_space_leaves_the_object_as_it_was() {
    for page_size in [128, PS] {
        for allocs_allowed in 0..12 {
            let mut a = Recorder {
                inner: MemPages::new(page_size),
                allocs: Vec::new(),
                allocs_max: usize::MAX,
            };
            let p = data_payload_size(page_size);
            let model = pattern(13, 0, 5 * p + 7);
            let mut d = create(&mut a, G, None, &model).unwrap();
            let before = d;
            a.allocs_max = a.allocs.len() + allocs_allowed;
            // Overwrites the tail and grows past an index-page boundary.
            let err = write(&mut a, &mut d, G, 3 * p as u64, &pattern(14, 0, 40 * p));
            if page_size == 128 {
                let err = err.unwrap_err();
                assert!(matches!(err, Error::VolumeFull(_)), "{err}");
            } else if err.is_ok() {
                continue; // 4 KiB pages need few allocations
            }
            assert_eq!(d, before);
            assert_matches(&mut a.inner, &d, &model);
        }
    }
}

#[test]
fn lengths_past_the_limit_are_refused_before_allocating() {
    let mut a = MemPages::new(PS);
    // A descriptor for an object just under the limit; its pages need not
    // exist, since the limit is checked before any page is touched.
    let mut d = LargeDescriptor {
        len: LARGE_OBJECT_LEN_MAX - 10,
        root: PageId(1),
        depth: 3,
        owner: 1 << 32 | 1,
    };
    let err = append(&mut a, &mut d, G, &[0u8; 11]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                value,
                limit: LARGE_OBJECT_LEN_MAX,
                ..
            } if value == LARGE_OBJECT_LEN_MAX + 1
        ),
        "{err}"
    );
    let err = write(&mut a, &mut d, G, 0, &[0u8; 11]).map(|_| ());
    assert!(err.is_err()); // in range, but the pages do not exist
    assert!(a.pages.is_empty() && a.freed.is_empty() && a.modify_count == 0);
    assert_eq!(d.len, LARGE_OBJECT_LEN_MAX - 10);

    // Tiny pages run out of tree depth first and say so.
    let mut a = MemPages::new(48);
    let limit = geometry(48).len_max();
    assert_eq!(limit, 64 * 8);
    let mut d = create(&mut a, G, None, &pattern(15, 0, limit as usize)).unwrap();
    assert_eq!(d.depth, LARGE_DEPTH_MAX);
    let pages_before = a.pages.len();
    let err = append(&mut a, &mut d, G, b"!").unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { limit: l, .. } if l == limit),
        "{err}"
    );
    assert_eq!(a.pages.len(), pages_before);
    check(&mut a, &d).unwrap();
}

#[test]
fn streams_64_mib_in_1_mib_appends() {
    const MIB: usize = 1 << 20;
    let g = geometry(PS);
    let mut a = MemPages::new(PS);
    let mut d = create(&mut a, G, None, &[]).unwrap();
    let mut chunk = vec![0u8; MIB];
    for k in 0..64u64 {
        let offset = k * MIB as u64;
        for (j, b) in chunk.iter_mut().enumerate() {
            *b = byte_at(16, offset + j as u64);
        }
        let modifies = a.modify_count;
        let pages_before = a.pages.len();
        append(&mut a, &mut d, G, &chunk).unwrap();
        // Only the new pages, the old last page and the index path change.
        let new_pages = (a.pages.len() - pages_before) as u64;
        assert!(
            a.modify_count - modifies <= new_pages + 4,
            "append {k} made {} changes for {new_pages} new pages",
            a.modify_count - modifies
        );
    }
    assert_eq!(d.len, 64 << 20);
    assert_eq!(d.depth, 2);
    assert_eq!(a.pages.len(), tree_page_count(PS, d.len));
    let p = g.payload;
    let mut samples = vec![0, p - 3, MIB as u64 - 5, (g.fanout * p) - 7, d.len - 100];
    let mut x = 0x1234_5678_u64;
    for _ in 0..200 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        samples.push((x >> 16) % (d.len - 9000));
    }
    for start in samples {
        let mut buf = vec![0u8; min(9000, d.len - start) as usize];
        read(&mut a, &d, start, &mut buf).unwrap();
        for (j, &b) in buf.iter().enumerate() {
            assert_eq!(b, byte_at(16, start + j as u64), "byte {}", start + j as u64);
        }
    }
    check(&mut a, &d).unwrap();
    destroy(&mut a, d).unwrap();
    assert!(a.pages.is_empty());
}

// -- Damage ----------------------------------------------------------

/// A 4 KiB depth-1 object of three data pages.
fn three_pages() -> (MemPages, LargeDescriptor, Vec<u8>) {
    let mut a = MemPages::new(PS);
    let data = pattern(17, 0, 2 * data_payload_size(PS) + 50);
    let d = create(&mut a, G, None, &data).unwrap();
    assert_eq!(d.depth, 1);
    (a, d, data)
}

#[test]
fn damaged_child_count_is_corrupt() {
    for count in [2u16, 4, 0, u16::MAX] {
        let (mut a, mut d, _) = three_pages();
        poke(&mut a, d.root, OFF_COUNT, &count.to_le_bytes());
        assert_eq!(corrupt_page(check(&mut a, &d)), d.root);
        let mut buf = [0u8; 4];
        assert_eq!(corrupt_page(read(&mut a, &d, 0, &mut buf)), d.root);
        assert_eq!(corrupt_page(append(&mut a, &mut d, G, b"more")), d.root);
        assert_eq!(corrupt_page(truncate(&mut a, &mut d, 1)), d.root);
        assert_eq!(corrupt_page(pages(&mut a, &d)), d.root);
    }
}

#[test]
fn damaged_child_id_is_corrupt() {
    let (base, d, data) = three_pages();
    let first = child(&base, d.root, 0);
    // Another object in the same store.
    let mut with_other = MemPages::new(PS);
    with_other.pages = base.pages.clone();
    with_other.next = base.next;
    let other = create(&mut with_other, G, None, &data).unwrap();
    let foreign = child(&with_other, other.root, 1);

    for (bad, named) in [
        (PageId(0), d.root),          // empty slot
        (first, d.root),              // the same page twice
        (d.root, d.root),             // a cycle
        (foreign, d.root),            // a page of another object
        (PageId(9999), PageId(9999)), // not a page at all
    ] {
        let mut a = MemPages::new(PS);
        a.pages = with_other.pages.clone();
        a.next = with_other.next;
        poke(&mut a, d.root, child_offset(1), &bad.0.to_le_bytes());
        let err = check(&mut a, &d).unwrap_err();
        assert_eq!(err.page(), Some(named), "{err}");
        let mut buf = vec![0u8; 100];
        let err = read(&mut a, &d, data_payload_size(PS) as u64, &mut buf).unwrap_err();
        assert_eq!(err.page(), Some(named), "{err}");
        // Nothing of the other object is freed or changed by a truncate.
        let mut d2 = d;
        assert!(truncate(&mut a, &mut d2, 0).is_err());
        assert_eq!(d2, d);
        check(&mut a, &other).unwrap();
        assert_eq!(read_all(&mut a, &other), data);
    }

    // A non-zero unused slot.
    let mut a = MemPages::new(PS);
    a.pages = base.pages.clone();
    poke(&mut a, d.root, child_offset(3), &first.0.to_le_bytes());
    assert_eq!(corrupt_page(check(&mut a, &d)), d.root);
}

#[test]
fn damaged_level_is_corrupt() {
    let page_size = 128;
    let mut a = MemPages::new(page_size);
    let data = pattern(18, 0, 50_000);
    let d = create(&mut a, G, None, &data).unwrap();
    assert_eq!(d.depth, 3);
    let index = index_pages(&mut a, &d);
    let below_root = child(&a, d.root, 1);
    assert!(index.contains(&below_root));
    for (page, level, named) in [
        (d.root, 2u8, d.root),
        (d.root, 0, d.root),
        (below_root, 1, d.root),
        (below_root, 3, d.root),
        (below_root, 200, d.root),
    ] {
        let mut b = MemPages::new(page_size);
        b.pages = a.pages.clone();
        poke(&mut b, page, OFF_LEVEL, &[level]);
        assert_eq!(corrupt_page(check(&mut b, &d)), named);
        let mut buf = vec![0u8; data.len()];
        assert_eq!(corrupt_page(read(&mut b, &d, 0, &mut buf)), named);
    }
    // A level-1 page whose data page claims to be an index page.
    let level1 = child(&a, below_root, 0);
    let data_page = child(&a, level1, 4);
    let mut b = MemPages::new(page_size);
    b.pages = a.pages.clone();
    poke(&mut b, data_page, 16, &[PageType::LargeIndex as u8]);
    assert_eq!(corrupt_page(check(&mut b, &d)), level1);
}

#[test]
fn damaged_descriptor_is_corrupt_or_caught_by_check() {
    let (mut a, d, data) = three_pages();
    let bytes = d.encode();
    let home = PageId(555);
    for pos in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xFF] {
            let mut b = bytes;
            b[pos] ^= flip;
            let Ok(d2) = LargeDescriptor::decode(&b, home) else {
                continue;
            };
            // Whatever decodes must be handled without a panic; damage
            // to the root, depth and owner is always caught.
            let checked = check(&mut a, &d2);
            let mut buf = vec![0u8; min(d2.len, 1 << 20) as usize];
            let _ = read(&mut a, &d2, 0, &mut buf);
            if (8..13).contains(&pos) || pos >= 16 {
                assert!(
                    matches!(checked, Err(Error::Corrupt { .. })),
                    "byte {pos} ^ {flip:#x}: {checked:?}"
                );
            }
        }
    }
    assert_matches(&mut a, &d, &data);
    // A length the tree does not match.
    let wrong = LargeDescriptor {
        len: d.len + 3 * data_payload_size(PS) as u64,
        ..d
    };
    assert!(matches!(check(&mut a, &wrong), Err(Error::Corrupt { .. })));
    let wrong = LargeDescriptor { depth: 2, ..d };
    assert!(matches!(check(&mut a, &wrong), Err(Error::Corrupt { .. })));
}

// -- Model tests -----------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Write { at: u64, len: usize, seed: u64 },
    Append { len: usize, seed: u64 },
    Truncate { at: u64 },
    Read { at: u64, len: usize },
}

fn ops(chunk_max: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        (any::<u64>(), 0..chunk_max, any::<u64>()).prop_map(|(at, len, seed)| Op::Write { at, len, seed }),
        (0..chunk_max, any::<u64>()).prop_map(|(len, seed)| Op::Append { len, seed }),
        any::<u64>().prop_map(|at| Op::Truncate { at }),
        (any::<u64>(), 0..chunk_max).prop_map(|(at, len)| Op::Read { at, len }),
    ];
    prop::collection::vec(op, 1..30)
}

fn run_model(page_size: usize, len_cap: usize, ops: &[Op]) {
    let mut a = MemPages::new(page_size);
    let mut d = create(&mut a, G, None, &[]).unwrap();
    let mut model: Vec<u8> = Vec::new();
    for op in ops {
        match *op {
            Op::Write { at, len, seed } => {
                let offset = (at % (model.len() as u64 + 1)) as usize;
                let len = min(len, len_cap - offset.min(len_cap));
                let data = pattern(seed, offset as u64, len);
                write(&mut a, &mut d, G, offset as u64, &data).unwrap();
                let end = offset + len;
                if end > model.len() {
                    model.resize(end, 0);
                }
                model[offset..end].copy_from_slice(&data);
            }
            Op::Append { len, seed } => {
                let len = min(len, len_cap.saturating_sub(model.len()));
                let data = pattern(seed, model.len() as u64, len);
                append(&mut a, &mut d, G, &data).unwrap();
                model.extend_from_slice(&data);
            }
            Op::Truncate { at } => {
                let new_len = (at % (model.len() as u64 + 1)) as usize;
                truncate(&mut a, &mut d, new_len as u64).unwrap();
                model.truncate(new_len);
            }
            Op::Read { at, len } => {
                let offset = (at % (model.len() as u64 + 1)) as usize;
                let len = min(len, model.len() - offset);
                let mut buf = vec![0u8; len];
                read(&mut a, &d, offset as u64, &mut buf).unwrap();
                assert!(buf == model[offset..offset + len]);
            }
        }
        assert_matches(&mut a, &d, &model);
    }
    destroy(&mut a, d).unwrap();
    assert!(a.pages.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn behaves_like_a_vec_on_4k_pages(ops in ops(40_000)) {
        run_model(PS, 300 << 10, &ops);
    }

    #[test]
    fn behaves_like_a_vec_on_tiny_pages(
        page_size in prop_oneof![Just(64usize), Just(128)],
        ops in ops(6_000),
    ) {
        run_model(page_size, 40_000, &ops);
    }

    #[test]
    fn random_damage_never_panics(
        len in 0usize..20_000,
        damage in prop::collection::vec((any::<prop::sample::Index>(), 16usize..64, any::<u8>()), 1..4),
    ) {
        let page_size = 128;
        let mut a = MemPages::new(page_size);
        let mut d = create(&mut a, G, None, &pattern(19, 0, len)).unwrap();
        let all = pages(&mut a, &d).unwrap();
        if !all.is_empty() {
            for (which, off, value) in damage {
                let id = *which.get(&all);
                a.pages.get_mut(&id).unwrap()[off] = value;
            }
        }
        let _ = check(&mut a, &d);
        let _ = pages(&mut a, &d);
        let mut buf = vec![0u8; len];
        let _ = read(&mut a, &d, 0, &mut buf);
        let _ = write(&mut a, &mut d, G, len as u64 / 2, &[7u8; 300]);
        let _ = append(&mut a, &mut d, G, &[8u8; 1000]);
        let third = d.len / 3;
        let _ = truncate(&mut a, &mut d, third);
        let _ = destroy(&mut a, d);
    }
}
