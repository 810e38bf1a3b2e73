//! A shard's issuer: its generator for the worker sub-range of the node's lease, rebuilt when
//! the lease changes, and the one place the shard's fronts (the ID protocol's connections and
//! the HTTP ID API) draw IDs from. It is sans-IO like the generator: it never waits itself, and
//! [`wait_until`] is how a front waits for a [`Progress::RetryAt`] on the shard's runtime.

use std::cell::RefCell;
use std::sync::Arc;

use idgen_protocol::Status;

use super::telemetry::ShardStats;
use super::ShardExit;
use crate::clock::{CachedClock, Clock};
use crate::generator::{Fill, GenError, Generator, Progress, ShardConfig};
use crate::layout::{Layout, WorkerRange};
use crate::lease::keeper::LeaseShared;

/// The shard's generator, rebuilt when the node's lease changes. Generic over the clock only
/// so the lease simulation (`lease/sim.rs`) can run it on simulated time; a node uses the
/// system clock, read through [`CachedClock`].
pub(crate) struct ShardGen<C: Clock + Clone = CachedClock> {
    index: usize,
    layout: Layout,
    workers_per_shard: u64,
    max_rollback_wait: std::time::Duration,
    lease: Arc<LeaseShared>,
    stats: Arc<ShardStats>,
    clock: C,
    current: Option<(u64, Generator<C>)>,
    /// The worker sub-range of `current`'s generator; empty without one.
    current_range: WorkerRange,
}

/// Why a request for IDs could not be served.
pub(crate) enum IssueError {
    Gen(GenError),
    NoLease,
    /// Issued from another worker range than the connection's HELLO_OK announced.
    RangeChanged,
    /// The lease changed while a request that announced no range (HTTP) was part served: it
    /// fails whole rather than finish from another grant.
    LeaseChanged,
}

/// The grant a request that announced no range drew its first IDs under (see
/// [`ShardGen::issue_current`]): it finishes under this one or fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StartedUnder {
    generation: u64,
    range: WorkerRange,
}

/// What a shard generator is built from: the layout, the `[listen]` section's worker IDs per
/// shard and the `[clock]` section's rollback wait.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GenSettings {
    pub layout: Layout,
    pub workers_per_shard: u64,
    pub max_rollback_wait: std::time::Duration,
}

impl ShardGen {
    pub(crate) fn new(
        index: usize,
        settings: GenSettings,
        lease: Arc<LeaseShared>,
        stats: Arc<ShardStats>,
    ) -> Self {
        Self::with_clock(index, settings, lease, stats, CachedClock::new())
    }
}

impl<C: Clock + Clone> ShardGen<C> {
    /// A shard generator whose generators read `clock`.
    pub(crate) fn with_clock(
        index: usize,
        settings: GenSettings,
        lease: Arc<LeaseShared>,
        stats: Arc<ShardStats>,
        clock: C,
    ) -> Self {
        let mut g = ShardGen {
            index,
            layout: settings.layout,
            workers_per_shard: settings.workers_per_shard,
            max_rollback_wait: settings.max_rollback_wait,
            lease,
            stats,
            clock,
            current: None,
            current_range: WorkerRange::default(),
        };
        g.refresh();
        g
    }

