//! The shard generator: (clock, worker range, floor, ceiling) → unique, strictly increasing IDs.
//!
//! A shard owns the contiguous worker range `w .. w+k`. Within one millisecond `t` it walks the
//! sequence `0..2^s` for worker `w`, then for `w+1`, and so on. Because the worker field sits
//! directly above the sequence field, that walk is one run of consecutive integers:
//!
//! ```text
//! id(t, slot) = (t << (worker_bits + s)) | (w << s)  +  slot,     slot in 0 .. k·2^s
//! ```
//!
//! so a batch is "reserve `n` slots, write `base + slot ..`", and one shard issues up to
//! `k · 2^s` IDs per millisecond, every one greater than the one before.
//!
//! ## The fences
//!
//! - **Floor** (the previous holder's `lease_end`): every ID's timestamp is strictly above it.
//! - **Ceiling** (this holder's `lease_end`, shared with the lease keeper through [`Ceiling`]
//!   and read once per new millisecond): every ID's timestamp is strictly below it. A holder that
//!   stops renewing runs into its own ceiling and stops by itself.
//! - **Never backwards**: a timestamp once used is never used again with a smaller or equal slot.
//!
//! ## Clock trouble
//!
//! If the wall clock reads earlier than the last millisecond used by at most
//! `max_rollback_wait`, the request waits for it to catch up; further back, it answers
//! [`GenError::ClockMovedBack`] until the clock has recovered, then serves again by itself. The
//! same rule applies to a clock at or below the floor ([`GenError::ClockBehindFloor`]). Waits
//! are measured on the monotonic clock and bounded, so a stuck wall clock becomes
//! [`GenError::ClockStalled`], never a hang. Both judge the clock alone, on the generator's
//! own record of it (since when its reading has stood still while every slot was used, since
//! when it has been behind), never on how long one request has waited: a request that waits
//! while others take each new millisecond's slots is not a sign of a stuck clock.
//!
//! ## Demand above capacity
//!
//! A shard issues at most `k · 2^s` IDs per millisecond; more demand than that waits, which is
//! the backpressure. Requests that have to wait take their turn in arrival order: a request
//! that finds others waiting joins the end of the line (even if slots are free), and only the
//! request at the front draws, so each new millisecond's slots go to the oldest waiter first.
//! A request that has waited [`MAX_TURN_WAIT`] for its turn without drawing an ID fails with
//! [`GenError::Overloaded`] (this node is busy: try later or elsewhere), which is not a clock
//! fault. A request that leaves the line in any way (served, failed, or abandoned by its
//! caller through [`Generator::abandon`]) lets the next one move up; a front that stops asking
//! without leaving is passed over after the same bound, so the line never stalls. The line
//! exists only while requests wait: a request that finds nobody waiting pays one comparison.
//!
//! ## The generator never sleeps
//!
//! [`Generator::poll_fill`] issues what it can now and, when the next ID needs a later clock
//! reading (every slot of the millisecond used, or a small clock step to wait out), says when
//! to call again: [`Progress::RetryAt`], a time on the clock's monotonic scale. The caller
//! waits as it likes: a shard's connection awaits a timer, so a clock wait delays only the
//! requests that need IDs, never the shard's other connections. [`Generator::fill_runs`],
//! [`Generator::next_batch`] and [`Generator::next_id`] are the blocking forms, which sleep on
//! the clock (tests, benchmarks, the simulation).
//!
//! ## Assertions
//!
//! The fences are asserted where they hold, once per millisecond of work (never per ID): a new
//! millisecond is above the last one used (so above the floor) and below the ceiling read for
//! it; a run starts above the last ID issued and stays within the millisecond's slots. A
//! failed assertion is a bug in this file: the shard stops (the release build aborts the
//! process), and nothing more is issued under the lease.
//!
//! The wall clock is read once per call and then once per millisecond of work (a batch that
//! fills its millisecond reads it again), never once per ID.
//!
//! ```
//! use std::sync::Arc;
//! use idgen_core::clock::SystemClock;
//! use idgen_core::generator::{Ceiling, Generator, GeneratorConfig};
//! use idgen_id::{Layout, WorkerRange};
//!
//! let layout = Layout::default();
//! let ceiling = Arc::new(Ceiling::new(u64::MAX)); // no lease: tests and benchmarks only
//! let config = GeneratorConfig { workers: WorkerRange::new(8, 2), ..GeneratorConfig::default() };
//! let mut generator = Generator::new(layout, config, ceiling, SystemClock::new()).unwrap();
//!
//! let a = generator.next_id().unwrap();
//! let mut batch = [0u64; 10_000];
//! generator.next_batch(&mut batch).unwrap();
//! assert!(batch.windows(2).all(|w| w[0] < w[1]) && a.0 < batch[0]);
//! assert!((8..10).contains(&layout.decompose(a).worker));
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idgen_id::{Id, Layout, WorkerRange};

