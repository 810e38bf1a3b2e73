//! Named sequences as deployed: three real `idgen serve` nodes on one real etcd, sequences
//! created with `idgen seq create`, many HTTP and ID-protocol clients at once across the
//! nodes (the protocol's pipelining several calls deep), one node killed with SIGKILL midway. The history each client records (start, end, values, on this
//! process's clock) is checked by `idgen_core::sequence::check`: no value twice, the strict
//! mode's real-time order, the dense mode's gap bound. And what the HTTP API answers to
//! unknown and bad names, bad counts and a used-up sequence.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::node::{idgen_binary, try_http, NodeProc};
use idgen_core::sequence::check::{self, Call};
use idgen_protocol::client::Handshake;
use idgen_protocol::{Request, Response, SeqMode, Status};
use idgen_testkit::conn::TestConn;
use serde_json::Value;

const CLIENTS_PER_NODE: usize = 3;
const CALLS_PER_CLIENT: usize = 120;
const MAX_BLOCK: u64 = 16;

fn seq(url: &str, args: &[&str]) {
    let mut all = args.to_vec();
    all.extend(["--store", url]);
    common::node::seq(&all);
}

fn start(url: &str, node_id: &str) -> NodeProc {
    NodeProc::start(&[
        "--store",
        url,
        "--node-id",
        node_id,
        "--lease-ttl",
        "2s",
        "--shards",
        "2",
        "--http-listen",
        "127.0.0.1:0",
    ])
}

/// How many GET_VALUES a protocol client keeps in flight.
const DEPTH: usize = 4;

/// One protocol client's calls: rounds of [`DEPTH`] pipelined GET_VALUES (each timed from
/// the round's send to its own answer), at `addr` until a call fails, then at `fallback` on a
/// new connection (as a client tries another node).
fn protocol_client(
    addr: std::net::SocketAddr,
    fallback: std::net::SocketAddr,
    name: &str,
    c: usize,
    origin: Instant,
) -> (Vec<Call>, Vec<String>) {
    let (mut calls, mut failures) = (Vec::new(), Vec::new());
    let mut target = addr;
    let mut conn: Option<TestConn> = None;
    let mut k = 0;
    while k < CALLS_PER_CLIENT {
        let round = DEPTH.min(CALLS_PER_CLIENT - k);
        let counts: Vec<u32> = (0..round).map(|i| 1 + ((c + k + i) % 3) as u32).collect();
        let start = origin.elapsed().as_micros() as u64;
        let sent = match conn.as_mut() {
            Some(open) => counts
                .iter()
                .try_for_each(|&n| open.try_send(&get_values(name, n))),
            None => match TestConn::try_open(
                target,
                Handshake::offering(1, 3),
                idgen_testkit::conn::Timeouts::default(),
            ) {
                Ok(mut open) => {
                    let sent = counts
                        .iter()
                        .try_for_each(|&n| open.try_send(&get_values(name, n)));
                    conn = Some(open);
                    sent
                }
                Err(e) => Err(e),
            },
        };
        let mut broken = sent.err();
        for &n in &counts {
            let got = match (&broken, conn.as_mut()) {
                (None, Some(open)) => open.try_recv(),
                (Some(e), _) => Err(e.clone()),
                (None, None) => Err("no connection".into()),
            };
            let end = origin.elapsed().as_micros() as u64;
            let values = match got {
                Ok(Response::Values { values, .. }) => {
                    assert_eq!(values.len(), n as usize);
                    values
                }
                Ok(Response::Error { status, message }) if status.retry_elsewhere() => {
                    failures.push(format!("{target}: {status} {message}"));
                    broken.get_or_insert(format!("{status}"));
                    Vec::new()
                }
                Ok(other) => panic!("GET_VALUES {name}: {other:?}"),
                Err(e) => {
                    failures.push(format!("{target}: {e}"));
                    broken.get_or_insert(e);
                    Vec::new()
                }
            };
            calls.push(Call { start, end, values });
        }
        if broken.is_some() {
            conn = None;
            target = fallback;
        }
        k += round;
    }
    (calls, failures)
}

