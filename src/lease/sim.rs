//! Deterministic simulation of many nodes leasing worker IDs from one store, with crashes,
//! restarts, zombies (an old process that keeps running after its replacement started),
//! partitions, clocks that run fast, slow and jump, and a store that fails or answers
//! "unknown". Time and the order of every operation are under the test's control (a seeded
//! PRNG), so a failure names a seed that reproduces it exactly.
//!
//! Checked across all of it, for every worker ID:
//! - two grants (generations) never issue the same timestamp, and a newer grant's
//!   timestamps are all above an older grant's (disjoint, ordered intervals);
//! - a new grant's floor is at or above every timestamp ever issued for the worker IDs it
//!   covers (no interval starts at or below the previous holder's `lease_end`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;
use crate::layout::DEFAULT_EPOCH_MS;
use crate::store::memory::{Fault, MemoryStore};
use crate::store::{BoxFuture, Check, Entry, Write};

/// A node's path to the shared store; can be cut (a partition).
struct Link {
    store: Arc<MemoryStore>,
    cut: AtomicBool,
}

impl Link {
    fn check(&self) -> Result<(), StoreError> {
        if self.cut.load(Ordering::Relaxed) {
            Err(StoreError::Unavailable("partitioned".into()))
        } else {
            Ok(())
        }
    }
}

impl KvStore for Link {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        match self.check() {
            Ok(()) => self.store.get(key),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        match self.check() {
            Ok(()) => self.store.scan(prefix),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        match self.check() {
            Ok(()) => self.store.commit(checks, writes),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn describe(&self) -> String {
        "sim link".into()
    }
}

/// xorshift64*: small, deterministic, good enough to drive a simulation.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Process {
    name: usize,
    instance: u32,
    link: Arc<Link>,
    /// Clock offset from true time, ms (changes by jumps and by drift).
    offset: i64,
    /// Extra ms the clock gains (or loses) per second of true time.
    drift_per_s: i64,
    grant: Option<Grant>,
    /// Steps until a cut link heals.
    cut_for: u32,
    /// The ceiling as the process knows it: the last lease_end it saw committed.
    ceiling: u64,
    /// Last timestamp issued under the current grant (the generator never goes back).
    last_issued: Option<u64>,
}

const TTL_MS: u64 = 3_000;
const WORKERS_PER_NODE: u64 = 2;

struct Sim {
    rng: Rng,
    store: Arc<MemoryStore>,
    layout: Layout,
    processes: Vec<Process>,
    /// True time, Unix ms.
    now: u64,
    /// worker → generation → (min ts, max ts) issued.
    issued: HashMap<u64, BTreeMap<u64, (u64, u64)>>,
    total_issued: u64,
    grants: u64,
    acquire_errors: HashMap<&'static str, u64>,
    /// Steps until the store comes back.
    down_for: u32,
}

impl Sim {
    fn new(seed: u64) -> Self {
        // 8 worker IDs: small enough that nodes contend and ranges get reused.
        let layout = Layout::new(DEFAULT_EPOCH_MS, 48, 3, 12, 0).unwrap();
        let store = Arc::new(MemoryStore::new());
        let mut sim = Sim {
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            store,
            layout,
            processes: Vec::new(),
            now: DEFAULT_EPOCH_MS + 10_000_000,
            issued: HashMap::new(),
            total_issued: 0,
            grants: 0,
            acquire_errors: HashMap::new(),
            down_for: 0,
        };
        for name in 0..3 {
            sim.spawn(name, 0);
        }
        sim
    }

    fn spawn(&mut self, name: usize, offset: i64) {
        let instance = self.processes.iter().filter(|p| p.name == name).count() as u32;
        self.processes.push(Process {
            name,
            instance,
            link: Arc::new(Link {
                store: Arc::clone(&self.store),
                cut: AtomicBool::new(false),
            }),
            offset,
            drift_per_s: 0,
            grant: None,
            cut_for: 0,
            ceiling: 0,
            last_issued: None,
        });
    }

    fn clock(&self, p: usize) -> u64 {
        self.now.saturating_add_signed(self.processes[p].offset)
    }

    fn leases(&self, p: usize) -> Leases<'_> {
        let proc_ = &self.processes[p];
        let mut config = LeaseConfig::new("sim", WORKERS_PER_NODE);
        config.ttl = std::time::Duration::from_millis(TTL_MS);
        config.safety = std::time::Duration::from_millis(2 * TTL_MS);
        config.max_attempts = 3;
        let owner = Owner {
            node_id: format!("node{}", proc_.name),
            host: "sim".into(),
            pid: proc_.instance,
            started_unix_ms: 0,
            instance: format!("node{}#{}", proc_.name, proc_.instance),
        };
        Leases::new(proc_.link.as_ref(), self.layout, config, owner)
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        // The memory store answers synchronously, so every lease future completes on its first
        // poll; anything else would be a bug in the simulation.
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("a simulated store operation did not complete"),
        }
    }