use crate::clock::duration_ns;
use crate::clock::Clock;

/// Default bound on how far back the clock may step and be waited out.
pub const DEFAULT_MAX_ROLLBACK_WAIT: Duration = Duration::from_millis(10);

/// How long a request may wait for its turn (others ahead of it in line, taking every slot)
/// without drawing an ID before it fails with [`GenError::Overloaded`]. Long enough that a
/// burst of big batches (a line of 50 requests of 8,192 IDs on a shard of one worker ID) is
/// absorbed by waiting; short enough that a client hears "busy" well within its own request
/// timeout (1 s by default in every bundled client) and can go elsewhere. It bounds a turn
/// wait only: a request at the front of the line waits for the clock, which the clock bounds
/// judge.
pub const MAX_TURN_WAIT: Duration = Duration::from_millis(100);

/// Lines of different generators have different numbers, so a ticket kept from a generator
/// that was replaced (a lease change) is never taken for one of its successor's.
static LINES: AtomicU64 = AtomicU64::new(1);

/// The lease ceiling of a shard, in ID-time milliseconds: IDs must have a timestamp strictly
/// below it. Written by the lease keeper, read by the generator once per new millisecond.
#[derive(Debug)]
pub struct Ceiling(AtomicU64);

impl Ceiling {
    pub fn new(ts: u64) -> Self {
        Ceiling(AtomicU64::new(ts))
    }
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
    /// Raises the ceiling to `ts` (a renewal); never lowers it.
    pub fn raise_to(&self, ts: u64) {
        self.0.fetch_max(ts, Ordering::AcqRel);
    }
    /// Lowers the ceiling to `ts` (stop issuing new milliseconds); never raises it.
    pub fn lower_to(&self, ts: u64) {
        self.0.fetch_min(ts, Ordering::AcqRel);
    }
}

/// What a [`Generator`] is made of: the worker IDs it issues from, its floor, and how far
/// back it waits out the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// The worker IDs the generator issues from (at least one).
    pub workers: WorkerRange,
    /// IDs must have a timestamp strictly above this (ID-time ms): the previous holder's
    /// `lease_end`. 0 for a worker range never used before.
    pub floor: u64,
    /// How far back the clock may step and be waited out rather than refused.
    pub max_rollback_wait: Duration,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            workers: WorkerRange::new(0, 1),
            floor: 0,
            max_rollback_wait: DEFAULT_MAX_ROLLBACK_WAIT,
        }
    }
}

/// Why a generator could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("a shard needs at least one worker ID")]
    NoWorkers,
    #[error("worker range {first}..{end} does not fit the layout's {count} worker IDs")]
    WorkerRange { first: u64, end: u64, count: u64 },
    #[error("floor {floor} is beyond the layout's last timestamp {max}")]
    FloorBeyondRange { floor: u64, max: u64 },
}

