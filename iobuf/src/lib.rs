//! rtgt's I/O buffers: DMA-able memory regions, owned buffer handles carved out of them, shared
//! pools and per-reactor caches.
//!
//! A leaf crate every layer uses — block devices, the core, every transport and the fabric — so
//! that none of them has to link another's wire to hold data. Nothing here registers memory:
//! registration with an RDMA protection domain is the fabric's business (`fabric::verbs`), and a
//! transport without RDMA (TCP) uses the same buffers unregistered.
//!
//! Ownership is the safety argument of the whole data path:
//! - a [`DmaRegion`] is page-aligned memory that never moves and is freed only when the last
//!   `Arc` to it goes, so a memory registration that holds the `Arc` can never point at freed
//!   memory;
//! - an [`IoBuf`] is an exclusive handle to one non-overlapping slice of a region. It is not
//!   `Clone`; whoever holds it may read and write the bytes, and hands it on by moving it (to a
//!   block device while an I/O runs, back to a pool when done).
//!
//! The fabric (or a simulated one) may write into a buffer while a work request that names it is
//! outstanding; callers keep the `IoBuf` parked in their request until the completion arrives.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

/// Alignment of every region: one 4 KiB page.
pub const REGION_ALIGN: usize = 4096;

/// Errors from allocating DMA memory.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemError {
    /// The requested size is zero or does not fit a layout.
    #[error("invalid DMA region size {0}")]
    InvalidSize(usize),
    /// The allocator returned no memory.
    #[error("out of memory allocating a DMA region of {0} bytes")]
    OutOfMemory(usize),
    /// A buffer size of zero, or larger than the region.
    #[error("invalid buffer size {buf} for a region of {region} bytes")]
    InvalidBufSize {
        /// Requested buffer size.
        buf: usize,
        /// Region size.
        region: usize,
    },
}

/// Page-aligned, zero-initialised memory with a stable address for its whole life.
#[derive(Debug)]
pub struct DmaRegion {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the region is plain bytes with no thread affinity; all access goes through raw pointers
// whose exclusivity is managed by `IoBuf` ownership.
unsafe impl Send for DmaRegion {}
// SAFETY: shared references only expose the address and length, never the bytes themselves.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Allocates `len` zeroed bytes aligned to [`REGION_ALIGN`].
    pub fn new(len: usize) -> Result<Arc<Self>, MemError> {
        if len == 0 {
            return Err(MemError::InvalidSize(len));
        }
        let layout =
            Layout::from_size_align(len, REGION_ALIGN).map_err(|_| MemError::InvalidSize(len))?;
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(MemError::OutOfMemory(len))?;
        Ok(Arc::new(Self { ptr, layout }))
    }