    fn acquire(&mut self, p: usize) {
        if self.processes[p].grant.is_some() {
            return;
        }
        let now = self.clock(p);
        let result = Self::block_on(self.leases(p).acquire(now));
        if let Err(e) = &result {
            let kind = match e {
                LeaseError::NoFreeRange { .. } => "nofree",
                LeaseError::Store(StoreError::Unavailable(m)) if m == "partitioned" => {
                    "partitioned"
                }
                LeaseError::Store(StoreError::Unavailable(m)) if m.contains("down") => "down",
                LeaseError::Store(_) => "store-injected",
                LeaseError::Contention { .. } => "contention",
                _ => "other",
            };
            *self.acquire_errors.entry(kind).or_default() += 1;
        }
        if let Ok(g) = result {
            // Invariant: the floor is at or above everything ever issued for these workers.
            for w in g.first..g.first + g.count {
                if let Some(gens) = self.issued.get(&w) {
                    let max = gens.values().map(|(_, hi)| *hi).max().unwrap_or(0);
                    assert!(
                        g.floor >= max,
                        "grant {g:?} floor below ts {max} already issued for worker {w}"
                    );
                }
            }
            self.grants += 1;
            let proc_ = &mut self.processes[p];
            proc_.ceiling = g.lease_end;
            proc_.grant = Some(g);
            proc_.last_issued = None;
        }
    }

    fn renew(&mut self, p: usize) {
        let Some(grant) = self.processes[p].grant.clone() else {
            return;
        };
        let now = self.clock(p);
        match Self::block_on(self.leases(p).renew(&grant, now)) {
            Ok(end) => {
                let proc_ = &mut self.processes[p];
                proc_.ceiling = proc_.ceiling.max(end);
                if let Some(g) = proc_.grant.as_mut() {
                    g.lease_end = end;
                }
            }
            Err(LeaseError::Lost(_)) => {
                let proc_ = &mut self.processes[p];
                proc_.grant = None;
                proc_.ceiling = 0;
            }
            Err(_) => {} // fail closed: the ceiling stays where it was
        }
    }

    fn release(&mut self, p: usize) {
        let Some(grant) = self.processes[p].grant.clone() else {
            return;
        };
        let now = self.clock(p);
        let last = self.processes[p].last_issued;
        // Shards stop before the release is attempted, whatever its outcome: the process no
        // longer issues under this grant (it exits).
        let proc_ = &mut self.processes[p];
        proc_.grant = None;
        proc_.ceiling = 0;
        let _ = Self::block_on(self.leases(p).release(&grant, last, now));
    }

