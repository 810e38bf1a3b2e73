//! The metrics catalogue: every family the node exposes on `/metrics`, declared once, with its
//! name, type, labels, unit and meaning, and how the scrape reads it from the node's
//! [`NodeState`]. The admin server's `/metrics` is an [`Exposition`], which walks [`FAMILIES`];
//! the reference `docs/METRICS.md` is rendered from it ([`reference()`]) and a test compares
//! the two.
//!
//! Names follow Prometheus' conventions: base units in the name (`_seconds`, `_bytes`),
//! counters end in `_total`, info gauges in `_info` (value 1, the facts in labels). What the
//! shards count is written by each shard's thread alone (plain loads and stores) and summed
//! here, at scrape time.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idgen_core::histogram::Snapshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::process::ProcessStats;
use super::state::NodeState;
use super::telemetry::{Op, ShardStats, BATCH_BUCKETS, REQUEST_BUCKETS_US};
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::lease::keeper::RENEWAL_BUCKETS_US;
use idgen_core::sequence::holder::{SeqStats, COMMIT_BUCKETS_US};
use idgen_core::store::StoreUrl;
use idgen_core::sync::KernelSync;

/// A family's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// As on a `# TYPE` line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        }
    }
}

/// When a family is on `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// On every node.
    Always,
    /// On a node with a TLS listener (`--tls-listen`, `--tls-http` or `--tls-admin`).
    WithTls,
    /// Where `/proc/self` can be read (Linux).
    OnLinux,
    /// With `--metrics-legacy-names`: a name of the previous release, now `replaced_by`.
    Legacy { replaced_by: &'static str },
}

/// The bucket bounds of a histogram: the constant its recorder counts under.
#[derive(Clone, Copy, Debug)]
pub enum Buckets {
    /// Durations recorded in µs, exposed in seconds.
    Micros(&'static [u64]),
    /// Counts, exposed as they are.
    Count(&'static [u64]),
}

impl Buckets {
    /// The finite upper bounds as exposed (`le`); `+Inf` follows them.
    pub fn bounds(self) -> Vec<f64> {
        match self {
            Buckets::Micros(b) => b.iter().map(|&us| us as f64 / 1e6).collect(),
            Buckets::Count(b) => b.iter().map(|&n| n as f64).collect(),
        }
    }

    /// A recorded sum as exposed.
    fn sum(self, raw: u64) -> f64 {
        match self {
            Buckets::Micros(_) => raw as f64 / 1e6,
            Buckets::Count(_) => raw as f64,
        }
    }
}

/// Reads a family's series at scrape time.
pub type Read = fn(&Scrape<'_>, &mut Series<'_>) -> fmt::Result;

/// One metric family: what the reference documents and what the scrape exposes.
#[derive(Clone, Copy)]
pub struct Family {
    /// The name as exposed (a counter's ends in `_total`).
    pub name: &'static str,
    pub kind: Kind,
    /// The label names, in order; every series has all of them.
    pub labels: &'static [&'static str],
    /// What the value counts or measures (`seconds`, `bytes`, `IDs`; empty for a 0/1 flag or
    /// a number without unit).
    pub unit: &'static str,
    /// Its meaning: the `# HELP` text and the reference's description.
    pub help: &'static str,
    /// The bucket bounds of a histogram.
    pub buckets: Option<Buckets>,
    pub shown: Shown,
    pub read: Read,
}

impl fmt::Debug for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl Family {
    /// The name handed to the encoder, which adds `_total` to a counter's.
    fn encoded_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            Kind::Gauge | Kind::Histogram => self.name,
        }
    }
}

/// What one scrape reads from.
pub struct Scrape<'a> {
    pub node: &'a NodeState,
    /// The wall clock at the scrape, Unix ms.
    pub now_ms: u64,
    /// The process's figures (`None` off Linux).
    pub process: Option<ProcessStats>,
    /// The kernel's clock synchronisation state, read once per scrape (`None` where it cannot
    /// be read).
    pub kernel_sync: Option<KernelSync>,
}

impl Scrape<'_> {
    fn shows(&self, family: &Family) -> bool {
        match family.shown {
            Shown::Always => true,
            Shown::WithTls => self.node.tls.is_some(),
            Shown::OnLinux => self.process.is_some(),
            Shown::Legacy { .. } => self.node.config.admin.metrics_legacy_names,
        }
    }

    fn shards(&self) -> impl Iterator<Item = &ShardStats> {
        self.node.shards.iter().map(|s| s.as_ref())
    }

    fn sum(&self, read: fn(&ShardStats) -> u64) -> u64 {
        self.shards().map(read).fold(0, u64::wrapping_add)
    }

    fn max(&self, read: fn(&ShardStats) -> u64) -> u64 {
        self.shards().map(read).max().unwrap_or(0)
    }

    /// The request-duration histograms, summed over the shards, in the order of [`Op::ALL`].
    fn request_durations(&self) -> Vec<Snapshot> {
        let mut total = vec![Snapshot::zero(REQUEST_BUCKETS_US.len()); Op::ALL.len()];
        for s in self.shards() {
            for (t, h) in total.iter_mut().zip(&s.request_duration) {
                t.add(&h.snapshot());
            }
        }
        total
    }

    fn process(&self, read: fn(&ProcessStats) -> Value) -> Option<Value> {
        self.process.as_ref().map(read)
    }
}

