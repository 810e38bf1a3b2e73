//! Layout generations on real processes: a successor layout scheduled on a three-member etcd cluster
//! (`idgen layout schedule`) while nodes serve, one node down across the switch. Every ID is
//! unique, every ID answered after the switch is above every ID answered before it, the new
//! IDs decode (GET /ids/{id}) under the new layout, and the node that was down comes back
//! under it.

#![cfg(feature = "etcd")]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idgen_protocol::client::Handshake;
use idgen_testkit::conn::{TestConn, Timeouts};
use idgen_testkit::etcd::EtcdCluster;
use idgen_testkit::node::{http, idgen, NodeProc};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn node(url: &str, name: &str) -> NodeProc {
    NodeProc::start(&[
        "--store",
        url,
        "--node-id",
        name,
        "--lease-ttl",
        "3s",
        "--admin-listen",
        "127.0.0.1:0",
    ])
}

/// IDs from `addr` until `stop`, as (ID, unix ms when the request was sent, unix ms when
/// answered), reconnecting when the node closes the connection (RANGE_CHANGED at the switch)
/// and retrying refusals; at most 20 000 requests.
fn load(addr: SocketAddr, stop: Arc<AtomicBool>) -> (Vec<(u64, u64, u64)>, u32) {
    let mut out = Vec::new();
    let mut refusals = 0;
    let mut conn = None;
    for _ in 0..20_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                match TestConn::try_open(addr, Handshake::offering(1, 1), Timeouts::default()) {
                    Ok(c) => conn.insert(c),
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                }
            }
        };
        let sent = now_ms();
        match c.try_get_ids(50) {
            Ok(Ok(ids)) => {
                let got = now_ms();
                out.extend(ids.into_iter().map(|id| (id, sent, got)));
            }
            Ok(Err(_)) | Err(_) => {
                refusals += 1;
                conn = None;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (out, refusals)
}

#[test]
fn a_layout_switch_under_load_keeps_ids_unique_and_increasing_with_a_node_down_across_it() {
    let etcd = EtcdCluster::start(3);
    let url = etcd.url("switch");
    let a = node(&url, "a");
    let b = node(&url, "b");
    let mut c = node(&url, "c");
    let mut before: Vec<u64> = c.take_ids(500);

    // `idgen layout plan|schedule` of the successor 42/9/12 at `at`, as JSON.
    let layout = |verb: &str, at: &str| {
        idgen(&[
            "layout",
            verb,
            "--store",
            &url,
            "--at",
            at,
            "--timestamp-bits",
            "42",
            "--worker-bits",
            "9",
            "--sequence-bits",
            "12",
            "--json",
        ])
    };
    let schedule = |at: &str| layout("schedule", at);
    // Refused before the records are at version 4, then scheduled.
    let (code, out, err) = schedule("10s");
    assert_ne!(code, 0, "scheduled on version 3 records: {out}");
    assert!(err.contains("idgen store upgrade"), "{err}");
    let (code, out, err) = idgen(&["store", "upgrade", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, plan, err) = layout("plan", "10s");
    assert_eq!(code, 0, "{plan}{err}");
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["scheduled"], false);
    let (code, out, err) = schedule("10s");
    assert_eq!(code, 0, "{out}{err}");
    let scheduled: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(scheduled["scheduled"], true, "{out}");
    let switch_ms = scheduled["switch_unix_ms"].as_u64().unwrap();
    // A second switch while one is pending is refused.
    let (code, _, err) = schedule("60s");
    assert_ne!(code, 0);
    assert!(err.contains("one switch at a time"), "{err}");

    // Node c goes down before the switch; a and b serve under load across it.
    assert!(c.terminate(Duration::from_secs(10)).success());
    before.extend(a.take_ids(500));
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = [a.addr, b.addr]
        .into_iter()
        .map(|addr| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || load(addr, stop))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while now_ms() < switch_ms + 3_000 {
        assert!(Instant::now() < deadline, "the switch never came");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The node that was down comes back after the switch, under the new layout.
    let c = node(&url, "c");
    let from_c = c.take_ids(500);
    stop.store(true, Ordering::Relaxed);
    let mut answered: Vec<(u64, u64, u64)> = Vec::new();
    for l in loads {
        let (ids, refusals) = l.join().unwrap();
        assert!(
            ids.iter().any(|&(_, sent, _)| sent > switch_ms + 500),
            "a node served nothing after the switch ({refusals} refusals)"
        );
        answered.extend(ids);
    }

    // Unique.
    let mut all: Vec<u64> = before
        .iter()
        .copied()
        .chain(from_c.iter().copied())
        .collect();
    all.extend(answered.iter().map(|&(id, _, _)| id));
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "duplicate IDs across the switch");

    // Every ID answered before the switch is below every ID asked for after it.
    let old_max = answered
        .iter()
        .filter(|&&(_, _, got)| got < switch_ms)
        .map(|&(id, _, _)| id)
        .chain(before.iter().copied())
        .max()
        .unwrap();
    let new: Vec<u64> = answered
        .iter()
        .filter(|&&(_, sent, _)| sent > switch_ms)
        .map(|&(id, _, _)| id)
        .chain(from_c.iter().copied())
        .collect();
    let new_min = *new.iter().min().unwrap();
    assert!(
        old_max < new_min,
        "an ID after the switch ({new_min}) is not above one before it ({old_max})"
    );

    // The node lists both layouts and decodes each ID under its own.
    let admin = c.admin.unwrap();
    let (status, body) = http(admin, "GET", "/layout", None);
    assert_eq!(status, 200, "{body}");
    let layout: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(layout["layout_generation"], 1, "{body}");
    assert_eq!(layout["worker_bits"], 9, "{body}");
    let layouts = layout["layouts"].as_array().unwrap();
    assert_eq!(layouts.len(), 2, "{body}");
    assert_eq!(layouts[1]["switch_unix_ms"], switch_ms, "{body}");
    let first_id: u64 = layouts[1]["first_id_str"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(old_max < first_id && first_id <= new_min);
    for (id, generation, bits) in [(old_max, 0, 10), (new_min, 1, 9)] {
        let (status, body) = http(admin, "GET", &format!("/ids/{id}"), None);
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["layout_generation"], generation, "{body}");
        assert!(v["worker"].as_u64().unwrap() < 1 << bits, "{body}");
    }
    // So does `idgen decode --layouts`, from the same answer.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("layout.json");
    std::fs::write(&file, body_of(admin)).unwrap();
    let (code, out, err) = idgen(&[
        "decode",
        "--layouts",
        file.to_str().unwrap(),
        "--json",
        &old_max.to_string(),
        &new_min.to_string(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let gens: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["layout_generation"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(gens, [0, 1], "{out}");
    // inspect shows the generation in effect and the leases in its worker space: all three
    // nodes, each in the new layout's 512 worker IDs.
    let (code, out, err) = idgen(&["inspect", "--store", &url, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let inspected: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspected["layout_generation"], 1, "{out}");
    let held: Vec<&str> = inspected["leases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["state"] == "held")
        .map(|l| l["node_id"].as_str().unwrap())
        .collect();
    assert_eq!(held.len(), 3, "{out}");
    drop((a, b, c));
}

fn body_of(admin: SocketAddr) -> String {
    http(admin, "GET", "/layout", None).1
}
