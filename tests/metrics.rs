//! The metrics of a real node against their declaration (`idgen::node::metrics::FAMILIES`):
//! every family is on `/metrics` with its declared type and labels, the histograms have the
//! declared buckets and count each request under its front and operation, the renewal
//! durations are seconds with fractions, and the previous release's names come only with
//! `--metrics-legacy-names`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::node::{http, NodeProc};
use idgen::node::metrics::{Kind, Shown, FAMILIES};
use idgen_protocol::{Request, Response, Status};
use idgen_testkit::certs::client_config;
use idgen_testkit::{TestCa, TestConn, Timeouts};

/// One sample line of the text format.
#[derive(Clone, Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    /// The value as written.
    text: String,
    value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A scrape: the `# TYPE` of every family, and the samples in order.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

/// The labels of `{k="v",…}`, with the text format's escapes (`\\`, `\"`, `\n`) undone.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("label key");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next().expect("unterminated label value");
            match c {
                '\\' => match chars.next().expect("escape").1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        rest = after[end + 1..]
            .strip_prefix(',')
            .unwrap_or(&after[end + 1..]);
    }
    labels
}

fn parse(text: &str) -> Exposition {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "{name} declared twice"
            );
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (
                name,
                parse_labels(labels.strip_suffix('}').expect("closing brace")),
            ),
            None => (series, Vec::new()),
        };
        let parsed = match value {
            "+Inf" => f64::INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            text: value.to_string(),
            value: parsed,
        });
    }
    Exposition { types, samples }
}

impl Exposition {
    /// The samples of family `family` (a histogram's `_bucket`, `_sum` and `_count` lines).
    fn of(&self, family: &str) -> Vec<&Sample> {
        let histogram = self.types.get(family).is_some_and(|t| t == "histogram");
        self.samples
            .iter()
            .filter(|s| {
                s.name == family
                    || (histogram
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|x| s.name.strip_suffix(x) == Some(family)))
            })
            .collect()
    }

    /// The one sample named `name` whose labels include `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> &Sample {
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .filter(|s| s.labels.len() == labels.len() || name.ends_with("_bucket"))
            .collect();
        assert_eq!(found.len(), 1, "{name}{labels:?}: {found:?}");
        found[0]
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).value
    }

    /// A histogram series' `(le, cumulative count)` pairs, checked: ascending bounds ending
    /// in `+Inf`, counts that never fall, and `+Inf` equal to `_count`.
    fn buckets(&self, family: &str, labels: &[(&str, &str)]) -> Vec<(String, f64)> {
        let name = format!("{family}_bucket");
        let buckets: Vec<(String, f64)> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.len() == labels.len() + 1
                    && labels.iter().all(|(k, v)| s.label(k) == Some(*v))
            })
            .map(|s| (s.label("le").expect("le").to_string(), s.value))
            .collect();
        assert_eq!(
            buckets.last().map(|b| b.0.as_str()),
            Some("+Inf"),
            "{family}"
        );
        let bounds: Vec<f64> = buckets
            .iter()
            .map(|(le, _)| {
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                }
            })
            .collect();
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "{family}: {buckets:?}"
        );
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{family}: {buckets:?}"
        );
        let count = self.value(&format!("{family}_count"), labels);
        assert_eq!(buckets.last().unwrap().1, count, "{family}");
        buckets
    }
}

fn scrape(admin: SocketAddr) -> Exposition {
    let (status, text) = http(admin, "GET", "/metrics", None);
    assert_eq!(status, 200, "{text}");
    parse(&text)
}

