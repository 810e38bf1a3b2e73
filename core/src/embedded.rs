//! A lease-backed generator inside an application: [`Embedded`] joins a cluster's worker space
//! through the same store, records and fences as an `idgen serve` node, and hands out IDs
//! in-process, with no network round trip per ID.
//!
//! ```text
//!   Embedded::start(store, namespace, config)
//!     clock check against the members' clock keys (refuses beyond max_drift)
//!     lease keeper: acquire patiently (a crashed predecessor's lease runs out first)
//!     clock key published (acquirers see this member alive)
//!   background (a task on the caller's runtime, or its own thread with start_blocking):
//!     keeper: renew every TTL/3 ──raises──▶ Ceiling ◀── read per slice, checked per ID ── next_id()
//!     clock key: every second
//!   shutdown() / drop: stop issuing, stop renewing, release the lease at the last timestamp
//!                      issued, delete the clock key
//! ```
//!
//! It is a [`Member`] of the worker space, the same type `idgen serve` is made of, with one
//! [`Issuer`] over its whole grant: the lease keeper (acquisition, renewal every TTL/3, loss,
//! release), the clock watcher (the `clocks/<instance>` key every member publishes, and the
//! start-up drift check), and the fenced generator, whose ceiling is the lease end last
//! committed. So an embedded generator is, to every other member, one more node: it holds one
//! worker record, renews it, and is taken over only as a node is (its lease end plus the
//! safety period passed and, on etcd, its clock key gone).
//!
//! ## Failing closed
//!
//! The generator issues only timestamps strictly below the lease end last committed to the
//! store. When renewals stop (the store unreachable, the process starved), it keeps issuing
//! until ID time reaches that end, then every call fails with [`EmbeddedError::LeaseExpired`]
//! until a renewal succeeds; a lease found lost (another member took its worker IDs after it
//! expired) stops it at once ([`EmbeddedError::NoLease`]) while the keeper acquires a new one.
//! It never issues past its lease, so a member that took the worker IDs over (above the lease
//! end, its floor) cannot issue the same IDs.
//!
//! ## Runtimes
//!
//! [`Embedded::start`] runs its background work as a task on the caller's tokio runtime, which
//! must keep running (a multi-threaded runtime, as `#[tokio::main]` builds; on a
//! current-thread runtime, blocking the thread stalls renewals and the generator fails closed).
//! [`Embedded::start_blocking`] opens the store and runs everything on a thread of its own, for
//! applications without a runtime. The ID calls ([`next_id`](Embedded::next_id),
//! [`next_batch`](Embedded::next_batch)) are synchronous, and wait (on the calling thread) only
//! for the next millisecond when one is used up, or for a clock step within
//! `max_rollback_wait`.
//!
//! ## Threads
//!
//! No lock is taken per ID: each thread has its own [`IdHandle`] (kept per thread by
//! [`Embedded::next_id`], or held by the caller from [`Embedded::handle`]), which draws a slice
//! of the current millisecond's IDs from the issuer under its lock (one to [`MAX_SLICE`]
//! IDs, sized to what the thread used of its last one) and hands them out while its clock
//! reading stays in that millisecond. Before each ID it checks the lease ceiling the slice was
//! drawn under (lowered at once when the lease is lost) and whether the generator has shut
//! down: the fences hold per ID as they do for a node's shard. IDs one thread takes strictly
//! increase; two threads' IDs of the same millisecond interleave, as two nodes' do.
//!
//! ## Named sequences
//!
//! [`next_value`](Embedded::next_value) and [`next_values`](Embedded::next_values) answer the
//! cluster's named sequences (`idgen seq create`) as a node's `POST /seq/{name}` does, through
//! the same holder (`crate::sequence::holder`): dense values from blocks reserved ahead,
//! strict ones from a commit made after the call began. They are async (the reservations run
//! on the background's runtime); [`next_values_blocking`](Embedded::next_values_blocking) is
//! for an application without a runtime.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 1)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use idgen_core::embedded::{Embedded, EmbeddedConfig};
//! use idgen_core::store::memory::MemoryStore;
//!
//! // A cluster's store is the one its nodes name, e.g. for
//! // `idgen serve --store etcd://10.0.0.5:2379/idgen --namespace default` (feature `etcd`):
//! // `store::etcd::EtcdStore::connect(vec!["10.0.0.5:2379".into()], "idgen".into()).await?`.
//! let store = Arc::new(MemoryStore::new());
//! let ids = Embedded::start(store, "default", EmbeddedConfig::default()).await?;
//! let id = ids.next_id()?;
//! assert!(ids.workers().contains(ids.layout().decompose(id).worker));
//! ids.shutdown().await?;
//! # Ok(()) }
//! ```

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use idgen_id::{Id, Layout, WorkerRange};

