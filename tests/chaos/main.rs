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
//! Named sequences run beside the IDs under the same faults ([`sequences`]): no value twice,
//! and the strict sequence's real-time order.
//! Any violation panics with the seed. `IDGEN_CHAOS_SEED` fixes the seed,
//! `IDGEN_CHAOS_SECS` the length of the mixed phase; `scripts/chaos` wraps both.
//!
//! The modules follow the run: [`cluster`] (etcd and the nodes under libfaketime),
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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use scenario::run;

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
