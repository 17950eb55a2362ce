//! A transaction frees only pages it may hold — in use, of an object,
//! large-object or B+-tree kind — and never one of the volume's own pages
//! (header, space map, group directory, extent lists). A FREE of the
//! extent-list page used to be logged, fail at commit and poison the
//! database, and then fail every later open in recovery ("freeing an
//! extent-list page"); a FREE of page 0 poisoned the running engine. Now it
//! is refused before anything is logged, the transaction is doomed, and
//! the database goes on and reopens.

use cairn_storage::access::PageAccess;
use cairn_storage::check::check_database;
use cairn_storage::page::page_type;
use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, PageId};

#[test]
fn freeing_a_system_page_is_refused_and_the_database_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        background: false,
        ..DbOptions::default()
    };
    let db = Db::create(dir.path(), &opts).unwrap();
    let mut t = db.begin().unwrap();
    let kept = t.create(GroupId::DEFAULT, b"kept").unwrap();
    t.commit().unwrap();
    let mut refused = 0;
    for p in 0..db.page_counts().0 {
        let id = PageId(p);
        let mut t = db.begin().unwrap();
        let kind = PageAccess::read(&mut t, id, page_type).ok().flatten();
        let r = PageAccess::free(&mut t, id);
        match kind {
            Some(k) if k.is_client_kind() => {
                r.unwrap();
                t.abort().unwrap();
            }
            _ => {
                let e = r.expect_err("a page of no client kind is not freed");
                assert!(matches!(e, Error::InvalidArgument(_)), "page {p} ({kind:?}): {e}");
                refused += 1;
                // Doomed: it cannot commit, and nothing was logged.
                assert!(t.commit().is_err(), "page {p}: a refused free dooms its transaction");
            }
        }
    }
    assert!(
        refused >= 3,
        "the header, the space map and an extent list at least: {refused}"
    );
    // The engine goes on.
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(kept).unwrap(), b"kept".to_vec());
    t.create(GroupId::DEFAULT, b"after").unwrap();
    t.commit().unwrap();
    // And the database reopens, after a crash too.
    db.crash();
    let report = check_database(dir.path(), &VolumeOptions::default());
    assert!(report.is_ok(), "{:?}", report.problems);
    let db = Db::open(dir.path(), &opts).unwrap();
    let mut t = db.begin().unwrap();
    assert_eq!(t.read(kept).unwrap(), b"kept".to_vec());
    t.commit().unwrap();
}
