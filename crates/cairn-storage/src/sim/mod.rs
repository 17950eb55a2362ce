//! Deterministic simulation for tests (cargo feature `sim`): a simulated
//! disk ([`SimDisk`]) that keeps every file in memory, records every write,
//! fsync and directory change, injects I/O faults, and builds the disk images
//! a power loss could leave — the tool behind `tests/crash_images/`
//! (TigerBeetle's `src/testing/storage.zig` is the model). Tool interface
//! (see the crate docs): tests only, never the upper layers.
//!
//! Everything random here is drawn from a [`SimRng`] seeded by the caller,
//! so a failing run replays exactly from its seed.

mod disk;

pub use disk::{Fault, FaultKind, ImageKind, OpKind, SimDisk, SimStats, SECTOR_SIZE};

/// A small, fast, seedable pseudo-random generator (splitmix64). Not for
/// cryptography; for choosing which writes a simulated crash keeps.
#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// A number in `0..n` (`n` > 0; the tiny modulo bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "SimRng::below(0)");
        self.next_u64() % n
    }

    /// A number in `lo..hi` (`lo < hi`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

/// The splitmix64 finaliser: a bijective mix of 64 bits, also handy to
/// derive independent seeds (`mix64(seed ^ index)`).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_replays_from_its_seed_and_stays_in_range() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let r = a.range(3, 9);
            assert!((3..9).contains(&r));
            b.range(3, 9);
        }
        assert_ne!(SimRng::new(1).next_u64(), SimRng::new(2).next_u64());
    }
}
