//! Real network partitions, as Jepsen runs them, inside a network namespace of the test's own
//! (`unshare --net`: its own loopback, nothing else; every address is 127.0.0.1), with
//! nftables rules on its output path:
//!
//! 1. **A node cut off from the store while its clients still reach it.** Node A runs as its
//!    own user ID; every packet it sends to an etcd client port is dropped. A must fail closed
//!    within its TTL (its clients get UNAVAILABLE_LEASE); a node C started after A's lease
//!    expired and passed its safety period takes A's worker ID (the space has two: A's and
//!    B's), fenced by A's lease end, while A's clients keep asking A. The partition heals; A
//!    finds its lease lost, and serves again within seconds once C releases the worker ID.
//! 2. **One etcd member cut off from the other two**, for longer than the TTL. The member runs
//!    as its own user ID; conntrack marks every connection it takes part in, and their peer
//!    traffic is dropped both ways (its client port stays open, so nodes talking to it see a
//!    member without quorum). The member must report no leader during the partition; both
//!    nodes serve again within seconds of healing.
//!
//! Over the whole run no ID is received twice. Named sequences run beside the IDs, through the
//! shipped client's `next_value` on nodes A and B: a dense and a strict one. While A is cut off
//! from the store its strict calls get no value (every strict value needs a commit made after
//! its call began) while B's go on; A's strict calls are answered again once it is healed; no
//! value is handed out twice and the strict one keeps its real-time order across A and B
//! (`idgen_core::sequence::check`). The test re-runs itself inside the namespace;
//! it needs root (as CI and `scripts/test` have), `unshare`, `ip` and `nft` (scripts/deps).

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::node::NodeProc;
use idgen_core::sequence::check::{self, Call};

const INSIDE: &str = "IDGEN_PARTITION_NETNS";
/// The user IDs the isolated processes run as (no files of their own needed).
const NODE_UID: u32 = 65533;
const MEMBER_UID: u32 = 65534;
const TTL: Duration = Duration::from_secs(2);
const SAFETY: Duration = Duration::from_secs(2);

