//! Per-channel I/O statistics, summed per bdev for `bdev_get_iostat`.
//!
//! Only the channel's reactor writes its counters (a relaxed load and store, no locked
//! instruction, no lock). A reset (`bdev_reset_iostat`, `bdev_get_iostat reset_mode`) must not
//! race with those stores, so it never writes a counter: it moves the channel's **baseline**
//! (what the counters read at the reset, kept on the RPC side) and reported values are the
//! counters minus the baseline. Maxima and minima are reset by storing their start values: a
//! store racing with the writer's compare-and-store can only leave a value observed around the
//! reset, which is what a reset means for them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::spdk_hist::HistogramData;
use super::{BdevIo, BdevOp, IoStatus};

/// Latency histogram buckets: bucket `i < HIST_BUCKETS - 1` counts latencies under
/// 2^i µs (1 µs … 4.2 s), the last one everything longer.
pub const HIST_BUCKETS: usize = 24;

/// The histogram bucket of a latency.
pub fn hist_bucket(lat_ns: u64) -> usize {
    let us = lat_ns / 1000;
    ((64 - us.leading_zeros()) as usize).min(HIST_BUCKETS - 1)
}

/// The upper bound of bucket `i` in seconds (`None`: the last, unbounded one).
pub fn hist_bound_secs(i: usize) -> Option<f64> {
    (i < HIST_BUCKETS - 1).then(|| (1u64 << i) as f64 * 1e-6)
}

/// Latency histograms of the kinds metrics report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistKind {
    /// Reads.
    Read = 0,
    /// Writes.
    Write = 1,
    /// Flushes.
    Flush = 2,
}

impl HistKind {
    /// Every kind, in index order.
    pub const ALL: [HistKind; 3] = [HistKind::Read, HistKind::Write, HistKind::Flush];

    /// Its name in metric labels and RPC answers.
    pub fn name(self) -> &'static str {
        match self {
            HistKind::Read => "read",
            HistKind::Write => "write",
            HistKind::Flush => "flush",
        }
    }
}

/// A latency histogram of one kind: bucket counts (non-cumulative) and the sum of the
/// latencies, never reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Histogram {
    /// Counts per bucket (see [`hist_bucket`]).
    pub buckets: [u64; HIST_BUCKETS],
    /// Sum of the latencies counted, ns.
    pub sum_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: [0; HIST_BUCKETS],
            sum_ns: 0,
        }
    }
}

impl Histogram {
    /// Observations counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// What a reset clears (SPDK's `reset_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetMode {
    /// Every counter, maximum and minimum.
    All,
    /// Only the maximum and minimum latencies.
    MaxMin,
}

/// Counters of one channel. Only the owning reactor writes them (no contention); any thread
/// may read them.
#[derive(Debug)]
pub struct ChannelStats {
    /// The reactor that opened the channel, as `framework_get_reactors` numbers its thread
    /// (index + 1; 0 for a channel opened outside a reactor).
    thread_id: u64,
    /// The counters at the last reset (RPC side only).
    baseline: Mutex<IoStatSnapshot>,
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
    max_unmap_latency_ns: AtomicU64,
    min_read_latency_ns: AtomicU64,
    min_write_latency_ns: AtomicU64,
    min_unmap_latency_ns: AtomicU64,
    flush_latency_ns: AtomicU64,
    /// Latency histograms by [`HistKind`]: the buckets, then the sum; never reset (metrics
    /// are cumulative).
    hist: [[AtomicU64; HIST_BUCKETS + 1]; 3],
    /// The channel's SPDK histogram (`bdev_enable_histogram`), as its reactor last set it.
    spdk_hist: Mutex<Option<Arc<HistogramData>>>,
}

