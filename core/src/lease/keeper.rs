//! The lease keeper: acquires a node's lease, renews it every TTL/3, and hands the ceiling to
//! the shards. Runs on the control thread, never on a shard.
//!
//! ```text
//!   acquire ──▶ Active ──renew ok──▶ Active (ceiling raised)
//!                 │  └─renew failed/unknown──▶ Active, ceiling unchanged: shards serve until
//!                 │                            they reach it, then answer "unavailable"
//!                 └─lost (generation changed)──▶ ceiling lowered to 0, view withdrawn,
//!                                                re-acquire (new range, new floor)
//! ```
//!
//! Shards read the current [`LeaseView`] (worker range, floor, shared [`Ceiling`]) from
//! [`LeaseShared::current`]; a change of generation means a new range and a new generator.
//!
//! ## The time a lease operation uses
//!
//! A grant or renewal puts `lease_end` one TTL past "now", and the shards issue up to it. "Now"
//! is the wall clock, checked against the boot clock (the monotonic clock that counts suspend,
//! [`Clock::boot_ns`]): the time the previous grant or renewal used plus the time that passed
//! since, with one TTL of slack. Within that, the wall clock is used as it is (a step back
//! too). A wall clock further ahead has *stepped*; the step is
//!
//! - **believed as soon as the peers' clocks confirm it** ([`ClockWatch::step_verdict`], from
//!   the clock keys the drift watcher reads, judged only by polls begun after the step was
//!   seen: within [`VERDICT_WITHIN`], 2.5 s): a fleet stepped together agrees with itself;
//! - **believed after [`STEP_HOLD`]** if there is no live peer to ask (one node, an embedded
//!   store), provided the wall clock stayed where it stepped to (wall minus boot clock within
//!   one TTL) for that long;
//! - **not believed** while the peers contradict it (this node's clock is the outlier; the
//!   drift alarm takes it out of rotation too), or until every live peer has been measured
//!   since the step.
//!
//! A resume from suspend moves the wall and boot clocks together: no step.
//!
//! ## Layout generations
//!
//! Every renewal reads the cluster record (conditionally, in its transaction), so the keeper
//! learns of a successor layout at its next renewal after it is scheduled, and from then on
//! its lease ends no later than the last timestamp before the switch. [`PREPARE`] before the
//! switch it acquires a grant in the successor's worker space (its floor is the successor's
//! first timestamp less one), and a moment before the switch ([`PUBLISH_EARLY`], within the
//! generators' default wait for their clock) publishes it: the issuers finish the old
//! generation at its ceiling and issue the new one from the switch on. The old grant is then
//! released at its lease end. A keeper that starts (or re-acquires) after a switch acquires in
//! the generation in effect by its clock.
//!
//! Until it is believed, the operation uses the time that passed plus one TTL, without the
//! slack accumulating from renewal to renewal: the lease end stays within two TTLs of the
//! time that really passed, so a step that comes back before it is believed leaves nothing
//! issued, or held, ahead. The shards meanwhile meet their ceiling and refuse (fail closed).
//! The keeper's loop looks at the clock every 250 ms between renewals and renews at once when
//! it stepped (or came back), and while a step waits for its hold or for the peers it renews
//! every `retry_every` instead of every `renew_every`, so the step is believed soon after it
//! qualifies. The `clock_jumped_ahead` event says how long the node expects to refuse;
//! `clock_step_believed`, `clock_step_contradicted` and `clock_step_withdrawn` say how it
//! ended. docs/RELIABILITY.md ("Clock steps ahead") says what each case costs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idgen_id::{Generation, Generations, Layout};
use tokio::sync::watch;

use super::{duration_ms, Grant, GrantTerms, LeaseConfig, LeaseError, Leases, Owner, Released};

/// How long before a switch of layout generation the keeper acquires its grant in the
/// successor (at most its renewal interval).
pub const PREPARE: Duration = Duration::from_secs(2);
/// How long before the switch the keeper publishes that grant: the issuers that pick it up
/// wait this long at most for their clock to reach the successor's first timestamp, within
/// the generator's default wait (10 ms), so the switch costs no refusals.
pub const PUBLISH_EARLY: Duration = Duration::from_millis(3);
use crate::clock::Clock;
use crate::drift::{ClockWatch, StepVerdict, VERDICT_WITHIN};
use crate::generator::Ceiling;
use crate::histogram::{Histogram, Snapshot};
use crate::store::KvStore;

/// The lease a node's shards work under.
#[derive(Debug)]
pub struct LeaseView {
    /// The worker range, generation and floor: fixed for the grant's life.
    pub grant: GrantTerms,
    /// The shards' ceiling (ID-time ms): the lease end last committed, as the shards obey it.
    /// Renewals raise it, loss and release lower it to 0. The one live copy of the lease end.
    pub ceiling: Arc<Ceiling>,
    /// The layout of the grant's layout generation: what its IDs are made with.
    pub layout: Layout,
}

/// Upper bounds (inclusive, µs) of the renewal-duration histogram's buckets: 1 ms to 10 s.
pub const RENEWAL_BUCKETS_US: [u64; 13] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];

/// Values for metrics and health, updated by the keeper. The metrics catalogue of the node
/// (`idgen::node::metrics`) says how each is exposed.
#[derive(Debug, Default)]
pub struct LeaseStats {
    pub renew_ok: AtomicU64,
    pub renew_failed: AtomicU64,
    /// Durations of the successful renewals, µs (bounds [`RENEWAL_BUCKETS_US`]).
    pub renew_ok_duration: Histogram<13>,
    /// Durations of the failed renewals (the store refused, timed out or left the outcome
    /// unknown), µs.
    pub renew_failed_duration: Histogram<13>,
    /// Duration of the last renewal attempt, µs.
    pub renew_latency_us: AtomicU64,
    /// Sum of the durations of every renewal attempt (lost ones included), µs.
    pub renew_latency_us_sum: AtomicU64,
    /// Generation of the current grant (0 before the first).
    pub generation: AtomicU64,
    /// Grants obtained (the first one and every re-acquisition).
    pub acquisitions: AtomicU64,
    /// Times the lease was found lost.
    pub lost: AtomicU64,
    /// Free worker IDs in the node's search space, as of the last look.
    pub free_workers: AtomicU64,
    /// Wall clock (Unix ms) of the last successful renewal or grant.
    pub last_ok_unix_ms: AtomicU64,
}

