//! An issuer: the generator of one sub-range of a member's grant, rebuilt when the lease
//! changes generation, and the one place a member's IDs are drawn from: each shard of a node
//! holds one (its fronts, the ID protocol's connections and the HTTP ID API, draw through it),
//! and an embedded generator holds one over its whole grant. It is sans-IO like the generator:
//! it never waits itself; [`Progress::RetryAt`] says when to call again, and the caller's
//! runtime waits (a shard's timer, the embedded generator's sleep, the simulation's clock).

use std::sync::Arc;
use std::time::Duration;

use idgen_id::{Layout, WorkerRange};

use crate::clock::{CachedClock, Clock};
use crate::generator::{
    Ceiling, Fill, GenError, Generator, GeneratorConfig, GeneratorStats, Progress,
};
use crate::lease::keeper::LeaseShared;

/// One sub-range of a member's grant, rebuilt when the lease changes generation. Generic over
/// the clock so the lease simulation runs it on simulated time; a node and an embedded
/// generator read the system clock through [`CachedClock`](crate::clock::CachedClock).
pub struct Issuer<C: Clock + Clone = CachedClock> {
    index: usize,
    /// The layout of the current generator's grant (the configured one before any).
    layout: Layout,
    /// Its layout generation.
    layout_generation: u32,
    /// That generation's first ID: every ID the issuer draws is at or above it.
    first_id: u64,
    /// Worker IDs per issuer: the issuer `index` has `first + index × workers ..` of a grant.
    workers: u64,
    max_rollback_wait: Duration,
    lease: Arc<LeaseShared>,
    stats: Arc<GeneratorStats>,
    clock: C,
    /// The generator and the lease generation it was built for.
    current: Option<(u64, Generator<C>)>,
    /// The worker sub-range of `current`'s generator; empty without one.
    current_range: WorkerRange,
}

/// Why a request for IDs could not be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueError {
    Gen(GenError),
    NoLease,
    /// Issued from another worker range than the one the caller announced (a connection's
    /// HELLO_OK).
    RangeChanged,
    /// The lease changed while a request that announced no range (HTTP) was part served: it
    /// fails whole rather than finish from another grant.
    LeaseChanged,
}

/// What a connection was told it is served from (its HELLO_OK): a worker range in a layout
/// generation. A change of either ends the connection's service ([`IssueError::RangeChanged`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Announced {
    pub range: WorkerRange,
    pub layout_generation: u32,
}

impl From<WorkerRange> for Announced {
    /// A range of layout generation 0 (a cluster that never switched layouts).
    fn from(range: WorkerRange) -> Self {
        Announced {
            range,
            layout_generation: 0,
        }
    }
}

/// The grant a request that announced no range drew its first IDs under (see
/// [`Issuer::issue_current`]): it finishes under this one or fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartedUnder {
    generation: u64,
    range: Announced,
}

/// What an issuer's generators are built from: the layout, the worker IDs per issuer and how
/// far back the clock may step and be waited out.
#[derive(Clone, Copy, Debug)]
pub struct IssuerSettings {
    pub layout: Layout,
    pub workers: u64,
    pub max_rollback_wait: Duration,
}

/// The last timestamp an issuer issued, and under which lease generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastIssued {
    pub generation: u64,
    pub timestamp: u64,
}

/// What an issuer reports when its fronts have stopped: the last timestamp it issued (`None`
/// if it issued nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IssuerExit {
    pub last_issued: Option<LastIssued>,
}

