//! Server nodes (the real `idgen serve` binary) and embedded generators
//! (`idgen_core::embedded::Embedded`, one on its own thread, one on this test's runtime) share
//! one worker space on one real etcd, under faults: a node killed with SIGKILL and restarted at
//! once, an embedded generator dropped and another started in its place, and etcd stopped for
//! longer than a lease TTL, during which every embedded generator fails closed (never past the
//! lease end it committed before the outage), then serves again. Every ID any of them issued,
//! over the whole run, is distinct. Lease TTL 1.5 s throughout.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::node::NodeProc;
use common::wall_ms;
use idgen_core::embedded::{Embedded, EmbeddedConfig, EmbeddedError};
use idgen_core::store::etcd::EtcdStore;
use idgen_core::store::{KvStore, StoreAccess, StoreUrl};
use idgen_id::{Id, Layout};
use idgen_protocol::client::Handshake;
use idgen_testkit::{TestConn, Timeouts};

const TTL_MS: u64 = 1500;
const TTL: &str = "1500ms";
const PREFIX: &str = "idgen-mixed";
const BATCH: u32 = 32;

/// What one member issued: each call's IDs with the wall clock when the call began and ended,
/// and the failed calls' times and errors.
#[derive(Default)]
struct History {
    ok: Vec<(u64, u64, Vec<u64>)>,
    failed: Vec<(u64, u64, String)>,
}

/// A thread drawing IDs from one member until told to stop (a node's ends with its
/// connection, when the node is killed).
struct Source {
    name: String,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    thread: Option<JoinHandle<()>>,
}

impl Source {
    fn spawn(
        name: &str,
        mut draw: impl FnMut() -> Result<Vec<u64>, String> + Send + 'static,
    ) -> Source {
        let stop = Arc::new(AtomicBool::new(false));
        let history = Arc::new(Mutex::new(History::default()));
        let thread = {
            let (stop, history) = (Arc::clone(&stop), Arc::clone(&history));
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let began = wall_ms();
                    let result = draw();
                    let ended = wall_ms();
                    let mut h = history.lock().unwrap();
                    match result {
                        Ok(ids) => h.ok.push((began, ended, ids)),
                        Err(e) if e.starts_with("transport") => return,
                        Err(e) => h.failed.push((began, ended, e)),
                    }
                    drop(h);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        };
        Source {
            name: name.to_string(),
            stop,
            history,
            thread: Some(thread),
        }
    }

    /// A node's: a connection that is closed (a node closes on some refusals) is opened
    /// again; one that cannot be opened (the node is gone) ends the source.
    fn node(name: &str, node: &NodeProc) -> Source {
        let addr = node.addr;
        let mut conn = Some(TestConn::open(addr));
        Self::spawn(name, move || {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => conn.insert(
                    TestConn::try_open(addr, Handshake::offering(1, 1), Timeouts::default())
                        .map_err(|e| format!("transport: {e}"))?,
                ),
            };
            match c.try_get_ids(BATCH) {
                Ok(Ok(ids)) => Ok(ids),
                Ok(Err((status, msg))) => Err(format!("{status:?}: {msg}")),
                Err(e) => {
                    conn = None;
                    Err(format!("reconnect after: {e}"))
                }
            }
        })
    }

    fn embedded(name: &str, ids: Arc<Embedded>) -> Source {
        Self::spawn(name, move || {
            let mut out = vec![0u64; BATCH as usize];
            match ids.next_batch(&mut out) {
                Ok(()) => Ok(out),
                Err(e @ (EmbeddedError::LeaseExpired { .. } | EmbeddedError::NoLease)) => {
                    Err(format!("closed: {e}"))
                }
                Err(e) => Err(format!("other: {e}")),
            }
        })
    }

    fn finish(mut self) -> (String, History) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("source thread");
        }
        let h = std::mem::take(&mut *self.history.lock().unwrap());
        (self.name, h)
    }
}

fn node(cluster: &EtcdCluster, node_id: &str) -> NodeProc {
    let url = cluster.url(PREFIX);
    NodeProc::start(&[
        "--store",
        &url,
        "--node-id",
        node_id,
        "--lease-ttl",
        TTL,
        "--shards",
        "1",
    ])
}

fn config(node_id: &str) -> EmbeddedConfig {
    EmbeddedConfig {
        ttl: Duration::from_millis(TTL_MS),
        safety: Duration::from_millis(2 * TTL_MS),
        node_id: Some(node_id.to_string()),
        ..EmbeddedConfig::default()
    }
}

fn wall_of(layout: Layout, id: u64) -> u64 {
    layout.decompose(Id(id)).timestamp + layout.epoch_ms()
}

