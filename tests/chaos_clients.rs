//! The shipped clients under faults: availability, not only safety.
//!
//! Three `idgen serve` nodes (2 shards each, lease TTL 2 s) on a real etcd, each restarted on
//! its own fixed ports, are driven at once by every client the repository ships:
//!
//! - the Rust `blocking::Pool` over all three nodes (two threads) and a `blocking::PrefetchPool`;
//! - the Python client (`clients/python`, imported from the source tree), over all three nodes,
//!   in a child process;
//! - the HTTP ID API (`POST /ids/batch` on each node's HTTP address).
//!
//! Faults, one after another: a lease change (a rival takes a node's worker records, so the
//! node re-acquires another range and closes its connections with RANGE_CHANGED), kill -9 and
//! a restart on the same ports, SIGSTOP past the TTL then SIGCONT, and the whole etcd stopped
//! past the TTL then started again. After each fault is cleared, every client must be served
//! again within its bound (the "recovery" column), and over the whole run no ID may have been
//! handed out twice, across all clients.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::node::{http, try_http, NodeProc};
use common::{free_port, wall_ms};
use idgen_core::lease::WorkerState;
use idgen_id::Layout;
use idgen_testkit::TestConn;

const NODES: usize = 3;
const PREFIX: &str = "clients";

/// Which client saw what, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Who {
    Pool,
    Prefetch,
    Python,
    /// The HTTP API of one node (it serves that node's shards only).
    Http(usize),
}

#[derive(Default)]
struct Log {
    /// (client, time of the answer, IDs)
    ok: Vec<(Who, Instant, Vec<u64>)>,
    /// (client, time, error)
    errors: Vec<(Who, Instant, String)>,
}

type SharedLog = Arc<Mutex<Log>>;

fn record(log: &SharedLog, who: Who, result: Result<Vec<u64>, String>) {
    let now = Instant::now();
    let mut l = log.lock().unwrap();
    match result {
        Ok(ids) => l.ok.push((who, now, ids)),
        Err(e) => l.errors.push((who, now, e)),
    }
}

struct Cluster {
    nodes: Vec<Option<NodeProc>>,
    listen: Vec<SocketAddr>,
    admin: Vec<SocketAddr>,
    http: Vec<SocketAddr>,
    etcd: EtcdCluster,
}

impl Cluster {
    fn args(&self, i: usize) -> Vec<String> {
        [
            "--store",
            &self.etcd.url(PREFIX),
            "--node-id",
            &format!("node-{i}"),
            "--listen",
            &self.listen[i].to_string(),
            "--admin-listen",
            &self.admin[i].to_string(),
            "--http-listen",
            &self.http[i].to_string(),
            "--shards",
            "2",
            "--lease-ttl",
            "2s",
            "--lease-safety",
            "2s",
            "--max-drift",
            "30s",
            "--worker-bits",
            "4",
            "--timestamp-bits",
            "41",
            "--sequence-bits",
            "18",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn start(&mut self, i: usize) {
        let args = self.args(i);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // The ports were just released by the previous process: retry a moment if needed.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match NodeProc::try_start(&args, &[]) {
                Ok(p) => {
                    self.nodes[i] = Some(p);
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("node {i} not up yet: {}", e.lines().last().unwrap_or(""));
                    std::thread::sleep(Duration::from_millis(300));
                }
                Err(e) => panic!("node {i} did not start: {e}"),
            }
        }
    }

    fn node(&self, i: usize) -> &NodeProc {
        self.nodes[i].as_ref().expect("node running")
    }
}

/// Takes node `i`'s worker records away, as a rival with a newer generation would (returns
/// the stolen range, to give back later).
fn steal(c: &Cluster, i: usize) -> (u64, u64) {
    let hello = TestConn::open(c.listen[i]).hello.expect("HELLO_OK");
    // Both shards' ranges are one contiguous lease: find its span from the admin layout.
    let (_, body) = http(c.admin[i], "GET", "/layout", None);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let (first, count) = (
        v["workers"]["first"]
            .as_u64()
            .unwrap_or(hello.workers.first),
        v["workers"]["count"].as_u64().unwrap_or(2),
    );
    write_records(c, first, count, WorkerState::Held);
    (first, count)
}

