//! Block devices: the [`Bdev`] trait, per-reactor I/O channels, the `malloc`, `null` and
//! `aio` (file or block device through io_uring, with a thread-pool fallback) backends, and the
//! `delay` virtual bdev (a base bdev whose completions are held for a configured latency).
//!
//! I/O is asynchronous and allocation-free: a caller moves a [`BdevIo`] (operation, owned data
//! buffers, a tag) into [`IoChannel::submit`] and gets it back, with a status, from
//! [`IoChannel::poll`]. A channel belongs to one reactor; the bdev behind it is shared.

mod aio;
mod compare;
mod delay;
mod malloc;
pub mod module;
mod null;
mod qos;
mod registry;
pub mod spdk_hist;
mod stats;

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use arrayvec::ArrayVec;

use crate::reactor::instant_ns;
use iobuf::IoBuf;

pub use aio::{AIO_PRODUCT, AioBdev, AioEngine, AioParams, URING_PRODUCT};
pub use delay::{DELAY_CLAIM_MODULE, DELAY_PRODUCT_NAME, DelayBdev, DelayLatency, DelayParams};
pub use malloc::{MallocBdev, MallocParams};
pub use null::{NullBdev, NullParams};
pub use qos::{MBYTE, MIN_IOS_PER_SEC, Qos, QosLimits, TIMESLICE_NS};
pub use registry::{BdevRegistry, Claim, ResizeHook};
pub use stats::{
    ChannelStats, HIST_BUCKETS, HistKind, Histogram, IoStatSnapshot, ResetMode, hist_bound_secs,
    hist_bucket,
};

/// Most data buffers one I/O may carry.
pub const MAX_IO_BUFS: usize = 32;

/// The data buffers of one I/O, in order.
pub type IoBufs = ArrayVec<IoBuf, MAX_IO_BUFS>;

/// Kinds of I/O a bdev may support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoType {
    /// Read blocks.
    Read,
    /// Write blocks.
    Write,
    /// Make written data durable.
    Flush,
    /// Write zeroes without a data buffer.
    WriteZeroes,
    /// Deallocate blocks (discard / TRIM).
    Unmap,
    /// Compare blocks with a buffer.
    Compare,
}

/// One block operation. Offsets and counts are in blocks of the bdev's block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BdevOp {
    /// Read `num_blocks` into the buffers.
    Read {
        /// First block.
        offset_blocks: u64,
        /// Block count.
        num_blocks: u64,
    },
    /// Write `num_blocks` from the buffers; `fua` = durable before completion.
    Write {
        /// First block.
        offset_blocks: u64,
        /// Block count.
        num_blocks: u64,
        /// Force unit access.
        fua: bool,
    },
    /// Compare the buffers with `num_blocks` on the media.
    Compare {
        /// First block.
        offset_blocks: u64,
        /// Block count.
        num_blocks: u64,
    },
    /// Make every completed write durable.
    Flush,
    /// Zero `num_blocks`.
    WriteZeroes {
        /// First block.
        offset_blocks: u64,
        /// Block count.
        num_blocks: u64,
    },
    /// Deallocate `num_blocks`; later reads return zeroes.
    Unmap {
        /// First block.
        offset_blocks: u64,
        /// Block count.
        num_blocks: u64,
    },
}

impl BdevOp {
    /// The kind of this operation.
    pub fn io_type(&self) -> IoType {
        match self {
            BdevOp::Read { .. } => IoType::Read,
            BdevOp::Write { .. } => IoType::Write,
            BdevOp::Compare { .. } => IoType::Compare,
            BdevOp::Flush => IoType::Flush,
            BdevOp::WriteZeroes { .. } => IoType::WriteZeroes,
            BdevOp::Unmap { .. } => IoType::Unmap,
        }
    }

