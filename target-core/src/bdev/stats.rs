//! Per-channel I/O statistics, summed per bdev for `bdev_get_iostat`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{BdevIo, BdevOp, IoStatus};

/// Counters of one channel. Only the owning reactor writes them (no contention); any thread
/// may read them.
#[derive(Debug, Default)]
pub struct ChannelStats {
    bytes_read: AtomicU64,
    num_read_ops: AtomicU64,
    bytes_written: AtomicU64,
    num_write_ops: AtomicU64,
    bytes_unmapped: AtomicU64,
    num_unmap_ops: AtomicU64,
    num_flush_ops: AtomicU64,
    num_write_zeroes_ops: AtomicU64,
    num_compare_ops: AtomicU64,
    num_errors: AtomicU64,
    read_latency_ns: AtomicU64,
    write_latency_ns: AtomicU64,
    unmap_latency_ns: AtomicU64,
    max_read_latency_ns: AtomicU64,
    max_write_latency_ns: AtomicU64,
}

fn bump(a: &AtomicU64, v: u64) {
    // Single writer: a load and a store are enough and cheaper than a locked add.
    a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

fn raise(a: &AtomicU64, v: u64) {
    if v > a.load(Ordering::Relaxed) {
        a.store(v, Ordering::Relaxed);
    }
}

impl ChannelStats {
    /// Records an I/O completed at `now_ns` ([`crate::reactor::instant_ns`] form).
    pub fn record(&self, io: &BdevIo, block_size: u64, now_ns: u64) {
        if io.status != IoStatus::Success {
            bump(&self.num_errors, 1);
            return;
        }
        let lat = if io.submitted_ns == 0 {
            0
        } else {
            now_ns.saturating_sub(io.submitted_ns)
        };
        match io.op {
            BdevOp::Read { num_blocks, .. } => {
                bump(&self.num_read_ops, 1);
                bump(&self.bytes_read, num_blocks * block_size);
                bump(&self.read_latency_ns, lat);
                raise(&self.max_read_latency_ns, lat);
            }
            BdevOp::Write { num_blocks, .. } => {
                bump(&self.num_write_ops, 1);
                bump(&self.bytes_written, num_blocks * block_size);
                bump(&self.write_latency_ns, lat);
                raise(&self.max_write_latency_ns, lat);
            }
            BdevOp::Unmap { num_blocks, .. } => {
                bump(&self.num_unmap_ops, 1);
                bump(&self.bytes_unmapped, num_blocks * block_size);
                bump(&self.unmap_latency_ns, lat);
            }
            BdevOp::Flush => bump(&self.num_flush_ops, 1),
            BdevOp::WriteZeroes { .. } => bump(&self.num_write_zeroes_ops, 1),
            BdevOp::Compare { .. } => bump(&self.num_compare_ops, 1),
        }
    }

    /// Adds this channel's counters into `acc`.
    pub fn add_to(&self, acc: &mut IoStatSnapshot) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        acc.bytes_read += l(&self.bytes_read);
        acc.num_read_ops += l(&self.num_read_ops);
        acc.bytes_written += l(&self.bytes_written);
        acc.num_write_ops += l(&self.num_write_ops);
        acc.bytes_unmapped += l(&self.bytes_unmapped);
        acc.num_unmap_ops += l(&self.num_unmap_ops);
        acc.num_flush_ops += l(&self.num_flush_ops);
        acc.num_write_zeroes_ops += l(&self.num_write_zeroes_ops);
        acc.num_compare_ops += l(&self.num_compare_ops);
        acc.num_errors += l(&self.num_errors);
        acc.read_latency_ns += l(&self.read_latency_ns);
        acc.write_latency_ns += l(&self.write_latency_ns);
        acc.unmap_latency_ns += l(&self.unmap_latency_ns);
        acc.max_read_latency_ns = acc.max_read_latency_ns.max(l(&self.max_read_latency_ns));
        acc.max_write_latency_ns = acc.max_write_latency_ns.max(l(&self.max_write_latency_ns));
    }
}

/// Summed counters of a bdev.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IoStatSnapshot {
    /// Bytes read.
    pub bytes_read: u64,
    /// Read operations.
    pub num_read_ops: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Write operations.
    pub num_write_ops: u64,
    /// Bytes deallocated.
    pub bytes_unmapped: u64,
    /// Unmap operations.
    pub num_unmap_ops: u64,
    /// Flush operations.
    pub num_flush_ops: u64,
    /// Write-zeroes operations.
    pub num_write_zeroes_ops: u64,
    /// Compare operations.
    pub num_compare_ops: u64,
    /// Operations that failed.
    pub num_errors: u64,
    /// Sum of read latencies, ns.
    pub read_latency_ns: u64,
    /// Sum of write latencies, ns.
    pub write_latency_ns: u64,
    /// Sum of unmap latencies, ns.
    pub unmap_latency_ns: u64,
    /// Largest read latency, ns.
    pub max_read_latency_ns: u64,
    /// Largest write latency, ns.
    pub max_write_latency_ns: u64,
}