impl Default for ChannelStats {
    fn default() -> Self {
        Self::new(0)
    }
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

fn lower(a: &AtomicU64, v: u64) {
    if v < a.load(Ordering::Relaxed) {
        a.store(v, Ordering::Relaxed);
    }
}

/// A minimum never observed reads as 0 (SPDK's convention).
fn min_or_zero(v: u64) -> u64 {
    if v == u64::MAX { 0 } else { v }
}

impl ChannelStats {
    /// Counters for a channel opened on thread `thread_id` (see [`ChannelStats::thread_id`]).
    pub fn new(thread_id: u64) -> Self {
        let z = || AtomicU64::new(0);
        let m = || AtomicU64::new(u64::MAX);
        Self {
            thread_id,
            baseline: Mutex::new(IoStatSnapshot::default()),
            bytes_read: z(),
            num_read_ops: z(),
            bytes_written: z(),
            num_write_ops: z(),
            bytes_unmapped: z(),
            num_unmap_ops: z(),
            num_flush_ops: z(),
            num_write_zeroes_ops: z(),
            num_compare_ops: z(),
            num_errors: z(),
            read_latency_ns: z(),
            write_latency_ns: z(),
            unmap_latency_ns: z(),
            max_read_latency_ns: z(),
            max_write_latency_ns: z(),
            max_unmap_latency_ns: z(),
            min_read_latency_ns: m(),
            min_write_latency_ns: m(),
            min_unmap_latency_ns: m(),
            flush_latency_ns: z(),
            hist: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            spdk_hist: Mutex::new(None),
        }
    }

    /// Adds this channel's histogram of `kind` into `acc`.
    pub fn add_histogram(&self, kind: HistKind, acc: &mut Histogram) {
        let h = &self.hist[kind as usize];
        for (a, b) in acc.buckets.iter_mut().zip(h) {
            *a += b.load(Ordering::Relaxed);
        }
        acc.sum_ns += h[HIST_BUCKETS].load(Ordering::Relaxed);
    }

    fn observe(&self, kind: HistKind, lat: u64) {
        let h = &self.hist[kind as usize];
        bump(&h[hist_bucket(lat)], 1);
        bump(&h[HIST_BUCKETS], lat);
    }

    /// The thread that owns the channel: the reactor's index + 1, as `framework_get_reactors`
    /// and `thread_get_*` number lightweight threads.
    pub fn thread_id(&self) -> u64 {
        self.thread_id
    }

    /// The channel's SPDK histogram (set by its reactor when `bdev_enable_histogram` changes).
    pub fn set_spdk_histogram(&self, h: Option<Arc<HistogramData>>) {
        *self.spdk_hist.lock() = h;
    }

    /// The channel's SPDK histogram, if one is on.
    pub fn spdk_histogram(&self) -> Option<Arc<HistogramData>> {
        self.spdk_hist.lock().clone()
    }

    /// Records an I/O completed at `now_ns` ([`crate::reactor::instant_ns`] form); returns its
    /// latency in nanoseconds.
    pub fn record(&self, io: &BdevIo, block_size: u64, now_ns: u64) -> u64 {
        let lat = if io.submitted_ns == 0 {
            0
        } else {
            now_ns.saturating_sub(io.submitted_ns)
        };
        if io.status != IoStatus::Success {
            bump(&self.num_errors, 1);
            return lat;
        }
        match io.op {
            BdevOp::Read { num_blocks, .. } => {
                bump(&self.num_read_ops, 1);
                bump(&self.bytes_read, num_blocks * block_size);
                bump(&self.read_latency_ns, lat);
                raise(&self.max_read_latency_ns, lat);
                lower(&self.min_read_latency_ns, lat);
                self.observe(HistKind::Read, lat);
            }
            BdevOp::Write { num_blocks, .. } => {
                bump(&self.num_write_ops, 1);
                bump(&self.bytes_written, num_blocks * block_size);
                bump(&self.write_latency_ns, lat);
                raise(&self.max_write_latency_ns, lat);
                lower(&self.min_write_latency_ns, lat);
                self.observe(HistKind::Write, lat);
            }
            BdevOp::Unmap { num_blocks, .. } => {
                bump(&self.num_unmap_ops, 1);
                bump(&self.bytes_unmapped, num_blocks * block_size);
                bump(&self.unmap_latency_ns, lat);
                raise(&self.max_unmap_latency_ns, lat);
                lower(&self.min_unmap_latency_ns, lat);
            }
            BdevOp::Flush => {
                bump(&self.num_flush_ops, 1);
                bump(&self.flush_latency_ns, lat);
                self.observe(HistKind::Flush, lat);
            }
            BdevOp::WriteZeroes { .. } => bump(&self.num_write_zeroes_ops, 1),
            BdevOp::Compare { .. } => bump(&self.num_compare_ops, 1),
        }
        lat
    }

