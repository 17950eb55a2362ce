//! Replays fuzz corpora under `cargo test` on stable: included (by `#[path]`)
//! into the `tests/fuzz_corpus.rs` of each workspace crate that owns a
//! target. Every file of `fuzz/corpus/<target>/` is run through the target's
//! `run`, then every crash input cargo-fuzz left in `fuzz/artifacts/<target>/`
//! (if any), so a crash found on nightly stays a failing test until fixed.

use std::path::{Path, PathBuf};

/// The `fuzz/` directory, from the including crate's `crates/<name>/`.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir` in name order (none if it does not exist).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("read a corpus directory").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `run` on every input of `target`'s corpus (which must not be empty:
/// a missing corpus would make the test pass without testing anything) and
/// artifacts; a panic names the input.
pub fn replay(target: &str, run: fn(&[u8])) {
    let corpus = fuzz_dir().join("corpus").join(target);
    let seeds = inputs(&corpus);
    assert!(!seeds.is_empty(), "the corpus {} is empty or missing", corpus.display());
    let artifacts = inputs(&fuzz_dir().join("artifacts").join(target));
    for file in seeds.iter().chain(&artifacts) {
        let data = std::fs::read(file).expect("read a corpus input");
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "target {target} panicked on {}", file.display());
    }
}

/// Writes `data` as the seed input `name` of `target` (for the ignored tests
/// that regenerate the seeds from real encodings).
pub fn write_seed(target: &str, name: &str, data: &[u8]) {
    let dir = fuzz_dir().join("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("create a corpus directory");
    std::fs::write(dir.join(name), data).expect("write a seed input");
}
