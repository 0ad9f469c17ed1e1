//! The simulated completion queue's ring: a bounded FIFO of work completions with exactly the
//! capacity the queue was created with.
//!
//! Producers are whichever threads execute work requests (the poster's, the peer's for a
//! receive, the timer's for a delayed completion, any thread flushing a queue pair), so a push
//! must be safe from many threads; it claims a slot with one compare-and-swap of the tail.
//! Pollers are usually one reactor, but `Cq::poll` takes `&self`: a poll that finds something
//! takes a poller flag (one swap per poll, not one compare-and-swap per completion, as a
//! general-purpose queue's `pop` does) and moves the batch in one pass; an empty poll is two
//! loads (no fence, no store).
//!
//! Each slot carries a stamp (Vyukov's bounded queue): `pos` when it is free for the push at
//! position `pos`, `pos + 1` once that push has written it; the poll that takes it stores the
//! position of the next lap. Positions are `lap | index` with `index < cap` and `lap` a
//! multiple of `one_lap` (the next power of two above `cap`), so the capacity is exact.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::types::WorkCompletion;

/// Keeps the head and the tail on separate cache lines (pollers and producers run on
/// different threads).
#[repr(align(128))]
struct Padded(AtomicU64);

struct Slot {
    stamp: AtomicU64,
    wc: UnsafeCell<WorkCompletion>,
}

/// A bounded multi-producer, multi-consumer FIFO of work completions, batch-polled.
pub(crate) struct WcRing {
    slots: Box<[Slot]>,
    one_lap: u64,
    /// `one_lap - 1`: the index part of a position.
    mask: u64,
    /// The capacity (`slots.len()`), as a position.
    cap: u64,
    /// The next position to poll; read and written only by the thread holding `polling`.
    head: Padded,
    tail: Padded,
    /// Set while a thread polls.
    polling: AtomicBool,
}

// SAFETY: a slot's completion is written only by the producer whose compare-and-swap claimed
// its position and read only by the poller holding the poller flag after the stamp (Release
// by the writer, Acquire by the reader) said it was written; the stamp's store after
// the read (Release) hands it back to the next lap's producer (Acquire). No slot is ever
// accessed by two threads without one of these happens-before edges.
unsafe impl Sync for WcRing {}
// SAFETY: the ring owns plain `Copy` data; moving it between threads moves nothing shared.
unsafe impl Send for WcRing {}

