//! Atomic compare-and-write (SCSI COMPARE AND WRITE, NVMe fused Compare + Write): a range
//! lock per bdev that the data path uses without a lock per I/O, and the miscompare offset.
//!
//! # Design
//!
//! A compare-and-write must be atomic against every other write to its blocks, from any
//! reactor, queue or protocol. rtgt's reactors each submit I/O to a bdev independently,
//! so the lock has two halves, both plain owned structures driven by messages:
//!
//! - a [`RangeGate`] per bdev **per reactor**, owned by that reactor. Every write-class
//!   command (write, write zeroes, unmap/deallocate, write same, and a compare-and-write's
//!   own write) asks [`RangeGate::admit`] before it is submitted; with nothing locked — the
//!   normal case — that is one `is_empty` test. A command that overlaps a locked range is
//!   parked on its reactor (in the same place requests wait for buffers) and re-admitted
//!   when the lock is released. Completions report to [`RangeGate::completed`], again a
//!   single test when nothing is locked.
//! - a [`LockCoordinator`] per bdev, owned by the bdev's home reactor. A compare-and-write
//!   sends it a request; the coordinator grants non-overlapping ranges at once and queues
//!   overlapping ones in arrival order (so two compare-and-writes never deadlock), then
//!   the lock is broadcast to every reactor. Each reactor installs it in its gate, counts
//!   its own admitted-but-unfinished overlapping writes (walking its outstanding requests —
//!   only on this rare path), and acknowledges when that count reaches zero. When every
//!   reactor has acknowledged, the owner holds the range: no other write to it is running
//!   or can start anywhere. It reads, compares ([`first_mismatch`]), writes if equal (its
//!   own write passes the gates as the owner), and releases; the release is broadcast and
//!   parked writes resume.
//!
//! Reads are not blocked: they see the blocks before or after the write, as with any
//! write. Cost: a compare-and-write pays two message hops plus one broadcast round; other
//! I/O pays nothing while no compare-and-write is in flight, and a branch per write
//! otherwise. Nothing allocates: gates and coordinator are fixed-size arrays; beyond
//! [`coordinator::QUEUE_CAPACITY`] waiting compare-and-writes the request is refused as busy
//! (SCSI BUSY, NVMe Command Interrupted — both retried by the host).
//!
//! A miscompare completes SCSI COMPARE AND WRITE with MISCOMPARE sense, INFORMATION = the
//! offset ([`crate::scsi::caw::miscompare_sense`]), and NVMe Compare with Compare Failure
//! ([`crate::nvme::Status::COMPARE_FAILURE`]); the fused Write is then aborted.

pub mod coordinator;
pub mod gate;

#[cfg(test)]
mod tests;

pub use coordinator::{LockCoordinator, Request};
pub use gate::{Admit, GateFull, RangeGate};

/// A range of logical blocks `[lba, lba + blocks)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LbaRange {
    /// First block.
    pub lba: u64,
    /// Number of blocks (0: an empty range, overlapping nothing).
    pub blocks: u64,
}

impl LbaRange {
    /// A range.
    pub const fn new(lba: u64, blocks: u64) -> LbaRange {
        LbaRange { lba, blocks }
    }

    /// The block after the last one (saturating).
    pub const fn end(&self) -> u64 {
        self.lba.saturating_add(self.blocks)
    }

    /// Do the two ranges share a block?
    pub const fn overlaps(&self, other: LbaRange) -> bool {
        self.blocks > 0 && other.blocks > 0 && self.lba < other.end() && other.lba < self.end()
    }
}

/// A lock, as numbered by its bdev's coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId(pub u64);

/// Who holds a lock: an opaque tag the exec layer chooses (e.g. reactor index and request
/// slot of the compare-and-write), so that its own write passes the gates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner(pub u64);

/// The offset of the first byte where `expected` (the host's compare data) and `actual`
/// (what was read) differ, or `None` if they are equal. Slices of different lengths differ
/// at the shorter length.
pub fn first_mismatch(expected: &[u8], actual: &[u8]) -> Option<usize> {
    let n = expected.len().min(actual.len());
    let (e, a) = (&expected[..n], &actual[..n]);
    // Compare 8 bytes at a time, then find the byte inside the first unequal word.
    let words = n / 8;
    let mut start = words * 8;
    for w in 0..words {
        let o = w * 8;
        if e[o..o + 8] != a[o..o + 8] {
            start = o;
            break;
        }
    }
    match e[start..].iter().zip(&a[start..]).position(|(x, y)| x != y) {
        Some(i) => Some(start + i),
        None if expected.len() != actual.len() => Some(n),
        None => None,
    }
}