/// Why no ID was issued. Every variant but `Exhausted` clears by itself when the clock, the
/// lease or the demand recovers; all of them mean "try another node".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    #[error("unavailable: clock moved back by {by_ms} ms")]
    ClockMovedBack { by_ms: u64 },
    #[error("unavailable: clock is {by_ms} ms behind the lease floor")]
    ClockBehindFloor { by_ms: u64 },
    #[error("unavailable: clock reads before the layout epoch")]
    BeforeEpoch,
    #[error("unavailable: wall clock did not advance for {waited_ms} ms")]
    ClockStalled { waited_ms: u64 },
    #[error("unavailable: lease ceiling (timestamp {timestamp} ms, ceiling {ceiling} ms)")]
    LeaseCeiling { timestamp: u64, ceiling: u64 },
    /// This node's clock reads past the layout's last timestamp while timestamps below it are
    /// still unused here: a fault of this node's clock as far as it can tell (another node may
    /// serve), so clients try elsewhere.
    #[error("unavailable: this node's clock reads past the layout's last timestamp ({max_timestamp} ms after the epoch); if every node says so, the timestamp range has run out")]
    ClockPastEnd { max_timestamp: u64 },
    #[error("exhausted: the layout's timestamp range has run out")]
    Exhausted,
    /// Demand above this shard's capacity: the request waited [`MAX_TURN_WAIT`] for its turn
    /// while earlier requests took every slot. The clock is fine.
    #[error("overloaded: waited {waited_ms} ms for a turn while other requests took every ID this shard can issue; retry later or on another node")]
    Overloaded { waited_ms: u64 },
}

impl GenError {
    /// True for faults of the clock (as opposed to the lease or the layout).
    pub fn is_clock(&self) -> bool {
        matches!(
            self,
            GenError::ClockMovedBack { .. }
                | GenError::ClockBehindFloor { .. }
                | GenError::BeforeEpoch
                | GenError::ClockStalled { .. }
                | GenError::ClockPastEnd { .. }
        )
    }
}

/// Counters for operators, written only by the shard's own thread (plain loads and stores, no
/// read-modify-write) and read by anyone.
#[derive(Debug, Default)]
pub struct GeneratorStats {
    /// IDs issued.
    pub issued: AtomicU64,
    /// The lease generation the current generator works under (0: none yet), written by its
    /// issuer ([`crate::member::Issuer`]).
    pub generation: AtomicU64,
    /// Requests that had to wait for sequence space (every slot of the millisecond used, or
    /// others waiting before them), once per wait.
    pub exhaustion_waits: AtomicU64,
    /// Clock rollbacks detected (one per episode, however long it lasts).
    pub rollback_events: AtomicU64,
    /// The largest rollback seen, in ms.
    pub largest_rollback_ms: AtomicU64,
    /// True while the clock is behind the last timestamp used (or the floor).
    pub clock_behind: AtomicBool,
    /// The timestamp (ID-time ms) of the last ID issued; the floor before any.
    pub last_timestamp: AtomicU64,
}

/// Adds `by` to a counter that only one thread writes (the shard's), so other threads can read
/// it: a load and a store, no locked instruction on the hot path.
#[inline]
pub fn bump(counter: &AtomicU64, by: u64) {
    // Single writer: a load and a store, no locked instruction on the hot path.
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// A request for IDs in progress: how many are still to issue, since when it has been waiting
/// for its turn (the bound spans every call of one request), and its place in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fill {
    requested: u64,
    remaining: u64,
    /// Monotonic time at which the current wait began; cleared whenever IDs are issued. A
    /// clock is judged stalled for this request only over time it has waited.
    waiting_since: Option<u64>,
    /// The same for the current wait for a turn, which a wait for a clock that is behind
    /// restarts (that wait is the clock's to judge).
    turn_since: Option<u64>,
    /// Its place in a generator's line while it waits: `(line, ticket)`.
    ticket: Option<(u64, u64)>,
}