/// Calls `POST /seq/{name}` (or `/batch` for 2 or 3 values) from every client thread, each
/// on its own node, until each made its calls; node 2 is killed 800 ms in, and a client whose
/// call fails goes on at node 0 (as a client tries another node). Returns every call, failed
/// ones with no values, and why each failed.
fn run(nodes: &mut [NodeProc], name: &str) -> (Vec<Call>, Vec<String>) {
    let origin = Instant::now();
    let addrs: Vec<_> = nodes.iter().map(|n| n.http.expect("HTTP ID API")).collect();
    let mut threads = Vec::new();
    let protocol: Vec<_> = nodes.iter().map(|n| n.addr).collect();
    for (i, &addr) in addrs.iter().enumerate() {
        for c in 0..CLIENTS_PER_NODE {
            let (name, fallback) = (name.to_string(), addrs[0]);
            if c % 2 == 1 {
                // Every other client speaks the ID protocol, pipelining.
                let (paddr, pfallback) = (protocol[i], protocol[0]);
                threads.push(std::thread::spawn(move || {
                    protocol_client(paddr, pfallback, &name, c, origin)
                }));
                continue;
            }
            threads.push(std::thread::spawn(move || {
                let mut calls = Vec::new();
                let mut failures = Vec::new();
                let mut target = addr;
                for k in 0..CALLS_PER_CLIENT {
                    let n = 1 + (c + k) % 3;
                    let (path, body) = if n == 1 {
                        (format!("/seq/{name}"), None)
                    } else {
                        (
                            format!("/seq/{name}/batch"),
                            Some(format!("{{\"count\": {n}}}")),
                        )
                    };
                    let start = origin.elapsed().as_micros() as u64;
                    let got = try_http(
                        target,
                        "POST",
                        &path,
                        body.as_deref(),
                        Duration::from_secs(10),
                    );
                    let end = origin.elapsed().as_micros() as u64;
                    let values = match got {
                        Ok((200, body)) => {
                            let v: Value = serde_json::from_str(&body).unwrap();
                            let values: Vec<u64> = if n == 1 {
                                vec![v["value"].as_u64().unwrap()]
                            } else {
                                v["values"]
                                    .as_array()
                                    .unwrap()
                                    .iter()
                                    .map(|x| x.as_u64().unwrap())
                                    .collect()
                            };
                            assert_eq!(values.len(), n, "{body}");
                            let strings = if n == 1 { "value_str" } else { "values_str" };
                            assert!(v.get(strings).is_some(), "{body}");
                            values
                        }
                        // Refused (503) or cut off by the kill: a failed call, no values; the
                        // client goes on at node 0.
                        Ok((503, body)) => {
                            failures.push(format!("{target}: 503 {body}"));
                            target = fallback;
                            Vec::new()
                        }
                        Err(e) => {
                            failures.push(format!("{target}: {e}"));
                            target = fallback;
                            Vec::new()
                        }
                        Ok((status, body)) => panic!("{path}: {status} {body}"),
                    };
                    calls.push(Call { start, end, values });
                }
                (calls, failures)
            }));
        }
    }
    // Kill node 2 800 ms in (SIGKILL: no release, blocks lost), unless the clients are done.
    while origin.elapsed() < Duration::from_millis(800) && !threads.iter().all(|t| t.is_finished())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    nodes[2].kill();
    let (mut all, mut failures) = (Vec::new(), Vec::new());
    for t in threads {
        let (calls, failed) = t.join().expect("a client thread");
        all.extend(calls);
        failures.extend(failed);
    }
    (all, failures)
}