use crate::sequence::holder::{HoldError, Holder};
use crate::sequence::SequenceName;

/// How long [`Embedded::next_values`] waits for a named sequence's reservation.
pub const SEQUENCE_DEADLINE: Duration = Duration::from_secs(10);
use tokio::sync::watch;

use crate::clock::{CachedClock, Clock, SystemClock};
use crate::generator::{Ceiling, Fill, GenError, Progress, DEFAULT_MAX_ROLLBACK_WAIT};
use crate::lease::keeper::LeaseShared;
use crate::lease::{LeaseConfig, LeaseError, Owner, RegionScope, Released, DEFAULT_TTL};
use crate::member::{IssueError, Issuer, IssuerExit, JoinError, Member, MemberSettings};
use crate::store::{self, KvStore, StoreAccess, StoreError, StoreUrl};

/// How an embedded generator joins the worker space. The defaults are a server node's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddedConfig {
    /// The cluster's layout: it must be the one its cluster record holds (a mismatch is
    /// refused, as for a node).
    pub layout: Layout,
    /// Worker IDs to lease (each gives `2^sequence_bits` IDs per millisecond). Default 1.
    pub workers: u64,
    /// How far ahead of the clock a grant or renewal puts the lease end (default 10 s, at
    /// least 100 ms); renewals run every third of it.
    pub ttl: Duration,
    /// How long after its lease end an unreleased worker ID stays reserved (default 2 × TTL).
    pub safety: Duration,
    /// Which part of the worker space to lease from: the cluster's record says which, and every
    /// member must agree.
    pub region: RegionScope,
    /// The name this member's records carry (default: the host name).
    pub node_id: Option<String>,
    /// How far back the clock may step and be waited out rather than refused (default 10 ms).
    pub max_rollback_wait: Duration,
    /// Refuse to start when the clock differs from the other members' by more (default 1 s).
    pub max_drift: Duration,
    /// How long [`Embedded::start`] keeps trying for a lease while one may free up by itself
    /// (a crashed predecessor's, or the store briefly unreachable). `None`: as a node does,
    /// long enough for a crashed predecessor's lease and clock key to run out.
    pub start_within: Option<Duration>,
    /// Issue no ID at or below this (a cut-over from a database sequence: its largest value):
    /// the cluster's floor is raised to it, as a node's `min_id` does. Whatever this says, the
    /// generator obeys the floor the cluster record holds.
    pub min_id: Option<u64>,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            layout: Layout::default(),
            workers: 1,
            ttl: DEFAULT_TTL,
            safety: 2 * DEFAULT_TTL,
            region: RegionScope::Global,
            node_id: None,
            max_rollback_wait: DEFAULT_MAX_ROLLBACK_WAIT,
            max_drift: Duration::from_secs(1),
            start_within: None,
            min_id: None,
        }
    }
}

impl EmbeddedConfig {
    fn check(&self) -> Result<(), EmbeddedError> {
        if self.ttl < Duration::from_millis(100) {
            return Err(EmbeddedError::Config(format!(
                "ttl {:?} is too short (at least 100ms)",
                self.ttl
            )));
        }
        if self.workers == 0 {
            return Err(EmbeddedError::Config(
                "workers must be at least 1".to_string(),
            ));
        }
        Ok(())
    }

    fn lease_config(&self, namespace: &str) -> LeaseConfig {
        let mut config = LeaseConfig::new(namespace, self.workers);
        config.ttl = self.ttl;
        config.safety = self.safety;
        config.region = self.region;
        config.min_id = self.min_id;
        config
    }
}

