//! idgen-loadtest against the test kit's scriptable fake idgen server (`idgen_testkit::fake`):
//! the JSON report must count duplicates, out-of-order IDs, errors and reconnects exactly.

mod common;

use std::net::TcpListener;
use std::time::Duration;

use idgen_protocol::Status;
use idgen_testkit::fake::{Action, Config, FakeServer, Ids};

use common::{run_loadtest, Run};

const LIMIT: Duration = Duration::from_secs(10);

/// The kit's fake server, scripted by GET_IDS number (counted over all connections); derefs
/// to its address ("127.0.0.1:port"). It stops when dropped.
struct Fake {
    addr: String,
    _server: FakeServer,
}

impl std::ops::Deref for Fake {
    type Target = str;
    fn deref(&self) -> &str {
        &self.addr
    }
}

fn start_fake(max_batch: u32, ids: Ids, script: &[(u64, Action)]) -> Fake {
    let server = FakeServer::spawn(Config {
        max_batch,
        ids,
        ..Config::default()
    });
    server.control.script_at(script);
    Fake {
        addr: server.addr.to_string(),
        _server: server,
    }
}

/// An ERROR frame with this status (closing the connection if the status does).
fn error(status: Status) -> Action {
    Action::Error(status, "scripted error")
}

/// An IDS frame whose only ID has the top bit set.
fn sign_bit() -> Action {
    let mut frame = vec![0, 0, 0, 13, 0x82, 0, 0, 0, 1];
    frame.extend_from_slice(&(1u64 << 63).to_be_bytes());
    Action::Raw(frame)
}

/// A frame of unknown opcode 0x7F.
fn malformed() -> Action {
    Action::Raw(vec![0, 0, 0, 1, 0x7f])
}

fn run(addr: &str, extra: &[&str]) -> Run {
    let mut args = vec!["--addr", addr, "--json", "--quiet"];
    args.extend_from_slice(extra);
    run_loadtest(&args, LIMIT)
}

fn n(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing or not a count in {v}"))
}

