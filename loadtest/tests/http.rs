//! idgen-loadtest's HTTP target against a real node's HTTP ID API (the `idgen` binary Cargo
//! built for the workspace, or `IDGEN_BIN`): it counts requests and IDs exactly (the node's
//! own request counter agrees), verifies uniqueness and order like the protocol target, and
//! counts HTTP errors by status.

mod common;

use std::time::Duration;

use idgen_testkit::node::http;
use idgen_testkit::NodeProc;

use common::{run_loadtest, Run};

const LIMIT: Duration = Duration::from_secs(60);

fn node(max_batch: &str) -> NodeProc {
    NodeProc::start(&[
        "--store",
        "memory",
        "--shards",
        "2",
        "--max-batch",
        max_batch,
        "--http-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ])
}

fn run(addr: &str, extra: &[&str]) -> Run {
    let mut args = vec!["--target", "http", "--addr", addr, "--json", "--quiet"];
    args.extend_from_slice(extra);
    run_loadtest(&args, LIMIT)
}

fn n(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing or not a count in {v}"))
}

/// The node's HTTP requests as its `/metrics` counts them (every shard).
fn http_requests_served(node: &NodeProc) -> u64 {
    let (status, body) = http(node.admin.expect("admin"), "GET", "/metrics", None);
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| l.starts_with("idgen_http_requests_total{"))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("bad sample {l:?}"))
        })
        .sum()
}

#[test]
fn batches_and_single_ids_are_counted_and_verified() {
    let node = node("1000");
    let addr = node.http.expect("HTTP ID API").to_string();
    let mut served = 0;
    // --batch 7: POST /ids/batch {"count": 7}; --batch 1: POST /ids.
    for (batch, requests) in [(7u64, 300u64), (1, 200)] {
        let r = run(
            &addr,
            &[
                "--connections",
                "3",
                "--requests",
                &requests.to_string(),
                "--batch",
                &batch.to_string(),
                "--pipeline",
                "5",
                "--verify",
            ],
        );
        assert_eq!(r.code, 0, "stderr: {}", r.stderr);
        let v = r.json();
        assert_eq!(v["target"], "http");
        assert_eq!(n(&v, "requests"), requests, "{v}");
        assert_eq!(n(&v, "ids"), requests * batch);
        assert_eq!(n(&v, "verified_ids"), requests * batch);
        assert_eq!(n(&v, "duplicates"), 0);
        assert_eq!(n(&v, "out_of_order"), 0);
        assert_eq!(n(&v, "wrong_count"), 0);
        assert_eq!(n(&v, "reconnects"), 0);
        assert_eq!(n(&v, "unanswered"), 0);
        assert_eq!(v["errors"], serde_json::json!({}));
        assert!(v["latency_us"]["p9999"].as_f64().unwrap() > 0.0, "{v}");
        served += requests;
        assert_eq!(http_requests_served(&node), served);
    }
}

#[test]
fn open_loop_over_http_sends_the_rate() {
    let node = node("1000");
    let addr = node.http.expect("HTTP ID API").to_string();
    let r = run(
        &addr,
        &[
            "--connections",
            "2",
            "--pipeline",
            "4",
            "--batch",
            "10",
            "--rate",
            "400",
            "--duration",
            "1s",
            "--verify",
        ],
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    // 400 requests/s for 1 s, scheduled: exactly that many are sent and answered.
    assert_eq!(n(&v, "requests"), 400, "{v}");
    assert_eq!(n(&v, "ids"), 4000);
    assert_eq!(n(&v, "duplicates"), 0);
    assert_eq!(v["rate"], 400.0);
}

#[test]
fn http_errors_are_counted_by_status() {
    // The node takes at most 5 IDs a request: every batch of 6 is a 400.
    let node = node("5");
    let addr = node.http.expect("HTTP ID API").to_string();
    let r = run(
        &addr,
        &[
            "--connections",
            "2",
            "--requests",
            "50",
            "--batch",
            "6",
            "--pipeline",
            "4",
        ],
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(n(&v, "requests"), 50, "{v}");
    assert_eq!(n(&v, "ids"), 0);
    assert_eq!(v["errors"], serde_json::json!({"HTTP_400": 50}));
    assert!(
        r.stderr.contains("HTTP 400") && r.stderr.contains("count must be between 1 and 5"),
        "{}",
        r.stderr
    );
    assert_eq!(http_requests_served(&node), 50);
}

#[test]
fn ranges_are_refused_for_the_http_target() {
    let node = node("10");
    let addr = node.http.expect("HTTP ID API").to_string();
    let r = run(&addr, &["--requests", "1", "--ranges"]);
    assert_eq!(r.code, 2, "stdout: {}", r.stdout);
    assert!(r.stderr.contains("--ranges"), "{}", r.stderr);
}

#[test]
fn uuids_are_refused_for_the_http_target() {
    let node = node("10");
    let addr = node.http.expect("HTTP ID API").to_string();
    let r = run(&addr, &["--requests", "1", "--uuids"]);
    assert_eq!(r.code, 2, "stdout: {}", r.stdout);
    assert!(
        r.stderr.contains("--uuids is for the idgen target"),
        "{}",
        r.stderr
    );
}
