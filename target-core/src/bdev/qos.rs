//! Per-bdev QoS rate limits (`bdev_set_qos_limit`), with SPDK's semantics: limits per second on
//! I/Os (reads and writes together) and on bytes (read and write together, read only, write
//! only), enforced across every reactor's channel in timeslices of 1 ms. Each timeslice allows
//! a thousandth of each limit; an I/O is admitted while every active limit has allowance left
//! and may overdraw it (a large I/O is never stuck), the overdraft being paid from the next
//! timeslice. Admitted I/Os go to the backend; the others wait in their channel, in order, for a
//! later timeslice.
//!
//! The allowance is shared by all reactors through atomics (one timeslice start, one counter
//! per active limit): no lock, and nothing at all for a bdev without limits beyond one relaxed
//! load per I/O.
//!
//! Timeslices that pass while I/Os wait and no reactor looks (a reactor descheduled on a busy
//! machine) are made up when one looks again, up to [`MAX_CATCH_UP`] of them, so the rate holds
//! however rarely the reactors run; the waiting I/Os are what the made-up allowance is spent
//! on. Timeslices that pass with nothing waiting (an idle bdev) are not: the first I/O after
//! idle gets one timeslice's allowance, never a burst.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

use super::BdevOp;

/// Length of a timeslice (SPDK_BDEV_QOS_TIMESLICE_IN_USEC).
pub const TIMESLICE_NS: u64 = 1_000_000;
/// Missed timeslices made up for at once while I/Os wait (one second of allowance at most).
pub const MAX_CATCH_UP: u64 = 1000;
/// The smallest I/O limit, and its step: limits are multiples of it (SPDK's rule).
pub const MIN_IOS_PER_SEC: u64 = 1000;
/// One megabyte of the `*_mbytes_per_sec` limits: SPDK's MB is 1024 × 1024 bytes.
pub const MBYTE: u64 = 1024 * 1024;

/// Limits per second; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QosLimits {
    /// I/O operations (reads, writes, unmaps, write-zeroes, compares).
    pub rw_ios_per_sec: u64,
    /// Megabytes read and written.
    pub rw_mbytes_per_sec: u64,
    /// Megabytes read.
    pub r_mbytes_per_sec: u64,
    /// Megabytes written.
    pub w_mbytes_per_sec: u64,
}

impl QosLimits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        *self != QosLimits::default()
    }

    /// Checks SPDK's rules: an I/O limit is a multiple of 1000.
    pub fn validate(&self) -> Result<(), String> {
        if !self.rw_ios_per_sec.is_multiple_of(MIN_IOS_PER_SEC) {
            return Err(format!(
                "rw_ios_per_sec {} is not a multiple of {MIN_IOS_PER_SEC}",
                self.rw_ios_per_sec
            ));
        }
        for (name, mb) in [
            ("rw_mbytes_per_sec", self.rw_mbytes_per_sec),
            ("r_mbytes_per_sec", self.r_mbytes_per_sec),
            ("w_mbytes_per_sec", self.w_mbytes_per_sec),
        ] {
            if mb.checked_mul(MBYTE).is_none() || mb * MBYTE > i64::MAX as u64 {
                return Err(format!("{name} {mb} is too large"));
            }
        }
        Ok(())
    }

    /// Per-timeslice allowances: I/Os, rw bytes, read bytes, write bytes (0: unlimited).
    fn per_slice(&self) -> [i64; 4] {
        let slice = |per_sec: u64| (per_sec / (1_000_000_000 / TIMESLICE_NS)).max(1) as i64;
        let on = |v: u64, f: &dyn Fn(u64) -> i64| if v == 0 { 0 } else { f(v) };
        [
            on(self.rw_ios_per_sec, &slice),
            on(self.rw_mbytes_per_sec, &|m| slice(m * MBYTE)),
            on(self.r_mbytes_per_sec, &|m| slice(m * MBYTE)),
            on(self.w_mbytes_per_sec, &|m| slice(m * MBYTE)),
        ]
    }
}

/// Which limits an I/O draws on and by how much: I/Os, rw bytes, read bytes, write bytes.
fn cost(op: &BdevOp, block_size: u64) -> Option<[i64; 4]> {
    let bytes = |n: u64| (n.saturating_mul(block_size)).min(i64::MAX as u64) as i64;
    Some(match *op {
        BdevOp::Read { num_blocks, .. } | BdevOp::Compare { num_blocks, .. } => {
            let b = bytes(num_blocks);
            [1, b, b, 0]
        }
        BdevOp::Write { num_blocks, .. } => {
            let b = bytes(num_blocks);
            [1, b, 0, b]
        }
        BdevOp::Unmap { .. } | BdevOp::WriteZeroes { .. } => [1, 0, 0, 0],
        BdevOp::Flush => return None,
    })
}