/// Scrapes until `done` holds (the shards record a request's duration just after its answer
/// is written, so a client can be a moment ahead of the counters), at most 5 s.
fn scrape_until(admin: SocketAddr, done: impl Fn(&Exposition) -> bool) -> Exposition {
    let t = Instant::now();
    loop {
        let e = scrape(admin);
        if done(&e) || t.elapsed() > Duration::from_secs(5) {
            return e;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

#[test]
fn every_declared_family_is_on_a_live_node_with_its_type_and_labels() {
    let ca = TestCa::new("metrics test ca");
    let server = ca.server();
    // A named sequence in the node's embedded store, so that its families have a series.
    let data = tempfile::tempdir().unwrap();
    let made = std::process::Command::new(common::node::idgen_binary())
        .args([
            "seq",
            "create",
            "orders",
            "--max",
            "10",
            "--data-dir",
            path(data.path()),
        ])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let node = NodeProc::try_start_in(
        Some(data.path()),
        &[
            "--shards",
            "2",
            "--admin-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            path(&server.cert),
            "--tls-key",
            path(&server.key),
            "--metrics-legacy-names",
        ],
        &[],
    )
    .unwrap_or_else(|e| panic!("idgen did not start: {e}"));
    let admin = node.admin.expect("admin address");
    let api = node.http.expect("HTTP ID API address");
    for _ in 0..3 {
        let (status, body) = http(api, "POST", "/seq/orders", None);
        assert_eq!(status, 200, "{body}");
    }
    // A TLS client, so that the client-identity family has a series.
    let config = client_config(&ca.ca_pem, None, b"idgen/1");
    let mut tls = TestConn::try_open_tls(
        node.tls.expect("TLS address"),
        config,
        "localhost",
        idgen_protocol::client::Handshake::offering(1, 1),
        Timeouts::default(),
    )
    .expect("TLS connection");
    tls.get_ids(3).expect("IDs over TLS");

    let e = scrape_until(admin, |e| {
        e.samples
            .iter()
            .any(|s| s.name == "idgen_tls_client_connections_total")
    });
    let mut declared = BTreeSet::new();
    for f in FAMILIES {
        let expected = match f.shown {
            Shown::Always | Shown::WithTls | Shown::Legacy { .. } => true,
            Shown::OnLinux => cfg!(target_os = "linux"),
        };
        if !expected {
            continue;
        }
        declared.insert(f.name.to_string());
        assert_eq!(
            e.types.get(f.name).map(String::as_str),
            Some(f.kind.as_str()),
            "{} is on /metrics as a {}",
            f.name,
            f.kind.as_str()
        );
        let samples = e.of(f.name);
        assert!(!samples.is_empty(), "{}: no samples", f.name);
        for s in samples {
            let mut keys: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
            if s.name.ends_with("_bucket") && f.kind == Kind::Histogram {
                assert_eq!(keys.pop(), Some("le"), "{s:?}");
            }
            assert_eq!(keys, f.labels, "{}: the declared labels, in order", s.name);
        }
    }
    let exposed: BTreeSet<String> = e.types.keys().cloned().collect();
    assert_eq!(
        exposed, declared,
        "what /metrics exposes is exactly what is declared"
    );
    let build = e.get(
        "idgen_build_info",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("revision", idgen::build_info::REVISION),
            ("features", &idgen::build_info::features().join(",")),
        ],
    );
    assert_eq!(build.value, 1.0);
    let info = e.get(
        "idgen_node_info",
        &[
            ("namespace", "default"),
            ("region", ""),
            ("store", "embedded"),
        ],
    );
    assert_eq!(info.value, 1.0);
    // The named sequence's: three values, reserved in one block of at most 10, none left
    // below the maximum of 10 after the first block took what the first call asked ahead.
    let orders = [("sequence", "orders")];
    assert_eq!(e.value("idgen_named_sequence_values_total", &orders), 3.0);
    assert_eq!(e.value("idgen_named_sequence_commits_total", &orders), 1.0);
    assert_eq!(
        e.value("idgen_named_sequence_commit_failures_total", &orders),
        0.0
    );
    assert_eq!(e.value("idgen_named_sequence_remaining", &orders), 0.0);
    assert_eq!(e.value("idgen_lease_ttl_seconds", &[]), 10.0);
    if cfg!(target_os = "linux") {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = e.value("process_start_time_seconds", &[]);
        assert!(started <= now + 1.0 && started > now - 600.0, "{started}");
        // Two connections (the TLS client and the scrape's), besides the listeners.
        assert!(e.value("process_open_fds", &[]) >= 5.0);
        assert!(e.value("process_max_fds", &[]) >= e.value("process_open_fds", &[]));
        assert!(e.value("process_resident_memory_bytes", &[]) > 1e6);
        // Two shards, the control thread, and the runtime's.
        assert!(e.value("process_threads", &[]) >= 3.0);
    }
}

/// The `le` values of the request-duration buckets: 5 µs to 100 ms, then +Inf.
const REQUEST_LE: [&str; 18] = [
    "5e-06", "1e-05", "2e-05", "3.5e-05", "5e-05", "7.5e-05", "0.0001", "0.00015", "0.00025",
    "0.0005", "0.00075", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.1", "+Inf",
];

/// The `le` values of the renewal-duration buckets: 1 ms to 10 s, then +Inf.
const RENEWAL_LE: [&str; 14] = [
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5",
    "10", "+Inf",
];

#[test]
fn requests_are_timed_per_front_and_operation_in_the_declared_buckets() {
    let node = NodeProc::start(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--admin-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let admin = node.admin.unwrap();
    let api = node.http.unwrap();
    // Protocol: 2 HELLO, 3 GET_IDS (one refused), 2 GET_RANGES, 4 PING.
    let mut c = TestConn::open(node.addr);
    c.get_ids(10).unwrap();
    c.get_ids(1).unwrap();
    assert_eq!(c.get_ids(0).unwrap_err().0, Status::INVALID_COUNT);
    let mut v2 = TestConn::open_version(node.addr, 2);
    for count in [5, 7] {
        v2.send(&Request::GetRanges { count });
        assert!(matches!(v2.recv(), Some(Response::Ranges(_))));
    }
    for token in 0..4 {
        v2.send(&Request::Ping { token });
        assert_eq!(v2.recv(), Some(Response::Pong(token)));
    }
    // HTTP: 3 POST /ids (one refused), 1 POST /ids/batch; the health check is not timed.
    assert_eq!(http(api, "POST", "/ids", None).0, 200);
    assert_eq!(http(api, "POST", "/ids", None).0, 200);
    assert_eq!(http(api, "POST", "/ids?format=xml", None).0, 400);
    assert_eq!(
        http(api, "POST", "/ids/batch", Some(r#"{"count": 3}"#)).0,
        200
    );
    assert_eq!(http(api, "GET", "/health/live", None).0, 200);

    let expected = [
        ("protocol", "hello", 2.0),
        ("protocol", "get_ids", 3.0),
        ("protocol", "get_ranges", 2.0),
        ("protocol", "ping", 4.0),
        ("http", "ids", 3.0),
        ("http", "batch", 1.0),
    ];
    let family = "idgen_request_duration_seconds";
    let count = |e: &Exposition, front: &str, op: &str| {
        e.value(&format!("{family}_count"), &[("front", front), ("op", op)])
    };
    let e = scrape_until(admin, |e| {
        expected
            .iter()
            .all(|(front, op, n)| count(e, front, op) >= *n)
    });
    for (front, op, n) in expected {
        let labels = [("front", front), ("op", op)];
        assert_eq!(count(&e, front, op), n, "{front} {op}");
        let buckets = e.buckets(family, &labels);
        let le: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
        assert_eq!(le, REQUEST_LE, "{front} {op}");
        // Each took less than a second (µs recorded, seconds exposed).
        let sum = e.value(&format!("{family}_sum"), &labels);
        assert!((0.0..n).contains(&sum), "{front} {op}: {sum} s");
    }
    let sum =
        |front: &str, op: &str| e.value(&format!("{family}_sum"), &[("front", front), ("op", op)]);
    assert!(sum("protocol", "get_ids") > 0.0 && sum("http", "ids") > 0.0);
}

/// The least and the most a histogram's sum can be, given how many observations fell
/// between each pair of bounds (`buckets`: `(le, cumulative count)`, ending in `+Inf`).
fn bucket_bounds_of_sum(buckets: &[(String, f64)]) -> (f64, f64) {
    let (mut low, mut high) = (0.0, 0.0);
    let (mut below, mut seen) = (0.0_f64, 0.0);
    for (le, cumulative) in buckets {
        let n = cumulative - seen;
        let upper: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        if n > 0.0 {
            low += n * below;
            high += n * upper;
        }
        below = upper;
        seen = *cumulative;
    }
    (low, high)
}

#[test]
fn the_renewal_durations_are_seconds_with_fractions_and_count_every_renewal() {
    // An embedded store (redb, on disk): each renewal is a committed write. Renewals every
    // 100 ms.
    let node = NodeProc::start(&[
        "--store",
        "embedded",
        "--lease-ttl",
        "300ms",
        "--admin-listen",
        "127.0.0.1:0",
        "--metrics-legacy-names",
    ]);
    let admin = node.admin.unwrap();
    let family = "idgen_lease_renewal_duration_seconds";
    let ok = [("result", "ok")];
    let first = scrape_until(admin, |e| e.value(&format!("{family}_count"), &ok) >= 3.0);
    let e = scrape_until(admin, |e| {
        e.value(&format!("{family}_count"), &ok)
            >= first.value(&format!("{family}_count"), &ok) + 3.0
    });
    let count = e.value(&format!("{family}_count"), &ok);
    let renewals = e.value("idgen_lease_renewals_total", &ok);
    assert!(count >= 6.0, "{count} renewals");
    // The counter is bumped just before the duration is recorded.
    assert!(
        count <= renewals && renewals <= count + 1.0,
        "{count} {renewals}"
    );
    let sum = e.get(&format!("{family}_sum"), &ok);
    // Seconds with fractions: not 0, and in the unit of the buckets' bounds, which each
    // observation fell between (no bound on how long a renewal took, which a loaded machine
    // stretches; the store call itself is cut at a third of the 300 ms TTL).
    assert!(sum.value > 0.0, "{sum:?}");
    assert!(sum.text.contains('.') || sum.text.contains('e'), "{sum:?}");
    let (low, high) = bucket_bounds_of_sum(&e.buckets(family, &ok));
    assert!(
        low <= sum.value && sum.value <= high,
        "sum {} outside what the buckets allow: {low}..={high}",
        sum.value
    );
    let earlier = first.value(&format!("{family}_sum"), &ok);
    assert!(
        sum.value > earlier,
        "the sum moves: {earlier} → {}",
        sum.value
    );
    let le: Vec<String> = e.buckets(family, &ok).into_iter().map(|b| b.0).collect();
    assert_eq!(le, RENEWAL_LE);
    // A renewal may fail on a loaded machine (the store call is cut at 100 ms): whether any
    // did, each is timed and counted under `failed` alike.
    let failed = [("result", "failed")];
    let failed_count = e.value(&format!("{family}_count"), &failed);
    let failed_renewals = e.value("idgen_lease_renewals_total", &failed);
    assert!(
        failed_count <= failed_renewals && failed_renewals <= failed_count + 1.0,
        "{failed_count} {failed_renewals}"
    );
    let le: Vec<String> = e
        .buckets(family, &failed)
        .into_iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(le, RENEWAL_LE);

    // The previous release's sum, now a float counter in seconds.
    assert_eq!(
        e.types
            .get("idgen_lease_renew_latency_seconds_sum_total")
            .map(String::as_str),
        Some("counter")
    );
    let legacy = e.get("idgen_lease_renew_latency_seconds_sum_total", &[]);
    assert!(legacy.value > 0.0 && legacy.value < 1.0, "{legacy:?}");
    assert!(legacy.value > earlier, "{legacy:?}");
    let last = e.value("idgen_lease_renew_latency_seconds", &[]);
    assert!(last > 0.0 && last <= legacy.value, "{last}");
}

/// The previous release's families, as declared.
fn legacy_names() -> Vec<&'static str> {
    FAMILIES
        .iter()
        .filter(|f| matches!(f.shown, Shown::Legacy { .. }))
        .map(|f| f.name)
        .collect()
}

#[test]
fn the_previous_names_come_only_with_the_flag_and_agree_with_the_new_ones() {
    let legacy = legacy_names();
    assert_eq!(
        legacy,
        [
            "idgen_clock_drift_ms",
            "idgen_clock_rollback_largest_ms",
            "idgen_layout_years_left",
            "idgen_worker_ids_total",
            "idgen_request_latency_seconds",
            "idgen_lease_renew_latency_seconds",
            "idgen_lease_renew_latency_seconds_sum_total",
        ]
    );
    let base = ["--store", "memory", "--admin-listen", "127.0.0.1:0"];
    for (args, env, on) in [
        (vec![], vec![], false),
        (vec!["--metrics-legacy-names=false"], vec![], false),
        (vec![], vec![("IDGEN_METRICS_LEGACY_NAMES", "false")], false),
        (vec!["--metrics-legacy-names"], vec![], true),
        (vec![], vec![("IDGEN_METRICS_LEGACY_NAMES", "true")], true),
    ] {
        let all: Vec<&str> = base.iter().copied().chain(args.iter().copied()).collect();
        let node = NodeProc::try_start(&all, &env).unwrap_or_else(|e| panic!("{e}"));
        let admin = node.admin.unwrap();
        let mut c = TestConn::open(node.addr);
        c.get_ids(5).unwrap();
        let e = scrape_until(admin, |e| {
            e.value(
                "idgen_request_duration_seconds_count",
                &[("front", "protocol"), ("op", "get_ids")],
            ) >= 1.0
        });
        for name in &legacy {
            assert_eq!(
                e.types.contains_key(*name),
                on,
                "{name} with {args:?} {env:?}"
            );
        }
        if !on {
            continue;
        }
        let year = 365.25 * 86_400.0;
        let left = e.value("idgen_layout_time_remaining_seconds", &[]);
        assert!((e.value("idgen_layout_years_left", &[]) * year - left).abs() < 60.0);
        assert_eq!(
            e.value("idgen_worker_ids_total", &[]),
            e.value("idgen_worker_ids_capacity", &[])
        );
        assert_eq!(
            e.value("idgen_clock_drift_ms", &[]),
            e.value("idgen_clock_drift_seconds", &[]) * 1e3
        );
        assert_eq!(
            e.value("idgen_clock_rollback_largest_ms", &[]),
            e.value("idgen_clock_rollback_largest_seconds", &[]) * 1e3
        );
        // The ID protocol's requests, every operation together.
        let protocol: f64 = ["hello", "get_ids", "get_ranges", "ping"]
            .iter()
            .map(|op| {
                e.value(
                    "idgen_request_duration_seconds_count",
                    &[("front", "protocol"), ("op", op)],
                )
            })
            .sum();
        assert!(protocol >= 2.0);
        assert_eq!(
            e.value("idgen_request_latency_seconds_count", &[]),
            protocol
        );
        let le: Vec<String> = e
            .buckets("idgen_request_latency_seconds", &[])
            .into_iter()
            .map(|b| b.0)
            .collect();
        assert_eq!(le, REQUEST_LE);
    }
}