/// A sample's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    U(u64),
    I(i64),
    F(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::I(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::F(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::U(u64::from(v))
    }
}

/// Writes the series of one family, checked against its declaration: its type, and one value
/// per declared label, in order.
pub struct Series<'a> {
    family: &'static Family,
    m: MetricEncoder<'a>,
}

fn write_value(m: &mut MetricEncoder<'_>, kind: Kind, v: Value) -> fmt::Result {
    match (kind, v) {
        (Kind::Counter, Value::U(v)) => m.encode_counter(&v, None::<&Exemplar<NoLabelSet, u64>>),
        (Kind::Counter, Value::F(v)) => m.encode_counter(&v, None::<&Exemplar<NoLabelSet, f64>>),
        (Kind::Counter, Value::I(v)) => {
            let v = u64::try_from(v).map_err(|_| fmt::Error)?;
            m.encode_counter(&v, None::<&Exemplar<NoLabelSet, u64>>)
        }
        (Kind::Gauge, Value::U(v)) => m.encode_gauge(&v),
        (Kind::Gauge, Value::I(v)) => m.encode_gauge(&v),
        (Kind::Gauge, Value::F(v)) => m.encode_gauge(&v),
        (Kind::Histogram, _) => Err(fmt::Error),
    }
}

impl Series<'_> {
    fn pairs<'v>(&self, values: &[&'v str]) -> Result<Vec<(&'static str, &'v str)>, fmt::Error> {
        if values.len() != self.family.labels.len() {
            return Err(fmt::Error);
        }
        Ok(self
            .family
            .labels
            .iter()
            .copied()
            .zip(values.iter().copied())
            .collect())
    }

    /// One sample of a counter or gauge, with the values of the family's labels.
    pub fn value(&mut self, labels: &[&str], v: impl Into<Value>) -> fmt::Result {
        let kind = self.family.kind;
        let pairs = self.pairs(labels)?;
        if pairs.is_empty() {
            write_value(&mut self.m, kind, v.into())
        } else {
            write_value(&mut self.m.encode_family(&pairs)?, kind, v.into())
        }
    }

    /// One histogram series, with the values of the family's labels: per-bucket counts (one
    /// per finite bound, then `+Inf`) and the sum as recorded.
    pub fn histogram(&mut self, labels: &[&str], h: &Snapshot) -> fmt::Result {
        let buckets = match (self.family.kind, self.family.buckets) {
            (Kind::Histogram, Some(b)) => b,
            _ => return Err(fmt::Error),
        };
        let bounds = buckets.bounds();
        if h.counts.len() != bounds.len() + 1 {
            return Err(fmt::Error);
        }
        let pairs: Vec<(f64, u64)> = bounds
            .into_iter()
            .chain([f64::INFINITY])
            .zip(h.counts.iter().copied())
            .collect();
        let (sum, count) = (buckets.sum(h.sum), h.count());
        let labels = self.pairs(labels)?;
        if labels.is_empty() {
            self.m
                .encode_histogram::<NoLabelSet>(sum, count, &pairs, None)
        } else {
            self.m
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(sum, count, &pairs, None)
        }
    }
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// A counter with a `shard` label.
fn per_shard(s: &Scrape<'_>, out: &mut Series<'_>, read: fn(&ShardStats) -> u64) -> fmt::Result {
    for (i, shard) in s.shards().enumerate() {
        out.value(&[&i.to_string()], read(shard))?;
    }
    Ok(())
}

/// A counter with a `sequence` label: one series per named sequence this node was asked for.
fn per_sequence(s: &Scrape<'_>, out: &mut Series<'_>, read: fn(&SeqStats) -> u64) -> fmt::Result {
    let mut r = Ok(());
    s.node.sequences.each_stats(|name, st| {
        if r.is_ok() {
            r = out.value(&[name.as_str()], read(st));
        }
    });
    r
}

/// One unlabelled sample, if there is a value (the process figures).
fn maybe(out: &mut Series<'_>, v: Option<Value>) -> fmt::Result {
    v.map_or(Ok(()), |v| out.value(&[], v))
}