    /// The raw counters (no baseline subtracted).
    fn raw(&self) -> IoStatSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoStatSnapshot {
            bytes_read: l(&self.bytes_read),
            num_read_ops: l(&self.num_read_ops),
            bytes_written: l(&self.bytes_written),
            num_write_ops: l(&self.num_write_ops),
            bytes_unmapped: l(&self.bytes_unmapped),
            num_unmap_ops: l(&self.num_unmap_ops),
            num_flush_ops: l(&self.num_flush_ops),
            num_write_zeroes_ops: l(&self.num_write_zeroes_ops),
            num_compare_ops: l(&self.num_compare_ops),
            num_errors: l(&self.num_errors),
            read_latency_ns: l(&self.read_latency_ns),
            write_latency_ns: l(&self.write_latency_ns),
            unmap_latency_ns: l(&self.unmap_latency_ns),
            max_read_latency_ns: l(&self.max_read_latency_ns),
            max_write_latency_ns: l(&self.max_write_latency_ns),
            max_unmap_latency_ns: l(&self.max_unmap_latency_ns),
            min_read_latency_ns: min_or_zero(l(&self.min_read_latency_ns)),
            min_write_latency_ns: min_or_zero(l(&self.min_write_latency_ns)),
            min_unmap_latency_ns: min_or_zero(l(&self.min_unmap_latency_ns)),
            flush_latency_ns: l(&self.flush_latency_ns),
        }
    }

    /// This channel's statistics since its last reset.
    pub fn snapshot(&self) -> IoStatSnapshot {
        self.raw().since(&self.baseline.lock())
    }

    /// Adds this channel's statistics since its last reset into `acc`.
    pub fn add_to(&self, acc: &mut IoStatSnapshot) {
        acc.merge(&self.snapshot());
    }

