//! Fault injection across nodes, clocks and the store, with a Jepsen-style history check.
//!
//! [`run`] starts a three-member etcd cluster and three `idgen serve` nodes (two shards each,
//! lease TTL 2 s, safety 2 s, each under libfaketime with its own offset file), drives them
//! with client threads that record every ID they receive (node, connection, the connection's
//! HELLO_OK worker range, receive time), and injects faults: first each on its own, then mixed
//! at random by a seeded PRNG. At the end it checks the whole history:
//!
//! - no ID was received twice (across all nodes and connections);
//! - IDs are strictly increasing per connection;
//! - every ID decodes (with the HELLO_OK layout) to a worker inside its connection's range;
//! - a node SIGSTOPped past its TTL, whose range a successor took meanwhile, issues no ID at
//!   or beyond its old ceiling bound (`STOP time + TTL`) after SIGCONT;
//!
//! and reports per fault how long clients saw errors (time to fail closed, time to recover).
//! Any violation panics with the seed. `IDGEN_CHAOS_SEED` fixes the seed,
//! `IDGEN_CHAOS_SECS` the length of the mixed phase; `scripts/chaos` wraps both.
//!
//! The worker space is deliberately tight (`--worker-bits 3`: 8 worker IDs for 3 × 2 shards),
//! so that restarted nodes and successors reuse each other's worker IDs, fenced by their
//! stored `lease_end`, and so that a fourth node is refused.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use common::etcd::EtcdCluster;
use common::node::{http, NodeProc};
use idgen_protocol::{
    decode_response, encode_request, max_response_frame, Request, ResponseRef, ServerHello, Status,
};

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
const TTL: Duration = Duration::from_secs(2);
const SAFETY: Duration = Duration::from_secs(2);
/// Main nodes, plus two slots for temporary successors (the SIGSTOP fault).
const MAIN: usize = 3;
const SLOTS: usize = 5;
const CLIENTS_PER_NODE: usize = 3;

// ---------------------------------------------------------------- small helpers

/// splitmix64: a tiny seeded PRNG (no dependency).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

// ---------------------------------------------------------------- the recorded history

/// One client connection's history, kept compact: IDs arrive in runs of consecutive integers
/// (one shard, one millisecond), so a run `(first, count)` is recorded, not every ID. Order
/// per connection and the announced range are checked as answers arrive; duplicates are
/// checked at the end as overlaps of runs. Memory grows with the number of runs, not IDs.
struct ConnLog {
    node: usize,
    conn: u64,
    hello: ServerHello,
    /// Runs of consecutive IDs, in the order received.
    runs: Vec<(u64, u32)>,
    /// Per IDS frame: receive time and the index of its first run.
    batches: Vec<(Instant, u32)>,
    /// IDs received.
    ids: u64,
    /// The last ID received (order check).
    last: Option<u64>,
    not_increasing: u64,
    outside: u64,
    /// The first few order and range violations, described.
    examples: Vec<String>,
}

impl ConnLog {
    fn new(node: usize, conn: u64, hello: ServerHello) -> ConnLog {
        ConnLog {
            node,
            conn,
            hello,
            runs: Vec::new(),
            batches: Vec::new(),
            ids: 0,
            last: None,
            not_increasing: 0,
            outside: 0,
            examples: Vec::new(),
        }
    }

    /// Records one IDS frame's IDs (given in the order received), checking them on the way.
    fn push(&mut self, at: Instant, ids: impl IntoIterator<Item = u64>) {
        let h = self.hello;
        let (lo, hi) = (
            u64::from(h.worker_first),
            u64::from(h.worker_first) + u64::from(h.worker_count),
        );
        self.batches.push((at, self.runs.len() as u32));
        let mut current: Option<(u64, u32)> = None;
        for id in ids {
            self.ids += 1;
            if self.last.is_some_and(|l| id <= l) {
                self.not_increasing += 1;
                if self.examples.len() < 5 {
                    self.examples.push(format!(
                        "node {} conn {}: {id} after {} (not increasing)",
                        self.node,
                        self.conn,
                        self.last.unwrap()
                    ));
                }
            }
            self.last = Some(id);
            let worker = h.decompose(id).worker;
            if !(lo..hi).contains(&worker) || id >> 63 != 0 {
                self.outside += 1;
                if self.examples.len() < 5 {
                    self.examples.push(format!(
                        "node {} conn {}: ID {id} has worker {worker} outside its HELLO range {lo}..{hi}",
                        self.node, self.conn
                    ));
                }
            }
            current = match current {
                Some((first, n)) if first + u64::from(n) == id && n < u32::MAX => {
                    Some((first, n + 1))
                }
                Some(run) => {
                    self.runs.push(run);
                    Some((id, 1))
                }
                None => Some((id, 1)),
            };
        }
        self.runs.extend(current);
    }

    /// The runs of batch `b`.
    fn batch_runs(&self, b: usize) -> &[(u64, u32)] {
        let start = self.batches[b].1 as usize;
        let end = self
            .batches
            .get(b + 1)
            .map_or(self.runs.len(), |n| n.1 as usize);
        &self.runs[start..end]
    }
}

/// A request that failed: an ERROR frame, a timeout, or a connection that could not be made.
struct ErrRec {
    node: usize,
    at: Instant,
    what: String,
}

#[derive(Default)]
struct History {
    conns: Vec<ConnLog>,
    errors: Vec<ErrRec>,
}

/// What the client threads share with the controller.
struct Shared {
    addrs: Vec<Mutex<Option<SocketAddr>>>,
    stop: AtomicBool,
    conn_ids: AtomicU64,
    max_batch: u64,
    pause_us: u64,
}

