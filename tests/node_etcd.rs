//! Black-box tests of the real `idgen serve` binary on a real etcd (see `common/`): disjoint
//! worker ranges between nodes, a kill -9 and immediate restart that reuses the dead node's
//! worker IDs only above its old `lease_end`, and a node that fails closed when etcd goes away
//! and serves again when it returns. Lease TTL 1.5 s throughout.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::node::NodeProc;
use common::wall_ms;
use idgen_core::lease::{LeaseConfig, Leases, Owner, WorkerRecord};
use idgen_core::store::etcd::EtcdStore;
use idgen_id::{Layout, WorkerRange};
use idgen_protocol::{ServerHello, Status};
use idgen_testkit::TestConn;

const TTL_MS: u64 = 1500;
const TTL: &str = "1500ms";

fn start(cluster: &EtcdCluster, prefix: &str, node_id: &str, extra: &[&str]) -> NodeProc {
    let url = cluster.url(prefix);
    let mut args = vec!["--store", &url, "--node-id", node_id, "--lease-ttl", TTL];
    args.extend_from_slice(extra);
    NodeProc::start(&args)
}

/// Opens `n` connections; returns them with the worker ranges their HELLO_OK announced.
fn connections(node: &NodeProc, n: usize) -> Vec<(TestConn, ServerHello)> {
    (0..n)
        .map(|_| {
            let c = TestConn::open(node.addr);
            let h = c.hello.expect("HELLO_OK");
            (c, h)
        })
        .collect()
}

/// Two nodes with 2 shards each on one etcd: the worker ranges their HELLO_OKs announce over
/// 16 connections each never overlap between the nodes, every ID decodes to a worker of the
/// connection's (and so the node's) range, and all IDs of both nodes are distinct.
#[test]
fn two_nodes_on_one_etcd_have_disjoint_ranges_and_distinct_ids() {
    let cluster = EtcdCluster::start(1);
    let nodes = [
        start(&cluster, "idgen-two", "node-a", &["--shards", "2"]),
        start(&cluster, "idgen-two", "node-b", &["--shards", "2"]),
    ];
    let mut ranges: Vec<BTreeMap<u16, WorkerRange>> = Vec::new();
    let mut all_ids = HashSet::new();
    for node in &nodes {
        let mut conns = connections(node, 16);
        let mut by_shard = BTreeMap::new();
        for (c, h) in conns.iter_mut() {
            let range = h.workers;
            assert!(!range.is_empty(), "{h:?}");
            // A shard announces one range on every connection.
            assert_eq!(*by_shard.entry(h.shard).or_insert(range), range, "{h:?}");
            for _ in 0..4 {
                let ids = c.get_ids(64).unwrap_or_else(|e| panic!("GET_IDS: {e:?}"));
                assert_eq!(ids.len(), 64);
                for id in ids {
                    let w = h.decompose(id).worker;
                    assert!(
                        range.contains(w),
                        "ID {id} has worker {w}, outside shard {} range {range}",
                        h.shard
                    );
                    assert!(all_ids.insert(id), "ID {id} issued twice");
                }
            }
        }
        assert_eq!(
            by_shard.len(),
            2,
            "16 connections all landed on one shard of {}: {by_shard:?}",
            node.addr
        );
        ranges.push(by_shard);
    }
    assert_eq!(all_ids.len(), 2 * 16 * 4 * 64);
    // Within a node the shards' ranges are disjoint, and so are the two nodes' ranges.
    let flat: Vec<(usize, WorkerRange)> = ranges
        .iter()
        .enumerate()
        .flat_map(|(n, m)| m.values().map(move |&r| (n, r)))
        .collect();
    for (i, (na, a)) in flat.iter().enumerate() {
        for (nb, b) in &flat[i + 1..] {
            assert!(
                a.end() <= b.first || b.end() <= a.first,
                "overlapping worker ranges: node {na} {a} and node {nb} {b}"
            );
        }
    }
}