#[test]
fn strict_and_dense_sequences_across_three_nodes_on_etcd_hold_their_promises() {
    let cluster = EtcdCluster::start(1);
    let url = cluster.url("idgen-seq");
    let max_block = MAX_BLOCK.to_string();
    seq(
        &url,
        &[
            "create",
            "orders",
            "--mode",
            "dense",
            "--max-block",
            &max_block,
        ],
    );
    seq(&url, &["create", "ledger", "--mode", "strict"]);
    for (name, strict) in [("orders", false), ("ledger", true)] {
        let mut nodes = vec![start(&url, "a"), start(&url, "b"), start(&url, "c")];
        let (calls, failures) = run(&mut nodes, name);
        // Only the kill fails calls: a client of node 2 fails once (an HTTP client its call in
        // flight or its first after the kill, a protocol client the calls of that round) and
        // moves on to node 0, whose calls do not fail.
        let protocol_clients = CLIENTS_PER_NODE / 2;
        let allowed = CLIENTS_PER_NODE - protocol_clients + protocol_clients * DEPTH;
        assert!(
            failures.len() <= allowed,
            "{name}: {} calls failed, at most the killed node's clients' {allowed}: {failures:?}",
            failures.len()
        );
        let dup = check::duplicates(&calls);
        assert!(
            dup.is_empty(),
            "{name}: values twice: {:?}",
            &dup[..dup.len().min(5)]
        );
        if strict {
            let v = check::real_time_order(&calls);
            assert!(
                v.is_empty(),
                "{name}: out of real-time order: {:?}",
                &v[..v.len().min(5)]
            );
        }
        // Per client, values increase: each client's calls are sequential. A dense client of
        // the killed node that moved on to node 0 gets node 0's blocks, which may lie below
        // what node 2 held: its calls are left out.
        for (j, client) in calls.chunks(CALLS_PER_CLIENT).enumerate() {
            if !strict && j / CLIENTS_PER_NODE == 2 {
                continue;
            }
            let flat: Vec<u64> = client
                .iter()
                .flat_map(|c| c.values.iter().copied())
                .collect();
            assert!(
                flat.windows(2).all(|w| w[0] < w[1]),
                "{name}, client {j}: {flat:?}"
            );
        }
        if !strict {
            // Gaps: what each node held when the run ended or it was killed (two blocks each),
            // and calls cut off by the kill.
            let cut: u64 = calls.iter().filter(|c| c.values.is_empty()).count() as u64 * 3;
            let allowed = 3 * 2 * MAX_BLOCK + cut;
            assert_eq!(check::gaps_beyond(&calls, 1, 1, allowed), None, "{name}");
        }
        for n in &mut nodes {
            n.kill();
        }
    }
}

