//! Users and roles through the typed API, against a real server child: once
//! the database has users every client logs in (URL or `Options::login`),
//! and the role decides what it may change, whichever client kind it is. A
//! `read` user reads and is refused every change; a `write` user changes
//! objects but not the schema (a new class, a named root); an `admin` may do
//! both. A refusal is `PermissionDenied` and changes nothing.

mod common;

use cairn::{Arch, Database, Error, Index, Login, Options};
use cairn_server::users::{self, Role};

mod schema {
    #[derive(cairn::Persistent, Debug, PartialEq)]
    pub struct Part {
        #[cairn(index)]
        pub id: u64,
        pub name: String,
    }

    #[derive(cairn::Persistent, Debug)]
    pub struct Newcomer {
        pub n: u32,
    }
}
use schema::{Newcomer, Part};

fn options(arch: Arch, login: Option<(&str, &str)>) -> Options {
    let mut o = Options::default();
    o.storage.background = false;
    o.arch = arch;
    o.login = login.map(|(u, p)| Login {
        user: u.into(),
        password: p.into(),
    });
    o
}

fn denied<T: std::fmt::Debug>(r: cairn::Result<T>, what: &str) {
    match r {
        // Refused where the lock is taken, or (a schema change) by the
        // server's CATALOG handler.
        Err(Error::PermissionDenied(m)) => assert!(
            m.contains("may not lock") || m.contains("only an admin may change the schema"),
            "{what}: {m}"
        ),
        other => panic!("{what}: expected PermissionDenied, got {other:?}"),
    }
}

fn parts(db: &Database) -> usize {
    let mut tx = db.begin().unwrap();
    let by_id: Index<u64, Part> = Index::on("id");
    let n = tx
        .find_range(&by_id, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
        .unwrap()
        .len();
    tx.commit().unwrap();
    n
}

#[test]
fn each_role_changes_only_what_it_may_on_every_client_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        // The schema is made by an administrator (here: embedded).
        let db = Database::open(&path).unwrap();
        let mut tx = db.begin().unwrap();
        let p = tx
            .create(Part {
                id: 1,
                name: "first".into(),
            })
            .unwrap();
        tx.set_root("first", &p).unwrap();
        tx.commit().unwrap();
    }
    users::add(&path, "ada", Role::Admin, "ada-pw").unwrap();
    users::add(&path, "wes", Role::Write, "wes-pw").unwrap();
    users::add(&path, "rita", Role::Read, "rita-pw").unwrap();
    let server = common::serve(&path);
    let url = format!("cairn://{}", server.addr);
    match Database::connect(&url, options(Arch::Page, None)) {
        Err(e) => assert!(e.to_string().contains("requires a login"), "{e}"),
        Ok(_) => panic!("a client without a login was let in"),
    }
    match Database::connect(&url, options(Arch::Page, Some(("wes", "rita-pw")))) {
        Err(e) => assert!(e.to_string().contains("authentication failed"), "{e}"),
        Ok(_) => panic!("a wrong password was let in"),
    }
    for (next_id, arch) in (2..).zip([Arch::Page, Arch::File, Arch::Object, Arch::Adaptive]) {
        let rita = Database::connect(&url, options(arch, Some(("rita", "rita-pw")))).unwrap();
        let before = parts(&rita);
        let mut tx = rita.begin().unwrap();
        denied(
            tx.create(Part {
                id: 99,
                name: "no".into(),
            })
            .and_then(|_| tx.commit()),
            "read creates",
        );
        assert_eq!(parts(&rita), before, "{arch:?}: nothing of the refused change is there");
        // A lookup for update takes U (on an index leaf, or the object's
        // X): a lock that would make every writer of it wait, so a
        // read-only session may not take it either.
        let by_id: Index<u64, Part> = Index::on("id");
        let mut tx = rita.begin().unwrap();
        denied(tx.find_for_update(&by_id, &[1]), "read looks up for update");
        drop(tx);
        let mut tx = rita.begin().unwrap();
        assert!(
            tx.find_one(&by_id, &1).unwrap().is_some(),
            "{arch:?}: a read user still reads"
        );
        tx.commit().unwrap();

        // The URL names the user this time.
        let wes_url = format!("cairn://wes:wes-pw@{}", server.addr);
        let wes = Database::connect(&wes_url, options(arch, None)).unwrap();
        let mut tx = wes.begin().unwrap();
        tx.create(Part {
            id: next_id,
            name: format!("{arch:?}"),
        })
        .unwrap();
        tx.commit().expect("a write user changes objects");
        let mut tx = wes.begin().unwrap();
        let by_id: Index<u64, Part> = Index::on("id");
        let p = tx.find_one(&by_id, &1).unwrap().expect("part 1");
        denied(tx.set_root("mine", &p).and_then(|()| tx.commit()), "write names a root");
        let mut tx = wes.begin().unwrap();
        denied(
            tx.create(Newcomer { n: 1 }).and_then(|_| tx.commit()),
            "write registers a class",
        );
        assert_eq!(parts(&wes), before + 1);
    }
    let ada = Database::connect(&url, options(Arch::Adaptive, Some(("ada", "ada-pw")))).unwrap();
    let mut tx = ada.begin().unwrap();
    let n = tx.create(Newcomer { n: 7 }).unwrap();
    tx.set_root("newcomer", &n).unwrap();
    tx.commit().expect("an admin changes the schema");
}