impl LeaseStats {
    /// Renewal attempts by result: `("ok", n)`, `("failed", n)`.
    pub fn renewals(&self) -> [(&'static str, u64); 2] {
        [
            ("ok", self.renew_ok.load(Ordering::Relaxed)),
            ("failed", self.renew_failed.load(Ordering::Relaxed)),
        ]
    }

    /// The renewal-duration histograms by result, as [`renewals`](LeaseStats::renewals) counts
    /// them (µs).
    pub fn renewal_durations(&self) -> [(&'static str, Snapshot); 2] {
        [
            ("ok", self.renew_ok_duration.snapshot()),
            ("failed", self.renew_failed_duration.snapshot()),
        ]
    }
}

/// State shared between the keeper and everyone who reads it.
#[derive(Debug)]
pub struct LeaseShared {
    view: watch::Sender<Option<Arc<LeaseView>>>,
    pub stats: LeaseStats,
    /// The layout the node is configured with (one of the cluster's generations').
    pub layout: Layout,
    /// The cluster's layout generations, as the keeper last read them.
    generations: Mutex<Generations>,
}

impl LeaseShared {
    /// The current lease, if the node holds one.
    pub fn current(&self) -> Option<Arc<LeaseView>> {
        self.view.borrow().clone()
    }
    /// A receiver that sees every change of lease.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<LeaseView>>> {
        self.view.subscribe()
    }
    /// ID-time ms left before the shards reach their ceiling (0 without a lease).
    pub fn time_left_ms(&self, now_unix_ms: u64) -> u64 {
        self.current().map_or(0, |v| {
            let now = now_unix_ms.saturating_sub(v.layout.epoch_ms());
            v.ceiling.get().saturating_sub(now)
        })
    }

    /// The cluster's layout generations as the keeper last read them (the configured layout
    /// alone until it has).
    pub fn generations(&self) -> Generations {
        self.generations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// For tests only, not part of the supported API (this crate's tests, and those of crates that
/// turn on the `conformance` feature).
#[cfg(any(test, feature = "conformance"))]
impl LeaseShared {
    /// A lease view published by hand, for tests of its readers.
    pub fn for_test(layout: Layout, view: Option<Arc<LeaseView>>) -> Arc<LeaseShared> {
        Arc::new(LeaseShared {
            view: watch::Sender::new(view),
            stats: LeaseStats::default(),
            layout,
            generations: Mutex::new(Generations::new(layout)),
        })
    }

    /// Replaces the published view, as the keeper does on a grant or a loss.
    pub fn publish_for_test(&self, view: Option<Arc<LeaseView>>) {
        self.view.send_replace(view);
    }
}

/// Timing of the keeper loop.
#[derive(Clone, Copy, Debug)]
pub struct KeeperTiming {
    /// Between successful renewals (default TTL/3).
    pub renew_every: Duration,
    /// Between attempts after a failure (default TTL/10, at most 1 s).
    pub retry_every: Duration,
    /// Longest a store operation may take before it counts as failed (default TTL/3).
    pub op_timeout: Duration,
}

impl KeeperTiming {
    pub fn for_ttl(ttl: Duration) -> Self {
        KeeperTiming {
            renew_every: ttl / 3,
            retry_every: (ttl / 10).min(Duration::from_secs(1)),
            op_timeout: ttl / 3,
        }
    }
}

/// How long a step of the wall clock ahead must hold before the keeper believes it when no
/// peer can confirm it (one node, an embedded store). A step that comes back within it costs
/// nothing but the refusals while it lasted; one believed and then undone leaves IDs issued
/// ahead, and the node refuses (clock behind) until the clock reaches them again. Five seconds
/// is long enough for a step corrected at once (an operator's slip undone, a single bad time
/// sample a time daemon steps back from at its next burst) to come back, and short enough that
/// a lone node whose clock was put right (set forward by hand, NTP catching up after a long
/// time behind) serves again within seconds, whatever its TTL.
pub const STEP_HOLD: Duration = Duration::from_secs(5);

/// How often the keeper's loop looks at the wall clock between renewals (two clock reads), so
/// that a step ahead is seen, and its hold started, within this long.
const STEP_LOOK_EVERY: Duration = Duration::from_millis(250);

/// A step of the wall clock ahead, seen by the keeper and not yet believed.
#[derive(Clone, Copy, Debug)]
struct Step {
    /// Wall clock minus boot clock (ms) after the step: the step holds while this stays within
    /// one TTL of where it was first seen.
    offset_ms: i64,
    /// The boot clock (ns) when the keeper first saw it.
    seen_boot_ns: u64,
    /// The drift watch's poll count then: only polls begun later judge the step.
    seen_poll: u64,
    /// Whether the peers' contradiction was reported.
    contradicted: bool,
}

/// The time a lease operation uses ([`Keeper::lease_now`]), the boot clock (ns) when it was
/// taken, and the anchor to keep if it succeeds: (wall ms, boot ns) that later operations are
/// bounded by.
#[derive(Clone, Copy, Debug)]
struct LeaseTime {
    now: u64,
    boot: u64,
    anchor: Anchor,
}

/// A time the keeper believes: the wall clock (ms) of the last successful grant or renewal, or
/// of a step just believed, and the boot clock (ns) when it was read. The next operation's
/// lease time is bounded by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchor {
    wall_ms: u64,
    boot_ns: u64,
}

/// The lease keeper of one node.
pub struct Keeper<C: Clock> {
    store: Arc<dyn KvStore>,
    layout: Layout,
    config: LeaseConfig,
    owner: Owner,
    clock: C,
    timing: KeeperTiming,
    shared: Arc<LeaseShared>,
    /// The grant as last committed (its `lease_end` follows successful renewals).
    grant: Mutex<Option<Grant>>,
    /// A grant in the next layout generation, acquired shortly before its switch and
    /// published at it.
    pending: Mutex<Option<Grant>>,
    /// The last grant found lost, as last committed: a later grant must have a higher
    /// generation and, where it covers the same worker IDs, a floor at or above its lease end.
    lost: Mutex<Option<Grant>>,
    /// A time (wall ms) the keeper believes, and the boot clock (ns) when it was read: that of
    /// the last successful grant or renewal, or of a step just believed. Bounds how far the
    /// next operation may move the lease end.
    anchor: Mutex<Option<Anchor>>,
    /// A step of the wall clock ahead, not yet believed.
    step: Mutex<Option<Step>>,
    /// The peers' clocks, to confirm a step (none: no peers to ask).
    watch: Option<Arc<ClockWatch>>,
    /// The boot clock (ns) at the last successful grant or renewal: how late the next one is,
    /// whatever the wall clock did meanwhile.
    last_ok_boot_ns: AtomicU64,
}

impl<C: Clock + Send + Sync + 'static> Keeper<C> {
    pub fn new(
        store: Arc<dyn KvStore>,
        layout: Layout,
        config: LeaseConfig,
        owner: Owner,
        clock: C,
    ) -> Self {
        let (view, _) = watch::channel(None);
        Keeper {
            store,
            layout,
            timing: KeeperTiming::for_ttl(config.ttl),
            config,
            owner,
            clock,
            shared: Arc::new(LeaseShared {
                view,
                stats: LeaseStats::default(),
                layout,
                generations: Mutex::new(Generations::new(layout)),
            }),
            grant: Mutex::new(None),
            pending: Mutex::new(None),
            lost: Mutex::new(None),
            anchor: Mutex::new(None),
            step: Mutex::new(None),
            watch: None,
            last_ok_boot_ns: AtomicU64::new(0),
        }
    }

    /// Confirms steps of the wall clock against the peers' clocks that `watch` measures (the
    /// node's drift watch). Without it, every step ahead waits [`STEP_HOLD`].
    pub fn with_clock_watch(mut self, watch: Arc<ClockWatch>) -> Self {
        self.watch = Some(watch);
        self
    }

    pub fn with_timing(mut self, timing: KeeperTiming) -> Self {
        self.timing = timing;
        self
    }

    pub fn shared(&self) -> Arc<LeaseShared> {
        Arc::clone(&self.shared)
    }

    /// The lease operations in layout generation `era`.
    fn leases_in(&self, era: Generation) -> Leases<'_> {
        Leases::new(
            self.store.as_ref(),
            self.layout,
            self.config.clone(),
            self.owner.clone(),
        )
        .in_generation(era)
    }

