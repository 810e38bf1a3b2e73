//! Named sequences under the same faults: a dense and a strict sequence, created with `idgen
//! seq create` before the nodes start, asked for by client threads over the ID protocol
//! (version 3, GET_VALUES pipelined [`DEPTH`] deep) on every main node. Each call is timed on
//! this process's clock, which no fault moves (the nodes' clocks are libfaketime's); the
//! history is checked with `idgen_core::sequence::check`: no value twice in either sequence,
//! and the strict one's real-time order across every node and client, whatever the nodes'
//! clocks said.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idgen_core::sequence::check::{self, Call};
use idgen_protocol::client::Handshake;
use idgen_protocol::{Request, Response};
use idgen_testkit::{TestConn, Timeouts};

use crate::common::node::seq;
use crate::history::Shared;

/// The sequences, and whether each is strict.
pub(crate) const SEQUENCES: [(&str, bool); 2] = [("chaos-dense", false), ("chaos-strict", true)];
/// GET_VALUES in flight per connection.
const DEPTH: usize = 4;
/// Between two rounds of one client: at most 800 calls a second per client thread.
const ROUND_PAUSE: Duration = Duration::from_millis(5);

/// Creates the sequences in the cluster's namespace, on the store `store_args` name (`--store
/// URL`, and a password file for PostgreSQL).
pub(crate) fn create(store_args: &[String]) {
    for (name, strict) in SEQUENCES {
        let mode = if strict { "strict" } else { "dense" };
        let mut args = vec!["create", name, "--mode", mode];
        args.extend(store_args.iter().map(String::as_str));
        seq(&args);
    }
}

/// One client of sequence `name` on node `node`: rounds of [`DEPTH`] calls until the run
/// stops; a failed call (a refusal, a timeout, a close) ends the round and the connection.
pub(crate) fn client(
    shared: Arc<Shared>,
    node: usize,
    name: &'static str,
    origin: Instant,
) -> Vec<Call> {
    let timeouts = Timeouts {
        connect: Duration::from_millis(500),
        io: Duration::from_millis(1500),
    };
    let request = Request::GetValues {
        count: 1,
        name: name.parse().expect("a sequence name"),
    };
    let us = |origin: Instant| origin.elapsed().as_micros() as u64;
    let mut calls = Vec::new();
    let mut conn: Option<TestConn> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let addr: Option<SocketAddr> = *shared.addrs[node].lock().unwrap();
        let Some(addr) = addr else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let start = us(origin);
        if conn.is_none() {
            conn = TestConn::try_open(addr, Handshake::offering(1, 3), timeouts).ok();
        }
        let mut broken = match conn.as_mut() {
            Some(c) => (0..DEPTH).try_for_each(|_| c.try_send(&request)).is_err(),
            None => true,
        };
        for _ in 0..DEPTH {
            let got = match (broken, conn.as_mut()) {
                (false, Some(c)) => c.try_recv().ok(),
                _ => None,
            };
            let values = match got {
                Some(Response::Values { values, .. }) if values.len() == 1 => values,
                Some(Response::Values { values, .. }) => {
                    panic!("{name}: GET_VALUES of 1 answered {} values", values.len())
                }
                // Refused (store down, contention past the deadline) or cut off: no values.
                _ => {
                    broken = true;
                    Vec::new()
                }
            };
            calls.push(Call {
                start,
                end: us(origin),
                values,
            });
        }
        if broken {
            conn = None;
            std::thread::sleep(Duration::from_millis(20));
        } else {
            // A bounded rate, so the long run's history stays small (every call is kept).
            std::thread::sleep(ROUND_PAUSE);
        }
    }
    calls
}

/// The checks over every call of sequence `name`; panics with the seed on a violation.
/// Answers how many calls got a value.
pub(crate) fn check(seed: u64, name: &str, strict: bool, calls: &[Call]) -> usize {
    let dup = check::duplicates(calls);
    assert!(
        dup.is_empty(),
        "seed {seed}: {name}: values twice: {:?}",
        &dup[..dup.len().min(5)]
    );
    if strict {
        let v = check::real_time_order(calls);
        assert!(
            v.is_empty(),
            "seed {seed}: {name}: out of real-time order: {:?}",
            &v[..v.len().min(5)]
        );
    }
    calls.iter().filter(|c| !c.values.is_empty()).count()
}
