//! Calls to one strict sequence, batched into shared commits, sans-IO.
//!
//! ```text
//!   push(call, n) ──▶ waiting ──start_commit()──▶ in flight ──committed(block)──▶ answers
//!                        ▲  (calls that arrive meanwhile wait for the next commit)
//! ```
//!
//! Real-time order rests on one rule, which this type keeps by construction: a commit covers
//! only calls that were waiting when it started, so every value answered was reserved by a
//! store transaction that began after its call did. If call A returned before call B began
//! (on any node), B's reservation began after A's had committed, and the store's `next` only
//! moves forward: B's value is the larger. Calls waiting together share one commit, so
//! throughput grows with the number of calls in flight, and nothing is reserved ahead (a value
//! kept for later would be older than a call that takes it).

use std::collections::VecDeque;

use super::{Block, MAX_BLOCK};

/// The values a call was answered with: `first, first + step, …`, `count` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Values {
    pub first: u64,
    pub count: u64,
    pub step: u64,
}

impl Values {
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.count).map(|i| self.first + i * self.step)
    }
}

/// How many of `left` values calls of `sizes` values take, in order, each whole or not at
/// all: what a strict commit reserves, so that no value it reserves goes unanswered (and
/// [`Batches::committed`] answers exactly the calls this counted).
pub fn fitting(sizes: &[u64], left: u64) -> u64 {
    let mut taken = 0u64;
    for &n in sizes {
        if taken + n <= left {
            taken += n;
        }
    }
    taken
}

/// The calls of one strict sequence on one holder, each a `T` (whatever answers the caller)
/// asking for `n` values.
#[derive(Debug)]
pub struct Batches<T> {
    waiting: VecDeque<(T, u64)>,
    in_flight: Vec<(T, u64)>,
    committing: bool,
}

impl<T> Default for Batches<T> {
    fn default() -> Self {
        Batches {
            waiting: VecDeque::new(),
            in_flight: Vec::new(),
            committing: false,
        }
    }
}

impl<T> Batches<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A call for `n` values (1 ..= [`MAX_BLOCK`]), answered by a commit that starts after now.
    pub fn push(&mut self, call: T, n: u64) {
        debug_assert!((1..=MAX_BLOCK).contains(&n));
        self.waiting.push_back((call, n));
    }

    /// Calls waiting for a commit that has not started.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether a commit is in flight.
    pub fn is_committing(&self) -> bool {
        self.committing
    }

    /// Starts a commit when none is in flight and calls wait: the values to reserve for the
    /// calls it covers (every waiting call, in arrival order, up to [`MAX_BLOCK`] values; at
    /// least the first call). The caller reserves them in one store transaction begun after
    /// this call, then answers [`committed`](Self::committed) or [`failed`](Self::failed).
    pub fn start_commit(&mut self) -> Option<u64> {
        if self.committing || self.waiting.is_empty() {
            return None;
        }
        self.committing = true;
        Some(self.take_waiting(0))
    }

    /// The commit in flight is tried again (its last attempt lost the record to another
    /// holder and wrote nothing): the calls that arrived meanwhile join it, as they would
    /// join the next commit (the new attempt begins after each of them did). The values to
    /// reserve now. `None` when no commit is in flight.
    pub fn retry_commit(&mut self) -> Option<u64> {
        if !self.committing {
            return None;
        }
        let had: u64 = self.in_flight.iter().map(|(_, n)| n).sum();
        Some(self.take_waiting(had))
    }

    /// Moves waiting calls, in arrival order, into the commit in flight while they fit
    /// [`MAX_BLOCK`] beside `total` (at least one when `total` is 0): the new total.
    fn take_waiting(&mut self, mut total: u64) -> u64 {
        while let Some(&(_, n)) = self.waiting.front() {
            if total > 0 && total + n > MAX_BLOCK {
                break;
            }
            total += n;
            let call = self.waiting.pop_front().expect("a front");
            self.in_flight.push(call);
        }
        total
    }

    /// The values each call of the commit in flight asks for, in arrival order.
    pub fn in_flight_sizes(&self) -> Vec<u64> {
        self.in_flight.iter().map(|&(_, n)| n).collect()
    }

    /// The commit reserved `block`: each covered call gets its values, in arrival order. A
    /// block shorter than asked (the sequence near its maximum, reserved as
    /// [`fitting`] chose) answers, in order, each call that still fits whole; a call that
    /// does not gets `None` (used up) and takes nothing, so the calls after it may fit.
    pub fn committed(&mut self, block: Block) -> Vec<(T, Option<Values>)> {
        self.committing = false;
        let mut at = 0u64;
        self.in_flight
            .drain(..)
            .map(|(call, n)| {
                if at + n <= block.count {
                    let v = Values {
                        first: block.value(at),
                        count: n,
                        step: block.step,
                    };
                    at += n;
                    (call, Some(v))
                } else {
                    (call, None)
                }
            })
            .collect()
    }

    /// The commit failed (or its outcome is unknown): every call it covered is answered with
    /// the error, none with a value.
    pub fn failed(&mut self) -> Vec<T> {
        self.committing = false;
        self.in_flight.drain(..).map(|(c, _)| c).collect()
    }

    /// Every call, in flight or waiting, taken out (the holder stops or the sequence is gone).
    pub fn drain_all(&mut self) -> Vec<T> {
        let mut out: Vec<T> = self.in_flight.drain(..).map(|(c, _)| c).collect();
        out.extend(self.waiting.drain(..).map(|(c, _)| c));
        self.committing = false;
        out
    }
}