/// A bdev's QoS state, shared by its channels on every reactor.
#[derive(Debug, Default)]
pub struct Qos {
    enabled: AtomicBool,
    /// Per-timeslice allowance of each limit (0: that limit is off).
    quota: [AtomicI64; 4],
    /// Allowance left in the current timeslice.
    left: [AtomicI64; 4],
    /// Start of the current timeslice ([`crate::reactor::instant_ns`] form).
    slice_start: AtomicU64,
    /// Channels holding throttled I/Os (changed when a channel's queue becomes non-empty or
    /// empty, not per I/O): while any does, missed timeslices are made up.
    backlogged: AtomicU32,
    /// The limits as set (for `bdev_get_bdevs` and save_config).
    limits: parking_lot::Mutex<QosLimits>,
}

impl Qos {
    /// Sets the limits (all zero: QoS off). Takes effect from the next I/O.
    pub fn set(&self, limits: QosLimits) {
        let mut cur = self.limits.lock();
        let q = limits.per_slice();
        for (i, v) in q.iter().enumerate() {
            self.quota[i].store(*v, Ordering::Relaxed);
            self.left[i].store(*v, Ordering::Relaxed);
        }
        self.slice_start.store(0, Ordering::Relaxed);
        *cur = limits;
        self.enabled.store(limits.any(), Ordering::Release);
    }

    /// The limits as set.
    pub fn limits(&self) -> QosLimits {
        *self.limits.lock()
    }

    /// Whether any limit is active (one relaxed load: the per-I/O check).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// A channel's throttled queue became non-empty.
    pub fn backlog_started(&self) {
        self.backlogged.fetch_add(1, Ordering::AcqRel);
    }

    /// A channel's throttled queue became empty (or the channel holding it went away).
    pub fn backlog_ended(&self) {
        let _ = self
            .backlogged
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Starts a new timeslice if the current one is over: each allowance gets its quota,
    /// minus what the last timeslice overdrew. When the channels looked only after several
    /// timeslices (a busy or slow reactor) while I/Os were waiting, each missed one adds its
    /// quota too, up to [`MAX_CATCH_UP`] of them, so that the rate holds however often the
    /// reactors poll; with nothing waiting the missed timeslices are not made up (no burst
    /// after idle), and allowance left over is never carried.
    fn roll(&self, now_ns: u64) {
        let start = self.slice_start.load(Ordering::Acquire);
        let elapsed = now_ns.saturating_sub(start);
        if elapsed < TIMESLICE_NS {
            return;
        }
        let (slices, next) = if start == 0 {
            (1, now_ns)
        } else {
            let k = elapsed / TIMESLICE_NS;
            let waiting = self.backlogged.load(Ordering::Acquire) > 0;
            (
                if waiting { k.min(MAX_CATCH_UP) } else { 1 },
                start + k * TIMESLICE_NS,
            )
        };
        if self
            .slice_start
            .compare_exchange(start, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return; // another reactor rolled it
        }
        for i in 0..4 {
            let quota = self.quota[i].load(Ordering::Relaxed);
            if quota == 0 {
                continue;
            }
            let grant = quota.saturating_mul(slices as i64);
            let _ = self.left[i].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |left| {
                Some(if left > 0 {
                    grant
                } else {
                    left.saturating_add(grant)
                })
            });
        }
    }