#[test]
fn partitions_inside_a_network_namespace() {
    if std::env::var_os(INSIDE).is_none() {
        // Re-run this very test in a new network namespace.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the partition test needs root (network namespaces, nftables, other user IDs)"
        );
        let exe = std::env::current_exe().unwrap();
        let status = Command::new("unshare")
            .args(["--net", "--fork", "--"])
            .arg(exe)
            .args([
                "--exact",
                "partitions_inside_a_network_namespace",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(INSIDE, "1")
            .status()
            .expect("unshare (util-linux)");
        assert!(
            status.success(),
            "the partition test failed inside its namespace"
        );
        return;
    }
    inside();
}

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the clients saw: per node name, (time, IDs or error).
#[derive(Default)]
struct Log {
    ok: Vec<(String, Instant, Vec<u64>)>,
    errors: Vec<(String, Instant, String)>,
}

/// A client thread asking one node, through the shipped blocking client, reconnecting on
/// every failure.
fn client(
    name: &str,
    addr: std::net::SocketAddr,
    log: Arc<Mutex<Log>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let name = name.to_string();
    std::thread::spawn(move || {
        let options = idgen_client::ClientOptions {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_millis(800),
        };
        let mut conn: Option<idgen_client::blocking::Client> = None;
        while !stop.load(Ordering::Relaxed) {
            if conn.as_ref().is_none_or(|c| c.is_closed()) {
                match idgen_client::blocking::Client::connect_with(addr.to_string(), options) {
                    Ok(c) => conn = Some(c),
                    Err(e) => {
                        log.lock().unwrap().errors.push((
                            name.clone(),
                            Instant::now(),
                            e.to_string(),
                        ));
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                }
            }
            let r = conn.as_ref().unwrap().next_ids(100);
            let now = Instant::now();
            match r {
                Ok(ids) => log.lock().unwrap().ok.push((name.clone(), now, ids)),
                Err(e) => {
                    log.lock()
                        .unwrap()
                        .errors
                        .push((name.clone(), now, e.to_string()));
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// A client of sequence `seq` on one node, through the shipped blocking client: one
/// `next_value` at a time until stopped, each call timed from `origin` (failed ones without a
/// value), reconnecting when the connection closed.
fn seq_client(
    seq: &'static str,
    addr: std::net::SocketAddr,
    origin: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Call>> {
    std::thread::spawn(move || {
        let options = idgen_client::ClientOptions {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_millis(800),
        };
        let us = || origin.elapsed().as_micros() as u64;
        let mut calls = Vec::new();
        let mut conn: Option<idgen_client::blocking::Client> = None;
        while !stop.load(Ordering::Relaxed) {
            let start = us();
            if conn.as_ref().is_none_or(|c| c.is_closed()) {
                conn = idgen_client::blocking::Client::connect_with(addr.to_string(), options).ok();
            }
            let got = conn.as_ref().map(|c| c.next_value(seq));
            let values = match got {
                Some(Ok(v)) => vec![v],
                _ => {
                    std::thread::sleep(Duration::from_millis(20));
                    Vec::new()
                }
            };
            calls.push(Call {
                start,
                end: us(),
                values,
            });
            std::thread::sleep(Duration::from_millis(5));
        }
        calls
    })
}

fn inside() {
    sh("ip link set lo up");
    sh("nft add table inet partition");
    sh("nft add chain inet partition out '{ type filter hook output priority 0; }'");
    let etcd = EtcdCluster::start_as(3, &[(1, MEMBER_UID)]);
    let ports = etcd.ports();
    let url = etcd.url("partition");
    for (seq, mode) in [("orders", "dense"), ("ledger", "strict")] {
        common::node::seq(&["create", seq, "--mode", mode, "--store", &url]);
    }
    let args = |name: &'static str| {
        vec![
            "--store".to_string(),
            url.clone(),
            "--node-id".into(),
            name.into(),
            "--shards".into(),
            "1".into(),
            "--lease-ttl".into(),
            "2s".into(),
            "--lease-safety".into(),
            "2s".into(),
            "--max-drift".into(),
            "30s".into(),
            "--timestamp-bits".into(),
            "41".into(),
            "--worker-bits".into(),
            "1".into(),
            "--sequence-bits".into(),
            "21".into(),
        ]
    };
    let start = |uid: Option<u32>, name: &'static str| {
        let a = args(name);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        NodeProc::try_start_as(uid, None, &a, &[]).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let a = start(Some(NODE_UID), "a");
    let b = start(None, "b");
    let a_range = idgen_testkit::TestConn::open(a.addr)
        .hello
        .unwrap()
        .workers
        .first;
    let log = Arc::new(Mutex::new(Log::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![
        client("a", a.addr, Arc::clone(&log), Arc::clone(&stop)),
        client("b", b.addr, Arc::clone(&log), Arc::clone(&stop)),
    ];
    let origin = Instant::now();
    let at_us = |t: Instant| t.saturating_duration_since(origin).as_micros() as u64;
    // (node, sequence, client)
    let seq_threads: Vec<_> = [("a", a.addr), ("b", b.addr)]
        .into_iter()
        .flat_map(|(node, addr)| {
            ["orders", "ledger"]
                .map(|seq| (node, seq, seq_client(seq, addr, origin, Arc::clone(&stop))))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let served = |node: &str, from: Instant, to: Instant| {
        log.lock()
            .unwrap()
            .ok
            .iter()
            .filter(|(n, at, _)| n == node && *at >= from && *at < to)
            .count()
    };
    let first_ok = |node: &str, from: Instant| {
        log.lock()
            .unwrap()
            .ok
            .iter()
            .filter(|(n, at, _)| n == node && *at >= from)
            .map(|(_, at, _)| *at)
            .min()
    };
    assert!(served("a", Instant::now() - Duration::from_secs(1), Instant::now()) > 0);

    // 1. Node A cut off from every etcd member's client port.
    let clients = format!("{}, {}, {}", ports[0].0, ports[1].0, ports[2].0);
    let cut = Instant::now();
    sh(&format!(
        "nft add rule inet partition out meta skuid {NODE_UID} tcp dport '{{ {clients} }}' drop"
    ));
    // Fail closed within the TTL (plus the keeper's op timeout and the clients' round trip).
    std::thread::sleep(TTL + Duration::from_millis(800));
    let closed_at = Instant::now();
    std::thread::sleep(SAFETY + Duration::from_millis(800));
    assert_eq!(
        served("a", closed_at, Instant::now()),
        0,
        "node A kept serving {} ms after it was cut off from the store (TTL {TTL:?})",
        closed_at.duration_since(cut).as_millis()
    );
    let a_last = log
        .lock()
        .unwrap()
        .ok
        .iter()
        .filter(|(n, _, _)| n == "a")
        .map(|(_, at, _)| *at)
        .max()
        .unwrap();
    println!(
        "partition 1: node A served its last IDs {} ms after the cut (TTL {} ms)",
        a_last.saturating_duration_since(cut).as_millis(),
        TTL.as_millis()
    );
    // A's lease expired and passed its safety period: C takes its worker ID.
    let mut c = start(None, "c");
    let c_range = idgen_testkit::TestConn::open(c.addr)
        .hello
        .unwrap()
        .workers
        .first;
    assert_eq!(
        c_range, a_range,
        "C must take A's worker ID (the only one not held)"
    );
    threads.push(client("c", c.addr, Arc::clone(&log), Arc::clone(&stop)));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        served("c", c_started(&log), Instant::now()) > 0,
        "node C never served"
    );
    // Heal; A finds its lease lost and can take no worker ID while C holds it.
    sh("nft flush chain inet partition out");
    let healed = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    // A graceful stop releases the worker ID at once, at C's last timestamp.
    assert!(c.terminate(Duration::from_secs(10)).success());
    let released = Instant::now();
    let deadline = released + Duration::from_secs(8);
    while first_ok("a", released).is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let recovered = first_ok("a", released).unwrap_or_else(|| {
        panic!(
            "node A not serving 8 s after C released (healed {} ms before)",
            released.duration_since(healed).as_millis()
        )
    });
    println!(
        "partition 1: healed; node A served again {} ms after C released its worker ID",
        recovered.duration_since(released).as_millis()
    );
    assert!(recovered.duration_since(released) < Duration::from_secs(5));

    // 2. etcd member 1 cut off from the other two, both ways, on the peer ports only.
    let peers = format!("{}, {}, {}", ports[0].1, ports[1].1, ports[2].1);
    sh(&format!(
        "nft add rule inet partition out meta skuid {MEMBER_UID} ct mark set 0x1"
    ));
    sh(&format!(
        "nft add rule inet partition out tcp dport {} drop",
        ports[1].1
    ));
    sh(&format!(
        "nft add rule inet partition out ct mark 0x1 tcp dport '{{ {peers} }}' drop"
    ));
    sh(&format!(
        "nft add rule inet partition out ct mark 0x1 tcp sport '{{ {peers} }}' drop"
    ));
    let cut2 = Instant::now();
    std::thread::sleep(TTL * 2 + Duration::from_secs(1));
    assert!(
        !etcd.member_healthy(1),
        "etcd member 1 still has a leader: the partition did not take"
    );
    let during = served("a", cut2, Instant::now()) + served("b", cut2, Instant::now());
    sh("nft flush chain inet partition out");
    let healed2 = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    for node in ["a", "b"] {
        let t = first_ok(node, healed2)
            .unwrap_or_else(|| panic!("node {node} not serving 3 s after the member rejoined"));
        println!(
            "partition 2: node {node} served {} ms after healing",
            t.duration_since(healed2).as_millis()
        );
    }
    println!("partition 2: {during} answers during the member's isolation");

    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let mut by_seq: HashMap<&str, Vec<(&str, Call)>> = HashMap::new();
    for (node, seq, t) in seq_threads {
        for call in t.join().unwrap() {
            by_seq.entry(seq).or_default().push((node, call));
        }
    }
    let (cut_us, healed_us) = (at_us(cut), at_us(healed));
    for (seq, calls) in &by_seq {
        let all: Vec<Call> = calls.iter().map(|(_, c)| c.clone()).collect();
        let dup = check::duplicates(&all);
        assert!(
            dup.is_empty(),
            "{seq}: values twice: {:?}",
            &dup[..dup.len().min(5)]
        );
        let answered = |node: &str, from: u64, to: u64| {
            calls
                .iter()
                .filter(|(n, c)| {
                    *n == node && !c.values.is_empty() && c.start >= from && c.end <= to
                })
                .count()
        };
        if *seq == "ledger" {
            let v = check::real_time_order(&all);
            assert!(
                v.is_empty(),
                "ledger: out of real-time order: {:?}",
                &v[..v.len().min(5)]
            );
            // Cut off from the store, A answers no strict call begun after the cut (200 ms for
            // the rule to take) and ended before the heal; B goes on.
            assert_eq!(
                answered("a", cut_us + 200_000, healed_us),
                0,
                "node A answered strict calls while cut off from the store"
            );
            assert!(
                answered("b", cut_us, healed_us) > 0,
                "node B's strict calls stopped"
            );
            assert!(
                answered("a", healed_us, u64::MAX) > 0,
                "node A answered no strict call after the heal"
            );
        }
        println!(
            "partitions: sequence {seq}: {} calls answered of {}, no value twice",
            all.iter().filter(|c| !c.values.is_empty()).count(),
            all.len()
        );
    }
    let log = log.lock().unwrap();
    let mut seen: HashMap<u64, &str> = HashMap::new();
    let mut total = 0usize;
    for (node, _, ids) in &log.ok {
        for &id in ids {
            total += 1;
            if let Some(prev) = seen.insert(id, node) {
                panic!("ID {id} received twice (node {prev} and node {node})");
            }
        }
    }
    println!(
        "partitions: {total} IDs, 0 duplicates, {} client errors",
        log.errors.len()
    );
    drop(a);
    drop(b);
}

/// When node C's client first asked (its first record), for "served since C started".
fn c_started(log: &Arc<Mutex<Log>>) -> Instant {
    let l = log.lock().unwrap();
    l.ok.iter()
        .map(|(n, at, _)| (n, at))
        .chain(l.errors.iter().map(|(n, at, _)| (n, at)))
        .filter(|(n, _)| n.as_str() == "c")
        .map(|(_, at)| *at)
        .min()
        .unwrap_or_else(Instant::now)
}
