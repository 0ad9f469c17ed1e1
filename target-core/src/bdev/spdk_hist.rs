//! SPDK's bdev latency histogram (`bdev_enable_histogram`, `bdev_get_histogram`,
//! `bdev_get_histogram_borders`), bucket for bucket as `spdk/histogram_data.h` lays it out, so
//! that SPDK's histogram tooling decodes rtgt's answer.
//!
//! A data point `v` (a latency in ticks; rtgt's tick is a nanosecond, `tsc_rate` 10^9) falls
//! in *range* `r` = the position of its highest set bit above the granularity `g`
//! (`64 - g - clz(v)`, 0 for small values) and, within the range, in one of `2^g` buckets.
//! A histogram keeps the ranges `min_range..=max_range` (from `min_nsec` and `max_nsec`);
//! values below or above them land in the first or last bucket. The wire form is the bucket
//! array as little-endian `u64`s, base64-encoded.
//!
//! Each channel tallies into its own [`HistogramData`] (single writer: a plain store per I/O,
//! no lock); a read sums the channels.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use parking_lot::Mutex;

use super::IoType;

/// SPDK's default granularity (`SPDK_HISTOGRAM_GRANULARITY_DEFAULT`).
pub const DEFAULT_GRANULARITY: u32 = 7;
/// SPDK's `bdev_enable_histogram` default `min_nsec`.
pub const DEFAULT_MIN_NS: u64 = 1_000;
/// SPDK's `bdev_enable_histogram` default `max_nsec` (120 s).
pub const DEFAULT_MAX_NS: u64 = 120_000_000_000;
/// The largest granularity accepted: 2^12 buckets per range, at most 52 ranges, 1.7 MiB per
/// channel. SPDK accepts any value and fails the allocation; rtgt refuses it up front.
pub const MAX_GRANULARITY: u32 = 12;

/// What `bdev_enable_histogram` configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramConfig {
    /// log2 of the buckets per range.
    pub granularity: u32,
    /// Smallest latency tracked apart, in nanoseconds.
    pub min_ns: u64,
    /// Latencies from here on share the last bucket.
    pub max_ns: u64,
    /// Only this I/O type is tallied (`opc`); `None`: every type.
    pub io_type: Option<IoType>,
}

impl Default for HistogramConfig {
    fn default() -> Self {
        Self {
            granularity: DEFAULT_GRANULARITY,
            min_ns: DEFAULT_MIN_NS,
            max_ns: DEFAULT_MAX_NS,
            io_type: None,
        }
    }
}

/// The SPDK name of an I/O type (`opc`), as `bdev_get_bdevs supported_io_types` spells it.
pub fn io_type_name(t: IoType) -> &'static str {
    match t {
        IoType::Read => "read",
        IoType::Write => "write",
        IoType::Flush => "flush",
        IoType::WriteZeroes => "write_zeroes",
        IoType::Unmap => "unmap",
        IoType::Compare => "compare",
    }
}

/// The I/O type an SPDK `opc` name means.
pub fn io_type_by_name(name: &str) -> Option<IoType> {
    [
        IoType::Read,
        IoType::Write,
        IoType::Flush,
        IoType::WriteZeroes,
        IoType::Unmap,
        IoType::Compare,
    ]
    .into_iter()
    .find(|t| io_type_name(*t) == name)
}

