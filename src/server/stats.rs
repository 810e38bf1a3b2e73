//! Per-shard counters. Each is written by its shard's thread only (a plain load and store, no
//! locked instruction) and read by the metrics scrape, which sums the shards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idgen_protocol::Status;

pub(crate) use crate::generator::bump;
use crate::generator::GeneratorStats;

/// Upper bounds (inclusive) of the batch-size histogram buckets.
pub const BATCH_BUCKETS: [u64; 8] = [1, 8, 64, 512, 4096, 16_384, 65_536, u64::MAX];

/// Counters of one shard.
#[derive(Debug, Default)]
pub struct ShardStats {
    /// Requests answered (every opcode, errors included).
    pub requests: AtomicU64,
    /// GET_IDS requests answered with IDs.
    pub id_requests: AtomicU64,
    /// HTTP ID API requests answered (errors included).
    pub http_requests: AtomicU64,
    /// Error answers, by position in [`Status::TABLE`].
    pub errors: [AtomicU64; 16],
    /// Connections currently open on this shard.
    pub connections_open: AtomicU64,
    /// Connections accepted since start.
    pub connections_total: AtomicU64,
    /// Connections refused at the connection limit.
    pub connections_refused: AtomicU64,
    /// GET_IDS batch sizes, counted per bucket of [`BATCH_BUCKETS`].
    pub batch_buckets: [AtomicU64; 8],
    /// The generator counters of this shard (shared across lease changes).
    pub generator: Arc<GeneratorStats>,
    /// Request latency buckets (µs upper bounds in [`LATENCY_BUCKETS_US`]): from the moment a
    /// read brought the request in to the moment its answer was written to the socket. Every
    /// request of one read shares one measurement (two clock reads per read, not per request).
    pub latency_buckets: [AtomicU64; 8],
    pub latency_sum_us: AtomicU64,
    /// Lease generation the shard's generator works under (0: none yet).
    pub generation: AtomicU64,
}

/// Upper bounds (inclusive) of the request-latency histogram buckets, in µs.
pub const LATENCY_BUCKETS_US: [u64; 8] = [10, 50, 100, 500, 1_000, 5_000, 20_000, u64::MAX];

#[inline]
pub(crate) fn drop_one(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).saturating_sub(1),
        Ordering::Relaxed,
    );
}

impl ShardStats {
    #[inline]
    pub(crate) fn error(&self, status: Status) {
        let i = Status::TABLE
            .iter()
            .position(|s| s.status == status)
            .unwrap_or(self.errors.len() - 1)
            .min(self.errors.len() - 1);
        bump(&self.errors[i], 1);
    }

    #[inline]
    pub(crate) fn batch(&self, count: u64) {
        let i = BATCH_BUCKETS
            .iter()
            .position(|&b| count <= b)
            .unwrap_or(BATCH_BUCKETS.len() - 1);
        bump(&self.batch_buckets[i], 1);
    }

    /// Records `n` requests that took `us` each.
    #[inline]
    pub(crate) fn latency_n(&self, us: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = LATENCY_BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(LATENCY_BUCKETS_US.len() - 1);
        bump(&self.latency_buckets[i], n);
        bump(&self.latency_sum_us, us.saturating_mul(n));
    }

    /// Error answers by status, for the metrics layer.
    pub fn errors_by_status(&self) -> Vec<(Status, u64)> {
        Status::TABLE
            .iter()
            .enumerate()
            .take(self.errors.len())
            .map(|(i, info)| (info.status, self.errors[i].load(Ordering::Relaxed)))
            .collect()
    }
}