    /// `(offset_blocks, num_blocks)` for operations that address blocks.
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            BdevOp::Read {
                offset_blocks,
                num_blocks,
            }
            | BdevOp::Write {
                offset_blocks,
                num_blocks,
                ..
            }
            | BdevOp::Compare {
                offset_blocks,
                num_blocks,
            }
            | BdevOp::WriteZeroes {
                offset_blocks,
                num_blocks,
            }
            | BdevOp::Unmap {
                offset_blocks,
                num_blocks,
            } => Some((offset_blocks, num_blocks)),
            BdevOp::Flush => None,
        }
    }

    /// Whether the operation moves data through the buffers.
    pub fn has_data(&self) -> bool {
        matches!(
            self,
            BdevOp::Read { .. } | BdevOp::Write { .. } | BdevOp::Compare { .. }
        )
    }
}

/// How an I/O ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoStatus {
    /// Not completed yet.
    Pending,
    /// Done.
    Success,
    /// Compare found a difference.
    Miscompare,
    /// The range is beyond the end of the device.
    OutOfRange,
    /// The buffers are smaller than the range.
    BufferTooSmall,
    /// The bdev does not support this operation.
    Unsupported,
    /// The backend failed with this errno.
    Error(i32),
}

/// One I/O in flight: what to do, its data, the caller's tag, and (on completion) its status.
#[derive(Debug)]
pub struct BdevIo {
    /// The operation.
    pub op: BdevOp,
    /// Data buffers (read destination, write/compare source), in order.
    pub bufs: IoBufs,
    /// The caller's cookie, returned untouched.
    pub tag: u64,
    /// Set on completion.
    pub status: IoStatus,
    /// When it was submitted, in [`crate::reactor::instant_ns`] form (0: unknown), for
    /// latency statistics.
    pub submitted_ns: u64,
}

impl BdevIo {
    /// A new I/O with no buffers.
    pub fn new(op: BdevOp, tag: u64) -> Self {
        Self {
            op,
            bufs: IoBufs::new(),
            tag,
            status: IoStatus::Pending,
            submitted_ns: 0,
        }
    }

    /// Total bytes in the buffers.
    pub fn buf_len(&self) -> usize {
        self.bufs.iter().map(IoBuf::len).sum()
    }
}