    /// Admits an I/O if every limit it draws on has allowance left in this timeslice, and
    /// draws on them; `false`: wait for a later timeslice.
    pub fn admit(&self, op: &BdevOp, block_size: u64, now_ns: u64) -> bool {
        let Some(cost) = cost(op, block_size) else {
            return true;
        };
        self.roll(now_ns);
        for (i, c) in cost.iter().enumerate() {
            if *c > 0
                && self.quota[i].load(Ordering::Relaxed) != 0
                && self.left[i].load(Ordering::Acquire) <= 0
            {
                return false;
            }
        }
        for (i, c) in cost.iter().enumerate() {
            if *c > 0 && self.quota[i].load(Ordering::Relaxed) != 0 {
                self.left[i].fetch_sub(*c, Ordering::AcqRel);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(blocks: u64) -> BdevOp {
        BdevOp::Read {
            offset_blocks: 0,
            num_blocks: blocks,
        }
    }

    fn write(blocks: u64) -> BdevOp {
        BdevOp::Write {
            offset_blocks: 0,
            num_blocks: blocks,
            fua: false,
        }
    }

    /// I/Os admitted over `ms` milliseconds when `op` is offered as fast as possible.
    fn admitted(q: &Qos, op: &BdevOp, ms: u64) -> u64 {
        let mut n = 0;
        let mut now = 5_000_000_000u64;
        let end = now + ms * 1_000_000;
        while now < end {
            while q.admit(op, 512, now) {
                n += 1;
            }
            now += 10_000; // 10 µs later
        }
        n
    }

    #[test]
    fn iops_limit_admits_a_thousandth_per_timeslice() {
        let q = Qos::default();
        assert!(q.admit(&read(8), 512, 1), "no limit: everything goes");
        q.set(QosLimits {
            rw_ios_per_sec: 20_000,
            ..Default::default()
        });
        assert!(q.enabled());
        let n = admitted(&q, &read(8), 1000);
        assert!(
            (19_900..=20_100).contains(&n),
            "{n} I/Os in one second at 20k IOPS"
        );
        q.set(QosLimits::default());
        assert!(!q.enabled());
    }

    #[test]
    fn byte_limits_apply_by_direction_and_large_ios_overdraw() {
        let q = Qos::default();
        q.set(QosLimits {
            w_mbytes_per_sec: 10,
            ..Default::default()
        });
        // Reads are not limited by a write limit.
        assert!((0..10_000).all(|i| q.admit(&read(8), 512, 5_000_000_000 + i)));
        // 1 MiB writes against 10 MiB/s: 10 a second, each overdrawing its timeslice.
        let n = admitted(&q, &write(2048), 1000);
        assert!(
            (10..=11).contains(&n),
            "{n} 1-MiB writes in one second at 10 MiB/s"
        );
        q.set(QosLimits {
            rw_mbytes_per_sec: 1,
            ..Default::default()
        });
        let bytes = admitted(&q, &read(8), 1000) * 4096;
        assert!(
            (MBYTE - 8192..=MBYTE + 8192).contains(&bytes),
            "{bytes} bytes at 1 MiB/s"
        );
    }

    /// I/Os admitted when a channel with a backlog polls every `every_ns` for one second (both
    /// ends included).
    fn admitted_polling_every(q: &Qos, every_ns: u64, now: &mut u64) -> u64 {
        let mut n = 0u64;
        let end = *now + 1_000_000_000;
        q.backlog_started();
        while *now <= end {
            while q.admit(&read(1), 512, *now) {
                n += 1;
            }
            *now += every_ns;
        }
        q.backlog_ended();
        n
    }

    #[test]
    fn a_reactor_that_polls_rarely_still_gets_the_rate() {
        let q = Qos::default();
        q.set(QosLimits {
            rw_ios_per_sec: 10_000,
            ..Default::default()
        });
        let mut now = 7_000_000_000u64;
        // Polled every 3.5 ms, then every 40 ms (a reactor descheduled on a busy machine:
        // the old 10 ms catch-up bound admitted a quarter of the rate here).
        for every in [3_500_000, 40_000_000] {
            let n = admitted_polling_every(&q, every, &mut now);
            assert!(
                (9_900..=10_100).contains(&n),
                "{n} I/Os in one second at 10k IOPS, polled every {every} ns"
            );
        }
        // Starved for two seconds with I/Os waiting: at most MAX_CATCH_UP timeslices at once.
        q.backlog_started();
        now += 2_000_000_000;
        let mut burst = 0;
        while q.admit(&read(1), 512, now) {
            burst += 1;
        }
        q.backlog_ended();
        assert_eq!(burst, 10 * MAX_CATCH_UP);
    }

    #[test]
    fn no_burst_after_idle() {
        let q = Qos::default();
        q.set(QosLimits {
            rw_ios_per_sec: 10_000,
            ..Default::default()
        });
        let mut now = 9_000_000_000u64;
        let n = admitted_polling_every(&q, 1_000_000, &mut now);
        assert!(
            (10_000..=10_010).contains(&n),
            "{n} I/Os in one second at 10k IOPS"
        );
        // Five idle seconds (nothing waiting), then a host sends as fast as it can: one
        // timeslice's allowance, not the idle time's.
        now += 5_000_000_000;
        let mut burst = 0;
        while q.admit(&read(1), 512, now) {
            burst += 1;
        }
        assert_eq!(burst, 10);
        // A channel that ends its backlog twice (dropped after draining) does not underflow.
        q.backlog_ended();
        now += 5_000_000_000;
        let mut again = 0;
        while q.admit(&read(1), 512, now) {
            again += 1;
        }
        assert_eq!(again, 10);
    }

    #[test]
    fn limits_follow_spdk_rules() {
        let bad = QosLimits {
            rw_ios_per_sec: 1500,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("multiple of 1000"));
        assert!(QosLimits::default().validate().is_ok());
        assert!(
            QosLimits {
                rw_mbytes_per_sec: u64::MAX / 2,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert_eq!(cost(&BdevOp::Flush, 512), None, "flushes are never limited");
    }
}