#[test]
fn the_http_api_refuses_unknown_and_bad_names_bad_counts_and_a_used_up_sequence() {
    let cluster = EtcdCluster::start(1);
    let url = cluster.url("idgen-seq-bad");
    seq(&url, &["create", "tiny", "--max", "2"]);
    let node = start(&url, "a");
    let api = node.http.unwrap();
    let call = |path: &str, body: Option<&str>| {
        try_http(api, "POST", path, body, Duration::from_secs(10)).unwrap()
    };
    for (path, body, status, says) in [
        ("/seq/nope", None, 404, "no sequence named nope"),
        ("/seq/Bad", None, 400, "bad sequence name"),
        (
            "/seq/tiny/batch",
            Some(r#"{"count": 0}"#),
            400,
            "count must be",
        ),
        (
            "/seq/tiny/batch",
            Some(r#"{"count": 100000}"#),
            400,
            "count must be",
        ),
        (
            "/seq/tiny/batch",
            Some("garbage"),
            400,
            "expected a JSON body",
        ),
        ("/seq/tiny/other", None, 404, "no such endpoint"),
    ] {
        let (got, text) = call(path, body);
        assert_eq!(got, status, "{path}: {text}");
        assert!(text.contains(says), "{path}: {text}");
    }
    assert_eq!(
        call("/seq/tiny", None),
        (200, r#"{"value":1,"value_str":"1"}"#.into())
    );
    assert_eq!(
        call("/seq/tiny", None),
        (200, r#"{"value":2,"value_str":"2"}"#.into())
    );
    let (status, text) = call("/seq/tiny", None);
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("maximum 2"), "{text}");
    let (status, _) = try_http(api, "GET", "/seq/tiny", None, Duration::from_secs(10)).unwrap();
    assert_eq!(status, 405);
    // `idgen seq next` asks the same API.
    seq(&url, &["create", "cli", "--start", "7"]);
    let next = |args: &[&str]| {
        Command::new(idgen_binary())
            .args(["seq", "next"])
            .args(args)
            .args(["--addr", &api.to_string()])
            .output()
            .unwrap()
    };
    let out = next(&["cli", "-n", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "7\n8\n9\n");
    let out = next(&["cli"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "10\n");
    for (args, code, says) in [
        (&["nope"][..], 1, "404: no sequence named nope"),
        (&["tiny"][..], 1, "409"),
        (&["Bad"][..], 2, "bad sequence name"),
        (&["cli", "-n", "0"][..], 2, "0"),
    ] {
        let out = next(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// A node's counter `family{sequence="name"}` from its admin `/metrics`, if it has one.
fn find_sequence_metric(node: &NodeProc, family: &str, name: &str) -> Option<f64> {
    let admin = node.admin.expect("admin address");
    let (status, text) = try_http(admin, "GET", "/metrics", None, Duration::from_secs(10)).unwrap();
    assert_eq!(status, 200);
    let prefix = format!("{family}{{sequence=\"{name}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

/// A node's counter `family{sequence="name"}` from its admin `/metrics`.
fn sequence_metric(node: &NodeProc, family: &str, name: &str) -> f64 {
    find_sequence_metric(node, family, name)
        .unwrap_or_else(|| panic!("no {family}{{sequence=\"{name}\"}} in /metrics"))
}

fn values(r: Response) -> (SeqMode, Vec<u64>) {
    match r {
        Response::Values { mode, values } => (mode, values),
        other => panic!("expected VALUES, got {other:?}"),
    }
}

fn refused(r: Option<Response>) -> Status {
    match r {
        Some(Response::Error { status, .. }) => status,
        other => panic!("expected ERROR, got {other:?}"),
    }
}

fn get_values(name: &str, count: u32) -> Request {
    Request::GetValues {
        count,
        name: name.parse().unwrap(),
    }
}

#[test]
fn the_protocol_hands_out_values_in_order_and_refuses_what_the_spec_refuses() {
    let cluster = EtcdCluster::start(1);
    let url = cluster.url("idgen-seq-protocol");
    seq(&url, &["create", "tiny", "--max", "3"]);
    seq(
        &url,
        &["create", "orders", "--start", "100", "--increment", "10"],
    );
    seq(&url, &["create", "ledger", "--mode", "strict"]);
    let node = NodeProc::start(&[
        "--store",
        &url,
        "--node-id",
        "a",
        "--shards",
        "2",
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    let mut c = TestConn::open_version(node.addr, 3);
    assert_eq!(c.hello().version, 3);

    // Answers come in request order, whatever they are.
    c.send(&get_values("orders", 2));
    c.send(&Request::GetIds { count: 1 });
    c.send(&get_values("orders", 1));
    c.send(&Request::Ping { token: 5 });
    c.send(&get_values("tiny", 2));
    c.send(&get_values("tiny", 1));
    c.send(&get_values("tiny", 1));
    assert_eq!(values(c.recv().unwrap()), (SeqMode::Dense, vec![100, 110]));
    assert!(matches!(c.recv(), Some(Response::Ids(ids)) if ids.len() == 1));
    assert_eq!(values(c.recv().unwrap()), (SeqMode::Dense, vec![120]));
    assert_eq!(c.recv(), Some(Response::Pong(5)));
    assert_eq!(values(c.recv().unwrap()).1, [1, 2]);
    assert_eq!(values(c.recv().unwrap()).1, [3]);
    // Used up: final, and the connection stays usable.
    assert_eq!(refused(c.recv()), Status::SEQUENCE_USED_UP);

    c.send(&get_values("nope", 1));
    assert_eq!(refused(c.recv()), Status::UNKNOWN_SEQUENCE);
    c.send(&get_values("orders", 0));
    assert_eq!(refused(c.recv()), Status::INVALID_COUNT);
    c.send(&get_values("orders", 70_000));
    assert_eq!(refused(c.recv()), Status::BATCH_TOO_LARGE);
    let mut bad = vec![0, 0, 0, 8, 0x05, 0, 0, 0, 1];
    bad.extend_from_slice(b"Bad");
    c.send_raw(&bad).unwrap();
    assert_eq!(refused(c.recv()), Status::INVALID_SEQUENCE_NAME);
    c.send(&get_values("orders", 1));
    assert_eq!(values(c.recv().unwrap()).1, [130]);

    // Strict: 64 calls pipelined on one connection share commits: far fewer commits than
    // calls, and the values increase in request order.
    c.send(&get_values("ledger", 1));
    let first = values(c.recv().unwrap()).1;
    let before = sequence_metric(&node, "idgen_named_sequence_commits_total", "ledger");
    for _ in 0..64 {
        c.send(&get_values("ledger", 1));
    }
    let mut got = Vec::new();
    for _ in 0..64 {
        let (mode, v) = values(c.recv().unwrap());
        assert_eq!(mode, SeqMode::Strict);
        got.extend(v);
    }
    assert!(got[0] > first[0], "{first:?} then {got:?}");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    let commits = sequence_metric(&node, "idgen_named_sequence_commits_total", "ledger") - before;
    assert!(
        (1.0..=8.0).contains(&commits),
        "64 pipelined strict calls took {commits} commits"
    );

    // Version 2 has no GET_VALUES: an unknown opcode, the connection kept.
    let mut v2 = TestConn::open_version(node.addr, 2);
    assert_eq!(v2.hello().version, 2);
    v2.send(&get_values("orders", 1));
    assert_eq!(refused(v2.recv()), Status::UNKNOWN_OPCODE);
    v2.send(&Request::Ping { token: 1 });
    assert_eq!(v2.recv(), Some(Response::Pong(1)));
    // A frame that is too long for any name closes the connection.
    let mut long = vec![0, 0, 0, 70, 0x05, 0, 0, 0, 1];
    long.extend_from_slice(&[b'a'; 65]);
    c.send_raw(&long).unwrap();
    assert_eq!(refused(c.recv()), Status::BAD_FRAME);
    assert_eq!(c.recv(), None);
}

/// A protocol client of the fault test: rounds of [`DEPTH`] pipelined GET_VALUES until
/// `until`, each call timed; a call that fails (a refusal that says retry, a timeout, a close)
/// ends the round, and the client goes on at the next node on a new connection after 50 ms.
fn roaming_client(
    addrs: Vec<std::net::SocketAddr>,
    name: &str,
    c: usize,
    origin: Instant,
    until: Duration,
) -> Vec<Call> {
    let timeouts = idgen_testkit::conn::Timeouts {
        connect: Duration::from_secs(2),
        io: Duration::from_secs(2),
    };
    let mut calls = Vec::new();
    let mut at = c % addrs.len();
    let mut conn: Option<TestConn> = None;
    let mut k = 0usize;
    while origin.elapsed() < until {
        let counts: Vec<u32> = (0..DEPTH).map(|i| 1 + ((c + k + i) % 3) as u32).collect();
        k += DEPTH;
        let start = origin.elapsed().as_micros() as u64;
        if conn.is_none() {
            conn = TestConn::try_open(addrs[at], Handshake::offering(1, 3), timeouts).ok();
        }
        let mut broken = match conn.as_mut() {
            Some(open) => counts
                .iter()
                .try_for_each(|&n| open.try_send(&get_values(name, n)))
                .err(),
            None => Some("connect".to_string()),
        };
        for &n in &counts {
            let got = match (&broken, conn.as_mut()) {
                (None, Some(open)) => open.try_recv(),
                _ => Err("round broken".into()),
            };
            let end = origin.elapsed().as_micros() as u64;
            let values = match got {
                Ok(Response::Values { values, .. }) => {
                    assert_eq!(values.len(), n as usize);
                    values
                }
                Ok(Response::Error { status, .. }) if status.retry_elsewhere() => {
                    broken.get_or_insert(status.to_string());
                    Vec::new()
                }
                Ok(other) => panic!("GET_VALUES {name}: {other:?}"),
                Err(e) => {
                    broken.get_or_insert(e);
                    Vec::new()
                }
            };
            calls.push(Call { start, end, values });
        }
        if broken.is_some() {
            conn = None;
            at = (at + 1) % addrs.len();
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    calls
}

#[test]
fn sequences_hold_their_promises_through_a_node_paused_past_its_lease_and_etcd_stopped() {
    let mut cluster = EtcdCluster::start(1);
    let url = cluster.url("idgen-seq-faults");
    seq(&url, &["create", "orders", "--mode", "dense"]);
    seq(&url, &["create", "ledger", "--mode", "strict"]);
    let nodes = [start(&url, "a"), start(&url, "b"), start(&url, "c")];
    let addrs: Vec<_> = nodes.iter().map(|n| n.addr).collect();
    let origin = Instant::now();
    // Node b is paused 0.7 s in for 3.5 s (its 2 s lease lapses); etcd is stopped, whole,
    // from 5 s to 6.5 s; the clients run for 9 s.
    let until = Duration::from_secs(9);
    let mut clients = Vec::new();
    for name in ["orders", "ledger"] {
        for c in 0..4 {
            let addrs = addrs.clone();
            clients.push((
                name,
                std::thread::spawn(move || roaming_client(addrs, name, c, origin, until)),
            ));
        }
    }
    let at = |secs: f64| {
        let t = Duration::from_secs_f64(secs);
        if let Some(wait) = t.checked_sub(origin.elapsed()) {
            std::thread::sleep(wait);
        }
    };
    at(0.7);
    nodes[1].signal("STOP");
    at(4.2);
    nodes[1].signal("CONT");
    at(5.0);
    let outage = (origin.elapsed().as_micros() as u64, 0);
    cluster.stop_all();
    at(6.5);
    let outage = (outage.0, origin.elapsed().as_micros() as u64);
    cluster.start_all();
    let mut histories: std::collections::BTreeMap<&str, Vec<Call>> = Default::default();
    for (name, t) in clients {
        histories
            .entry(name)
            .or_default()
            .extend(t.join().expect("a client thread"));
    }
    for (name, calls) in &histories {
        let ok: Vec<&Call> = calls.iter().filter(|c| !c.values.is_empty()).collect();
        assert!(ok.len() > 50, "{name}: only {} calls got values", ok.len());
        let dup = check::duplicates(calls);
        assert!(
            dup.is_empty(),
            "{name}: values twice: {:?}",
            &dup[..dup.len().min(5)]
        );
        if *name == "ledger" {
            let v = check::real_time_order(calls);
            assert!(
                v.is_empty(),
                "{name}: out of order: {:?}",
                &v[..v.len().min(5)]
            );
            // Strict calls need the store: while it was down they failed (closed), none was
            // answered from anything held.
            let answered_inside = ok
                .iter()
                .filter(|c| c.start >= outage.0 + 500_000 && c.end <= outage.1)
                .count();
            assert_eq!(answered_inside, 0, "strict values while etcd was down");
            assert!(
                calls
                    .iter()
                    .any(|c| c.values.is_empty() && c.start >= outage.0 && c.start <= outage.1),
                "no strict call failed while etcd was down: was it?"
            );
        } else {
            // Dense values come from blocks held in memory: they kept flowing while etcd was
            // down.
            let during = ok
                .iter()
                .filter(|c| c.start >= outage.0 && c.end <= outage.1)
                .count();
            assert!(during > 0, "no dense value while etcd was down");
        }
    }
    // Healed without a restart: every node answers both sequences again.
    for (i, &addr) in addrs.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(20);
        for name in ["orders", "ledger"] {
            loop {
                let got = TestConn::try_open(addr, Handshake::offering(1, 3), Default::default())
                    .and_then(|mut c| {
                        c.try_send(&get_values(name, 1))?;
                        c.try_recv()
                    });
                match got {
                    Ok(Response::Values { .. }) => break,
                    other => assert!(
                        Instant::now() < deadline,
                        "node {i} did not heal for {name}: {other:?}"
                    ),
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// A node's counter, or 0 before the node has a series for the sequence.
fn sequence_metric_or_0(node: &NodeProc, family: &str, name: &str) -> f64 {
    find_sequence_metric(node, family, name).unwrap_or(0.0)
}

/// Every protocol client of `nodes` (two each, pipelining), each falling back to `fallback`
/// when its node fails; `during` runs once they are under way.
fn protocol_round(
    nodes: &[&NodeProc],
    fallback: std::net::SocketAddr,
    name: &str,
    during: impl FnOnce(),
) -> (Vec<Call>, Vec<String>) {
    let origin = Instant::now();
    let mut threads = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for c in 0..2 {
            let (addr, name) = (node.addr, name.to_string());
            threads.push(std::thread::spawn(move || {
                protocol_client(addr, fallback, &name, 2 * i + c, origin)
            }));
        }
    }
    during();
    let (mut all, mut failures) = (Vec::new(), Vec::new());
    for t in threads {
        let (calls, failed) = t.join().expect("a client thread");
        all.extend(calls);
        failures.extend(failed);
    }
    (all, failures)
}

fn assert_strict(calls: &[Call], what: &str) {
    let dup = check::duplicates(calls);
    assert!(
        dup.is_empty(),
        "{what}: values twice: {:?}",
        &dup[..dup.len().min(5)]
    );
    let v = check::real_time_order(calls);
    assert!(
        v.is_empty(),
        "{what}: out of real-time order: {:?}",
        &v[..v.len().min(5)]
    );
}

#[test]
fn strict_calls_go_to_one_committer_and_another_takes_over_when_it_is_killed() {
    let cluster = EtcdCluster::start(1);
    let url = cluster.url("idgen-fwd");
    seq(&url, &["create", "ledger", "--mode", "strict"]);
    let node = |id: &str| {
        NodeProc::start(&[
            "--store",
            &url,
            "--node-id",
            id,
            "--lease-ttl",
            "2s",
            "--shards",
            "1",
            "--advertise",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
    };
    // The first node claims the committer record at its start; the others find it at theirs.
    let mut a = node("a");
    let b = node("b");
    let c = node("c");
    assert!(
        a.log().contains("\"sequence_committer\"") || a.log().contains("sequence_committer"),
        "a did not log the committer:\n{}",
        a.log()
    );
    let commits =
        |n: &NodeProc| sequence_metric_or_0(n, "idgen_named_sequence_commits_total", "ledger");
    let forwarded = |n: &NodeProc| {
        sequence_metric_or_0(n, "idgen_named_sequence_forwarded_values_total", "ledger")
    };
    let (calls, failures) = protocol_round(&[&a, &b, &c], a.addr, "ledger", || {});
    assert!(failures.is_empty(), "{failures:?}");
    assert_strict(&calls, "one committer");
    let answered: usize = calls.iter().map(|c| c.values.len()).sum();
    // b and c committed nothing: every strict call of theirs went to a, which committed them
    // with its own.
    assert_eq!(
        (commits(&b), commits(&c)),
        (0.0, 0.0),
        "b and c committed themselves"
    );
    assert!(commits(&a) > 0.0);
    assert!(
        forwarded(&b) > 0.0 && forwarded(&c) > 0.0,
        "b forwarded {}, c {} of {answered} values",
        forwarded(&b),
        forwarded(&c)
    );
    // The committer killed mid-run: b and c commit their calls themselves at once (no call of
    // theirs fails), and a's clients move to b.
    let (calls, failures) = protocol_round(&[&a, &b, &c], b.addr, "ledger", || {
        std::thread::sleep(Duration::from_millis(150));
        a.signal("KILL");
    });
    a.kill();
    assert_strict(&calls, "committer killed");
    assert!(
        failures.iter().all(|f| f.starts_with(&a.addr.to_string())),
        "only a's clients may fail: {failures:?}"
    );
    // Its claim runs out (6 s after its last renewal) and b or c takes it: the other forwards
    // to it again.
    let until = Instant::now() + Duration::from_secs(20);
    let before = forwarded(&b) + forwarded(&c);
    loop {
        let (calls, failures) = protocol_round(&[&b, &c], b.addr, "ledger", || {});
        assert!(failures.is_empty(), "{failures:?}");
        assert_strict(&calls, "after the takeover");
        if forwarded(&b) + forwarded(&c) > before {
            break;
        }
        assert!(
            Instant::now() < until,
            "no node took over committing within 20 s:\nb: {}\nc: {}",
            b.log(),
            c.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (b_log, c_log) = (b.log(), c.log());
    assert!(
        b_log.contains("this_node=true")
            || c_log.contains("this_node=true")
            || b_log.contains("\"this_node\":true")
            || c_log.contains("\"this_node\":true"),
        "neither b nor c logged that it commits:\n{b_log}\n{c_log}"
    );
}