/// Errors of bdev management.
#[derive(Debug, thiserror::Error)]
pub enum BdevError {
    /// A bdev with this name exists.
    #[error("bdev '{0}' already exists")]
    Exists(String),
    /// No bdev with this name.
    #[error("bdev '{0}' not found")]
    NotFound(String),
    /// A parameter is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The bdev is claimed by a module and cannot be claimed or deleted.
    #[error("bdev '{name}' is already claimed by {by}")]
    Claimed {
        /// The bdev.
        name: String,
        /// Who holds the claim.
        by: String,
    },
    /// The bdev is in use and cannot change this way (shrinking an exported bdev).
    #[error("{0}")]
    InUse(String),
    /// An OS error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

impl BdevError {
    /// The negative errno SPDK would report.
    pub fn errno(&self) -> i32 {
        match self {
            BdevError::Exists(_) => -libc::EEXIST,
            BdevError::NotFound(_) => -libc::ENODEV,
            BdevError::Invalid(_) => -libc::EINVAL,
            BdevError::Claimed { .. } => -libc::EPERM,
            BdevError::InUse(_) => -libc::EBUSY,
            BdevError::Io { source, .. } => -source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// A block device. `Any` lets a caller that needs one kind's own methods (a delay bdev's
/// latencies) downcast an `Arc<dyn Bdev>` (see [`DelayBdev::lookup`]).
pub trait Bdev: std::any::Any + Send + Sync {
    /// Unique name.
    fn name(&self) -> &str;
    /// Product name as SPDK reports it ("Malloc disk", "Null disk", "AIO disk", "delay").
    fn product_name(&self) -> &'static str;
    /// Logical block size in bytes (512 or 4096).
    fn block_size(&self) -> u32;
    /// Number of logical blocks.
    fn num_blocks(&self) -> u64;
    /// Physical block size in bytes.
    fn physical_block_size(&self) -> u32 {
        self.block_size()
    }
    /// UUID.
    fn uuid(&self) -> uuid::Uuid;
    /// Whether the bdev supports an operation itself.
    fn supports(&self, io: IoType) -> bool;
    /// Whether Compare works on this bdev: natively, or by reading (an [`IoChannel`] reads the
    /// range and compares it when the bdev has no compare of its own).
    fn can_compare(&self) -> bool {
        self.supports(IoType::Compare) || self.supports(IoType::Read)
    }
    /// Whether writes sit in a volatile cache until flushed.
    fn write_cache(&self) -> bool;
    /// Opens an I/O channel for the calling reactor.
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError>;
    /// The RPC that recreates this bdev, as `{"method": ..., "params": {...}}` (save_config).
    fn config(&self) -> serde_json::Value;
    /// The `driver_specific` object of `bdev_get_bdevs`.
    fn driver_specific(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    /// Releases backend resources when the bdev is deleted.
    fn destroy(&self) {}
}

impl std::fmt::Debug for dyn Bdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bdev({})", self.name())
    }
}

/// A per-reactor path to a bdev, implemented by each backend.
pub trait BdevChannel {
    /// Starts an I/O. `Err` hands it back when the backend has no room now (retry later).
    fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>>;
    /// Hands completed I/Os to `done`; returns how many.
    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize;
    /// An fd that becomes readable when completions arrive asynchronously (the reactor sleeps
    /// on it). Backends that complete during `submit` return `None`.
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }
    /// Called before the reactor sleeps: resets the wake fd and returns `true` if completions
    /// are already waiting (which cancels the sleep). The default suits backends without a
    /// wake fd: anything outstanding keeps the reactor polling.
    fn arm(&mut self) -> bool {
        self.outstanding() > 0
    }
    /// I/Os submitted and not yet returned by `poll`.
    fn outstanding(&self) -> usize;
}

/// Completions of a backend that finishes each I/O during `submit`, handed out by `poll` (so a
/// caller never sees its completion re-entrantly, from inside its own submit).
#[derive(Debug, Default)]
pub(crate) struct Completed(std::collections::VecDeque<Box<BdevIo>>);

impl Completed {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self(std::collections::VecDeque::with_capacity(n))
    }

    pub(crate) fn push(&mut self, io: Box<BdevIo>) {
        self.0.push_back(io);
    }

    /// Hands out what completed before this call; returns how many.
    pub(crate) fn drain(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        let n = self.0.len();
        for _ in 0..n {
            if let Some(io) = self.0.pop_front() {
                done(io);
            }
        }
        n
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// A channel with statistics and range checks in front of a backend channel.
pub struct IoChannel {
    bdev: Arc<dyn Bdev>,
    inner: Box<dyn BdevChannel>,
    stats: Arc<ChannelStats>,
    /// The bdev's rate limits, shared with its other channels.
    qos: Arc<Qos>,
    /// I/Os waiting for a QoS timeslice, in submission order.
    throttled: std::collections::VecDeque<Box<BdevIo>>,
    block_size: u64,
    num_blocks: u64,
    /// I/Os refused before reaching the backend, returned by the next poll.
    rejected: ArrayVec<Box<BdevIo>, 8>,
    rejected_overflow: std::collections::VecDeque<Box<BdevIo>>,
    /// Compares done by reading, for a bdev without a compare of its own (from the first one).
    compare: Option<compare::ReadCompare>,
    /// The bdev's SPDK histogram switch, and the generation this channel last adopted.
    hist_ctl: Arc<spdk_hist::HistControl>,
    hist_gen: u64,
    /// This channel's SPDK histogram while `bdev_enable_histogram` has it on.
    hist: Option<Arc<spdk_hist::HistogramData>>,
}

impl std::fmt::Debug for IoChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoChannel")
            .field("bdev", &self.bdev.name())
            .finish()
    }
}

impl IoChannel {
    /// Wraps a backend channel, recording statistics into `stats`, applying the bdev's rate
    /// limits `qos` and following its histogram switch `hist_ctl`.
    pub fn new(
        bdev: Arc<dyn Bdev>,
        inner: Box<dyn BdevChannel>,
        stats: Arc<ChannelStats>,
        qos: Arc<Qos>,
        hist_ctl: Arc<spdk_hist::HistControl>,
    ) -> Self {
        let hist_gen = hist_ctl.generation();
        let hist = hist_ctl.fresh();
        stats.set_spdk_histogram(hist.clone());
        Self {
            hist_ctl,
            hist_gen,
            hist,
            qos,
            throttled: std::collections::VecDeque::with_capacity(32),
            block_size: u64::from(bdev.block_size()),
            num_blocks: bdev.num_blocks(),
            bdev,
            inner,
            stats,
            rejected: ArrayVec::new(),
            rejected_overflow: std::collections::VecDeque::new(),
            compare: None,
        }
    }