/// The log without its colour codes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC '[' parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The worker records of the `default` namespace, read straight from etcd: one entry per worker
/// ID (a range record once for each of its worker IDs).
fn worker_records(cluster: &EtcdCluster, prefix: &str, layout: Layout) -> Vec<(u64, WorkerRecord)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = EtcdStore::connect(cluster.endpoints(), prefix.to_string())
            .await
            .expect("connect to etcd");
        let owner = Owner::this_process(Some("test-reader".into()), wall_ms());
        Leases::new(&store, layout, LeaseConfig::new("default", 2), owner)
            .workers()
            .await
            .expect("read the worker records")
    })
}

/// A node with a worker space of exactly 2 worker IDs (2 shards × 1) is killed with SIGKILL and
/// restarted at once on the same etcd namespace: the restarted node must reuse both worker IDs,
/// so it waits until the dead node's lease has passed its safety period (1 s), and every ID it
/// issues has a timestamp strictly above the dead node's `lease_end` for that worker.
#[test]
fn kill_9_and_immediate_restart_reuse_workers_only_above_the_old_lease_end() {
    let cluster = EtcdCluster::start(1);
    let prefix = "idgen-restart";
    let tiny = [
        "--timestamp-bits",
        "41",
        "--worker-bits",
        "1",
        "--sequence-bits",
        "21",
        "--shards",
        "2",
        "--workers-per-shard",
        "1",
        "--lease-safety",
        "1s",
    ];
    let layout = Layout::new(idgen_id::DEFAULT_EPOCH_MS, 41, 1, 21, 0).unwrap();
    let mut old = start(&cluster, prefix, "node", &tiny);
    let mut old_ids = Vec::new();
    let mut hello = None;
    for (mut c, h) in connections(&old, 8) {
        old_ids.extend(c.get_ids(500).expect("IDs from the first node"));
        hello = Some(h);
    }
    let hello = hello.unwrap();
    std::thread::sleep(Duration::from_millis(600)); // at least one renewal
    old.kill();
    // Read after the kill (and after anything the dead process had in flight): the final
    // lease_end of each worker, at least every lease_end it ever had.
    std::thread::sleep(Duration::from_millis(200));
    let before: BTreeMap<u64, u64> = worker_records(&cluster, prefix, layout)
        .into_iter()
        .map(|(id, r)| (id, r.lease_end))
        .collect();
    assert_eq!(before.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
    for &id in &old_ids {
        let (w, ts) = (hello.decompose(id).worker, hello.decompose(id).timestamp);
        assert!(ts < before[&w], "the dead node issued {ts} ≥ its lease_end");
    }

    let restarted_at = Instant::now();
    let new = start(&cluster, prefix, "node", &tiny);
    let started_after = restarted_at.elapsed();
    // It waited for the old lease: lease_end + safety must be behind us.
    let now_id = wall_ms() - layout.epoch_ms();
    let old_end = *before.values().max().unwrap();
    assert!(
        now_id > old_end + 1000,
        "the restarted node started at {now_id}, before the old lease_end {old_end} + safety"
    );
    let log = strip_ansi(&new.log());
    let floor_line = log
        .lines()
        .find(|l| l.contains("lease_acquired"))
        .unwrap_or_else(|| panic!("no lease_acquired line in the log:\n{log}"));
    assert!(
        floor_line.contains(&format!("floor={old_end}")),
        "the new grant is not floored at the old lease_end {old_end}: {floor_line}"
    );

    let old_set: HashSet<u64> = old_ids.iter().copied().collect();
    let mut per_worker: BTreeMap<u64, usize> = BTreeMap::new();
    for (mut c, h) in connections(&new, 8) {
        for id in c.get_ids(500).expect("IDs from the restarted node") {
            let (w, ts) = (h.decompose(id).worker, h.decompose(id).timestamp);
            assert!(
                ts > before[&w],
                "restarted node issued timestamp {ts} for worker {w}, not above its old \
                 lease_end {}",
                before[&w]
            );
            assert!(!old_set.contains(&id), "ID {id} issued by both lives");
            *per_worker.entry(w).or_default() += 1;
        }
    }
    assert_eq!(
        per_worker.keys().copied().collect::<Vec<_>>(),
        vec![0, 1],
        "the restarted node reused both worker IDs"
    );
    eprintln!("restarted node was serving {started_after:?} after the restart");
}

/// A node whose etcd goes away stops issuing IDs within TTL (+ 1 s): no ID it issues after the
/// store stopped has a timestamp at or above (stop time + TTL), once it answers
/// UNAVAILABLE_LEASE it keeps doing so while etcd is down, and it serves again within 10 s of
/// etcd's return.
#[test]
fn node_fails_closed_without_etcd_and_serves_again_when_it_returns() {
    let mut cluster = EtcdCluster::start(1);
    let node = start(&cluster, "idgen-outage", "node", &["--shards", "1"]);
    let mut c = TestConn::open(node.addr);
    let hello = c.hello.unwrap();
    c.get_ids(10).expect("serves with etcd up");
    std::thread::sleep(Duration::from_millis(700)); // a renewal or two

    cluster.stop_all();
    let stopped = Instant::now();
    // Any renewal that committed did so before this instant, with a clock reading before it.
    let stop_id_time = wall_ms() - hello.epoch_ms;
    let ceiling_bound = stop_id_time + TTL_MS;
    let poll = Duration::from_millis(50);
    let mut refused_at = None;
    let mut served = 0;
    while stopped.elapsed() < Duration::from_millis(TTL_MS) + Duration::from_secs(3) {
        match c.get_ids(1) {
            Ok(ids) => {
                let ts = hello.decompose(ids[0]).timestamp;
                assert!(
                    ts < ceiling_bound,
                    "issued timestamp {ts} ≥ stop time {stop_id_time} + TTL"
                );
                assert!(
                    refused_at.is_none(),
                    "served an ID {:?} after the first UNAVAILABLE_LEASE, with etcd down",
                    refused_at.map(|t: Instant| t.elapsed())
                );
                served += 1;
            }
            Err((status, msg)) => {
                assert_eq!(status, Status::UNAVAILABLE_LEASE, "{msg}");
                refused_at.get_or_insert_with(Instant::now);
            }
        }
        std::thread::sleep(poll);
    }
    let refused_at = refused_at.unwrap_or_else(|| {
        panic!(
            "still serving {:?} after etcd stopped; log:\n{}",
            stopped.elapsed(),
            common::node::tail(node.log_path())
        )
    });
    let refused_after = refused_at - stopped;
    assert!(
        refused_after <= Duration::from_millis(TTL_MS + 1000),
        "first UNAVAILABLE_LEASE {refused_after:?} after etcd stopped"
    );
    assert!(
        served > 0,
        "served nothing between the stop and the ceiling"
    );

    cluster.start_all();
    let back = Instant::now();
    loop {
        match c.get_ids(1) {
            Ok(ids) => {
                assert!(hello.decompose(ids[0]).timestamp > stop_id_time);
                break;
            }
            Err((status, msg)) => assert_eq!(status, Status::UNAVAILABLE_LEASE, "{msg}"),
        }
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "not serving 10 s after etcd returned; log:\n{}",
            common::node::tail(node.log_path())
        );
        std::thread::sleep(poll);
    }
    eprintln!(
        "refused {refused_after:?} after etcd stopped; served again {:?} after it returned",
        back.elapsed()
    );
}