impl Fill {
    /// A request for `n` IDs.
    pub fn new(n: u64) -> Fill {
        Fill {
            requested: n,
            remaining: n,
            waiting_since: None,
            turn_since: None,
            ticket: None,
        }
    }

    /// IDs of this request emitted so far.
    pub fn emitted(&self) -> u64 {
        self.requested - self.remaining
    }

    /// IDs asked for.
    pub fn requested(&self) -> u64 {
        self.requested
    }
}

/// What a call of [`Generator::poll_fill`] achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every ID of the request was emitted.
    Done,
    /// The next ID needs a later clock reading: call again at this monotonic time
    /// ([`Clock::mono_ns`]) with the same [`Fill`].
    RetryAt(u64),
}

/// What stands between the generator and a free slot.
#[derive(Clone, Copy)]
enum Stall {
    /// Every slot of the current millisecond is used: wait for the next one.
    Exhausted,
    /// The clock is behind by this many ms (rollback or floor) and within the wait bound.
    Behind(u64),
    /// Slots are free, but earlier requests are waiting: wait for this one's turn.
    Turn,
}

/// The requests waiting for slots, in arrival order, as consecutive tickets `head ..`: a
/// request joins at the end and leaves when served, failed or abandoned; only the front one
/// draws. No allocation once its buffer has grown to the longest line seen.
#[derive(Debug)]
struct Line {
    /// Tells this line's tickets from those of other generators.
    id: u64,
    /// The ticket at the front.
    head: u64,
    /// For each ticket from `head` on: whether its request has left. The front has not.
    left: std::collections::VecDeque<bool>,
    /// Monotonic time at which the front was last seen asking (`None`: not yet since it came
    /// to the front).
    front_seen: Option<u64>,
}

