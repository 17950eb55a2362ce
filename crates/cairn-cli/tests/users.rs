//! `cairn user` end to end: add (from a password file and from stdin), list,
//! passwd, role, remove, and the errors a user sees for a bad role, a bad
//! name, a missing directory, an empty password and an open password file.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use cairn_net::scram::Verifier;
use cairn_server::users::{Role, Users};

/// Runs `cairn ARGS` with `stdin` as its standard input.
fn cairn(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cairn");
    // A command that fails before reading its stdin closes the pipe.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts `o` failed with a message containing every one of `needles`.
fn assert_fails(o: &Output, needles: &[&str]) {
    assert!(!o.status.success(), "expected a failure: {o:?}");
    let e = stderr(o);
    for n in needles {
        assert!(e.contains(n), "{n:?} not in stderr: {e}");
    }
}

fn assert_ok(o: &Output) -> String {
    assert!(o.status.success(), "{o:?}");
    stdout(o)
}

/// Whether the user `name` of the database in `dir` has `password`.
fn has_password(dir: &Path, name: &str, password: &str) -> bool {
    let users = Users::load(dir).unwrap();
    let v = &users.get(name).unwrap().verifier;
    Verifier::new(password, v.salt(), v.iterations()).unwrap() == *v
}

fn secret_file(dir: &Path, name: &str, text: &str, mode: u32) -> String {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn user_add_list_passwd_role_remove() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let db_s = db.to_str().unwrap();
    assert_ok(&cairn(&["create", db_s], ""));

    let o = assert_ok(&cairn(&["user", "list", db_s], ""));
    assert_eq!(o, "no users: loopback connections are trusted\n");

    // One from a password file, one from stdin (with the default role).
    let pw_file = secret_file(tmp.path(), "alice.pw", "alice's secret\n", 0o600);
    let o = assert_ok(&cairn(
        &[
            "user",
            "add",
            db_s,
            "alice",
            "--role",
            "admin",
            "--password-file",
            &pw_file,
        ],
        "",
    ));
    assert!(
        o.contains("alice") && o.contains("admin") && o.contains("next login"),
        "{o}"
    );
    let o = assert_ok(&cairn(&["user", "add", db_s, "bob"], "bob's secret\n"));
    assert!(o.contains("bob") && o.contains("write"), "{o}");
    assert!(has_password(&db, "alice", "alice's secret"));
    assert!(has_password(&db, "bob", "bob's secret"));

    assert_eq!(
        assert_ok(&cairn(&["user", "list", db_s], "")),
        "alice admin\nbob write\n"
    );

    // passwd (stdin, CRLF) and role.
    let o = assert_ok(&cairn(&["user", "passwd", db_s, "bob"], "new secret\r\n"));
    assert!(o.contains("password") && o.contains("bob"), "{o}");
    assert!(has_password(&db, "bob", "new secret"));
    assert!(!has_password(&db, "bob", "bob's secret"));
    let pw_file = secret_file(tmp.path(), "alice2.pw", "again", 0o400);
    assert_ok(&cairn(
        &["user", "passwd", db_s, "alice", "--password-file", &pw_file],
        "",
    ));
    assert!(has_password(&db, "alice", "again"));
    let o = assert_ok(&cairn(&["user", "role", db_s, "bob", "read"], ""));
    assert!(o.contains("bob is now read (was write)"), "{o}");
    assert_eq!(
        assert_ok(&cairn(&["user", "list", db_s], "")),
        "alice admin\nbob read\n"
    );
    assert_eq!(Users::load(&db).unwrap().get("bob").unwrap().role, Role::Read);

    // remove.
    let o = assert_ok(&cairn(&["user", "remove", db_s, "alice"], ""));
    assert!(o.contains("removed") && o.contains("alice"), "{o}");
    assert_eq!(assert_ok(&cairn(&["user", "list", db_s], "")), "bob read\n");
    assert_fails(&cairn(&["user", "remove", db_s, "alice"], ""), &["no user \"alice\""]);
    assert_fails(&cairn(&["user", "add", db_s, "bob"], "x\n"), &["\"bob\" exists"]);
    assert_fails(
        &cairn(&["user", "passwd", db_s, "carol"], "x\n"),
        &["no user \"carol\""],
    );
    assert_fails(
        &cairn(&["user", "role", db_s, "carol", "admin"], ""),
        &["no user \"carol\""],
    );
    assert_eq!(assert_ok(&cairn(&["user", "list", db_s], "")), "bob read\n");
}

#[test]
fn user_errors_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let db_s = db.to_str().unwrap();
    assert_ok(&cairn(&["create", db_s], ""));

    // A bad role, as an option and as an argument.
    assert_fails(
        &cairn(&["user", "add", db_s, "alice", "--role", "root"], "pw\n"),
        &["root", "read, write or admin"],
    );
    assert_ok(&cairn(&["user", "add", db_s, "alice"], "pw\n"));
    assert_fails(
        &cairn(&["user", "role", db_s, "alice", "Admin"], ""),
        &["Admin", "read, write or admin"],
    );

    // Bad names.
    assert_fails(
        &cairn(&["user", "add", db_s, "bad name"], "pw\n"),
        &["invalid user name", "' '"],
    );
    assert_fails(
        &cairn(&["user", "add", db_s, "a,b"], "pw\n"),
        &["invalid user name", "','"],
    );
    let long = "x".repeat(65);
    assert_fails(
        &cairn(&["user", "add", db_s, &long], "pw\n"),
        &["invalid user name", "65 bytes"],
    );
    assert_fails(
        &cairn(&["user", "add", db_s, "--", "-x"], "pw\n"),
        &["invalid user name", "'-'"],
    );

    // Empty passwords, more than one line, an open password file.
    assert_fails(&cairn(&["user", "add", db_s, "bob"], ""), &["empty"]);
    assert_fails(&cairn(&["user", "add", db_s, "bob"], "\n"), &["empty"]);
    let empty = secret_file(tmp.path(), "empty.pw", "", 0o600);
    assert_fails(
        &cairn(&["user", "add", db_s, "bob", "--password-file", &empty], ""),
        &["empty"],
    );
    let two = secret_file(tmp.path(), "two.pw", "one\ntwo\n", 0o600);
    assert_fails(
        &cairn(&["user", "add", db_s, "bob", "--password-file", &two], ""),
        &["more than one line"],
    );
    let open = secret_file(tmp.path(), "open.pw", "pw\n", 0o644);
    assert_fails(
        &cairn(&["user", "add", db_s, "bob", "--password-file", &open], ""),
        &["0644", &format!("chmod 600 {open}")],
    );
    let missing_pw = tmp.path().join("nothing.pw");
    assert_fails(
        &cairn(
            &[
                "user",
                "add",
                db_s,
                "bob",
                "--password-file",
                missing_pw.to_str().unwrap(),
            ],
            "",
        ),
        &["nothing.pw"],
    );

    // A missing directory, and one that is no database.
    let missing = tmp.path().join("missing");
    let missing_s = missing.to_str().unwrap();
    for args in [
        &["user", "list", missing_s][..],
        &["user", "add", missing_s, "bob"],
        &["user", "passwd", missing_s, "bob"],
        &["user", "role", missing_s, "bob", "read"],
        &["user", "remove", missing_s, "bob"],
    ] {
        assert_fails(
            &cairn(args, "pw\n"),
            &[missing_s, "not a Cairn database", "does not exist"],
        );
    }
    assert!(!missing.exists());
    let plain = tmp.path().to_str().unwrap();
    assert_fails(
        &cairn(&["user", "list", plain], ""),
        &["not a Cairn database", "MANIFEST"],
    );

    // A users file others may read.
    let users = db.join("users");
    fs::set_permissions(&users, fs::Permissions::from_mode(0o644)).unwrap();
    assert_fails(&cairn(&["user", "list", db_s], ""), &["0644", "chmod 600"]);
    fs::set_permissions(&users, fs::Permissions::from_mode(0o600)).unwrap();

    // Nothing refused got in.
    assert_eq!(assert_ok(&cairn(&["user", "list", db_s], "")), "alice write\n");
}
