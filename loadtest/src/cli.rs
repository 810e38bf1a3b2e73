//! Command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Which server protocol to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// idgen's binary protocol (HELLO, then GET_IDS of `--batch`).
    Idgen,
    /// Redis: `INCRBY <key> <batch>` per request, the answer counts as `batch` IDs.
    Redis,
    /// idgen's HTTP ID API (HTTP/1.1, keep-alive, pipelined): `POST /ids` with `--batch 1`,
    /// else `POST /ids/batch` with `{"count": <batch>}`.
    Http,
}

/// How a closed-loop connection writes its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WritePattern {
    /// Keep --pipeline requests in flight: each read's answers make room, and the requests
    /// that fill it go out in one write.
    Refill,
    /// Write a whole window of --pipeline requests in one write, read the answers as they
    /// come, and write the next window once all are answered (as redis-benchmark's -P does).
    Window,
}

impl WritePattern {
    pub fn name(self) -> &'static str {
        match self {
            WritePattern::Refill => "refill",
            WritePattern::Window => "window",
        }
    }
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Idgen => "idgen",
            Target::Redis => "redis",
            Target::Http => "http",
        }
    }
}

/// Load tester for idgen: throughput, HDR latency percentiles and an end-of-run uniqueness
/// check, over the ID protocol or the HTTP ID API; the same workload can be pointed at Redis
/// (`INCRBY`) for a side-by-side comparison.
///
/// Without --rate the load is closed-loop (keep --pipeline requests in flight per
/// connection). With --rate it is open-loop at a fixed total rate, and latency is measured
/// from each request's intended send time (coordinated-omission correction, as wrk2).
///
/// Exit status: 0 on success, 1 if --verify found a duplicate, an out-of-order ID, an ID with
/// the sign bit set or an answer of the wrong size, 2 on a usage or fatal error.
#[derive(Debug, Parser)]
#[command(name = "idgen-loadtest", version)]
pub struct Cli {
    /// Server address (with --target http, the node's HTTP ID API address); repeat to spread
    /// the connections round-robin over several servers.
    #[arg(long = "addr", value_name = "HOST:PORT", required = true)]
    pub addrs: Vec<String>,

    /// Number of TCP connections.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,

    /// Requests in flight per connection (the most, with --rate).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub pipeline: u32,

    /// IDs per request (GET_IDS count, the INCRBY increment, or the HTTP batch's count).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,

    /// How long to measure, after the warmup (e.g. 10s, 1m, 500ms) [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "requests")]
    pub duration: Option<Duration>,

    /// Total requests to measure across all connections, instead of --duration.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,

    /// Run this long first without measuring (IDs are still verified).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub warmup: Duration,

    /// Total requests per second, open-loop, latency from the intended send time.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// How a closed-loop connection writes its requests (see the values).
    #[arg(long, value_enum, default_value_t = WritePattern::Refill, conflicts_with = "rate")]
    pub write_pattern: WritePattern,

    /// Keep every ID and check uniqueness and per-connection order at the end (8 bytes/ID).
    #[arg(long)]
    pub verify: bool,

    /// Ask for range answers (GET_RANGES, protocol version 2): the server sends runs of
    /// consecutive IDs, counted (and with --verify expanded) here. idgen target only.
    #[arg(long)]
    pub ranges: bool,

    /// Ask for version 7 UUIDs (GET_UUIDS of --batch, protocol version 4) instead of IDs:
    /// each UUID counts as one ID, and --verify checks the IDs they were made from (the
    /// node's layout takes each apart). idgen target only.
    #[arg(long, conflicts_with_all = ["ranges", "sequence"])]
    pub uuids: bool,

    /// Ask with GET_IDS_WITH (protocol version 5) and this `after`: every ID answered must be
    /// above it (1: always already true, so the run measures the option's own cost). idgen
    /// target only.
    #[arg(long, value_name = "ID", conflicts_with_all = ["ranges", "sequence", "uuids"])]
    pub after_id: Option<u64>,

    /// Ask with GET_IDS_WITH and a new idempotency key in every request (the node must run
    /// with --idempotency-window). idgen target only.
    #[arg(long, conflicts_with_all = ["ranges", "sequence", "uuids"])]
    pub idempotency_keys: bool,

    /// Ask with GET_IDS_WITH for masked IDs (MASKED_IDS; the node must have masking keys):
    /// counted, not verified (masked IDs are in no order). idgen target only.
    #[arg(long, conflicts_with_all = ["ranges", "sequence", "uuids", "verify"])]
    pub masked: bool,

    /// Print one JSON object at the end instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Write one JSON object per second to this file (one a line): t, requests, ids, errors
    /// and latency percentiles (µs) of that second, warmup included.
    #[arg(long, value_name = "FILE")]
    pub interval_json: Option<PathBuf>,

    /// Write the per-second latency histograms (nanoseconds) to this file in HdrHistogram's
    /// interval log format (compressed V2 histograms, readable by HdrHistogram's log tools).
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,

    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,

    /// Server protocol.
    #[arg(long, value_enum, default_value_t = Target::Idgen)]
    pub target: Target,

    /// Take a named sequence's values instead of IDs: GET_VALUES of --batch values (protocol
    /// version 3) with --target idgen, `POST /seq/NAME` (or `/seq/NAME/batch` with --batch
    /// above 1) with --target http; --verify checks them as IDs.
    #[arg(long, value_name = "NAME")]
    pub sequence: Option<String>,

    /// Key incremented with --target redis.
    #[arg(long, default_value = "idgen-loadtest")]
    pub redis_key: String,

    /// Speak TLS: verify the server's certificate against this CA bundle (PEM) and its name
    /// against the host of --addr (or --tls-server-name). The idgen target offers ALPN
    /// idgen/1.
    #[arg(long, value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for mutual TLS; needs --tls-key and --tls-ca.
    #[arg(long, value_name = "PATH", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM file; never given on the command line
    /// itself); needs --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// The name the server's certificate must carry, instead of the host of each --addr
    /// (e.g. one certificate for the whole cluster); needs --tls-ca.
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    pub tls_server_name: Option<String>,

    /// Runtime worker threads [default: number of cores].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if r.is_finite() && r > 0.0 && r <= 1e9 {
        Ok(r)
    } else {
        Err("the rate must be a number of requests per second in (0, 1e9]".into())
    }
}
