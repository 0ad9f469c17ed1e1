//! The completion path from librbd's threads to the reactor that owns a channel.
//!
//! A channel owns one [`Ring`]: a fixed table of slots, one per I/O it may have in flight,
//! and a bounded lock-free queue of slot indices. librbd calls [`on_complete`] on one of its
//! threads; it stores the result in the slot, pushes the slot's index and, only if the reactor
//! announced that it is going to sleep, writes the ring's eventfd (which the reactor watches).
//! The reactor pops indices in its poll. Nothing is allocated or locked on either side beyond
//! librbd's own completion object.
//!
//! Ownership of a slot's data (the I/O, its iovecs) alternates: the reactor fills it before
//! submitting and reads it after popping the index; the callback never touches it. Every I/O
//! in flight holds a reference to the ring, so a channel dropped with I/Os in flight leaves
//! the ring (with the I/Os' buffers, which librbd may still be writing) alive until the last
//! callback, which then frees it on librbd's thread.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering, fence};

use crossbeam_queue::ArrayQueue;
use target_core::bdev::{BdevIo, MAX_IO_BUFS};
use target_core::reactor::sys::EventFd;

use crate::ffi;
use crate::image::Image;

/// What a slot's I/O is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// One librbd operation; its result is the I/O's.
    Single,
    /// A write with FUA: a flush follows a successful write.
    WriteThenFlush,
    /// The flush after a FUA write.
    FlushAfterWrite,
}

/// The reactor's side of a slot.
pub(crate) struct SlotData {
    /// The I/O, while it is in flight.
    pub io: Option<Box<BdevIo>>,
    /// Its buffers as iovecs (librbd keeps a read's iovec array until the completion).
    pub iovs: [libc::iovec; MAX_IO_BUFS],
    /// Number of iovecs used.
    pub iovcnt: usize,
    /// Bytes a read must return.
    pub expect: usize,
    /// What it is doing.
    pub stage: Stage,
}

/// One I/O's place in the ring.
pub(crate) struct Slot {
    ring: *const Ring,
    index: u32,
    result: AtomicIsize,
    data: UnsafeCell<SlotData>,
}

/// A channel's completion ring.
pub(crate) struct Ring {
    done: ArrayQueue<u32>,
    wake: EventFd,
    /// The reactor is about to sleep: the next completion must write the eventfd.
    armed: AtomicBool,
    slots: Box<[Slot]>,
    /// Keeps the image open while I/Os are in flight, even after the channel is gone.
    image: Arc<Image>,
}