    /// Start address of the region (what a memory registration covers).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Start address as a 64-bit I/O virtual address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `[addr, addr + len)` lies inside this region.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        let start = self.addr();
        addr >= start
            && (addr - start)
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len() as u64)
    }

    /// Carves the whole region into `len / buf_size` exclusive buffers of `buf_size` bytes.
    pub fn split(self: &Arc<Self>, buf_size: usize) -> Result<Vec<IoBuf>, MemError> {
        if buf_size == 0 || buf_size > self.len() {
            return Err(MemError::InvalidBufSize {
                buf: buf_size,
                region: self.len(),
            });
        }
        let count = self.len() / buf_size;
        Ok((0..count)
            .map(|i| IoBuf {
                region: Arc::clone(self),
                offset: i * buf_size,
                cap: buf_size,
                start: 0,
                len: buf_size,
            })
            .collect())
    }

    /// Makes one buffer that spans the whole region.
    pub fn into_buf(self: Arc<Self>) -> IoBuf {
        let cap = self.len();
        IoBuf {
            region: self,
            offset: 0,
            cap,
            start: 0,
            len: cap,
        }
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// An exclusive handle to `cap` bytes of a [`DmaRegion`].
///
/// A window `[start, start + len)` inside those bytes is "in use": that is what
/// [`IoBuf::as_slice`] and [`IoBuf::addr`] refer to. A receive buffer holding a 64-byte command
/// followed by in-capsule data can thus hand the data alone to a block device, without a copy.
#[derive(Debug)]
pub struct IoBuf {
    region: Arc<DmaRegion>,
    offset: usize,
    cap: usize,
    start: usize,
    len: usize,
}

impl IoBuf {
    /// Allocates a buffer in a region of its own (for tests and control-path buffers).
    pub fn alloc(len: usize) -> Result<Self, MemError> {
        Ok(DmaRegion::new(len)?.into_buf())
    }

    /// The region this buffer lives in (to find its memory registration).
    pub fn region(&self) -> &Arc<DmaRegion> {
        &self.region
    }

    /// I/O virtual address of the first byte in use.
    pub fn addr(&self) -> u64 {
        self.region.addr() + (self.offset + self.start) as u64
    }

    /// I/O virtual address of the first byte of the whole buffer (ignoring the window).
    pub fn base_addr(&self) -> u64 {
        self.region.addr() + self.offset as u64
    }

    /// Bytes in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size of the whole buffer.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Offset of the window in use from the start of the buffer.
    pub fn window_start(&self) -> usize {
        self.start
    }

    /// Sets the length of the window in use. Panics if it would pass the end of the buffer (a
    /// caller bug).
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        self.set_window(self.start, len);
    }

    /// Sets the window in use to `[start, start + len)`. Panics if it would pass the end of
    /// the buffer (a caller bug).
    #[inline]
    pub fn set_window(&mut self, start: usize, len: usize) {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.cap),
            "IoBuf window {start}+{len} exceeds capacity {}",
            self.cap
        );
        self.start = start;
        self.len = len;
    }

    /// Makes the whole buffer the window in use again.
    #[inline]
    pub fn reset(&mut self) {
        self.start = 0;
        self.len = self.cap;
    }

    /// Raw pointer to the first byte in use, for asynchronous engines (io_uring) that fill the
    /// buffer while the caller keeps the `IoBuf` parked until completion.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: offset + start <= offset + cap <= region length, by construction.
        unsafe { self.region.as_ptr().add(self.offset + self.start) }
    }

    /// The bytes in use.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the window lies inside the live region, and this handle is the only one for
        // that range (buffers are carved without overlap and are not Clone).
        unsafe {
            std::slice::from_raw_parts(self.region.as_ptr().add(self.offset + self.start), self.len)
        }
    }

    /// The bytes in use, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` makes the access exclusive.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.region.as_ptr().add(self.offset + self.start),
                self.len,
            )
        }
    }
}

/// A fixed set of equally sized buffers shared by threads, with lock-free get and put.
///
/// Every buffer that was ever in the pool is either in it or held by somebody; [`BufPool::free`]
/// tells how many are home, which tests compare with [`BufPool::total`] to find leaks.
#[derive(Debug)]
pub struct BufPool {
    free: ArrayQueue<IoBuf>,
    buf_size: usize,
    total: usize,
    regions: Vec<Arc<DmaRegion>>,
}

impl BufPool {
    /// Allocates `count` buffers of `buf_size` bytes, in regions of at most `region_max` bytes.
    pub fn new(count: usize, buf_size: usize, region_max: usize) -> Result<Arc<Self>, MemError> {
        if buf_size == 0 {
            return Err(MemError::InvalidBufSize {
                buf: 0,
                region: region_max,
            });
        }
        let per_region = (region_max / buf_size).max(1);
        let free = ArrayQueue::new(count.max(1));
        let mut regions = Vec::new();
        let mut left = count;
        while left > 0 {
            let n = left.min(per_region);
            let region = DmaRegion::new(n * buf_size)?;
            for buf in region.split(buf_size)? {
                // Cannot fail: the queue holds exactly `count` entries.
                let _ = free.push(buf);
            }
            regions.push(region);
            left -= n;
        }
        Ok(Arc::new(Self {
            free,
            buf_size,
            total: count,
            regions,
        }))
    }

    /// Takes a buffer (length reset to its capacity), or `None` when the pool is empty.
    pub fn get(&self) -> Option<IoBuf> {
        self.free.pop().map(|mut b| {
            b.reset();
            b
        })
    }

    /// Returns a buffer. Buffers from another pool or of another size are a caller bug.
    pub fn put(&self, buf: IoBuf) {
        debug_assert_eq!(buf.cap, self.buf_size, "buffer returned to the wrong pool");
        if self.free.push(buf).is_err() {
            tracing::error!("BufPool::put: pool already full; a buffer was returned twice?");
        }
    }

    /// Size of every buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Buffers currently in the pool.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Buffers the pool was created with.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The regions backing the pool, to register them with a protection domain.
    pub fn regions(&self) -> &[Arc<DmaRegion>] {
        &self.regions
    }
}

/// A per-thread cache in front of a shared [`BufPool`], so that the common get/put touches no
/// shared cache line. Refills and spills in batches.
#[derive(Debug)]
pub struct BufCache {
    pool: Arc<BufPool>,
    local: Vec<IoBuf>,
    target: usize,
}

