//! The recorded history: what every client connection received, kept as runs of consecutive
//! IDs, and the errors clients saw.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;
use std::time::Instant;

use idgen_protocol::ServerHello;

/// One client connection's history, kept compact: IDs arrive in runs of consecutive integers
/// (one shard, one millisecond), so a run `(first, count)` is recorded, not every ID. Order
/// per connection and the announced range are checked as answers arrive; duplicates are
/// checked at the end as overlaps of runs. Memory grows with the number of runs, not IDs.
pub(crate) struct ConnLog {
    pub(crate) node: usize,
    pub(crate) conn: u64,
    pub(crate) hello: ServerHello,
    /// Runs of consecutive IDs, in the order received.
    pub(crate) runs: Vec<(u64, u32)>,
    /// Per IDS frame: receive time and the index of its first run.
    pub(crate) batches: Vec<(Instant, u32)>,
    /// IDs received.
    pub(crate) ids: u64,
    /// The last ID received (order check).
    pub(crate) last: Option<u64>,
    pub(crate) not_increasing: u64,
    pub(crate) outside: u64,
    /// The first few order and range violations, described.
    pub(crate) examples: Vec<String>,
}

impl ConnLog {
    pub(crate) fn new(node: usize, conn: u64, hello: ServerHello) -> ConnLog {
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
    pub(crate) fn push(&mut self, at: Instant, ids: impl IntoIterator<Item = u64>) {
        let h = self.hello;
        let (lo, hi) = (h.workers.first, h.workers.end());
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
    pub(crate) fn batch_runs(&self, b: usize) -> &[(u64, u32)] {
        let start = self.batches[b].1 as usize;
        let end = self
            .batches
            .get(b + 1)
            .map_or(self.runs.len(), |n| n.1 as usize);
        &self.runs[start..end]
    }
}

/// A request that failed: an ERROR frame, a timeout, or a connection that could not be made.
pub(crate) struct ErrRec {
    pub(crate) node: usize,
    pub(crate) at: Instant,
    pub(crate) what: String,
}

#[derive(Default)]
pub(crate) struct History {
    pub(crate) conns: Vec<ConnLog>,
    pub(crate) errors: Vec<ErrRec>,
}

/// What the client threads share with the controller.
pub(crate) struct Shared {
    pub(crate) addrs: Vec<Mutex<Option<SocketAddr>>>,
    pub(crate) stop: AtomicBool,
    pub(crate) conn_ids: AtomicU64,
    pub(crate) max_batch: u64,
    pub(crate) pause_us: u64,
}
