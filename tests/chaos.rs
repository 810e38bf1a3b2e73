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

/// One client connection's history.
struct ConnLog {
    node: usize,
    conn: u64,
    hello: ServerHello,
    /// Every ID received on this connection, in order.
    ids: Vec<u64>,
    /// (receive time, number of IDs) per IDS frame, in order.
    batches: Vec<(Instant, u32)>,
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
        let mut log = ConnLog {
            node,
            conn: shared.conn_ids.fetch_add(1, Ordering::Relaxed),
            hello,
            ids: Vec::new(),
            batches: Vec::new(),
        };
        while !shared.stop.load(Ordering::Relaxed) {
            let n = 1 + rng.below(shared.max_batch) as u32;
            match c.get_ids(n) {
                Ok(Answer::Ids(ids)) => {
                    let at = Instant::now();
                    if ids.len() != n as usize {
                        err(&mut h, format!("asked {n} IDs, got {}", ids.len()));
                    }
                    log.batches.push((at, ids.len() as u32));
                    log.ids.extend_from_slice(&ids);
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
        if !log.ids.is_empty() || !log.batches.is_empty() {
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

    /// Waits until killed nodes' leases have expired and passed the safety period.
    fn wait_space_settled(&mut self) {
        let ready = self.last_kill + TTL + SAFETY + Duration::from_millis(700);
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
                format!("serving again {} ms after the clock came back", ms(recovered)),
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
        self.settle();
    }

    fn etcd_all(&mut self) {
        let t = Instant::now();
        self.c.etcd.stop_all();
        // Past the TTL: every node must run into its ceiling.
        std::thread::sleep(TTL + Duration::from_millis(2000));
        self.c.etcd.start_all();
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
            "seed {}: refusal took {took:?}",
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

fn check(ch: &Chaos, hist: &History, started: Instant) -> Summary {
    let seed = ch.seed;
    let mut violations: Vec<String> = Vec::new();
    let total: usize = hist.conns.iter().map(|c| c.ids.len()).sum();

    // 1. Duplicates, over everything every client received.
    let mut all: Vec<(u64, u32)> = Vec::with_capacity(total);
    for (k, c) in hist.conns.iter().enumerate() {
        all.extend(c.ids.iter().map(|&id| (id, k as u32)));
    }
    all.sort_unstable();
    let mut dups = 0usize;
    for w in all.windows(2) {
        if w[0].0 == w[1].0 {
            dups += 1;
            if dups <= 5 {
                let (a, b) = (&hist.conns[w[0].1 as usize], &hist.conns[w[1].1 as usize]);
                violations.push(format!(
                    "duplicate ID {} on node {} conn {} (workers {}+{}) and node {} conn {} (workers {}+{})",
                    w[0].0, a.node, a.conn, a.hello.worker_first, a.hello.worker_count,
                    b.node, b.conn, b.hello.worker_first, b.hello.worker_count
                ));
            }
        }
    }
    drop(all);

    // 2. Strictly increasing per connection; 3. worker inside the connection's HELLO range.
    let (mut not_increasing, mut outside) = (0usize, 0usize);
    for c in &hist.conns {
        let h = &c.hello;
        for w in c.ids.windows(2) {
            if w[1] <= w[0] {
                not_increasing += 1;
                if not_increasing <= 5 {
                    violations.push(format!(
                        "node {} conn {}: {} after {} (not increasing)",
                        c.node, c.conn, w[1], w[0]
                    ));
                }
            }
        }
        let (lo, hi) = (
            u64::from(h.worker_first),
            u64::from(h.worker_first) + u64::from(h.worker_count),
        );
        for &id in &c.ids {
            let p = h.decompose(id);
            if !(lo..hi).contains(&p.worker) || id >> 63 != 0 {
                outside += 1;
                if outside <= 5 {
                    violations.push(format!(
                        "node {} conn {}: ID {id} has worker {} outside its HELLO range {lo}..{hi}",
                        c.node, c.conn, p.worker
                    ));
                }
            }
        }
    }

    // 4. The paused node, after SIGCONT: nothing at or beyond its old ceiling bound until the
    //    successors released the space (only then can it hold a lease again).
    let mut stop_lines = Vec::new();
    for s in &ch.stop_checks {
        let (mut after, mut beyond) = (0usize, 0usize);
        for c in hist.conns.iter().filter(|c| c.node == s.node) {
            let mut idx = 0usize;
            for &(at, n) in &c.batches {
                let ids = &c.ids[idx..idx + n as usize];
                idx += n as usize;
                if at < s.cont || at >= s.released {
                    continue;
                }
                after += ids.len();
                for &id in ids {
                    if c.hello.decompose(id).ms_since_epoch >= s.bound_ms {
                        beyond += 1;
                    }
                }
            }
        }
        let line = format!(
            "node {} after SIGCONT (old range {}..{}, taken by a successor: {}): {after} IDs received before the successors left, {beyond} at or beyond the old ceiling bound",
            s.node, s.old_range.0, s.old_range.0 + s.old_range.1, s.taken_by_successor
        );
        if s.taken_by_successor && beyond > 0 {
            violations.push(line.clone());
        }
        stop_lines.push(line);
    }

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
    for l in &stop_lines {
        println!("{l}");
    }
    println!(
        "\nchaos[{seed}]: {} faults, {} connections, {total} IDs checked, {dups} duplicates, {not_increasing} not increasing, {outside} outside their HELLO range, {} client errors, {:.1} s",
        ch.faults.len() - 1,
        hist.conns.len(),
        hist.errors.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        violations.is_empty(),
        "chaos seed {seed} (IDGEN_CHAOS_SEED={seed} reproduces): {} violation(s):\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert!(total > 10_000, "seed {seed}: only {total} IDs issued");
    Summary {
        ids: total,
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
