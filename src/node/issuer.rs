//! What a shard adds to its [`Issuer`] (`idgen_core::member`, the one place the shard's fronts,
//! the ID protocol's connections and the HTTP ID API, draw IDs from): waiting for a
//! [`Progress::RetryAt`] on the shard's runtime ([`wait_until`]), leaving the generator's line
//! when a request is dropped ([`InLine`]), and the wire status of a request that got no IDs,
//! counted alike on both fronts ([`refusal`]).

use std::cell::RefCell;
use std::rc::Rc;

use idgen_protocol::Status;

use super::telemetry::ShardStats;

#[cfg(doc)]
use idgen_core::generator::Progress;
use idgen_core::generator::{Fill, GenError};
pub(crate) use idgen_core::member::{IssueError, Issuer};

/// Waits, on the shard's runtime, until the generator's [`Progress::RetryAt`] time `at`: a
/// timer for a clock wait, a yield for a wait under a millisecond (the next millisecond's
/// slots; a timer would round it up to the next tick). Either way the shard serves its other
/// connections meanwhile.
pub(crate) async fn wait_until(gen: &RefCell<Issuer>, at: u64) {
    let wait = gen.borrow().until(at);
    if wait < std::time::Duration::from_millis(1) {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(wait).await;
    }
}

/// A request in progress on a front that may be dropped while it waits (an HTTP request whose
/// client went away): it leaves the generator's line when dropped, so the requests behind it
/// move up at once.
pub(crate) struct InLine<'a> {
    gen: &'a RefCell<Issuer>,
    pub fill: Fill,
}

impl<'a> InLine<'a> {
    pub(crate) fn new(gen: &'a RefCell<Issuer>, n: u64) -> Self {
        InLine {
            gen,
            fill: Fill::new(n),
        }
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        // Never borrowed across an await, so free whenever a task is dropped.
        if let Ok(mut gen) = self.gen.try_borrow_mut() {
            gen.abandon(&mut self.fill);
        }
    }
}

/// The issuer's clock answering one reading for a read's worth of requests
/// ([`Issuer::hold_clock`]) until this is dropped: no way out of the read's handling (an early
/// return, a panic unwinding) leaves the clock held.
pub(crate) struct ClockHold(Rc<RefCell<Issuer>>);

impl ClockHold {
    pub(crate) fn new(gen: Rc<RefCell<Issuer>>) -> Self {
        gen.borrow().hold_clock();
        ClockHold(gen)
    }
}

impl Drop for ClockHold {
    fn drop(&mut self) {
        if let Ok(gen) = self.0.try_borrow() {
            gen.release_clock();
        }
    }
}

/// The wire status and message a request that got no IDs is answered with, on either front,
/// counted under that status in the shard's error answers (`idgen_errors_total`).
pub(crate) fn refusal(e: &IssueError, stats: &ShardStats) -> (Status, String) {
    let (status, message) = status_of(e);
    stats.error(status);
    (status, message)
}

fn status_of(e: &IssueError) -> (Status, String) {
    match e {
        IssueError::NoLease => (
            Status::UNAVAILABLE_LEASE,
            "unavailable: this node holds no lease; try another node".to_string(),
        ),
        IssueError::Gen(g @ GenError::LeaseCeiling { .. }) => {
            (Status::UNAVAILABLE_LEASE, g.to_string())
        }
        IssueError::LeaseChanged => (
            Status::UNAVAILABLE_LEASE,
            "unavailable: this node's lease changed while the request was served; retry"
                .to_string(),
        ),
        IssueError::RangeChanged => (
            Status::RANGE_CHANGED,
            "this node's worker range changed since HELLO_OK; reconnect to learn the new one"
                .to_string(),
        ),
        IssueError::Gen(GenError::Exhausted) => {
            (Status::EXHAUSTED, GenError::Exhausted.to_string())
        }
        IssueError::Gen(g @ GenError::Overloaded { .. }) => (Status::BUSY, g.to_string()),
        IssueError::Gen(g) => (Status::UNAVAILABLE_CLOCK, g.to_string()),
    }
}