    /// The lease operations in the generation in effect at `now_unix_ms`, as last read.
    fn leases(&self, now_unix_ms: u64) -> Leases<'_> {
        self.leases_in(*self.shared.generations().at(now_unix_ms))
    }

    /// The lease operations in `grant`'s generation.
    fn leases_of(&self, grant: &Grant) -> Leases<'_> {
        let gens = self.shared.generations();
        let era = gens
            .get(grant.layout_generation)
            .copied()
            .unwrap_or(*gens.base());
        self.leases_in(era)
    }

    fn set_generations(&self, gens: Generations) {
        let mut slot = self
            .shared
            .generations
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *slot != gens {
            if let Some(next) = gens.all().get(slot.all().len()) {
                tracing::info!(
                    event = "layout_successor_seen",
                    layout_generation = next.index,
                    switch_unix_ms = next.switch_unix_ms,
                    layout = %next.layout,
                    "a successor layout is scheduled"
                );
            }
            *slot = gens;
        }
    }

    fn pending_slot(&self) -> std::sync::MutexGuard<'_, Option<Grant>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn grant_slot(&self) -> std::sync::MutexGuard<'_, Option<Grant>> {
        self.grant.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lost_slot(&self) -> std::sync::MutexGuard<'_, Option<Grant>> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lease end last committed for the current grant (`None` without one): the value
    /// the shards' ceiling follows.
    pub fn lease_end(&self) -> Option<u64> {
        self.grant_slot().as_ref().map(|g| g.lease_end)
    }

    /// Refuses a grant that contradicts what this keeper saw committed before: a generation
    /// not above the last grant's (invariant 3), or a floor below the lease end it last
    /// committed for the same worker IDs (invariant 1). Both come from the store, so a store
    /// that lost committed writes is reported as an error, never trusted.
    fn check_grant(&self, grant: &Grant) -> Result<(), LeaseError> {
        let previous = self
            .grant_slot()
            .clone()
            .or_else(|| self.lost_slot().clone());
        let Some(previous) = previous else {
            return Ok(());
        };
        let corrupt = |detail: String| LeaseError::Corrupt {
            key: format!("workers {}", grant.workers),
            detail,
        };
        if grant.generation <= previous.generation {
            return Err(corrupt(format!(
                "granted under generation {}, not above this node's earlier grant's {}: the store went back",
                grant.generation, previous.generation
            )));
        }
        // Worker IDs and ID time of different layout generations are different spaces.
        let overlaps = grant.layout_generation == previous.layout_generation
            && grant.workers.first < previous.workers.end()
            && previous.workers.first < grant.workers.end();
        if overlaps && grant.floor < previous.lease_end {
            return Err(corrupt(format!(
                "floor {} is below the lease end {} this node committed for these worker IDs under generation {}: the store lost a write",
                grant.floor, previous.lease_end, previous.generation
            )));
        }
        Ok(())
    }

    fn step_slot(&self) -> std::sync::MutexGuard<'_, Option<Step>> {
        self.step.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wall-clock time a lease operation uses (module docs, "The time a lease operation
    /// uses"): the wall clock, unless it is more than one TTL ahead of the anchor plus the boot
    /// time passed since and that step is not believed yet; then the anchor plus the time
    /// passed plus one TTL, so that however often the keeper renews, the lease end stays within
    /// two TTLs of the time that really passed. Believing a step moves the anchor to it at once
    /// (a renewal that then fails does not start the hold again).
    fn lease_now(&self) -> LeaseTime {
        let wall = self.clock.wall_ms();
        let boot = self.clock.boot_ns();
        let at_wall = LeaseTime {
            now: wall,
            boot,
            anchor: Anchor {
                wall_ms: wall,
                boot_ns: boot,
            },
        };
        let anchor = *self.anchor.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Anchor {
            wall_ms: then_ms,
            boot_ns: then_boot,
        }) = anchor
        else {
            return at_wall;
        };
        let ttl_ms = duration_ms(self.config.ttl);
        let passed = then_ms.saturating_add(boot.saturating_sub(then_boot) / 1_000_000);
        let mut slot = self.step_slot();
        if wall <= passed.saturating_add(ttl_ms) {
            if let Some(step) = slot.take() {
                tracing::info!(
                    event = "clock_step_withdrawn",
                    held_ms = boot.saturating_sub(step.seen_boot_ns) / 1_000_000,
                    "the wall clock came back before its step ahead was believed: nothing was issued or held ahead"
                );
            }
            return at_wall;
        }
        let ahead_ms = wall - passed;
        let offset_ms = wall as i64 - (boot / 1_000_000) as i64;
        // The same step while the wall clock stays within one TTL of where it stepped to;
        // a new one if it moved on.
        let seen = Step {
            offset_ms,
            seen_boot_ns: boot,
            seen_poll: self.watch.as_ref().map_or(0, |w| w.polls()),
            contradicted: false,
        };
        let fresh = !matches!(*slot, Some(s) if s.offset_ms.abs_diff(offset_ms) <= ttl_ms);
        if fresh {
            *slot = Some(seen);
        }
        let step = slot.get_or_insert(seen);
        let verdict = self
            .watch
            .as_ref()
            .map_or(StepVerdict::NoPeers, |w| w.step_verdict(step.seen_poll));
        if fresh {
            self.report_step(ahead_ms, verdict);
        }
        let held = Duration::from_nanos(boot.saturating_sub(step.seen_boot_ns));
        let believed = match verdict {
            StepVerdict::Confirmed { .. } => true,
            StepVerdict::NoPeers => held >= STEP_HOLD,
            StepVerdict::Pending { .. } | StepVerdict::Contradicted { .. } => false,
        };
        if believed {
            *slot = None;
            drop(slot);
            self.set_anchor(at_wall.anchor);
            let (why, by, peers) = match verdict {
                StepVerdict::Confirmed { peers, .. } => {
                    ("the peers' clocks confirm it", "peers", peers)
                }
                _ => ("it held, with no peers to confirm it", "hold", 0),
            };
            tracing::info!(
                event = "clock_step_believed",
                ahead_ms,
                held_ms = duration_ms(held),
                believed_by = by,
                peers,
                "the wall clock's step ahead ({ahead_ms} ms) is believed ({why}): the lease follows it and the node serves again"
            );
            return at_wall;
        }
        if let StepVerdict::Contradicted { peers, drift_ms } = verdict {
            if !step.contradicted {
                step.contradicted = true;
                tracing::warn!(
                    event = "clock_step_contradicted",
                    ahead_ms,
                    peers,
                    drift_ms,
                    "{peers} peer(s) disagree with the wall clock's step ahead (by {drift_ms} ms): the node refuses IDs for as long as its clock disagrees with theirs"
                );
            }
        }
        LeaseTime {
            now: passed.saturating_add(ttl_ms),
            boot,
            anchor: Anchor {
                wall_ms: then_ms,
                boot_ns: then_boot,
            },
        }
    }

    /// The `clock_jumped_ahead` event: a step ahead just seen, and how long the node expects to
    /// refuse IDs because of it.
    fn report_step(&self, ahead_ms: u64, verdict: StepVerdict) {
        let check = duration_ms(self.timing.retry_every);
        match verdict {
            StepVerdict::NoPeers => {
                let hold_ms = duration_ms(STEP_HOLD);
                let refuse_for_ms = hold_ms + check;
                tracing::warn!(
                    event = "clock_jumped_ahead",
                    ahead_ms,
                    refuse_for_ms,
                    peers = 0,
                    "the wall clock stepped {ahead_ms} ms ahead of the time that passed; with no peers to confirm it, it is believed once it has held for {hold_ms} ms: IDs are refused for about {refuse_for_ms} ms"
                );
            }
            StepVerdict::Pending { peers }
            | StepVerdict::Confirmed { peers, .. }
            | StepVerdict::Contradicted { peers, .. } => {
                let refuse_for_ms = duration_ms(VERDICT_WITHIN) + check;
                tracing::warn!(
                    event = "clock_jumped_ahead",
                    ahead_ms,
                    refuse_for_ms,
                    peers,
                    "the wall clock stepped {ahead_ms} ms ahead of the time that passed; it is believed once {peers} peer(s) confirm it: IDs are refused for about {refuse_for_ms} ms, or for as long as the clock disagrees with the peers'"
                );
            }
        }
    }

    /// Whether the wall clock stepped ahead since the keeper last looked (beyond one TTL ahead
    /// of the time that passed, and not the step it already knows), or came back from a step
    /// it knows: a cheap look (two clock reads) between renewals.
    fn clock_moved(&self) -> bool {
        let Some(Anchor {
            wall_ms: then_ms,
            boot_ns: then_boot,
        }) = *self.anchor.lock().unwrap_or_else(|e| e.into_inner())
        else {
            return false;
        };
        let wall = self.clock.wall_ms();
        let boot = self.clock.boot_ns();
        let ttl_ms = duration_ms(self.config.ttl);
        let passed = then_ms.saturating_add(boot.saturating_sub(then_boot) / 1_000_000);
        let ahead = wall > passed.saturating_add(ttl_ms);
        let offset_ms = wall as i64 - (boot / 1_000_000) as i64;
        match *self.step_slot() {
            None => ahead,
            Some(step) => !ahead || step.offset_ms.abs_diff(offset_ms) > ttl_ms,
        }
    }

    fn set_anchor(&self, anchor: Anchor) {
        *self.anchor.lock().unwrap_or_else(|e| e.into_inner()) = Some(anchor);
    }

    /// When to renew next: sooner while a step ahead waits to be believed (not while the peers
    /// contradict it: that lasts as long as the clock is wrong).
    fn next_renewal(&self) -> Duration {
        match *self.step_slot() {
            Some(step) if !step.contradicted => self.timing.retry_every,
            _ => self.timing.renew_every,
        }
    }

    async fn timed<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, LeaseError>>,
    ) -> Result<T, LeaseError> {
        match tokio::time::timeout(self.timing.op_timeout, f).await {
            Ok(r) => r,
            Err(_) => Err(LeaseError::Store(crate::store::StoreError::Unknown(
                format!("no answer within {:?}", self.timing.op_timeout),
            ))),
        }
    }

    /// Acquires a lease and publishes it. At start-up, the caller treats an error as fatal.
    pub async fn acquire(&self) -> Result<Arc<LeaseView>, LeaseError> {
        let LeaseTime { now, boot, anchor } = self.lease_now();
        let grant = self.acquire_in_effect(now).await?;
        let layout = self.layout_of(&grant);
        assert!(
            grant.lease_end >= grant.floor
                && grant.workers.count == self.config.workers
                && grant.workers.end() <= layout.worker_count(),
            "invariant 1: a grant's lease_end is at or above its floor, over the range asked for: {grant:?}"
        );
        self.check_grant(&grant)?;
        self.set_anchor(anchor);
        let view = Arc::new(LeaseView {
            ceiling: Arc::new(Ceiling::new(grant.lease_end)),
            grant: grant.terms(),
            layout,
        });
        let stats = &self.shared.stats;
        stats.generation.store(grant.generation, Ordering::Relaxed);
        stats.acquisitions.fetch_add(1, Ordering::Relaxed);
        stats.last_ok_unix_ms.store(now, Ordering::Relaxed);
        self.last_ok_boot_ns.store(boot, Ordering::Relaxed);
        tracing::info!(
            event = "lease_acquired",
            store = %self.store.describe(),
            worker_first = grant.workers.first,
            worker_count = grant.workers.count,
            generation = grant.generation,
            floor = grant.floor,
            lease_end = grant.lease_end,
            wait_ms = grant.floor.saturating_sub(now.saturating_sub(layout.epoch_ms())),
            layout_generation = grant.layout_generation,
            "lease acquired"
        );
        *self.grant_slot() = Some(grant);
        self.shared.view.send_replace(Some(Arc::clone(&view)));
        assert!(
            view.ceiling.get() == self.lease_end().unwrap_or(0),
            "invariant 2: the published ceiling is the lease end just committed"
        );
        self.refresh_occupancy().await;
        Ok(view)
    }

    /// A grant in the layout generation in effect at `now` (re-reading the cluster's
    /// generations when they changed).
    async fn acquire_in_effect(&self, now: u64) -> Result<Grant, LeaseError> {
        let mut tries = 0;
        loop {
            match self.timed(self.leases(now).acquire(now)).await {
                Err(LeaseError::Rescheduled(gens)) if tries < 3 => {
                    self.set_generations(*gens);
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    /// The layout of `grant`'s layout generation.
    fn layout_of(&self, grant: &Grant) -> Layout {
        self.shared
            .generations()
            .get(grant.layout_generation)
            .map_or(self.layout, |g| g.layout)
    }

    /// Moves towards the next layout generation if one is scheduled after `grant`'s: acquires
    /// in it [`PREPARE`] before its switch, publishes that grant [`PUBLISH_EARLY`] before it
    /// and releases the old one. Returns when to look again; `None` without a successor.
    async fn switch_step(&self, grant: &Grant) -> Option<Duration> {
        let gens = self.shared.generations();
        let next = *gens.after(grant.layout_generation)?;
        let switch = next.switch_unix_ms?;
        let prepare = duration_ms(PREPARE.min(self.timing.renew_every));
        let prepare_at = switch.saturating_sub(prepare);
        let publish_at = switch.saturating_sub(duration_ms(PUBLISH_EARLY));
        let wall = self.clock.wall_ms();
        if wall < prepare_at {
            return Some(Duration::from_millis(prepare_at - wall));
        }
        let prepared = self.pending_slot().is_some();
        if !prepared {
            let LeaseTime { now, .. } = self.lease_now();
            match self.timed(self.leases_in(next).acquire(now)).await {
                Ok(g) => {
                    if let Err(e) = self.check_grant(&g) {
                        tracing::error!(event = "layout_switch_failed", error = %e, "refused the successor's grant");
                        return Some(self.timing.retry_every);
                    }
                    tracing::info!(
                        event = "layout_switch_prepared",
                        layout_generation = next.index,
                        worker_first = g.workers.first,
                        worker_count = g.workers.count,
                        generation = g.generation,
                        floor = g.floor,
                        "leased in the successor layout; switching at its switch time"
                    );
                    *self.pending_slot() = Some(g);
                }
                Err(LeaseError::Rescheduled(gens)) => {
                    self.set_generations(*gens);
                    return Some(self.timing.retry_every);
                }
                Err(e) => {
                    tracing::warn!(event = "layout_switch_failed", error = %e, layout_generation = next.index, "could not lease in the successor layout yet; retrying");
                    return Some(self.timing.retry_every);
                }
            }
        }
        let wall = self.clock.wall_ms();
        if wall < publish_at {
            return Some(Duration::from_millis(publish_at - wall));
        }
        let pending = self.pending_slot().take();
        let pending = pending?;
        let layout = next.layout;
        let view = Arc::new(LeaseView {
            ceiling: Arc::new(Ceiling::new(pending.lease_end)),
            grant: pending.terms(),
            layout,
        });
        let old = self.grant_slot().replace(pending.clone());
        self.shared
            .stats
            .generation
            .store(pending.generation, Ordering::Relaxed);
        self.shared.view.send_replace(Some(view));
        tracing::info!(
            event = "layout_switched",
            layout_generation = next.index,
            layout = %layout,
            worker_first = pending.workers.first,
            worker_count = pending.workers.count,
            generation = pending.generation,
            "switched to the successor layout"
        );
        if let Some(old) = old {
            // The old issuers stop at their ceiling, at or below the lease end committed:
            // released there, everything they issued is below it.
            let now = self.clock.wall_ms();
            let leases = self.leases_of(&old);
            match self
                .timed(leases.release(&old, Some(old.lease_end), now))
                .await
            {
                Ok(r) => tracing::info!(
                    event = "lease_released",
                    generation = old.generation,
                    layout_generation = old.layout_generation,
                    outcome = r.name(),
                    "the old layout's lease released"
                ),
                Err(e) => {
                    tracing::warn!(event = "lease_release_failed", generation = old.generation, error = %e, "could not release the old layout's lease; it expires")
                }
            }
        }
        Some(Duration::ZERO)
    }

    /// Acquires at start-up, retrying what may clear by itself until `within` has passed: the
    /// store unreachable or contended, or no free range while some held worker IDs free up by
    /// themselves after their safety period: expired leases (a crashed predecessor), or live
    /// ones of this node's previous life (same node ID, restarted at once after a crash).
    /// Everything else returns at once, including a worker space full of other nodes' live
    /// leases (more nodes than the layout allows) and a layout mismatch.
    pub async fn acquire_patiently(&self, within: Duration) -> Result<Arc<LeaseView>, LeaseError> {
        let deadline = Instant::now() + within;
        loop {
            match self.acquire().await {
                Ok(view) => return Ok(view),
                Err(
                    e @ (LeaseError::NoFreeRange { expiring: 1.., .. }
                    | LeaseError::Store(_)
                    | LeaseError::Contention { .. }),
                ) if Instant::now() + self.timing.retry_every < deadline => {
                    tracing::warn!(
                        event = "lease_acquire_failed",
                        error = %e,
                        retry_in_ms = duration_ms(self.timing.retry_every),
                        "no lease yet; retrying"
                    );
                    tokio::time::sleep(self.timing.retry_every).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn refresh_occupancy(&self) {
        let now = self.clock.wall_ms();
        if let Ok(Ok(o)) =
            tokio::time::timeout(self.timing.op_timeout, self.leases(now).occupancy(now)).await
        {
            self.shared
                .stats
                .free_workers
                .store(o.free, Ordering::Relaxed);
        }
    }

    /// One renewal attempt. Returns when the next attempt is due.
    pub async fn renew_once(&self) -> Duration {
        let Some(view) = self.shared.current() else {
            return match self.acquire().await {
                Ok(_) => self.next_renewal(),
                Err(e) => {
                    tracing::warn!(event = "lease_acquire_failed", error = %e, "could not acquire a lease");
                    self.timing.retry_every
                }
            };
        };
        let Some(grant) = self.grant_slot().clone() else {
            return self.timing.retry_every;
        };
        assert!(
            view.grant == grant.terms() && view.ceiling.get() <= grant.lease_end,
            "invariant 2: the published view is the keeper's grant, its ceiling ({}) at or below the lease end committed ({grant:?})",
            view.ceiling.get()
        );
        if let Some(wait) = self.switch_step(&grant).await {
            if wait.is_zero() {
                // Switched: renew the new grant at once.
                return Duration::ZERO;
            }
        }
        let stats = &self.shared.stats;
        let started = Instant::now();
        let LeaseTime { now, boot, anchor } = self.lease_now();
        let result = self
            .timed(self.leases_of(&grant).renew_seeing(&grant, now))
            .await
            .map(|(lease_end, gens)| {
                self.set_generations(gens);
                lease_end
            });
        let latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        stats.renew_latency_us.store(latency_us, Ordering::Relaxed);
        stats
            .renew_latency_us_sum
            .fetch_add(latency_us, Ordering::Relaxed);
        match result {
            Ok(lease_end) => {
                assert!(
                    lease_end >= grant.lease_end,
                    "invariant 1: a renewal only raises the lease end ({} to {lease_end})",
                    grant.lease_end
                );
                self.set_anchor(anchor);
                if let Some(g) = self.grant_slot().as_mut() {
                    g.lease_end = lease_end;
                }
                view.ceiling.raise_to(lease_end);
                assert!(
                    view.ceiling.get() <= lease_end,
                    "invariant 2: the ceiling is raised only to a lease end whose commit succeeded"
                );
                stats.renew_ok.fetch_add(1, Ordering::Relaxed);
                stats
                    .renew_ok_duration
                    .record(&RENEWAL_BUCKETS_US, latency_us);
                stats.last_ok_unix_ms.store(now, Ordering::Relaxed);
                // By the boot clock: a step of the wall clock just believed is no late renewal.
                let last_ok = self.last_ok_boot_ns.swap(boot, Ordering::Relaxed);
                let since_ms = boot.saturating_sub(last_ok) / 1_000_000;
                if since_ms > duration_ms(self.config.ttl) / 2 {
                    tracing::warn!(
                        event = "lease_renewed_late",
                        generation = grant.generation,
                        since_last_ok_ms = since_ms,
                        lease_end,
                        "lease renewed late"
                    );
                }
                self.refresh_occupancy().await;
                // A switch scheduled: look again when its next step is due.
                match self.switch_step_due(&grant) {
                    Some(due) => self.next_renewal().min(due),
                    None => self.next_renewal(),
                }
            }
            Err(LeaseError::Lost(reason)) => {
                view.ceiling.lower_to(0);
                self.shared.view.send_replace(None);
                *self.lost_slot() = self.grant_slot().take();
                assert!(
                    view.ceiling.get() == 0,
                    "invariant 3: a lost lease stops the shards"
                );
                stats.lost.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    event = "lease_lost",
                    generation = grant.generation,
                    worker_first = grant.workers.first,
                    worker_count = grant.workers.count,
                    reason = %reason,
                    "lease lost: shards stopped; re-acquiring"
                );
                Duration::ZERO
            }
            Err(e) => {
                stats.renew_failed.fetch_add(1, Ordering::Relaxed);
                stats
                    .renew_failed_duration
                    .record(&RENEWAL_BUCKETS_US, latency_us);
                let now_id = now.saturating_sub(view.layout.epoch_ms());
                tracing::warn!(
                    event = "lease_renewal_failed",
                    generation = grant.generation,
                    error = %e,
                    time_left_ms = view.ceiling.get().saturating_sub(now_id),
                    "lease renewal failed; shards serve until the ceiling"
                );
                self.timing.retry_every
            }
        }
    }

    /// How long until the next step of a scheduled switch after `grant`'s generation.
    fn switch_step_due(&self, grant: &Grant) -> Option<Duration> {
        let gens = self.shared.generations();
        let switch = gens.after(grant.layout_generation)?.switch_unix_ms?;
        let prepare = duration_ms(PREPARE.min(self.timing.renew_every));
        let at = if self.pending_slot().is_some() {
            switch.saturating_sub(duration_ms(PUBLISH_EARLY))
        } else {
            switch.saturating_sub(prepare)
        };
        Some(Duration::from_millis(
            at.saturating_sub(self.clock.wall_ms()),
        ))
    }

    /// Renews until `shutdown` turns true. If the loop ends any other way (a panic, such as a
    /// failed invariant assertion, or its task dropped), the shards stop at once: the ceiling
    /// is lowered to 0 and the view withdrawn (`StopOnExit`).
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) {
        let guard = StopOnExit(Some(self));
        self.run_until(&mut shutdown).await;
        guard.disarm();
    }

    async fn run_until(&self, shutdown: &mut watch::Receiver<bool>) {
        let mut wait = self.timing.renew_every;
        loop {
            if *shutdown.borrow() {
                return;
            }
            // Wait for the renewal, looking at the clock meanwhile: a step ahead (or back from
            // one) is renewed for at once, so its hold starts when it happened, not at the
            // next renewal.
            let due = tokio::time::Instant::now() + wait;
            while let Some(left) = due
                .checked_duration_since(tokio::time::Instant::now())
                .filter(|left| !left.is_zero())
            {
                tokio::select! {
                    _ = tokio::time::sleep(left.min(STEP_LOOK_EVERY)) => {}
                    changed = shutdown.changed() => {
                        if changed.is_err() || *shutdown.borrow() {
                            return;
                        }
                    }
                }
                if self.clock_moved() {
                    break;
                }
            }
            wait = self.renew_once().await;
        }
    }

    /// Releases the lease after the shards have stopped issuing. `last_issued` is the largest
    /// timestamp any shard issued under it (`None` if none did).
    pub async fn release(&self, last_issued: Option<u64>) -> Result<Released, LeaseError> {
        let Some(grant) = self.grant_slot().clone() else {
            return Ok(Released::AlreadyLost);
        };
        // The shards obeyed a ceiling at or below the lease end committed: what they issued,
        // or the ceiling itself when a shard's end is unknown, is at or below it.
        assert!(
            last_issued.is_none_or(|t| t <= grant.lease_end),
            "invariant 2: released at {last_issued:?}, above the lease end committed ({grant:?})"
        );
        if let Some(view) = self.shared.current() {
            view.ceiling.lower_to(0);
        }
        let now = self.clock.wall_ms();
        let pending = self.pending_slot().take();
        if let Some(pending) = pending {
            // Leased for a switch that did not come: nothing was issued under it.
            let _ = self
                .timed(self.leases_of(&pending).release(&pending, None, now))
                .await;
        }
        let released = self
            .timed(self.leases_of(&grant).release(&grant, last_issued, now))
            .await?;
        self.shared.view.send_replace(None);
        *self.grant_slot() = None;
        tracing::info!(
            event = "lease_released",
            generation = grant.generation,
            worker_first = grant.workers.first,
            worker_count = grant.workers.count,
            outcome = released.name(),
            lease_end = released.lease_end(),
            "lease released"
        );
        Ok(released)
    }
}

/// Stops the shards if the keeper's loop ends other than by shutdown: lowers the ceiling to 0,
/// withdraws the lease view and forgets the grant, as a lost lease does, so the node serves no
/// more IDs and writes nothing more to the store (its range stays held until it expires; a
/// release finds nothing to release). A panic that unwinds out of the keeper's task drops the
/// loop's future, which runs this. (Release builds abort on a panic, which stops everything.)
struct StopOnExit<'k, C: Clock + Send + Sync + 'static>(Option<&'k Keeper<C>>);

impl<C: Clock + Send + Sync + 'static> StopOnExit<'_, C> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl<C: Clock + Send + Sync + 'static> Drop for StopOnExit<'_, C> {
    fn drop(&mut self) {
        let Some(keeper) = self.0 else {
            return;
        };
        if let Some(view) = keeper.shared.current() {
            view.ceiling.lower_to(0);
        }
        keeper.shared.view.send_replace(None);
        *keeper.lost_slot() = keeper.grant_slot().take();
        tracing::error!(
            event = "lease_keeper_stopped",
            "the lease keeper stopped unexpectedly: shards stopped; the node issues no IDs until it is restarted"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::lease::{WorkerRecord, WorkerState};
    use crate::store::memory::MemoryStore;
    use crate::store::Txn;

    fn keeper(store: Arc<MemoryStore>, ttl_ms: u64, name: &str) -> Keeper<SystemClock> {
        keeper_in(store, ttl_ms, name, Layout::default())
    }

    fn keeper_in(
        store: Arc<MemoryStore>,
        ttl_ms: u64,
        name: &str,
        layout: Layout,
    ) -> Keeper<SystemClock> {
        let mut config = LeaseConfig::new("keeper-test", 2);
        config.ttl = Duration::from_millis(ttl_ms);
        config.safety = Duration::from_millis(2 * ttl_ms);
        Keeper::new(
            store,
            layout,
            config,
            Owner::this_process(Some(name.into()), SystemClock::new().wall_ms()),
            SystemClock::new(),
        )
    }

    /// A keeper on a scripted clock (TTL 1 s), confirming steps against `watch` if given.
    fn scripted(
        name: &str,
        watch: Option<Arc<crate::drift::ClockWatch>>,
    ) -> (Keeper<crate::clock::TestClock>, crate::clock::TestClock) {
        let clock = crate::clock::TestClock::new(SystemClock::new().wall_ms());
        let mut config = LeaseConfig::new(name, 1);
        config.ttl = Duration::from_millis(1_000);
        config.safety = Duration::from_millis(2_000);
        let k = Keeper::new(
            Arc::new(MemoryStore::new()),
            Layout::default(),
            config,
            Owner::this_process(Some(name.into()), clock.wall_ms()),
            clock.clone(),
        );
        match watch {
            Some(w) => (k.with_clock_watch(w), clock),
            None => (k, clock),
        }
    }

    /// The wall clock now, in ID time.
    fn id_now(clock: &crate::clock::TestClock) -> u64 {
        clock.wall_ms() - Layout::default().epoch_ms()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_clock_step_ahead_with_no_peers_is_believed_once_it_has_held_and_not_before() {
        let (k, clock) = scripted("keeper-jump", None);
        let ttl_ms = 1_000;
        let start_id = id_now(&clock);
        let view = k.acquire().await.unwrap();
        assert_eq!(view.ceiling.get(), start_id + ttl_ms);
        // The wall clock jumps an hour ahead; 300 ms really pass. The lease follows the time
        // that passed (plus one TTL), not the jump, and the keeper looks again sooner.
        clock.step_wall(3_600_000);
        clock.advance(Duration::from_millis(300));
        assert_eq!(k.renew_once().await, k.timing.retry_every);
        assert_eq!(view.ceiling.get(), start_id + 300 + 2 * ttl_ms);
        // Renewals while the step is not believed do not add up a TTL each: the lease end
        // stays within two TTLs of the time that passed.
        for _ in 0..10 {
            clock.advance(Duration::from_millis(100));
            k.renew_once().await;
        }
        assert_eq!(view.ceiling.get(), start_id + 1_300 + 2 * ttl_ms);
        // The clock comes back within the hold: nothing was pushed ahead, the lease end never
        // moves backwards, and renewals go on from the real time at the usual pace.
        clock.step_wall(-3_600_000);
        clock.advance(Duration::from_millis(300));
        assert_eq!(k.renew_once().await, k.timing.renew_every);
        assert_eq!(view.ceiling.get(), start_id + 1_300 + 2 * ttl_ms);
        clock.advance(Duration::from_millis(5 * ttl_ms));
        k.renew_once().await;
        assert_eq!(view.ceiling.get(), id_now(&clock) + ttl_ms);
        // A step that stays: refused (bounded) until it has held for STEP_HOLD, then believed.
        clock.step_wall(600_000);
        let seen = id_now(&clock);
        k.renew_once().await;
        assert!(view.ceiling.get() < seen, "not believed at once");
        let mut renewals = 0;
        while view.ceiling.get() < id_now(&clock) {
            assert!(renewals < 100, "never believed");
            clock.advance(k.timing.retry_every);
            assert!(view.ceiling.get() < seen, "refused until believed");
            k.renew_once().await;
            renewals += 1;
        }
        let waited_ms = id_now(&clock) - seen;
        let hold_ms = duration_ms(STEP_HOLD);
        assert!(
            (hold_ms..=hold_ms + duration_ms(k.timing.retry_every)).contains(&waited_ms),
            "believed after {waited_ms} ms"
        );
        assert_eq!(
            view.ceiling.get(),
            id_now(&clock) + ttl_ms,
            "follows the step"
        );
        assert_eq!(k.next_renewal(), k.timing.renew_every);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_keeper_loop_sees_a_step_between_renewals() {
        let (k, clock) = scripted("keeper-look", None);
        let k = Arc::new(k.with_timing(KeeperTiming {
            renew_every: Duration::from_secs(30),
            ..KeeperTiming::for_ttl(Duration::from_secs(1))
        }));
        k.acquire().await.unwrap();
        let (tx, rx) = watch::channel(false);
        let runner = {
            let k = Arc::clone(&k);
            tokio::spawn(async move { k.run(rx).await })
        };
        // A step well before the next renewal is due: the loop renews for it (and starts its
        // hold) within a look or two, not 30 s later.
        clock.step_wall(600_000);
        let t = Instant::now();
        while k.step_slot().is_none() {
            assert!(t.elapsed() < Duration::from_secs(2), "the step went unseen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(k.shared().stats.renew_ok.load(Ordering::Relaxed), 1);
        tx.send(true).unwrap();
        runner.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_resume_from_suspend_is_not_a_clock_step() {
        let (k, clock) = scripted("keeper-suspend", None);
        let view = k.acquire().await.unwrap();
        // The machine sleeps for an hour: the wall and boot clocks move, the monotonic one
        // does not. The time really passed: the lease follows the wall clock at once.
        clock.suspend(Duration::from_secs(3_600));
        assert_eq!(k.renew_once().await, k.timing.renew_every);
        assert_eq!(view.ceiling.get(), id_now(&clock) + 1_000);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_step_the_peers_confirm_is_believed_at_once_and_one_they_contradict_is_not() {
        let hour = 3_600_000u64;
        for peer_stepped in [true, false] {
            let watch = crate::drift::ClockWatch::new(Duration::from_secs(1));
            let (k, clock) = scripted("keeper-peers", Some(Arc::clone(&watch)));
            let view = k.acquire().await.unwrap();
            // Peer a's clock agrees with ours.
            let t = clock.wall_ms();
            watch.poll_for_test("a", 1, t, t, t + 5);
            watch.poll_for_test("a", 2, t + 250, t + 250, t + 255);
            assert_eq!(watch.drift_summary(), (0, 1));
            // Our clock steps an hour ahead: nothing the peers said so far judges it.
            clock.step_wall(hour as i64);
            clock.advance(Duration::from_millis(300));
            let seen = id_now(&clock);
            assert_eq!(k.renew_once().await, k.timing.retry_every);
            assert!(
                view.ceiling.get() < seen,
                "not believed before the peers are asked"
            );
            // Two later polls: the peer's clock moved with ours (a fleet stepped together),
            // or did not (this node is the outlier).
            let peer = |ms: u64| if peer_stepped { ms } else { ms - hour };
            for (v, dt) in [(3, 250), (4, 500)] {
                let ours = clock.wall_ms() + dt;
                watch.poll_for_test("a", v, peer(ours), ours, ours + 5);
            }
            clock.advance(Duration::from_millis(100));
            let next = k.renew_once().await;
            if peer_stepped {
                assert_eq!(
                    view.ceiling.get(),
                    id_now(&clock) + 1_000,
                    "believed at once"
                );
                assert_eq!(next, k.timing.renew_every);
            } else {
                assert!(view.ceiling.get() < seen, "contradicted: not believed");
                assert_eq!(next, k.timing.renew_every, "no hurry while contradicted");
                // Not even after the hold.
                clock.advance(STEP_HOLD * 2);
                k.renew_once().await;
                assert!(view.ceiling.get() < id_now(&clock) - hour + 3_000);
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn renews_fails_closed_and_resumes() {
        let store = Arc::new(MemoryStore::new());
        let k = keeper(Arc::clone(&store), 300, "a");
        let view = k.acquire().await.unwrap();
        let shared = k.shared();
        let first_end = view.ceiling.get();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(k.renew_once().await, k.timing.renew_every);
        assert!(view.ceiling.get() > first_end, "renewal raises the ceiling");
        assert_eq!(shared.stats.renew_ok.load(Ordering::Relaxed), 1);

        store.set_down(true);
        let before = view.ceiling.get();
        assert_eq!(k.renew_once().await, k.timing.retry_every);
        assert_eq!(
            view.ceiling.get(),
            before,
            "a failed renewal leaves the ceiling"
        );
        assert_eq!(shared.stats.renew_failed.load(Ordering::Relaxed), 1);

        // An unknown outcome that did apply still does not raise the ceiling.
        store.set_down(false);
        store.inject(crate::store::memory::Fault::UnknownApplied);
        tokio::time::sleep(Duration::from_millis(5)).await;
        k.renew_once().await;
        assert_eq!(view.ceiling.get(), before);
        assert_eq!(shared.stats.renew_failed.load(Ordering::Relaxed), 2);

        tokio::time::sleep(Duration::from_millis(5)).await;
        k.renew_once().await;
        assert!(
            view.ceiling.get() > before,
            "resumes when the store answers"
        );
        // The duration histograms count what the renewal counters count, by result.
        let [(ok, ok_h), (failed, failed_h)] = shared.stats.renewal_durations();
        assert_eq!((ok, failed), ("ok", "failed"));
        assert_eq!(ok_h.count(), 2);
        assert_eq!(failed_h.count(), 2);
        assert_eq!(ok_h.counts.len(), RENEWAL_BUCKETS_US.len() + 1);
        assert_eq!(
            shared.stats.renewals(),
            [("ok", ok_h.count()), ("failed", failed_h.count())]
        );
        assert_eq!(shared.current().unwrap().grant.generation, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn lost_lease_lowers_the_ceiling_and_reacquires_elsewhere() {
        let store = Arc::new(MemoryStore::new());
        let k = keeper(Arc::clone(&store), 300, "a");
        let view = k.acquire().await.unwrap();
        let first = view.grant.workers.first;
        // Someone overwrites our record with another generation (as a new holder would).
        let key = k.leases(0).worker_key(first);
        let mut txn = Txn::new(store.as_ref());
        let raw = txn.get(&key).await.unwrap().unwrap();
        let mut rec: WorkerRecord = serde_json::from_slice(&raw).unwrap();
        assert_eq!(rec.count, 2, "one record for the range");
        rec.generation += 100;
        rec.owner.instance = "someone-else".into();
        txn.put(key, serde_json::to_vec(&rec).unwrap());
        txn.commit().await.unwrap();
        assert_eq!(k.renew_once().await, Duration::ZERO);
        assert_eq!(view.ceiling.get(), 0, "shards stop at once");
        assert!(k.shared().current().is_none());
        assert_eq!(k.shared().stats.lost.load(Ordering::Relaxed), 1);
        // The next round re-acquires a different range.
        k.renew_once().await;
        let again = k.shared().current().expect("re-acquired");
        assert_ne!(again.grant.workers.first, first);
        assert!(again.grant.generation > view.grant.generation);
        assert_eq!(k.shared().stats.acquisitions.load(Ordering::Relaxed), 2);
    }

    /// A store that panics on every call once told to: a bug, or a failed assertion, inside
    /// the keeper's renewal.
    struct Panicking {
        inner: MemoryStore,
        panic: std::sync::atomic::AtomicBool,
    }

    impl Panicking {
        fn check(&self) {
            assert!(!self.panic.load(Ordering::Relaxed), "the store panicked");
        }
    }

    impl KvStore for Panicking {
        fn get<'a>(
            &'a self,
            key: &'a [u8],
        ) -> crate::store::BoxFuture<
            'a,
            Result<Option<crate::store::Entry>, crate::store::StoreError>,
        > {
            self.check();
            self.inner.get(key)
        }
        fn scan<'a>(
            &'a self,
            prefix: &'a [u8],
        ) -> crate::store::BoxFuture<'a, Result<Vec<crate::store::Entry>, crate::store::StoreError>>
        {
            self.check();
            self.inner.scan(prefix)
        }
        fn commit<'a>(
            &'a self,
            checks: &'a [crate::store::Check],
            writes: &'a [crate::store::Write],
        ) -> crate::store::BoxFuture<'a, Result<crate::store::Commit, crate::store::StoreError>>
        {
            self.check();
            self.inner.commit(checks, writes)
        }
        fn describe(&self) -> String {
            "panicking".into()
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_in_the_keeper_loop_stops_the_shards_and_writes_nothing_more() {
        let store = Arc::new(Panicking {
            inner: MemoryStore::new(),
            panic: std::sync::atomic::AtomicBool::new(false),
        });
        let mut config = LeaseConfig::new("keeper-panic", 2);
        config.ttl = Duration::from_millis(60);
        let k = Arc::new(Keeper::new(
            Arc::clone(&store) as Arc<dyn KvStore>,
            Layout::default(),
            config,
            Owner::this_process(Some("a".into()), SystemClock::new().wall_ms()),
            SystemClock::new(),
        ));
        let view = k.acquire().await.unwrap();
        assert!(view.ceiling.get() > 0);
        store.panic.store(true, Ordering::Relaxed);
        let (_tx, rx) = watch::channel(false);
        let runner = {
            let k = Arc::clone(&k);
            tokio::spawn(async move { k.run(rx).await })
        };
        let joined = tokio::time::timeout(Duration::from_secs(2), runner)
            .await
            .expect("the loop's first renewal panics");
        assert!(joined.unwrap_err().is_panic());
        assert_eq!(view.ceiling.get(), 0, "the shards stop at once");
        assert!(
            k.shared().current().is_none(),
            "the lease view is withdrawn"
        );
        assert_eq!(k.lease_end(), None);
        // Nothing more is written: the release finds nothing to release.
        assert_eq!(k.release(Some(1)).await.unwrap(), Released::AlreadyLost);
    }

    /// Forges the keeper's record (released by someone else, at `lease_end`) and the
    /// generation counter (at `generation`): a store that lost committed writes.
    async fn forge(store: &MemoryStore, k: &Keeper<SystemClock>, lease_end: u64, generation: u64) {
        let leases = k.leases(0);
        let key = leases.worker_key(0);
        let mut txn = Txn::new(store);
        let mut rec: WorkerRecord =
            serde_json::from_slice(&txn.get(&key).await.unwrap().unwrap()).unwrap();
        rec.state = WorkerState::Released;
        rec.owner.instance = "someone-else".into();
        rec.lease_end = lease_end;
        txn.put(key, serde_json::to_vec(&rec).unwrap());
        txn.put(
            leases.key("generation"),
            generation.to_string().into_bytes(),
        );
        txn.commit().await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_grant_from_a_store_that_went_back_is_refused() {
        // Two worker IDs in all: every grant is over the same range.
        let layout = Layout::new(idgen_id::DEFAULT_EPOCH_MS, 51, 1, 11, 0).unwrap();
        let store = Arc::new(MemoryStore::new());
        let k = keeper_in(Arc::clone(&store), 300, "a", layout);
        let view = k.acquire().await.unwrap();
        let committed = k.lease_end().unwrap();
        let corrupt = |r: Result<Arc<LeaseView>, LeaseError>, what: &str| match r {
            Err(LeaseError::Corrupt { detail, .. }) => assert!(detail.contains(what), "{detail}"),
            other => panic!("expected a corrupt store ({what}), got {other:?}"),
        };
        // The generation counter went back: the next grant's generation is not above ours.
        forge(&store, &k, committed, 0).await;
        assert_eq!(k.renew_once().await, Duration::ZERO, "lost");
        assert_eq!(view.ceiling.get(), 0);
        corrupt(k.acquire().await, "the store went back");
        assert!(k.shared().current().is_none(), "not published");
        // The record lost the lease end this node committed: the next grant's floor is below
        // what it may have issued.
        forge(&store, &k, 0, 10).await;
        corrupt(k.acquire().await, "the store lost a write");
        assert!(k.shared().current().is_none(), "not published");
        // The refused grants are this node's own records now, held at a lease end above the
        // one it committed: the next grant is floored there, and served.
        let again = k.acquire().await.unwrap();
        assert!(again.grant.generation > 10 && again.grant.floor >= committed);
        assert_eq!(Some(again.ceiling.get()), k.lease_end(), "served");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn run_stops_on_shutdown_and_release_frees_the_range() {
        // Two worker IDs in all, so the second keeper must take the released range.
        let layout = Layout::new(idgen_id::DEFAULT_EPOCH_MS, 51, 1, 11, 0).unwrap();
        let store = Arc::new(MemoryStore::new());
        let k = Arc::new(keeper_in(Arc::clone(&store), 60, "a", layout));
        let view = k.acquire().await.unwrap();
        let (tx, rx) = watch::channel(false);
        let runner = {
            let k = Arc::clone(&k);
            tokio::spawn(async move { k.run(rx).await })
        };
        let start = view.ceiling.get();
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(view.ceiling.get() > start, "the loop renews on its own");
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(2), runner)
            .await
            .expect("run returns on shutdown")
            .unwrap();
        let last = view.grant.floor + 1;
        let released = k.release(Some(last)).await.unwrap();
        assert_eq!(released, Released::Freed { lease_end: last });
        assert_eq!(view.ceiling.get(), 0);
        let recs = k.leases(0).workers().await.unwrap();
        assert!(recs
            .iter()
            .all(|(_, r)| r.state == WorkerState::Released && r.lease_end == last));
        // A second keeper gets the same range at once, floored at the true last timestamp.
        let k2 = keeper_in(store, 60, "b", layout);
        let v2 = k2.acquire().await.unwrap();
        assert_eq!(v2.grant.workers.first, view.grant.workers.first);
        assert_eq!(v2.grant.floor, last);
    }
}