/// Why an embedded generator did not start, or issued no ID.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("invalid embedded generator settings: {0}")]
    Config(String),
    #[error("cannot open the store: {0}")]
    Store(StoreError),
    #[error("cannot join the worker space: {0}")]
    Lease(#[from] LeaseError),
    #[error("refusing to start: {0}")]
    Clock(String),
    #[error("cannot start the embedded generator's thread: {0}")]
    Thread(std::io::Error),
    /// The lease was not renewed in time: ID time reached the lease end last committed. Clears
    /// by itself once a renewal succeeds.
    #[error("no ID issued: ID time {timestamp} ms reached the worker lease's end ({ceiling} ms), which was not renewed in time (is the store reachable?); issuing resumes once a renewal succeeds")]
    LeaseExpired { timestamp: u64, ceiling: u64 },
    /// No lease is held: it was found lost (another member took its worker IDs) and a new one
    /// is not acquired yet.
    #[error("no ID issued: this generator holds no worker lease (it was lost; a new one is being acquired)")]
    NoLease,
    /// The clock is unusable for now (moved back, stalled, before the epoch), or the layout's
    /// timestamps have run out ([`GenError::Exhausted`]).
    #[error("no ID issued: {0}")]
    Gen(GenError),
    #[error("no ID issued: the embedded generator has shut down")]
    Closed,
    /// A named sequence gave no values (unknown, used up, the store did not answer in time).
    #[error("no value: {0}")]
    Sequence(#[from] crate::sequence::holder::HoldError),
}

impl From<JoinError> for EmbeddedError {
    fn from(e: JoinError) -> Self {
        match e {
            JoinError::Clock(why) => EmbeddedError::Clock(why),
            JoinError::Lease(e) => EmbeddedError::Lease(e),
        }
    }
}

/// The embedded generator's one issuer, behind the shared lock: every slice and batch is drawn
/// from it.
struct Handle {
    issuer: Issuer<CachedClock>,
    closed: bool,
}

/// A run of consecutive IDs of one millisecond, drawn for one thread: `next .. end`, all with
/// ID time `timestamp`, below the lease ceiling `ceiling` held when they were drawn.
struct Slice {
    next: u64,
    end: u64,
    timestamp: u64,
    ceiling: Arc<Ceiling>,
}

impl Slice {
    fn empty() -> Slice {
        Slice {
            next: 0,
            end: 0,
            timestamp: 0,
            ceiling: Arc::new(Ceiling::new(0)),
        }
    }
}

/// The most IDs a thread's slice holds: a thread that uses every ID of its slices within their
/// millisecond doubles its slice up to this; one that does not draws what it used. A thread
/// burns at most this many IDs per millisecond (drawn, never handed out: IDs are unique, not
/// dense), and takes the lock once per slice.
pub const MAX_SLICE: u64 = 256;

impl Handle {
    /// Issues `n` IDs as runs `(first, count)`, waiting on the clock when the next one needs a
    /// later reading. On error, discard every run emitted.
    fn fill(&mut self, n: u64, mut emit: impl FnMut(u64, u64)) -> Result<(), EmbeddedError> {
        if self.closed {
            return Err(EmbeddedError::Closed);
        }
        let mut fill = Fill::new(n);
        let mut started = None;
        loop {
            match self
                .issuer
                .issue_current(&mut started, &mut fill, &mut emit)
            {
                Ok(Progress::Done) => return Ok(()),
                Ok(Progress::RetryAt(at)) => self.issuer.sleep_until(at),
                Err(e) => return Err(self.refusal(e)),
            }
        }
    }

    /// Up to `want` IDs of one millisecond (at least one), waiting on the clock only while none
    /// is free. IDs the call drew beyond its first run (a second millisecond's) are burned.
    fn draw(&mut self, want: u64) -> Result<Slice, EmbeddedError> {
        if self.closed {
            return Err(EmbeddedError::Closed);
        }
        let mut fill = Fill::new(want);
        let mut started = None;
        let mut run = None;
        loop {
            let progress = self
                .issuer
                .issue_current(&mut started, &mut fill, |first, count| {
                    run.get_or_insert((first, count));
                })
                .map_err(|e| self.refusal(e))?;
            if let Some((first, count)) = run {
                if matches!(progress, Progress::RetryAt(_)) {
                    // The rest of the slice would need a later millisecond: not waited for.
                    self.issuer.abandon(&mut fill);
                }
                let ceiling = self
                    .issuer
                    .ceiling()
                    .map_or_else(|| Arc::new(Ceiling::new(0)), Arc::clone);
                let timestamp = self.issuer.layout().decompose(Id(first)).timestamp;
                // The generator checks the ceiling once per new millisecond, and may finish one
                // it checked after a loss lowered it (those IDs are below the old lease end,
                // which fences the next holder); an embedded generator stops at once.
                let limit = ceiling.get();
                if timestamp >= limit {
                    return Err(self.refusal(IssueError::Gen(GenError::LeaseCeiling {
                        timestamp,
                        ceiling: limit,
                    })));
                }
                return Ok(Slice {
                    next: first,
                    end: first + count,
                    timestamp,
                    ceiling,
                });
            }
            match progress {
                Progress::RetryAt(at) => self.issuer.sleep_until(at),
                // Done emits every ID asked for, at least one, so a run was taken above.
                Progress::Done => return Err(EmbeddedError::Closed),
            }
        }
    }

    /// What an issuer's refusal means to the caller of an embedded generator.
    fn refusal(&self, e: IssueError) -> EmbeddedError {
        match e {
            IssueError::Gen(GenError::LeaseCeiling { timestamp, ceiling }) => {
                if self.issuer.lease().current().is_none() {
                    EmbeddedError::NoLease
                } else {
                    EmbeddedError::LeaseExpired { timestamp, ceiling }
                }
            }
            IssueError::Gen(e) => EmbeddedError::Gen(e),
            IssueError::NoLease | IssueError::RangeChanged | IssueError::LeaseChanged => {
                EmbeddedError::NoLease
            }
        }
    }

    /// Stops issuing for good; returns what the issuer issued, for the member's release.
    fn close(&mut self) -> IssuerExit {
        self.closed = true;
        self.issuer.exit()
    }
}

/// What every handle of one embedded generator shares: the issuer behind its lock, and whether
/// the generator has stopped issuing.
struct Shared {
    handle: Mutex<Handle>,
    closed: AtomicBool,
    epoch_ms: u64,
}

impl Shared {
    fn lock(&self) -> Result<MutexGuard<'_, Handle>, EmbeddedError> {
        // A panic while issuing is a failed fence assertion: issue nothing more.
        self.handle.lock().map_err(|_| EmbeddedError::Closed)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(mut handle) = self.handle.lock() {
            handle.closed = true;
        }
    }
}

