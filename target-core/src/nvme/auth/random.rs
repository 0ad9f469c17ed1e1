//! Where challenges, sequence numbers and DH exponents come from: the operating system's
//! generator in the target, a seeded deterministic one in tests and fuzzing.

use core::fmt;

/// The random source failed (the OS generator was unavailable); authentication fails with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandomUnavailable;

impl fmt::Display for RandomUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("random source unavailable")
    }
}

impl std::error::Error for RandomUnavailable {}

/// A source of random bytes.
pub trait Random {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable>;

    /// A random `u32`.
    fn u32(&mut self) -> Result<u32, RandomUnavailable> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
}

/// The operating system's cryptographic generator (`getrandom`). What the target uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsRandom;

impl Random for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable> {
        getrandom::fill(buf).map_err(|_| RandomUnavailable)
    }
}

/// A deterministic generator (SplitMix64) for tests and fuzzing: the same seed gives the same
/// challenges and exponents. Not cryptographic: never use it in the target.
#[derive(Clone, Debug)]
pub struct SeededRandom {
    state: u64,
}

impl SeededRandom {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SeededRandom {
        SeededRandom { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Random for SeededRandom {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable> {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_is_deterministic_and_os_is_not_constant() {
        let (mut a, mut b) = (SeededRandom::new(7), SeededRandom::new(7));
        let (mut x, mut y) = ([0u8; 13], [0u8; 13]);
        a.fill(&mut x).unwrap();
        b.fill(&mut y).unwrap();
        assert_eq!(x, y);
        assert_ne!(x, [0; 13]);
        assert_ne!(SeededRandom::new(8).u32(), SeededRandom::new(7).u32());
        let (mut p, mut q) = ([0u8; 32], [0u8; 32]);
        OsRandom.fill(&mut p).unwrap();
        OsRandom.fill(&mut q).unwrap();
        assert_ne!(p, q);
    }
}
