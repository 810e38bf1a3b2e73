//! Fault injection across nodes, clocks and the store, with a Jepsen-style history check.
//!
//! [`run`] starts a coordination store and three `idgen serve` nodes on it (two shards each,
//! lease TTL 2 s, safety 2 s, each under libfaketime with its own offset file), drives them
//! with client threads that record every ID they receive (node, connection, the connection's
//! HELLO_OK worker range, receive time), and injects faults: first each on its own, then mixed
//! at random by a seeded PRNG. The store is a three-member etcd cluster ([`chaos_short`]) or
//! one PostgreSQL server ([`chaos_postgres_short`]); the node faults, the workload and the
//! checks are the same on both, the store faults are the store's own (etcd: one member killed
//! for 3 s, the whole cluster stopped past the TTL; PostgreSQL: the server restarted under
//! load, and stopped past the TTL). At the end it checks the whole history:
//!
//! - no ID was received twice (across all nodes and connections);
//! - IDs are strictly increasing per connection;
//! - every ID decodes (with the HELLO_OK layout) to a worker inside its connection's range;
//! - a node SIGSTOPped past its TTL, whose range a successor took meanwhile, issues no ID at
//!   or beyond its old ceiling bound (`STOP time + TTL`) after SIGCONT;
//! - while the whole store is down, no node issues an ID at or beyond the stop time + TTL;
//!   stopped past the TTL, every node fails closed (`UNAVAILABLE_LEASE`) within TTL + 1.5 s
//!   and serves again on its own within [`RECOVER_WITHIN`] of the store's return;
//!
//! and reports per fault how long clients saw errors (time to fail closed, time to recover).
//! Named sequences run beside the IDs under the same faults ([`sequences`]): no value twice,
//! and the strict sequence's real-time order.
//! Any violation panics with the seed. `IDGEN_CHAOS_SEED` fixes the seed,
//! `IDGEN_CHAOS_SECS` the length of the mixed phase; `scripts/chaos` wraps both (and
//! `--store postgres`). The runs of this binary take turns ([`one_run_at_a_time`]): two
//! clusters at once on a small machine would measure each other.
//!
//! The modules follow the run: [`cluster`] (the store and the nodes under libfaketime),
//! [`workload`] (the client threads), [`history`] (what they recorded), [`faults`] (each fault
//! and what clients must see), [`scenario`] (one run, start to end) and [`checker`] (the checks
//! over the whole history, and the checker's own tests).
//!
//! The worker space is deliberately tight (`--worker-bits 3`: 8 worker IDs for 3 × 2 shards),
//! so that restarted nodes and successors reuse each other's worker IDs, fenced by their
//! stored `lease_end`, and so that a fourth node is refused.

#[path = "../common/mod.rs"]
mod common;

mod checker;
mod cluster;
mod faults;
mod history;
mod scenario;
mod sequences;
mod workload;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cluster::StoreKind;
use scenario::run;

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
const TTL: Duration = Duration::from_secs(2);
const SAFETY: Duration = Duration::from_secs(2);
/// How soon after the whole store's return every node must serve again. Both stores bound
/// each call by 3 s and a node retries its lease every TTL / 10 (200 ms), so a few seconds
/// at most; 10 s leaves room for a loaded 2-core machine.
const RECOVER_WITHIN: Duration = Duration::from_secs(10);
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

fn seed() -> u64 {
    std::env::var("IDGEN_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| unix_ms() ^ u64::from(std::process::id()))
}

/// The mixed phase's length: `IDGEN_CHAOS_SECS`, else `default` seconds.
fn mixed_secs(default: u64) -> Duration {
    let secs = std::env::var("IDGEN_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

/// One run at a time in this binary (the test harness runs tests on parallel threads): each
/// run's nodes, store and clients get the machine to themselves. A run that panicked leaves
/// nothing behind (its processes are dropped), so the next one goes ahead.
fn one_run_at_a_time() -> MutexGuard<'static, ()> {
    static RUNS: Mutex<()> = Mutex::new(());
    RUNS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Short mode on etcd: every fault once, a few seconds mixed; well under 90 s.
#[test]
fn chaos_short() {
    let _turn = one_run_at_a_time();
    run(StoreKind::Etcd, seed(), mixed_secs(5), false);
}

/// Short mode on PostgreSQL: the same node faults, the server restarted and stopped past
/// the TTL; well under 90 s.
#[test]
fn chaos_postgres_short() {
    let _turn = one_run_at_a_time();
    run(StoreKind::Postgres, seed(), mixed_secs(5), false);
}

/// Long mode (release checks): minutes of mixed faults and millions of IDs.
/// `scripts/chaos --long` (IDGEN_CHAOS_SECS, default 300).
#[test]
#[ignore]
fn chaos_long() {
    let _turn = one_run_at_a_time();
    run(StoreKind::Etcd, seed(), mixed_secs(300), true);
}

/// Long mode on PostgreSQL: `scripts/chaos --long --store postgres`.
#[test]
#[ignore]
fn chaos_postgres_long() {
    let _turn = one_run_at_a_time();
    run(StoreKind::Postgres, seed(), mixed_secs(300), true);
}
