//! Header and data digests: CRC-32C (Castagnoli), initial value and final XOR 0xFFFFFFFF,
//! sent as a little-endian u32.
//!
//! The `crc32c` crate picks the SSE4.2 `crc32` instruction (x86-64) or the ARMv8 CRC
//! instructions at run time and falls back to tables elsewhere; its `crc32c_append` chains the
//! finished CRC of one piece into the next, which is what a data digest over data arriving in
//! pieces needs.

/// The header digest of `header` (the HLEN bytes of a PDU header).
pub fn header_digest(header: &[u8]) -> u32 {
    crc32c::crc32c(header)
}

/// The data digest of `data` in one piece.
pub fn data_digest(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// A data digest computed over data that arrives or leaves in pieces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataDigest(u32);

impl DataDigest {
    /// An empty digest.
    pub fn new() -> Self {
        DataDigest(0)
    }

    /// Adds the next piece of data.
    pub fn update(&mut self, data: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, data);
    }

    /// The digest of everything added so far.
    pub fn value(&self) -> u32 {
        self.0
    }
}
