//! A fixed-bucket histogram of integer values (durations in µs, batch sizes) that other threads
//! read: the node's metrics scrape turns it into a Prometheus histogram. The bucket bounds are
//! a constant of whoever records (declared next to it, and named by the metrics catalogue);
//! the histogram holds only the counts.
//!
//! Two ways to record: [`Histogram::bump_n`] for a histogram that one thread writes (a shard's:
//! a plain load and store, no locked instruction), [`Histogram::record`] for one that several
//! may write (an atomic add; off the hot path).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::generator::bump;

/// Counts per bucket of `N` finite upper bounds (inclusive), one more for values above the
/// last bound (the `+Inf` bucket), and the sum of the values recorded.
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    counts: [AtomicU64; N],
    over: AtomicU64,
    sum: AtomicU64,
}

impl<const N: usize> Default for Histogram<N> {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            over: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }
}

/// The bucket a value falls in under `bounds` (ascending, inclusive upper bounds): its index,
/// or `N` for a value above the last bound.
#[inline]
pub fn bucket_of<const N: usize>(bounds: &[u64; N], value: u64) -> usize {
    bounds.partition_point(|&b| b < value)
}

/// What a histogram held when it was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Per bucket (not cumulative): one per finite bound, then the `+Inf` bucket.
    pub counts: Vec<u64>,
    /// The sum of the values recorded.
    pub sum: u64,
}

impl Snapshot {
    /// An empty snapshot of a histogram with `n` finite bounds.
    pub fn zero(n: usize) -> Snapshot {
        Snapshot {
            counts: vec![0; n + 1],
            sum: 0,
        }
    }

    /// Adds `other`'s counts and sum to these (the shards' histograms into the node's).
    pub fn add(&mut self, other: &Snapshot) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.wrapping_add(*b);
        }
        self.sum = self.sum.wrapping_add(other.sum);
    }

    /// The values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0, |a, b| a.wrapping_add(*b))
    }
}

impl<const N: usize> Histogram<N> {
    fn slot(&self, bucket: usize) -> &AtomicU64 {
        self.counts.get(bucket).unwrap_or(&self.over)
    }

    /// Counts `n` values of `value` each, in the bucket `bucket` (from [`bucket_of`], so that
    /// one lookup serves several histograms with the same bounds). Only for a histogram that a
    /// single thread writes: a load and a store per counter, no locked instruction.
    #[inline]
    pub fn bump_n(&self, bucket: usize, value: u64, n: u64) {
        bump(self.slot(bucket), n);
        bump(&self.sum, value.saturating_mul(n));
    }

    /// Counts `n` values summing to `sum`, all in the bucket `bucket`. Only for a histogram that
    /// a single thread writes, as [`Histogram::bump_n`].
    #[inline]
    pub fn add(&self, bucket: usize, n: u64, sum: u64) {
        bump(self.slot(bucket), n);
        bump(&self.sum, sum);
    }

    /// Counts one value under `bounds`, from any thread (atomic adds).
    pub fn record(&self, bounds: &[u64; N], value: u64) {
        self.slot(bucket_of(bounds, value))
            .fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// The counts and the sum as they are now.
    pub fn snapshot(&self) -> Snapshot {
        let mut counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        counts.push(self.over.load(Ordering::Relaxed));
        Snapshot {
            counts,
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [u64; 3] = [10, 100, 1000];

    #[test]
    fn values_land_in_the_first_bucket_whose_bound_is_not_below_them() {
        let cases = [
            (0, 0),
            (10, 0),
            (11, 1),
            (100, 1),
            (101, 2),
            (1000, 2),
            (1001, 3),
            (u64::MAX, 3),
        ];
        for (value, bucket) in cases {
            assert_eq!(bucket_of(&BOUNDS, value), bucket, "{value}");
        }
    }

    #[test]
    fn both_ways_of_recording_count_and_sum() {
        let h = Histogram::<3>::default();
        h.record(&BOUNDS, 5);
        h.record(&BOUNDS, 5000);
        h.bump_n(bucket_of(&BOUNDS, 50), 50, 3);
        let s = h.snapshot();
        assert_eq!(s.counts, vec![1, 3, 0, 1]);
        assert_eq!(s.sum, 5 + 5000 + 150);
        assert_eq!(s.count(), 5);
        let mut total = Snapshot::zero(3);
        total.add(&s);
        total.add(&s);
        assert_eq!(total.counts, vec![2, 6, 0, 2]);
        assert_eq!(total.sum, 2 * s.sum);
    }
}