/// Worker IDs in the node's region, or in the whole layout without regions.
fn worker_capacity(s: &Scrape<'_>) -> u64 {
    let layout = s.node.lease.generations().at(s.now_ms).layout;
    if s.node.config.lease.region.region().is_some() {
        layout.workers_per_region()
    } else {
        layout.worker_count()
    }
}

/// The kind of store: `memory`, `embedded`, `etcd` (either scheme), `fdb` or `postgres`.
fn store_kind(url: &StoreUrl) -> &'static str {
    match url {
        StoreUrl::Memory => "memory",
        StoreUrl::Embedded { .. } => "embedded",
        StoreUrl::Etcd { .. } => "etcd",
        StoreUrl::Fdb { .. } => "fdb",
        StoreUrl::Postgres(_) => "postgres",
    }
}

const SECONDS_PER_YEAR: f64 = 365.25 * 86_400.0;

const fn family(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    unit: &'static str,
    help: &'static str,
    read: Read,
) -> Family {
    Family {
        name,
        kind,
        labels,
        unit,
        help,
        buckets: None,
        shown: Shown::Always,
        read,
    }
}

const fn histogram(
    name: &'static str,
    labels: &'static [&'static str],
    unit: &'static str,
    help: &'static str,
    buckets: Buckets,
    read: Read,
) -> Family {
    Family {
        buckets: Some(buckets),
        ..family(name, Kind::Histogram, labels, unit, help, read)
    }
}

const fn shown(shown: Shown, f: Family) -> Family {
    Family { shown, ..f }
}

const fn legacy(replaced_by: &'static str, f: Family) -> Family {
    shown(Shown::Legacy { replaced_by }, f)
}

use Kind::{Counter, Gauge};

