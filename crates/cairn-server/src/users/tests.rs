//! The users file: its layout round-trips, damage and loose permissions
//! are refused, concurrent changes are serialised, and a running server's
//! copy follows changes and keeps the last good one.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;

use cairn_net::scram::MIN_ITERATIONS;

use super::*;

/// Iterations for test verifiers: fast.
const ITERS: u32 = MIN_ITERATIONS;

fn database() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let opts = cairn_storage::DbOptions {
        background: false,
        ..cairn_storage::DbOptions::default()
    };
    cairn_storage::Db::create(dir.path(), &opts).unwrap().close().unwrap();
    dir
}

fn add(dir: &Path, name: &str, role: Role, password: &str) -> Result<(), UsersError> {
    add_with_iterations(dir, name, role, password, ITERS)
}

fn set_password(dir: &Path, name: &str, password: &str) -> Result<(), UsersError> {
    set_password_with_iterations(dir, name, password, ITERS)
}

/// Whether `user`'s verifier is `password`'s.
fn has_password(user: &User, password: &str) -> bool {
    let v = &user.verifier;
    Verifier::new(password, v.salt(), v.iterations()).unwrap() == *v
}

fn listing(users: &Users) -> Vec<(String, Role)> {
    users.iter().map(|u| (u.name.clone(), u.role)).collect()
}

fn users_path(dir: &Path) -> PathBuf {
    dir.join(USERS_FILE)
}

/// A valid file of three users.
fn sample() -> (tempfile::TempDir, Vec<u8>) {
    let db = database();
    add(db.path(), "carol", Role::Read, "c").unwrap();
    add(db.path(), "alice", Role::Admin, "a").unwrap();
    add(db.path(), "bob", Role::Write, "b").unwrap();
    let bytes = fs::read(users_path(db.path())).unwrap();
    (db, bytes)
}

/// Replaces the users file (a new inode, as every real change makes).
fn replace(dir: &Path, bytes: &[u8], mode: u32) {
    let tmp = dir.join("replacement");
    fs::write(&tmp, bytes).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
    fs::rename(&tmp, users_path(dir)).unwrap();
}

fn assert_damaged(result: Result<Users, UsersError>, context: &str) {
    match result {
        Err(UsersError::Damaged { offset, what, .. }) => {
            assert!(!what.is_empty(), "{context}: offset {offset}");
        }
        Err(e) => panic!("{context}: expected Damaged, got {e}"),
        Ok(_) => panic!("{context}: a damaged file was accepted"),
    }
}

