//! idgen-loadtest against a scriptable in-test fake idgen server built on idgen-protocol:
//! the JSON report must count duplicates, out-of-order IDs, errors and reconnects exactly.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BufMut;
use idgen_protocol::{
    decode_request, encode_error, encode_hello_ok, encode_ids, Decoded, Limits, Request,
    ServerConnState, ServerHello, Status,
};

use common::{run_loadtest, Run};

const LIMIT: Duration = Duration::from_secs(10);

/// What the fake server does with the GET_IDS number `n` (counted over all connections).
#[derive(Clone, Copy, Debug)]
enum Action {
    /// Answer with the previous ID again (a duplicate, hence also out of order).
    Duplicate,
    /// Answer with a fresh ID lower than every ID handed out so far.
    OutOfOrder,
    /// Answer with an ERROR frame; a closing status also closes the connection.
    Error(Status),
    /// Answer with one ID more than asked.
    WrongCount,
    /// Answer with an IDS frame whose only ID has the top bit set.
    SignBit,
    /// Answer with a frame of unknown opcode 0x7F.
    Malformed,
}

#[derive(Clone, Copy, PartialEq)]
enum Ids {
    /// One counter for the whole server: IDs unique and increasing everywhere.
    Global,
    /// Every connection counts from the same start: connections duplicate each other.
    SameForEach,
}

struct Fake {
    max_batch: u32,
    ids: Ids,
    script: HashMap<u64, Action>,
    requests: AtomicU64,
    next_global: AtomicU64,
    next_low: AtomicU64,
}

const BASE: u64 = 1 << 40;

/// Start the fake server on 127.0.0.1:0; returns "127.0.0.1:port". Its threads end with the
/// test process.
fn start_fake(max_batch: u32, ids: Ids, script: &[(u64, Action)]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let fake = Arc::new(Fake {
        max_batch,
        ids,
        script: script.iter().copied().collect(),
        requests: AtomicU64::new(0),
        next_global: AtomicU64::new(BASE),
        next_low: AtomicU64::new(1),
    });
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let fake = Arc::clone(&fake);
            std::thread::spawn(move || serve(&fake, stream));
        }
    });
    addr
}

fn serve(fake: &Fake, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let limits = Limits {
        max_request_frame: 64,
        max_batch: fake.max_batch,
    };
    let mut state = ServerConnState::new();
    let mut next_local = BASE;
    let mut last: u64 = 0;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut close = false;
        let mut used_total = 0;
        while !close {
            let (decoded, used) = match decode_request(&buf[used_total..], &limits) {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(e) => {
                    encode_error(e.status(), &e.to_string(), &mut out);
                    close = true;
                    break;
                }
            };
            used_total += used;
            if let Err(e) = state.check(&decoded) {
                encode_error(e.status(), &e.to_string(), &mut out);
                close = true;
                break;
            }
            let count = match decoded {
                Decoded::Request(Request::Hello { .. }) => {
                    encode_hello_ok(&hello(fake.max_batch), &mut out);
                    continue;
                }
                Decoded::Request(Request::GetIds { count }) => count as u64,
                Decoded::Request(Request::Ping { token }) => {
                    idgen_protocol::encode_pong(token, &mut out);
                    continue;
                }
                // The fake announces protocol version 1, which has no GET_RANGES: version-1
                // decoding reports opcode 0x04 as a Reject, so this arm cannot be reached.
                Decoded::Request(Request::GetRanges { .. }) => unreachable!(),
                Decoded::Reject { status, message } => {
                    encode_error(status, message, &mut out);
                    continue;
                }
            };
            let n = fake.requests.fetch_add(1, Ordering::SeqCst);
            let mut take = |k: u64| match fake.ids {
                Ids::Global => fake.next_global.fetch_add(k, Ordering::SeqCst),
                Ids::SameForEach => {
                    let first = next_local;
                    next_local += k;
                    first
                }
            };
            let ids: Vec<u64> = match fake.script.get(&n) {
                None => {
                    let first = take(count);
                    (first..first + count).collect()
                }
                Some(Action::Duplicate) => vec![last; count as usize],
                Some(Action::OutOfOrder) => {
                    let first = fake.next_low.fetch_add(count, Ordering::SeqCst);
                    (first..first + count).collect()
                }
                Some(Action::WrongCount) => {
                    let first = take(count + 1);
                    (first..first + count + 1).collect()
                }
                Some(Action::Error(status)) => {
                    encode_error(*status, "scripted error", &mut out);
                    close = status.closes_connection();
                    continue;
                }
                Some(Action::SignBit) => {
                    out.put_u32(13);
                    out.put_u8(0x82);
                    out.put_u32(1);
                    out.put_u64(1 << 63);
                    continue;
                }
                Some(Action::Malformed) => {
                    out.extend_from_slice(&[0, 0, 0, 1, 0x7f]);
                    continue;
                }
            };
            last = *ids.last().expect("at least one id");
            encode_ids(&ids, &mut out);
        }
        buf.drain(..used_total);
        if stream.write_all(&out).is_err() || close {
            return;
        }
    }
}

fn hello(max_batch: u32) -> ServerHello {
    ServerHello {
        version: 1,
        epoch_ms: 1_704_067_200_000,
        timestamp_bits: 41,
        worker_bits: 10,
        sequence_bits: 12,
        region_bits: 0,
        max_batch,
        max_request_frame: 64,
        worker_first: 0,
        worker_count: 1024,
        shard: 0,
    }
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
    let addr = start_fake(65536, Ids::Global, &[]);
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
        Ids::Global,
        &[
            (10, Action::Duplicate),
            (20, Action::OutOfOrder),
            (30, Action::Error(Status::INVALID_COUNT)),
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
    let addr = start_fake(65536, Ids::Global, &[(3, Action::OutOfOrder)]);
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
    let addr = start_fake(65536, Ids::SameForEach, &[]);
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
    let addr = start_fake(65536, Ids::Global, &[(2, Action::WrongCount)]);
    let r = run(&addr, &["--requests", "5", "--batch", "4", "--verify"]);
    assert_eq!(r.code, 1);
    let v = r.json();
    assert_eq!(n(&v, "wrong_count"), 1);
    assert_eq!(n(&v, "ids"), 21);
    assert_eq!(n(&v, "duplicates"), 0);

    let addr = start_fake(65536, Ids::Global, &[(2, Action::SignBit)]);
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
    let addr = start_fake(
        65536,
        Ids::Global,
        &[(5, Action::Error(Status::SHUTTING_DOWN))],
    );
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
    let addr = start_fake(
        65536,
        Ids::Global,
        &[(7, Action::Error(Status::RANGE_CHANGED))],
    );
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
    let addr = start_fake(65536, Ids::Global, &[(3, Action::Malformed)]);
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
    let addr = start_fake(100, Ids::Global, &[]);
    let r = run(&addr, &["--requests", "5", "--batch", "101"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("max_batch is 100 but --batch is 101"),
        "stderr: {}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
}

#[test]
fn open_loop_sends_at_the_requested_rate() {
    let addr = start_fake(65536, Ids::Global, &[]);
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
