//! A counting global allocator: allocations on reactor threads (the target) and on every other
//! thread (the initiators, the main thread) are counted apart, so the benchmark reports the
//! target's allocations per I/O alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use target_core::reactor::Reactors;

/// Forwards to the system allocator and counts.
pub struct Counting;

static TARGET: AtomicU64 = AtomicU64::new(0);
static OTHER: AtomicU64 = AtomicU64::new(0);

#[inline]
fn count() {
    // `Reactors::current` reads a const-initialised thread local: no allocation, no lock.
    if Reactors::current().is_some() {
        TARGET.fetch_add(1, Ordering::Relaxed);
    } else {
        OTHER.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; counting has
// no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

/// Allocations so far: `(on reactor threads, elsewhere)`.
pub fn counts() -> (u64, u64) {
    (
        TARGET.load(Ordering::Relaxed),
        OTHER.load(Ordering::Relaxed),
    )
}