    /// Resets this channel's statistics (see the module documentation for why this never
    /// writes a counter).
    pub fn reset(&self, mode: ResetMode) {
        for (max, min) in [
            (&self.max_read_latency_ns, &self.min_read_latency_ns),
            (&self.max_write_latency_ns, &self.min_write_latency_ns),
            (&self.max_unmap_latency_ns, &self.min_unmap_latency_ns),
        ] {
            max.store(0, Ordering::Relaxed);
            min.store(u64::MAX, Ordering::Relaxed);
        }
        if mode == ResetMode::All {
            *self.baseline.lock() = self.raw();
        }
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
    /// Largest unmap latency, ns.
    pub max_unmap_latency_ns: u64,
    /// Smallest read latency, ns (0: none yet).
    pub min_read_latency_ns: u64,
    /// Smallest write latency, ns (0: none yet).
    pub min_write_latency_ns: u64,
    /// Smallest unmap latency, ns (0: none yet).
    pub min_unmap_latency_ns: u64,
    /// Sum of flush latencies, ns.
    pub flush_latency_ns: u64,
}

/// The smaller non-zero of two minima (0 means none observed).
fn min_seen(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

impl IoStatSnapshot {
    /// Adds `o`'s counters, keeps the larger maxima and the smaller minima.
    pub fn merge(&mut self, o: &IoStatSnapshot) {
        self.bytes_read += o.bytes_read;
        self.num_read_ops += o.num_read_ops;
        self.bytes_written += o.bytes_written;
        self.num_write_ops += o.num_write_ops;
        self.bytes_unmapped += o.bytes_unmapped;
        self.num_unmap_ops += o.num_unmap_ops;
        self.num_flush_ops += o.num_flush_ops;
        self.num_write_zeroes_ops += o.num_write_zeroes_ops;
        self.num_compare_ops += o.num_compare_ops;
        self.num_errors += o.num_errors;
        self.read_latency_ns += o.read_latency_ns;
        self.write_latency_ns += o.write_latency_ns;
        self.unmap_latency_ns += o.unmap_latency_ns;
        self.flush_latency_ns += o.flush_latency_ns;
        self.max_read_latency_ns = self.max_read_latency_ns.max(o.max_read_latency_ns);
        self.max_write_latency_ns = self.max_write_latency_ns.max(o.max_write_latency_ns);
        self.max_unmap_latency_ns = self.max_unmap_latency_ns.max(o.max_unmap_latency_ns);
        self.min_read_latency_ns = min_seen(self.min_read_latency_ns, o.min_read_latency_ns);
        self.min_write_latency_ns = min_seen(self.min_write_latency_ns, o.min_write_latency_ns);
        self.min_unmap_latency_ns = min_seen(self.min_unmap_latency_ns, o.min_unmap_latency_ns);
    }

    /// Counters since `base` (wrapping), maxima and minima as they are.
    fn since(mut self, base: &IoStatSnapshot) -> IoStatSnapshot {
        let d = |a: &mut u64, b: u64| *a = a.wrapping_sub(b);
        d(&mut self.bytes_read, base.bytes_read);
        d(&mut self.num_read_ops, base.num_read_ops);
        d(&mut self.bytes_written, base.bytes_written);
        d(&mut self.num_write_ops, base.num_write_ops);
        d(&mut self.bytes_unmapped, base.bytes_unmapped);
        d(&mut self.num_unmap_ops, base.num_unmap_ops);
        d(&mut self.num_flush_ops, base.num_flush_ops);
        d(&mut self.num_write_zeroes_ops, base.num_write_zeroes_ops);
        d(&mut self.num_compare_ops, base.num_compare_ops);
        d(&mut self.num_errors, base.num_errors);
        d(&mut self.read_latency_ns, base.read_latency_ns);
        d(&mut self.write_latency_ns, base.write_latency_ns);
        d(&mut self.unmap_latency_ns, base.unmap_latency_ns);
        d(&mut self.flush_latency_ns, base.flush_latency_ns);
        self
    }

    /// Applies a reset to a snapshot (of closed channels).
    pub fn reset(&mut self, mode: ResetMode) {
        match mode {
            ResetMode::All => *self = IoStatSnapshot::default(),
            ResetMode::MaxMin => {
                self.max_read_latency_ns = 0;
                self.max_write_latency_ns = 0;
                self.max_unmap_latency_ns = 0;
                self.min_read_latency_ns = 0;
                self.min_write_latency_ns = 0;
                self.min_unmap_latency_ns = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(op: BdevOp, submitted_ns: u64, status: IoStatus) -> BdevIo {
        let mut io = BdevIo::new(op, 0);
        io.submitted_ns = submitted_ns;
        io.status = status;
        io
    }

    fn read(blocks: u64) -> BdevOp {
        BdevOp::Read {
            offset_blocks: 0,
            num_blocks: blocks,
        }
    }

    fn write() -> BdevOp {
        BdevOp::Write {
            offset_blocks: 0,
            num_blocks: 1,
            fua: false,
        }
    }

    fn unmap() -> BdevOp {
        BdevOp::Unmap {
            offset_blocks: 0,
            num_blocks: 8,
        }
    }

    #[test]
    fn latencies_have_minima_and_maxima_per_kind() {
        let c = ChannelStats::new(2);
        assert_eq!(c.thread_id(), 2);
        assert_eq!(
            c.snapshot(),
            IoStatSnapshot::default(),
            "minima read 0 before any I/O"
        );
        c.record(&done(read(1), 100, IoStatus::Success), 512, 400);
        c.record(&done(read(2), 100, IoStatus::Success), 512, 150);
        c.record(&done(write(), 10, IoStatus::Success), 512, 1010);
        c.record(&done(unmap(), 10, IoStatus::Success), 512, 80);
        c.record(&done(unmap(), 10, IoStatus::Success), 512, 30);
        c.record(&done(read(1), 10, IoStatus::Error(5)), 512, 99_999);
        let s = c.snapshot();
        assert_eq!((s.num_read_ops, s.bytes_read, s.num_errors), (2, 1536, 1));
        assert_eq!(
            (
                s.min_read_latency_ns,
                s.max_read_latency_ns,
                s.read_latency_ns
            ),
            (50, 300, 350)
        );
        assert_eq!(
            (s.min_write_latency_ns, s.max_write_latency_ns),
            (1000, 1000)
        );
        assert_eq!((s.min_unmap_latency_ns, s.max_unmap_latency_ns), (20, 70));
    }

    #[test]
    fn histograms_bucket_by_powers_of_two_microseconds() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(999), 0, "under 1 µs");
        assert_eq!(hist_bucket(1_000), 1, "1 µs is under 2 µs");
        assert_eq!(hist_bucket(3_999), 2);
        assert_eq!(hist_bucket(4_000), 3);
        assert_eq!(hist_bucket(u64::MAX), HIST_BUCKETS - 1);
        assert_eq!(hist_bound_secs(0), Some(1e-6));
        assert_eq!(hist_bound_secs(HIST_BUCKETS - 1), None);
        // Every latency is under its bucket's bound and at or over the previous one's.
        for lat in [1u64, 500, 1_000, 1_999, 2_000, 123_456, 4_000_000_000] {
            let i = hist_bucket(lat);
            let secs = lat as f64 * 1e-9;
            if let Some(b) = hist_bound_secs(i) {
                assert!(secs < b, "{lat} ns in bucket {i}");
            }
            if i > 0 {
                assert!(
                    secs >= hist_bound_secs(i - 1).unwrap() - 1e-12,
                    "{lat} ns in bucket {i}"
                );
            }
        }
        let c = ChannelStats::new(1);
        c.record(&done(read(1), 1, IoStatus::Success), 512, 1 + 1_500);
        c.record(
            &done(BdevOp::Flush, 1, IoStatus::Success),
            512,
            1 + 9_000_000,
        );
        let mut h = Histogram::default();
        c.add_histogram(HistKind::Read, &mut h);
        assert_eq!((h.buckets[1], h.count(), h.sum_ns), (1, 1, 1_500));
        let mut f = Histogram::default();
        c.add_histogram(HistKind::Flush, &mut f);
        assert_eq!(f.buckets[14], 1, "9 ms is under 2^14 µs");
        assert_eq!(c.snapshot().flush_latency_ns, 9_000_000);
        c.reset(ResetMode::All);
        let mut again = Histogram::default();
        c.add_histogram(HistKind::Read, &mut again);
        assert_eq!(again, h, "histograms are never reset");
    }

    #[test]
    fn resets_move_the_baseline_and_leave_later_ios_counted() {
        let c = ChannelStats::new(1);
        for lat in [10, 20, 30] {
            c.record(&done(read(1), 1, IoStatus::Success), 512, 1 + lat);
        }
        c.reset(ResetMode::MaxMin);
        let s = c.snapshot();
        assert_eq!(s.num_read_ops, 3, "maxmin keeps the counters");
        assert_eq!((s.min_read_latency_ns, s.max_read_latency_ns), (0, 0));
        c.record(&done(read(1), 1, IoStatus::Success), 512, 6);
        c.reset(ResetMode::All);
        assert_eq!(c.snapshot(), IoStatSnapshot::default());
        c.record(&done(read(1), 1, IoStatus::Success), 512, 8);
        let s = c.snapshot();
        assert_eq!(
            (s.num_read_ops, s.bytes_read, s.read_latency_ns),
            (1, 512, 7)
        );
        assert_eq!((s.min_read_latency_ns, s.max_read_latency_ns), (7, 7));
    }

    #[test]
    fn merged_minima_ignore_channels_that_saw_none() {
        let mut a = IoStatSnapshot {
            min_read_latency_ns: 0,
            max_read_latency_ns: 0,
            ..Default::default()
        };
        let b = IoStatSnapshot {
            num_read_ops: 2,
            min_read_latency_ns: 9,
            max_read_latency_ns: 40,
            ..Default::default()
        };
        a.merge(&b);
        a.merge(&IoStatSnapshot {
            num_read_ops: 1,
            min_read_latency_ns: 5,
            max_read_latency_ns: 5,
            ..Default::default()
        });
        assert_eq!(
            (a.num_read_ops, a.min_read_latency_ns, a.max_read_latency_ns),
            (3, 5, 40)
        );
    }
}
