//! Per-shard counters. Each is written by its shard's thread only (a plain load and store, no
//! locked instruction) and read by the metrics scrape, which sums the shards. How each is
//! exposed is declared once, in the metrics catalogue (`super::metrics`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idgen_protocol::Status;

pub(crate) use idgen_core::generator::bump;
use idgen_core::generator::GeneratorStats;
use idgen_core::histogram::{bucket_of, Histogram};

/// Upper bounds (inclusive) of the batch-size histogram's buckets, in IDs (then `+Inf`).
pub const BATCH_BUCKETS: [u64; 7] = [1, 8, 64, 512, 4096, 16_384, 65_536];

/// Upper bounds (inclusive) of the request-duration histogram's buckets, in µs (then `+Inf`):
/// fine between 10 µs and 1 ms, where the answers of a healthy node fall, so that a p99 in
/// that range interpolates within a narrow bucket.
pub const REQUEST_BUCKETS_US: [u64; 17] = [
    5, 10, 20, 35, 50, 75, 100, 150, 250, 500, 750, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000,
];

/// The request kinds whose durations are measured: the front that answers them and the
/// operation (the `front` and `op` labels of `idgen_request_duration_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// ID protocol `GET_IDS`.
    GetIds,
    /// ID protocol `GET_RANGES`.
    GetRanges,
    /// ID protocol `HELLO`.
    Hello,
    /// ID protocol `PING`.
    Ping,
    /// ID protocol `GET_VALUES` (a named sequence's values).
    GetValues,
    /// ID protocol `GET_UUIDS` (version 7 UUIDs).
    GetUuids,
    /// HTTP `POST /ids`.
    HttpIds,
    /// HTTP `POST /ids/batch`.
    HttpBatch,
    /// HTTP `POST /uuids`.
    HttpUuids,
    /// HTTP `POST /uuids/batch`.
    HttpUuidsBatch,
}

impl Op {
    /// Every kind, in the order of [`ShardStats::request_duration`].
    pub const ALL: [Op; 10] = [
        Op::GetIds,
        Op::GetRanges,
        Op::Hello,
        Op::Ping,
        Op::GetValues,
        Op::GetUuids,
        Op::HttpIds,
        Op::HttpBatch,
        Op::HttpUuids,
        Op::HttpUuidsBatch,
    ];

    /// The ID protocol's kinds: the first six of [`Op::ALL`].
    pub const PROTOCOL: usize = 6;

    /// `protocol` or `http`.
    pub const fn front(self) -> &'static str {
        match self {
            Op::GetIds | Op::GetRanges | Op::Hello | Op::Ping | Op::GetValues | Op::GetUuids => {
                "protocol"
            }
            Op::HttpIds | Op::HttpBatch | Op::HttpUuids | Op::HttpUuidsBatch => "http",
        }
    }

    /// The `op` label.
    pub const fn name(self) -> &'static str {
        match self {
            Op::GetIds => "get_ids",
            Op::GetRanges => "get_ranges",
            Op::Hello => "hello",
            Op::Ping => "ping",
            Op::GetValues => "get_values",
            Op::GetUuids => "get_uuids",
            Op::HttpIds => "ids",
            Op::HttpBatch => "batch",
            Op::HttpUuids => "uuids",
            Op::HttpUuidsBatch => "uuids_batch",
        }
    }

    /// The ID protocol's kind of a frame with this opcode (`None`: an unknown opcode).
    #[inline]
    pub const fn of_opcode(opcode: u8) -> Option<Op> {
        match opcode {
            idgen_protocol::OP_GET_IDS => Some(Op::GetIds),
            idgen_protocol::OP_GET_RANGES => Some(Op::GetRanges),
            idgen_protocol::OP_HELLO => Some(Op::Hello),
            idgen_protocol::OP_PING => Some(Op::Ping),
            idgen_protocol::OP_GET_VALUES => Some(Op::GetValues),
            idgen_protocol::OP_GET_UUIDS => Some(Op::GetUuids),
            _ => None,
        }
    }
}

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
    pub errors: [AtomicU64; Status::TABLE.len()],
    /// Connections currently open on this shard.
    pub connections_open: AtomicU64,
    /// Connections accepted since start.
    pub connections_total: AtomicU64,
    /// Connections refused at the connection limit.
    pub connections_refused: AtomicU64,
    /// IDs per request answered with IDs (either front), bounds [`BATCH_BUCKETS`].
    pub batch_sizes: Histogram<7>,
    /// The generator counters of this shard (shared across lease changes).
    pub generator: Arc<GeneratorStats>,
    /// Request durations (µs, bounds [`REQUEST_BUCKETS_US`]) by kind, in the order of
    /// [`Op::ALL`]. ID protocol: from the moment a read brought the request in to the moment
    /// its answer was written to the socket; every request of one read shares one
    /// measurement (two clock reads per read, not per request). HTTP: from the request's head
    /// being parsed to its answer being handed to the connection.
    pub request_duration: [Histogram<17>; Op::ALL.len()],
}

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
        self.batch_sizes
            .bump_n(bucket_of(&BATCH_BUCKETS, count), count, 1);
    }

    /// Counts `n` requests answered with `ids` IDs in all, whose batch sizes all fall in
    /// `bucket` of [`BATCH_BUCKETS`] (a connection's tally of one read's worth of requests).
    #[inline]
    pub(crate) fn served_n(&self, bucket: usize, n: u64, ids: u64) {
        bump(&self.id_requests, n);
        self.batch_sizes.add(bucket, n, ids);
    }

    /// Records the ID protocol's requests answered by one write, `answered[i]` of kind
    /// `Op::ALL[i]`, that took `us` each: one bucket lookup for all of them.
    #[inline]
    pub(crate) fn protocol_durations(&self, us: u64, answered: &[u64; Op::PROTOCOL]) {
        let bucket = bucket_of(&REQUEST_BUCKETS_US, us);
        for (h, &n) in self.request_duration.iter().zip(answered) {
            if n != 0 {
                h.bump_n(bucket, us, n);
            }
        }
    }

    /// Records one request of kind `op` that took `us`.
    #[inline]
    pub(crate) fn record_duration(&self, op: Op, us: u64) {
        self.request_duration[op as usize].bump_n(bucket_of(&REQUEST_BUCKETS_US, us), us, 1);
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