impl WcRing {
    /// A ring holding at most `cap` completions (at least 1).
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        let slots = (0..cap)
            .map(|i| Slot {
                stamp: AtomicU64::new(i as u64),
                wc: UnsafeCell::new(WorkCompletion::default()),
            })
            .collect();
        let one_lap = (cap as u64 + 1).next_power_of_two();
        WcRing {
            slots,
            one_lap,
            mask: one_lap - 1,
            cap: cap as u64,
            head: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            polling: AtomicBool::new(false),
        }
    }

    /// The capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The position after `pos`: the next index, or index 0 of the next lap (the lap part
    /// is a multiple of `one_lap`, so setting every index bit and adding one moves to it).
    #[inline(always)]
    fn next(&self, pos: u64) -> u64 {
        if (pos & self.mask) + 1 < self.cap {
            pos + 1
        } else {
            (pos | self.mask).wrapping_add(1)
        }
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &Slot {
        // The index part of a position is always below `cap` (see `next`).
        &self.slots[(pos & self.mask) as usize]
    }

    /// Appends `wc`; gives it back if the ring is full. Inlined into the completion pushes
    /// (two per I/O): as a call it saved and restored registers around ≈ 30 instructions.
    #[inline(always)]
    pub(crate) fn push(&self, wc: WorkCompletion) -> Result<(), WorkCompletion> {
        let mut tail = self.tail.0.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(tail);
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == tail {
                let next = self.next(tail);
                match self.tail.0.compare_exchange_weak(
                    tail,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the compare-and-swap gave this thread position `tail`, whose
                        // slot the stamp (Acquire) says its last reader has released.
                        unsafe { *slot.wc.get() = wc };
                        slot.stamp.store(tail + 1, Ordering::Release);
                        return Ok(());
                    }
                    Err(t) => tail = t,
                }
            } else if stamp.wrapping_add(self.one_lap) == tail + 1 {
                // The slot still holds the previous lap's completion: full, unless a poll
                // has just taken it (then the stamp moves on and we look again).
                return Err(wc);
            } else {
                // Another producer claimed `tail` and has not written yet, or `tail` is stale.
                std::hint::spin_loop();
                tail = self.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Moves up to `out.len()` completions, oldest first, into `out`; returns how many.
    ///
    /// One poller at a time takes completions (a flag taken per poll, not per completion,
    /// and only when something is there); a thread that finds another one polling gets 0, as
    /// if that poller had taken everything first.
    #[inline]
    pub(crate) fn pop_into(&self, out: &mut [WorkCompletion]) -> usize {
        let head = self.head.0.load(Ordering::Relaxed);
        if out.is_empty() || self.slot(head).stamp.load(Ordering::Relaxed) != head + 1 {
            return 0; // empty, or a producer has not finished writing the oldest completion
        }
        if self.polling.swap(true, Ordering::Acquire) {
            return 0;
        }
        // The flag orders this poller after the previous one: the head it left is current.
        let mut pos = self.head.0.load(Ordering::Relaxed);
        let mut n = 0;
        while n < out.len() {
            let slot = self.slot(pos);
            if slot.stamp.load(Ordering::Acquire) != pos + 1 {
                break;
            }
            // SAFETY: the stamp (Acquire) says the producer of position `pos` has written the
            // slot; the flag makes this thread the only reader, and no producer writes the
            // slot again until the stamp below releases it.
            out[n] = unsafe { *slot.wc.get() };
            slot.stamp
                .store(pos.wrapping_add(self.one_lap), Ordering::Release);
            pos = self.next(pos);
            n += 1;
        }
        self.head.0.store(pos, Ordering::Relaxed);
        self.polling.store(false, Ordering::Release);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id: id,
            ..Default::default()
        }
    }

    #[test]
    fn holds_exactly_its_capacity_in_order_across_laps() {
        for cap in [1, 3, 4, 5, 256] {
            let r = WcRing::new(cap);
            assert_eq!(r.capacity(), cap);
            let mut out = [WorkCompletion::default(); 7];
            let mut next_in = 0;
            let mut next_out = 0;
            for round in 0..50 {
                // Fill completely: the push after the last free slot is refused.
                while r.push(wc(next_in)).is_ok() {
                    next_in += 1;
                }
                assert_eq!(next_in - next_out, cap as u64, "cap {cap} round {round}");
                assert_eq!(r.push(wc(999)).unwrap_err().wr_id, 999);
                // Drain part of it (a different amount each round), in order.
                let take = (round % cap) + 1;
                let mut got = 0;
                while got < take {
                    let want = (take - got).min(out.len());
                    let n = r.pop_into(&mut out[..want]);
                    assert!(n > 0);
                    for w in &out[..n] {
                        assert_eq!(w.wr_id, next_out);
                        next_out += 1;
                    }
                    got += n;
                }
            }
            while r.pop_into(&mut out) > 0 {}
            assert_eq!(r.pop_into(&mut out), 0);
            assert!(r.push(wc(1)).is_ok(), "empty again");
        }
    }

    /// Producers on two threads and a poller on a third share a ring much smaller than what
    /// goes through it: every completion arrives exactly once, each producer's in its order.
    #[test]
    fn two_producer_threads_and_a_poller_lose_nothing_and_keep_order() {
        const N: u64 = 100_000;
        let r = Arc::new(WcRing::new(5));
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let r = Arc::clone(&r);
                std::thread::spawn(move || {
                    for i in 0..N {
                        let mut w = wc(p << 32 | i);
                        while let Err(back) = r.push(w) {
                            w = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u64; 2];
        let mut out = [WorkCompletion::default(); 3];
        while next != [N, N] {
            let n = r.pop_into(&mut out);
            if n == 0 {
                std::thread::yield_now();
            }
            for w in &out[..n] {
                let (p, i) = ((w.wr_id >> 32) as usize, w.wr_id & 0xffff_ffff);
                assert_eq!(i, next[p], "producer {p} out of order or duplicated");
                next[p] += 1;
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(r.pop_into(&mut out), 0);
    }

    /// Two pollers share one ring fed by a producer thread: each completion is taken once.
    /// (Without the poller flag, the pollers take the same slots and the ring stalls: the
    /// deadline turns that into a failure.)
    #[test]
    fn two_poller_threads_never_take_one_completion_twice() {
        use std::sync::atomic::AtomicU64;
        use std::time::{Duration, Instant};
        const N: u64 = 100_000;
        let deadline = Instant::now() + Duration::from_secs(60);
        let r = Arc::new(WcRing::new(4));
        let taken = Arc::new(AtomicU64::new(0));
        let pollers: Vec<_> = (0..2)
            .map(|_| {
                let (r, taken) = (Arc::clone(&r), Arc::clone(&taken));
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    let mut out = [WorkCompletion::default(); 3];
                    while taken.load(Ordering::Relaxed) < N && Instant::now() < deadline {
                        // Batches of 1 to 3, spinning: the pollers overlap as often as they can.
                        let n = r.pop_into(&mut out[..1 + seen.len() % 3]);
                        seen.extend(out[..n].iter().map(|w| w.wr_id));
                        taken.fetch_add(n as u64, Ordering::Relaxed);
                        if n == 0 {
                            // Nothing there: let the pusher run (three threads on a machine
                            // of two cores under load would otherwise starve it).
                            std::thread::yield_now();
                        }
                    }
                    seen
                })
            })
            .collect();
        for i in 0..N {
            let mut w = wc(i);
            while let Err(back) = r.push(w) {
                assert!(Instant::now() < deadline, "stalled at {i}");
                w = back;
                std::thread::yield_now();
            }
        }
        let mut all: Vec<u64> = Vec::new();
        for p in pollers {
            let seen = p.join().unwrap();
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]),
                "a poller saw them out of order"
            );
            all.extend(seen);
        }
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
    }
}
