//! The Park–Miller minimal standard generator (Park & Miller, CACM 1988), the
//! generator OO1 prescribes: `x' = 16807 · x mod (2³¹ − 1)`.
//!
//! Every system builds its database and draws its random choices from this
//! generator, so they all hold the identical graph and do the identical work.

/// The modulus, 2³¹ − 1.
pub const MODULUS: u64 = 2_147_483_647;
/// The multiplier.
pub const MULTIPLIER: u64 = 16_807;

/// A Park–Miller stream. Its state is always in `1..MODULUS`.
#[derive(Clone, Debug)]
pub struct ParkMiller {
    state: u64,
}

impl ParkMiller {
    /// A stream from `seed`, folded into `1..MODULUS` (0 and multiples of the
    /// modulus would make the stream stick at 0).
    pub fn new(seed: u64) -> ParkMiller {
        let s = seed % MODULUS;
        ParkMiller {
            state: if s == 0 { 1 } else { s },
        }
    }

    /// The next value, in `1..MODULUS`.
    pub fn next_u31(&mut self) -> u32 {
        self.state = self.state * MULTIPLIER % MODULUS;
        self.state as u32
    }

    /// The paper's `rand[1..k]`: a value in `1..=k`, as `1 + next mod k`.
    /// `k` must be at least 1.
    pub fn rand(&mut self, k: u32) -> u32 {
        debug_assert!(k >= 1, "rand[1..0] is empty");
        1 + self.next_u31() % k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_one_starts_with_the_published_values() {
        let mut r = ParkMiller::new(1);
        let first: Vec<u32> = (0..5).map(|_| r.next_u31()).collect();
        assert_eq!(first, [16_807, 282_475_249, 1_622_650_073, 984_943_658, 1_144_108_930]);
    }

    #[test]
    fn the_ten_thousandth_value_from_seed_one_is_park_and_millers_check() {
        // Park & Miller give x(10000) = 1043618065 for x(0) = 1 as the test
        // of a correct implementation.
        let mut r = ParkMiller::new(1);
        let mut last = 0;
        for _ in 0..10_000 {
            last = r.next_u31();
        }
        assert_eq!(last, 1_043_618_065);
    }

    #[test]
    fn rand_stays_in_range() {
        let mut r = ParkMiller::new(7);
        for k in [1, 2, 10, 200, 100_000] {
            for _ in 0..1000 {
                let v = r.rand(k);
                assert!((1..=k).contains(&v));
            }
        }
    }
}