#[test]
fn nodes_and_embedded_generators_share_one_worker_space_on_etcd_under_faults() {
    let mut cluster = EtcdCluster::start(1);
    let layout = Layout::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url: StoreUrl = cluster.url(PREFIX).parse().unwrap();
    let mut done: Vec<(String, History)> = Vec::new();

    let mut node_a = node(&cluster, "node-a");
    let node_b = node(&cluster, "node-b");
    // One embedded generator on a thread of its own, which opens the store itself; one on
    // this test's runtime, on a store opened there.
    let e1 = Arc::new(
        Embedded::start_blocking(&url, &StoreAccess::default(), "default", config("emb-1"))
            .expect("embedded generator on its own thread"),
    );
    let store: Arc<dyn KvStore> = Arc::new(
        rt.block_on(EtcdStore::connect(cluster.endpoints(), PREFIX.into()))
            .unwrap(),
    );
    let e2 = Arc::new(
        rt.block_on(Embedded::start(
            Arc::clone(&store),
            "default",
            config("emb-2"),
        ))
        .expect("embedded generator on the runtime"),
    );
    // The embedded generators publish their clock keys, as nodes do: acquirers see them alive.
    let clocks = rt.block_on(store.scan(b"idgen/default/clocks/")).unwrap();
    for who in ["emb-1", "emb-2", "node-a", "node-b"] {
        assert!(
            clocks
                .iter()
                .any(|e| String::from_utf8_lossy(&e.value)
                    .contains(&format!("\"node_id\":\"{who}\""))),
            "no clock key for {who}: {clocks:?}"
        );
    }
    let mut sources = vec![
        Source::node("node-a", &node_a),
        Source::node("node-b", &node_b),
        Source::embedded("emb-1", Arc::clone(&e1)),
        Source::embedded("emb-2", Arc::clone(&e2)),
    ];
    std::thread::sleep(Duration::from_millis(1500));

    // Fault 1: node-a is killed and restarted at once under the same name.
    node_a.kill();
    done.push(sources.remove(0).finish());
    node_a = node(&cluster, "node-a");
    sources.push(Source::node("node-a (restarted)", &node_a));

    // Fault 2: emb-2 is dropped (it releases its lease) and emb-3 starts in its place.
    let i = sources.iter().position(|s| s.name == "emb-2").unwrap();
    done.push(sources.remove(i).finish());
    drop(Arc::into_inner(e2).expect("the source thread let go of emb-2"));
    let e3 = Arc::new(
        rt.block_on(Embedded::start(
            Arc::clone(&store),
            "default",
            config("emb-3"),
        ))
        .expect("emb-3"),
    );
    sources.push(Source::embedded("emb-3", Arc::clone(&e3)));
    std::thread::sleep(Duration::from_millis(1000));

    // Fault 3: etcd stops for longer than a TTL (shorter than TTL + safety).
    cluster.stop_all();
    // Any renewal that committed did so before this instant, with a clock reading before it.
    let stopped = wall_ms();
    std::thread::sleep(Duration::from_millis(TTL_MS + 2000));
    let restarting = wall_ms();
    cluster.start_all();
    // Every member serves again.
    let back = Instant::now();
    for who in ["emb-1", "emb-3", "node-b", "node-a (restarted)"] {
        let s = sources.iter().find(|s| s.name == who).unwrap();
        while !s
            .history
            .lock()
            .unwrap()
            .ok
            .iter()
            .any(|(b, _, _)| *b > restarting)
        {
            assert!(
                back.elapsed() < Duration::from_secs(15),
                "{who} not serving 15 s after etcd returned; node-b's log:\n{}",
                common::node::tail(node_b.log_path())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    done.extend(sources.into_iter().map(Source::finish));

    // The embedded generators failed closed during the outage: nothing at or past the lease
    // end committed before it, and once refused, refused until etcd was back.
    for (name, h) in done.iter().filter(|(n, _)| *n == "emb-1" || *n == "emb-3") {
        let first_refusal = h
            .failed
            .iter()
            .filter(|(b, _, e)| *b >= stopped && e.starts_with("closed"))
            .map(|(b, _, _)| *b)
            .min()
            .unwrap_or_else(|| panic!("{name} never failed closed while etcd was down"));
        assert!(
            first_refusal <= stopped + TTL_MS + 1000,
            "{name} first refused {} ms after etcd stopped",
            first_refusal - stopped
        );
        for (began, ended, ids) in &h.ok {
            if *ended > stopped && *began < restarting {
                for &id in ids {
                    let at = wall_of(layout, id);
                    assert!(
                        at < stopped + TTL_MS,
                        "{name} issued {id} at {at}, past any lease end committed before etcd stopped at {stopped}"
                    );
                }
                assert!(
                    *began < first_refusal || *began >= restarting,
                    "{name} served again at {began} after refusing at {first_refusal}, etcd still down"
                );
            }
        }
        assert!(
            h.failed.iter().all(|(_, _, e)| e.starts_with("closed")),
            "{name}: {:?}",
            h.failed.iter().find(|(_, _, e)| !e.starts_with("closed"))
        );
    }

    // Uniqueness over the whole history of every member.
    let mut all = HashSet::new();
    let mut total = 0usize;
    for (name, h) in &done {
        let n: usize = h.ok.iter().map(|(_, _, ids)| ids.len()).sum();
        assert!(n > 0, "{name} issued nothing");
        for (_, _, ids) in &h.ok {
            for &id in ids {
                assert!(all.insert(id), "ID {id} issued twice (last by {name})");
            }
        }
        total += n;
        eprintln!("{name}: {n} IDs, {} refused calls", h.failed.len());
    }
    assert_eq!(all.len(), total);

    let e1 = Arc::into_inner(e1).expect("emb-1 is no longer shared");
    e1.shutdown_blocking().expect("emb-1 releases");
    let e3 = Arc::into_inner(e3).expect("emb-3 is no longer shared");
    rt.block_on(e3.shutdown()).expect("emb-3 releases");
    drop(node_a);
    drop(node_b);
}
