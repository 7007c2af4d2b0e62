//! A small seeded PRNG (xoshiro256** seeded through SplitMix64) for `shuffle`.
//!
//! Written here rather than taken from a crate so that the shuffle order is part of this
//! module's contract: the same `(seed, pass)` gives the same order on every platform and
//! every version of the dependencies.

use crate::rng::SplitMix64;

/// xoshiro256** (Blackman and Vigna).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// The generator for pass `pass` of a shuffle seeded with `seed`.
    pub(super) fn new(seed: u64, pass: u64) -> Self {
        let first = SplitMix64::new(seed).next_u64();
        let mut state = SplitMix64::new(first ^ pass.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let s = [state.next_u64(), state.next_u64(), state.next_u64(), state.next_u64()];
        // The all-zero state is the one fixed point of xoshiro; SplitMix64 never yields four
        // zeros in a row, but keep the generator total anyway.
        if s == [0; 4] { Rng { s: [1, 0, 0, 0] } } else { Rng { s } }
    }

    /// The next 64 random bits.
    pub(super) fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = self.s;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s1 << 17;
        let s2 = s2 ^ s0;
        let s3 = s3 ^ s1;
        let s1 = s1 ^ s2;
        let s0 = s0 ^ s3;
        let s2 = s2 ^ t;
        let s3 = s3.rotate_left(45);
        self.s = [s0, s1, s2, s3];
        result
    }

    /// A uniformly distributed integer in `0..bound` (Lemire's method, unbiased); 0 when
    /// `bound` is 0.
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        let mut product = u128::from(self.next_u64()) * u128::from(bound);
        let mut low = product as u64;
        if low < bound {
            let threshold = bound.wrapping_neg() % bound;
            while low < threshold {
                product = u128::from(self.next_u64()) * u128::from(bound);
                low = product as u64;
            }
        }
        (product >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_pass_dependent() {
        let a: Vec<u64> =
            (0..8).map(|_| 0).scan(Rng::new(7, 0), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> =
            (0..8).map(|_| 0).scan(Rng::new(7, 0), |r, _| Some(r.next_u64())).collect();
        let c: Vec<u64> =
            (0..8).map(|_| 0).scan(Rng::new(7, 1), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn below_stays_in_bounds_and_covers() {
        let mut rng = Rng::new(42, 0);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            let i = rng.below(7);
            assert!(i < 7);
            seen[i as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.below(1), 0);
        assert!(rng.below(u64::MAX) < u64::MAX);
    }
}
