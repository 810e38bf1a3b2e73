//! The HTTP ID API's `?after=` (causal order across nodes: IDs above one the caller has seen)
//! and `Idempotency-Key` (a retry within the window gets the same IDs), on real nodes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idgen_id::Layout;
use idgen_testkit::node::NodeProc;

/// One request with `headers`; (status, lower-cased response headers, body).
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn ids(body: &str) -> Vec<u64> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    if let Some(s) = v["id_str"].as_str() {
        return vec![s.parse().unwrap()];
    }
    v["ids_str"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().parse().unwrap())
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An ID of the default layout at `unix_ms`, from the largest worker ID.
fn id_at(unix_ms: u64) -> u64 {
    let l = Layout::default();
    l.compose(unix_ms - l.epoch_ms(), l.max_worker(), l.max_sequence())
        .unwrap()
        .0
}

#[test]
fn after_answers_only_greater_ids_waiting_within_max_drift_and_refusing_beyond() {
    let node = NodeProc::start(&["--http-listen", "127.0.0.1:0", "--max-drift", "1s"]);
    let http = node.http.unwrap();
    let (status, _, body) = request(http, "POST", "/ids", &[], "");
    assert_eq!(status, 200, "{body}");
    let seen = ids(&body)[0];
    let (status, _, body) = request(http, "POST", &format!("/ids?after={seen}"), &[], "");
    assert_eq!(status, 200, "{body}");
    assert!(ids(&body)[0] > seen);

    // Seen from a node whose clock runs 400 ms ahead (the largest worker, the last sequence
    // of its millisecond): this node waits for its clock, then answers greater IDs.
    let ahead = id_at(now_ms() + 400);
    let started = Instant::now();
    let (status, _, body) = request(
        http,
        "POST",
        &format!("/ids/batch?after={ahead}"),
        &[],
        r#"{"count": 100}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(ids(&body).iter().all(|&id| id > ahead), "{body}");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "it did not wait"
    );

    // Further ahead than max_drift: a retry status; far in the future: refused.
    let far = id_at(now_ms() + 5_000);
    let (status, head, body) = request(http, "POST", &format!("/ids?after={far}"), &[], "");
    assert_eq!(status, 503, "{body}");
    assert!(head.contains("retry-after: "), "{head}");
    let future = id_at(now_ms() + 7_200_000);
    let (status, _, body) = request(http, "POST", &format!("/ids?after={future}"), &[], "");
    assert_eq!(status, 400, "{body}");
    for bad in ["garbage", "-1", "9223372036854775808", ""] {
        let (status, _, body) = request(http, "POST", &format!("/ids?after={bad}"), &[], "");
        assert_eq!(status, 400, "after={bad}: {body}");
    }
}

#[test]
fn after_refuses_an_id_another_layout_could_not_hold() {
    // A JavaScript-safe layout: an ID at or above 2^53 is not one of its IDs.
    let node = NodeProc::start(&[
        "--http-listen",
        "127.0.0.1:0",
        "--timestamp-bits",
        "41",
        "--worker-bits",
        "2",
        "--sequence-bits",
        "10",
    ]);
    let http = node.http.unwrap();
    let (status, _, body) = request(http, "POST", &format!("/ids?after={}", 1u64 << 60), &[], "");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not an ID of this cluster"), "{body}");
}

