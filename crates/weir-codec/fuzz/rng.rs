//! The small deterministic RNG (splitmix64) of the fuzz harnesses and the tests, included by
//! `#[path]` from each: `fuzz/harness.rs`, `fuzz/json_harness.rs`, `tests/json_*.rs` and
//! `tests/common` (which adds the draws the protobuf tests use).
// Each includer uses a part of it.
#![allow(dead_code)]

/// splitmix64: tiny, deterministic, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `0..n` (0 when `n` is 0, without drawing).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}
