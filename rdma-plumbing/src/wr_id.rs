//! The layout of a work-request id, one for every RDMA transport.
//!
//! ```text
//!  63      56 55     48 47                              16 15             0
//! +----------+---------+----------------------------------+----------------+
//! |   kind   |    0    |               key                |   generation   |
//! +----------+---------+----------------------------------+----------------+
//! ```
//!
//! - *kind*: what the work request is (a transport's own constants: a receive, a response
//!   SEND, an RDMA READ, the drain marker…), so a completion is dispatched without a lookup;
//! - *key*: which object it belongs to (a receive slot, a request slot, a queue pair; a
//!   transport may pack two 16-bit keys, e.g. channel and slot);
//! - *generation*: which incarnation of that object posted it. An object reused for another
//!   connection (a slot freed and taken again, a queue pair destroyed by a drain timeout
//!   with completions still to come) gets a new generation, and a completion whose generation
//!   does not match is stale and ignored.

/// A work-request id, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WrId {
    /// What the work request is (the transport's constants).
    pub kind: u8,
    /// Which object it belongs to.
    pub key: u32,
    /// Which incarnation of the object posted it.
    pub generation: u16,
}

impl WrId {
    /// An id.
    #[inline]
    pub const fn new(kind: u8, key: u32, generation: u16) -> Self {
        WrId {
            kind,
            key,
            generation,
        }
    }

    /// The 64-bit `wr_id`.
    #[inline]
    pub const fn pack(self) -> u64 {
        (self.kind as u64) << 56 | (self.key as u64) << 16 | self.generation as u64
    }

    /// The fields of a `wr_id` (bits 48..56 are ignored).
    #[inline]
    pub const fn unpack(wr_id: u64) -> Self {
        WrId {
            kind: (wr_id >> 56) as u8,
            key: (wr_id >> 16) as u32,
            generation: wr_id as u16,
        }
    }

    /// A key made of two 16-bit halves (`hi` in the upper half).
    #[inline]
    pub const fn pair(hi: u16, lo: u16) -> u32 {
        (hi as u32) << 16 | lo as u32
    }

    /// The two 16-bit halves of the key (`(hi, lo)`), for keys made with [`WrId::pair`].
    #[inline]
    pub const fn halves(self) -> (u16, u16) {
        ((self.key >> 16) as u16, self.key as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_field_at_its_extremes() {
        for kind in [0u8, 1, 5, 0xFF] {
            for key in [0u32, 1, 0x1234_5678, u32::MAX] {
                for generation in [0u16, 1, 0xBEEF, u16::MAX] {
                    let id = WrId::new(kind, key, generation);
                    assert_eq!(WrId::unpack(id.pack()), id);
                }
            }
        }
    }

    #[test]
    fn fields_do_not_overlap() {
        assert_eq!(WrId::new(0xFF, 0, 0).pack(), 0xFF00_0000_0000_0000);
        assert_eq!(WrId::new(0, u32::MAX, 0).pack(), 0x0000_FFFF_FFFF_0000);
        assert_eq!(WrId::new(0, 0, u16::MAX).pack(), 0x0000_0000_0000_FFFF);
        // Bits 48..56 are not part of any field.
        assert_eq!(WrId::unpack(0x00FF_0000_0000_0000), WrId::new(0, 0, 0));
    }

    #[test]
    fn a_pair_key_is_two_halves() {
        let id = WrId::new(3, WrId::pair(0xABCD, 0x0102), 9);
        assert_eq!(id.halves(), (0xABCD, 0x0102));
        // The layout SRP used before it shared this one: kind | channel | slot | serial.
        assert_eq!(
            id.pack(),
            3u64 << 56 | 0xABCDu64 << 32 | 0x0102u64 << 16 | 9
        );
        assert_eq!(WrId::unpack(id.pack()).halves(), (0xABCD, 0x0102));
    }
}