/// One thread's way to an embedded generator's IDs, without a lock per ID: it draws a slice of
/// the current millisecond's IDs from the generator's issuer (one lock per slice) and hands
/// them out while its own clock reading stays in that millisecond, the lease ceiling they were
/// drawn under has not been lowered (a lost lease) and the generator has not shut down. Made
/// by [`Embedded::handle`]; [`Embedded::next_id`] keeps one per thread by itself.
///
/// IDs from one handle strictly increase, and every ID is issued under the lease's fences as
/// the generator's own are (a slice is drawn by the issuer, fenced by the floor and the
/// ceiling, and counted in the last timestamp issued that the release records). IDs of
/// different handles are ordered by millisecond, not within one: two threads drawing in the
/// same millisecond interleave as two nodes' IDs do.
///
/// `Send`, not `Sync`: one thread uses it at a time.
pub struct IdHandle {
    shared: Arc<Shared>,
    clock: CachedClock,
    slice: Slice,
    /// How many IDs the next slice asks for (1 ..= [`MAX_SLICE`]).
    want: u64,
    /// The first ID of the current slice, to tell how much of it was used.
    drawn_from: u64,
}

impl IdHandle {
    fn new(shared: Arc<Shared>) -> IdHandle {
        IdHandle {
            shared,
            clock: CachedClock::new(),
            slice: Slice::empty(),
            want: 1,
            drawn_from: 0,
        }
    }

    /// One ID: from the thread's slice while it is good, else from a new slice.
    #[inline]
    pub fn next_id(&mut self) -> Result<Id, EmbeddedError> {
        match self.take_from_slice() {
            Some(id) => Ok(id),
            None => self.next_id_slow(),
        }
    }

