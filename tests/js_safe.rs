//! JavaScript-safe layouts (issue 30, item 2): a node whose layout is 53 bits wide (41/2/10)
//! issues only IDs at most `2^53 - 1`, over the ID protocol and over HTTP, where Node's own
//! `JSON.parse` reads every one as an exact number; the admin API says the layout is
//! JavaScript-safe and refuses values beyond it; a cluster record of another width is refused.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::node::{self, NodeProc};
use idgen_testkit::TestConn;
use serde_json::Value;

/// `Number.MAX_SAFE_INTEGER`.
const MAX_SAFE: u64 = (1 << 53) - 1;

/// The JavaScript-safe layout: 41 timestamp bits (the default's 69.7 years), 4 worker IDs,
/// 1024 IDs per worker per millisecond.
const JS_LAYOUT: &[&str] = &[
    "--timestamp-bits",
    "41",
    "--worker-bits",
    "2",
    "--sequence-bits",
    "10",
];

fn start(layout: &[&str]) -> NodeProc {
    let mut args = vec![
        "--store",
        "memory",
        "--shards",
        "2",
        "--http-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(layout);
    NodeProc::start(&args)
}

/// Node's `JSON.parse` on an answer of `POST /ids/batch`: how many IDs it read, how many of
/// them are not exact (not a safe integer, or not the number of their `ids_str`), and the
/// largest, as Node prints it.
fn node_reads(body: &str) -> Value {
    const SCRIPT: &str = r#"
let text = "";
process.stdin.on("data", (d) => (text += d));
process.stdin.on("end", () => {
  const v = JSON.parse(text);
  const inexact = v.ids.filter(
    (n, i) => !Number.isSafeInteger(n) || String(n) !== v.ids_str[i] || BigInt(n) !== BigInt(v.ids_str[i]),
  ).length;
  const max = v.ids.reduce((a, b) => (b > a ? b : a), 0);
  process.stdout.write(JSON.stringify({ count: v.ids.length, inexact, max: String(max) }));
});
"#;
    let mut child = Command::new("node")
        .args(["-e", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node (Node.js 20 is a test dependency)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("node's summary")
}

fn batch(api: SocketAddr, count: u32) -> String {
    let (status, body) = node::http(
        api,
        "POST",
        "/ids/batch",
        Some(&format!(r#"{{"count": {count}}}"#)),
    );
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn a_53_bit_nodes_ids_survive_a_javascript_round_trip() {
    let js = start(JS_LAYOUT);
    let api = js.http.expect("HTTP ID API");
    let mut total = 0;
    for _ in 0..5 {
        let body = batch(api, 4096);
        // Rust's reading: every ID below 2^53, number and string the same.
        let v: Value = serde_json::from_str(&body).unwrap();
        let (ids, strs) = (
            v["ids"].as_array().unwrap(),
            v["ids_str"].as_array().unwrap(),
        );
        assert_eq!(ids.len(), 4096);
        for (n, s) in ids.iter().zip(strs) {
            let n = n.as_u64().unwrap();
            assert!(n <= MAX_SAFE, "{n} is above 2^53 - 1");
            assert_eq!(s.as_str().unwrap(), n.to_string());
        }
        // Node's reading: every number exact.
        let read = node_reads(&body);
        assert_eq!(read["count"], 4096, "{read}");
        assert_eq!(read["inexact"], 0, "{read}");
        let max: u64 = read["max"].as_str().unwrap().parse().unwrap();
        assert!(max <= MAX_SAFE && strs.iter().any(|s| s == &max.to_string()));
        total += 4096;
    }
    assert_eq!(total, 5 * 4096);
    // One ID (`POST /ids`) too.
    let (status, body) = node::http(api, "POST", "/ids", None);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["id"].as_u64().unwrap() <= MAX_SAFE, "{body}");

    // The control: the default (63-bit) layout's IDs of today are above 2^53, and Node's
    // numbers for them are not exact. This is the round trip the narrower layout fixes.
    let wide = start(&[]);
    let read = node_reads(&batch(wide.http.unwrap(), 64));
    assert_eq!(read["count"], 64, "{read}");
    assert!(read["inexact"].as_u64().unwrap() > 0, "{read}");
}

#[test]
fn a_53_bit_node_announces_its_layout_and_refuses_values_beyond_it() {
    let js = start(JS_LAYOUT);
    // The ID protocol: HELLO_OK carries 41/2/10, and the IDs fit it.
    let mut c = TestConn::open(js.addr);
    let layout = c.hello.unwrap().layout().unwrap();
    assert_eq!((layout.id_bits(), layout.is_js_safe()), (53, true));
    let ids = c.get_ids(10_000).unwrap();
    assert!(ids.iter().all(|&id| id <= MAX_SAFE));
    assert!(ids.windows(2).all(|w| w[0] < w[1]));

    // The admin API.
    let admin = js.admin.expect("admin API");
    let (status, body) = node::http(admin, "GET", "/layout", None);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["id_bits"], 53, "{body}");
    assert_eq!(v["js_safe"], true, "{body}");
    assert_eq!(v["max_id"], MAX_SAFE, "{body}");
    assert_eq!(v["max_id_str"], MAX_SAFE.to_string(), "{body}");
    let (status, body) = node::http(admin, "GET", &format!("/ids/{MAX_SAFE}"), None);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["worker"].as_u64(), v["sequence"].as_u64()),
        (Some(3), Some(1023))
    );
    // 2^53 is not an ID of this layout: refused, saying why (not read as a later time).
    for text in ["9007199254740992", "9223372036854775807"] {
        let (status, body) = node::http(admin, "GET", &format!("/ids/{text}"), None);
        assert_eq!(status, 400, "{text}: {body}");
        assert!(
            body.contains("not an ID of this layout") && body.contains("53 bits"),
            "{body}"
        );
    }

    // What the alerts read: the worker IDs of 2 worker bits, and the time left of 41
    // timestamp bits (the same as the default layout's: the width comes out of the rest).
    let (status, metrics) = node::http(admin, "GET", "/metrics", None);
    assert_eq!(status, 200);
    let sample = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
    };
    assert_eq!(sample("idgen_worker_ids_capacity"), 4.0);
    let left = sample("idgen_layout_time_remaining_seconds");
    let expected = idgen_id::Layout::default()
        .time_left(common::wall_ms())
        .as_secs_f64();
    assert!(
        (left - expected).abs() < 60.0,
        "{left} s left, expected {expected}"
    );

    // `idgen decode` with the same layout refuses it too.
    let out = Command::new(env!("CARGO_BIN_EXE_idgen"))
        .arg("decode")
        .args(JS_LAYOUT)
        .arg("9007199254740992")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not an ID of this layout"), "{err}");
}

/// The cluster record fixes the layout, its width included: a node configured wider or
/// narrower than the cluster is refused, naming both.
#[test]
fn a_cluster_of_one_width_refuses_a_node_of_another() {
    let data = tempfile::tempdir().unwrap();
    let run = |layout: &[&str]| {
        let mut args = vec!["--shards", "1"];
        args.extend_from_slice(layout);
        NodeProc::try_start_in(Some(data.path()), &args, &[])
    };
    let mut first = run(JS_LAYOUT).expect("the first node writes the cluster record");
    assert!(TestConn::open(first.addr).get_ids(1).is_ok());
    assert!(first.terminate(Duration::from_secs(10)).success());

    // Wider: the default 63 bits; 54 bits; narrower: 52 bits (the same 53 split otherwise
    // is refused as well).
    let others: [&[&str]; 4] = [
        &[],
        &[
            "--timestamp-bits",
            "42",
            "--worker-bits",
            "2",
            "--sequence-bits",
            "10",
        ],
        &[
            "--timestamp-bits",
            "40",
            "--worker-bits",
            "2",
            "--sequence-bits",
            "10",
        ],
        &[
            "--timestamp-bits",
            "41",
            "--worker-bits",
            "3",
            "--sequence-bits",
            "9",
        ],
    ];
    for other in others {
        let err = run(other)
            .err()
            .unwrap_or_else(|| panic!("{other:?} started on a 41/2/10 cluster"));
        assert!(
            err.contains("layout mismatch") && err.contains("41/2/10 (53-bit IDs)"),
            "{other:?}: {err}"
        );
    }
    let err = run(&[]).err().unwrap();
    assert!(err.contains("41/10/12 (63-bit IDs)"), "{err}");
    // The cluster's own layout still starts.
    let again = run(JS_LAYOUT).expect("the cluster's layout");
    assert!(TestConn::open(again.addr).get_ids(1).is_ok());
}
