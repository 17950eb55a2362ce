//! The crate graph is the architecture (ARCHITECTURE.md, "Bird's-eye view"): this
//! test reads the workspace's `cargo metadata` and fails when a crate depends
//! on a layer it may not use, or declares a Cairn dependency its code never
//! names; and it reads the other crates' sources and fails when one names a
//! `cairn-storage` module outside the API boundary stated in that crate's docs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Each workspace crate and the Cairn crates it may depend on (normal
/// dependencies; dev-dependencies may reach anywhere, as tests do).
const ALLOWED: &[(&str, &[&str])] = &[
    // The byte codec: a leaf every crate's decoders share.
    ("cairn-codec", &[]),
    ("cairn-storage", &["cairn-codec"]),
    ("cairn-derive", &[]),
    ("cairn-net", &["cairn-storage", "cairn-codec"]),
    // The schema layer (catalog, stored field types, methods, StoreOps):
    // below both the client and the server, which share it.
    ("cairn-schema", &["cairn-codec", "cairn-storage"]),
    // The server runs the catalog and the server-side methods through the
    // schema layer: it never depends on the client crate.
    (
        "cairn-server",
        &["cairn-codec", "cairn-storage", "cairn-net", "cairn-schema"],
    ),
    (
        "cairn",
        &[
            "cairn-codec",
            "cairn-storage",
            "cairn-net",
            "cairn-schema",
            "cairn-derive",
        ],
    ),
    ("cairn-bench", &["cairn", "cairn-server", "cairn-net", "cairn-storage"]),
    (
        "cairn-cli",
        &["cairn", "cairn-storage", "cairn-net", "cairn-server", "cairn-bench"],
    ),
    // Test support, a dev-dependency of the others: server children and
    // their clients (the RPC client only), child-process entry points.
    ("cairn-testkit", &["cairn-net"]),
];

fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// Every `.rs` file under `dir`, in a stable order.
fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Every `.rs` file's text under `dir`, concatenated.
fn sources(dir: &Path) -> String {
    rs_files(dir)
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

#[test]
fn no_crate_depends_on_a_layer_above_it_or_declares_one_it_does_not_use() {
    let meta = metadata();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut problems = Vec::new();
    let mut seen = 0;
    for pkg in meta["packages"].as_array().expect("packages") {
        let name = pkg["name"].as_str().expect("name");
        let Some(ok) = allowed.get(name) else {
            problems.push(format!("{name} is not in the layering table of this test"));
            continue;
        };
        seen += 1;
        let src = Path::new(pkg["manifest_path"].as_str().expect("manifest_path"))
            .parent()
            .expect("crate dir")
            .join("src");
        let code = sources(&src);
        for dep in pkg["dependencies"].as_array().expect("dependencies") {
            let dep_name = dep["name"].as_str().expect("dependency name");
            if !dep_name.starts_with("cairn") || !dep["kind"].is_null() {
                continue;
            }
            if !ok.contains(&dep_name) {
                problems.push(format!("{name} depends on {dep_name}, a layer it may not use"));
            }
            let lib = dep_name.replace('-', "_");
            if !code.contains(&format!("{lib}::")) && !code.contains(&format!("use {lib}")) {
                problems.push(format!("{name} declares {dep_name} but its code never uses it"));
            }
        }
    }
    assert_eq!(seen, ALLOWED.len(), "every crate of the table is in the workspace");
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `cairn-storage`'s API modules (its crate docs, "The API boundary"). An
/// entry allows every path it is a prefix of, segment by segment:
/// `wal::redo` allows `wal::redo::Redo` but not `wal::Wal`.
const STORAGE_API: &[&str] = &[
    "access",
    "btree",
    "buffer",
    "check",
    "fxhash",
    "io",
    "lock",
    "page",
    "record::object",
    "txn",
    "wal::redo",
];

/// `cairn-storage`'s tool interface: the formats and machinery below the API,
/// for the CLI's tools, the benchmarks, the fuzz targets and tests.
const STORAGE_TOOLS: &[&str] = &["volume", "wal", "record", "recovery", "sim"];

/// How much of `cairn-storage` a crate's sources may name.
#[derive(Clone, Copy, Debug)]
enum Reach {
    /// Nothing: the crate may not depend on the storage layer (`ALLOWED`).
    Nothing,
    /// The root re-exports and [`STORAGE_API`].
    Api,
    /// The API and [`STORAGE_TOOLS`].
    Tools,
}

/// Each crate's source directories (relative to the workspace root) and its
/// reach into `cairn-storage`. The fuzz crate is outside the workspace and
/// built only on nightly, so this is the one stable check of its imports.
const STORAGE_REACH: &[(&str, &[&str], Reach)] = &[
    ("cairn-codec", &["crates/cairn-codec/src"], Reach::Nothing),
    ("cairn-schema", &["crates/cairn-schema/src"], Reach::Api),
    ("cairn-derive", &["crates/cairn-derive/src"], Reach::Nothing),
    ("cairn-net", &["crates/cairn-net/src"], Reach::Api),
    ("cairn-server", &["crates/cairn-server/src"], Reach::Api),
    ("cairn", &["crates/cairn/src"], Reach::Api),
    ("cairn-bench", &["crates/cairn-bench/src"], Reach::Tools),
    ("cairn-cli", &["crates/cairn-cli/src"], Reach::Tools),
    ("cairn-testkit", &["crates/cairn-testkit/src"], Reach::Nothing),
    ("fuzz", &["fuzz/targets", "fuzz/fuzz_targets"], Reach::Tools),
];

/// The ways other crates write a `cairn-storage` path: directly, or through
/// the `cairn` crate's re-export of the whole crate.
const STORAGE_PREFIXES: &[&str] = &["cairn_storage::", "cairn::storage::"];

/// `cairn-storage`'s `lib.rs`: its `pub mod` names and the names its
/// `pub use` lines re-export at the root.
fn storage_root(lib: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut modules = BTreeSet::new();
    let mut names = BTreeSet::new();
    for line in lib.lines().map(str::trim) {
        if let Some(m) = line.strip_prefix("pub mod ") {
            modules.insert(m.trim_end_matches(';').to_string());
        } else if let Some(u) = line.strip_prefix("pub use ") {
            let u = u.trim_end_matches(';');
            let list = match u.find('{') {
                Some(open) => &u[open + 1..u.rfind('}').expect("a closed group")],
                None => u.rsplit("::").next().expect("a name"),
            };
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                names.insert(name.rsplit(" as ").next().expect("a name").to_string());
            }
        }
    }
    (modules, names)
}

fn skip_ws(b: &[u8], i: &mut usize) {
    while b.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

/// Reads one use tree (or plain path) at `b[*i..]`, appending every path it
/// names to `out` with `prefix` in front: `{page::{self, PageType}, Db}` names
/// `page`, `page::PageType` and `Db`.
fn use_tree(b: &[u8], i: &mut usize, prefix: &str, out: &mut Vec<String>) {
    let mut path = prefix.to_string();
    let mut named = false;
    loop {
        skip_ws(b, i);
        if b.get(*i) == Some(&b'{') {
            *i += 1;
            loop {
                skip_ws(b, i);
                match b.get(*i) {
                    None => return,
                    Some(b'}') => {
                        *i += 1;
                        return;
                    }
                    Some(b',') => *i += 1,
                    Some(b'/') if b[*i..].starts_with(b"//") => {
                        while b.get(*i).is_some_and(|c| *c != b'\n') {
                            *i += 1; // a comment inside the group
                        }
                    }
                    Some(_) => {
                        let before = *i;
                        use_tree(b, i, &path, out);
                        if *i == before {
                            *i += 1; // not a path: step over it
                        }
                    }
                }
            }
        }
        let start = *i;
        while b
            .get(*i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'*')
        {
            *i += 1;
        }
        let segment = std::str::from_utf8(&b[start..*i]).expect("ASCII");
        if segment.is_empty() {
            break;
        }
        named = true;
        if segment != "self" {
            if !path.is_empty() {
                path.push_str("::");
            }
            path.push_str(segment);
        }
        if b[*i..].starts_with(b"::") {
            *i += 2;
        } else {
            break;
        }
    }
    if named && !path.is_empty() {
        out.push(path);
    }
    // `name as alias`: step over the alias so a group does not read it as a path.
    let mut j = *i;
    skip_ws(b, &mut j);
    if b[j..].starts_with(b"as ") {
        j += 3;
        skip_ws(b, &mut j);
        while b.get(j).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            j += 1;
        }
        *i = j;
    }
}

/// Every `cairn-storage` path `text` names, with its line number.
fn storage_paths(text: &str) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    for prefix in STORAGE_PREFIXES {
        for (at, _) in text.match_indices(prefix) {
            if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
                continue; // `my_cairn_storage::`, not ours
            }
            let line = text[..at].matches('\n').count() + 1;
            let mut i = at + prefix.len();
            let mut paths = Vec::new();
            use_tree(b, &mut i, "", &mut paths);
            found.extend(paths.into_iter().map(|p| (line, p)));
        }
    }
    found.sort();
    found
}

/// Whether a crate with `reach` may name `path` (relative to the storage
/// crate's root), given the root's re-exported names.
fn may_name(path: &str, reach: Reach, root: &BTreeSet<String>) -> bool {
    let allowed: &[&[&str]] = match reach {
        Reach::Nothing => return false,
        Reach::Api => &[STORAGE_API],
        Reach::Tools => &[STORAGE_API, STORAGE_TOOLS],
    };
    let first = path.split("::").next().expect("a segment");
    root.contains(first)
        || allowed
            .iter()
            .flat_map(|class| class.iter())
            .any(|entry| path == *entry || path.strip_prefix(entry).is_some_and(|rest| rest.starts_with("::")))
}