impl Line {
    fn new() -> Line {
        Line {
            id: LINES.fetch_add(1, Ordering::Relaxed),
            head: 0,
            left: std::collections::VecDeque::new(),
            front_seen: None,
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    /// Whether `ticket` is at the front of this line.
    #[inline]
    fn is_front(&self, ticket: Option<(u64, u64)>) -> bool {
        ticket == Some((self.id, self.head))
    }

    /// Whether `ticket` is waiting in this line.
    fn holds(&self, ticket: (u64, u64)) -> bool {
        ticket.0 == self.id && ticket.1.wrapping_sub(self.head) < self.left.len() as u64
    }

    /// A new ticket at the end.
    fn join(&mut self) -> (u64, u64) {
        if self.left.is_empty() {
            self.front_seen = None;
        }
        let ticket = self.head.wrapping_add(self.left.len() as u64);
        self.left.push_back(false);
        (self.id, ticket)
    }

    /// `ticket` leaves (nothing if it is not in this line); the next waiting ticket moves to
    /// the front.
    fn leave(&mut self, ticket: (u64, u64)) {
        if !self.holds(ticket) {
            return;
        }
        let at = ticket.1.wrapping_sub(self.head) as usize;
        self.left[at] = true;
        if at == 0 {
            while self.left.front() == Some(&true) {
                self.left.pop_front();
                self.head = self.head.wrapping_add(1);
            }
            self.front_seen = None;
        }
    }
}

/// One shard's ID generator. Not `Sync`: it lives on its shard's thread.
pub struct Generator<C: Clock> {
    clock: C,
    epoch_ms: u64,
    timestamp_shift: u32,
    max_timestamp: u64,
    /// `workers.first << sequence_bits`.
    worker_base: u64,
    /// Slots per millisecond: `workers.count << sequence_bits`.
    capacity: u64,
    ceiling: Arc<Ceiling>,
    max_wait_ms: u64,
    /// The millisecond in use (the floor before the first ID).
    last_ts: u64,
    /// Next free slot of `last_ts`; `capacity` when used up.
    next: u64,
    /// True once an ID was issued (so `last_ts` is a real timestamp, not the floor).
    started: bool,
    /// The floor the generator started with (every timestamp is above it).
    floor: u64,
    /// The last ID emitted (`None` before the first): every run starts above it.
    last_id: Option<u64>,
    /// Since when the clock has kept a request from a slot, on the monotonic clock, and how:
    /// `(reading, since)` while every slot of the reading's millisecond is used and the reading
    /// has not moved, `(BEHIND, since)` while the clock is behind. Cleared whenever IDs are
    /// issued. The clock bounds judge this, never one request's wait.
    clock_wait: Option<(u64, u64)>,
    /// The requests waiting for slots.
    line: Line,
    stats: Arc<GeneratorStats>,
}

/// The key of [`Generator::clock_wait`] while the clock is behind (no reading is `u64::MAX`:
/// that marks a clock before the epoch, which fails at once).
const BEHIND: u64 = u64::MAX;

impl<C: Clock> Generator<C> {
    pub fn new(
        layout: Layout,
        config: GeneratorConfig,
        ceiling: Arc<Ceiling>,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::with_stats(
            layout,
            config,
            ceiling,
            clock,
            Arc::new(GeneratorStats::default()),
        )
    }

    /// Like [`new`](Generator::new), counting into existing `stats` (a shard keeps its counters
    /// across lease changes; `last_timestamp` restarts at the new floor).
    pub fn with_stats(
        layout: Layout,
        config: GeneratorConfig,
        ceiling: Arc<Ceiling>,
        clock: C,
        stats: Arc<GeneratorStats>,
    ) -> Result<Self, ConfigError> {
        let workers = config.workers;
        if workers.is_empty() {
            return Err(ConfigError::NoWorkers);
        }
        // `end` saturates, so a range that would pass `u64::MAX` is refused here too.
        if workers.end() > layout.worker_count() {
            return Err(ConfigError::WorkerRange {
                first: workers.first,
                end: workers.end(),
                count: layout.worker_count(),
            });
        }
        if config.floor > layout.max_timestamp() {
            return Err(ConfigError::FloorBeyondRange {
                floor: config.floor,
                max: layout.max_timestamp(),
            });
        }
        stats.last_timestamp.store(config.floor, Ordering::Relaxed);
        let capacity = workers.count << layout.sequence_bits();
        Ok(Generator {
            clock,
            epoch_ms: layout.epoch_ms(),
            timestamp_shift: u32::from(layout.timestamp_shift()),
            max_timestamp: layout.max_timestamp(),
            worker_base: workers.first << layout.sequence_bits(),
            capacity,
            ceiling,
            max_wait_ms: u64::try_from(config.max_rollback_wait.as_millis()).unwrap_or(u64::MAX),
            last_ts: config.floor,
            next: capacity,
            started: false,
            floor: config.floor,
            last_id: None,
            clock_wait: None,
            line: Line::new(),
            stats,
        })
    }

    /// The counters of this shard, for the metrics layer.
    pub fn stats(&self) -> Arc<GeneratorStats> {
        Arc::clone(&self.stats)
    }

    /// The clock the generator reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The lease ceiling every new millisecond is checked against.
    pub fn ceiling(&self) -> &Arc<Ceiling> {
        &self.ceiling
    }

    /// IDs one millisecond holds for this shard (`workers.count · 2^sequence_bits`).
    pub fn capacity_per_ms(&self) -> u64 {
        self.capacity
    }

    /// The timestamp of the last ID issued, or `None` before the first.
    pub fn last_issued_timestamp(&self) -> Option<u64> {
        self.started.then_some(self.last_ts)
    }

    /// One ID, waiting (boundedly, asleep on the clock) for the next millisecond or a small
    /// clock step if needed: a batch of one.
    #[inline]
    pub fn next_id(&mut self) -> Result<Id, GenError> {
        let mut id = 0;
        self.fill_runs(1, |first, _| id = first)?;
        Ok(Id(id))
    }

    /// Fills `out` with strictly increasing IDs, spanning milliseconds as needed. On error the
    /// contents of `out` are unspecified and must not be used (never a partial batch).
    pub fn next_batch(&mut self, out: &mut [u64]) -> Result<(), GenError> {
        let mut pos = 0usize;
        self.fill_runs(out.len() as u64, |first, n| {
            // `n` never exceeds what is left of `out`.
            let dst = &mut out[pos..pos + n as usize];
            for (i, slot) in dst.iter_mut().enumerate() {
                *slot = first + i as u64;
            }
            pos += n as usize;
        })
    }

    /// Issues `n` IDs as runs of consecutive integers: `emit(first, count)` is called once per
    /// millisecond of work (count ≥ 1, runs increasing, counts summing to `n`), sleeping on the
    /// clock while the next ID needs a later reading. If an error is returned, some runs may
    /// already have been emitted; the caller must discard them (their IDs are burned, never
    /// reissued).
    pub fn fill_runs(&mut self, n: u64, mut emit: impl FnMut(u64, u64)) -> Result<(), GenError> {
        let mut fill = Fill::new(n);
        loop {
            match self.poll_fill(&mut fill, &mut emit)? {
                Progress::Done => return Ok(()),
                Progress::RetryAt(at) => {
                    let now = self.clock.mono_ns();
                    self.clock
                        .sleep(Duration::from_nanos(at.saturating_sub(now)));
                }
            }
        }
    }

    /// Issues what it can of `fill` now, as runs `emit(first, count)` (one per millisecond of
    /// work, increasing), and never sleeps: [`Progress::RetryAt`] says when the rest can come
    /// (call again then with the same `fill`; a request that waits holds a place in line, so a
    /// caller that gives it up before it is done calls [`abandon`](Generator::abandon)),
    /// [`Progress::Done`] that every ID was emitted. On an error the whole request fails:
    /// discard every run it emitted, in this call and the earlier ones (their IDs are burned,
    /// never reissued).
    pub fn poll_fill(
        &mut self,
        fill: &mut Fill,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<Progress, GenError> {
        if fill.remaining == 0 {
            return Ok(Progress::Done);
        }
        loop {
            let now = self.now();
            let stall = match self.advance(now) {
                // A free slot, and nobody waiting or this request's turn.
                Ok(()) if self.line.is_empty() || self.line.is_front(fill.ticket) => {
                    let take = fill.remaining.min(self.capacity - self.next);
                    let first = self.base(self.last_ts) + self.next;
                    // Never backwards, and within this millisecond's slots.
                    assert!(
                        self.last_id.is_none_or(|last| first > last),
                        "generator fence: run {first} not above the last ID {:?}",
                        self.last_id
                    );
                    assert!(
                        take >= 1 && self.next + take <= self.capacity,
                        "generator fence: {take} slots from {} of {}",
                        self.next,
                        self.capacity
                    );
                    emit(first, take);
                    self.last_id = Some(first + (take - 1));
                    self.next += take;
                    fill.remaining -= take;
                    fill.waiting_since = None;
                    fill.turn_since = None;
                    self.clock_wait = None;
                    if fill.remaining == 0 {
                        self.abandon(fill);
                        // Counted only when delivered: a failed request burns its slots but
                        // issues nothing.
                        bump(&self.stats.issued, fill.requested);
                        return Ok(Progress::Done);
                    }
                    continue;
                }
                Ok(()) => Stall::Turn,
                Err(Ok(stall)) => stall,
                Err(Err(e)) => {
                    self.abandon(fill);
                    return Err(e);
                }
            };
            if let Some(result) = self.wait(fill, stall, now) {
                return result;
            }
        }
    }

    /// Takes `fill` out of the line it waits in, if any, so the requests behind it move up: for
    /// a caller that gives up a request before it is done (its connection closed). Requests
    /// that are done or failed have left already; calling it for them does nothing.
    #[inline]
    pub fn abandon(&mut self, fill: &mut Fill) {
        if let Some(ticket) = fill.ticket.take() {
            self.line.leave(ticket);
        }
    }

    /// A request that cannot draw now, for `stall`, at clock reading `now`: takes its place in
    /// line, judges the wait (the clock by the clock bounds, a turn by [`MAX_TURN_WAIT`]) and
    /// says when to ask again. `None`: the clock did move after all (a pause between the clock
    /// reads): try again now.
    fn wait(
        &mut self,
        fill: &mut Fill,
        stall: Stall,
        now: u64,
    ) -> Option<Result<Progress, GenError>> {
        let mono = self.clock.mono_ns();
        let ticket = match fill.ticket {
            Some(ticket) if self.line.holds(ticket) => ticket,
            // First wait (or its line was replaced with the generator): to the end of the line.
            _ => {
                let ticket = self.line.join();
                fill.ticket = Some(ticket);
                ticket
            }
        };
        if fill.waiting_since.is_none() && !matches!(stall, Stall::Behind(_)) {
            // A wait for sequence space: this millisecond's, or the turn of others before it.
            bump(&self.stats.exhaustion_waits, 1);
        }
        let waiting_since = *fill.waiting_since.get_or_insert(mono);
        let front = self.line.is_front(Some(ticket));
        if front {
            self.line.front_seen = Some(mono);
        }
        let clock_stall = match stall {
            Stall::Exhausted => Some(now),
            Stall::Behind(_) => Some(BEHIND),
            Stall::Turn => None,
        };
        if let Some(key) = clock_stall {
            // The clock's judgement, on the clock alone: since when its reading has stood still
            // with every slot used, or since when it has been behind, whoever was asking (but
            // not before this request asked: one that comes after a refusal gives the clock
            // the whole bound again to show it moves).
            let since = match self.clock_wait {
                Some((k, since)) if k == key => since,
                _ => {
                    self.clock_wait = Some((key, mono));
                    mono
                }
            };
            let waited_ns = mono.saturating_sub(since.max(waiting_since));
            // A sequence wait needs at most a millisecond; a clock wait at most the bound. Two
            // milliseconds of slack absorb scheduling noise.
            let limit_ns = (self.max_wait_ms + 2).saturating_mul(1_000_000);
            if waited_ns > limit_ns {
                // The wall clock was read before the monotonic one: a pause of this thread in
                // between (a VM paused, a profiler attaching) is not a clock that stood still.
                // Read it once more, after the deadline (and not a held reading), before
                // refusing.
                self.clock.release();
                if self.now() != now {
                    return None;
                }
                self.abandon(fill);
                return Some(Err(match stall {
                    Stall::Behind(by_ms) => self.behind_error(by_ms),
                    Stall::Exhausted | Stall::Turn => GenError::ClockStalled {
                        waited_ms: waited_ns / 1_000_000,
                    },
                }));
            }
        }
        let turn_ns = duration_ns(MAX_TURN_WAIT);
        if let Stall::Behind(by_ms) = stall {
            // Nobody draws while the clock is behind: that wait is the clock's, not a turn's,
            // and a front that asks only every few milliseconds meanwhile is still there.
            fill.turn_since = None;
            self.line.front_seen = None;
            let wait = Duration::from_millis(by_ms.min(self.max_wait_ms));
            return Some(Ok(Progress::RetryAt(
                mono.saturating_add(duration_ns(wait)),
            )));
        }
        let since = *fill.turn_since.get_or_insert(mono);
        if !front {
            // A front that stopped asking without leaving (its caller dropped the request
            // without `abandon`) is passed over, so the line never stalls.
            match self.line.front_seen {
                None => self.line.front_seen = Some(mono),
                Some(seen) if mono.saturating_sub(seen) > turn_ns => {
                    let head = (self.line.id, self.line.head);
                    self.line.leave(head);
                }
                Some(_) => {}
            }
            let waited_ns = mono.saturating_sub(since);
            if waited_ns > turn_ns && !self.line.is_front(Some(ticket)) {
                self.abandon(fill);
                return Some(Err(GenError::Overloaded {
                    waited_ms: waited_ns / 1_000_000,
                }));
            }
        }
        // The next millisecond, or the front's draw, is near: ask again soon.
        Some(Ok(Progress::RetryAt(
            mono.saturating_add(duration_ns(Duration::from_micros(20))),
        )))
    }

    /// ID-time now, or `u64::MAX` as a marker for "before the epoch".
    #[inline]
    fn now(&self) -> u64 {
        self.clock
            .wall_ms()
            .checked_sub(self.epoch_ms)
            .unwrap_or(u64::MAX)
    }

    #[inline]
    fn base(&self, ts: u64) -> u64 {
        (ts << self.timestamp_shift) | self.worker_base
    }

    fn behind_error(&self, by_ms: u64) -> GenError {
        if self.started {
            GenError::ClockMovedBack { by_ms }
        } else {
            GenError::ClockBehindFloor { by_ms }
        }
    }

    /// Makes `last_ts`/`next` point at a free slot for clock reading `now`, or says why not.
    /// `Err(Ok(_))`: wait and retry; `Err(Err(_))`: give up.
    #[inline]
    fn advance(&mut self, now: u64) -> Result<(), Result<Stall, GenError>> {
        if now == u64::MAX {
            self.note_behind(self.last_ts.saturating_add(1));
            return Err(Err(GenError::BeforeEpoch));
        }
        if now > self.last_ts {
            if now > self.max_timestamp {
                // Exhausted only when this range has used the last timestamp (or its floor is
                // there): then no clock can help. Otherwise the clock is past the end.
                return Err(Err(if self.last_ts >= self.max_timestamp {
                    GenError::Exhausted
                } else {
                    GenError::ClockPastEnd {
                        max_timestamp: self.max_timestamp,
                    }
                }));
            }
            let ceiling = self.ceiling.get();
            if now >= ceiling {
                return Err(Err(GenError::LeaseCeiling {
                    timestamp: now,
                    ceiling,
                }));
            }
            // The fences of a new millisecond: above the floor and every millisecond used,
            // below the ceiling just read.
            assert!(
                now > self.floor && now > self.last_ts && now < ceiling,
                "generator fence: timestamp {now} with floor {}, last {}, ceiling {ceiling}",
                self.floor,
                self.last_ts
            );
            self.last_ts = now;
            self.next = 0;
            self.started = true;
            self.stats.last_timestamp.store(now, Ordering::Relaxed);
            self.stats.clock_behind.store(false, Ordering::Relaxed);
            return Ok(());
        }
        if now == self.last_ts {
            if self.next < self.capacity {
                self.stats.clock_behind.store(false, Ordering::Relaxed);
                return Ok(());
            }
            return Err(Ok(if self.started {
                Stall::Exhausted
            } else {
                // At the floor itself: one more millisecond to go.
                Stall::Behind(1)
            }));
        }
        // The clock reads before the last millisecond used (or at/below the floor).
        let by_ms = self.last_ts - now + u64::from(!self.started);
        self.note_behind(by_ms);
        if by_ms <= self.max_wait_ms {
            Err(Ok(Stall::Behind(by_ms)))
        } else {
            Err(Err(self.behind_error(by_ms)))
        }
    }

    fn note_behind(&mut self, by_ms: u64) {
        if !self.started {
            // Waiting for the clock to pass the floor is not a rollback.
            self.stats.clock_behind.store(true, Ordering::Relaxed);
            return;
        }
        if !self.stats.clock_behind.load(Ordering::Relaxed) {
            self.stats.clock_behind.store(true, Ordering::Relaxed);
            bump(&self.stats.rollback_events, 1);
        }
        let largest = &self.stats.largest_rollback_ms;
        largest.store(
            largest.load(Ordering::Relaxed).max(by_ms),
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests;