/// A file of hand-made entries (name, role byte, verifier bytes) with a
/// right checksum, so only the structural checks can refuse it.
fn raw(version: u16, entries: &[(&str, u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&[7; KEY_LEN]);
    out.extend_from_slice(&ITERATIONS_DEFAULT.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (name, role, v) in entries {
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.push(*role);
        out.extend_from_slice(&(v.len() as u16).to_le_bytes());
        out.extend_from_slice(v);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn verifier_bytes(password: &str) -> Vec<u8> {
    Verifier::new(password, b"0123456789abcdef", ITERS).unwrap().encode()
}

#[test]
fn add_list_passwd_role_remove_round_trip_across_reloads() {
    let db = database();
    let dir = db.path();
    assert!(Users::load(dir).unwrap().is_empty());
    add(dir, "bob", Role::Admin, "bob's secret").unwrap();
    add(dir, "alice", Role::Write, "hunter2").unwrap();
    add(dir, "carol", Role::Read, "c").unwrap();

    let users = Users::load(dir).unwrap();
    assert_eq!(
        listing(&users),
        [
            ("alice".to_owned(), Role::Write),
            ("bob".to_owned(), Role::Admin),
            ("carol".to_owned(), Role::Read)
        ]
    );
    assert_eq!(users.len(), 3);
    assert!(has_password(users.get("alice").unwrap(), "hunter2"));
    assert!(has_password(users.get("bob").unwrap(), "bob's secret"));
    assert!(!has_password(users.get("bob").unwrap(), "hunter2"));
    assert!(users.get("dave").is_none());

    set_password(dir, "alice", "correct horse").unwrap();
    assert_eq!(set_role(dir, "carol", Role::Admin).unwrap(), Role::Read);
    let users = Users::load(dir).unwrap();
    let alice = users.get("alice").unwrap();
    assert!(has_password(alice, "correct horse"));
    assert!(!has_password(alice, "hunter2"));
    assert_eq!(alice.role, Role::Write);
    assert_eq!(users.get("carol").unwrap().role, Role::Admin);
    assert!(has_password(users.get("bob").unwrap(), "bob's secret"));

    remove(dir, "bob").unwrap();
    let users = Users::load(dir).unwrap();
    assert_eq!(
        listing(&users),
        [("alice".to_owned(), Role::Write), ("carol".to_owned(), Role::Admin)]
    );
    remove(dir, "alice").unwrap();
    remove(dir, "carol").unwrap();
    let users = Users::load(dir).unwrap();
    assert!(users.is_empty());
    assert!(
        users_path(dir).exists(),
        "a file of no users stays (it keeps the decoy)"
    );
}

#[test]
fn the_real_iteration_count_is_used_by_default() {
    let db = database();
    super::add(db.path(), "alice", Role::Read, "pw").unwrap();
    let users = Users::load(db.path()).unwrap();
    assert_eq!(users.get("alice").unwrap().verifier.iterations(), ITERATIONS_DEFAULT);
    assert_eq!(users.decoy().iterations(), ITERATIONS_DEFAULT);
}

#[test]
fn the_decoy_secret_survives_every_write() {
    let db = database();
    let dir = db.path();
    // Without a file, each load makes up its own (nothing to keep yet).
    assert_ne!(
        Users::load(dir).unwrap().decoy().secret(),
        Users::load(dir).unwrap().decoy().secret()
    );
    add(dir, "alice", Role::Write, "a").unwrap();
    let secret = *Users::load(dir).unwrap().decoy().secret();
    assert_eq!(*Users::load(dir).unwrap().decoy().secret(), secret);
    add(dir, "bob", Role::Write, "b").unwrap();
    set_password(dir, "alice", "a2").unwrap();
    set_role(dir, "bob", Role::Read).unwrap();
    remove(dir, "alice").unwrap();
    remove(dir, "bob").unwrap();
    add(dir, "carol", Role::Write, "c").unwrap();
    let users = Users::load(dir).unwrap();
    assert_eq!(*users.decoy().secret(), secret);
    assert_eq!(users.decoy().iterations(), ITERATIONS_DEFAULT);
}

#[test]
fn duplicate_add_and_absent_user_are_errors() {
    let db = database();
    let dir = db.path();
    add(dir, "alice", Role::Write, "a").unwrap();
    let before = fs::read(users_path(dir)).unwrap();
    assert!(matches!(
        add(dir, "alice", Role::Admin, "other"),
        Err(UsersError::Exists { name }) if name == "alice"
    ));
    assert!(matches!(remove(dir, "bob"), Err(UsersError::NoSuchUser { name }) if name == "bob"));
    assert!(matches!(
        set_password(dir, "bob", "b"),
        Err(UsersError::NoSuchUser { .. })
    ));
    assert!(matches!(
        set_role(dir, "bob", Role::Read),
        Err(UsersError::NoSuchUser { .. })
    ));
    assert_eq!(
        fs::read(users_path(dir)).unwrap(),
        before,
        "a refused change writes nothing"
    );
    let users = Users::load(dir).unwrap();
    assert!(has_password(users.get("alice").unwrap(), "a"));
    assert_eq!(users.get("alice").unwrap().role, Role::Write);
}

#[test]
fn bad_names_and_empty_passwords_are_refused() {
    let db = database();
    let dir = db.path();
    let long = "x".repeat(NAME_LEN_MAX + 1);
    for bad in [
        "",
        "-alice",
        "a b",
        "a,b",
        "a=b",
        "a\0b",
        "é",
        "a/b",
        "tab\t",
        "new\nline",
        &long,
    ] {
        match add(dir, bad, Role::Read, "pw") {
            Err(UsersError::InvalidName { name, why }) => {
                assert_eq!(name, bad);
                assert!(!why.is_empty());
            }
            other => panic!("{bad:?}: {other:?}"),
        }
        assert!(
            matches!(remove(dir, bad), Err(UsersError::InvalidName { .. })),
            "{bad:?}"
        );
    }
    let e = add(dir, "a b", Role::Read, "pw").unwrap_err().to_string();
    assert!(e.contains("' '") && e.contains("\"a b\""), "{e}");
    for good in ["a", "Alice.Smith-2_x", "a-", "0", &"y".repeat(NAME_LEN_MAX)] {
        add(dir, good, Role::Read, "pw").unwrap();
    }
    assert!(matches!(
        add(dir, "zed", Role::Read, ""),
        Err(UsersError::EmptyPassword)
    ));
    assert!(matches!(set_password(dir, "a", ""), Err(UsersError::EmptyPassword)));
    assert!(Users::load(dir).unwrap().get("zed").is_none());
}

#[test]
fn roles_parse_print_and_order() {
    for r in Role::ALL {
        assert_eq!(r.to_string().parse::<Role>().unwrap(), r);
        assert_eq!(Role::from_code(r.code()), Some(r));
    }
    assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
    assert_eq!("admin".parse::<Role>().unwrap(), Role::Admin);
    for bad in ["", "Admin", "root", "read "] {
        let e = bad.parse::<Role>().unwrap_err();
        assert!(matches!(&e, UsersError::InvalidRole { role } if role == bad));
        assert!(e.to_string().contains("read, write or admin"), "{e}");
    }
    assert_eq!(Role::from_code(0), None);
    assert_eq!(Role::from_code(4), None);
}

#[test]
fn a_directory_without_a_database_is_refused() {
    let plain = tempfile::tempdir().unwrap();
    assert!(matches!(
        super::add(plain.path(), "alice", Role::Read, "pw"),
        Err(UsersError::NotADatabase { .. })
    ));
    assert!(matches!(
        set_password(plain.path(), "alice", "pw"),
        Err(UsersError::NotADatabase { .. })
    ));
    assert!(matches!(
        remove(plain.path(), "alice"),
        Err(UsersError::NotADatabase { .. })
    ));
    assert!(matches!(
        Users::load(plain.path()),
        Err(UsersError::NotADatabase { .. })
    ));
    let missing = plain.path().join("missing");
    match Users::load(&missing) {
        Err(e @ UsersError::NotADatabase { .. }) => assert!(e.to_string().contains("does not exist"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert!(!plain.path().join(USERS_FILE).exists());
    assert!(!plain.path().join(USERS_LOCK_FILE).exists());
}

#[test]
fn every_truncation_is_damaged() {
    let (db, bytes) = sample();
    assert_eq!(Users::decode(Path::new("users"), &bytes).unwrap().len(), 3);
    for len in 0..bytes.len() {
        assert_damaged(
            Users::decode(Path::new("users"), &bytes[..len]),
            &format!("length {len}"),
        );
    }
    replace(db.path(), &bytes[..bytes.len() / 2], 0o600);
    assert_damaged(Users::load(db.path()), "truncated on disk");
}

#[test]
fn every_flipped_byte_is_damaged() {
    let (db, bytes) = sample();
    for i in 0..bytes.len() {
        for mask in [0x01, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= mask;
            assert_damaged(Users::decode(Path::new("users"), &b), &format!("byte {i} ^ {mask:#x}"));
        }
    }
    let mut b = bytes.clone();
    b[HEADER_LEN + 3] ^= 0x20;
    replace(db.path(), &b, 0o600);
    match Users::load(db.path()) {
        Err(e @ UsersError::Damaged { .. }) => {
            let s = e.to_string();
            assert!(s.contains(&users_path(db.path()).display().to_string()), "{s}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn trailing_bytes_are_refused() {
    let (db, bytes) = sample();
    for extra in [&[0u8][..], &[0; 4], &bytes[..]] {
        let mut b = bytes.clone();
        b.extend_from_slice(extra);
        match Users::decode(Path::new("users"), &b) {
            Err(UsersError::Damaged { offset, what, .. }) => {
                assert_eq!(offset as usize, bytes.len());
                assert!(what.starts_with(&format!("{} byte", extra.len())), "{what}");
                assert!(what.ends_with("the checksum"), "{what}");
            }
            other => panic!("{other:?}"),
        }
    }
    let mut b = bytes.clone();
    b.push(0);
    replace(db.path(), &b, 0o600);
    assert_damaged(Users::load(db.path()), "trailing byte on disk");
}

#[test]
fn structural_damage_under_a_right_checksum_is_refused() {
    let path = Path::new("users");
    let a = || verifier_bytes("a");
    let ok = raw(FORMAT_VERSION, &[("alice", 1, a()), ("bob", 3, a())]);
    assert_eq!(Users::decode(path, &ok).unwrap().len(), 2);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (raw(2, &[("alice", 1, a())]), "format version 2"),
        (raw(FORMAT_VERSION, &[("alice", 4, a())]), "unknown role 4"),
        (raw(FORMAT_VERSION, &[("alice", 0, a())]), "unknown role 0"),
        (raw(FORMAT_VERSION, &[("alice", 1, a()), ("alice", 2, a())]), "twice"),
        (
            raw(FORMAT_VERSION, &[("bob", 1, a()), ("alice", 2, a())]),
            "not in order",
        ),
        (raw(FORMAT_VERSION, &[("alice", 1, a()[1..].to_vec())]), "verifier"),
        (raw(FORMAT_VERSION, &[("alice", 1, vec![])]), "verifier"),
        (raw(FORMAT_VERSION, &[("-x", 1, a())]), "'-'"),
        (raw(FORMAT_VERSION, &[("", 1, a())]), "empty"),
        (raw(FORMAT_VERSION, &[("a b", 1, a())]), "' '"),
    ];
    for (bytes, expect) in cases {
        match Users::decode(path, &bytes) {
            Err(UsersError::Damaged { what, .. }) => assert!(what.contains(expect), "{expect}: {what}"),
            other => panic!("{expect}: {other:?}"),
        }
    }
    // A user count past the limit, and one past the entries there are.
    let mut many = raw(FORMAT_VERSION, &[]);
    many[46..50].copy_from_slice(&(USERS_MAX as u32 + 1).to_le_bytes());
    assert_damaged(Users::decode(path, &many), "too many users");
    let mut more = raw(FORMAT_VERSION, &[("alice", 1, a())]);
    more[46..50].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_damaged(Users::decode(path, &more), "count past the entries");
    // A decoy iteration count out of range.
    let mut low = raw(FORMAT_VERSION, &[]);
    low[42..46].copy_from_slice(&1u32.to_le_bytes());
    let n = low.len() - 4;
    let crc = crc32c::crc32c(&low[..n]);
    low[n..].copy_from_slice(&crc.to_le_bytes());
    assert_damaged(Users::decode(path, &low), "decoy iterations");
    assert_damaged(Users::decode(path, b"CAIRNMF\0\x01\x00"), "another file's magic");
}

#[test]
fn a_file_others_may_read_is_refused() {
    let (db, bytes) = sample();
    let dir = db.path();
    let path = users_path(dir);
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(dir.join(USERS_LOCK_FILE)).unwrap().mode() & 0o777, 0o600);
    assert!(!dir.join(USERS_TMP_FILE).exists());
    for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        match Users::load(dir) {
            Err(e @ UsersError::Permissions { .. }) => {
                let s = e.to_string();
                assert!(s.contains(&format!("chmod 600 {}", path.display())), "{s}");
                assert!(s.contains(&format!("{mode:04o}")), "{s}");
            }
            other => panic!("{mode:o}: {other:?}"),
        }
        assert!(matches!(remove(dir, "alice"), Err(UsersError::Permissions { .. })));
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(Users::load(dir).unwrap().len(), 3);
    replace(dir, &bytes, 0o600);
    assert_eq!(Users::load(dir).unwrap().len(), 3);
}

#[test]
fn users_file_sees_changes_and_keeps_the_last_good_copy() {
    let db = database();
    let dir = db.path();
    let file = UsersFile::open(dir).unwrap();
    assert!(file.current().unwrap().is_empty());
    add(dir, "alice", Role::Write, "a").unwrap();
    let now = file.current().unwrap();
    assert_eq!(listing(&now), [("alice".to_owned(), Role::Write)]);
    assert!(
        Arc::ptr_eq(&now, &file.current().unwrap()),
        "unchanged: the cached copy"
    );
    set_role(dir, "alice", Role::Read).unwrap();
    add(dir, "bob", Role::Admin, "b").unwrap();
    let good = file.current().unwrap();
    assert_eq!(
        listing(&good),
        [("alice".to_owned(), Role::Read), ("bob".to_owned(), Role::Admin)]
    );

    // Damaged: the error once, then the last good copy.
    let mut bytes = fs::read(users_path(dir)).unwrap();
    bytes[HEADER_LEN + 2] ^= 1;
    replace(dir, &bytes, 0o600);
    assert!(matches!(file.current(), Err(UsersError::Damaged { .. })));
    assert!(Arc::ptr_eq(&file.last_good(), &good));
    assert!(Arc::ptr_eq(&file.current().unwrap(), &good));
    assert!(Arc::ptr_eq(&file.current().unwrap(), &good));

    // Too open: likewise.
    bytes[HEADER_LEN + 2] ^= 1;
    replace(dir, &bytes, 0o644);
    assert!(matches!(file.current(), Err(UsersError::Permissions { .. })));
    assert!(Arc::ptr_eq(&file.current().unwrap(), &good));

    // Mended: read again.
    fs::set_permissions(users_path(dir), fs::Permissions::from_mode(0o600)).unwrap();
    add(dir, "carol", Role::Read, "c").unwrap();
    assert_eq!(file.current().unwrap().len(), 3);

    // Removed while it named users: kept, the error once.
    fs::remove_file(users_path(dir)).unwrap();
    assert!(matches!(file.current(), Err(UsersError::Removed { kept: 3, .. })));
    assert_eq!(file.current().unwrap().len(), 3);
    // A new file is read.
    add(dir, "dave", Role::Read, "d").unwrap();
    assert_eq!(listing(&file.current().unwrap()), [("dave".to_owned(), Role::Read)]);
}

#[test]
fn users_file_opens_a_damaged_file_as_an_error() {
    let (db, mut bytes) = sample();
    bytes[0] = b'X';
    replace(db.path(), &bytes, 0o600);
    assert!(matches!(
        UsersFile::open(db.path()),
        Err(UsersError::Damaged { offset: 0, .. })
    ));
    assert!(matches!(
        add(db.path(), "x", Role::Read, "x"),
        Err(UsersError::Damaged { .. })
    ));
    assert_eq!(
        fs::read(users_path(db.path())).unwrap(),
        bytes,
        "a damaged file is not overwritten"
    );
}

#[test]
fn concurrent_adds_lose_nothing() {
    let db = database();
    let dir = db.path();
    std::thread::scope(|s| {
        for t in 0..2 {
            s.spawn(move || {
                for i in 0..20 {
                    add(dir, &format!("user{t}-{i:02}"), Role::Write, "pw").unwrap();
                }
            });
        }
    });
    let users = Users::load(dir).unwrap();
    assert_eq!(users.len(), 40);
    for t in 0..2 {
        for i in 0..20 {
            assert!(users.get(&format!("user{t}-{i:02}")).is_some(), "user{t}-{i:02}");
        }
    }
    assert!(!dir.join(USERS_TMP_FILE).exists());
}