impl<C: Clock + Clone> Issuer<C> {
    /// The issuer of the `index`-th sub-range of `settings.workers` worker IDs of every grant
    /// `lease` publishes, whose generators read `clock` and count into `stats` (kept across
    /// lease changes). [`Member::issuer`](super::Member::issuer) makes them.
    pub fn new(
        index: usize,
        settings: IssuerSettings,
        lease: Arc<LeaseShared>,
        stats: Arc<GeneratorStats>,
        clock: C,
    ) -> Self {
        let mut g = Issuer {
            index,
            layout: settings.layout,
            layout_generation: 0,
            first_id: 0,
            workers: settings.workers,
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
        let per_shard = self.workers;
        let config = GeneratorConfig {
            workers: WorkerRange::new(
                view.grant.workers.first + self.index as u64 * per_shard,
                per_shard,
            ),
            floor: view.grant.floor,
            max_rollback_wait: self.max_rollback_wait,
        };
        match Generator::with_stats(
            view.layout,
            config,
            Arc::clone(&view.ceiling),
            self.clock.clone(),
            Arc::clone(&self.stats),
        ) {
            Ok(g) => {
                self.stats
                    .generation
                    .store(view.grant.generation, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(
                    event = "issuer_lease",
                    issuer = self.index,
                    generation = view.grant.generation,
                    worker_first = config.workers.first,
                    worker_count = config.workers.count,
                    floor = config.floor,
                    "issuer ready"
                );
                self.current = Some((view.grant.generation, g));
                self.current_range = config.workers;
                self.layout = view.layout;
                self.layout_generation = view.grant.layout_generation;
                self.first_id = self
                    .lease
                    .generations()
                    .get(view.grant.layout_generation)
                    .map_or(0, |g| g.first_id);
                true
            }
            Err(e) => {
                tracing::error!(event = "issuer_config_error", issuer = self.index, error = %e, "cannot build the issuer's generator");
                false
            }
        }
    }

    /// The worker sub-range of the generator that issues now, after picking up a new lease if
    /// the node holds one; empty while the shard has none. A connection
    /// announces this in HELLO_OK and is served only while it stays the same.
    pub fn range(&mut self) -> WorkerRange {
        self.refresh();
        self.current_range
    }

    /// The worker sub-range and layout generation of the generator that issues now (see
    /// [`range`](Self::range)): what a connection announces and is served under.
    pub fn announce(&mut self) -> Announced {
        self.refresh();
        Announced {
            range: self.current_range,
            layout_generation: self.layout_generation,
        }
    }

    fn announced_now(&self) -> Announced {
        Announced {
            range: self.current_range,
            layout_generation: self.layout_generation,
        }
    }

    /// The layout the issuer's IDs are made with now (its grant's layout generation's).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The layout generation of the issuer's current grant.
    pub fn layout_generation(&self) -> u32 {
        self.layout_generation
    }

    /// The first ID of that layout generation (0 for generation 0): every ID drawn is at or
    /// above it.
    pub fn first_id(&self) -> u64 {
        self.first_id
    }

    /// The Unix time (ms) this issuer's clock must pass for every ID it draws to be above
    /// `id`, an ID of the cluster (an `after` a caller has seen): the time of `id`. The common
    /// case costs no look-up of the cluster's layout generations: an ID of this issuer's
    /// generation whose time, read with its layout, has passed. An ID of an earlier
    /// generation is below every ID drawn here: 0. Otherwise (it reads as ahead of the clock:
    /// maybe an ID of a later generation) the generations say. An ID the cluster's width
    /// cannot hold is an error.
    pub fn time_to_pass(&self, id: u64) -> Result<u64, idgen_id::LayoutError> {
        self.layout.check_id(id)?;
        if id < self.first_id {
            return Ok(0);
        }
        let unix_ms = self.layout.decompose(idgen_id::Id(id)).unix_ms;
        if unix_ms < self.clock.wall_ms() {
            return Ok(unix_ms);
        }
        self.lease
            .generations()
            .decompose(idgen_id::Id(id))
            .map(|(_, parts)| parts.unix_ms)
    }

    pub fn index(&self) -> usize {
        self.index
    }

    /// Lets the generator answer one clock reading until [`release_clock`](Self::release_clock)
    /// ([`Clock::hold`]): for the requests of one read.
    #[inline]
    pub fn hold_clock(&self) {
        if let Some((_, g)) = &self.current {
            g.clock().hold();
        }
    }

    /// Ends [`hold_clock`](Self::hold_clock).
    #[inline]
    pub fn release_clock(&self) {
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
    pub fn issue(
        &mut self,
        announced: Announced,
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
    pub fn abandon(&mut self, fill: &mut Fill) {
        if let Some((_, g)) = self.current.as_mut() {
            g.abandon(fill);
        }
    }

    fn issue_from(
        &mut self,
        announced: Announced,
        fill: &mut Fill,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<Progress, IssueError> {
        // A lease change reaches the generator as its old ceiling (lowered to 0 on loss), so
        // the lease is looked up only then, or while the shard has none: no shared read per
        // request.
        if self.current.is_none() && !self.refresh() {
            return Err(IssueError::NoLease);
        }
        if self.announced_now() != announced {
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
                if self.announced_now() != announced {
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
    pub fn issue_current(
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
        let range = self.announce();
        let result = match self.issue(range, fill, &mut emit) {
            // The lease changed between the look-up and the draw (nothing was drawn): once
            // more, under the new range.
            Err(IssueError::RangeChanged) if fill.emitted() == 0 => {
                let range = self.announce();
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
                    range: self.announced_now(),
                });
            }
        }
        result
    }

    /// Sleeps on the issuer's clock until monotonic time `at` (a [`Progress::RetryAt`]): for a
    /// caller that waits on its own thread (the embedded generator, the simulation).
    pub fn sleep_until(&self, at: u64) {
        self.clock.sleep(self.until(at));
    }

    /// The issuer's monotonic clock now (ns): the time base of [`Progress::RetryAt`].
    pub fn mono_ns(&self) -> u64 {
        self.clock.mono_ns()
    }

    /// How long until monotonic time `at` (a [`Progress::RetryAt`]) on the issuer's clock.
    pub fn until(&self, at: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(at.saturating_sub(self.clock.mono_ns()))
    }

    /// `n` IDs, waiting asleep on the issuer's clock when the generator asks to retry later:
    /// for the lease simulation, whose clock is simulated, and tests.
    #[cfg(test)]
    pub fn issue_blocking(
        &mut self,
        announced: impl Into<Announced>,
        n: u64,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<(), IssueError> {
        let announced = announced.into();
        let mut fill = Fill::new(n);
        loop {
            match self.issue(announced, &mut fill, &mut emit)? {
                Progress::Done => return Ok(()),
                Progress::RetryAt(at) => self.sleep_until(at),
            }
        }
    }

    /// What the issuer issued, for [`Member::leave`](super::Member::leave): call it once its
    /// fronts have stopped.
    pub fn exit(&self) -> IssuerExit {
        IssuerExit {
            last_issued: self.current.as_ref().and_then(|(generation, g)| {
                g.last_issued_timestamp().map(|timestamp| LastIssued {
                    generation: *generation,
                    timestamp,
                })
            }),
        }
    }

    /// The worker sub-range of the generator that issues now, without looking for a new
    /// lease; empty before the first.
    pub fn current_range(&self) -> WorkerRange {
        self.current_range
    }

    /// The lease ceiling of the generator that issues now (`None` before the first): a caller
    /// that keeps IDs drawn from it to hand out later checks it before each (the lease keeper
    /// lowers it when the lease is lost).
    pub fn ceiling(&self) -> Option<&Arc<Ceiling>> {
        self.current.as_ref().map(|(_, g)| g.ceiling())
    }

    /// The lease the issuer works under.
    pub fn lease(&self) -> &Arc<LeaseShared> {
        &self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{CachedClock, Clock};
    use crate::lease::keeper::LeaseView;
    use crate::lease::GrantTerms;

    fn view(generation: u64, first: u64, ceiling: u64) -> Arc<LeaseView> {
        Arc::new(LeaseView {
            grant: GrantTerms {
                workers: WorkerRange::new(first, 1),
                generation,
                floor: 0,
                layout_generation: 0,
            },
            ceiling: Arc::new(Ceiling::new(ceiling)),
            layout: idgen_id::Layout::default(),
        })
    }

    fn shard(lease: &Arc<LeaseShared>) -> Issuer<CachedClock> {
        let settings = IssuerSettings {
            layout: idgen_id::Layout::default(),
            workers: 1,
            max_rollback_wait: crate::generator::DEFAULT_MAX_ROLLBACK_WAIT,
        };
        Issuer::new(
            0,
            settings,
            Arc::clone(lease),
            Arc::default(),
            CachedClock::new(),
        )
    }

    fn now_id_ms(layout: idgen_id::Layout) -> u64 {
        crate::clock::SystemClock::new().wall_ms() - layout.epoch_ms()
    }

    #[test]
    fn a_batch_cut_by_the_ceiling_is_never_retried_after_part_of_it_went_out() {
        let layout = idgen_id::Layout::default();
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
        let layout = idgen_id::Layout::default();
        let per_ms = 1u64 << layout.sequence_bits();
        let far = now_id_ms(layout) + 60_000;
        let lease = LeaseShared::for_test(layout, Some(view(1, 0, far)));
        let mut g = shard(&lease);
        // A hundred milliseconds' worth: the first call emits part and asks to wait.
        let mut fill = Fill::new(100 * per_ms);
        let mut started = None;
        let mut workers = std::collections::BTreeSet::new();
        let mut emit = |first: u64, _n: u64| {
            workers.insert(layout.decompose(idgen_id::Id(first)).worker);
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
            seen.push(layout.decompose(idgen_id::Id(first)).worker)
        }) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(fill.emitted(), 10, "served whole");
        assert!(seen.iter().all(|&w| w == 5));
    }

    #[test]
    fn a_connection_whose_range_changed_gets_range_changed_before_any_id_is_drawn() {
        let layout = idgen_id::Layout::default();
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
                assert_eq!(layout.decompose(idgen_id::Id(first)).worker, 5);
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
