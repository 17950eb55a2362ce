//! What the benchmark tests share.

use std::path::{Path, PathBuf};

/// The `cairn` binary that serves the client-server systems: `CAIRN_BIN`,
/// else the one cargo built beside the test.
pub fn cairn_exe() -> PathBuf {
    if let Some(p) = std::env::var_os("CAIRN_BIN") {
        return PathBuf::from(p);
    }
    // This test is target/PROFILE/deps/NAME-HASH; the binary is target/PROFILE/cairn.
    let me = std::env::current_exe().expect("the test's own path");
    let bin = me
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/PROFILE/deps")
        .join(format!("cairn{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p cairn-cli` (or run `cargo test -p cairn-bench -p cairn-cli`), \
         or name a cairn binary in CAIRN_BIN",
        bin.display()
    );
    bin
}
