//! One member of a cluster's worker space: everything between "this process wants IDs" and
//! "this process has stopped issuing", written once for `idgen serve` and the embedded
//! generator, and driven by the lease simulation as both use it.
//!
//! ```text
//!   Member::join(store, settings, owner, clock)
//!     clock check against the members' clock keys (refuses beyond max_drift)
//!     lease: acquire patiently (a crashed predecessor's lease runs out first)
//!     clock key published (acquirers see this member alive)
//!   member.issuer(i, clock, stats)  ×N      one per shard (a node), one in all (embedded)
//!     Issuer: the generator of sub-range i of the grant, rebuilt on a new generation,
//!             fenced by the grant's floor and the keeper's Ceiling
//!   member.run(stop)                        the control thread (a node) or the background task
//!     keeper: renew every TTL/3 ──raises──▶ Ceiling ◀── read once per millisecond ── issuers
//!     clock watch: publish the clock key, read the peers' (drift, clock steps)
//!   member.leave(exits)                     once every issuer's fronts have stopped
//!     release the lease at the largest timestamp issued under it (the ceiling if an
//!     issuer's end is unknown), so its worker IDs are free at once
//! ```
//!
//! Who may touch what: the member owns the keeper and the clock watcher; the issuers hold the
//! lease's shared view ([`LeaseShared`]) and read the ceiling, and nothing else; the caller owns
//! the issuers (a shard thread each, or a mutex) and the runtime the member runs on, and hands
//! the issuers' [`IssuerExit`]s to [`Member::leave`] after they have stopped. The wire mapping
//! of errors and the waiting for [`Progress::RetryAt`](crate::generator::Progress) belong to
//! the caller.

use std::sync::Arc;
use std::time::Duration;

use idgen_id::Layout;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::drift::{ClockWatch, ClockWatcher, CLOCK_KEY_TTL};
use crate::generator::GeneratorStats;
use crate::lease::keeper::{Keeper, KeeperTiming, LeaseShared, LeaseView};
use crate::lease::{LeaseConfig, LeaseError, Owner, Released};
use crate::store::KvStore;

mod issuer;

pub use issuer::{
    Announced, IssueError, Issuer, IssuerExit, IssuerSettings, LastIssued, StartedUnder,
};

/// How a member joins the worker space and issues.
#[derive(Clone, Debug)]
pub struct MemberSettings {
    /// The cluster's layout (the cluster record must hold the same).
    pub layout: Layout,
    /// The lease: namespace, TTL, safety period, region, and the worker IDs of the whole
    /// member (issuers × worker IDs per issuer).
    pub lease: LeaseConfig,
    /// Worker IDs per issuer: issuer `i` issues from `first + i × per_issuer ..` of a grant.
    pub workers_per_issuer: u64,
    /// Refuse to join when the clock differs from the other members' by more.
    pub max_drift: Duration,
    /// How far back the clock may step and be waited out rather than refused.
    pub max_rollback_wait: Duration,
    /// How long [`Member::join`] keeps trying for a lease while one may free up by itself.
    pub patience: Duration,
}

impl MemberSettings {
    /// How long to keep trying for a lease at start when nothing says otherwise: a crashed
    /// predecessor's lease must expire and pass its safety period, and its clock key must
    /// expire (on a store that expires keys), then one TTL more.
    pub fn default_patience(lease: &LeaseConfig) -> Duration {
        (lease.ttl + lease.safety).max(CLOCK_KEY_TTL + Duration::from_secs(1)) + lease.ttl
    }

    fn issuer(&self) -> IssuerSettings {
        IssuerSettings {
            layout: self.layout,
            workers: self.workers_per_issuer,
            max_rollback_wait: self.max_rollback_wait,
        }
    }
}

/// Why a member could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The clock differs from the other members' by more than `max_drift`.
    #[error("refusing to start: {0}")]
    Clock(String),
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// One member of a worker space (see the [module docs](self)).
pub struct Member<C: Clock + Clone + Send + Sync + 'static> {
    keeper: Arc<Keeper<C>>,
    watcher: ClockWatcher<C>,
    clock_watch: Arc<ClockWatch>,
    settings: MemberSettings,
}