// SAFETY: the slot data is accessed by one thread at a time under the ownership protocol in the
// module documentation (the reactor while the slot is not in flight, nobody while librbd has
// it; the handover goes through the `done` queue, whose push and pop are a release/acquire
// pair), or by Ring::drop, which has `&mut self`. The raw `ring` pointers point at the Ring
// itself. Everything else is atomics, a lock-free queue and an eventfd.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// A ring of `depth` slots for I/O on `image`.
    pub(crate) fn new(image: Arc<Image>, depth: usize) -> std::io::Result<Arc<Ring>> {
        let wake = EventFd::new()?;
        Ok(Arc::new_cyclic(|weak| {
            let me = weak.as_ptr();
            let slots = (0..depth)
                .map(|i| Slot {
                    ring: me,
                    index: i as u32,
                    result: AtomicIsize::new(0),
                    data: UnsafeCell::new(SlotData {
                        io: None,
                        iovs: [libc::iovec {
                            iov_base: std::ptr::null_mut(),
                            iov_len: 0,
                        }; MAX_IO_BUFS],
                        iovcnt: 0,
                        expect: 0,
                        stage: Stage::Single,
                    }),
                })
                .collect();
            Ring {
                done: ArrayQueue::new(depth.max(1)),
                wake,
                armed: AtomicBool::new(false),
                slots,
                image,
            }
        }))
    }

    /// Number of slots.
    pub(crate) fn depth(&self) -> usize {
        self.slots.len()
    }

    /// The eventfd completions write when the reactor is asleep.
    pub(crate) fn wake_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.wake.as_raw_fd()
    }

    /// The reactor's data of slot `i`.
    ///
    /// # Safety
    ///
    /// Only the channel's reactor may call this, for a slot that is not in flight (not
    /// submitted, or its index popped from [`Ring::pop`]), and it must not hold two
    /// references to the same slot.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn data(&self, i: u32) -> &mut SlotData {
        // SAFETY: exclusive access per the caller's contract.
        unsafe { &mut *self.slots[i as usize].data.get() }
    }

    /// The librbd result of slot `i`'s last operation (valid after its index was popped).
    pub(crate) fn result(&self, i: u32) -> isize {
        self.slots[i as usize].result.load(Ordering::Acquire)
    }

    /// Completes slot `i` from the reactor itself (an operation librbd refused at once).
    pub(crate) fn complete_now(&self, i: u32, result: isize) {
        self.slots[i as usize]
            .result
            .store(result, Ordering::Release);
        // Never full: at most one index per slot is queued.
        let _ = self.done.push(i);
    }

    /// The next completed slot.
    pub(crate) fn pop(&self) -> Option<u32> {
        self.done.pop()
    }

    /// Before the reactor sleeps: asks the next completion to write the eventfd, clears the
    /// eventfd, and returns `true` if completions are already waiting (no sleep then).
    pub(crate) fn arm(&self) -> bool {
        self.armed.store(true, Ordering::SeqCst);
        self.wake.drain();
        // Pairs with the fence in `on_complete`: either the callback sees `armed` and writes
        // the eventfd, or this check sees its index.
        fence(Ordering::SeqCst);
        if !self.done.is_empty() {
            self.armed.store(false, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Starts slot `i`'s operation `op` on the image. On an immediate failure the slot is
    /// completed with the error (the next poll returns it).
    ///
    /// # Safety
    ///
    /// The slot must not be in flight and its data (the I/O's buffers, the iovecs `op` points
    /// at) must be in place; from here until its index is popped only librbd touches it.
    pub(crate) unsafe fn start(self: &Arc<Self>, i: u32, op: crate::image::AioOp) {
        let slot: *const Slot = &self.slots[i as usize];
        // The reference the callback gives back.
        let raw = Arc::into_raw(Arc::clone(self));
        debug_assert_eq!(raw, self.slots[i as usize].ring);
        // SAFETY: the slot (and the ring holding it) lives until the callback drops the
        // reference taken above; the buffers are in place per the caller's contract.
        let r = unsafe {
            self.image
                .submit(op, Some(on_complete), slot as *mut c_void)
        };
        if let Err(errno) = r {
            // SAFETY: librbd did not take the operation: give the reference back.
            unsafe { drop(Arc::from_raw(raw)) };
            self.complete_now(i, -(errno as isize));
        }
    }
}

/// librbd's completion callback (on a librbd thread).
unsafe extern "C" fn on_complete(c: ffi::rbd_completion_t, arg: *mut c_void) {
    // SAFETY: `arg` is the slot given to Ring::start, alive because the ring reference taken
    // there is still held.
    let slot = unsafe { &*(arg as *const Slot) };
    // SAFETY: `c` is this operation's completion; it is read and released once, here.
    let r = unsafe {
        let r = ffi::rbd_aio_get_return_value(c);
        ffi::rbd_aio_release(c);
        r
    };
    slot.result.store(r, Ordering::Release);
    // SAFETY: the ring outlives this call (reference below).
    let ring = unsafe { &*slot.ring };
    // Never full: at most one index per slot is queued.
    let _ = ring.done.push(slot.index);
    fence(Ordering::SeqCst);
    if ring.armed.swap(false, Ordering::SeqCst) {
        ring.wake.notify();
    }
    // SAFETY: gives back the reference Ring::start took with Arc::into_raw for this
    // operation; nothing of the ring is used after it.
    unsafe { drop(Arc::from_raw(slot.ring)) };
}
