//! A tiny PRNG (SplitMix64): enough to spread dynamic allocations, no crate needed.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A fixed sequence, for tests and benchmarks.
    pub fn seeded(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// Seeded from the process's per-instance hash keys, which std draws from the OS.
    pub fn from_entropy() -> Rng {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x6e6f_6465_706f_7274);
        Rng { state: h.finish() }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`). The modulo bias is below 2^-40 for our sizes.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_seeds_differ() {
        // Two RandomStates in one process get different keys; a fixed seed would not.
        let a = Rng::from_entropy().next_u64();
        let b = Rng::from_entropy().next_u64();
        assert_ne!(a, b);
    }

    #[test]
    fn below_stays_below() {
        let mut r = Rng::seeded(1);
        for n in [1u64, 2, 3, 7, 1000, 65535] {
            for _ in 0..200 {
                assert!(r.below(n) < n);
            }
        }
    }
}
