//! `--interval-json` and `--hdr-log`: one JSON line per second with its fields, and an
//! HdrHistogram interval log that HdrHistogram's own reader parses back, whose histograms hold
//! exactly the requests the run recorded. Against the test kit's fake idgen server, and over
//! HTTP against a real node (the `idgen` binary of the workspace build, or `IDGEN_BIN`).

mod common;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use idgen_testkit::fake::{Config, FakeServer};
use idgen_testkit::NodeProc;

use common::run_loadtest;

const LIMIT: Duration = Duration::from_secs(60);

const FIELDS: [&str; 10] = [
    "t",
    "interval_s",
    "requests",
    "ids",
    "errors",
    "p50_us",
    "p99_us",
    "p999_us",
    "p9999_us",
    "max_us",
];

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the interval file")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The interval log's histograms, read by hdrhistogram's reader and deserializer:
/// (start offset s, length s, histogram).
fn histograms(path: &Path) -> Vec<(f64, f64, Histogram<u64>)> {
    let bytes = std::fs::read(path).expect("the HDR log");
    let mut out = Vec::new();
    let mut saw_base_time = false;
    for entry in IntervalLogIterator::new(&bytes) {
        match entry.unwrap_or_else(|e| panic!("the HDR log does not parse: {e:?}")) {
            LogEntry::BaseTime(_) => saw_base_time = true,
            LogEntry::StartTime(_) => {}
            LogEntry::Interval(h) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(h.encoded_histogram())
                    .expect("base64");
                let hist: Histogram<u64> = Deserializer::new()
                    .deserialize(&mut raw.as_slice())
                    .expect("a V2 histogram");
                // The max column is in ms (the divisor 1e6 of ns).
                assert!(
                    (h.max() - hist.max() as f64 / 1e6).abs() < 1e-3,
                    "{} vs {}",
                    h.max(),
                    hist.max()
                );
                out.push((
                    h.start_timestamp().as_secs_f64(),
                    h.duration().as_secs_f64(),
                    hist,
                ));
            }
        }
    }
    assert!(saw_base_time, "no BaseTime in the log");
    out
}

/// Checks the two files of one run against its report; returns the number of intervals.
fn check_files(report: &serde_json::Value, json: &Path, log: &Path, seconds: f64) -> usize {
    let ivs = lines(json);
    // One line per second of the run (the last one may be partial).
    let whole = seconds.floor() as usize;
    assert!(
        (whole..=whole + 1).contains(&ivs.len()),
        "{} lines for {seconds} s: {ivs:?}",
        ivs.len()
    );
    let mut prev_t = 0.0;
    let (mut requests, mut ids) = (0, 0);
    for iv in &ivs {
        for field in FIELDS {
            assert!(iv[field].is_number(), "{field} missing in {iv}");
        }
        assert_eq!(iv.as_object().unwrap().len(), FIELDS.len(), "{iv}");
        let t = iv["t"].as_f64().unwrap();
        let len = iv["interval_s"].as_f64().unwrap();
        assert!(t > prev_t, "{ivs:?}");
        assert!((t - prev_t - len).abs() < 0.002, "{ivs:?}");
        assert!(len <= 1.1, "{iv}");
        prev_t = t;
        requests += iv["requests"].as_u64().unwrap();
        ids += iv["ids"].as_u64().unwrap();
        assert_eq!(iv["errors"], 0);
        if iv["requests"].as_u64().unwrap() > 0 {
            let p = |k: &str| iv[k].as_f64().unwrap();
            assert!(p("p50_us") > 0.0, "{iv}");
            assert!(
                p("p50_us") <= p("p99_us") && p("p99_us") <= p("p999_us"),
                "{iv}"
            );
            assert!(
                p("p999_us") <= p("p9999_us") && p("p9999_us") <= p("max_us"),
                "{iv}"
            );
        }
    }
    // The intervals add up to the run (no warmup, no errors: every request is measured).
    assert_eq!(requests, report["requests"].as_u64().unwrap(), "{ivs:?}");
    assert_eq!(ids, report["ids"].as_u64().unwrap());

    let hists = histograms(log);
    assert_eq!(hists.len(), ivs.len(), "one histogram per JSON line");
    let total: u64 = hists.iter().map(|(_, _, h)| h.len()).sum();
    assert_eq!(total, report["requests"].as_u64().unwrap());
    for ((start, len, h), iv) in hists.iter().zip(&ivs) {
        assert_eq!(h.len(), iv["requests"].as_u64().unwrap());
        assert!((start + len - iv["t"].as_f64().unwrap()).abs() < 0.002);
        if !h.is_empty() {
            let p99 = (h.value_at_quantile(0.99) as f64 / 100.0).round() / 10.0;
            assert_eq!(p99, iv["p99_us"].as_f64().unwrap(), "{iv}");
        }
    }
    ivs.len()
}

#[test]
fn interval_json_and_hdr_log_of_a_protocol_run() {
    let server = FakeServer::spawn(Config::default());
    let dir = tempfile::tempdir().unwrap();
    let (json, log) = (dir.path().join("iv.jsonl"), dir.path().join("run.hlog"));
    let r = run_loadtest(
        &[
            "--addr",
            &server.addr.to_string(),
            "--connections",
            "2",
            "--pipeline",
            "4",
            "--batch",
            "3",
            "--duration",
            "2500ms",
            "--json",
            "--quiet",
            "--interval-json",
            json.to_str().unwrap(),
            "--hdr-log",
            log.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert!(v["requests"].as_u64().unwrap() > 0);
    assert!(
        v["latency_us"]["p9999"].as_f64().unwrap() >= v["latency_us"]["p999"].as_f64().unwrap()
    );
    assert_eq!(check_files(&v, &json, &log, 2.5), 3);
}

#[test]
fn interval_json_and_hdr_log_of_an_http_run() {
    let node = NodeProc::start(&["--store", "memory", "--http-listen", "127.0.0.1:0"]);
    let dir = tempfile::tempdir().unwrap();
    let (json, log) = (dir.path().join("iv.jsonl"), dir.path().join("run.hlog"));
    let r = run_loadtest(
        &[
            "--target",
            "http",
            "--addr",
            &node.http.expect("HTTP ID API").to_string(),
            "--connections",
            "2",
            "--pipeline",
            "4",
            "--batch",
            "50",
            "--duration",
            "2s",
            "--verify",
            "--json",
            "--quiet",
            "--interval-json",
            json.to_str().unwrap(),
            "--hdr-log",
            log.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["duplicates"], 0);
    check_files(&v, &json, &log, 2.0);
}

#[test]
fn an_output_file_that_cannot_be_written_is_a_usage_error() {
    let server = FakeServer::spawn(Config::default());
    for flag in ["--interval-json", "--hdr-log"] {
        let r = run_loadtest(
            &[
                "--addr",
                &server.addr.to_string(),
                "--requests",
                "1",
                flag,
                "/nonexistent-dir/x",
            ],
            LIMIT,
        );
        assert_eq!(r.code, 2, "{flag}: {}", r.stdout);
        assert!(r.stderr.contains(flag), "{}", r.stderr);
    }
}