#[test]
fn an_idempotency_key_gets_the_same_ids_within_the_window_and_only_for_the_same_request() {
    let node = NodeProc::start(&[
        "--http-listen",
        "127.0.0.1:0",
        "--idempotency-window",
        "30s",
    ]);
    let http = node.http.unwrap();
    let key = [("Idempotency-Key", "order-42")];
    let (status, head, first) = request(http, "POST", "/ids/batch", &key, r#"{"count": 5}"#);
    assert_eq!(status, 200, "{first}");
    assert!(!head.contains("idempotent-replayed"), "{head}");
    let (status, head, again) = request(http, "POST", "/ids/batch", &key, r#"{"count": 5}"#);
    assert_eq!(status, 200, "{again}");
    assert!(head.contains("idempotent-replayed: true"), "{head}");
    assert_eq!(ids(&first), ids(&again));
    // Without the key, or with another, new IDs.
    let (_, _, other) = request(
        http,
        "POST",
        "/ids/batch",
        &[("Idempotency-Key", "order-43")],
        r#"{"count": 5}"#,
    );
    assert!(ids(&other).iter().all(|id| !ids(&first).contains(id)));
    // The same key with another request is refused, never answered with the first's IDs.
    let (status, _, body) = request(http, "POST", "/ids/batch", &key, r#"{"count": 6}"#);
    assert_eq!(status, 422, "{body}");
    let (status, _, body) = request(http, "POST", "/ids", &key, "");
    assert_eq!(status, 422, "{body}");
    // A refused request is not kept: its retry is answered afresh.
    let bad = [("Idempotency-Key", "bad-count")];
    let (status, _, _) = request(http, "POST", "/ids/batch", &bad, r#"{"count": 0}"#);
    assert_eq!(status, 400);
    let (status, _, body) = request(http, "POST", "/ids/batch", &bad, r#"{"count": 0}"#);
    assert_eq!(status, 400, "{body}");
    // Bad keys, and keys where they do not apply.
    for k in ["with space", &"k".repeat(300)] {
        let (status, _, body) = request(http, "POST", "/ids", &[("Idempotency-Key", k)], "");
        assert_eq!(status, 400, "{k:?}: {body}");
    }
    let (status, _, body) = request(http, "POST", "/seq/x", &key, "");
    assert_eq!(status, 400, "{body}");
    // UUIDs too.
    let k = [("Idempotency-Key", "uuid-1")];
    let (_, _, u1) = request(http, "POST", "/uuids", &k, "");
    let (_, _, u2) = request(http, "POST", "/uuids", &k, "");
    assert_eq!(u1, u2);
}

#[test]
fn idempotency_keys_are_refused_when_off_and_when_the_table_is_full() {
    let off = NodeProc::start(&["--http-listen", "127.0.0.1:0"]);
    let (status, _, body) = request(
        off.http.unwrap(),
        "POST",
        "/ids",
        &[("Idempotency-Key", "k")],
        "",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not enabled"), "{body}");

    let small = NodeProc::start(&[
        "--http-listen",
        "127.0.0.1:0",
        "--idempotency-window",
        "60s",
        "--idempotency-max-bytes",
        "4096",
    ]);
    let http = small.http.unwrap();
    let mut kept = Vec::new();
    let mut full = false;
    for i in 0..100 {
        let key = format!("key-{i}");
        let (status, _, body) = request(http, "POST", "/ids", &[("Idempotency-Key", &key)], "");
        match status {
            200 => kept.push((key, body)),
            503 => {
                full = true;
                break;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(full && kept.len() > 3, "{} kept", kept.len());
    // Every answer kept is still answered the same: none was dropped to make room.
    for (key, body) in &kept {
        let (status, _, again) = request(http, "POST", "/ids", &[("Idempotency-Key", key)], "");
        assert_eq!((status, &again), (200, body));
    }
}

// ---- The same over the binary protocol: GET_IDS_WITH (version 5) ----

use idgen_protocol::{IdsOptions, Request, Response, Status};
use idgen_testkit::conn::TestConn;

/// One GET_IDS_WITH and its answer.
fn with(c: &mut TestConn, o: IdsOptions) -> Response {
    c.send(&Request::GetIdsWith(o));
    c.recv().expect("an answer")
}

fn ids_of(r: Response) -> Vec<u64> {
    match r {
        Response::Ids(ids) => ids,
        other => panic!("not IDS: {other:?}"),
    }
}

fn status_of(r: &Response) -> Status {
    match r {
        Response::Error { status, .. } => *status,
        other => panic!("not an ERROR: {other:?}"),
    }
}

#[test]
fn get_ids_with_after_answers_greater_ids_or_a_clear_status() {
    let node = NodeProc::start(&["--max-drift", "1s"]);
    let mut c = TestConn::open_version(node.addr, 5);
    assert_eq!(c.hello().version, 5);
    let plain = ids_of(with(&mut c, IdsOptions::new(3)));
    assert_eq!(plain.len(), 3);
    let seen = plain[2];
    let after = |a: u64, count: u32| IdsOptions {
        after: Some(a),
        ..IdsOptions::new(count)
    };
    assert!(ids_of(with(&mut c, after(seen, 10)))
        .iter()
        .all(|&id| id > seen));
    // From a node 400 ms ahead: waited for, then greater.
    let ahead = id_at(now_ms() + 400);
    let started = Instant::now();
    assert!(ids_of(with(&mut c, after(ahead, 50)))
        .iter()
        .all(|&id| id > ahead));
    assert!(started.elapsed() >= Duration::from_millis(250));
    // Further than max_drift: retry later; far in the future or not an ID: refused.
    let r = with(&mut c, after(id_at(now_ms() + 5_000), 1));
    assert_eq!(status_of(&r), Status::UNAVAILABLE_CLOCK, "{r:?}");
    let r = with(&mut c, after(id_at(now_ms() + 7_200_000), 1));
    assert_eq!(status_of(&r), Status::INVALID_OPTION, "{r:?}");
    // The connection is still usable, and its IDs still increase.
    let more = ids_of(with(&mut c, IdsOptions::new(2)));
    assert!(more[0] > seen);
    // Keys and masking the node has not enabled are refused.
    let keyed = IdsOptions {
        key: Some("k".parse().unwrap()),
        ..IdsOptions::new(1)
    };
    assert_eq!(status_of(&with(&mut c, keyed)), Status::INVALID_OPTION);
    let masked = IdsOptions {
        masked: true,
        ..IdsOptions::new(1)
    };
    assert_eq!(status_of(&with(&mut c, masked)), Status::INVALID_OPTION);
    // On a connection of version 4 the opcode is unknown.
    let mut v4 = TestConn::open_version(node.addr, 4);
    assert_eq!(
        status_of(&with(&mut v4, IdsOptions::new(1))),
        Status::UNKNOWN_OPCODE
    );
}

#[test]
fn get_ids_with_a_key_replays_its_answer_on_any_connection_of_the_node() {
    let node = NodeProc::start(&[
        "--http-listen",
        "127.0.0.1:0",
        "--idempotency-window",
        "30s",
    ]);
    let key = |k: &str, count: u32| IdsOptions {
        key: Some(k.parse().unwrap()),
        ..IdsOptions::new(count)
    };
    let mut a = TestConn::open_version(node.addr, 5);
    let first = ids_of(with(&mut a, key("proto-1", 4)));
    let mut b = TestConn::open_version(node.addr, 5);
    assert_eq!(
        ids_of(with(&mut b, key("proto-1", 4))),
        first,
        "replayed on another connection"
    );
    let r = with(&mut b, key("proto-1", 5));
    assert_eq!(status_of(&r), Status::IDEMPOTENCY_KEY_REUSED, "{r:?}");
    // One table for both ways in: a key the HTTP API kept is another request here.
    let http = node.http.unwrap();
    let (status, _, _) = request(http, "POST", "/ids", &[("Idempotency-Key", "shared")], "");
    assert_eq!(status, 200);
    let r = with(&mut a, key("shared", 1));
    assert_eq!(status_of(&r), Status::IDEMPOTENCY_KEY_REUSED, "{r:?}");
    // A fresh key issues fresh IDs.
    let fresh = ids_of(with(&mut a, key("proto-2", 4)));
    assert!(fresh.iter().all(|id| !first.contains(id)));
}

#[test]
fn get_ids_with_masked_answers_the_ids_masked_with_the_current_key() {
    let keys = "7:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f,\n\
                3:1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";
    let node = NodeProc::try_start(&[], &[("IDGEN_MASK_KEYS", keys)]).expect("a node");
    let ring = idgen_id::mask::Keyring::parse(keys).unwrap();
    let mut c = TestConn::open_version(node.addr, 5);
    let o = IdsOptions {
        masked: true,
        ..IdsOptions::new(50)
    };
    let (key_id, masked) = match with(&mut c, o) {
        Response::MaskedIds { key_id, ids } => (key_id, ids),
        other => panic!("{other:?}"),
    };
    assert_eq!(key_id, 7, "the current key masks");
    let ids: Vec<u64> = masked
        .iter()
        .map(|&m| ring.unmask(m, 63).unwrap())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "they unmask to increasing IDs"
    );
    assert_ne!(ids, masked);
    // Plain IDs on the same connection continue after them.
    let next = ids_of(with(&mut c, IdsOptions::new(1)));
    assert!(next[0] > *ids.last().unwrap());
}
