//! The admin surface of a real node: metrics, health, the HTTP API, `decode` and `inspect`,
//! readiness under a lost store (real etcd) and under a clock stepped back (libfaketime).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

#[cfg(feature = "etcd")]
use common::etcd::EtcdCluster;
use common::node::{http, NodeProc};
use idgen_protocol::Status;
use idgen_testkit::TestConn;
use serde_json::Value;

const ADMIN: &[&str] = &["--admin-listen", "127.0.0.1:0"];

/// A year of 365.25 days, in seconds.
const YEAR: f64 = 365.25 * 86_400.0;

fn start(extra: &[&str]) -> NodeProc {
    let mut args: Vec<&str> = ADMIN.to_vec();
    args.extend_from_slice(extra);
    NodeProc::start(&args)
}

/// The `name="value"` pairs of a label set, split at the commas between them: a comma inside
/// a quoted value (`features="etcd,postgres"`) is part of the value, and `\"` does not end it.
fn label_pairs(labels: &str) -> Vec<&str> {
    let (mut pairs, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                pairs.push(&labels[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    pairs.push(&labels[start..]);
    pairs
}

/// A strict reading of the Prometheus text format 0.0.4: every sample belongs to a family
/// declared by `# TYPE` before it, names and labels are well-formed, values are numbers.
fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line:?}");
                for pair in label_pairs(&labels[1..labels.len() - 1]) {
                    let (k, v) = pair.split_once('=').expect("label pair");
                    assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                    assert!(v.starts_with('"') && v.ends_with('"'), "{line:?}");
                }
            }
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| types.get(*base).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "sample {name} before its # TYPE line"
        );
        samples.insert(series.to_string(), value);
    }
    samples
}

fn sum(samples: &HashMap<String, f64>, prefix: &str) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| {
            k.starts_with(prefix) && (k.len() == prefix.len() || k[prefix.len()..].starts_with('{'))
        })
        .map(|(_, v)| v)
        .sum()
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn metrics_parse_and_move_with_traffic() {
    let node = start(&["--store", "memory", "--shards", "2"]);
    let admin = node.admin.expect("admin address");
    let (status, text) = http(admin, "GET", "/metrics", None);
    assert_eq!(status, 200);
    let before = parse_prometheus(&text);
    for family in [
        "idgen_ids_issued_total",
        "idgen_requests_total",
        "idgen_errors_total",
        "idgen_batch_size_count",
        "idgen_request_duration_seconds_count",
        "idgen_sequence_exhaustion_waits_total",
        "idgen_clock_rollback_events_total",
        "idgen_clock_rollback_largest_seconds",
        "idgen_clock_drift_seconds",
        "idgen_lease_time_remaining_seconds",
        "idgen_lease_renewals_total",
        "idgen_lease_renewal_duration_seconds_count",
        "idgen_worker_ids_free",
        "idgen_connections_open",
        "idgen_layout_time_remaining_seconds",
        "idgen_ready",
    ] {
        assert!(
            before.keys().any(|k| k.starts_with(family)),
            "{family} missing from /metrics"
        );
    }
    assert!(sum(&before, "idgen_lease_time_remaining_seconds") > 0.0);
    assert!(sum(&before, "idgen_layout_time_remaining_seconds") > 60.0 * YEAR);
    assert_eq!(sum(&before, "idgen_ready"), 1.0);

    let mut c = TestConn::open(node.addr);
    let mut issued = 0;
    for n in [1u32, 10, 4096, 7] {
        issued += c.get_ids(n).unwrap().len();
    }
    assert_eq!(c.get_ids(0).unwrap_err().0, Status::INVALID_COUNT);
    let (_, text) = http(admin, "GET", "/metrics", None);
    let after = parse_prometheus(&text);
    let delta = sum(&after, "idgen_ids_issued_total") - sum(&before, "idgen_ids_issued_total");
    assert_eq!(delta as usize, issued);
    assert_eq!(
        after["idgen_errors_total{status=\"200\",name=\"INVALID_COUNT\"}"]
            - before["idgen_errors_total{status=\"200\",name=\"INVALID_COUNT\"}"],
        1.0
    );
    assert_eq!(
        sum(&after, "idgen_batch_size_count") - sum(&before, "idgen_batch_size_count"),
        4.0
    );
    assert_eq!(sum(&after, "idgen_connections_open"), 1.0);
}