    /// The bdev behind this channel.
    pub fn bdev(&self) -> &Arc<dyn Bdev> {
        &self.bdev
    }

    /// The block count I/Os are checked against: the bdev's when the channel opened, until
    /// its owner applies a resize here (by message, on its reactor).
    pub fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    /// Checks I/Os against `num_blocks` from now on (the bdev was resized).
    pub fn set_num_blocks(&mut self, num_blocks: u64) {
        self.num_blocks = num_blocks;
    }

    /// Starts an I/O. Invalid I/Os (out of range, buffers too small, unsupported) complete with
    /// an error status on the next poll instead of reaching the backend. `Err` means the backend
    /// is busy: the I/O is handed back to retry later. A Compare on a bdev without a compare of
    /// its own is done here, by reading the range and comparing.
    pub fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        self.submit_at(io, instant_ns(Instant::now()))
    }

    /// [`IoChannel::submit`] with the submission time given in [`instant_ns`] form (a reactor
    /// passes its loop time rather than reading the clock per I/O).
    pub fn submit_at(&mut self, mut io: Box<BdevIo>, now_ns: u64) -> Result<(), Box<BdevIo>> {
        io.submitted_ns = now_ns;
        if let Some(status) = self.check(&io) {
            io.status = status;
            self.reject(io);
            return Ok(());
        }
        if self.qos.enabled()
            && (!self.throttled.is_empty() || !self.qos.admit(&io.op, self.block_size, now_ns))
        {
            if self.throttled.is_empty() {
                self.qos.backlog_started();
            }
            self.throttled.push_back(io);
            return Ok(());
        }
        self.start(io)
    }

    /// Hands an admitted I/O to the backend.
    #[inline]
    fn start(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        if matches!(io.op, BdevOp::Compare { .. }) && !self.bdev.supports(IoType::Compare) {
            self.compare_by_reading(io);
            return Ok(());
        }
        self.inner.submit(io)
    }

    /// Starts the throttled I/Os the current timeslice admits, in order (all of them once the
    /// limits are lifted). Called with a non-empty queue.
    fn release_throttled(&mut self, now_ns: u64) {
        while let Some(io) = self.throttled.pop_front() {
            if self.qos.enabled() && !self.qos.admit(&io.op, self.block_size, now_ns) {
                self.throttled.push_front(io);
                return;
            }
            if let Err(io) = self.start(io) {
                // The backend is full: its next completion makes room.
                self.throttled.push_front(io);
                return;
            }
        }
        self.qos.backlog_ended();
    }

    fn compare_by_reading(&mut self, mut io: Box<BdevIo>) {
        if self.compare.is_none() {
            match compare::ReadCompare::new(self.bdev.block_size()) {
                Ok(c) => self.compare = Some(c),
                Err(e) => {
                    tracing::error!("bdev {}: {e}", self.bdev.name());
                    io.status = IoStatus::Error(libc::ENOMEM);
                    self.reject(io);
                    return;
                }
            }
        }
        if let Some(c) = self.compare.as_mut() {
            c.push(io, self.inner.as_mut());
        }
    }