impl HistogramConfig {
    /// Checks the parameters (granularity 1..=[`MAX_GRANULARITY`], `min_ns < max_ns`).
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_GRANULARITY).contains(&self.granularity) {
            return Err(format!(
                "granularity {} is out of range (1..={MAX_GRANULARITY})",
                self.granularity
            ));
        }
        if self.min_ns >= self.max_ns {
            return Err(format!(
                "min_nsec ({}) must be less than max_nsec ({})",
                self.min_ns, self.max_ns
            ));
        }
        Ok(())
    }

    fn range_of(&self, v: u64) -> u32 {
        let lsb = 64 - self.granularity;
        let clz = v.leading_zeros();
        lsb.saturating_sub(clz)
    }

    /// The first range kept.
    pub fn min_range(&self) -> u32 {
        self.range_of(self.min_ns)
    }

    /// The last range kept.
    pub fn max_range(&self) -> u32 {
        self.range_of(self.max_ns - 1)
    }

    /// Buckets per range.
    fn per_range(&self) -> usize {
        1usize << self.granularity
    }

    /// Buckets in all.
    pub fn num_buckets(&self) -> usize {
        self.per_range() * (self.max_range() - self.min_range() + 1) as usize
    }

    /// The bucket a data point falls in (`spdk_histogram_data_tally`).
    pub fn bucket_of(&self, v: u64) -> usize {
        let (min, max) = (self.min_range(), self.max_range());
        let range = self.range_of(v);
        let (range, index) = if range < min {
            (min, 0)
        } else if range > max {
            (max, self.per_range() - 1)
        } else {
            let shift = range.saturating_sub(1);
            (range, ((v >> shift) as usize) & (self.per_range() - 1))
        };
        (((range - min) as usize) << self.granularity) + index
    }

    /// The exclusive upper end of bucket `i` (`__spdk_histogram_data_get_bucket_start` of
    /// the bucket's range and index).
    pub fn bucket_end(&self, i: usize) -> u64 {
        let range = self.min_range() + (i >> self.granularity) as u32;
        let index = (i & (self.per_range() - 1)) as u64 + 1;
        if range > 0 {
            (1u64 << (range + self.granularity - 1)) + (index << (range - 1))
        } else {
            index
        }
    }

    /// Whether an I/O of type `t` is tallied.
    pub fn counts(&self, t: IoType) -> bool {
        self.io_type.is_none_or(|want| want == t)
    }
}

/// One channel's histogram: written by the channel's reactor only, read by any thread.
#[derive(Debug)]
pub struct HistogramData {
    config: HistogramConfig,
    buckets: Box<[AtomicU64]>,
}