    /// The process issues IDs at its clock, as its generator would.
    fn issue(&mut self, p: usize) {
        let id_now = self.clock(p).saturating_sub(self.layout.epoch_ms());
        let proc_ = &mut self.processes[p];
        let Some(g) = proc_.grant.clone() else {
            return;
        };
        if id_now <= g.floor || id_now >= proc_.ceiling {
            return; // below the floor (waits) or at the ceiling (unavailable)
        }
        if proc_.last_issued.is_some_and(|last| id_now < last) {
            return; // clock behind its last timestamp: the generator waits or refuses
        }
        proc_.last_issued = Some(id_now);
        self.total_issued += 1;
        for w in g.first..g.first + g.count {
            let gens = self.issued.entry(w).or_default();
            for (&gen, &(lo, hi)) in gens.iter() {
                if gen < g.generation {
                    assert!(
                        hi < id_now,
                        "worker {w}: generation {} issued ts {id_now} at or below ts {hi} of older generation {gen}",
                        g.generation
                    );
                } else if gen > g.generation {
                    assert!(
                        lo > id_now,
                        "worker {w}: generation {} issued ts {id_now} at or above ts {lo} of newer generation {gen}",
                        g.generation
                    );
                }
            }
            let e = gens.entry(g.generation).or_insert((id_now, id_now));
            e.0 = e.0.min(id_now);
            e.1 = e.1.max(id_now);
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now += ms;
        for proc_ in &mut self.processes {
            proc_.offset += proc_.drift_per_s * ms as i64 / 1000;
        }
    }

    fn heal(&mut self) {
        if self.down_for > 0 {
            self.down_for -= 1;
            if self.down_for == 0 {
                self.store.set_down(false);
            }
        }
        for proc_ in &mut self.processes {
            if proc_.cut_for > 0 {
                proc_.cut_for -= 1;
                if proc_.cut_for == 0 {
                    proc_.link.cut.store(false, Ordering::Relaxed);
                }
            }
        }
    }

    fn step(&mut self) {
        self.heal();
        let n = self.processes.len();
        let mut p = self.rng.below(n as u64) as usize;
        let action = self.rng.below(100);
        if (25..=74).contains(&action) {
            // Renewing and issuing are what holders do: aim them at holders, mostly.
            let holders: Vec<usize> = (0..n)
                .filter(|&i| self.processes[i].grant.is_some())
                .collect();
            if !holders.is_empty() && self.rng.chance(80) {
                p = holders[self.rng.below(holders.len() as u64) as usize];
            }
        }
        match action {
            0..=19 => {
                let ms = self.rng.below(TTL_MS / 2);
                self.advance(ms);
            }
            20..=24 => self.acquire(p),
            25..=44 => self.renew(p),
            45..=74 => self.issue(p),
            75..=77 => self.release(p),
            78..=79 => {
                // Crash and restart: a new process under the same name starts at once. The
                // old one either died or keeps running as a zombie (a paused VM, say).
                let name = self.processes[p].name;
                let offset = self.processes[p].offset;
                if self.rng.chance(50) || self.processes.len() > 8 {
                    self.processes[p].grant = None;
                }
                if self.processes.len() <= 8 {
                    self.spawn(name, offset);
                }
            }
            81..=84 => {
                // Clock jumps: small or large, either way.
                let span = if self.rng.chance(50) { 50 } else { 4 * TTL_MS };
                let jump = self.rng.below(2 * span) as i64 - span as i64;
                self.processes[p].offset += jump;
            }
            85..=86 => {
                // Clock runs fast or slow.
                self.processes[p].drift_per_s = self.rng.below(401) as i64 - 200;
            }
            87..=89 => {
                // A partition between this process and the store, for a while.
                let steps = 1 + self.rng.below(40) as u32;
                let proc_ = &mut self.processes[p];
                proc_.cut_for = steps;
                proc_.link.cut.store(true, Ordering::Relaxed);
            }
            90..=93 if self.store.pending_faults() == 0 => {
                let fault = match self.rng.below(3) {
                    0 => Fault::Unavailable,
                    1 => Fault::UnknownApplied,
                    _ => Fault::UnknownLost,
                };
                self.store.inject(fault);
            }
            94..=95 => {
                // The whole store is down for a while.
                self.down_for = 1 + self.rng.below(30) as u32;
                self.store.set_down(true);
            }
            _ => {
                // A quiet spell: time passes with nobody renewing.
                let ms = TTL_MS + self.rng.below(3 * TTL_MS);
                self.advance(ms);
            }
        }
    }
}

#[test]
fn fenced_leases_never_overlap_across_seeds() {
    let seeds: u64 = std::env::var("IDGEN_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut total_issued = 0;
    let mut total_grants = 0;
    for seed in 0..seeds {
        let mut sim = Sim::new(seed);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for _ in 0..1_000 {
                sim.step();
            }
            (sim.total_issued, sim.grants)
        }));
        match result {
            Ok((issued, grants)) => {
                total_issued += issued;
                total_grants += grants;
            }
            Err(e) => std::panic::resume_unwind(Box::new(format!(
                "simulation seed {seed} failed: {}",
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ))),
        }
    }
    eprintln!("simulation: {seeds} seeds, {total_grants} grants, {total_issued} issue steps");
    // The simulation must actually exercise reuse: many grants and many issued timestamps.
    assert!(
        total_grants > seeds * 5,
        "only {total_grants} grants in {seeds} seeds"
    );
    assert!(
        total_issued > seeds * 40,
        "only {total_issued} issues in {seeds} seeds"
    );
}

/// The same invariant checker must catch an unsafe lease: a grant whose floor ignores the
/// previous holder (here, forged by rewriting the stored lease_end downwards).
#[test]
#[should_panic(expected = "floor below ts")]
fn the_simulation_catches_a_broken_floor() {
    let mut sim = Sim::new(7);
    sim.acquire(0);
    sim.advance(10);
    sim.issue(0);
    let g = sim.processes[0].grant.clone().unwrap();
    // Forge: the records say the lease ended long ago and was released, and (so that no
    // never-used range is preferred) that the whole worker space was.
    let leases = sim.leases(0);
    let mut recs = Sim::block_on(leases.ranges()).unwrap();
    for (id, rec) in recs.iter_mut() {
        rec.lease_end = 0;
        rec.state = WorkerState::Released;
        rec.count = sim.layout.worker_count() - *id;
        let key = leases.worker_key(*id);
        Sim::block_on(sim.store.commit(
            &[],
            &[Write::Put {
                key,
                value: serde_json::to_vec(&rec).unwrap(),
            }],
        ))
        .unwrap();
    }
    drop(leases);
    // Process 1 now takes the lowest "free" range, which is process 0's: the checker must
    // refuse the grant's floor.
    assert_eq!(g.first, 0);
    sim.acquire(1);
}