    /// Rebuilds the generator if the node holds a lease of another generation. Returns whether
    /// the generator changed.
    fn refresh(&mut self) -> bool {
        let Some(view) = self.lease.current() else {
            return false;
        };
        if self
            .current
            .as_ref()
            .is_some_and(|(g, _)| *g == view.grant.generation)
        {
            return false;
        }
        let per_shard = self.workers_per_shard;
        let shard_config = ShardConfig {
            worker_first: view.grant.first + self.index as u64 * per_shard,
            worker_count: per_shard,
            floor: view.grant.floor,
            max_rollback_wait: self.max_rollback_wait,
        };
        match Generator::with_stats(
            self.layout,
            shard_config,
            Arc::clone(&view.ceiling),
            self.clock.clone(),
            Arc::clone(&self.stats.generator),
        ) {
            Ok(g) => {
                self.stats
                    .generation
                    .store(view.grant.generation, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(
                    event = "shard_lease",
                    shard = self.index,
                    generation = view.grant.generation,
                    worker_first = shard_config.worker_first,
                    worker_count = shard_config.worker_count,
                    floor = shard_config.floor,
                    "shard generator ready"
                );
                self.current = Some((view.grant.generation, g));
                self.current_range =
                    WorkerRange::new(shard_config.worker_first, shard_config.worker_count);
                true
            }
            Err(e) => {
                tracing::error!(event = "shard_config_error", shard = self.index, error = %e, "cannot build the shard generator");
                false
            }
        }
    }

    /// The worker sub-range of the generator that issues now, after picking up a new lease if
    /// the node holds one; empty while the shard has none. A connection
    /// announces this in HELLO_OK and is served only while it stays the same.
    pub(crate) fn range(&mut self) -> WorkerRange {
        self.refresh();
        self.current_range
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Lets the generator answer one clock reading until [`release_clock`](Self::release_clock)
    /// ([`Clock::hold`]): for the requests of one read.
    #[inline]
    pub(crate) fn hold_clock(&self) {
        if let Some((_, g)) = &self.current {
            g.clock().hold();
        }
    }

    /// Ends [`hold_clock`](Self::hold_clock).
    #[inline]
    pub(crate) fn release_clock(&self) {
        if let Some((_, g)) = &self.current {
            g.clock().release();
        }
    }

    /// Issues what it can of `fill` now, as runs `(first, count)`, from the worker sub-range
    /// `announced` (the one the connection's HELLO_OK named), picking up a new lease first. A
    /// range other than the announced one is `RangeChanged` (before any ID is drawn, for a new
    /// request). [`Progress::RetryAt`]: call again then with the same `fill` (the shard waits
    /// on a timer meanwhile, serving its other connections). On error nothing emitted for this
    /// request, in any call, may be used.
    pub(crate) fn issue(
        &mut self,
        announced: WorkerRange,
        fill: &mut Fill,
        emit: impl FnMut(u64, u64),
    ) -> Result<Progress, IssueError> {
        let result = self.issue_from(announced, fill, emit);
        if result.is_err() {
            // The request is over: its place in line, if any, goes to the next one.
            self.abandon(fill);
        }
        result
    }

    /// Takes `fill` out of the generator's line, for a request given up before it is done (a
    /// closed connection, a dropped HTTP request): see [`Generator::abandon`].
    pub(crate) fn abandon(&mut self, fill: &mut Fill) {
        if let Some((_, g)) = self.current.as_mut() {
            g.abandon(fill);
        }
    }

    fn issue_from(
        &mut self,
        announced: WorkerRange,
        fill: &mut Fill,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<Progress, IssueError> {
        // A lease change reaches the generator as its old ceiling (lowered to 0 on loss), so
        // the lease is looked up only then, or while the shard has none: no shared read per
        // request.
        if self.current.is_none() && !self.refresh() {
            return Err(IssueError::NoLease);
        }
        if self.current_range != announced {
            return Err(IssueError::RangeChanged);
        }
        let Some((_, g)) = self.current.as_mut() else {
            return Err(IssueError::NoLease);
        };
        match g.poll_fill(fill, &mut emit) {
            // Retried under a renewed lease only if nothing was emitted: a retry after part of
            // the request went out would answer more IDs than asked.
            Err(GenError::LeaseCeiling { .. }) if fill.emitted() == 0 && self.refresh() => {
                // A new lease generation: serve under it only if it kept the announced range.
                if self.current_range != announced {
                    return Err(IssueError::RangeChanged);
                }
                let Some((_, g)) = self.current.as_mut() else {
                    return Err(IssueError::NoLease);
                };
                g.poll_fill(fill, emit).map_err(IssueError::Gen)
            }
            other => other.map_err(IssueError::Gen),
        }
    }

    /// As [`issue`](Self::issue), from whatever worker range the shard holds now, for a caller
    /// that announced none (the HTTP API): a request that has emitted nothing yet follows a
    /// lease change to the new range. Once it has emitted IDs (`started`, the request's own,
    /// empty before its first call) it finishes under the grant it started with or fails
    /// whole with [`IssueError::LeaseChanged`]: one answer never holds IDs of two grants (two
    /// worker ranges, not increasing), whatever other requests on the shard picked up while it
    /// waited.
    pub(crate) fn issue_current(
        &mut self,
        started: &mut Option<StartedUnder>,
        fill: &mut Fill,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<Progress, IssueError> {
        if let Some(under) = *started {
            if self.current.as_ref().map(|(g, _)| *g) != Some(under.generation) {
                // Its place in line, if any, was in the old generator's line.
                self.abandon(fill);
                return Err(IssueError::LeaseChanged);
            }
            // Same generation, so same range; `issue` picks up no new lease for a request that
            // has emitted IDs.
            return self.issue(under.range, fill, emit);
        }
        let range = self.range();
        let result = match self.issue(range, fill, &mut emit) {
            // The lease changed between the look-up and the draw (nothing was drawn): once
            // more, under the new range.
            Err(IssueError::RangeChanged) if fill.emitted() == 0 => {
                let range = self.range();
                self.issue(range, fill, &mut emit)
            }
            other => other,
        };
        if fill.emitted() > 0 {
            // Everything this call emitted came from the generator current now: `issue`
            // changes generator only before a request's first ID.
            if let Some((generation, _)) = &self.current {
                *started = Some(StartedUnder {
                    generation: *generation,
                    range: self.current_range,
                });
            }
        }
        result
    }

    /// How long until monotonic time `at` (a [`Progress::RetryAt`]) on the shard's clock.
    pub(crate) fn until(&self, at: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(at.saturating_sub(self.clock.mono_ns()))
    }

    /// `n` IDs, waiting asleep on the shard's clock when the generator asks to retry later:
    /// for the lease simulation, whose clock is simulated, and tests.
    #[cfg(test)]
    pub(crate) fn issue_blocking(
        &mut self,
        announced: WorkerRange,
        n: u64,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<(), IssueError> {
        let mut fill = Fill::new(n);
        loop {
            match self.issue(announced, &mut fill, &mut emit)? {
                Progress::Done => return Ok(()),
                Progress::RetryAt(at) => self.clock.sleep(self.until(at)),
            }
        }
    }

    pub(crate) fn exit(&self) -> ShardExit {
        ShardExit {
            last_issued: self
                .current
                .as_ref()
                .and_then(|(gen, g)| g.last_issued_timestamp().map(|ts| (*gen, ts))),
        }
    }
}

/// Waits, on the shard's runtime, until the generator's [`Progress::RetryAt`] time `at`: a
/// timer for a clock wait, a yield for a wait under a millisecond (the next millisecond's
/// slots; a timer would round it up to the next tick). Either way the shard serves its other
/// connections meanwhile.
pub(crate) async fn wait_until(gen: &RefCell<ShardGen>, at: u64) {
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
    gen: &'a RefCell<ShardGen>,
    pub fill: Fill,
}

impl<'a> InLine<'a> {
    pub(crate) fn new(gen: &'a RefCell<ShardGen>, n: u64) -> Self {
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

/// The wire status and message of a request that got no IDs.
pub(crate) fn status_of(e: &IssueError) -> (Status, String) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::generator::Ceiling;
    use crate::lease::keeper::LeaseView;
    use crate::lease::GrantTerms;

    fn view(generation: u64, first: u64, ceiling: u64) -> Arc<LeaseView> {
        Arc::new(LeaseView {
            grant: GrantTerms {
                first,
                count: 1,
                generation,
                floor: 0,
            },
            ceiling: Arc::new(Ceiling::new(ceiling)),
        })
    }

    fn shard(lease: &Arc<LeaseShared>) -> ShardGen {
        let config = crate::config::ServeConfig::default();
        let settings = GenSettings {
            layout: config.layout,
            workers_per_shard: config.listen.workers_per_shard,
            max_rollback_wait: config.clock.max_rollback_wait,
        };
        ShardGen::new(0, settings, Arc::clone(lease), Arc::default())
    }

    fn now_id_ms(layout: crate::layout::Layout) -> u64 {
        crate::clock::SystemClock::new().wall_ms() - layout.epoch_ms()
    }

    #[test]
    fn a_batch_cut_by_the_ceiling_is_never_retried_after_part_of_it_went_out() {
        let layout = crate::layout::Layout::default();
        let per_ms = 1u64 << layout.sequence_bits();
        let mut partial = 0;
        for round in 0..20u64 {
            // The lease allows this millisecond only; a batch of three milliseconds' worth
            // emits one millisecond of IDs, then meets the ceiling.
            let lease = LeaseShared::for_test(layout, None);
            let ceiling = now_id_ms(layout) + 1;
            lease.publish_for_test(Some(view(2 * round + 1, 0, ceiling)));
            let mut g = shard(&lease);
            // Meanwhile the keeper took a new generation of the same range, far ahead.
            lease.publish_for_test(Some(view(2 * round + 2, 0, ceiling + 60_000)));
            let mut emitted = 0;
            let result = g.issue_blocking(WorkerRange::new(0, 1), 3 * per_ms, |_, n| emitted += n);
            match result {
                Ok(()) => assert_eq!(emitted, 3 * per_ms, "an answer holds exactly the IDs asked"),
                Err(_) => {
                    assert!(
                        emitted <= 3 * per_ms,
                        "{emitted} IDs emitted for a batch of {}",
                        3 * per_ms
                    );
                    partial += u64::from(emitted > 0);
                }
            }
        }
        assert!(
            partial > 0,
            "the ceiling never cut a batch: the test proves nothing"
        );
    }

    #[test]
    fn a_request_without_a_range_finishes_under_the_grant_it_started_with_or_fails_whole() {
        let layout = crate::layout::Layout::default();
        let per_ms = 1u64 << layout.sequence_bits();
        let far = now_id_ms(layout) + 60_000;
        let lease = LeaseShared::for_test(layout, Some(view(1, 0, far)));
        let mut g = shard(&lease);
        // A hundred milliseconds' worth: the first call emits part and asks to wait.
        let mut fill = Fill::new(100 * per_ms);
        let mut started = None;
        let mut workers = std::collections::BTreeSet::new();
        let mut emit = |first: u64, _n: u64| {
            workers.insert(layout.decompose(crate::layout::Id(first)).worker);
        };
        let first = g.issue_current(&mut started, &mut fill, &mut emit);
        assert!(matches!(first, Ok(Progress::RetryAt(_))));
        assert!(fill.emitted() > 0 && started.is_some());
        // While it waits, the lease is lost and another range taken; another request on the
        // shard picks the new one up.
        lease.current().unwrap().ceiling.lower_to(0);
        lease.publish_for_test(Some(view(2, 5, far)));
        assert_eq!(g.range(), WorkerRange::new(5, 1));
        let resumed = g.issue_current(&mut started, &mut fill, &mut emit);
        assert!(
            matches!(resumed, Err(IssueError::LeaseChanged)),
            "fails whole"
        );
        assert_eq!(
            workers.into_iter().collect::<Vec<_>>(),
            vec![0],
            "no ID of the new range"
        );
        // A new request is served from the new range.
        let (mut fill, mut started, mut seen) = (Fill::new(10), None, Vec::new());
        while let Ok(Progress::RetryAt(_)) = g.issue_current(&mut started, &mut fill, |first, _| {
            seen.push(layout.decompose(crate::layout::Id(first)).worker)
        }) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(fill.emitted(), 10, "served whole");
        assert!(seen.iter().all(|&w| w == 5));
    }

    #[test]
    fn a_connection_whose_range_changed_gets_range_changed_before_any_id_is_drawn() {
        let layout = crate::layout::Layout::default();
        let far = now_id_ms(layout) + 60_000;
        let lease = LeaseShared::for_test(layout, Some(view(1, 0, far)));
        let mut g = shard(&lease);
        assert_eq!(g.range(), WorkerRange::new(0, 1));
        let mut emitted = 0;
        assert!(g
            .issue_blocking(WorkerRange::new(0, 1), 10, |_, n| emitted += n)
            .is_ok());
        assert_eq!(emitted, 10);
        // The lease is lost (the keeper lowers the old ceiling to 0) and another range taken.
        lease.current().unwrap().ceiling.lower_to(0);
        lease.publish_for_test(Some(view(2, 5, far)));
        // (Within the millisecond it already checked, the generator may still finish: its
        // timestamp is below the old lease end, which fences the next holder.)
        std::thread::sleep(std::time::Duration::from_millis(2));
        emitted = 0;
        let refused = g.issue_blocking(WorkerRange::new(0, 1), 10, |_, n| emitted += n);
        assert!(matches!(refused, Err(IssueError::RangeChanged)));
        assert_eq!(
            emitted, 0,
            "no ID is drawn for a connection that will be closed"
        );
        // A connection that learned the new range is served from it.
        assert_eq!(g.range(), WorkerRange::new(5, 1));
        assert!(g
            .issue_blocking(WorkerRange::new(5, 1), 10, |first, n| {
                emitted += n;
                assert_eq!(layout.decompose(crate::layout::Id(first)).worker, 5);
            })
            .is_ok());
        assert_eq!(emitted, 10);
        // A connection from before any lease (announced 0..0) is told to reconnect too.
        assert!(matches!(
            g.issue_blocking(WorkerRange::new(0, 0), 1, |_, _| {}),
            Err(IssueError::RangeChanged)
        ));
    }
}
