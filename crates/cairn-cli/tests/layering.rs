//! The crate graph is the architecture (ARCHITECTURE.md, DESIGN.md §1): this
//! test reads the workspace's `cargo metadata` and fails when a crate depends
//! on a layer it may not use, or declares a Cairn dependency its code never
//! names.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Each workspace crate and the Cairn crates it may depend on (normal
/// dependencies; dev-dependencies may reach anywhere, as tests do).
const ALLOWED: &[(&str, &[&str])] = &[
    ("cairn-storage", &[]),
    ("cairn-derive", &[]),
    ("cairn-net", &["cairn-storage"]),
    ("cairn-server", &["cairn-storage", "cairn-net"]),
    ("cairn", &["cairn-storage", "cairn-net", "cairn-derive"]),
    ("cairn-bench", &["cairn", "cairn-server", "cairn-net", "cairn-storage"]),
    (
        "cairn-cli",
        &["cairn", "cairn-storage", "cairn-net", "cairn-server", "cairn-bench"],
    ),
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

/// Every `.rs` file's text under `dir`, concatenated.
fn sources(dir: &Path) -> String {
    let mut text = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                text.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    text
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