impl BufCache {
    /// A cache that keeps up to `2 * target` buffers and refills `target` at a time.
    pub fn new(pool: Arc<BufPool>, target: usize) -> Self {
        let target = target.max(1);
        Self {
            pool,
            local: Vec::with_capacity(2 * target + 1),
            target,
        }
    }

    /// Takes a buffer from the cache, refilling from the shared pool when empty.
    /// Inlined: it runs per I/O; the refill is a call of its own.
    #[inline]
    pub fn get(&mut self) -> Option<IoBuf> {
        if self.local.is_empty() {
            self.refill();
        }
        self.local.pop().map(|mut b| {
            b.reset();
            b
        })
    }

    #[cold]
    fn refill(&mut self) {
        for _ in 0..self.target {
            match self.pool.get() {
                Some(b) => self.local.push(b),
                None => break,
            }
        }
    }

    /// Returns a buffer to the cache, spilling half to the shared pool when it grows too big.
    /// Inlined: it runs per I/O; the spill is a call of its own.
    #[inline]
    pub fn put(&mut self, buf: IoBuf) {
        self.local.push(buf);
        if self.local.len() >= 2 * self.target {
            self.spill();
        }
    }

    #[cold]
    fn spill(&mut self) {
        let keep = self.target;
        while self.local.len() > keep {
            if let Some(b) = self.local.pop() {
                self.pool.put(b);
            }
        }
    }

    /// Buffers held by this cache.
    pub fn cached(&self) -> usize {
        self.local.len()
    }

    /// The shared pool behind the cache.
    pub fn pool(&self) -> &Arc<BufPool> {
        &self.pool
    }
}

impl Drop for BufCache {
    fn drop(&mut self) {
        for b in self.local.drain(..) {
            self.pool.put(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_is_aligned_zeroed_and_split_without_overlap() {
        let r = DmaRegion::new(3 * 4096).unwrap();
        assert_eq!(r.addr() % REGION_ALIGN as u64, 0);
        let mut bufs = r.split(4096).unwrap();
        assert_eq!(bufs.len(), 3);
        assert!(bufs.iter().all(|b| b.as_slice().iter().all(|&x| x == 0)));
        bufs[1].as_mut_slice().fill(7);
        assert!(bufs[0].as_slice().iter().all(|&x| x == 0));
        assert!(bufs[2].as_slice().iter().all(|&x| x == 0));
        assert_eq!(bufs[1].addr(), r.addr() + 4096);
        assert!(r.contains(bufs[2].addr(), 4096));
        assert!(!r.contains(bufs[2].addr(), 4097));
        assert!(!r.contains(r.addr() - 1, 1));
    }

    #[test]
    fn bad_sizes_are_errors() {
        assert_eq!(DmaRegion::new(0).unwrap_err(), MemError::InvalidSize(0));
        let r = DmaRegion::new(4096).unwrap();
        assert!(r.split(0).is_err());
        assert!(r.split(8192).is_err());
    }

    #[test]
    fn pool_and_cache_conserve_buffers() {
        let pool = BufPool::new(10, 512, 2048).unwrap();
        assert_eq!(pool.regions().len(), 3);
        assert_eq!(pool.free(), 10);
        let mut cache = BufCache::new(Arc::clone(&pool), 2);
        let mut held: Vec<_> = (0..10).map(|_| cache.get().unwrap()).collect();
        assert!(cache.get().is_none());
        assert_eq!(pool.free(), 0);
        held[0].set_len(100);
        for b in held.drain(..) {
            cache.put(b);
        }
        assert_eq!(pool.free() + cache.cached(), 10);
        let b = cache.get().unwrap();
        assert_eq!(b.len(), 512, "length is reset on get");
        cache.put(b);
        drop(cache);
        assert_eq!(pool.free(), 10);
    }

    #[test]
    fn window_selects_a_sub_range() {
        let mut b = IoBuf::alloc(4096).unwrap();
        b.as_mut_slice()[64..68].copy_from_slice(&[1, 2, 3, 4]);
        let base = b.addr();
        b.set_window(64, 4);
        assert_eq!(b.as_slice(), &[1, 2, 3, 4]);
        assert_eq!(b.addr(), base + 64);
        assert_eq!(b.base_addr(), base);
        b.reset();
        assert_eq!(b.len(), 4096);
        assert_eq!(b.addr(), base);
    }

    #[test]
    #[should_panic]
    fn window_beyond_capacity_panics() {
        IoBuf::alloc(64).unwrap().set_window(60, 5);
    }

    #[test]
    #[should_panic]
    fn set_len_beyond_capacity_panics() {
        IoBuf::alloc(64).unwrap().set_len(65);
    }
}
