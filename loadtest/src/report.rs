//! Merging the per-connection results, the uniqueness check, and the end report (table or
//! JSON).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use crate::conn::{new_histogram, ConnStats, Interval};

/// More IDs than this under --verify is a warning: 8 bytes each (2 GiB), twice during the sort.
pub const VERIFY_WARN_IDS: u64 = 1 << 28;

/// Latency percentiles in microseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    pub mean: f64,
}

/// `ns` as µs, rounded to 0.1 µs.
pub fn us(ns: f64) -> f64 {
    (ns / 100.0).round() / 10.0
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p999: 0.0,
                p9999: 0.0,
                max: 0.0,
                mean: 0.0,
            };
        }
        let q = |q: f64| us(h.value_at_quantile(q) as f64);
        Latency {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: us(h.max() as f64),
            mean: us(h.mean()),
        }
    }
}

/// One line of `--interval-json`: one second (the last one of a run may be shorter) of every
/// connection's answers, warmup included. Field names are the file's (see README.md).
#[derive(Debug, Serialize)]
pub struct IntervalLine {
    /// Seconds since the start of the run, at the end of the interval.
    pub t: f64,
    /// The interval's length in seconds.
    pub interval_s: f64,
    /// Requests answered (with IDs or with an error).
    pub requests: u64,
    pub ids: u64,
    /// Errors (server statuses and client faults).
    pub errors: u64,
    /// Latency of the successful requests, µs (0 when there were none).
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

impl IntervalLine {
    pub fn new(t: std::time::Duration, length: std::time::Duration, iv: &Interval) -> IntervalLine {
        let l = Latency::from_histogram(&iv.hist);
        let ms = |d: std::time::Duration| (d.as_secs_f64() * 1000.0).round() / 1000.0;
        IntervalLine {
            t: ms(t),
            interval_s: ms(length),
            requests: iv.requests,
            ids: iv.ids,
            errors: iv.errors,
            p50_us: l.p50,
            p99_us: l.p99,
            p999_us: l.p999,
            p9999_us: l.p9999,
            max_us: l.max,
        }
    }
}

/// The end report. Field names are the JSON output's (see README.md).
#[derive(Debug, Serialize)]
pub struct Report {
    pub target: &'static str,
    /// `tcp`, `tls` or `mtls` (TLS with a client certificate).
    pub transport: &'static str,
    pub addrs: Vec<String>,
    pub connections: u32,
    pub pipeline: u32,
    pub batch: u32,
    /// Requests per second asked for with --rate (open loop); absent when closed-loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// How a closed-loop connection wrote its requests (`refill` or `window`); absent with
    /// --rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_pattern: Option<&'static str>,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub requests: u64,
    pub ids: u64,
    pub requests_per_sec: f64,
    pub ids_per_sec: f64,
    pub errors: BTreeMap<String, u64>,
    pub reconnects: u64,
    pub unanswered: u64,
    pub latency_us: Latency,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified_ids: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicates: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_order: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sign_bit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrong_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_ok: Option<bool>,
}

/// What the connections measured, merged.
pub struct Merged {
    pub hist: Histogram<u64>,
    pub requests: u64,
    pub ids: u64,
    pub errors: BTreeMap<String, u64>,
    pub reconnects: u64,
    pub unanswered: u64,
    pub last_answer: Option<Instant>,
    pub verified_ids: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub sign_bit: u64,
    pub wrong_count: u64,
}

/// Merge the connections' results; with `verify`, sort all IDs and count duplicates.
pub fn merge(all: Vec<ConnStats>, verify: bool) -> Merged {
    let mut m = Merged {
        hist: new_histogram(),
        requests: 0,
        ids: 0,
        errors: BTreeMap::new(),
        reconnects: 0,
        unanswered: 0,
        last_answer: None,
        verified_ids: 0,
        duplicates: 0,
        out_of_order: 0,
        sign_bit: 0,
        wrong_count: 0,
    };
    let total_ids: usize = all
        .iter()
        .flat_map(|c| &c.id_chunks)
        .map(|chunk| chunk.len())
        .sum();
    if total_ids as u64 > VERIFY_WARN_IDS {
        eprintln!(
            "idgen-loadtest: warning: verifying {total_ids} IDs needs about {} MiB",
            (total_ids * 8) >> 20
        );
    }
    let mut ids: Vec<u64> = Vec::with_capacity(total_ids);
    for c in all {
        let _ = m.hist.add(&c.hist);
        m.requests += c.requests;
        m.ids += c.ids;
        for (k, v) in c.errors {
            *m.errors.entry(k).or_insert(0) += v;
        }
        m.reconnects += c.reconnects;
        m.unanswered += c.unanswered;
        m.last_answer = m.last_answer.max(c.last_answer);
        m.out_of_order += c.out_of_order;
        m.sign_bit += c.sign_bit;
        m.wrong_count += c.wrong_count;
        for chunk in c.id_chunks {
            ids.extend_from_slice(&chunk);
        }
    }
    if verify {
        ids.sort_unstable();
        m.verified_ids = ids.len() as u64;
        m.duplicates = ids.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    }
    m
}

impl Report {
    /// Whether --verify passed (true without --verify).
    pub fn ok(&self) -> bool {
        self.verify_ok.unwrap_or(true)
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let errors = if self.errors.is_empty() {
            "none".to_owned()
        } else {
            let parts: Vec<String> = self
                .errors
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            parts.join(", ")
        };
        let mode = match self.rate {
            Some(r) => format!("open loop at {r} requests/s (latency from intended send time)"),
            None => match self.write_pattern {
                Some("window") => {
                    "closed loop, each window of --pipeline requests written whole".to_owned()
                }
                _ => "closed loop".to_owned(),
            },
        };
        let l = &self.latency_us;
        let transport = match self.transport {
            "tls" => " over TLS",
            "mtls" => " over mutual TLS",
            _ => "",
        };
        let _ = writeln!(s, "target        {}{transport}", self.target);
        let _ = writeln!(s, "addresses     {}", self.addrs.join(", "));
        let _ = writeln!(
            s,
            "workload      {} connection(s) × pipeline {} × batch {}, {mode}",
            self.connections, self.pipeline, self.batch
        );
        let _ = writeln!(
            s,
            "duration      {:.3} s (after {:.3} s warmup)",
            self.duration_s, self.warmup_s
        );
        let _ = writeln!(s, "requests      {}", self.requests);
        let _ = writeln!(s, "IDs           {}", self.ids);
        let _ = writeln!(s, "IDs/s         {:.0}", self.ids_per_sec);
        let _ = writeln!(s, "requests/s    {:.0}", self.requests_per_sec);
        let _ = writeln!(s, "errors        {errors}");
        let _ = writeln!(
            s,
            "reconnects    {}   unanswered requests {}",
            self.reconnects, self.unanswered
        );
        let _ = writeln!(
            s,
            "latency µs    p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}  mean {}",
            l.p50, l.p90, l.p99, l.p999, l.p9999, l.max, l.mean
        );
        if let (Some(n), Some(d), Some(o), Some(b), Some(w)) = (
            self.verified_ids,
            self.duplicates,
            self.out_of_order,
            self.sign_bit,
            self.wrong_count,
        ) {
            let _ = writeln!(
                s,
                "verify        {n} IDs checked: {d} duplicates, {o} out of order, {b} with the sign bit, {w} wrong-size answers: {}",
                if self.ok() { "OK" } else { "FAILED" }
            );
        }
        s
    }
}