    /// The next ID of the slice, if it is still good: IDs left, the clock still in its
    /// millisecond, its lease ceiling not lowered, the generator not shut down.
    #[inline]
    fn take_from_slice(&mut self) -> Option<Id> {
        let slice = &mut self.slice;
        if slice.next < slice.end
            && self.clock.wall_ms().wrapping_sub(self.shared.epoch_ms) == slice.timestamp
            && slice.timestamp < slice.ceiling.get()
            && !self.shared.closed.load(Ordering::Acquire)
        {
            let id = slice.next;
            slice.next += 1;
            return Some(Id(id));
        }
        None
    }

    #[cold]
    fn next_id_slow(&mut self) -> Result<Id, EmbeddedError> {
        let used = self.slice.next - self.drawn_from;
        let was = self.slice.end - self.drawn_from;
        self.want = if was > 0 && used == was {
            // Used up within its millisecond: a busy thread takes more at a time.
            (self.want * 2).min(MAX_SLICE)
        } else {
            used.clamp(1, MAX_SLICE)
        };
        // Whatever is left of the old slice is burned: its millisecond is over, or its lease.
        // It is drawn from nothing until a draw succeeds (a failed one leaves it empty).
        self.slice = Slice::empty();
        self.drawn_from = 0;
        let mut slice = self.shared.lock()?.draw(self.want)?;
        let id = slice.next;
        self.drawn_from = id;
        slice.next += 1;
        self.slice = slice;
        Ok(Id(id))
    }

    /// Fills `out` with strictly increasing IDs (above every ID this handle handed out
    /// before). On error the contents of `out` are unspecified and must not be used.
    pub fn next_batch(&mut self, out: &mut [u64]) -> Result<(), EmbeddedError> {
        let mut pos = 0usize;
        self.fill_runs(out.len() as u64, |first, n| {
            for (i, slot) in out[pos..pos + n as usize].iter_mut().enumerate() {
                *slot = first + i as u64;
            }
            pos += n as usize;
        })
    }

    /// `n` IDs as runs of consecutive integers: `emit(first, count)` once per millisecond of
    /// work, the counts summing to `n`, all above every ID this handle handed out before. On
    /// error, discard every run emitted.
    pub fn fill_runs(&mut self, n: u64, emit: impl FnMut(u64, u64)) -> Result<(), EmbeddedError> {
        // A batch is drawn whole from the issuer, above the slice: what is left of the slice
        // is burned, so that this handle's IDs keep increasing.
        self.slice = Slice::empty();
        self.drawn_from = 0;
        self.shared.lock()?.fill(n, emit)
    }
}

thread_local! {
    /// Each thread's handles, one per embedded generator it has taken IDs from.
    static HANDLES: RefCell<Vec<IdHandle>> = const { RefCell::new(Vec::new()) };
}

/// Where the background work runs.
enum Driver {
    /// A task on the runtime [`Embedded::start`] was called on.
    Task(tokio::task::JoinHandle<Result<Released, LeaseError>>),
    /// A thread of its own ([`Embedded::start_blocking`]).
    Thread(std::thread::JoinHandle<Result<Released, LeaseError>>),
    /// Shut down already.
    Done,
}

/// A lease-backed generator running inside this process (see the [module docs](self)).
///
/// Share it (`Arc<Embedded>`) between threads: each thread takes its IDs through a handle of
/// its own ([`IdHandle`], kept per thread by [`next_id`](Embedded::next_id)), which takes the
/// lock once per slice of IDs, not per ID. Drop releases the lease in the background;
/// [`shutdown`](Embedded::shutdown) releases it and says how.
pub struct Embedded {
    shared: Arc<Shared>,
    /// The namespace's named sequences, reserved on the background runtime.
    sequences: Arc<Holder>,
    lease: Arc<LeaseShared>,
    layout: Layout,
    stop: watch::Sender<bool>,
    driver: Driver,
}

/// What [`Embedded::join`] hands to the background: the member and its one issuer, and the
/// holder of the namespace's named sequences.
struct Joined {
    member: Member<SystemClock>,
    shared: Arc<Shared>,
    sequences: Arc<Holder>,
}

