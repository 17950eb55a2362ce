//! Unit tests of the volume: create and reopen, extents and their lists, the
//! group directory, growth past a space-map interval, refusing a non-volume.

use super::*;

fn opts() -> VolumeOptions {
    VolumeOptions {
        buffer_frames: 16,
        ..VolumeOptions::default()
    }
}

#[test]
fn create_allocate_reopen_keeps_groups_and_extents() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut v = Volume::create(&db, &opts()).unwrap();
    let g = v.create_group("parts").unwrap();
    let mut pages = Vec::new();
    for _ in 0..20 {
        pages.push(v.allocate(g, None, PageType::Slotted).unwrap());
    }
    let d = v.allocate(GroupId::DEFAULT, None, PageType::Slotted).unwrap();
    v.check_invariants();
    v.free(pages[3]).unwrap();
    assert!(v.free(pages[3]).is_err(), "double free is refused");
    let again = v.allocate(g, Some(pages[4]), PageType::Slotted).unwrap();
    assert_eq!(again, pages[3], "a page freed near the target is reused");
    let info = v.groups();
    v.close().unwrap();

    let mut v = Volume::open(&db, &opts()).unwrap();
    v.check_invariants();
    assert_eq!(v.groups(), info);
    assert_eq!(v.group_id("parts"), Some(g));
    assert_eq!(v.group_of_page(d), Some(GroupId::DEFAULT));
    assert_eq!(
        v.group_pages(g).unwrap().len(),
        20 + 1,
        "20 pages + the extent-list page"
    );
    v.read(pages[0], |b| assert_eq!(page::page_type(b), Some(PageType::Slotted)))
        .unwrap();
}

/// Regression: with one-page extents, a group's first extent is all
/// extent-list page; the allocation took the page past it (outside the
/// extent) and failed with a misleading "corrupt", poisoning a logged
/// volume. The same happens to any extent cut to one page before a
/// space-map page when the group needs a new list page.
#[test]
fn a_new_extent_used_up_by_its_list_page_is_followed_by_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let o = VolumeOptions {
        extent_pages: 1,
        ..opts()
    };
    let mut v = Volume::create(&db, &o).unwrap();
    let g = v.create_group("parts").unwrap();
    let mut pages = Vec::new();
    for _ in 0..40 {
        let p = v.allocate(g, None, PageType::Slotted).unwrap();
        assert_eq!(v.group_of_page(p), Some(g));
        pages.push(p);
    }
    v.check_invariants();
    v.close().unwrap();
    let mut v = Volume::open(&db, &o).unwrap();
    v.check_invariants();
    for p in &pages {
        v.read(*p, |b| assert_eq!(page::page_type(b), Some(PageType::Slotted)))
            .unwrap();
    }
}

#[test]
fn many_groups_spill_the_directory_onto_more_pages() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut v = Volume::create(&db, &opts()).unwrap();
    let n = groups::dir_capacity(4096) + 5;
    for i in 0..n {
        v.create_group(&format!("g{i}")).unwrap();
    }
    assert!(matches!(v.create_group("g1"), Err(Error::GroupExists(_))));
    assert!(matches!(
        v.create_group(&"x".repeat(65)),
        Err(Error::LimitExceeded { .. })
    ));
    v.close().unwrap();
    let v = Volume::open(&db, &opts()).unwrap();
    assert_eq!(v.groups().len(), n + 1);
    assert_eq!(v.group_id(&format!("g{}", n - 1)).map(|g| g.0), Some(n as u32));
}

#[test]
fn the_volume_grows_past_a_space_map_interval() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut v = Volume::create(
        &db,
        &VolumeOptions {
            extent_pages: 64,
            ..opts()
        },
    )
    .unwrap();
    let b = spacemap::bits_per_page(4096);
    let mut last = PageId(0);
    while last.0 < b + 200 {
        last = v.allocate(GroupId::DEFAULT, None, PageType::Slotted).unwrap();
        assert!(!spacemap::is_map_page(last, 4096));
    }
    v.check_invariants();
    v.close().unwrap();
    let v = Volume::open(&db, &opts()).unwrap();
    v.check_invariants();
    assert!(v.page_count() > b + 200);
    drop(v);
    // Every page below page_count is a valid page: no gap before the map page.
    let report = crate::check::check_database(&db, &opts());
    assert!(report.is_ok(), "{:?}", &report.problems[..report.problems.len().min(5)]);
}

#[test]
fn opening_something_else_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Volume::open(dir.path(), &opts()).unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err}");
    let err = Volume::open(&dir.path().join("nope"), &opts()).unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err}");
    let db = dir.path().join("db");
    Volume::create(&db, &opts()).unwrap().close().unwrap();
    assert!(matches!(Volume::create(&db, &opts()), Err(Error::AlreadyExists { .. })));
}
