//! Shared pieces of rtgt's fuzz targets: a byte reader for structured inputs, the fixed
//! objects the sans-I/O targets run against, and (in [`live`]) in-process targets on the
//! simulated fabric for the targets that go through the real runtime.
//!
//! Every target is a property check, not just "does not crash": decoders must round-trip what
//! they accept, state machines must keep their invariants, and the live targets must keep
//! serving a second, independent host with its data intact after every input.

pub mod live;
pub mod nvme;

/// Reads structured values off the front of a fuzz input; past the end everything is zero.
pub struct Bytes<'a> {
    b: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// A reader over `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Self { b }
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }

    /// Bytes left.
    pub fn len(&self) -> usize {
        self.b.len()
    }

    /// One byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.b.split_first() {
            Some((&v, rest)) => {
                self.b = rest;
                v
            }
            None => 0,
        }
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// Up to `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.b.len());
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        a
    }

    /// Exactly `N` bytes, zero-padded.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let t = self.take(N);
        out[..t.len()].copy_from_slice(t);
        out
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let r = self.b;
        self.b = &[];
        r
    }
}
