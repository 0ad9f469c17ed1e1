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

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use super::BdevOp;

/// Length of a timeslice (SPDK_BDEV_QOS_TIMESLICE_IN_USEC).
pub const TIMESLICE_NS: u64 = 1_000_000;
/// Missed timeslices made up for at once (10 ms of allowance at most).
pub const MAX_CATCH_UP: u64 = 10;
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

    /// Starts a new timeslice if the current one is over: each allowance gets its quota,
    /// minus what the last timeslice overdrew. When the channels looked only after several
    /// timeslices (a busy or slow reactor), each missed one adds its quota too, up to
    /// [`MAX_CATCH_UP`] of them, so that the rate holds however often the reactors poll;
    /// allowance left over is not carried beyond that.
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
            (k.min(MAX_CATCH_UP), start + k * TIMESLICE_NS)
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

    #[test]
    fn a_reactor_that_polls_rarely_still_gets_the_rate_but_no_long_burst() {
        let q = Qos::default();
        q.set(QosLimits {
            rw_ios_per_sec: 10_000,
            ..Default::default()
        });
        // Polled every 3.5 ms for one second.
        let (mut n, mut now) = (0u64, 7_000_000_000u64);
        for _ in 0..286 {
            while q.admit(&read(1), 512, now) {
                n += 1;
            }
            now += 3_500_000;
        }
        assert!(
            (9_900..=10_100).contains(&n),
            "{n} I/Os in one second at 10k IOPS"
        );
        // After a long idle period, at most MAX_CATCH_UP timeslices at once.
        now += 5_000_000_000;
        let mut burst = 0;
        while q.admit(&read(1), 512, now) {
            burst += 1;
        }
        assert_eq!(burst, 10 * MAX_CATCH_UP);
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
