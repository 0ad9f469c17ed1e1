//! A fixed-size log-linear latency histogram (no allocation when recording): 32 sub-buckets per
//! power of two, so a percentile is within about 3% of the true value.

const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// Latencies in nanoseconds.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    n: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            n: 0,
            sum: 0,
            max: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let sub = (v >> shift) as usize & (SUB - 1);
    ((shift as usize + 1) << SUB_BITS) + sub
}

/// The smallest value of bucket `i` (the value reported for it).
fn value(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let shift = (i >> SUB_BITS) - 1;
    let sub = (i & (SUB - 1)) as u64;
    (SUB as u64 + sub) << shift
}

impl Histogram {
    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.n += 1;
        self.sum += u128::from(ns);
        self.max = self.max.max(ns);
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.n += o.n;
        self.sum += o.sum;
        self.max = self.max.max(o.max);
    }

    /// Samples.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Mean in ns.
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }

    /// Largest sample in ns.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `p`-th percentile (0..=100) in ns.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        if p >= 100.0 {
            return self.max;
        }
        let want = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return value(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            31,
            32,
            33,
            100,
            1000,
            4095,
            4096,
            1 << 20,
            123_456_789,
            u64::MAX,
        ] {
            let i = index(v);
            assert!(i < BUCKETS);
            assert!(i >= last, "index of {v}");
            last = i;
            let lo = value(i);
            assert!(lo <= v, "{lo} <= {v}");
            assert!(v - lo <= v / 32 + 1, "{v} in bucket from {lo}");
        }
    }

    #[test]
    fn percentiles() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.percentile(50.0) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.04, "{p50}");
        let p99 = h.percentile(99.0) as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.04, "{p99}");
        assert_eq!(h.percentile(100.0), 1_000_000);
        assert!((h.mean() - 500_500.0).abs() < 1.0);
    }
}