#[test]
fn clean_run_has_every_field_and_exits_0() {
    let addr = start_fake(65536, Ids::Shared, &[]);
    let r = run(
        &addr,
        &[
            "--connections",
            "3",
            "--requests",
            "300",
            "--batch",
            "7",
            "--pipeline",
            "5",
            "--verify",
        ],
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["target"], "idgen");
    assert_eq!(n(&v, "requests"), 300);
    assert_eq!(n(&v, "ids"), 2100);
    assert_eq!(n(&v, "verified_ids"), 2100);
    assert_eq!(n(&v, "duplicates"), 0);
    assert_eq!(n(&v, "out_of_order"), 0);
    assert_eq!(n(&v, "reconnects"), 0);
    assert_eq!(v["errors"], serde_json::json!({}));
    assert!(v["duration_s"].as_f64().unwrap() > 0.0);
    assert!(v["ids_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["requests_per_sec"].as_f64().unwrap() > 0.0);
    for p in ["p50", "p90", "p99", "p999", "max", "mean"] {
        let x = v["latency_us"][p]
            .as_f64()
            .unwrap_or_else(|| panic!("latency_us.{p}"));
        assert!(x > 0.0, "latency_us.{p} = {x}");
    }
    assert!(v["latency_us"]["p50"].as_f64() <= v["latency_us"]["max"].as_f64());
}

#[test]
fn counts_duplicates_out_of_order_and_errors_exactly() {
    let addr = start_fake(
        65536,
        Ids::Shared,
        &[
            (10, Action::Duplicate),
            (20, Action::OutOfOrder),
            (30, error(Status::INVALID_COUNT)),
        ],
    );
    let r = run(&addr, &["--requests", "100", "--pipeline", "4", "--verify"]);
    assert_eq!(
        r.code, 1,
        "a duplicate must fail the run; stderr: {}",
        r.stderr
    );
    let v = r.json();
    assert_eq!(n(&v, "requests"), 100);
    assert_eq!(n(&v, "ids"), 99);
    assert_eq!(n(&v, "duplicates"), 1);
    // The duplicate is also not greater than its predecessor.
    assert_eq!(n(&v, "out_of_order"), 2);
    assert_eq!(v["errors"], serde_json::json!({"INVALID_COUNT": 1}));
    assert_eq!(n(&v, "reconnects"), 0);
    assert_eq!(v["verify_ok"], false);
    assert!(r.stderr.contains("INVALID_COUNT"), "stderr: {}", r.stderr);
}

#[test]
fn out_of_order_alone_fails_verify() {
    let addr = start_fake(65536, Ids::Shared, &[(3, Action::OutOfOrder)]);
    let r = run(&addr, &["--requests", "10", "--verify"]);
    assert_eq!(r.code, 1);
    let v = r.json();
    assert_eq!(n(&v, "duplicates"), 0);
    assert_eq!(n(&v, "out_of_order"), 1);
    // Without --verify the same run passes and reports no verify fields.
    let r = run(&addr, &["--requests", "10"]);
    assert_eq!(r.code, 0);
    assert!(r.json().get("duplicates").is_none());
}

#[test]
fn duplicates_across_connections() {
    let addr = start_fake(65536, Ids::PerConnection, &[]);
    let r = run(
        &addr,
        &[
            "--connections",
            "2",
            "--requests",
            "20",
            "--batch",
            "5",
            "--pipeline",
            "3",
            "--verify",
        ],
    );
    assert_eq!(r.code, 1);
    let v = r.json();
    assert_eq!(n(&v, "ids"), 100);
    assert_eq!(n(&v, "duplicates"), 50);
    assert_eq!(n(&v, "out_of_order"), 0);
}

#[test]
fn wrong_count_and_sign_bit_fail_verify() {
    let addr = start_fake(65536, Ids::Shared, &[(2, Action::WrongCount)]);
    let r = run(&addr, &["--requests", "5", "--batch", "4", "--verify"]);
    assert_eq!(r.code, 1);
    let v = r.json();
    assert_eq!(n(&v, "wrong_count"), 1);
    assert_eq!(n(&v, "ids"), 21);
    assert_eq!(n(&v, "duplicates"), 0);

    let addr = start_fake(65536, Ids::Shared, &[(2, sign_bit())]);
    let r = run(&addr, &["--requests", "5", "--verify"]);
    assert_eq!(r.code, 1, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(n(&v, "sign_bit"), 1);
    assert_eq!(v["errors"], serde_json::json!({"MALFORMED_RESPONSE": 1}));
    assert_eq!(n(&v, "reconnects"), 1);
    assert_eq!(n(&v, "requests"), 4);
}

#[test]
fn closing_status_reconnects() {
    let addr = start_fake(65536, Ids::Shared, &[(5, error(Status::SHUTTING_DOWN))]);
    let r = run(&addr, &["--requests", "50", "--pipeline", "4", "--verify"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["errors"], serde_json::json!({"SHUTTING_DOWN": 1}));
    assert_eq!(n(&v, "reconnects"), 1);
    // Requests pipelined behind the closing error are never answered.
    assert_eq!(n(&v, "requests") + n(&v, "unanswered"), 50);
    assert!(n(&v, "unanswered") <= 3);
    assert_eq!(n(&v, "duplicates"), 0);
}

#[test]
fn range_changed_reconnects_and_the_run_goes_on() {
    // A node whose worker range changed closes the connection with RANGE_CHANGED: the load
    // tester reconnects (a new HELLO_OK) and finishes the run.
    let addr = start_fake(65536, Ids::Shared, &[(7, error(Status::RANGE_CHANGED))]);
    let r = run(&addr, &["--requests", "50", "--pipeline", "4", "--verify"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["errors"], serde_json::json!({"RANGE_CHANGED": 1}));
    assert_eq!(n(&v, "reconnects"), 1);
    assert_eq!(n(&v, "requests") + n(&v, "unanswered"), 50);
    assert_eq!(n(&v, "duplicates"), 0);
}

#[test]
fn malformed_frame_is_described_once_and_reconnects() {
    let addr = start_fake(65536, Ids::Shared, &[(3, malformed())]);
    let r = run(&addr, &["--requests", "20", "--verify"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["errors"], serde_json::json!({"MALFORMED_RESPONSE": 1}));
    assert_eq!(n(&v, "reconnects"), 1);
    assert_eq!(n(&v, "requests"), 19);
    assert_eq!(n(&v, "unanswered"), 1);
    assert!(
        r.stderr.contains("unknown response opcode 0x7f"),
        "stderr: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("[00 00 00 01 7f]"),
        "stderr: {}",
        r.stderr
    );
}

#[test]
fn refuses_batch_above_max_batch() {
    let addr = start_fake(100, Ids::Shared, &[]);
    let r = run(&addr, &["--requests", "5", "--batch", "101"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("max_batch is 100 but --batch is 101"),
        "stderr: {}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
}

/// The kit's fake speaks protocol version 1: --uuids says it needs version 4 and sends nothing.
#[test]
fn uuids_from_a_node_below_version_4_is_a_clear_error() {
    let addr = start_fake(100, Ids::Shared, &[]);
    let r = run(&addr, &["--requests", "5", "--uuids"]);
    assert_eq!(r.code, 2, "stdout: {}", r.stdout);
    assert!(
        r.stderr
            .contains("--uuids needs protocol version 4, the server speaks version 1"),
        "stderr: {}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
}

#[test]
fn open_loop_sends_at_the_requested_rate() {
    let addr = start_fake(65536, Ids::Shared, &[]);
    let r = run(
        &addr,
        &[
            "--rate",
            "400",
            "--duration",
            "1s",
            "--connections",
            "2",
            "--pipeline",
            "2",
            "--verify",
        ],
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    // 400/s for 1 s: exactly the requests scheduled before the end.
    assert_eq!(n(&v, "requests"), 400);
    assert_eq!(v["rate"].as_f64(), Some(400.0));
    assert!((0.9..1.5).contains(&v["duration_s"].as_f64().unwrap()));
}

#[test]
fn connection_refused_is_a_clear_error() {
    // Bind then release a port so that nothing listens on it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = run(&format!("127.0.0.1:{port}"), &["--requests", "1"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("connect"), "stderr: {}", r.stderr);
}