impl HistogramData {
    /// An empty histogram for `config` (validated by the caller).
    pub fn new(config: HistogramConfig) -> Self {
        Self {
            config,
            buckets: (0..config.num_buckets())
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// The configuration it was made for.
    pub fn config(&self) -> &HistogramConfig {
        &self.config
    }

    /// Counts an I/O of type `t` that took `lat_ns` (single writer).
    #[inline]
    pub fn tally(&self, t: IoType, lat_ns: u64) {
        if self.config.counts(t) {
            let b = &self.buckets[self.config.bucket_of(lat_ns)];
            b.store(b.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        }
    }

    /// Adds the counts into `acc` (of [`HistogramConfig::num_buckets`] entries).
    pub fn add_into(&self, acc: &mut [u64]) {
        for (a, b) in acc.iter_mut().zip(self.buckets.iter()) {
            *a += b.load(Ordering::Relaxed);
        }
    }
}

/// A bdev's histogram switch, shared by the bdev's channels: the RPC side sets the
/// configuration and bumps the generation; each channel compares the generation once per poll
/// (one relaxed load) and, when it moved, takes the new configuration and makes its own
/// [`HistogramData`] on its reactor.
#[derive(Debug, Default)]
pub struct HistControl {
    generation: AtomicU64,
    config: Mutex<Option<HistogramConfig>>,
}

impl HistControl {
    /// Turns the histogram on with `config` (replacing any running one; counts restart) or off.
    pub fn set(&self, config: Option<HistogramConfig>) {
        *self.config.lock() = config;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The configuration in effect.
    pub fn config(&self) -> Option<HistogramConfig> {
        *self.config.lock()
    }

    /// The current generation (changes with every [`HistControl::set`]).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A fresh histogram for the configuration in effect, if any.
    pub fn fresh(&self) -> Option<Arc<HistogramData>> {
        self.config().map(|c| Arc::new(HistogramData::new(c)))
    }
}

/// The `bdev_get_histogram` answer: the buckets as little-endian `u64`s in base64.
pub fn encode(buckets: &[u64]) -> String {
    let bytes: Vec<u8> = buckets.iter().flat_map(|b| b.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `bdev_get_histogram_borders`: for each border (ascending, nanoseconds) the count of data
/// points up to it, then the total — SPDK's `spdk_histogram_get_borders_count`, which credits
/// a bucket to the borders at or above the bucket's lower end.
pub fn borders_count(config: &HistogramConfig, buckets: &[u64], borders: &[u64]) -> Vec<u64> {
    let n = borders.len() + 1;
    let mut out = vec![0u64; n];
    let (mut idx, mut so_far) = (0, 0u64);
    for (i, &count) in buckets.iter().enumerate() {
        let start = if i == 0 { 0 } else { config.bucket_end(i - 1) };
        so_far += count;
        while idx < n - 1 && start > borders[idx] {
            out[idx + 1] = out[idx];
            idx += 1;
        }
        out[idx] = so_far;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPDK's `spdk_histogram_data_tally` and bucket starts, written out from the header's
    /// definitions for the default granularity, as a cross-check of the closed forms above.
    #[allow(clippy::implicit_saturating_sub)] // kept in the header's shape on purpose
    fn spdk_bucket(g: u32, min_range: u32, max_range: u32, v: u64) -> usize {
        let lsb = 64 - g;
        let clz = if v > 0 { v.leading_zeros() } else { 64 };
        let mut range = if clz <= lsb { lsb - clz } else { 0 };
        let index;
        if range < min_range {
            range = min_range;
            index = 0;
        } else if range > max_range {
            range = max_range;
            index = (1u64 << g) - 1;
        } else {
            let shift = if range == 0 { 0 } else { range - 1 };
            index = (v >> shift) & ((1u64 << g) - 1);
        }
        (((range - min_range) as usize) << g) + index as usize
    }

    #[test]
    fn default_ranges_match_spdk() {
        let c = HistogramConfig::default();
        // 1000 ns: clz 54, LSB 57 → range 3; 120 s - 1: clz 27 → range 30.
        assert_eq!((c.min_range(), c.max_range()), (3, 30));
        assert_eq!(c.num_buckets(), 128 * 28);
    }

    #[test]
    fn buckets_match_spdk_tally() {
        for g in [1, 3, 7, 12] {
            let c = HistogramConfig {
                granularity: g,
                ..Default::default()
            };
            let (lo, hi) = (c.min_range(), c.max_range());
            for v in [
                0u64,
                1,
                999,
                1000,
                1001,
                4095,
                4096,
                65_537,
                1 << 33,
                DEFAULT_MAX_NS - 1,
                DEFAULT_MAX_NS,
                u64::MAX,
            ] {
                let b = c.bucket_of(v);
                assert_eq!(b, spdk_bucket(g, lo, hi, v), "g {g} v {v}");
                assert!(b < c.num_buckets());
            }
        }
    }

    #[test]
    fn a_value_lies_below_its_bucket_end() {
        let c = HistogramConfig::default();
        for v in [1_500u64, 10_000, 123_456, 9_999_999, 1 << 34] {
            let b = c.bucket_of(v);
            assert!(
                v < c.bucket_end(b),
                "{v} in bucket {b} ends {}",
                c.bucket_end(b)
            );
            if b > 0 {
                assert!(v >= c.bucket_end(b - 1), "{v} before bucket {b}");
            }
        }
    }

    #[test]
    fn tally_filters_by_type_and_encodes_little_endian() {
        let c = HistogramConfig {
            io_type: Some(IoType::Read),
            ..Default::default()
        };
        let h = HistogramData::new(c);
        h.tally(IoType::Read, 5_000);
        h.tally(IoType::Read, 5_000);
        h.tally(IoType::Write, 5_000);
        let mut acc = vec![0; c.num_buckets()];
        h.add_into(&mut acc);
        assert_eq!(acc.iter().sum::<u64>(), 2);
        assert_eq!(acc[c.bucket_of(5_000)], 2);
        let raw = base64::engine::general_purpose::STANDARD
            .decode(encode(&acc))
            .unwrap();
        assert_eq!(raw.len(), 8 * c.num_buckets());
        let at = 8 * c.bucket_of(5_000);
        assert_eq!(u64::from_le_bytes(raw[at..at + 8].try_into().unwrap()), 2);
    }

    #[test]
    fn borders_count_below_each_border_then_the_total() {
        let c = HistogramConfig::default();
        let h = HistogramData::new(c);
        for v in [2_000u64, 2_000, 50_000, 3_000_000] {
            h.tally(IoType::Read, v);
        }
        let mut acc = vec![0; c.num_buckets()];
        h.add_into(&mut acc);
        assert_eq!(
            borders_count(&c, &acc, &[1_000, 10_000, 100_000, 10_000_000]),
            vec![0, 2, 3, 4, 4]
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        let bad = |g, lo, hi| {
            HistogramConfig {
                granularity: g,
                min_ns: lo,
                max_ns: hi,
                io_type: None,
            }
            .validate()
            .is_err()
        };
        assert!(bad(0, 1000, 2000));
        assert!(bad(MAX_GRANULARITY + 1, 1000, 2000));
        assert!(bad(7, 2000, 2000));
        assert!(!bad(7, 0, 1));
        assert_eq!(io_type_by_name("write_zeroes"), Some(IoType::WriteZeroes));
        assert_eq!(io_type_by_name("nvme_admin"), None);
    }
}
