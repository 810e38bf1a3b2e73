//! One run: start the cluster and the clients, inject every fault once and then mixed at
//! random, stop, check.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checker::check;
use crate::cluster::{renewal_summary, Cluster, Store, StoreKind};
use crate::faults::Chaos;
use crate::history::{History, Shared};
use crate::sequences;
use crate::workload::client_thread;
use crate::{Rng, CLIENTS_PER_NODE, FAKETIME_LIB, MAIN, SLOTS};

/// Figures of one run (`run` panics on violations).
pub(crate) struct Summary {
    pub(crate) ids: usize,
    pub(crate) faults: usize,
}

pub(crate) fn run(kind: StoreKind, seed: u64, mixed: Duration, long: bool) -> Summary {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "libfaketime is missing: install Debian's `faketime` (scripts/test does)"
    );
    println!(
        "chaos: store {kind:?}, seed {seed} (IDGEN_CHAOS_SEED={seed} reproduces), mixed phase {mixed:?}"
    );
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::start(kind, &dir);
    let store_args = store.args(&format!("chaos{seed}"));
    sequences::create(&store_args);
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
        store,
        store_args,
        dir,
        nodes: (0..=SLOTS).map(|_| None).collect(),
        shared: Arc::clone(&shared),
        base_args,
    };
    let mut ch = Chaos {
        seed,
        c: cluster,
        faults: Vec::new(),
        stop_checks: Vec::new(),
        outages: Vec::new(),
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
    let origin = Instant::now();
    let sequence_clients: Vec<_> = (0..MAIN)
        .flat_map(|node| sequences::SEQUENCES.map(|(name, strict)| (node, name, strict)))
        .map(|(node, name, strict)| {
            let sh = Arc::clone(&shared);
            let t = std::thread::spawn(move || sequences::client(sh, node, name, origin));
            (name, strict, t)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    ch.fault("none (baseline)", vec![], Instant::now(), vec![]);

    // The store's two faults: etcd loses one member, then all of them past the TTL;
    // PostgreSQL is restarted (held down under a second), then stopped past the TTL.
    let store_fault = |ch: &mut Chaos, k: usize| match (kind, k) {
        (StoreKind::Etcd, 0) => ch.etcd_member(),
        (StoreKind::Postgres, 0) => ch.store_restart(),
        _ => ch.store_down(),
    };

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
    store_fault(&mut ch, 0);
    store_fault(&mut ch, 1);
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
            4 => store_fault(&mut ch, 0),
            5 => store_fault(&mut ch, 1),
            _ => ch.restart_behind(n),
        }
    }
    ch.exhaustion();
    let n = pick(&mut ch.rng);
    ch.forward_1h(n);
    std::thread::sleep(Duration::from_millis(500));

    for i in 0..MAIN {
        if let Some(p) = &ch.c.nodes[i] {
            println!(
                "chaos[{seed}]: node {i} since its last start: {}",
                renewal_summary(p)
            );
        }
    }
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
    let mut histories: std::collections::BTreeMap<&str, (bool, Vec<_>)> = Default::default();
    for (name, strict, t) in sequence_clients {
        let calls = t.join().expect("sequence client thread");
        histories
            .entry(name)
            .or_insert((strict, Vec::new()))
            .1
            .extend(calls);
    }
    for (name, (strict, calls)) in &histories {
        let answered = sequences::check(seed, name, *strict, calls);
        assert!(answered > 0, "seed {seed}: {name}: no call got a value");
        println!(
            "chaos[{seed}]: sequence {name}: {answered} of {} calls answered, no value twice{}",
            calls.len(),
            if *strict {
                ", real-time order kept"
            } else {
                ""
            }
        );
    }
    let summary = check(&ch, &hist, started);
    println!(
        "chaos[{seed}]: passed: {} faults, {} IDs",
        summary.faults, summary.ids
    );
    drop(ch);
    summary
}
