//! Rates between two samples: IOPS, MiB/s, average latency from the `bdev_get_iostat` counter
//! deltas, p99 latency from the histogram deltas, and reactor busy %. Counters that went
//! backwards (a `bdev_reset_iostat` between the samples) give no rate for that interval.

use super::sample::{BdevCounters, ReactorSample};

/// What one interval of one bdev (or a sum of bdevs) did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IoRates {
    /// Reads per second.
    pub read_iops: f64,
    /// Writes per second.
    pub write_iops: f64,
    /// MiB read and written per second.
    pub mib_s: f64,
    /// Average read/write latency, µs (`None`: no I/O in the interval).
    pub avg_us: Option<f64>,
    /// 99th percentile read/write latency, µs (`None`: no I/O or no histogram).
    pub p99_us: Option<f64>,
}

impl IoRates {
    /// Reads plus writes per second.
    pub fn iops(&self) -> f64 {
        self.read_iops + self.write_iops
    }
}

/// Counter deltas between two samples, summable over bdevs. `None` where a counter went
/// backwards (reset).
pub fn counter_delta(prev: &BdevCounters, cur: &BdevCounters) -> Option<BdevCounters> {
    Some(BdevCounters {
        bytes_read: cur.bytes_read.checked_sub(prev.bytes_read)?,
        num_read_ops: cur.num_read_ops.checked_sub(prev.num_read_ops)?,
        bytes_written: cur.bytes_written.checked_sub(prev.bytes_written)?,
        num_write_ops: cur.num_write_ops.checked_sub(prev.num_write_ops)?,
        read_latency_ticks: cur
            .read_latency_ticks
            .checked_sub(prev.read_latency_ticks)?,
        write_latency_ticks: cur
            .write_latency_ticks
            .checked_sub(prev.write_latency_ticks)?,
    })
}

/// Adds `d` into `acc`.
pub fn add_counters(acc: &mut BdevCounters, d: &BdevCounters) {
    acc.bytes_read += d.bytes_read;
    acc.num_read_ops += d.num_read_ops;
    acc.bytes_written += d.bytes_written;
    acc.num_write_ops += d.num_write_ops;
    acc.read_latency_ticks += d.read_latency_ticks;
    acc.write_latency_ticks += d.write_latency_ticks;
}

/// Histogram bucket deltas (`None` if the shapes differ or a bucket went backwards).
pub fn hist_delta(prev: &[u64], cur: &[u64]) -> Option<Vec<u64>> {
    if prev.len() != cur.len() {
        return None;
    }
    prev.iter()
        .zip(cur)
        .map(|(p, c)| c.checked_sub(*p))
        .collect()
}

/// Adds `d` into `acc` (sized to the longer of the two).
pub fn add_hist(acc: &mut Vec<u64>, d: &[u64]) {
    if acc.len() < d.len() {
        acc.resize(d.len(), 0);
    }
    for (a, x) in acc.iter_mut().zip(d) {
        *a += x;
    }
}

/// The `q` quantile (0 < q ≤ 1) of a histogram, µs: non-cumulative `buckets`, bucket `i`
/// counting latencies under `bounds_us[i]` (the last bucket, past every bound, is unbounded).
/// Interpolates linearly inside the bucket the quantile falls in, as Prometheus'
/// `histogram_quantile` does; in the unbounded bucket it answers the highest bound.
pub fn quantile_us(buckets: &[u64], bounds_us: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 || !(q > 0.0 && q <= 1.0) {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let lower = if i == 0 { 0.0 } else { bounds_us[i - 1] as f64 };
            let Some(&upper) = bounds_us.get(i) else {
                return Some(lower);
            };
            let within = (rank - below as f64) / n as f64;
            return Some(lower + (upper as f64 - lower) * within);
        }
        below += n;
    }
    None
}

/// Rates of counter deltas `d` over `secs` seconds, latency sums in `tick_rate` ticks per
/// second; `hist` the histogram delta of the same interval.
pub fn io_rates(
    d: &BdevCounters,
    secs: f64,
    tick_rate: u64,
    hist: Option<&[u64]>,
    bounds_us: &[u64],
) -> IoRates {
    if secs <= 0.0 {
        return IoRates::default();
    }
    let ops = d.num_read_ops + d.num_write_ops;
    let ticks = d.read_latency_ticks + d.write_latency_ticks;
    IoRates {
        read_iops: d.num_read_ops as f64 / secs,
        write_iops: d.num_write_ops as f64 / secs,
        mib_s: (d.bytes_read + d.bytes_written) as f64 / secs / (1024.0 * 1024.0),
        avg_us: (ops > 0).then(|| ticks as f64 / ops as f64 / tick_rate.max(1) as f64 * 1e6),
        p99_us: hist.and_then(|h| quantile_us(h, bounds_us, 0.99)),
    }
}