/// Every family the node exposes, in the order of `/metrics`.
pub const FAMILIES: &[Family] = &[
    // The shards' counters.
    family(
        "idgen_ids_issued_total",
        Counter,
        &["shard"],
        "IDs",
        "IDs issued, by shard (both fronts)",
        |s, out| per_shard(s, out, |st| load(&st.generator.issued)),
    ),
    family(
        "idgen_requests_total",
        Counter,
        &["shard"],
        "requests",
        "ID protocol requests answered (errors included), by shard",
        |s, out| per_shard(s, out, |st| load(&st.requests)),
    ),
    family(
        "idgen_http_requests_total",
        Counter,
        &["shard"],
        "requests",
        "HTTP ID API requests answered (errors included), by shard",
        |s, out| per_shard(s, out, |st| load(&st.http_requests)),
    ),
    family(
        "idgen_sequence_exhaustion_waits_total",
        Counter,
        &["shard"],
        "waits",
        "Times a shard waited for the next millisecond because its sequence space was used up",
        |s, out| per_shard(s, out, |st| load(&st.generator.exhaustion_waits)),
    ),
    family(
        "idgen_clock_rollback_events_total",
        Counter,
        &["shard"],
        "events",
        "Clock rollbacks detected (one per episode), by shard",
        |s, out| per_shard(s, out, |st| load(&st.generator.rollback_events)),
    ),
    family(
        "idgen_clock_rollback_largest_seconds",
        Gauge,
        &[],
        "seconds",
        "Largest clock rollback any shard has seen",
        |s, out| {
            let ms = s.max(|st| load(&st.generator.largest_rollback_ms));
            out.value(&[], ms as f64 / 1e3)
        },
    ),
    family(
        "idgen_clock_behind",
        Gauge,
        &[],
        "",
        "1 while a shard's clock is behind the last timestamp it used, else 0",
        |s, out| {
            let behind = s
                .shards()
                .any(|st| st.generator.clock_behind.load(Ordering::Relaxed));
            out.value(&[], behind)
        },
    ),
    family(
        "idgen_connections_open",
        Gauge,
        &[],
        "connections",
        "Connections open on the ID protocol and HTTP ID API listeners",
        |s, out| out.value(&[], s.sum(|st| load(&st.connections_open))),
    ),
    family(
        "idgen_connections_total",
        Counter,
        &[],
        "connections",
        "Connections accepted on the ID protocol and HTTP ID API listeners (refused ones included)",
        |s, out| out.value(&[], s.sum(|st| load(&st.connections_total))),
    ),
    family(
        "idgen_connections_refused_total",
        Counter,
        &[],
        "connections",
        "Connections refused at the connection limit (--max-connections)",
        |s, out| out.value(&[], s.sum(|st| load(&st.connections_refused))),
    ),
    family(
        "idgen_errors_total",
        Counter,
        &["status", "name"],
        "answers",
        "Error answers of both fronts, by wire status: its code and name (PROTOCOL.md)",
        |s, out| {
            let mut by_status: Vec<(idgen_protocol::Status, u64)> = Vec::new();
            for st in s.shards() {
                for (status, n) in st.errors_by_status() {
                    match by_status.iter_mut().find(|(s2, _)| *s2 == status) {
                        Some(e) => e.1 += n,
                        None => by_status.push((status, n)),
                    }
                }
            }
            for (status, n) in by_status {
                let code = status.0.to_string();
                out.value(&[&code, status.name().unwrap_or("UNKNOWN")], n)?;
            }
            Ok(())
        },
    ),
    histogram(
        "idgen_batch_size",
        &[],
        "IDs",
        "IDs per request answered with IDs (both fronts)",
        Buckets::Count(&BATCH_BUCKETS),
        |s, out| {
            let mut total = Snapshot::zero(BATCH_BUCKETS.len());
            for st in s.shards() {
                total.add(&st.batch_sizes.snapshot());
            }
            out.histogram(&[], &total)
        },
    ),
    histogram(
        "idgen_request_duration_seconds",
        &["front", "op"],
        "seconds",
        "Time to answer a request, by front and operation. protocol (get_ids, get_ranges, \
         hello, ping, get_values, get_uuids; refusals under their opcode): from the read that \
         brought the request in to the write of its answer, one measurement for every request \
         of one read. http (ids, batch, uuids, uuids_batch): from the request's head being \
         parsed to its answer being handed to the connection",
        Buckets::Micros(&REQUEST_BUCKETS_US),
        |s, out| {
            for (op, h) in Op::ALL.iter().zip(s.request_durations()) {
                out.histogram(&[op.front(), op.name()], &h)?;
            }
            Ok(())
        },
    ),
    // The lease.
    family(
        "idgen_lease_time_remaining_seconds",
        Gauge,
        &[],
        "seconds",
        "Time until the shards reach their lease ceiling (0 without a lease); renewals keep it near the TTL",
        |s, out| out.value(&[], s.node.lease.time_left_ms(s.now_ms) as f64 / 1e3),
    ),
    family(
        "idgen_lease_ttl_seconds",
        Gauge,
        &[],
        "seconds",
        "The lease TTL the node is configured with (--lease-ttl); renewals are due every third of it",
        |s, out| out.value(&[], s.node.config.lease.lease_ttl.as_secs_f64()),
    ),
    family(
        "idgen_lease_renewals_total",
        Counter,
        &["result"],
        "renewals",
        "Lease renewal attempts, by result: ok, failed (the store refused, timed out or left the outcome unknown; a lease found lost counts in idgen_lease_lost_total)",
        |s, out| {
            for (result, n) in s.node.lease.stats.renewals() {
                out.value(&[result], n)?;
            }
            Ok(())
        },
    ),
    histogram(
        "idgen_lease_renewal_duration_seconds",
        &["result"],
        "seconds",
        "Duration of the lease renewal attempts, by result (as idgen_lease_renewals_total counts them)",
        Buckets::Micros(&RENEWAL_BUCKETS_US),
        |s, out| {
            for (result, h) in s.node.lease.stats.renewal_durations() {
                out.histogram(&[result], &h)?;
            }
            Ok(())
        },
    ),
    // Named sequences, one series per sequence this node was asked for (at most a
    // namespace's 1024).
    family(
        "idgen_named_sequence_values_total",
        Counter,
        &["sequence"],
        "values",
        "Values of named sequences answered by this node (ID protocol and HTTP ID API), by sequence",
        |s, out| per_sequence(s, out, |st| load(&st.values)),
    ),
    family(
        "idgen_named_sequence_forwarded_values_total",
        Counter,
        &["sequence"],
        "values",
        "Values of strict named sequences this node answered that the committing node reserved (calls forwarded to it; counted in its idgen_named_sequence_values_total too), by sequence",
        |s, out| per_sequence(s, out, |st| load(&st.forwarded)),
    ),
    family(
        "idgen_named_sequence_commits_total",
        Counter,
        &["sequence"],
        "commits",
        "Store commits that reserved a named sequence's values (a dense block, or a strict commit shared by the calls waiting for it), by sequence; values ÷ commits is the batching",
        |s, out| per_sequence(s, out, |st| load(&st.commits)),
    ),
    family(
        "idgen_named_sequence_commit_failures_total",
        Counter,
        &["sequence"],
        "commits",
        "Reservations of a named sequence that failed or whose outcome is unknown (their values are never handed out), by sequence",
        |s, out| per_sequence(s, out, |st| load(&st.commit_failures)),
    ),
    histogram(
        "idgen_named_sequence_commit_duration_seconds",
        &["sequence"],
        "seconds",
        "Duration of the reservations of a named sequence (failed ones included), by sequence",
        Buckets::Micros(&COMMIT_BUCKETS_US),
        |s, out| {
            let mut r = Ok(());
            s.node.sequences.each_stats(|name, st| {
                if r.is_ok() {
                    r = out.histogram(&[name.as_str()], &st.commit_duration.snapshot());
                }
            });
            r
        },
    ),
    family(
        "idgen_named_sequence_remaining",
        Gauge,
        &["sequence"],
        "values",
        "Values a named sequence has left below its maximum, as this node's last reservation of it found (absent before one)",
        |s, out| {
            let mut r = Ok(());
            s.node.sequences.each_stats(|name, st| {
                let left = load(&st.remaining);
                if r.is_ok() && left != u64::MAX {
                    r = out.value(&[name.as_str()], left);
                }
            });
            r
        },
    ),
    family(
        "idgen_lease_acquisitions_total",
        Counter,
        &[],
        "leases",
        "Leases acquired (the first and every re-acquisition)",
        |s, out| out.value(&[], load(&s.node.lease.stats.acquisitions)),
    ),
    family(
        "idgen_lease_lost_total",
        Counter,
        &[],
        "leases",
        "Leases found lost (another node holds the worker IDs: the shards stopped, the node re-acquires)",
        |s, out| out.value(&[], load(&s.node.lease.stats.lost)),
    ),
    family(
        "idgen_worker_ids_free",
        Gauge,
        &[],
        "worker IDs",
        "Worker IDs free in the node's region (or the cluster, without regions), as of the last look",
        |s, out| out.value(&[], load(&s.node.lease.stats.free_workers)),
    ),
    family(
        "idgen_worker_ids_capacity",
        Gauge,
        &[],
        "worker IDs",
        "Worker IDs in the node's region (or the cluster, without regions): what idgen_worker_ids_free is out of",
        |s, out| out.value(&[], worker_capacity(s)),
    ),
    family(
        "idgen_lease_generation",
        Gauge,
        &[],
        "",
        "Generation of the lease the node holds (0: none)",
        |s, out| {
            let generation = s.node.lease.current().map_or(0, |v| v.grant.generation);
            out.value(&[], generation)
        },
    ),
    // The layout and the clock.
    family(
        "idgen_layout_time_remaining_seconds",
        Gauge,
        &[],
        "seconds",
        "Time until the layout's timestamp range runs out (then no node can issue IDs): the newest layout generation's, a scheduled successor's once there is one",
        |s, out| {
            let left = s.node.lease.generations().newest().layout.time_left(s.now_ms);
            out.value(&[], left.as_secs_f64())
        },
    ),
    family(
        "idgen_clock_drift_seconds",
        Gauge,
        &[],
        "seconds",
        "This node's clock minus its peers' (the median of the estimates; 0 without peers)",
        |s, out| {
            let (drift_ms, _) = s.node.clock_watch.drift_summary();
            out.value(&[], drift_ms as f64 / 1e3)
        },
    ),
    family(
        "idgen_clock_peers",
        Gauge,
        &[],
        "peers",
        "Peers whose clocks were compared with this node's",
        |s, out| {
            let (_, peers) = s.node.clock_watch.drift_summary();
            out.value(&[], peers as u64)
        },
    ),
    shown(
        Shown::OnLinux,
        family(
            "idgen_clock_synchronized",
            Gauge,
            &[],
            "",
            "1 when the kernel says the clock is synchronised (adjtimex: an NTP client disciplines it), else 0; absent where it cannot be read",
            |s, out| maybe(out, s.kernel_sync.map(|k| k.synchronized.into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "idgen_clock_max_error_seconds",
            Gauge,
            &[],
            "seconds",
            "The kernel's bound on the clock's error (adjtimex maxerror): set by the NTP client, growing while nobody updates it",
            |s, out| maybe(out, s.kernel_sync.map(|k| (k.max_error_us as f64 / 1e6).into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "idgen_clock_estimated_error_seconds",
            Gauge,
            &[],
            "seconds",
            "The kernel's estimate of the clock's error (adjtimex esterror)",
            |s, out| maybe(out, s.kernel_sync.map(|k| (k.est_error_us as f64 / 1e6).into())),
        ),
    ),
    // The node.
    family(
        "idgen_ready",
        Gauge,
        &[],
        "",
        "1 when /health/ready answers 200, else 0",
        |s, out| out.value(&[], s.node.not_ready_reasons().is_empty()),
    ),
    family(
        "idgen_draining",
        Gauge,
        &[],
        "",
        "1 while the node drains (after SIGTERM), else 0",
        |s, out| out.value(&[], s.node.draining.load(Ordering::Relaxed)),
    ),
    family(
        "idgen_build_info",
        Gauge,
        &["version", "revision", "features"],
        "",
        "Always 1: the binary's version, git revision (unknown outside a git checkout) and cargo features (comma-separated: etcd, fdb; empty for none)",
        |_, out| {
            let features = crate::build_info::features().join(",");
            out.value(
                &[
                    crate::build_info::VERSION,
                    crate::build_info::REVISION,
                    &features,
                ],
                1u64,
            )
        },
    ),
    family(
        "idgen_node_info",
        Gauge,
        &["namespace", "region", "store"],
        "",
        "Always 1: the node's lease namespace, region (empty without regions) and kind of store (memory, embedded, etcd, fdb)",
        |s, out| {
            let lease = &s.node.config.lease;
            let region = lease.region.region().map(|r| r.to_string());
            out.value(
                &[
                    &lease.namespace,
                    region.as_deref().unwrap_or(""),
                    store_kind(&lease.store),
                ],
                1u64,
            )
        },
    ),
    // TLS.
    shown(
        Shown::WithTls,
        family(
            "idgen_tls_handshakes_total",
            Counter,
            &["listener", "result"],
            "handshakes",
            "TLS handshakes, by listener (protocol, http, admin) and result (ok, failed, timeout)",
            |s, out| {
                let Some(tls) = &s.node.tls else {
                    return Ok(());
                };
                for (listener, result, n) in tls.stats.handshakes() {
                    out.value(&[listener, result], n)?;
                }
                Ok(())
            },
        ),
    ),
    shown(
        Shown::WithTls,
        family(
            "idgen_tls_client_connections_total",
            Counter,
            &["identity"],
            "connections",
            "TLS connections accepted, by client identity (URI or DNS SAN, else CN; anonymous without a certificate; the first 32 identities, then other)",
            |s, out| {
                let Some(tls) = &s.node.tls else {
                    return Ok(());
                };
                for (identity, n) in tls.stats.clients() {
                    out.value(&[&identity], n)?;
                }
                Ok(())
            },
        ),
    ),
    shown(
        Shown::WithTls,
        family(
            "idgen_tls_reloads_total",
            Counter,
            &["result"],
            "reloads",
            "Reloads of the TLS files after they changed, by result (applied, failed: the previous ones keep serving)",
            |s, out| {
                let Some(tls) = &s.node.tls else {
                    return Ok(());
                };
                for (result, n) in tls.stats.reloads() {
                    out.value(&[result], n)?;
                }
                Ok(())
            },
        ),
    ),
    shown(
        Shown::WithTls,
        family(
            "idgen_tls_certificate_expiry_timestamp_seconds",
            Gauge,
            &[],
            "seconds",
            "When the node's serving certificate expires (Unix time)",
            |s, out| match &s.node.tls {
                Some(tls) => out.value(&[], tls.stats.cert_not_after()),
                None => Ok(()),
            },
        ),
    ),
    // The process.
    shown(
        Shown::OnLinux,
        family(
            "process_cpu_seconds_total",
            Counter,
            &[],
            "seconds",
            "User and system CPU time the process has spent",
            |s, out| maybe(out, s.process(|p| p.cpu_seconds.into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "process_open_fds",
            Gauge,
            &[],
            "file descriptors",
            "File descriptors the process has open (connections included)",
            |s, out| maybe(out, s.process(|p| p.open_fds.into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "process_max_fds",
            Gauge,
            &[],
            "file descriptors",
            "The process's limit on open file descriptors (soft RLIMIT_NOFILE)",
            |s, out| maybe(out, s.process(|p| p.max_fds.into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "process_resident_memory_bytes",
            Gauge,
            &[],
            "bytes",
            "Resident memory of the process",
            |s, out| maybe(out, s.process(|p| p.resident_bytes.into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "process_virtual_memory_bytes",
            Gauge,
            &[],
            "bytes",
            "Virtual memory of the process",
            |s, out| maybe(out, s.process(|p| p.virtual_bytes.into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "process_start_time_seconds",
            Gauge,
            &[],
            "seconds",
            "When the process started (Unix time)",
            |s, out| maybe(out, s.process(|p| p.start_time_seconds.into())),
        ),
    ),
    shown(
        Shown::OnLinux,
        family(
            "process_threads",
            Gauge,
            &[],
            "threads",
            "Threads of the process",
            |s, out| maybe(out, s.process(|p| p.threads.into())),
        ),
    ),
    // The previous release's names, with --metrics-legacy-names.
    legacy(
        "idgen_clock_drift_seconds",
        family(
            "idgen_clock_drift_ms",
            Gauge,
            &[],
            "milliseconds",
            "This node's clock minus its peers' (median estimate; 0 without peers), ms",
            |s, out| out.value(&[], s.node.clock_watch.drift_summary().0),
        ),
    ),
    legacy(
        "idgen_clock_rollback_largest_seconds",
        family(
            "idgen_clock_rollback_largest_ms",
            Gauge,
            &[],
            "milliseconds",
            "Largest clock rollback seen, ms",
            |s, out| out.value(&[], s.max(|st| load(&st.generator.largest_rollback_ms))),
        ),
    ),
    legacy(
        "idgen_layout_time_remaining_seconds",
        family(
            "idgen_layout_years_left",
            Gauge,
            &[],
            "years",
            "Years until the layout's timestamp range runs out (the newest layout generation's)",
            |s, out| {
                let left = s.node.lease.generations().newest().layout.time_left(s.now_ms);
                out.value(&[], left.as_secs_f64() / SECONDS_PER_YEAR)
            },
        ),
    ),
    legacy(
        "idgen_worker_ids_capacity",
        family(
            "idgen_worker_ids_total",
            Gauge,
            &[],
            "worker IDs",
            "Worker IDs in the node's region (or cluster)",
            |s, out| out.value(&[], worker_capacity(s)),
        ),
    ),
    legacy(
        "idgen_request_duration_seconds",
        histogram(
            "idgen_request_latency_seconds",
            &[],
            "seconds",
            "From reading a request to writing its answer (the ID protocol's, every operation)",
            Buckets::Micros(&REQUEST_BUCKETS_US),
            |s, out| {
                let mut total = Snapshot::zero(REQUEST_BUCKETS_US.len());
                for h in &s.request_durations()[..Op::PROTOCOL] {
                    total.add(h);
                }
                out.histogram(&[], &total)
            },
        ),
    ),
    legacy(
        "idgen_lease_renewal_duration_seconds",
        family(
            "idgen_lease_renew_latency_seconds",
            Gauge,
            &[],
            "seconds",
            "Latency of the last lease renewal attempt",
            |s, out| {
                let us = load(&s.node.lease.stats.renew_latency_us);
                out.value(&[], us as f64 / 1e6)
            },
        ),
    ),
    legacy(
        "idgen_lease_renewal_duration_seconds",
        family(
            "idgen_lease_renew_latency_seconds_sum_total",
            Counter,
            &[],
            "seconds",
            "Sum of lease renewal latencies, seconds (divide by idgen_lease_renewals_total)",
            |s, out| {
                let us = load(&s.node.lease.stats.renew_latency_us_sum);
                out.value(&[], us as f64 / 1e6)
            },
        ),
    ),
];

/// Writes every family the node shows now.
fn encode(enc: &mut DescriptorEncoder<'_>, scrape: &Scrape<'_>) -> fmt::Result {
    for family in FAMILIES {
        if !scrape.shows(family) {
            continue;
        }
        let m = enc.encode_descriptor(
            family.encoded_name(),
            family.help,
            None,
            family.kind.metric_type(),
        )?;
        (family.read)(scrape, &mut Series { family, m })?;
    }
    Ok(())
}

/// The node's `/metrics`: every family it shows, read afresh at each scrape.
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    pub fn new(node: Arc<NodeState>) -> Exposition {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Catalogue(node)));
        Exposition { registry }
    }

    /// A scrape now, in the Prometheus text format 0.0.4.
    pub fn render(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Reads every family of the catalogue at scrape time.
struct Catalogue(Arc<NodeState>);

impl fmt::Debug for Catalogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Catalogue")
    }
}

impl Collector for Catalogue {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let scrape = Scrape {
            node: &self.0,
            now_ms: SystemClock::new().wall_ms(),
            process: super::process::read(),
            kernel_sync: KernelSync::read().ok(),
        };
        encode(&mut enc, &scrape)
    }
}

/// Where the rendered reference goes in `docs/METRICS.md`: between these lines.
pub const REFERENCE_BEGIN: &str = "<!-- BEGIN GENERATED: idgen::node::metrics::reference -->";
pub const REFERENCE_END: &str = "<!-- END GENERATED -->";

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn code_list(items: &[&str]) -> String {
    if items.is_empty() {
        return "–".to_string();
    }
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A bound as the `le` label writes it (Go's shortest `%g`: `5e-06`, `0.0001`, `10`).
fn le_text(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e6 {
        return format!("{}", v as i64);
    }
    if (1e-4..1e6).contains(&v.abs()) {
        return format!("{v}");
    }
    let sci = format!("{v:e}");
    match sci.split_once('e') {
        Some((mantissa, exp)) => match exp.parse::<i32>() {
            Ok(exp) => format!("{mantissa}e{exp:+03}"),
            Err(_) => sci,
        },
        None => sci,
    }
}

fn bounds_text(b: Buckets) -> String {
    b.bounds()
        .into_iter()
        .map(le_text)
        .chain(["+Inf".to_string()])
        .collect::<Vec<_>>()
        .join(", ")
}

/// The metrics reference: a Markdown table of every family, then the previous release's names
/// (what `docs/METRICS.md` holds between [`REFERENCE_BEGIN`] and [`REFERENCE_END`]).
pub fn reference() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| name | type | labels | unit | meaning | exposed |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for f in FAMILIES {
        let exposed = match f.shown {
            Shown::Always => "always",
            Shown::WithTls => "with TLS on a listener",
            Shown::OnLinux => "on Linux",
            Shown::Legacy { .. } => continue,
        };
        let mut meaning = cell(f.help);
        if let Some(b) = f.buckets {
            let _ = write!(meaning, ". Buckets (`le`): {}", bounds_text(b));
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            f.name,
            f.kind.as_str(),
            code_list(f.labels),
            if f.unit.is_empty() { "–" } else { f.unit },
            meaning,
            exposed,
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "With `--metrics-legacy-names` (`metrics_legacy_names = true` under `[admin]`, \
         `IDGEN_METRICS_LEGACY_NAMES=true`), the previous release's names are exposed as well, \
         in their old units:"
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "| old name | type | unit | meaning | replaced by |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for f in FAMILIES {
        let Shown::Legacy { replaced_by } = f.shown else {
            continue;
        };
        let mut meaning = cell(f.help);
        if let Some(b) = f.buckets {
            let _ = write!(meaning, ". Buckets (`le`): {}", bounds_text(b));
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | `{}` |",
            f.name,
            f.kind.as_str(),
            f.unit,
            meaning,
            replaced_by,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions() {
        let mut seen = std::collections::HashSet::new();
        for f in FAMILIES {
            assert!(seen.insert(f.name), "{} declared twice", f.name);
            let legacy = matches!(f.shown, Shown::Legacy { .. });
            assert!(
                f.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                f.name
            );
            assert!(
                f.name.starts_with("idgen_") || f.name.starts_with("process_"),
                "{}",
                f.name
            );
            // The encoder writes a counter's name with `_total`.
            if f.kind == Kind::Counter {
                assert!(f.name.ends_with("_total"), "{}", f.name);
            }
            assert_eq!(f.kind == Kind::Histogram, f.buckets.is_some(), "{}", f.name);
            assert!(!f.help.is_empty() && !f.help.contains('\n'), "{}", f.name);
            if f.name.ends_with("_info") {
                assert_eq!(f.kind, Kind::Gauge, "{}", f.name);
            }
            if legacy {
                continue;
            }
            assert!(
                f.kind == Kind::Counter || !f.name.ends_with("_total"),
                "{}: only counters end in _total",
                f.name
            );
            for suffix in ["_ms", "_years", "_left", "_latency"] {
                assert!(
                    !f.name.contains(suffix),
                    "{}: a base unit (seconds) in the name",
                    f.name
                );
            }
            let base = f.name.strip_suffix("_total").unwrap_or(f.name);
            if f.unit == "seconds" {
                assert!(
                    base.ends_with("_seconds"),
                    "{}: the unit is in the name",
                    f.name
                );
            }
            if f.unit == "bytes" {
                assert!(base.ends_with("_bytes"), "{}", f.name);
            }
        }
        for f in FAMILIES {
            if let Shown::Legacy { replaced_by } = f.shown {
                assert!(
                    FAMILIES
                        .iter()
                        .any(|g| g.name == replaced_by && g.shown == Shown::Always),
                    "{} is replaced by {replaced_by}, which is not declared",
                    f.name
                );
            }
        }
    }

    #[test]
    fn the_bucket_bounds_are_the_declared_ones_in_base_units() {
        let request = Buckets::Micros(&REQUEST_BUCKETS_US).bounds();
        assert_eq!(
            request,
            [
                5e-6, 1e-5, 2e-5, 3.5e-5, 5e-5, 7.5e-5, 1e-4, 1.5e-4, 2.5e-4, 5e-4, 7.5e-4, 1e-3,
                2.5e-3, 5e-3, 1e-2, 2.5e-2, 1e-1
            ]
        );
        let renewal = Buckets::Micros(&RENEWAL_BUCKETS_US).bounds();
        assert_eq!(
            renewal,
            [1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
        );
        for b in [request, renewal, Buckets::Count(&BATCH_BUCKETS).bounds()] {
            assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
        }
        assert_eq!(Buckets::Micros(&[1]).sum(1_500_000), 1.5);
        let le: Vec<String> = [5e-6, 3.5e-5, 1e-4, 0.00015, 1.0, 2.5, 65_536.0, 1e7]
            .into_iter()
            .map(le_text)
            .collect();
        assert_eq!(
            le,
            ["5e-06", "3.5e-05", "0.0001", "0.00015", "1", "2.5", "65536", "1e+07"]
        );
    }
}