    fn check(&self, io: &BdevIo) -> Option<IoStatus> {
        let supported = match io.op.io_type() {
            IoType::Compare => self.bdev.can_compare(),
            t => self.bdev.supports(t),
        };
        if !supported {
            return Some(IoStatus::Unsupported);
        }
        if let Some((off, n)) = io.op.range() {
            if off.checked_add(n).is_none_or(|end| end > self.num_blocks) {
                return Some(IoStatus::OutOfRange);
            }
            if io.op.has_data() && (io.buf_len() as u64) < n.saturating_mul(self.block_size) {
                return Some(IoStatus::BufferTooSmall);
            }
        }
        None
    }

    fn reject(&mut self, io: Box<BdevIo>) {
        if let Err(e) = self.rejected.try_push(io) {
            self.rejected_overflow.push_back(e.element());
        }
    }

    /// Hands completed I/Os to `done`; returns how many.
    pub fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        self.poll_at(instant_ns(Instant::now()), done)
    }

    /// [`IoChannel::poll`] with the completion time given in [`instant_ns`] form (for latency
    /// statistics).
    pub fn poll_at(&mut self, now_ns: u64, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        if !self.throttled.is_empty() {
            self.release_throttled(now_ns);
        }
        let generation = self.hist_ctl.generation();
        if generation != self.hist_gen {
            self.adopt_histogram(generation);
        }
        let stats = &self.stats;
        let hist = self.hist.as_deref();
        let bs = self.block_size;
        let mut n = 0;
        let mut finish = |io: Box<BdevIo>| {
            let lat = stats.record(&io, bs, now_ns);
            if let Some(h) = hist {
                h.tally(io.op.io_type(), lat);
            }
            done(io);
        };
        for io in self.rejected.drain(..) {
            finish(io);
            n += 1;
        }
        while let Some(io) = self.rejected_overflow.pop_front() {
            finish(io);
            n += 1;
        }
        let Some(cmp) = self.compare.as_mut() else {
            return n + self.inner.poll(&mut finish);
        };
        // The chunk read of a compare is the channel's own: not handed out, not counted.
        let mut read = None;
        self.inner.poll(&mut |io| {
            if cmp.is_read(&io) {
                read = Some(io);
            } else {
                finish(io);
                n += 1;
            }
        });
        if let Some(r) = read
            && let Some(io) = cmp.read_done(r, self.inner.as_mut())
        {
            finish(io);
            n += 1;
        }
        cmp.retry(self.inner.as_mut());
        n
    }

    /// Follows a `bdev_enable_histogram` change: a fresh histogram for the new configuration
    /// (made here, on the channel's reactor, once per change), or none.
    fn adopt_histogram(&mut self, generation: u64) {
        self.hist_gen = generation;
        self.hist = self.hist_ctl.fresh();
        self.stats.set_spdk_histogram(self.hist.clone());
    }

    /// See [`BdevChannel::wake_fd`].
    pub fn wake_fd(&self) -> Option<RawFd> {
        self.inner.wake_fd()
    }

    /// See [`BdevChannel::arm`].
    pub fn arm(&mut self) -> bool {
        // Throttled I/Os keep the reactor polling until a timeslice admits them.
        !self.throttled.is_empty()
            || !self.rejected.is_empty()
            || !self.rejected_overflow.is_empty()
            || self.compare.as_ref().is_some_and(|c| c.stalled())
            || self.inner.arm()
    }

    /// I/Os submitted and not yet returned.
    pub fn outstanding(&self) -> usize {
        // A compare being read is one I/O, not two.
        let compares = self
            .compare
            .as_ref()
            .map_or(0, |c| c.pending().saturating_sub(usize::from(c.reading())));
        self.inner.outstanding()
            + self.rejected.len()
            + self.rejected_overflow.len()
            + compares
            + self.throttled.len()
    }
}

impl Drop for IoChannel {
    fn drop(&mut self) {
        if !self.throttled.is_empty() {
            // Its waiting I/Os go with it: they no longer call for made-up timeslices.
            self.qos.backlog_ended();
        }
    }
}

#[cfg(test)]
mod tests;