impl Embedded {
    /// Joins the worker space of `namespace` in `store` (the cluster's store, key prefix and
    /// namespace, as its nodes' `--store` and `--namespace` name them), as a node does: checks
    /// the clock against the members', acquires a lease (waiting, within
    /// [`EmbeddedConfig::start_within`], for one that frees up by itself), publishes its clock
    /// key, then renews in a task on the current tokio runtime. Call it inside a runtime
    /// that keeps running (see the [module docs](self#runtimes)).
    pub async fn start(
        store: Arc<dyn KvStore>,
        namespace: &str,
        config: EmbeddedConfig,
    ) -> Result<Embedded, EmbeddedError> {
        let (stop, stopped) = watch::channel(false);
        let layout = config.layout;
        let joined = Self::join(store, namespace, config).await?;
        let shared = Arc::clone(&joined.shared);
        let sequences = Arc::clone(&joined.sequences);
        let lease = joined.member.lease();
        let task = tokio::spawn(Self::drive(joined, stopped));
        Ok(Embedded {
            shared,
            sequences,
            lease,
            layout,
            stop,
            driver: Driver::Task(task),
        })
    }

    /// As [`start`](Self::start), for an application without a tokio runtime: opens the store
    /// `url` names (with the TLS material and credentials of `access`) and runs the store's
    /// client and the background work on a thread of its own. `embedded` needs its directory
    /// (`embedded:/path`); that store's database admits one process.
    pub fn start_blocking(
        url: &StoreUrl,
        access: &StoreAccess,
        namespace: &str,
        config: EmbeddedConfig,
    ) -> Result<Embedded, EmbeddedError> {
        if matches!(url, StoreUrl::Embedded { dir: None }) {
            return Err(EmbeddedError::Config(
                "the embedded store needs its directory: embedded:/path/to/dir".to_string(),
            ));
        }
        config.check()?;
        let (url, access, namespace) = (url.clone(), access.clone(), namespace.to_string());
        let layout = config.layout;
        let (stop, stopped) = watch::channel(false);
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("idgen-embedded".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(EmbeddedError::Thread(e)));
                        return Ok(Released::AlreadyLost);
                    }
                };
                runtime.block_on(async move {
                    let joined = async {
                        let store = store::open(&url, std::path::Path::new("."), &access)
                            .await
                            .map_err(EmbeddedError::Store)?;
                        Self::join(store, &namespace, config).await
                    };
                    match joined.await {
                        Ok(joined) => {
                            let _ = tx.send(Ok((
                                Arc::clone(&joined.shared),
                                Arc::clone(&joined.sequences),
                                joined.member.lease(),
                            )));
                            Self::drive(joined, stopped).await
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            Ok(Released::AlreadyLost)
                        }
                    }
                })
            })
            .map_err(EmbeddedError::Thread)?;
        match rx.recv() {
            Ok(Ok((shared, sequences, lease))) => Ok(Embedded {
                shared,
                sequences,
                lease,
                layout,
                stop,
                driver: Driver::Thread(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(EmbeddedError::Thread(std::io::Error::other(
                    "the embedded generator's thread stopped while starting",
                )))
            }
        }
    }

    /// The start-up of a node, without its listeners: the member joins (clock check, lease,
    /// clock key) with one issuer over its whole grant.
    async fn join(
        store: Arc<dyn KvStore>,
        namespace: &str,
        config: EmbeddedConfig,
    ) -> Result<Joined, EmbeddedError> {
        config.check()?;
        let clock = SystemClock::new();
        let owner = Owner::this_process(config.node_id.clone(), clock.wall_ms());
        let lease = config.lease_config(namespace);
        let settings = MemberSettings {
            layout: config.layout,
            patience: config
                .start_within
                .unwrap_or_else(|| MemberSettings::default_patience(&lease)),
            lease,
            workers_per_issuer: config.workers,
            max_drift: config.max_drift,
            max_rollback_wait: config.max_rollback_wait,
        };
        // Named sequences are reserved on the runtime the background runs on.
        let sequences = Holder::new(
            Arc::clone(&store),
            namespace,
            tokio::runtime::Handle::current(),
        );
        let (member, view) = Member::join(store, settings, owner, clock).await?;
        tracing::info!(
            event = "embedded_started",
            worker_first = view.grant.workers.first,
            worker_count = view.grant.workers.count,
            generation = view.grant.generation,
            namespace,
            "embedded generator joined the worker space"
        );
        let issuer = member.issuer(0, CachedClock::new(), Arc::default());
        Ok(Joined {
            member,
            sequences,
            shared: Arc::new(Shared {
                handle: Mutex::new(Handle {
                    issuer,
                    closed: false,
                }),
                closed: AtomicBool::new(false),
                epoch_ms: config.layout.epoch_ms(),
            }),
        })
    }

    /// The background: renew and publish the clock key until told to stop, then stop issuing
    /// and release the lease at the last timestamp issued under it.
    async fn drive(joined: Joined, stopped: watch::Receiver<bool>) -> Result<Released, LeaseError> {
        let Joined { member, shared, .. } = joined;
        member.run(stopped).await;
        shared.closed.store(true, Ordering::Release);
        // A panic while issuing leaves the issuer's end unknown: the release takes the ceiling.
        let exit = shared.handle.lock().ok().map(|mut handle| handle.close());
        member.leave(&[exit]).await
    }

    /// The next value of the named sequence `name` (created with `idgen seq create`), as a
    /// node's `POST /seq/{name}` answers it: from blocks reserved ahead (dense) or from a
    /// commit made after this call began (strict). Waits at most [`SEQUENCE_DEADLINE`] for the
    /// store.
    pub async fn next_value(&self, name: &str) -> Result<u64, EmbeddedError> {
        Ok(self.next_values(name, 1).await?[0])
    }

    /// `n` values of the named sequence `name`, in increasing order (see
    /// [`next_value`](Self::next_value)).
    pub async fn next_values(&self, name: &str, n: u64) -> Result<Vec<u64>, EmbeddedError> {
        let name: SequenceName = name.parse().map_err(HoldError::Sequence)?;
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(EmbeddedError::Closed);
        }
        Ok(self
            .sequences
            .next_values(&name, n, SEQUENCE_DEADLINE)
            .await?)
    }

    /// As [`next_values`](Self::next_values), for a thread outside any tokio runtime (an
    /// application that started with [`start_blocking`](Self::start_blocking)): blocks this
    /// thread until the values come. Inside a runtime it refuses (await `next_values`).
    pub fn next_values_blocking(&self, name: &str, n: u64) -> Result<Vec<u64>, EmbeddedError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(EmbeddedError::Config(
                "next_values_blocking called inside a tokio runtime: await next_values instead"
                    .into(),
            ));
        }
        self.sequences.runtime().block_on(self.next_values(name, n))
    }

    /// One ID, through this thread's handle (see [`IdHandle`]): IDs one thread takes strictly
    /// increase; no lock is taken per ID.
    #[inline]
    pub fn next_id(&self) -> Result<Id, EmbeddedError> {
        // The slice of the thread's first handle, if it is this generator's: the common case
        // costs a look at the thread's handles and the slice, with nothing large to move.
        let fast = HANDLES.try_with(|cell| {
            let mut handles = cell.try_borrow_mut().ok()?;
            let first = handles.first_mut()?;
            if !Arc::ptr_eq(&first.shared, &self.shared) {
                return None;
            }
            first.take_from_slice()
        });
        match fast {
            Ok(Some(id)) => Ok(id),
            _ => self.with_handle(IdHandle::next_id),
        }
    }

    /// Fills `out` with strictly increasing IDs, above every ID this thread took before. On
    /// error the contents of `out` are unspecified and must not be used.
    pub fn next_batch(&self, out: &mut [u64]) -> Result<(), EmbeddedError> {
        self.with_handle(|h| h.next_batch(out))
    }

    /// `n` IDs as runs of consecutive integers: `emit(first, count)` once per millisecond of
    /// work, the counts summing to `n`. On error, discard every run emitted.
    pub fn fill_runs(&self, n: u64, emit: impl FnMut(u64, u64)) -> Result<(), EmbeddedError> {
        self.with_handle(|h| h.fill_runs(n, emit))
    }

    /// A handle of its own for one thread (see [`IdHandle`]), for a caller that keeps it rather
    /// than have [`next_id`](Self::next_id) look up the thread's.
    pub fn handle(&self) -> IdHandle {
        IdHandle::new(Arc::clone(&self.shared))
    }

    /// This thread's handle for this generator among `handles` (the thread's), made on first
    /// use; handles of generators that have shut down are dropped then.
    #[inline]
    fn thread_handle<'h>(&self, handles: &'h mut Vec<IdHandle>) -> &'h mut IdHandle {
        let i = match handles
            .iter()
            .position(|h| Arc::ptr_eq(&h.shared, &self.shared))
        {
            Some(i) => i,
            None => {
                handles.retain(|h| !h.shared.closed.load(Ordering::Relaxed));
                handles.push(self.handle());
                handles.len() - 1
            }
        };
        &mut handles[i]
    }

    /// Runs `f` on this thread's handle for this generator, made on first use. Handles of
    /// generators that have shut down are dropped then. Where the thread's handles cannot be
    /// reached (while the thread exits), `f` runs on a handle made for the call.
    #[inline]
    fn with_handle<T>(
        &self,
        f: impl FnOnce(&mut IdHandle) -> Result<T, EmbeddedError>,
    ) -> Result<T, EmbeddedError> {
        let mut f = Some(f);
        let done = HANDLES
            .try_with(|cell| {
                let mut handles = cell.try_borrow_mut().ok()?;
                let f = f.take()?;
                Some(f(self.thread_handle(&mut handles)))
            })
            .ok()
            .flatten();
        match (done, f) {
            (Some(result), _) => result,
            (None, Some(f)) => f(&mut self.handle()),
            (None, None) => Err(EmbeddedError::Closed),
        }
    }

    /// The layout IDs are made with.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The worker IDs the generator issues from (those of the lease it last picked up).
    pub fn workers(&self) -> WorkerRange {
        self.shared
            .lock()
            .map(|h| h.issuer.current_range())
            .unwrap_or_default()
    }

    /// The lease as its keeper sees it: the current grant and ceiling, renewal counters.
    pub fn lease(&self) -> Arc<LeaseShared> {
        Arc::clone(&self.lease)
    }

    /// Stops issuing, stops renewing, and releases the lease at the last timestamp issued under
    /// it (so its worker IDs are free at once), then deletes the clock key.
    pub async fn shutdown(mut self) -> Result<Released, EmbeddedError> {
        self.stop_issuing();
        match std::mem::replace(&mut self.driver, Driver::Done) {
            Driver::Task(task) => match task.await {
                Ok(released) => Ok(released?),
                Err(e) => Err(EmbeddedError::Thread(std::io::Error::other(e.to_string()))),
            },
            Driver::Thread(thread) => {
                match tokio::task::spawn_blocking(move || thread.join()).await {
                    Ok(Ok(released)) => Ok(released?),
                    _ => Err(EmbeddedError::Thread(std::io::Error::other(
                        "the embedded generator's thread panicked",
                    ))),
                }
            }
            Driver::Done => Ok(Released::AlreadyLost),
        }
    }

    /// As [`shutdown`](Self::shutdown), for a generator started with
    /// [`start_blocking`](Self::start_blocking), waiting on the calling thread. One started
    /// with [`start`](Self::start) releases on its runtime without being waited for.
    pub fn shutdown_blocking(mut self) -> Result<Released, EmbeddedError> {
        self.stop_issuing();
        match std::mem::replace(&mut self.driver, Driver::Done) {
            Driver::Thread(thread) => match thread.join() {
                Ok(released) => Ok(released?),
                Err(_) => Err(EmbeddedError::Thread(std::io::Error::other(
                    "the embedded generator's thread panicked",
                ))),
            },
            Driver::Task(_) => Err(EmbeddedError::Config(
                "started with start(): its release runs on its runtime; await shutdown() to learn its outcome"
                    .to_string(),
            )),
            Driver::Done => Ok(Released::AlreadyLost),
        }
    }

    fn stop_issuing(&self) {
        self.shared.close();
        let _ = self.stop.send(true);
    }
}

impl Drop for Embedded {
    /// Stops issuing and renewing and releases the lease: waits for it when the generator runs
    /// on its own thread ([`start_blocking`](Embedded::start_blocking)); on a runtime
    /// ([`start`](Embedded::start)), the release finishes there in the background (if the
    /// runtime stops first, the lease simply runs out).
    fn drop(&mut self) {
        self.stop_issuing();
        if let Driver::Thread(thread) = std::mem::replace(&mut self.driver, Driver::Done) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests;