/// Writes a rival's record over `first..first + count`, 4 s ahead of the clocks: blocked
/// while held; its next holder starts above it.
fn write_records(c: &Cluster, first: u64, count: u64, state: WorkerState) {
    let layout = Layout::new(idgen_id::DEFAULT_EPOCH_MS, 41, 4, 18, 0).unwrap();
    let end = wall_ms() - layout.epoch_ms() + 4_000;
    common::etcd::write_rival_record(&c.etcd, PREFIX, first, count, state, end);
}

/// The Python client in a child process: prints `ok <n>` + one ID per line, or `err <text>`.
fn python_client(nodes: &[SocketAddr]) -> Child {
    let root = common::docs::repo_root();
    let script = r#"
import sys, time
from idgen_client import Client
nodes = sys.argv[1].split(",")
c = Client(nodes, timeout=1.0, connect_timeout=1.0, backoff_min=0.1, backoff_max=1.0)
out = sys.stdout
while True:
    try:
        ids = c.next_ids(50)
        out.write("ok %d\n" % len(ids))
        out.write("\n".join(str(i) for i in ids) + "\n")
    except Exception as e:
        out.write("err %s\n" % str(e).replace("\n", " "))
    out.flush()
    time.sleep(0.01)
"#;
    let list: Vec<String> = nodes.iter().map(|a| a.to_string()).collect();
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(list.join(","))
        .env("PYTHONPATH", root.join("clients/python"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 (scripts/deps test installs it)")
}

/// One fault and when it was cleared.
struct Fault {
    name: String,
    cleared: Instant,
    /// Every client must be served within this long of `cleared`, and so must the HTTP API
    /// of every node the fault hit.
    bound: Duration,
    nodes: Vec<usize>,
}

#[test]
fn every_shipped_client_recovers_from_each_fault_within_its_bound_and_no_id_repeats() {
    let etcd = EtcdCluster::start(1);
    let mut c = Cluster {
        nodes: (0..NODES).map(|_| None).collect(),
        listen: (0..NODES)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect(),
        admin: (0..NODES)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect(),
        http: (0..NODES)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect(),
        etcd,
    };
    for i in 0..NODES {
        c.start(i);
    }
    let log: SharedLog = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let addrs: Vec<String> = c.listen.iter().map(|a| a.to_string()).collect();
    let options = idgen_client::PoolOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .request_timeout(Duration::from_millis(800))
        .call_deadline(Duration::from_secs(2))
        .backoff_min(Duration::from_millis(100))
        .backoff_max(Duration::from_secs(1));
    let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let pool = idgen_client::blocking::Pool::connect(&refs, options).expect("pool");
    let prefetch = idgen_client::blocking::PrefetchPool::new(
        &pool,
        idgen_client::PrefetchOptions {
            low_water: 20,
            high_water: 100,
        },
    );
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (pool, log, stop) = (pool.clone(), Arc::clone(&log), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                record(
                    &log,
                    Who::Pool,
                    pool.next_ids(100).map_err(|e| e.to_string()),
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    {
        let (prefetch, log, stop) = (prefetch.clone(), Arc::clone(&log), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let r = prefetch
                    .next_id()
                    .map(|id| vec![id])
                    .map_err(|e| e.to_string());
                record(&log, Who::Prefetch, r);
                std::thread::sleep(Duration::from_millis(2));
            }
        }));
    }
    {
        let (https, log, stop) = (c.http.clone(), Arc::clone(&log), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                k = (k + 1) % https.len();
                let body = Some(r#"{"count": 20}"#);
                let r = match try_http(https[k], "POST", "/ids/batch", body, Duration::from_secs(1))
                {
                    Ok((200, body)) => {
                        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                        Ok(v["ids"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_u64().unwrap())
                            .collect())
                    }
                    Ok((code, body)) => Err(format!("HTTP {code}: {body}")),
                    Err(e) => Err(e),
                };
                record(&log, Who::Http(k), r);
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    let mut py = python_client(&c.listen);
    let py_out = py.stdout.take().unwrap();
    {
        let log = Arc::clone(&log);
        threads.push(std::thread::spawn(move || {
            let mut lines = BufReader::new(py_out).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(n) = line.strip_prefix("ok ") {
                    let n: usize = n.parse().unwrap();
                    let ids: Vec<u64> = (0..n)
                        .map(|_| lines.next().unwrap().unwrap().parse().unwrap())
                        .collect();
                    record(&log, Who::Python, Ok(ids));
                } else if let Some(e) = line.strip_prefix("err ") {
                    record(&log, Who::Python, Err(e.to_string()));
                }
            }
        }));
    }

    std::thread::sleep(Duration::from_secs(2));
    let mut faults = Vec::new();
    let settle = || std::thread::sleep(Duration::from_secs(3));

    // 1. A lease change on node 0.
    let stolen = steal(&c, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let h = TestConn::open(c.listen[0]).hello.unwrap();
        let first = h.workers.first;
        if !h.workers.is_empty() && !(stolen.0..stolen.0 + stolen.1).contains(&first) {
            break;
        }
        assert!(Instant::now() < deadline, "node 0 kept its stolen range");
        std::thread::sleep(Duration::from_millis(50));
    }
    faults.push(Fault {
        name: "lease change on node 0".into(),
        cleared: Instant::now(),
        bound: Duration::from_secs(3),
        nodes: vec![0],
    });
    settle();
    // Give the stolen range back (released, above every timestamp issued in it).
    write_records(&c, stolen.0, stolen.1, WorkerState::Released);

    // 2. kill -9 node 1 and restart it on the same ports.
    c.nodes[1].as_mut().unwrap().kill();
    std::thread::sleep(Duration::from_millis(500));
    c.start(1);
    faults.push(Fault {
        name: "kill -9 and restart node 1".into(),
        cleared: Instant::now(),
        bound: Duration::from_secs(3),
        nodes: vec![1],
    });
    settle();

    // 3. SIGSTOP node 2 past its TTL, then SIGCONT.
    c.node(2).signal("STOP");
    std::thread::sleep(Duration::from_secs(3));
    c.node(2).signal("CONT");
    faults.push(Fault {
        name: "SIGSTOP node 2 for 3 s (TTL 2 s), SIGCONT".into(),
        cleared: Instant::now(),
        bound: Duration::from_secs(5),
        nodes: vec![2],
    });
    settle();

    // 4. The whole store gone past the TTL, then back.
    c.etcd.stop_all();
    std::thread::sleep(Duration::from_secs(4));
    c.etcd.start_all();
    faults.push(Fault {
        name: "etcd stopped for 4 s (TTL 2 s), started".into(),
        cleared: Instant::now(),
        bound: Duration::from_secs(8),
        nodes: (0..NODES).collect(),
    });
    settle();
    settle();

    stop.store(true, Ordering::Relaxed);
    let _ = py.kill();
    let _ = py.wait();
    for t in threads {
        t.join().unwrap();
    }
    drop(prefetch);
    drop(pool);

    let log = log.lock().unwrap();
    // No ID twice, across every client and node.
    let mut seen = HashMap::new();
    let mut total = 0usize;
    for (who, _, ids) in &log.ok {
        for &id in ids {
            total += 1;
            if let Some(prev) = seen.insert(id, *who) {
                panic!("ID {id} handed out twice ({prev:?} and {who:?})");
            }
        }
    }
    // Availability: after each fault is cleared, each client is served within the bound.
    let mut report = Vec::new();
    let mut late = Vec::new();
    for f in &faults {
        let hit = f.nodes.iter().map(|&n| Who::Http(n));
        for who in [Who::Pool, Who::Prefetch, Who::Python]
            .into_iter()
            .chain(hit)
        {
            let first_ok = log
                .ok
                .iter()
                .filter(|(w, at, _)| *w == who && *at >= f.cleared)
                .map(|(_, at, _)| *at)
                .min();
            let errors = log
                .errors
                .iter()
                .filter(|(w, at, _)| *w == who && *at >= f.cleared && *at < f.cleared + f.bound)
                .count();
            let took = first_ok.map(|t| t - f.cleared);
            report.push(format!(
                "{:<45} {:<9} served after {:>6} ms ({errors} errors in the bound)",
                f.name,
                format!("{who:?}"),
                took.map_or("never".into(), |d| d.as_millis().to_string())
            ));
            if took.is_none_or(|d| d > f.bound) {
                late.push(format!(
                    "{}: {who:?} not served within {:?}",
                    f.name, f.bound
                ));
            }
        }
    }
    println!("{}", report.join("\n"));
    println!("{total} IDs, {} errors, 0 duplicates", log.errors.len());
    assert!(
        late.is_empty(),
        "clients not served again in time:\n{}",
        late.join("\n")
    );
    for who in [Who::Pool, Who::Prefetch, Who::Python]
        .into_iter()
        .chain((0..NODES).map(Who::Http))
    {
        assert!(
            log.ok.iter().any(|(w, _, _)| *w == who),
            "{who:?} was never served"
        );
    }
    let _ = std::io::stdout().flush();
}