/// A node loses its lease (a rival takes its records) and re-acquires a different worker range.
/// Every connection opened before answers its next request with RANGE_CHANGED and is closed,
/// without issuing an ID from the old range; a new connection, the client `Pool`, the
/// `PrefetchPool` and the HTTP API are all served again within a few seconds, from the new
/// range only.
#[test]
fn a_lease_change_closes_old_connections_and_every_client_recovers() {
    let cluster = EtcdCluster::start(1);
    let mut node = start(
        &cluster,
        "change",
        "alpha",
        &["--shards", "1", "--http-listen", "127.0.0.1:0"],
    );
    let http_api = node.http.expect("HTTP ID API address");
    let (mut old, hello) = connections(&node, 1).pop().unwrap();
    let old_range = hello.workers;
    assert!(old.get_ids(10).is_ok());
    let options = idgen_client::PoolOptions::default().call_deadline(Duration::from_secs(3));
    let addr = node.addr.to_string();
    let pool = idgen_client::blocking::Pool::connect(&[addr.as_str()], options).unwrap();
    let prefetch = idgen_client::blocking::PrefetchPool::new(
        &pool,
        idgen_client::PrefetchOptions {
            low_water: 10,
            high_water: 50,
        },
    );
    assert_eq!(pool.next_ids(5).unwrap().len(), 5);
    assert!(prefetch.next_id().is_ok());
    assert_eq!(common::node::http(http_api, "POST", "/ids", None).0, 200);

    // A rival takes the node's records, held two minutes ahead.
    common::etcd::write_rival_record(
        &cluster,
        "change",
        old_range.first,
        old_range.count,
        idgen_core::lease::WorkerState::Held,
        wall_ms() - Layout::default().epoch_ms() + 120_000,
    );
    // The node notices at its next renewal (TTL/3) and takes another range.
    let deadline = Instant::now() + Duration::from_secs(10);
    let new_hello = loop {
        let c = TestConn::open(node.addr);
        let h = c.hello.expect("HELLO_OK");
        if !h.workers.is_empty() && !old_range.contains(h.workers.first) {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "no new range within 10 s:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let changed_at = Instant::now();

    // The old connection: RANGE_CHANGED, then closed; no ID from the old range.
    match old.get_ids(10) {
        Err((status, _)) => assert_eq!(status, Status::RANGE_CHANGED),
        Ok(ids) => panic!(
            "served {} IDs on a connection whose range changed",
            ids.len()
        ),
    }
    assert!(
        old.recv().is_none(),
        "the connection is closed after RANGE_CHANGED"
    );

    let in_new = |id: u64| new_hello.workers.contains(new_hello.decompose(id).worker);
    // Every client recovers within a few seconds, served from the new range.
    let ids = pool.next_ids(100).expect("the pool recovers");
    assert!(
        ids.iter().all(|&id| in_new(id)),
        "pool IDs outside the new range"
    );
    let mut seen = HashSet::new();
    for _ in 0..200 {
        // The buffer may still hold IDs from before the change (issued legitimately under
        // the old lease); new refills come from the new range.
        let id = prefetch.next_id().expect("the prefetch pool recovers");
        assert!(seen.insert(id), "duplicate {id}");
    }
    let (code, body) = common::node::http(http_api, "POST", "/ids/batch", Some(r#"{"count": 10}"#));
    assert_eq!(
        code, 200,
        "the HTTP API recovers at its first request: {body}"
    );
    let recovered = changed_at.elapsed();
    assert!(
        recovered < Duration::from_secs(5),
        "recovery took {recovered:?}"
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    for id in v["ids"].as_array().unwrap() {
        assert!(
            in_new(id.as_u64().unwrap()),
            "HTTP ID outside the new range: {body}"
        );
    }
    drop(prefetch);
    drop(pool);
    node.terminate(Duration::from_secs(10));
}

/// A node of 8 shards × 128 worker IDs takes the whole default worker space (1,024 worker IDs)
/// on an etcd with default flags, serves from all of it, and releases it on SIGTERM: one
/// record, released. (Before range records, its grant exceeded etcd's `--max-txn-ops` of 128.)
#[test]
fn a_node_leases_the_whole_default_worker_space_on_a_default_etcd() {
    let cluster = EtcdCluster::start(1);
    let prefix = "idgen-whole";
    let mut node = start(
        &cluster,
        prefix,
        "whole",
        &["--shards", "8", "--workers-per-shard", "128"],
    );
    let mut shards = BTreeMap::new();
    let mut ids = HashSet::new();
    for (mut c, h) in connections(&node, 32) {
        shards.insert(h.shard, h.workers);
        for id in c.get_ids(100).expect("IDs") {
            assert!(h.workers.contains(h.decompose(id).worker));
            assert!(ids.insert(id), "ID {id} twice");
        }
    }
    assert!(shards.len() > 1, "{shards:?}");
    assert!(shards.values().all(|w| w.count == 128), "{shards:?}");
    let layout = Layout::default();
    let held = worker_records(&cluster, prefix, layout);
    assert_eq!(held.len(), 1024);
    assert!(held
        .iter()
        .all(|(_, r)| r.count == 1024 && r.owner.node_id == "whole"));
    assert!(node.terminate(Duration::from_secs(15)).success());
    let after = worker_records(&cluster, prefix, layout);
    assert!(
        after
            .iter()
            .all(|(_, r)| r.count == 1024 && r.state == idgen_core::lease::WorkerState::Released),
        "released on shutdown"
    );
}
