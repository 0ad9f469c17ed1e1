//! Maps keyed by queue pair number.
//!
//! With a shared receive queue, a receive completion names only the queue pair it came
//! through (`WorkCompletion::qp_num`): the poll group looks the connection up per received
//! command. A queue pair number is a small integer the adapter hands out, so one
//! multiplication (Fibonacci hashing) spreads it well enough; SipHash would cost more than
//! the rest of the lookup.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a queue pair number with one multiplication.
#[derive(Default, Clone, Copy, Debug)]
pub struct QpnHasher(u64);

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(GOLDEN);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(GOLDEN);
    }
}

/// A map from queue pair number to `V` (a connection's key on the poll group).
pub type QpnMap<V> = HashMap<u32, V, BuildHasherDefault<QpnHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn maps_queue_pair_numbers() {
        let mut m: QpnMap<usize> = QpnMap::default();
        for (i, qpn) in (17u32..17 + 1000).enumerate() {
            m.insert(qpn, i);
        }
        assert_eq!(m.get(&17), Some(&0));
        assert_eq!(m.get(&1016), Some(&999));
        assert_eq!(m.remove(&500), Some(483));
        assert_eq!(m.get(&500), None);
        assert_eq!(m.len(), 999);
    }

    #[test]
    fn consecutive_numbers_spread_over_the_top_bits() {
        // hashbrown picks buckets from the top 7 bits (control bytes) and the low bits: both
        // must vary for consecutive queue pair numbers.
        let b = BuildHasherDefault::<QpnHasher>::default();
        let hashes: Vec<u64> = (0x100u32..0x140).map(|q| b.hash_one(q)).collect();
        let top: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        let low: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 0x3F).collect();
        assert!(top.len() > 32, "top bits: {} distinct of 64", top.len());
        assert!(low.len() > 32, "low bits: {} distinct of 64", low.len());
    }
}