// ---------------------------------------------------------------- a non-panicking client

struct Client {
    stream: TcpStream,
    buf: BytesMut,
    max_frame: u32,
}

enum Answer {
    Ids(Vec<u64>),
    Error(Status, String),
}

impl Client {
    fn connect(addr: SocketAddr) -> Result<(Client, ServerHello), String> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_millis(1000)))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(Duration::from_millis(1000)))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let mut c = Client {
            stream,
            buf: BytesMut::new(),
            max_frame: max_response_frame(0),
        };
        c.send(&Request::Hello {
            min_version: 1,
            max_version: 1,
        })?;
        let hello = c.recv(|r| match r {
            ResponseRef::HelloOk(h) => Ok(h),
            ResponseRef::Error { status, message } => Err(format!("HELLO: {status} {message}")),
            other => Err(format!("HELLO answered with {other:?}")),
        })??;
        c.max_frame = max_response_frame(hello.max_batch);
        Ok((c, hello))
    }

    fn send(&mut self, req: &Request) -> Result<(), String> {
        let mut out = BytesMut::new();
        encode_request(req, &mut out);
        self.stream
            .write_all(&out)
            .map_err(|e| format!("write: {e}"))
    }

    fn recv<T>(&mut self, f: impl FnOnce(ResponseRef<'_>) -> T) -> Result<T, String> {
        loop {
            match decode_response(&self.buf, self.max_frame) {
                Ok(Some((resp, used))) => {
                    let out = f(resp);
                    let _ = self.buf.split_to(used);
                    return Ok(out);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("bad frame from the server: {e}")),
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("closed by the server".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    fn get_ids(&mut self, n: u32) -> Result<Answer, String> {
        self.send(&Request::GetIds { count: n })?;
        self.recv(|r| match r {
            ResponseRef::Ids(ids) => Ok(Answer::Ids(ids.to_vec())),
            ResponseRef::Error { status, message } => Ok(Answer::Error(status, message.into())),
            other => Err(format!("GET_IDS answered with {other:?}")),
        })?
    }
}

/// One client thread: a connection to `node` at a time, random batch sizes, recording all.
fn client_thread(shared: Arc<Shared>, node: usize, seed: u64) -> History {
    let mut rng = Rng(seed);
    let mut h = History::default();
    let err = |h: &mut History, what: String| {
        h.errors.push(ErrRec {
            node,
            at: Instant::now(),
            what,
        })
    };
    while !shared.stop.load(Ordering::Relaxed) {
        let addr = *shared.addrs[node].lock().unwrap();
        let Some(addr) = addr else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let (mut c, hello) = match Client::connect(addr) {
            Ok(x) => x,
            Err(e) => {
                err(&mut h, e);
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let mut log = ConnLog::new(node, shared.conn_ids.fetch_add(1, Ordering::Relaxed), hello);
        while !shared.stop.load(Ordering::Relaxed) {
            let n = 1 + rng.below(shared.max_batch) as u32;
            match c.get_ids(n) {
                Ok(Answer::Ids(ids)) => {
                    let at = Instant::now();
                    if ids.len() != n as usize {
                        err(&mut h, format!("asked {n} IDs, got {}", ids.len()));
                    }
                    log.push(at, ids);
                }
                Ok(Answer::Error(status, message)) => {
                    err(&mut h, format!("{status}: {message}"));
                    // 3xx: this node cannot serve now; reconnect (a new HELLO) after a pause.
                    std::thread::sleep(Duration::from_millis(20));
                    break;
                }
                Err(e) => {
                    err(&mut h, e);
                    std::thread::sleep(Duration::from_millis(20));
                    break;
                }
            }
            if shared.pause_us > 0 {
                std::thread::sleep(Duration::from_micros(rng.below(shared.pause_us)));
            }
        }
        if log.ids > 0 || !log.batches.is_empty() {
            h.conns.push(log);
        }
    }
    h
}

// ---------------------------------------------------------------- the cluster under test

struct Cluster {
    // Dropped in this order: the nodes first, then etcd, then their directory.
    nodes: Vec<Option<NodeProc>>,
    etcd: EtcdCluster,
    url: String,
    dir: tempfile::TempDir,
    shared: Arc<Shared>,
    base_args: Vec<String>,
}

fn offset_file(dir: &tempfile::TempDir, i: usize) -> PathBuf {
    dir.path().join(format!("faketime-{i}"))
}

impl Cluster {
    fn set_clock(&self, i: usize, offset: &str) {
        std::fs::write(offset_file(&self.dir, i), format!("{offset}\n")).unwrap();
    }

    fn try_start_node(&mut self, i: usize, extra: &[&str]) -> Result<NodeProc, String> {
        let data = self.dir.path().join(format!("data-{i}"));
        std::fs::create_dir_all(&data).unwrap();
        let node_id = format!("n{i}");
        let mut args: Vec<&str> = self.base_args.iter().map(String::as_str).collect();
        args.extend_from_slice(&["--store", &self.url, "--node-id", &node_id]);
        args.extend_from_slice(extra);
        if !extra.contains(&"--shards") {
            args.extend_from_slice(&["--shards", "2"]);
        }
        let offset = offset_file(&self.dir, i);
        if !offset.exists() {
            self.set_clock(i, "+0");
        }
        let offset = offset.to_str().unwrap().to_string();
        NodeProc::try_start_in(
            Some(&data),
            &args,
            &[
                ("LD_PRELOAD", FAKETIME_LIB),
                ("FAKETIME_TIMESTAMP_FILE", &offset),
                ("FAKETIME_NO_CACHE", "1"),
                ("DONT_FAKE_MONOTONIC", "1"),
            ],
        )
    }

    /// Starts node `i` (shards 2 unless `extra` says otherwise) and points its clients at it.
    fn start_node(&mut self, i: usize, extra: &[&str]) -> Result<(), String> {
        let p = self.try_start_node(i, extra)?;
        *self.shared.addrs[i].lock().unwrap() = Some(p.addr);
        self.nodes[i] = Some(p);
        Ok(())
    }

    fn kill9(&mut self, i: usize) {
        *self.shared.addrs[i].lock().unwrap() = None;
        if let Some(mut p) = self.nodes[i].take() {
            p.signal("KILL");
            p.kill();
        }
    }

    fn term(&mut self, i: usize) {
        *self.shared.addrs[i].lock().unwrap() = None;
        if let Some(mut p) = self.nodes[i].take() {
            p.terminate(Duration::from_secs(15));
        }
    }

    fn node(&self, i: usize) -> &NodeProc {
        self.nodes[i].as_ref().expect("node running")
    }

    /// Waits until a fresh connection to every running main node is served.
    fn wait_serving(&self, within: Duration) -> Result<Duration, String> {
        let t = Instant::now();
        for i in 0..MAIN {
            let Some(p) = &self.nodes[i] else { continue };
            loop {
                let ok = Client::connect(p.addr)
                    .and_then(|(mut c, _)| c.get_ids(1))
                    .map(|a| matches!(a, Answer::Ids(_)))
                    .unwrap_or(false);
                if ok {
                    break;
                }
                if t.elapsed() > within {
                    return Err(format!(
                        "node {i} not serving after {within:?}; log:\n{}",
                        common::node::tail(p.log_path())
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(t.elapsed())
    }
}

/// The node's current lease range `(first, count)`, from its last `lease acquired` log line.
fn lease_range(p: &NodeProc) -> Option<(u32, u32)> {
    // The text log may carry ANSI colours: drop `ESC [ … m`.
    let mut log = String::new();
    let mut in_esc = false;
    for ch in p.log().chars() {
        match ch {
            '\u{1b}' => in_esc = true,
            'm' if in_esc => in_esc = false,
            _ if in_esc => {}
            _ => log.push(ch),
        }
    }
    let line = log.lines().rev().find(|l| l.contains("lease acquired"))?;
    let field = |name: &str| -> Option<u32> {
        let rest = &line[line.find(name)? + name.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("worker_first=")?, field("worker_count=")?))
}

// ---------------------------------------------------------------- faults

/// One injected fault, for the report.
struct Fault {
    name: String,
    /// Nodes whose clients are expected to notice (empty: all).
    nodes: Vec<usize>,
    injected: Instant,
    /// When the fault was removed (restart, SIGCONT, clock restored, etcd back).
    cleared: Instant,
    /// End of its observation window (the next fault's start).
    until: Instant,
    notes: Vec<String>,
    expect: Expect,
}

/// What clients must see during a fault.
#[derive(Clone, Copy)]
enum Expect {
    Anything,
    /// No clock refusal (UNAVAILABLE_CLOCK): a step back of 5 ms is waited out. Other errors
    /// in the window come from the node's state after an earlier fault (for example a node
    /// just restarted with its clock behind fails closed on its new lease, with status 300)
    /// and are reported, not blamed on the step.
    NoClockErrors,
    /// Errors with this status text must appear (the clock step back of 10 s: 301).
    Status(&'static str),
    /// Every node fails closed within this long of the injection (store gone).
    FailClosedWithin(Duration),
}

/// The SIGSTOP check: after `cont`, until `released`, node `node` must issue no ID whose
/// timestamp is at or beyond `bound` (ID ms).
struct StopCheck {
    node: usize,
    cont: Instant,
    released: Instant,
    bound_ms: u64,
    /// The node's worker range before the pause, and whether a successor was seen holding it.
    old_range: (u32, u32),
    taken_by_successor: bool,
}

struct Chaos {
    seed: u64,
    c: Cluster,
    faults: Vec<Fault>,
    stop_checks: Vec<StopCheck>,
    rng: Rng,
    last_kill: Instant,
    /// When etcd last got a member back (a restarted cluster, or a new leader, extends every
    /// etcd lease: a dead node's clock key lives on that long again).
    last_store_back: Instant,
}

impl Chaos {
    fn fault(&mut self, name: &str, nodes: Vec<usize>, injected: Instant, notes: Vec<String>) {
        let cleared = Instant::now();
        println!(
            "chaos[{}]: {name} on {nodes:?} ({:.1} s) {}",
            self.seed,
            injected.elapsed().as_secs_f64(),
            notes.join("; ")
        );
        if let Some(prev) = self.faults.last_mut() {
            prev.until = injected;
        }
        self.faults.push(Fault {
            name: name.into(),
            nodes,
            injected,
            cleared,
            until: cleared,
            notes,
            expect: Expect::Anything,
        });
    }

    fn expect(&mut self, e: Expect) {
        self.faults.last_mut().unwrap().expect = e;
    }

    fn settle(&mut self) {
        match self.c.wait_serving(Duration::from_secs(20)) {
            Ok(_) => {}
            Err(e) => panic!("seed {}: {e}", self.seed),
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    /// Waits until killed nodes' leases have expired and passed the safety period, and their
    /// clock keys have expired in etcd.
    fn wait_space_settled(&mut self) {
        // A killed node's worker IDs free up once its lease has passed the safety period
        // *and* its clock key has expired in etcd (etcd counts lease TTLs in whole seconds
        // and checks them twice a second): until then it counts as alive.
        let key_gone = idgen::watch::CLOCK_KEY_TTL + Duration::from_millis(1500);
        let ready = (self.last_kill + (TTL + SAFETY).max(key_gone))
            .max(self.last_store_back + key_gone)
            + Duration::from_millis(700);
        if let Some(d) = ready.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }

    fn kill9_restart(&mut self, i: usize) {
        let t = Instant::now();
        self.c.kill9(i);
        self.last_kill = Instant::now();
        let r = self.c.start_node(i, &[]);
        r.unwrap_or_else(|e| panic!("seed {}: node {i} did not restart: {e}", self.seed));
        let up = t.elapsed();
        self.fault(
            "kill -9 + immediate restart",
            vec![i],
            t,
            vec![format!("restarted in {} ms", ms(up))],
        );
        self.settle();
    }

    fn restart_behind(&mut self, i: usize) {
        let t = Instant::now();
        self.c.kill9(i);
        self.last_kill = Instant::now();
        self.c.set_clock(i, "-5s");
        let r = self.c.start_node(i, &[]);
        r.unwrap_or_else(|e| panic!("seed {}: node {i} did not restart at -5 s: {e}", self.seed));
        let up = t.elapsed();
        self.fault(
            "kill -9 + restart with clock -5 s",
            vec![i],
            t,
            vec![format!("restarted in {} ms", ms(up))],
        );
        self.settle();
        std::thread::sleep(Duration::from_secs(1));
        // Back to true time: a forward step, harmless.
        self.c.set_clock(i, "+0");
    }

    fn clock_back_5ms(&mut self, i: usize) {
        let t = Instant::now();
        self.c.set_clock(i, "-0.005");
        std::thread::sleep(Duration::from_millis(1500));
        self.fault("clock back 5 ms", vec![i], t, vec![]);
        self.expect(Expect::NoClockErrors);
        self.c.set_clock(i, "+0");
        std::thread::sleep(Duration::from_millis(300));
    }

    fn clock_back_10s(&mut self, i: usize) {
        let t = Instant::now();
        self.c.set_clock(i, "-10s");
        std::thread::sleep(Duration::from_millis(1500));
        let admin = self.c.node(i).admin.unwrap();
        let (s, b) = http(admin, "GET", "/health/ready", None);
        self.c.set_clock(i, "+0");
        let note = format!("/health/ready while back: {s} {}", b.trim());
        assert_eq!(s, 503, "seed {}: {note}", self.seed);
        self.fault("clock back 10 s", vec![i], t, vec![note]);
        self.expect(Expect::Status("UNAVAILABLE_CLOCK"));
        self.settle();
    }

    fn forward_1h(&mut self, i: usize) {
        let t = Instant::now();
        self.c.set_clock(i, "+1h");
        let admin = self.c.node(i).admin.unwrap();
        let mut seen = None;
        while t.elapsed() < Duration::from_secs(15) {
            let (s, b) = http(admin, "GET", "/health/ready", None);
            if s == 503 && (b.contains("clock differs") || b.contains("drift")) {
                seen = Some((t.elapsed(), b));
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (after, body) = seen.unwrap_or_else(|| {
            panic!(
                "seed {}: no drift alarm on /health/ready within 15 s of a +1 h step",
                self.seed
            )
        });
        std::thread::sleep(Duration::from_secs(1));
        // And back. The lease end moved at most one TTL per renewal beyond the time that
        // really passed (the monotonic clock), not an hour: the node serves again within
        // seconds instead of failing closed for the hour it jumped.
        self.c.set_clock(i, "+0");
        let back = Instant::now();
        let p = self.c.node(i);
        let recovered = loop {
            let ok = Client::connect(p.addr)
                .and_then(|(mut c, _)| c.get_ids(1))
                .map(|a| matches!(a, Answer::Ids(_)))
                .unwrap_or(false);
            if ok {
                break back.elapsed();
            }
            assert!(
                back.elapsed() < Duration::from_secs(15),
                "seed {}: node {i} not serving 15 s after its clock came back from +1 h (the range was burned)",
                self.seed
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        self.fault(
            "clock forward 1 h, then back",
            vec![i],
            t,
            vec![
                format!("drift alarm after {} ms: {}", ms(after), body.trim()),
                format!(
                    "serving again {} ms after the clock came back",
                    ms(recovered)
                ),
            ],
        );
    }

    fn etcd_member(&mut self) {
        let m = self.rng.below(3) as usize;
        let t = Instant::now();
        self.c.etcd.kill(m);
        std::thread::sleep(Duration::from_secs(3));
        self.fault(
            &format!("etcd member m{m} killed for 3 s"),
            vec![],
            t,
            vec![],
        );
        self.c.etcd.restart(m);
        self.last_store_back = Instant::now();
        self.settle();
    }

    fn etcd_all(&mut self) {
        let t = Instant::now();
        self.c.etcd.stop_all();
        // Past the TTL: every node must run into its ceiling.
        std::thread::sleep(TTL + Duration::from_millis(2000));
        self.c.etcd.start_all();
        self.last_store_back = Instant::now();
        let back = t.elapsed();
        self.fault(
            "whole etcd cluster stopped past the TTL",
            vec![],
            t,
            vec![format!("etcd back after {} ms", ms(back))],
        );
        self.expect(Expect::FailClosedWithin(TTL + Duration::from_millis(1500)));
        let r = self.c.wait_serving(Duration::from_secs(20));
        let d = r.unwrap_or_else(|e| panic!("seed {}: {e}", self.seed));
        if let Some(f) = self.faults.last_mut() {
            f.notes.push(format!(
                "all nodes serving {} ms after etcd came back",
                ms(d)
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    /// SIGSTOP node `i` past its TTL while successors take the worker space (its range too),
    /// then SIGCONT: it must not issue at or beyond its old ceiling.
    fn stop_cont(&mut self, i: usize) {
        self.wait_space_settled();
        let old = lease_range(self.c.node(i)).unwrap_or((0, 0));
        let epoch = Client::connect(self.c.node(i).addr)
            .map(|(_, h)| h.epoch_ms)
            .unwrap_or(0);
        let t = Instant::now();
        self.c.node(i).signal("STOP");
        let stop_unix = unix_ms();
        // Its ceiling is at most (its last renewal ≤ now) + TTL; its clock offset is +0.
        let bound_ms = stop_unix - epoch + ms(TTL);
        // Successor 1 takes the free worker IDs; successor 2 must wait for the paused node's
        // lease to expire and pass the safety period, and takes its range.
        let s1 = self.c.start_node(3, &[]);
        std::thread::sleep(TTL + Duration::from_millis(300));
        let s2 = self.c.start_node(4, &[]);
        let mut notes = vec![
            format!(
                "successor 1: {}",
                if s1.is_ok() { "started" } else { "refused" }
            ),
            format!(
                "successor 2: {}",
                match &s2 {
                    Ok(()) => "started".to_string(),
                    Err(e) => format!("refused: {}", e.lines().last().unwrap_or("")),
                }
            ),
        ];
        let mut taken = false;
        for s in [3, 4] {
            if let Some((f, n)) = self.c.nodes[s].as_ref().and_then(lease_range) {
                if f < old.0 + old.1 && old.0 < f + n {
                    taken = true;
                }
                notes.push(format!("successor n{s} holds workers {f}..{}", f + n));
            }
        }
        std::thread::sleep(Duration::from_millis(500));
        self.c.node(i).signal("CONT");
        let cont = Instant::now();
        // Let the woken node try (and fail) to serve for a while.
        std::thread::sleep(Duration::from_millis(2000));
        let released = Instant::now();
        self.c.term(3);
        self.c.term(4);
        notes.insert(
            0,
            format!(
                "stopped {} ms; old range {}..{}; bound ts < {bound_ms}; range taken by a successor: {taken}",
                ms(cont - t),
                old.0,
                old.0 + old.1
            ),
        );
        self.stop_checks.push(StopCheck {
            node: i,
            cont,
            released,
            bound_ms,
            old_range: old,
            taken_by_successor: taken,
        });
        self.fault("SIGSTOP past the TTL, then SIGCONT", vec![i], t, notes);
        self.settle();
    }

    fn exhaustion(&mut self) {
        self.wait_space_settled();
        let t = Instant::now();
        let r = self.c.try_start_node(5, &["--shards", "3"]);
        let took = t.elapsed();
        let msg = match r {
            Ok(_) => panic!(
                "seed {}: a node asking for 3 worker IDs with 2 free started",
                self.seed
            ),
            Err(e) => e,
        };
        assert!(
            msg.contains("no free range"),
            "seed {}: refusal without the clear message: {msg}",
            self.seed
        );
        assert!(
            took < Duration::from_secs(5),
            "seed {}: refusal took {took:?}: {msg}",
            self.seed
        );
        let line = msg
            .lines()
            .find(|l| l.contains("no free range"))
            .unwrap_or("")
            .trim()
            .to_string();
        self.fault(
            "worker-ID exhaustion (a 4th node asking for 3 of 8 worker IDs)",
            vec![5],
            t,
            vec![format!("refused in {} ms: {line}", ms(took))],
        );
    }
}

// ---------------------------------------------------------------- the run

/// Figures of one run (`run` panics on violations).
struct Summary {
    ids: usize,
    faults: usize,
}

fn run(seed: u64, mixed: Duration, long: bool) -> Summary {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "libfaketime is missing: install Debian's `faketime` (scripts/test does)"
    );
    println!("chaos: seed {seed} (IDGEN_CHAOS_SEED={seed} reproduces), mixed phase {mixed:?}");
    let started = Instant::now();
    let etcd = EtcdCluster::start(3);
    let url = etcd.url(&format!("chaos{seed}"));
    let shared = Arc::new(Shared {
        addrs: (0..SLOTS).map(|_| Mutex::new(None)).collect(),
        stop: AtomicBool::new(false),
        conn_ids: AtomicU64::new(0),
        max_batch: if long { 2000 } else { 100 },
        pause_us: if long { 500 } else { 4000 },
    });
    let base_args: Vec<String> = [
        "--lease-ttl",
        "2s",
        "--lease-safety",
        "2s",
        "--max-drift",
        "30s",
        "--admin-listen",
        "127.0.0.1:0",
        "--timestamp-bits",
        "41",
        "--worker-bits",
        "3",
        "--sequence-bits",
        "19",
        "--shutdown-timeout",
        "3s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cluster = Cluster {
        etcd,
        url,
        dir: tempfile::tempdir().unwrap(),
        nodes: (0..=SLOTS).map(|_| None).collect(),
        shared: Arc::clone(&shared),
        base_args,
    };
    let mut ch = Chaos {
        seed,
        c: cluster,
        faults: Vec::new(),
        stop_checks: Vec::new(),
        rng: Rng(seed),
        last_kill: Instant::now() - Duration::from_secs(60),
        last_store_back: Instant::now() - Duration::from_secs(60),
    };
    for i in 0..MAIN {
        let r = ch.c.start_node(i, &[]);
        r.unwrap_or_else(|e| panic!("seed {seed}: node {i} did not start: {e}"));
    }
    let clients: Vec<_> = (0..SLOTS)
        .flat_map(|node| (0..CLIENTS_PER_NODE).map(move |k| (node, k)))
        .map(|(node, k)| {
            let sh = Arc::clone(&shared);
            let s = seed ^ ((node * 16 + k) as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
            std::thread::spawn(move || client_thread(sh, node, s))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    ch.fault("none (baseline)", vec![], Instant::now(), vec![]);

    // Each fault on its own, on nodes picked by the seed.
    let pick = |rng: &mut Rng| rng.below(MAIN as u64) as usize;
    let n = pick(&mut ch.rng);
    ch.kill9_restart(n);
    let n = pick(&mut ch.rng);
    ch.clock_back_5ms(n);
    let n = pick(&mut ch.rng);
    ch.clock_back_10s(n);
    let n = pick(&mut ch.rng);
    ch.stop_cont(n);
    ch.etcd_member();
    ch.etcd_all();
    let n = pick(&mut ch.rng);
    ch.restart_behind(n);

    // Mixed at random.
    let mixed_end = Instant::now() + mixed;
    while Instant::now() < mixed_end {
        let n = pick(&mut ch.rng);
        match ch.rng.below(7) {
            0 => ch.kill9_restart(n),
            1 => ch.clock_back_5ms(n),
            2 => ch.clock_back_10s(n),
            3 => ch.stop_cont(n),
            4 => ch.etcd_member(),
            5 => ch.etcd_all(),
            _ => ch.restart_behind(n),
        }
    }
    ch.exhaustion();
    let n = pick(&mut ch.rng);
    ch.forward_1h(n);
    std::thread::sleep(Duration::from_millis(500));

    shared.stop.store(true, Ordering::Relaxed);
    let end = Instant::now();
    if let Some(f) = ch.faults.last_mut() {
        f.until = end;
    }
    let mut hist = History::default();
    for c in clients {
        let h = c.join().expect("client thread");
        hist.conns.extend(h.conns);
        hist.errors.extend(h.errors);
    }
    let summary = check(&ch, &hist, started);
    println!(
        "chaos[{seed}]: passed: {} faults, {} IDs",
        summary.faults, summary.ids
    );
    drop(ch);
    summary
}

// ---------------------------------------------------------------- the checks

/// What the safety checks found over a whole history.
#[derive(Debug, Default)]
struct Safety {
    ids: u64,
    runs: usize,
    dups: u64,
    not_increasing: u64,
    outside: u64,
    violations: Vec<String>,
    stop_lines: Vec<String>,
}

/// The safety checks, over everything every client received: no ID twice (as overlaps of
/// runs, sorted per first ID), strictly increasing per connection and inside the connection's
/// HELLO range (counted as the answers arrived), and the paused nodes' ceiling bounds.
fn check_safety(hist: &History, stop_checks: &[StopCheck]) -> Safety {
    let mut out = Safety::default();
    // 1. Duplicates: runs of every connection, sorted by first ID; a run that starts below
    //    the end of the runs before it overlaps them.
    let mut all: Vec<(u64, u32, u32)> = Vec::new();
    for (k, c) in hist.conns.iter().enumerate() {
        out.ids += c.ids;
        all.extend(c.runs.iter().map(|&(first, n)| (first, n, k as u32)));
    }
    out.runs = all.len();
    all.sort_unstable();
    let mut reach: Option<(u64, u32)> = None; // (end of the runs so far, the run reaching it)
    for &(first, n, k) in &all {
        let end = first + u64::from(n);
        if let Some((prev_end, pk)) = reach {
            if first < prev_end {
                let overlap = prev_end.min(end) - first;
                out.dups += overlap;
                if out.violations.len() < 5 {
                    let (a, b) = (&hist.conns[pk as usize], &hist.conns[k as usize]);
                    out.violations.push(format!(
                        "duplicate IDs {first}..{} ({overlap}) on node {} conn {} (workers {}+{}) and node {} conn {} (workers {}+{})",
                        first + overlap,
                        a.node, a.conn, a.hello.worker_first, a.hello.worker_count,
                        b.node, b.conn, b.hello.worker_first, b.hello.worker_count
                    ));
                }
            }
        }
        if reach.is_none_or(|(prev_end, _)| end > prev_end) {
            reach = Some((end, k));
        }
    }
    drop(all);

    // 2. Strictly increasing per connection; 3. worker inside the connection's HELLO range.
    for c in &hist.conns {
        out.not_increasing += c.not_increasing;
        out.outside += c.outside;
        out.violations.extend(c.examples.iter().take(5).cloned());
    }

    // 4. The paused node, after SIGCONT: nothing at or beyond its old ceiling bound until the
    //    successors released the space (only then can it hold a lease again). A run lies in
    //    one millisecond: its first ID's timestamp is every one's.
    for s in stop_checks {
        let (mut after, mut beyond) = (0u64, 0u64);
        for c in hist.conns.iter().filter(|c| c.node == s.node) {
            for (b, &(at, _)) in c.batches.iter().enumerate() {
                if at < s.cont || at >= s.released {
                    continue;
                }
                for &(first, n) in c.batch_runs(b) {
                    after += u64::from(n);
                    if c.hello.decompose(first).ms_since_epoch >= s.bound_ms {
                        beyond += u64::from(n);
                    }
                }
            }
        }
        let line = format!(
            "node {} after SIGCONT (old range {}..{}, taken by a successor: {}): {after} IDs received before the successors left, {beyond} at or beyond the old ceiling bound",
            s.node, s.old_range.0, s.old_range.0 + s.old_range.1, s.taken_by_successor
        );
        if s.taken_by_successor && beyond > 0 {
            out.violations.push(line.clone());
        }
        out.stop_lines.push(line);
    }
    out
}

/// Peak resident memory of this process (the clients and the checker), MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn check(ch: &Chaos, hist: &History, started: Instant) -> Summary {
    let seed = ch.seed;
    let checking = Instant::now();
    let mut safety = check_safety(hist, &ch.stop_checks);
    let check_time = checking.elapsed();
    let mut violations = std::mem::take(&mut safety.violations);
    let stop_lines = &safety.stop_lines;
    let total = safety.ids;
    let (dups, not_increasing, outside) = (safety.dups, safety.not_increasing, safety.outside);

    // Per fault: how long clients saw errors.
    println!("\nchaos[{seed}]: per fault (times from injection; recovery from the last error)");
    println!(
        "{:<70} {:>8} {:>7} {:>10} {:>10} {:>11}",
        "fault", "clear(ms)", "errors", "fail(ms)", "err-span", "recover(ms)"
    );
    for f in &ch.faults {
        let hit = |n: usize| f.nodes.is_empty() || f.nodes.contains(&n);
        let errs: Vec<&ErrRec> = hist
            .errors
            .iter()
            .filter(|e| hit(e.node) && e.at >= f.injected && e.at < f.until)
            .collect();
        let first = errs.iter().map(|e| e.at).min();
        let last = errs.iter().map(|e| e.at).max();
        let recover = last.and_then(|l| {
            hist.conns
                .iter()
                .filter(|c| hit(c.node))
                .flat_map(|c| c.batches.iter().map(|b| b.0))
                .filter(|&t| t > l && t < f.until)
                .min()
                .map(|t| t - l)
        });
        println!(
            "{:<70} {:>8} {:>7} {:>10} {:>10} {:>11}",
            f.name,
            ms(f.cleared - f.injected),
            errs.len(),
            first.map_or("-".into(), |t| ms(t - f.injected).to_string()),
            match (first, last) {
                (Some(a), Some(b)) => ms(b - a).to_string(),
                _ => "-".into(),
            },
            recover.map_or("-".into(), |d| ms(d).to_string()),
        );
        for n in &f.notes {
            println!("    {n}");
        }
        match f.expect {
            Expect::Anything => {}
            Expect::NoClockErrors => {
                let refused = errs
                    .iter()
                    .filter(|e| e.what.contains("UNAVAILABLE_CLOCK"))
                    .count();
                if refused > 0 {
                    violations.push(format!(
                        "{}: {refused} UNAVAILABLE_CLOCK answers, expected the step to be waited out",
                        f.name
                    ));
                }
            }
            Expect::Status(s) => {
                if !errs.iter().any(|e| e.what.contains(s)) {
                    violations.push(format!("{}: no {s} error seen", f.name));
                }
            }
            Expect::FailClosedWithin(d) => {
                for n in 0..MAIN {
                    let first = errs.iter().filter(|e| e.node == n).map(|e| e.at).min();
                    match first {
                        Some(t) if t - f.injected <= d => {}
                        Some(t) => violations.push(format!(
                            "{}: node {n} failed closed only after {} ms (allowed {} ms)",
                            f.name,
                            ms(t - f.injected),
                            ms(d)
                        )),
                        None => {
                            violations.push(format!("{}: node {n} never failed closed", f.name))
                        }
                    }
                }
            }
        }
        let kinds: HashMap<String, usize> = errs.iter().fold(HashMap::new(), |mut m, e| {
            let k: String = e.what.chars().take(40).collect();
            *m.entry(k).or_default() += 1;
            m
        });
        let mut kinds: Vec<_> = kinds.into_iter().collect();
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
        for (k, n) in kinds.iter().take(3) {
            println!("    {n} × {k}");
        }
    }
    for l in stop_lines {
        println!("{l}");
    }
    println!(
        "\nchaos[{seed}]: {} faults, {} connections, {total} IDs checked in {} runs, {dups} duplicates, {not_increasing} not increasing, {outside} outside their HELLO range, {} client errors, {:.1} s; check {:.2} s, peak memory {:.0} MiB",
        ch.faults.len() - 1,
        hist.conns.len(),
        safety.runs,
        hist.errors.len(),
        started.elapsed().as_secs_f64(),
        check_time.as_secs_f64(),
        peak_rss_mib()
    );
    assert!(
        violations.is_empty(),
        "chaos seed {seed} (IDGEN_CHAOS_SEED={seed} reproduces): {} violation(s):\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert!(total > 10_000, "seed {seed}: only {total} IDs issued");
    Summary {
        ids: total as usize,
        faults: ch.faults.len() - 1,
    }
}

fn seed() -> u64 {
    std::env::var("IDGEN_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| unix_ms() ^ u64::from(std::process::id()))
}

/// Short mode: every fault once, a few seconds mixed; well under 90 s.
#[test]
fn chaos_short() {
    let secs = std::env::var("IDGEN_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    run(seed(), Duration::from_secs(secs), false);
}

/// Long mode (release checks): minutes of mixed faults and millions of IDs.
/// `scripts/chaos --long` (IDGEN_CHAOS_SECS, default 300).
#[test]
#[ignore]
fn chaos_long() {
    let secs = std::env::var("IDGEN_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    run(seed(), Duration::from_secs(secs), true);
}

// ---------------------------------------------------------------- the checker's own tests

/// A recorded history the checker must pass, built like the clients build theirs: `conns`
/// connections, each on its own two worker IDs, answering random batches of consecutive IDs
/// (one shard walking its workers within a millisecond), timestamps increasing.
fn synthetic_history(seed: u64, conns: usize) -> History {
    let mut rng = Rng(seed);
    let mut h = History::default();
    let t0 = Instant::now();
    for k in 0..conns {
        let hello = ServerHello {
            version: 1,
            epoch_ms: 1_767_225_600_000,
            timestamp_bits: 41,
            worker_bits: 3,
            sequence_bits: 19,
            region_bits: 0,
            max_batch: 65_536,
            max_request_frame: 64,
            worker_first: (2 * (k % 4)) as u32,
            worker_count: 2,
            shard: 0,
        };
        let mut log = ConnLog::new(k % 3, k as u64, hello);
        // Connections on the same workers use disjoint timestamps (successive holders).
        let mut ts = 1_000_000 + (k as u64 / 4) * 10_000_000;
        for b in 0..200 {
            ts += 1 + rng.below(3);
            let n = 1 + rng.below(400);
            let base = (ts << 22) | (u64::from(hello.worker_first) << 19);
            log.push(t0 + Duration::from_micros(b), base..base + n);
        }
        h.conns.push(log);
    }
    h
}

#[test]
fn the_checker_passes_a_clean_history_and_counts_it_in_runs() {
    let h = synthetic_history(7, 12);
    let s = check_safety(&h, &[]);
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    assert_eq!((s.dups, s.not_increasing, s.outside), (0, 0, 0));
    assert_eq!(s.runs, 12 * 200, "one run per batch: {s:?}");
    assert!(s.ids > 12 * 200 * 100);
}

#[test]
fn the_checker_finds_a_planted_duplicate() {
    for seed in 1..=20u64 {
        let mut h = synthetic_history(seed, 8);
        let mut rng = Rng(seed);
        // An ID some connection received, received again by another connection (later).
        let from = rng.below(8) as usize;
        let mut to = rng.below(8) as usize;
        if to == from {
            to = (to + 1) % 8;
        }
        let (first, n) = h.conns[from].runs[rng.below(200) as usize];
        let dup = first + rng.below(u64::from(n));
        // Keep the receiving connection's own order and range plausible: give it a copy of
        // the source's HELLO, as if it were the same shard after a reconnect.
        h.conns[to].hello = h.conns[from].hello;
        h.conns[to].last = None;
        h.conns[to].push(Instant::now(), [dup]);
        let s = check_safety(&h, &[]);
        assert_eq!(s.dups, 1, "seed {seed}: {s:?}");
        assert!(
            s.violations.iter().any(|v| v.contains("duplicate")),
            "seed {seed}"
        );
    }
}

#[test]
fn the_checker_finds_an_overlap_of_whole_runs() {
    let mut h = synthetic_history(3, 4);
    let (first, n) = h.conns[0].runs[50];
    let hello = h.conns[0].hello;
    h.conns[1].hello = hello;
    h.conns[1].last = None;
    // Half the run again, shifted: an overlap of n / 2 IDs.
    let half = u64::from(n / 2).max(1);
    h.conns[1].push(
        Instant::now(),
        first + u64::from(n) - half..first + u64::from(n) + 10,
    );
    let s = check_safety(&h, &[]);
    assert_eq!(s.dups, half, "{s:?}");
}

#[test]
fn the_checker_finds_an_id_out_of_order_and_one_outside_its_range() {
    for seed in 1..=20u64 {
        let mut h = synthetic_history(seed, 6);
        let mut rng = Rng(seed);
        let k = rng.below(6) as usize;
        let last = h.conns[k].last.unwrap();
        // Below the connection's last ID, but no duplicate: a fresh timestamp far below.
        let back = last - (50_000 << 22);
        h.conns[k].push(Instant::now(), [back]);
        let s = check_safety(&h, &[]);
        assert_eq!(s.not_increasing, 1, "seed {seed}: {s:?}");
        assert_eq!(s.dups, 0, "seed {seed}");
        assert!(s.violations.iter().any(|v| v.contains("not increasing")));

        let mut h = synthetic_history(seed, 6);
        let c = &mut h.conns[k];
        let last = c.last.unwrap();
        // The next millisecond, on a worker outside the connection's two.
        let ts = (last >> 22) + 1;
        let w = (u64::from(c.hello.worker_first) + 2) % 8;
        c.push(Instant::now(), [(ts << 22) | (w << 19)]);
        let s = check_safety(&h, &[]);
        assert_eq!(s.outside, 1, "seed {seed}: {s:?}");
        assert!(s
            .violations
            .iter()
            .any(|v| v.contains("outside its HELLO range")));
    }
}

#[test]
fn the_checker_finds_a_paused_node_issuing_beyond_its_old_ceiling() {
    let mut h = synthetic_history(5, 3);
    let cont = Instant::now();
    let node = h.conns[0].node;
    let last = h.conns[0].last.unwrap();
    let bound_ms = (last >> 22) + 5;
    let w = u64::from(h.conns[0].hello.worker_first);
    h.conns[0].push(
        cont + Duration::from_millis(1),
        [(bound_ms << 22) | (w << 19)],
    );
    let check = StopCheck {
        node,
        cont,
        released: cont + Duration::from_secs(1),
        bound_ms,
        old_range: (0, 2),
        taken_by_successor: true,
    };
    let s = check_safety(&h, &[check]);
    assert!(
        s.violations.iter().any(|v| v.contains("1 at or beyond")),
        "{s:?}"
    );
}