/// A reactor's busy share of the interval, percent, from its busy and idle time deltas as
/// `spdk_top` computes it. A reactor asleep the whole interval (in interrupt mode its times
/// are only added up when it wakes) was 0 % busy. `None`: the counters went backwards, as
/// after a restart of the target.
pub fn busy_pct(prev: &ReactorSample, cur: &ReactorSample) -> Option<f64> {
    let busy = cur.busy.checked_sub(prev.busy)?;
    let idle = cur.idle.checked_sub(prev.idle)?;
    let all = busy + idle;
    Some(if all == 0 {
        0.0
    } else {
        busy as f64 * 100.0 / all as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(reads: u64, writes: u64, lat: u64) -> BdevCounters {
        BdevCounters {
            bytes_read: reads * 4096,
            num_read_ops: reads,
            bytes_written: writes * 4096,
            num_write_ops: writes,
            read_latency_ticks: reads * lat,
            write_latency_ticks: writes * lat,
        }
    }

    #[test]
    fn rates_come_from_the_deltas_of_successive_samples() {
        // 2 s apart: 2,000 more reads and 512 more writes, all at 50 µs.
        let a = counters(1_000, 100, 50_000);
        let b = counters(3_000, 612, 50_000);
        let d = counter_delta(&a, &b).unwrap();
        let r = io_rates(&d, 2.0, 1_000_000_000, None, &[]);
        assert_eq!(
            (r.read_iops, r.write_iops, r.iops()),
            (1_000.0, 256.0, 1_256.0)
        );
        assert_eq!(r.mib_s, (2_000.0 + 512.0) * 4096.0 / 2.0 / 1_048_576.0);
        assert!((r.avg_us.unwrap() - 50.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.p99_us, None, "no histogram");

        let idle = io_rates(
            &counter_delta(&b, &b).unwrap(),
            2.0,
            1_000_000_000,
            None,
            &[],
        );
        assert_eq!((idle.iops(), idle.avg_us), (0.0, None));
        assert_eq!(io_rates(&d, 0.0, 1, None, &[]), IoRates::default());
    }

    #[test]
    fn a_reset_between_samples_gives_no_rate() {
        assert_eq!(counter_delta(&counters(10, 0, 1), &counters(2, 0, 1)), None);
        assert_eq!(hist_delta(&[5, 5], &[4, 9]), None);
        assert_eq!(hist_delta(&[5, 5], &[5, 5, 0]), None);
        assert_eq!(hist_delta(&[5, 5], &[6, 9]), Some(vec![1, 4]));
    }

    #[test]
    fn p99_interpolates_in_its_bucket() {
        let bounds = [1, 2, 4, 8, 16];
        // 100 I/Os: 90 under 2 µs, 9 in [4, 8), 1 in [8, 16): the 99th falls at the end of
        // [4, 8).
        let h = [0, 90, 0, 9, 1, 0];
        assert_eq!(quantile_us(&h, &bounds, 0.99), Some(8.0));
        assert_eq!(quantile_us(&h, &bounds, 0.5), Some(1.0 + 50.0 / 90.0));
        assert_eq!(quantile_us(&h, &bounds, 1.0), Some(16.0));
        // Half way into the first bucket starts at 0.
        assert_eq!(quantile_us(&[2, 0], &[1], 0.5), Some(0.5));
        // The unbounded bucket answers the highest bound.
        assert_eq!(quantile_us(&[1, 0, 99], &[1, 2], 0.99), Some(2.0));
        assert_eq!(quantile_us(&[0, 0, 0], &[1, 2], 0.99), None);
        assert_eq!(quantile_us(&h, &bounds, 0.0), None);

        // Over an interval: the delta of two cumulative-in-time histograms.
        let before = [0, 10, 0, 0, 0, 0];
        let after = [0, 100, 0, 9, 1, 0];
        let d = hist_delta(&before, &after).unwrap();
        let r = io_rates(
            &counters(100, 0, 3_000),
            1.0,
            1_000_000_000,
            Some(&d),
            &bounds,
        );
        assert_eq!(r.p99_us, Some(8.0));
        let mut sum = vec![0, 1];
        add_hist(&mut sum, &d);
        assert_eq!(sum, [0, 91, 0, 9, 1, 0]);
    }

    #[test]
    fn busy_percent_of_the_interval() {
        let r = |busy, idle| ReactorSample {
            busy,
            idle,
            ..ReactorSample::default()
        };
        assert_eq!(busy_pct(&r(100, 100), &r(400, 200)), Some(75.0));
        assert_eq!(busy_pct(&r(100, 100), &r(100, 100)), Some(0.0), "asleep");
        assert_eq!(
            busy_pct(&r(100, 100), &r(50, 500)),
            None,
            "target restarted"
        );
        let mut acc = BdevCounters::default();
        add_counters(&mut acc, &counters(1, 2, 3));
        add_counters(&mut acc, &counters(1, 2, 3));
        assert_eq!(acc, counters(2, 4, 3));
    }
}