impl<C: Clock + Clone + Send + Sync + 'static> Member<C> {
    /// A member that has not joined: its keeper and clock watcher over `store`, as
    /// [`join`](Self::join) makes them. For the lease simulation, which drives the steps of
    /// joining itself; everyone else calls `join`.
    pub fn new(
        store: Arc<dyn KvStore>,
        settings: MemberSettings,
        owner: Owner,
        clock: C,
        timing: Option<KeeperTiming>,
    ) -> Self {
        let clock_watch = ClockWatch::new(settings.max_drift);
        let watcher = ClockWatcher::new(
            Arc::clone(&store),
            &settings.lease.namespace,
            owner.clone(),
            clock.clone(),
            Arc::clone(&clock_watch),
        );
        let mut keeper = Keeper::new(store, settings.layout, settings.lease.clone(), owner, clock)
            .with_clock_watch(Arc::clone(&clock_watch));
        if let Some(timing) = timing {
            keeper = keeper.with_timing(timing);
        }
        Member {
            keeper: Arc::new(keeper),
            watcher,
            clock_watch,
            settings,
        }
    }

    /// Joins the worker space: checks the clock against the members' clock keys, acquires a
    /// lease (waiting, within `settings.patience`, for one that frees up by itself) and
    /// publishes this member's clock key, so that acquirers on a store that expires keys see
    /// it alive from now on.
    pub async fn join(
        store: Arc<dyn KvStore>,
        settings: MemberSettings,
        owner: Owner,
        clock: C,
    ) -> Result<(Self, Arc<LeaseView>), JoinError> {
        let member = Self::new(store, settings, owner, clock, None);
        member
            .watcher
            .check_at_start()
            .await
            .map_err(JoinError::Clock)?;
        let view = member
            .keeper
            .acquire_patiently(member.settings.patience)
            .await?;
        member.watcher.publish().await;
        Ok((member, view))
    }

    /// The issuer of sub-range `index` of every grant, whose generators read `clock` and count
    /// into `stats` (kept across lease changes).
    pub fn issuer<G: Clock + Clone>(
        &self,
        index: usize,
        clock: G,
        stats: Arc<GeneratorStats>,
    ) -> Issuer<G> {
        Issuer::new(
            index,
            self.settings.issuer(),
            self.keeper.shared(),
            stats,
            clock,
        )
    }

    /// Renews the lease and watches the clocks (publishing this member's clock key) until
    /// `stop` turns true. If the renewal loop ends any other way, the issuers stop at once
    /// (see [`Keeper::run`]).
    pub async fn run(&self, stop: watch::Receiver<bool>) {
        tokio::join!(self.keeper.run(stop.clone()), self.watcher.run(stop));
    }

    /// Releases the lease after the issuers have stopped, at the largest timestamp they issued
    /// under the current generation: `exits` holds each issuer's report, `None` for one whose
    /// end is unknown (its thread panicked), which releases at the ceiling instead (it bounds
    /// everything issued). No issuers (a member that never served) releases at the floor.
    pub async fn leave(&self, exits: &[Option<IssuerExit>]) -> Result<Released, LeaseError> {
        let current = self.keeper.shared().current();
        let generation = current.as_ref().map(|v| v.grant.generation);
        let ceiling = current.as_ref().map_or(0, |v| v.ceiling.get());
        self.keeper
            .release(release_point(exits, generation, ceiling))
            .await
    }

    /// The lease as the keeper publishes it: the current grant and ceiling, renewal counters.
    pub fn lease(&self) -> Arc<LeaseShared> {
        self.keeper.shared()
    }

    /// The peers' clocks as the watcher measures them (drift, for health and metrics).
    pub fn clock_watch(&self) -> Arc<ClockWatch> {
        Arc::clone(&self.clock_watch)
    }

    /// The lease keeper, for the simulation's step-by-step driving and tests.
    pub fn keeper(&self) -> &Arc<Keeper<C>> {
        &self.keeper
    }

    /// The settings the member was made with.
    pub fn settings(&self) -> &MemberSettings {
        &self.settings
    }
}

/// Where a member's release puts `lease_end`: the largest timestamp any issuer issued under
/// `generation`, or the ceiling if some issuer's end is unknown; `None` if nothing was issued.
fn release_point(
    exits: &[Option<IssuerExit>],
    generation: Option<u64>,
    ceiling: u64,
) -> Option<u64> {
    if exits.iter().any(Option::is_none) {
        tracing::warn!(
            event = "shard_end_unknown",
            "an issuer stopped without reporting its last timestamp; releasing at the ceiling"
        );
        return Some(ceiling);
    }
    exits
        .iter()
        .flatten()
        .filter_map(|e| e.last_issued)
        .filter(|l| Some(l.generation) == generation)
        .map(|l| l.timestamp)
        .max()
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