/// The boundary stated in `cairn-storage`'s crate docs, checked over the
/// other crates' sources (and the fuzz targets') by reading them as text:
/// every path written after `cairn_storage::` or `cairn::storage::` — plain
/// paths and `use` trees with their `{...}` groups, nested or over several
/// lines — must start with a root re-export of `cairn-storage`'s `lib.rs` or
/// an entry of the crate's class (`STORAGE_REACH`). It also checks that every
/// `pub mod` of that `lib.rs` is classified, so a new public module needs a
/// decision here.
///
/// Limits, as a text scan: comments and strings count (a doc naming a tool
/// module from an API crate is a reference to it, so reword it); a renamed
/// crate (`use cairn_storage as s;`, or `crate::storage::` inside `cairn`)
/// hides every path written through it; a module imported on its own and
/// used later (`use cairn_storage::wal;` then `wal::Wal`) is judged by what
/// the `use` names (`wal`, which is not API, so it is flagged), and a glob
/// (`cairn_storage::wal::*`) as the module it opens; types an API crate uses
/// without naming them (a method's result) are not seen. A problem names the
/// line where its `cairn_storage::` starts. Tests under `crates/*/tests` are
/// not scanned: they may use the tool interface, and the compiler keeps
/// everyone off the private modules.
#[test]
fn crates_name_only_the_storage_modules_of_their_class() {
    let root_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = std::fs::read_to_string(root_dir.join("crates/cairn-storage/src/lib.rs")).expect("read lib.rs");
    let (modules, root) = storage_root(&lib);
    assert!(
        root.contains("Db") && modules.contains("txn"),
        "lib.rs parsed: {modules:?} {root:?}"
    );
    let mut problems = Vec::new();

    let classified: BTreeSet<&str> = STORAGE_API
        .iter()
        .chain(STORAGE_TOOLS)
        .map(|e| e.split("::").next().expect("a segment"))
        .collect();
    for m in &modules {
        if !classified.contains(m.as_str()) {
            problems.push(format!(
                "cairn-storage's `pub mod {m}` is neither API nor tool interface in this test"
            ));
        }
    }
    for m in &classified {
        if !modules.contains(*m) {
            problems.push(format!(
                "this test classifies `{m}`, which is not a `pub mod` of cairn-storage"
            ));
        }
    }

    let mut crates_seen = BTreeSet::new();
    for (name, dirs, reach) in STORAGE_REACH {
        crates_seen.insert(*name);
        for dir in *dirs {
            let files = rs_files(&root_dir.join(dir));
            assert!(!files.is_empty(), "{dir} has Rust sources");
            for file in files {
                let text = std::fs::read_to_string(&file).expect("read a source file");
                for (line, path) in storage_paths(&text) {
                    if !may_name(&path, *reach, &root) {
                        let shown = file.strip_prefix(&root_dir).unwrap_or(&file).display();
                        problems.push(format!(
                            "{shown}:{line}: names cairn_storage::{path}, outside {name}'s reach ({reach:?})"
                        ));
                    }
                }
            }
        }
    }
    for e in std::fs::read_dir(root_dir.join("crates")).expect("crates/").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "cairn-storage" && !crates_seen.contains(name.as_str()) {
            problems.push(format!(
                "crates/{name} has no reach into cairn-storage in STORAGE_REACH"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_storage_path_scanner_reads_groups_aliases_and_plain_paths() {
    let text = "use cairn_storage::{page::{self, PageType},\n    // the log's records\n    wal::redo as r, Db};\nlet x = cairn::storage::volume::manifest::MANIFEST_FILE;\nmy_cairn_storage::x;";
    let found = storage_paths(text);
    let want = [
        (1, "Db".to_string()),
        (1, "page".to_string()),
        (1, "page::PageType".to_string()),
        (1, "wal::redo".to_string()),
        (4, "volume::manifest::MANIFEST_FILE".to_string()),
    ];
    assert_eq!(found, want);
    let root = BTreeSet::from(["Db".to_string()]);
    assert!(may_name("wal::redo::Redo", Reach::Api, &root));
    assert!(!may_name("wal::Wal", Reach::Api, &root));
    assert!(!may_name("record", Reach::Api, &root));
    assert!(may_name("Db::open", Reach::Api, &root));
    assert!(may_name("volume::manifest::Manifest", Reach::Tools, &root));
    assert!(!may_name("Db", Reach::Nothing, &root));
    assert!(!may_name("bytes::Reader", Reach::Tools, &root));
}