#[test]
fn http_api_answers_the_seed_calls_with_js_safe_ids_and_clear_errors() {
    let node = start(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--max-batch",
        "100",
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let admin = node.admin.unwrap();
    let api = node.http.expect("HTTP ID API address");
    assert_ne!(api, admin, "the HTTP ID API has its own address");
    let (s, b) = http(api, "POST", "/ids", None);
    assert_eq!(s, 200, "{b}");
    let v = json(&b);
    let id = v["id"].as_u64().unwrap();
    assert_eq!(v["id_str"].as_str().unwrap(), id.to_string());
    let (s, b) = http(api, "POST", "/ids?format=string", None);
    assert_eq!(s, 200);
    let v = json(&b);
    let id2: u64 = v["id"].as_str().expect("string ID").parse().unwrap();
    assert!(id2 > id);
    let (s, b) = http(api, "POST", "/ids/batch", Some(r#"{"count": 5}"#));
    assert_eq!(s, 200, "{b}");
    let v = json(&b);
    let ids: Vec<u64> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 5);
    assert!(ids[0] > id2 && ids.windows(2).all(|w| w[0] < w[1]));
    let strs: Vec<String> = v["ids_str"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    assert_eq!(strs, ids.iter().map(u64::to_string).collect::<Vec<_>>());
    let (s, b) = http(
        api,
        "POST",
        "/ids/batch?format=string",
        Some(r#"{"count": 2}"#),
    );
    assert_eq!(s, 200);
    assert!(json(&b)["ids"]
        .as_array()
        .unwrap()
        .iter()
        .all(Value::is_string));

    let big = format!(r#"{{"count": 1{}}}"#, " ".repeat(5000));
    for (to, method, path, body, want) in [
        (api, "POST", "/ids/batch", Some(r#"{"count": 0}"#), 400),
        (api, "POST", "/ids/batch", Some(r#"{"count": 101}"#), 400),
        (api, "POST", "/ids/batch", Some(r#"{"count": -1}"#), 400),
        (api, "POST", "/ids/batch", Some(r#"{"cnt": 3}"#), 400),
        (api, "POST", "/ids/batch", Some("not json"), 400),
        (api, "POST", "/ids/batch", Some(big.as_str()), 413),
        (api, "POST", "/ids?format=xml", None, 400),
        (api, "GET", "/nowhere", None, 404),
        (api, "GET", "/ids", None, 405),
        (api, "POST", "/health/live", None, 405),
        (admin, "GET", "/ids/abc", None, 400),
        (admin, "GET", "/ids/9223372036854775808", None, 400),
        // Not UTF-8 once percent-decoded.
        (admin, "GET", "/ids/%FF", None, 400),
        (admin, "GET", "/nowhere", None, 404),
        (admin, "POST", "/layout", None, 405),
        (admin, "DELETE", "/health/ready", None, 405),
        // The ops address issues no IDs.
        (admin, "POST", "/ids", None, 404),
    ] {
        let (s, b) = http(to, method, path, body);
        assert_eq!(s, want, "{to} {method} {path} {body:?}: {b}");
        // Every error, on either address, is the same JSON.
        let v = json(&b);
        assert!(!v["error"].as_str().unwrap().is_empty(), "{b}");
        assert_eq!(v["status"].as_u64(), Some(u64::from(want)));
    }
    let (s, b) = http(api, "GET", "/health/live", None);
    assert_eq!((s, json(&b)["live"].as_bool()), (200, Some(true)), "{b}");

    // GET /layout and GET /ids/{id}, checked against the layout HELLO_OK announces.
    let (s, b) = http(admin, "GET", "/layout", None);
    assert_eq!(s, 200);
    let layout = json(&b);
    assert_eq!(layout["timestamp_bits"], 41);
    let c = TestConn::open(node.addr);
    let hello = c.hello.unwrap();
    let (s, b) = http(admin, "GET", &format!("/ids/{id}"), None);
    assert_eq!(s, 200);
    let d = json(&b);
    assert_eq!(
        d["timestamp_ms"].as_u64().unwrap(),
        hello.decompose(id).timestamp
    );
    assert_eq!(d["worker"].as_u64().unwrap(), hello.decompose(id).worker);
    assert_eq!(d["sequence"].as_u64().unwrap(), id & 4095);
    assert!(d["time"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn http_uuids_are_version_7_uuids_of_the_shards_ids_and_decode_back() {
    let node = start(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--max-batch",
        "100",
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let admin = node.admin.unwrap();
    let api = node.http.expect("HTTP ID API address");
    let hello = TestConn::open(node.addr).hello.unwrap();
    let layout = hello.layout().unwrap();
    let uuid_of = |text: &str| {
        let u = uuid::Uuid::parse_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(u.get_version_num(), 7, "{u}");
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122, "{u}");
        assert_eq!(u.hyphenated().to_string(), text, "lower-case, hyphenated");
        u
    };
    let id_before = json(&http(api, "POST", "/ids", None).1)["id"]
        .as_u64()
        .unwrap();
    let (s, b) = http(api, "POST", "/uuids", None);
    assert_eq!(s, 200, "{b}");
    let v = json(&b);
    assert_eq!(v.as_object().unwrap().len(), 1, "{b}");
    let one = uuid_of(v["uuid"].as_str().unwrap());
    let decoded = layout.decode_uuid_v7(*one.as_bytes()).unwrap();
    assert!(decoded.id.0 > id_before, "made from the shard's next ID");
    assert!(hello.workers.contains(decoded.parts.worker));

    let (s, b) = http(api, "POST", "/uuids/batch", Some(r#"{"count": 100}"#));
    assert_eq!(s, 200, "{b}");
    let uuids: Vec<uuid::Uuid> = json(&b)["uuids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| uuid_of(x.as_str().unwrap()))
        .collect();
    assert_eq!(uuids.len(), 100);
    assert!(uuids[0] > one && uuids.windows(2).all(|w| w[0] < w[1]));
    let last = layout.decode_uuid_v7(*uuids[99].as_bytes()).unwrap().id.0;
    let id_after = json(&http(api, "POST", "/ids", None).1)["id"]
        .as_u64()
        .unwrap();
    assert!(id_after > last, "IDs and UUIDs share the shard's order");

    // The ID batch endpoint's count bounds and body errors.
    for (method, path, body, want) in [
        ("POST", "/uuids/batch", Some(r#"{"count": 0}"#), 400),
        ("POST", "/uuids/batch", Some(r#"{"count": 101}"#), 400),
        ("POST", "/uuids/batch", Some(r#"{"cnt": 3}"#), 400),
        ("POST", "/uuids/batch", Some("not json"), 400),
        ("GET", "/uuids", None, 405),
        ("GET", "/uuids/batch", None, 405),
    ] {
        let (s, b) = http(api, method, path, body);
        assert_eq!(s, want, "{method} {path} {body:?}: {b}");
        assert_eq!(json(&b)["status"].as_u64(), Some(u64::from(want)));
    }

    // GET /ids/{uuid} on the admin address: the ID it was made from, decoded.
    for text in [
        one.hyphenated().to_string(),
        one.simple().to_string(),
        one.hyphenated().to_string().to_uppercase(),
        one.urn().to_string(),
    ] {
        let (s, b) = http(admin, "GET", &format!("/ids/{text}"), None);
        assert_eq!(s, 200, "{text}: {b}");
        let d = json(&b);
        assert_eq!(
            d["uuid"].as_str(),
            Some(one.hyphenated().to_string().as_str())
        );
        assert_eq!(d["id"].as_u64(), Some(decoded.id.0));
        assert_eq!(d["worker"].as_u64(), Some(decoded.parts.worker));
        assert_eq!(d["sequence"].as_u64(), Some(decoded.parts.sequence));
        assert_eq!(d["unix_ms"].as_u64(), Some(decoded.parts.unix_ms));
    }
    // Hostile input: each a 400 that says what is wrong.
    let mut v4 = *one.as_bytes();
    v4[6] = 0x40 | (v4[6] & 0x0F);
    let mut variant = *one.as_bytes();
    variant[8] &= 0x3F;
    let mut before_epoch = *one.as_bytes();
    before_epoch[..6].fill(0);
    for (text, says) in [
        (uuid::Uuid::from_bytes(v4).to_string(), "version is 4"),
        (uuid::Uuid::from_bytes(variant).to_string(), "variant"),
        (
            uuid::Uuid::from_bytes(before_epoch).to_string(),
            "before the layout's epoch",
        ),
        (
            "0190zzzz-4c7b-7800-8000-123456789abc".to_string(),
            "not a UUID",
        ),
        (
            "019b71b4-4c7b-7800-8000-123456789abcd".to_string(),
            "not a UUID",
        ),
        (uuid::Uuid::nil().to_string(), "version is 0"),
    ] {
        let (s, b) = http(admin, "GET", &format!("/ids/{text}"), None);
        assert_eq!(s, 400, "{text}: {b}");
        let message = json(&b)["error"].as_str().unwrap().to_string();
        assert!(message.contains(says), "{text}: {message}");
    }
}

/// One request, written as given, on a fresh connection that the server must close: the
/// answer's head lines (without `date`, which changes) and its body.
fn exchange(addr: std::net::SocketAddr, request: &str) -> (Vec<String>, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .unwrap_or_else(|e| panic!("{request:?}: the connection was not closed: {e}"));
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let head = head
        .split("\r\n")
        .filter(|l| !l.starts_with("date:"))
        .map(str::to_string)
        .collect();
    (head, body.to_string())
}

/// What the admin port answers beyond what `docs/openapi.yaml`'s checks pin, kept as it was
/// (axum's): a 405's `Allow` is exactly `GET,HEAD`; `HEAD` has the head of `GET`, its length
/// included, and no body; the ID of `/ids/{id}` is percent-decoded before it is parsed; and a
/// request's body is read before its path is looked at, one too large refused with 413 on any
/// path, closing the connection.
#[test]
fn the_admin_port_answers_head_405_and_encoded_ids_as_before() {
    let node = start(&["--store", "memory", "--shards", "1"]);
    let admin = node.admin.unwrap();
    let get = |method: &str, path: &str| {
        exchange(
            admin,
            &format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        )
    };
    for path in ["/layout", "/ids/123", "/ids/batch"] {
        let (head, body) = get("DELETE", path);
        assert_eq!(head[0], "HTTP/1.1 405 Method Not Allowed", "{path}");
        assert!(
            head.iter().any(|l| l == "allow: GET,HEAD"),
            "{path}: {head:?}"
        );
        assert_eq!(json(&body)["status"], 405);
    }
    for path in ["/ids/123", "/ids/abc", "/health/live", "/nowhere"] {
        let (get_head, get_body) = get("GET", path);
        let (head_head, head_body) = get("HEAD", path);
        assert_eq!(head_head, get_head, "{path}");
        assert!(
            get_head.contains(&format!("content-length: {}", get_body.len())),
            "{path}: {get_head:?}"
        );
        assert_eq!(head_body, "", "{path}");
    }
    let (head, plain) = get("GET", "/ids/123");
    assert_eq!(head[0], "HTTP/1.1 200 OK");
    assert_eq!(get("GET", "/ids/%31%32%33").1, plain);
    assert_eq!(get("GET", "/ids/%2012").1, get("GET", "/ids/12").1);
    // One segment, decoded to text that is no ID.
    let (head, body) = get("GET", "/ids/%2F");
    assert_eq!(head[0], "HTTP/1.1 400 Bad Request", "{body}");
    assert!(
        json(&body)["error"].as_str().unwrap().contains("\"/\""),
        "{body}"
    );
    // No `Connection: close` asked for: the refusal closes it all the same.
    for path in ["/nowhere", "/metrics"] {
        let (head, body) = exchange(
            admin,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{}",
                "x".repeat(5000)
            ),
        );
        assert_eq!(head[0], "HTTP/1.1 413 Payload Too Large", "{path}: {body}");
        assert!(head.iter().any(|l| l == "connection: close"), "{head:?}");
        assert_eq!(json(&body)["status"], 413);
    }
}

/// `idgen bounds --addr`: the layout read from the node; the live IDs of an interval lie in
/// its bounds, and those of the millisecond after it do not.
#[test]
fn bounds_hold_the_live_ids_of_their_interval() {
    let node = start(&["--store", "memory", "--shards", "1"]);
    let mut c = TestConn::open(node.addr);
    let hello = c.hello.unwrap();
    let ids = c.get_ids(9000).unwrap();
    let time = |id: u64| hello.epoch_ms + hello.decompose(id).timestamp;
    let (first, last) = (time(ids[0]), time(ids[8999]));
    let bounds = |from: u64, to: u64| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
            .args(["bounds", "--json", "--addr", &node.addr.to_string()])
            .args(["--from", &from.to_string(), "--to", &to.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json(std::str::from_utf8(&out.stdout).unwrap());
        let (lo, hi) = (v["lo"].as_u64().unwrap(), v["hi"].as_u64().unwrap());
        assert_eq!(v["first"].as_u64(), Some(lo));
        assert_eq!(v["last"].as_u64(), Some(hi - 1));
        assert_eq!(v["sql"], format!("WHERE id >= {lo} AND id < {hi}"));
        (lo, hi)
    };
    let (lo, hi) = bounds(first, last + 1);
    assert!(ids.iter().all(|id| (lo..hi).contains(id)), "{lo}..{hi}");
    let (lo, hi) = bounds(last + 1, last + 2);
    assert!(ids.iter().all(|id| !(lo..hi).contains(id)), "{lo}..{hi}");
    // Only the IDs of the first millisecond, and all of them.
    let (lo, hi) = bounds(first, first + 1);
    for id in &ids {
        assert_eq!((lo..hi).contains(id), time(*id) == first, "{id}");
    }
}

#[test]
fn decode_agrees_with_the_layout_on_live_ids() {
    let node = start(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--workers-per-shard",
        "3",
    ]);
    let mut c = TestConn::open(node.addr);
    let hello = c.hello.unwrap();
    let ids = c.get_ids(9000).unwrap();
    let picks = [ids[0], ids[4095], ids[4096], ids[8999]];
    let args: Vec<String> = picks.iter().map(u64::to_string).collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["decode", "--json", "--addr", &node.addr.to_string()])
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    assert_eq!(lines.len(), 4);
    for (id, d) in picks.iter().zip(&lines) {
        assert_eq!(
            d["timestamp_ms"].as_u64().unwrap(),
            hello.decompose(*id).timestamp
        );
        assert_eq!(d["worker"].as_u64().unwrap(), hello.decompose(*id).worker);
        assert_eq!(
            d["unix_ms"].as_u64().unwrap(),
            hello.epoch_ms + hello.decompose(*id).timestamp
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(d["unix_ms"].as_u64().unwrap().abs_diff(now) < 60_000);
    }
    // The text form, from flags rather than a node.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["decode", &picks[1].to_string()])
        .output()
        .unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(
        line.contains(&format!("worker={}", hello.decompose(picks[1]).worker)),
        "{line}"
    );
    assert!(line.contains("time=20"), "{line}");
    // Garbage is refused clearly.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["decode", "12x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("12x"));
}

#[test]
#[cfg(feature = "etcd")]
fn readiness_turns_false_before_a_node_without_its_store_stops_serving() {
    let mut etcd = EtcdCluster::start(1);
    let url = etcd.url("ready");
    let node = start(&["--store", &url, "--shards", "1", "--lease-ttl", "3s"]);
    let admin = node.admin.unwrap();
    assert_eq!(http(admin, "GET", "/health/ready", None).0, 200);
    let mut c = TestConn::open(node.addr);
    assert!(c.get_ids(1).is_ok());

    etcd.stop_all();
    let stopped = Instant::now();
    // Poll both: readiness must turn false while IDs are still being served.
    let mut not_ready_at = None;
    let mut failing_at = None;
    let mut served_while_not_ready = false;
    while stopped.elapsed() < Duration::from_secs(8) && failing_at.is_none() {
        let ready = http(admin, "GET", "/health/ready", None).0 == 200;
        if !ready && not_ready_at.is_none() {
            not_ready_at = Some(stopped.elapsed());
        }
        match c.get_ids(1) {
            Ok(_) if !ready => served_while_not_ready = true,
            Ok(_) => {}
            Err((status, _)) => {
                assert_eq!(status, Status::UNAVAILABLE_LEASE);
                failing_at = Some(stopped.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let not_ready_at = not_ready_at.expect("never turned not ready");
    let failing_at = failing_at.expect("never stopped serving without its store");
    assert!(
        not_ready_at < failing_at,
        "{not_ready_at:?} vs {failing_at:?}"
    );
    assert!(served_while_not_ready);
    assert!(
        failing_at <= Duration::from_millis(3_000 + 1_500),
        "{failing_at:?}"
    );
    let (s, b) = http(admin, "GET", "/health/ready", None);
    assert_eq!(s, 503);
    assert!(b.contains("lease"), "{b}");
    assert_eq!(http(admin, "GET", "/health/live", None).0, 200);

    etcd.start_all();
    let back = Instant::now();
    while http(admin, "GET", "/health/ready", None).0 != 200 {
        assert!(
            back.elapsed() < Duration::from_secs(15),
            "not ready again after etcd returned"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(c.get_ids(10).is_ok());
}

/// A node whose wall clock follows the offset written to the returned file (libfaketime,
/// read on every call; the monotonic clock stays real). Keep the directory alive.
fn faketime_node(args: &[&str]) -> (NodeProc, std::path::PathBuf, tempfile::TempDir) {
    let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    assert!(
        std::path::Path::new(lib).exists(),
        "libfaketime is missing: install Debian's `faketime` (scripts/test does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let offset = dir.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let offset_str = offset.to_str().unwrap().to_string();
    let node = NodeProc::try_start(
        args,
        &[
            ("LD_PRELOAD", lib),
            ("FAKETIME_TIMESTAMP_FILE", &offset_str),
            ("FAKETIME_NO_CACHE", "1"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    )
    .unwrap();
    (node, offset, dir)
}

#[test]
fn a_clock_stepped_back_makes_the_real_process_unready_then_it_recovers() {
    let mut args: Vec<&str> = ADMIN.to_vec();
    args.extend_from_slice(&["--store", "memory", "--shards", "1"]);
    let (node, offset, _dir) = faketime_node(&args);
    let admin = node.admin.unwrap();
    let mut c = TestConn::open(node.addr);
    let hello = c.hello.unwrap();
    let before = c.get_ids(100).unwrap();
    assert_eq!(http(admin, "GET", "/health/ready", None).0, 200);

    // Ten seconds back: beyond the 10 ms the generator waits out.
    std::fs::write(&offset, "-10s\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (status, message) = c.get_ids(1).unwrap_err();
    assert_eq!(status, Status::UNAVAILABLE_CLOCK);
    assert!(message.contains("clock moved back"), "{message}");
    let (s, b) = http(admin, "GET", "/health/ready", None);
    assert_eq!(s, 503, "{b}");
    assert!(b.contains("clock"), "{b}");
    let (_, text) = http(admin, "GET", "/metrics", None);
    let m = parse_prometheus(&text);
    assert!(sum(&m, "idgen_clock_rollback_events_total") >= 1.0);
    assert!(sum(&m, "idgen_clock_rollback_largest_seconds") >= 9.0);

    // Back to true time: it serves again by itself, above everything issued before.
    std::fs::write(&offset, "+0\n").unwrap();
    let t = Instant::now();
    let after = loop {
        match c.get_ids(100) {
            Ok(ids) => break ids,
            Err(_) if t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("did not recover: {e:?}"),
        }
    };
    assert!(after[0] > *before.last().unwrap());
    assert!(hello.decompose(after[0]).timestamp >= hello.decompose(before[99]).timestamp);
    let t = Instant::now();
    while http(admin, "GET", "/health/ready", None).0 != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "not ready after recovery"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The audit events come from the control thread's observer (it polls every 100 ms).
    let t = Instant::now();
    while !(node.log().contains("clock_rollback_detected")
        && node.log().contains("clock_rollback_recovered"))
    {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "no audit events:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[cfg(feature = "etcd")]
fn inspect_shows_the_leases_of_a_live_cluster() {
    let etcd = EtcdCluster::start(1);
    let url = etcd.url("inspect");
    let a = start(&["--store", &url, "--shards", "2", "--node-id", "alpha"]);
    let b = start(&["--store", &url, "--shards", "1", "--node-id", "beta"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["inspect", "--store", &url, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&String::from_utf8(out.stdout).unwrap());
    let leases = v["leases"].as_array().unwrap();
    let nodes: Vec<(&str, u64)> = leases
        .iter()
        .map(|l| (l["node_id"].as_str().unwrap(), l["count"].as_u64().unwrap()))
        .collect();
    assert!(
        nodes.contains(&("alpha", 2)) && nodes.contains(&("beta", 1)),
        "{nodes:?}"
    );
    assert!(leases.iter().all(|l| l["state"] == "held"));
    assert_eq!(v["regions"][0]["free"], 1024 - 3);
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["inspect", "--store", &url])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("alpha") && text.contains("1021 of 1024"),
        "{text}"
    );
    drop((a, b));
    // A namespace nobody started is a clear error.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["inspect", "--store", &url, "--namespace", "nobody"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cluster"));
}

/// A wall clock stepped forward by minutes and left there (NTP putting right a clock that was
/// behind, an operator setting the time) is believed within seconds, whatever the TTL: a lone
/// node (no peers to confirm the step) refuses while the step has held less than the keeper's
/// hold (5 s), then serves IDs at the new time. Driven over the HTTP ID API, default TTL (10 s):
/// the former bound (one TTL gained per renewal) refused for a third of the step, 200 s here.
#[test]
fn a_clock_stepped_forward_and_left_there_is_believed_within_seconds() {
    let (node, offset, _dir) = faketime_node(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let api = node.http.expect("HTTP ID API address");
    let mut c = TestConn::open(node.addr);
    let hello = c.hello.unwrap();
    let before = c.get_ids(1).unwrap()[0];
    assert_eq!(http(api, "POST", "/ids", None).0, 200);

    // Ten minutes ahead, and left there.
    std::fs::write(&offset, "+600\n").unwrap();
    let stepped = Instant::now();
    // The shard's cached clock reading holds until its millisecond ends (it never answers a
    // time the clock did not show), so a request right after the step may still be served at
    // the old time: the step shows within a few milliseconds.
    loop {
        let (s, b) = http(api, "POST", "/ids", None);
        if s == 503 {
            break;
        }
        assert_eq!(s, 200, "{b}");
        assert!(
            stepped.elapsed() < Duration::from_secs(2),
            "the step was never refused: the test proves nothing"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut refused = 1;
    let served = loop {
        let (s, b) = http(api, "POST", "/ids", None);
        if s == 200 {
            break stepped.elapsed();
        }
        assert_eq!(s, 503, "{b}");
        refused += 1;
        assert!(
            stepped.elapsed() < Duration::from_secs(30),
            "still refusing 30 s after a +10 min step ({refused} refusals):\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("served again {served:?} after a +10 min step ({refused} refusals)");
    // Seen within the keeper's look between renewals (250 ms), believed after the 5 s hold,
    // renewed within the keeper's retry period (1 s).
    assert!(
        served < Duration::from_secs(10),
        "served again only {served:?} after a +10 min step:\n{}",
        node.log()
    );
    // The IDs follow the stepped clock.
    let after = c.get_ids(1).unwrap()[0];
    let gap = hello.decompose(after).timestamp - hello.decompose(before).timestamp;
    assert!(gap >= 600_000, "IDs moved only {gap} ms ahead");
    // The event says how long the node refuses, and how the step ended.
    let log = node.log();
    let jumped = log
        .lines()
        .find(|l| l.contains("clock_jumped_ahead"))
        .unwrap_or_else(|| panic!("no clock_jumped_ahead event:\n{log}"));
    assert!(
        jumped.contains("refuse_for_ms") && jumped.contains("IDs are refused for about"),
        "{jumped}"
    );
    assert!(log.contains("clock_step_believed"), "{log}");
    assert!(
        !log.contains("lease_renewed_late"),
        "the renewal that believed the step is not late: {log}"
    );
    eprintln!("{jumped}");
    std::fs::write(&offset, "+0\n").unwrap();
}

/// Two nodes on one etcd, each under its own libfaketime clock. Both stepped +10 min together
/// (a fleet whose clocks were put right) are believed as soon as each has measured the other's
/// clock since the step and found it agree: "the peers' clocks confirm it", not the hold. Then
/// one stepped alone is the outlier: its peer contradicts the step, so it refuses past the hold
/// for as long as its clock is off, and serves again as soon as its clock comes back (its lease
/// end did not follow the step), while the other serves throughout.
#[test]
#[cfg(feature = "etcd")]
fn a_step_the_peers_confirm_is_believed_at_once_and_one_they_contradict_is_refused() {
    let etcd = EtcdCluster::start(1);
    let url = etcd.url("fleet-step");
    let node = |id: &str| {
        let mut args: Vec<&str> = ADMIN.to_vec();
        args.extend_from_slice(&["--store", &url, "--shards", "1", "--node-id", id]);
        args.extend_from_slice(&["--http-listen", "127.0.0.1:0"]);
        faketime_node(&args)
    };
    let (a, a_offset, _a_dir) = node("alpha");
    let (b, b_offset, _b_dir) = node("beta");
    let (a_api, b_api) = (a.http.unwrap(), b.http.unwrap());
    // Each has measured the other's clock.
    let t = Instant::now();
    for n in [&a, &b] {
        while sum(
            &parse_prometheus(&http(n.admin.unwrap(), "GET", "/metrics", None).1),
            "idgen_clock_peers",
        ) < 1.0
        {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "the nodes never saw each other"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let serves_again = |api, what: &str| {
        let t = Instant::now();
        let mut refused = 0;
        while http(api, "POST", "/ids", None).0 != 200 {
            refused += 1;
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{what}: still refused after 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        (t.elapsed(), refused)
    };

    // The fleet steps together.
    std::fs::write(&a_offset, "+600\n").unwrap();
    std::fs::write(&b_offset, "+600\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for (n, api) in [(&a, a_api), (&b, b_api)] {
        let (took, refused) = serves_again(api, "fleet step");
        eprintln!("fleet +10 min: served again after {took:?} ({refused} refusals)");
        let t = Instant::now();
        while !n.log().contains("the peers' clocks confirm it") {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the step was not believed on the peers' word:\n{}",
                n.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // Alpha alone steps another 10 min: beta contradicts it.
    std::fs::write(&a_offset, "+1200\n").unwrap();
    let stepped = Instant::now();
    let t = Instant::now();
    while !a.log().contains("clock_step_contradicted") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no contradiction:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Still refused past the hold, while beta serves.
    while stepped.elapsed() < Duration::from_secs(8) {
        let (s, body) = http(a_api, "POST", "/ids", None);
        assert_eq!(s, 503, "the outlier served: {body}");
        assert_eq!(http(b_api, "POST", "/ids", None).0, 200);
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(!a.log().contains("it held, with no peers"), "{}", a.log());
    // Its clock comes back: it serves again at once.
    std::fs::write(&a_offset, "+600\n").unwrap();
    let (took, _) = serves_again(a_api, "the outlier's clock came back");
    eprintln!("outlier back: served again after {took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}:\n{}", a.log());
}

/// A clock step back within `--max-rollback-wait` is waited out by the request that needs IDs
/// only: the shard serves its other connections meanwhile (the generator says when to retry;
/// it never sleeps on the shard's thread), and the waiting request is answered once the clock
/// has caught up, above everything issued before.
#[test]
fn a_clock_wait_delays_only_the_requests_that_need_ids() {
    let (node, offset, _dir) = faketime_node(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--max-rollback-wait",
        "1s",
        "--max-drift",
        "1h",
    ]);
    // One shard: both connections are its.
    let mut waiting = TestConn::open(node.addr);
    let mut other = TestConn::open(node.addr);
    let before = waiting.get_ids(10).unwrap();
    // One second back: within the bound, so the next request for IDs waits about that long.
    std::fs::write(&offset, "-1s\n").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let asked = Instant::now();
    waiting.send(&idgen_protocol::Request::GetIds { count: 5 });
    std::thread::sleep(Duration::from_millis(100));
    let mut pings = Vec::new();
    for token in 0..5u64 {
        let t = Instant::now();
        other.send(&idgen_protocol::Request::Ping { token });
        match other.recv() {
            Some(idgen_protocol::Response::Pong(got)) => assert_eq!(got, token),
            other => panic!("unexpected answer {other:?}"),
        }
        pings.push(t.elapsed());
    }
    let answer = waiting.recv();
    let waited = asked.elapsed();
    let Some(idgen_protocol::Response::Ids(after)) = answer else {
        panic!("the waiting request got {answer:?}")
    };
    assert!(
        waited >= Duration::from_millis(500),
        "the clock step was not waited out ({waited:?}): the test proves nothing"
    );
    assert!(
        pings.iter().all(|p| *p < Duration::from_millis(300)),
        "other connections of the shard waited with it: {pings:?} (the request waited {waited:?})"
    );
    assert_eq!(after.len(), 5);
    assert!(after[0] > *before.last().unwrap());
    std::fs::write(&offset, "+0\n").unwrap();
}

/// `idgen health`: the exit status of a container health check, from the admin port.
#[test]
fn the_health_command_reports_live_and_ready_as_its_exit_status() {
    let mut node = start(&["--store", "memory", "--shards", "1", "--drain-delay", "3s"]);
    let admin = node.admin.unwrap().to_string();
    let health = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
            .args(["health", "--addr", &admin])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(health(&[]).0, Some(0), "{:?}", health(&[]));
    assert_eq!(
        health(&["--ready"]).0,
        Some(0),
        "{:?}",
        health(&["--ready"])
    );
    // Draining: still live, no longer ready, and the reason is printed.
    node.signal("TERM");
    let t = Instant::now();
    let (code, stderr) = loop {
        let got = health(&["--ready"]);
        if got.0 != Some(0) || t.elapsed() > Duration::from_secs(2) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("draining"), "{stderr}");
    assert_eq!(health(&[]).0, Some(0), "a draining node is still live");
    assert!(node.wait(Duration::from_secs(30)).success());
    // Nothing answers: 1, naming the address.
    let (code, stderr) = health(&[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains(&admin), "{stderr}");
}

#[test]
fn http_api_answers_masked_ids_with_the_nodes_keyring() {
    use idgen_id::mask::Keyring;
    let dir = tempfile::tempdir().unwrap();
    let ring_text = "2:ffeeddccbbaa99887766554433221100\n1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
    let keys = dir.path().join("mask-keys");
    std::fs::write(&keys, ring_text).unwrap();
    let node = start(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--max-batch",
        "100",
        "--http-listen",
        "127.0.0.1:0",
        "--mask-keys-file",
        keys.to_str().unwrap(),
    ]);
    let api = node.http.expect("HTTP ID API address");
    let ring = Keyring::parse(ring_text).unwrap();
    let plain = |path: &str| {
        let (s, b) = http(api, "POST", path, None);
        assert_eq!(s, 200, "{b}");
        json(&b)["id"].as_u64().unwrap()
    };

    let before = plain("/ids");
    let (s, b) = http(api, "POST", "/ids?format=masked", None);
    assert_eq!(s, 200, "{b}");
    let v = json(&b);
    let masked = v["id"].as_u64().unwrap();
    assert_eq!(v["id_str"].as_str().unwrap(), masked.to_string());
    let text = v["masked"].as_str().unwrap();
    assert!(text.len() == 12 && text.starts_with('2'), "{text}");
    let id = ring.unmask(masked, 63).unwrap();
    assert_eq!(ring.unmask_str(text, 63), Ok(id));
    assert_ne!(masked, id);
    let after = plain("/ids");
    assert!(before < id && id < after, "{before} < {id} < {after}");

    let (s, b) = http(
        api,
        "POST",
        "/ids/batch?format=masked",
        Some(r#"{"count": 5}"#),
    );
    assert_eq!(s, 200, "{b}");
    let v = json(&b);
    let masked: Vec<u64> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let strs: Vec<&str> = v["ids_str"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let texts: Vec<&str> = v["masked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!((masked.len(), strs.len(), texts.len()), (5, 5, 5));
    let ids: Vec<u64> = texts
        .iter()
        .map(|t| ring.unmask_str(t, 63).unwrap())
        .collect();
    assert!(
        ids[0] > after && ids.windows(2).all(|w| w[0] < w[1]),
        "{ids:?}"
    );
    for (i, m) in masked.iter().enumerate() {
        assert_eq!(strs[i], m.to_string());
        assert_eq!(ring.unmask(*m, 63), Ok(ids[i]));
    }

    // The admin port decodes a masked string with the node's keyring.
    let admin = node.admin.unwrap();
    let (s, b) = http(admin, "GET", &format!("/ids/{}", texts[0]), None);
    assert_eq!(s, 200, "{b}");
    let d = json(&b);
    assert_eq!(d["id"].as_u64(), Some(ids[0]));
    assert_eq!(d["masked"].as_str(), Some(texts[0]));
    let (s, b) = http(admin, "GET", &format!("/ids/{id}"), None);
    assert_eq!((s, json(&b).get("masked")), (200, None), "{b}");
    for (bad, says) in [
        ("Zabcdefghijk", "unknown key id Z"),
        ("2zzzzzzzzzzz", "out of range"),
    ] {
        let (s, b) = http(admin, "GET", &format!("/ids/{bad}"), None);
        assert_eq!(s, 400, "{b}");
        assert!(json(&b)["error"].as_str().unwrap().contains(says), "{b}");
    }

    // Sequence values are not masked; a bad format is refused as before.
    for path in ["/seq/orders?format=masked", "/ids?format=Masked"] {
        let (s, b) = http(api, "POST", path, None);
        assert_eq!(s, 400, "{path}: {b}");
        assert!(
            json(&b)["error"].as_str().unwrap().contains("format"),
            "{b}"
        );
    }
}

#[test]
fn http_api_without_keys_refuses_masked_answers() {
    let node = start(&[
        "--store",
        "memory",
        "--shards",
        "1",
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let api = node.http.expect("HTTP ID API address");
    for (path, body) in [
        ("/ids?format=masked", None),
        ("/ids/batch?format=masked", Some(r#"{"count": 2}"#)),
    ] {
        let (s, b) = http(api, "POST", path, body);
        assert_eq!(s, 400, "{path}: {b}");
        let e = json(&b)["error"].as_str().unwrap().to_string();
        assert!(e.contains("masking is not configured"), "{e}");
    }
    let (s, b) = http(node.admin.unwrap(), "GET", "/ids/1abcdefghijk", None);
    assert_eq!(s, 400, "{b}");
    assert!(
        json(&b)["error"]
            .as_str()
            .unwrap()
            .contains("masking is not configured"),
        "{b}"
    );
}
