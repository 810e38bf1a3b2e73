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

/// How a shard counter becomes one metric family of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A counter with a `shard` label.
    PerShard,
    /// A counter summed over the shards.
    Total,
    /// A gauge summed over the shards.
    TotalGauge,
    /// A gauge: the largest value of any shard.
    Max,
    /// A gauge: 1 if any shard's value is non-zero.
    Any,
}

/// A metric read from every shard's counters, declared once, next to what it counts (the
/// metrics scrape walks [`ShardStats::METRICS`]).
#[derive(Clone, Copy, Debug)]
pub struct ShardMetric {
    pub name: &'static str,
    pub help: &'static str,
    pub family: Family,
    pub read: fn(&ShardStats) -> u64,
}

/// A histogram of the shards' buckets, declared next to its bounds.
#[derive(Clone, Copy, Debug)]
pub struct ShardHistogram {
    pub name: &'static str,
    pub help: &'static str,
    /// Upper bounds (inclusive) of the buckets, in `unit`s; `u64::MAX` is +Inf.
    pub bounds: &'static [u64; 8],
    /// Bucket bounds and the sum are divided by this for the exposition (1e6: µs → s).
    pub unit: f64,
    pub buckets: fn(&ShardStats) -> &[AtomicU64; 8],
    pub sum: fn(&ShardStats) -> u64,
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl ShardStats {
    /// Every counter of a shard as the metrics scrape exposes it.
    pub const METRICS: &'static [ShardMetric] = &[
        ShardMetric {
            name: "idgen_ids_issued",
            help: "IDs issued, by shard",
            family: Family::PerShard,
            read: |s| load(&s.generator.issued),
        },
        ShardMetric {
            name: "idgen_requests",
            help: "Protocol requests answered (errors included), by shard",
            family: Family::PerShard,
            read: |s| load(&s.requests),
        },
        ShardMetric {
            name: "idgen_http_requests",
            help: "HTTP ID API requests answered (errors included), by shard",
            family: Family::PerShard,
            read: |s| load(&s.http_requests),
        },
        ShardMetric {
            name: "idgen_sequence_exhaustion_waits",
            help: "Times a shard waited for the next millisecond because its sequence space was used up",
            family: Family::PerShard,
            read: |s| load(&s.generator.exhaustion_waits),
        },
        ShardMetric {
            name: "idgen_clock_rollback_events",
            help: "Clock rollbacks detected (one per episode), by shard",
            family: Family::PerShard,
            read: |s| load(&s.generator.rollback_events),
        },
        ShardMetric {
            name: "idgen_clock_rollback_largest_ms",
            help: "Largest clock rollback seen, ms",
            family: Family::Max,
            read: |s| load(&s.generator.largest_rollback_ms),
        },
        ShardMetric {
            name: "idgen_clock_behind",
            help: "1 while a shard's clock is behind the last timestamp it used",
            family: Family::Any,
            read: |s| u64::from(s.generator.clock_behind.load(Ordering::Relaxed)),
        },
        ShardMetric {
            name: "idgen_connections_open",
            help: "Open protocol connections",
            family: Family::TotalGauge,
            read: |s| load(&s.connections_open),
        },
        ShardMetric {
            name: "idgen_connections",
            help: "Protocol connections accepted",
            family: Family::Total,
            read: |s| load(&s.connections_total),
        },
        ShardMetric {
            name: "idgen_connections_refused",
            help: "Protocol connections refused at the connection limit",
            family: Family::Total,
            read: |s| load(&s.connections_refused),
        },
    ];

    /// The shards' histograms.
    pub const HISTOGRAMS: &'static [ShardHistogram] = &[
        ShardHistogram {
            name: "idgen_batch_size",
            help: "IDs per GET_IDS request",
            bounds: &BATCH_BUCKETS,
            unit: 1.0,
            buckets: |s| &s.batch_buckets,
            sum: |s| load(&s.generator.issued),
        },
        ShardHistogram {
            name: "idgen_request_latency_seconds",
            help: "From reading a request to writing its answer",
            bounds: &LATENCY_BUCKETS_US,
            unit: 1e6,
            buckets: |s| &s.latency_buckets,
            sum: |s| load(&s.latency_sum_us),
        },
    ];

    /// The name and help of the error answers by wire status ([`errors_by_status`]).
    ///
    /// [`errors_by_status`]: ShardStats::errors_by_status
    pub const ERRORS: (&'static str, &'static str) =
        ("idgen_errors", "Error answers, by wire status");
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

    /// Counts a request answered with `count` IDs (either front): one more ID request, and its
    /// batch size.
    #[inline]
    pub(crate) fn served(&self, count: u64) {
        bump(&self.id_requests, 1);
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
