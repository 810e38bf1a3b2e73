//! Deterministic simulation of many nodes leasing worker IDs from one store and issuing IDs
//! under their leases, with crashes, restarts, zombies (an old process that keeps running after
//! its replacement started), partitions, clocks that run fast, slow and jump, a store that fails
//! or answers "unknown", and **interleaved transactions**. Time and the order of every
//! operation are under the test's control (a seeded PRNG), so a failure names a seed (and the
//! step) that reproduces it exactly.
//!
//! ## What runs
//!
//! Each simulated process is the deployed code on simulated time (a [`TestClock`] per
//! process, whose monotonic clock follows true time and whose wall clock is true time plus an
//! offset that jumps and drifts): a real [`Member`], made as `idgen serve` and the embedded
//! generator make theirs, whose keeper the simulation drives step by step (`acquire`,
//! `renew_once`); its real [`Issuer`]s, one per shard (a node of two shards) or one in all (a
//! process of one worker ID, as an embedded generator holds), rebuilt from the keeper's
//! [`LeaseView`] on a new generation, with the shared ceiling, that clients ask for IDs through
//! the range their connection announced; and the real way out, [`Member::leave`]: the issuers
//! stop, the lease is released at the largest timestamp they issued under the current
//! generation, or at the ceiling if an issuer "panicked". The simulation only talks to the
//! public lease API and looks at issued IDs, so it does not depend on the store's record
//! format.
//!
//! ## Interleaving
//!
//! Every process reaches the store through its own [`Link`]. A keeper operation runs as a
//! future that the simulation polls by hand. After any read (`get` or `scan`) and before any
//! commit, the link may (seeded PRNG, [`Sched`]) suspend the operation: the future returns
//! `Pending` with its reads done and its commit not yet sent. The simulation then usually runs
//! a *rival* operation of another process (acquire, renew or shutdown-release, chosen by the
//! PRNG), which may itself be suspended and run rivals (up to three deep), and resumes the
//! suspended one now or at a later step; meanwhile time passes, clocks jump, shards issue,
//! processes crash. A read that is not conflict-checked at commit is therefore exposed to
//! every write that can land between it and the commit.
//!
//! ## What is checked, over the whole history
//!
//! - no ID is issued twice (the runs every shard emitted, as integer intervals, are disjoint);
//! - every ID lies inside its holder's grant: its worker in the granted range, its timestamp
//!   strictly above the grant's floor and strictly below the highest ceiling the keeper ever
//!   published for it;
//! - per worker ID, grants use disjoint, ordered timestamp intervals: every timestamp of an
//!   older generation is below every timestamp of a newer one, and at or below the newer
//!   grant's floor (checked both when a grant appears and at every issue);
//! - the worker records always read (no two overlap: a `Corrupt` answer is a failure), after
//!   every step and from every acquisition;
//! - across **layout generations** (an operator schedules a successor layout now and then, a
//!   few seconds to a minute ahead, alternating 16 and 32 worker IDs): every ID of a
//!   generation lies at or above its first ID and below the next generation's, and the
//!   per-worker fences above hold within each generation's own worker space. Writing the
//!   renewal without its cap at the old generation's last timestamp (`renew_seeing`'s
//!   `wanted.min(last)`) fails seed 1 at step 363: a renewal ran past the switch and issued
//!   an old-layout ID above the successor's first ID.
//!
//! ## The worker space
//!
//! 16 worker IDs; processes of three shapes (two shards of four worker IDs, two of one, and
//! one issuer over one worker ID, as an embedded generator holds); transactions of at most 2 worker records
//! (`LeaseConfig::max_records_per_txn`), so that a window often overlaps more records than one
//! transaction may touch and is merged first. The namespace starts as an earlier version
//! leaves it: one-worker records released long ago over some worker IDs, never-used gaps
//! between them; now and then an operator deletes a released record of worker IDs no grant
//! ever covered (a gap again, harmless since nothing was issued there). So merges run over
//! gaps, and rivals take worker IDs inside a merge's run between its scan and its commit.
//!
//! ## Mutants
//!
//! [`Mutant`] breaks one fence at a time inside the simulation (at the link or the shutdown
//! path, not in `lease/mod.rs`), and a test per mutant asserts that some seed fails; a further
//! test asserts that, without interleaving, the two conflict-check mutants go unseen. The same
//! three bugs written into `lease/mod.rs` (renewal reading through snapshot reads, the
//! acquisition's re-read not checked, release at `last_issued - 1`) fail the default run too:
//!
//! - in `Leases::renew`, `let recs = { let mut snapshot = Txn::new(self.store);
//!   self.read_own(&mut snapshot, grant).await? };` (the checks go with the discarded
//!   transaction): seed 1, step 482, a zombie's renewal overwrites a newer grant and its
//!   IDs rise above that grant's floor;
//! - in `Leases::acquire`, the re-read `txn.get(&key)` as `self.store.get(&key)`: seed 12,
//!   step 933, a grant whose floor is below what the renewing holder then issued;
//! - in `Leases::release`, `t.saturating_sub(1).max(grant.floor)`: seed 0, step 59;
//! - in `Leases::merge`, without the check that the generation counter still reads what the
//!   acquisition's scan saw: seed 16, step 48, a merge overlays a grant made in a never-used
//!   gap of its run, and the records no longer read.
//!
//! (Seeds and steps as of the commit that added this; any change to the simulation moves
//! them.) The simulation before interleaving passed the first two over 2000 seeds.
//!
//! `IDGEN_SIM_SEEDS=N` runs seeds `0..N` (default 200), `IDGEN_SIM_STEPS` the steps per seed
//! (default 1000), `IDGEN_SIM_SUSPEND` the chance (percent, default 25) that a read or commit
//! suspends its operation, `IDGEN_SIM_SEED=S` one seed only, and `IDGEN_SIM_MUTANT=renew-unchecked`
//! (`acquire-reread-unchecked`, `release-below-last-issued`) runs the main test with a mutant.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use idgen_id::{Generations, Id, Layout, WorkerRange, DEFAULT_EPOCH_MS};

use crate::clock::{Clock, TestClock};
use crate::generator::GeneratorStats;
use crate::lease::keeper::{KeeperTiming, LeaseView};
use crate::lease::*;
use crate::member::{IssueError, Issuer, IssuerExit, Member, MemberSettings};
use crate::store::memory::{Fault, MemoryStore};
use crate::store::{BoxFuture, Check, Commit, Entry, KvStore, StoreError, Write};

/// One fence broken on purpose, to show the simulation notices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutant {
    None,
    /// A renewal commits without the checks of the records it read (as if it read them with
    /// snapshot reads instead of `Txn::get`).
    RenewUnchecked,
    /// An acquisition commits without checks on the keys it re-read under a prefix it scanned
    /// (the chosen records), keeping the others (cluster record, generation counter).
    AcquireRereadUnchecked,
    /// Shutdown releases one millisecond below the true last-issued timestamp.
    ReleaseBelowLastIssued,
}

impl Mutant {
    fn from_env() -> Mutant {
        match std::env::var("IDGEN_SIM_MUTANT").as_deref() {
            Err(_) | Ok("") | Ok("none") => Mutant::None,
            Ok("renew-unchecked") => Mutant::RenewUnchecked,
            Ok("acquire-reread-unchecked") => Mutant::AcquireRereadUnchecked,
            Ok("release-below-last-issued") => Mutant::ReleaseBelowLastIssued,
            Ok(other) => panic!("IDGEN_SIM_MUTANT={other}: not a mutant"),
        }
    }
}

/// xorshift64*: small, deterministic, good enough to drive a simulation.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        Rng(
            (seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                | 1,
        )
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.below(items.len() as u64) as usize])
    }
}

/// Decides where store operations are suspended; shared by every link of one simulation.
struct Sched {
    rng: Mutex<Rng>,
    /// Chance (percent) that a read or a commit suspends its operation.
    suspend_percent: AtomicU64,
    /// Suspensions, by the kind of operation suspended ([`OpKind`] as index).
    suspensions: [AtomicU64; 4],
    conflicts: AtomicU64,
    /// Merge commits applied (an acquisition's commit that writes no held record).
    merges: AtomicU64,
}

impl Sched {
    fn suspend_here(&self, op: OpKind) -> bool {
        let percent = self.suspend_percent.load(Ordering::Relaxed);
        let yes = percent > 0 && self.rng.lock().unwrap().chance(percent);
        if yes {
            self.suspensions[op as usize].fetch_add(1, Ordering::Relaxed);
        }
        yes
    }
}

/// Returns `Pending` once: the point where a rival may run.
struct Suspend(bool);

impl Future for Suspend {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// Runs a future that must be ready at once (the memory store answers synchronously).
fn ready<T>(f: impl Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a memory store operation did not complete at once"),
    }
}

/// The keeper operation a process has in flight, as its link sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum OpKind {
    Idle = 0,
    Acquire = 1,
    Renew = 2,
    Release = 3,
}

impl OpKind {
    fn from_u8(v: u8) -> OpKind {
        match v {
            1 => OpKind::Acquire,
            2 => OpKind::Renew,
            3 => OpKind::Release,
            _ => OpKind::Idle,
        }
    }
}

/// A process's path to the shared store: can be cut (a partition), suspends operations between
/// their reads and their commit, and applies a mutant to the commits.
struct Link {
    store: Arc<MemoryStore>,
    sched: Arc<Sched>,
    mutant: Mutant,
    cut: AtomicBool,
    op: AtomicU8,
    /// Prefixes scanned by the transaction in progress.
    scanned: Mutex<Vec<Vec<u8>>>,
    /// Where the operation was last suspended, for the trace.
    suspended_at: Mutex<&'static str>,
}

impl Link {
    fn check(&self) -> Result<(), StoreError> {
        if self.cut.load(Ordering::Relaxed) {
            Err(StoreError::Unavailable("partitioned".into()))
        } else {
            Ok(())
        }
    }

    fn suspend_here(&self, at: &'static str) -> bool {
        let yes = self.sched.suspend_here(self.op());
        if yes {
            *self.suspended_at.lock().unwrap() = at;
        }
        yes
    }

    fn op(&self) -> OpKind {
        OpKind::from_u8(self.op.load(Ordering::Relaxed))
    }

    fn start_op(&self, kind: OpKind) {
        self.op.store(kind as u8, Ordering::Relaxed);
        self.scanned.lock().unwrap().clear();
    }

    /// The checks a commit is sent with: all of them, unless a mutant drops some. A commit
    /// ends the transaction.
    fn checks_for_commit(&self, checks: &[Check]) -> Vec<Check> {
        let op = self.op();
        let mut scanned = self.scanned.lock().unwrap();
        let sent = match (self.mutant, op) {
            (Mutant::RenewUnchecked, OpKind::Renew) => Vec::new(),
            (Mutant::AcquireRereadUnchecked, OpKind::Acquire) => checks
                .iter()
                .filter(|c| !scanned.iter().any(|p| c.key.starts_with(p)))
                .cloned()
                .collect(),
            _ => checks.to_vec(),
        };
        scanned.clear();
        sent
    }
}

impl KvStore for Link {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        // The read happens now; the answer may arrive after a rival ran.
        let read = self.check().and_then(|()| ready(self.store.get(key)));
        let suspend = read.is_ok() && self.suspend_here("after a get");
        Box::pin(async move {
            if suspend {
                Suspend(false).await;
            }
            read
        })
    }
    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        let read = self.check().and_then(|()| ready(self.store.scan(prefix)));
        if read.is_ok() {
            self.scanned.lock().unwrap().push(prefix.to_vec());
        }
        let suspend = read.is_ok() && self.suspend_here("after a scan");
        Box::pin(async move {
            if suspend {
                Suspend(false).await;
            }
            read
        })
    }
    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        let suspend = self.suspend_here("before its commit");
        Box::pin(async move {
            if suspend {
                Suspend(false).await;
            }
            // The commit is sent now, after whatever ran while it was suspended.
            self.check()?;
            let checks = self.checks_for_commit(checks);
            let outcome = self.store.commit(&checks, writes).await;
            if outcome == Ok(Commit::Conflict) {
                self.sched.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            let held = |w: &Write| matches!(w, Write::Put { value, .. } if value.windows(15).any(|v| v == br#""state":"held""#));
            if outcome == Ok(Commit::Applied)
                && self.op() == OpKind::Acquire
                && !writes.iter().any(held)
            {
                self.sched.merges.fetch_add(1, Ordering::Relaxed);
            }
            outcome
        })
    }
    fn describe(&self) -> String {
        "sim link".into()
    }
}

/// What a finished keeper operation returned.
enum Outcome {
    Acquired(Result<Arc<LeaseView>, LeaseError>),
    Renewed,
    Released(Result<Released, LeaseError>),
}

/// A keeper operation in flight.
struct InFlight {
    kind: OpKind,
    fut: Pin<Box<dyn Future<Output = Outcome>>>,
}

/// One shard and the connection a client keeps to it.
struct Shard {
    gen: Issuer<TestClock>,
    stats: Arc<GeneratorStats>,
    /// The range the connection's HELLO_OK announced; `None`: reconnect first.
    announced: Option<crate::member::Announced>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Running,
    /// Shards stopped; the release is in flight.
    Stopping,
    Gone,
}

struct Process {
    name: usize,
    instance: u32,
    link: Arc<Link>,
    clock: TestClock,
    /// Clock offset from true time, ms (changes by jumps and by drift).
    offset: i64,
    /// Extra ms the clock gains (or loses) per second of true time.
    drift_per_s: i64,
    member: Arc<Member<TestClock>>,
    shards: Vec<Shard>,
    op: Option<InFlight>,
    /// Steps until a cut link heals.
    cut_for: u32,
    state: State,
}

impl Process {
    fn label(&self) -> String {
        format!("node{}#{}", self.name, self.instance)
    }
    fn holds(&self) -> bool {
        self.state == State::Running && self.member.lease().current().is_some()
    }
}

/// A grant as the simulation saw its keeper publish it.
struct GrantSeen {
    /// The layout generation whose worker space and ID time it is in.
    layout_generation: u32,
    workers: WorkerRange,
    floor: u64,
    /// The highest ceiling the keeper published for it.
    ceiling_max: u64,
    holder: String,
}

const TTL_MS: u64 = 3_000;
/// Shards and worker IDs per shard of the processes of each name: a wide node, a narrow one,
/// and one issuer over one worker ID (as an embedded generator holds), so that a narrow grant
/// can land in a never-used gap inside a wide acquirer's merge.
const SHAPES: [(u64, u64); 3] = [(2, 4), (2, 1), (1, 1)];
/// Worker records one transaction may touch: low, so that acquisitions merge records often.
const RECORDS_PER_TXN: usize = 2;
const MAX_RUNNING: usize = 8;
const TRACE_LEN: usize = 40;

/// Counters over one run, to show the simulation exercised what it claims.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
struct Totals {
    grants: u64,
    issue_calls: u64,
    ids: u64,
    /// Suspended operations and rivals run, by [`OpKind`] (idle, acquire, renew, release).
    suspensions: [u64; 4],
    rivals: [u64; 4],
    conflicts: u64,
    lost: u64,
    releases: u64,
    /// Merges of small records before a grant, and never-used gaps made by an operator.
    merges: u64,
    gaps: u64,
    /// Successor layouts scheduled, and grants published in a layout generation after 0.
    switches: u64,
    later_grants: u64,
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, o: Totals) {
        self.grants += o.grants;
        self.issue_calls += o.issue_calls;
        self.ids += o.ids;
        for k in 0..4 {
            self.suspensions[k] += o.suspensions[k];
            self.rivals[k] += o.rivals[k];
        }
        self.conflicts += o.conflicts;
        self.lost += o.lost;
        self.releases += o.releases;
        self.merges += o.merges;
        self.gaps += o.gaps;
        self.switches += o.switches;
        self.later_grants += o.later_grants;
    }
}

struct Sim {
    rng: Rng,
    sched: Arc<Sched>,
    store: Arc<MemoryStore>,
    layout: Layout,
    mutant: Mutant,
    rt: tokio::runtime::Runtime,
    processes: Vec<Process>,
    /// True time, Unix ms.
    now: u64,
    step_no: u64,
    /// Steps until the store comes back.
    down_for: u32,
    /// generation → the grant.
    grants: BTreeMap<u64, GrantSeen>,
    /// (layout generation, worker) → generation → (min ts, max ts) issued.
    issued: HashMap<(u32, u64), BTreeMap<u64, (u64, u64)>>,
    /// The cluster's layout generations, as the operator scheduled them.
    generations: Generations,
    /// Whether the records were raised to the version that holds successors.
    upgraded: bool,
    /// Issued ID runs: first → end (exclusive).
    ids: BTreeMap<u64, u64>,
    totals: Totals,
    trace: VecDeque<String>,
}

impl Sim {
    fn new(seed: u64, mutant: Mutant) -> Self {
        // 16 worker IDs (8, 2 or 1 per process, `SHAPES`): small enough that nodes contend and
        // ranges get reused, wide enough that a window overlaps more records than a
        // transaction may touch.
        let layout = Layout::new(DEFAULT_EPOCH_MS, 47, 4, 12, 0).unwrap();
        let now = DEFAULT_EPOCH_MS + 10_000_000;
        let sched = Arc::new(Sched {
            rng: Mutex::new(Rng::new(seed, 2)),
            suspend_percent: AtomicU64::new(25),
            suspensions: Default::default(),
            conflicts: AtomicU64::new(0),
            merges: AtomicU64::new(0),
        });
        let mut sim = Sim {
            rng: Rng::new(seed, 1),
            sched,
            store: Arc::new(MemoryStore::new()),
            layout,
            mutant,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap(),
            processes: Vec::new(),
            now,
            step_no: 0,
            down_for: 0,
            grants: BTreeMap::new(),
            issued: HashMap::new(),
            generations: Generations::new(layout),
            upgraded: false,
            ids: BTreeMap::new(),
            totals: Totals::default(),
            trace: VecDeque::new(),
        };
        sim.legacy_records();
        for name in 0..3 {
            sim.spawn(name, 0);
        }
        sim
    }

    /// The lease operations on the store itself, as an operator's tools see it.
    fn operator(&self) -> Leases<'_> {
        let owner = Owner {
            node_id: "operator".into(),
            host: "sim".into(),
            pid: 0,
            started_unix_ms: 0,
            instance: "operator".into(),
        };
        let mut config = LeaseConfig::new("sim", 1);
        config.max_records_per_txn = RECORDS_PER_TXN;
        Leases::new(self.store.as_ref(), self.layout, config, owner)
    }

    /// A namespace from an earlier version: one-worker records, released long ago, over some
    /// worker IDs, and never-used gaps between them.
    fn legacy_records(&mut self) {
        let long_ago = (self.now - self.layout.epoch_ms()).saturating_sub(1_000 * TTL_MS);
        let used: Vec<u64> = (0..self.layout.worker_count())
            .filter(|_| self.rng.chance(60))
            .collect();
        let leases = self.operator();
        let mut writes = Vec::new();
        for w in used {
            let rec = WorkerRecord {
                state: WorkerState::Released,
                owner: leases.owner().clone(),
                generation: w + 1,
                lease_end: long_ago,
                count: 1,
                layout_version: 1,
                written_unix_ms: self.now - 1_000 * TTL_MS,
            };
            writes.push(Write::Put {
                key: leases.worker_key(w),
                value: serde_json::to_vec(&rec).unwrap(),
            });
        }
        writes.push(Write::Put {
            key: b"idgen/sim/generation".to_vec(),
            value: b"100".to_vec(),
        });
        assert_eq!(ready(self.store.commit(&[], &writes)), Ok(Commit::Applied));
    }

    /// An operator deletes a released record of worker IDs no grant ever covered: a never-used
    /// gap again (harmless: nothing was issued there, so no floor is lost).
    fn delete_unused_record(&mut self) {
        let Ok(ranges) = ready(self.operator().ranges()) else {
            return;
        };
        let unused: Vec<(u64, WorkerRecord)> = ranges
            .into_iter()
            .filter(|(first, r)| {
                let range = WorkerRange::new(*first, r.count);
                r.state == WorkerState::Released
                    && range.ids().all(|w| !self.issued.contains_key(&(0, w)))
                    && self
                        .grants
                        .values()
                        .filter(|g| g.layout_generation == 0)
                        .all(|g| !range.ids().any(|w| g.workers.contains(w)))
            })
            .collect();
        let picks: Vec<usize> = (0..unused.len()).collect();
        let Some(i) = self.rng.pick(&picks) else {
            return;
        };
        let (first, rec) = &unused[i];
        let key = self.operator().worker_key(*first);
        let Ok(Some(entry)) = ready(self.store.get(&key)) else {
            return;
        };
        let check = Check {
            key: key.clone(),
            version: entry.version,
        };
        if ready(self.store.commit(&[check], &[Write::Delete { key }])) == Ok(Commit::Applied) {
            self.totals.gaps += 1;
            let count = rec.count;
            self.note(|| format!("operator deleted the unused record of workers {first}+{count}"));
        }
    }

    /// The records must always read: a correct store never holds overlapping records, so a
    /// `Corrupt` here is a bug in the lease logic (a merge overlaying a grant, say).
    fn check_records(&self) {
        for era in self.generations.all() {
            if let Err(e @ LeaseError::Corrupt { .. }) =
                ready(self.operator().in_generation(*era).ranges())
            {
                panic!(
                    "the worker records of layout generation {} no longer read: {e}",
                    era.index
                );
            }
        }
    }

    /// An operator schedules a successor layout (one switch at a time), a few seconds to a
    /// minute ahead, alternating the widths (47/4/12 and 46/5/12: 16 and 32 worker IDs).
    fn schedule_successor(&mut self) {
        let newest = *self.generations.newest();
        if newest.switch_unix_ms.is_some_and(|s| s > self.now) {
            return;
        }
        if !self.upgraded {
            if ready(self.operator().upgrade_records()).is_err() {
                return;
            }
            self.upgraded = true;
        }
        let switch = self.now + 5_000 + self.rng.below(20) * TTL_MS;
        let (ts, worker) = if newest.layout.worker_bits() == 4 {
            (46, 5)
        } else {
            (47, 4)
        };
        let Some(epoch) = idgen_id::successor_epoch(&newest.layout, switch, worker, 12) else {
            return;
        };
        let layout = Layout::new(epoch, ts, worker, 12, 0).expect("a valid successor");
        let now = self.now;
        match ready(self.operator().schedule_successor(layout, switch, now)) {
            Ok(gens) => {
                self.totals.switches += 1;
                let index = gens.newest().index;
                self.note(|| {
                    format!("operator scheduled layout generation {index} for {switch}: {layout}")
                });
                self.generations = gens;
            }
            Err(e) => {
                // An answer lost after the commit applied: the record says what holds.
                self.note(|| format!("operator could not schedule a successor: {e}"));
                self.reread_generations();
            }
        }
    }

    /// The layout generations as the cluster record holds them (when the store answers).
    fn reread_generations(&mut self) {
        if let Ok(Some(rec)) = ready(self.operator().cluster()) {
            self.generations = rec
                .generations()
                .expect("the cluster record's layouts read");
        }
    }

    fn note(&mut self, event: impl FnOnce() -> String) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        let line = format!("step {}: {}", self.step_no, event());
        self.trace.push_back(line);
    }

    fn spawn(&mut self, name: usize, offset: i64) {
        let instance = self.processes.iter().filter(|p| p.name == name).count() as u32;
        let clock = TestClock::new(self.now.saturating_add_signed(offset));
        let link = Arc::new(Link {
            store: Arc::clone(&self.store),
            sched: Arc::clone(&self.sched),
            mutant: self.mutant,
            cut: AtomicBool::new(false),
            op: AtomicU8::new(0),
            scanned: Mutex::new(Vec::new()),
            suspended_at: Mutex::new(""),
        });
        let (shards, per_shard) = SHAPES[name % SHAPES.len()];
        let mut config = LeaseConfig::new("sim", shards * per_shard);
        config.max_records_per_txn = RECORDS_PER_TXN;
        config.ttl = Duration::from_millis(TTL_MS);
        config.safety = Duration::from_millis(2 * TTL_MS);
        config.max_attempts = 3;
        let owner = Owner {
            node_id: format!("node{name}"),
            host: "sim".into(),
            pid: instance,
            started_unix_ms: 0,
            instance: format!("node{name}#{instance}"),
        };
        let store: Arc<dyn KvStore> = Arc::clone(&link) as Arc<dyn KvStore>;
        // The member as a node or an embedded generator makes it (the simulation drives its
        // joining, renewals and leaving step by step).
        let settings = MemberSettings {
            layout: self.layout,
            lease: config,
            workers_per_issuer: per_shard,
            max_drift: Duration::from_secs(1),
            max_rollback_wait: Duration::from_millis(10),
            patience: Duration::ZERO,
        };
        let timing = KeeperTiming {
            renew_every: Duration::from_millis(TTL_MS / 3),
            retry_every: Duration::from_millis(TTL_MS / 10),
            // Never: the simulation decides when a suspended operation resumes.
            op_timeout: Duration::from_secs(86_400),
        };
        let member = Arc::new(Member::new(
            store,
            settings,
            owner,
            clock.clone(),
            Some(timing),
        ));
        let shards = (0..shards as usize)
            .map(|index| {
                let stats = Arc::new(GeneratorStats::default());
                Shard {
                    gen: member.issuer(index, clock.clone(), Arc::clone(&stats)),
                    stats,
                    announced: None,
                }
            })
            .collect();
        self.processes.push(Process {
            name,
            instance,
            link,
            clock,
            offset,
            drift_per_s: 0,
            member,
            shards,
            op: None,
            cut_for: 0,
            state: State::Running,
        });
        let p = self.processes.len() - 1;
        self.note(|| format!("spawn p{p} node{name}#{instance}"));
    }

    fn sync_clock(&self, p: usize) {
        let proc_ = &self.processes[p];
        proc_
            .clock
            .set_wall_ms(self.now.saturating_add_signed(proc_.offset));
    }

    /// True time passes: every monotonic clock moves by `ms`, every wall clock to true time
    /// plus its offset (which drifts).
    fn advance(&mut self, ms: u64) {
        self.advance_but(ms, None);
    }

    /// Like [`advance`](Self::advance), where process `credit.0`'s clocks already moved
    /// `credit.1` ns of it (its generator slept).
    fn advance_but(&mut self, ms: u64, credit: Option<(usize, u64)>) {
        self.now += ms;
        for p in 0..self.processes.len() {
            let proc_ = &mut self.processes[p];
            let done_ns = credit.filter(|(c, _)| *c == p).map_or(0, |(_, ns)| ns);
            proc_.clock.advance(Duration::from_nanos(
                (ms * 1_000_000).saturating_sub(done_ns),
            ));
            proc_.offset += proc_.drift_per_s * ms as i64 / 1000;
            self.sync_clock(p);
        }
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.processes.len())
            .filter(|&p| self.processes[p].state != State::Gone)
            .collect()
    }

    fn running(&self) -> usize {
        self.processes
            .iter()
            .filter(|p| p.state == State::Running)
            .count()
    }

    // ---- the oracle ----

    /// Registers the process's current grant (checking its floor) and its ceiling.
    fn observe(&mut self, p: usize) {
        let Some(view) = self.processes[p].member.lease().current() else {
            return;
        };
        let g = &view.grant;
        if !self.grants.contains_key(&g.generation) {
            for w in g.workers.ids() {
                if let Some(gens) = self.issued.get(&(g.layout_generation, w)) {
                    for (&older, &(_, hi)) in gens.range(..g.generation) {
                        assert!(
                            g.floor >= hi,
                            "grant {g:?} to {} floor below ts {hi} already issued for worker {w} under generation {older}",
                            self.processes[p].label()
                        );
                    }
                }
            }
            self.totals.grants += 1;
            if g.layout_generation > 0 {
                self.totals.later_grants += 1;
            }
            let holder = self.processes[p].label();
            self.note(|| format!("{holder} granted {g:?}"));
            self.grants.insert(
                g.generation,
                GrantSeen {
                    layout_generation: g.layout_generation,
                    workers: g.workers,
                    floor: g.floor,
                    ceiling_max: 0,
                    holder,
                },
            );
        }
        let seen = self.grants.get_mut(&g.generation).expect("registered");
        seen.ceiling_max = seen.ceiling_max.max(view.ceiling.get());
    }

    /// Checks and records one run of IDs a shard emitted under `generation`.
    fn record_run(&mut self, p: usize, generation: u64, first: u64, count: u64) {
        let who = self.processes[p].label();
        let Some(lg) = self.grants.get(&generation).map(|g| g.layout_generation) else {
            panic!("{who} issued IDs under generation {generation}, which no keeper published");
        };
        if self.generations.get(lg).is_none() {
            self.reread_generations();
        }
        let grant = &self.grants[&generation];
        let era = *self.generations.get(lg).unwrap_or_else(|| {
            panic!("{who} issued under layout generation {lg}, never scheduled")
        });
        // Every ID of a layout generation lies at or above its first ID and below the next's.
        assert!(
            first >= era.first_id,
            "{who} issued {first} under layout generation {lg}, below its first ID {}",
            era.first_id
        );
        if let Some(next) = self.generations.after(lg) {
            assert!(
                first + count - 1 < next.first_id,
                "{who} issued {} under layout generation {lg}, at or above generation {}'s first ID {}",
                first + count - 1,
                next.index,
                next.first_id
            );
        }
        let a = era.layout.decompose(Id(first));
        let b = era.layout.decompose(Id(first + count - 1));
        assert_eq!(a.timestamp, b.timestamp, "a run spans milliseconds");
        let ts = a.timestamp;
        assert!(
            ts > grant.floor && ts < grant.ceiling_max,
            "{who} issued ts {ts} outside generation {generation}'s fences ({}, {}) (grant to {})",
            grant.floor,
            grant.ceiling_max,
            grant.holder
        );
        if let Some((&lo, &hi)) = self.ids.range(..first + count).next_back() {
            assert!(
                hi <= first,
                "duplicate IDs: {who}'s run {first}..{} (ts {ts}, generation {generation}) overlaps the issued run {lo}..{hi}",
                first + count
            );
        }
        self.ids.insert(first, first + count);
        self.totals.ids += count;
        for w in a.worker..=b.worker {
            assert!(
                grant.workers.contains(w),
                "{who} issued for worker {w} outside generation {generation}'s range {}+{}",
                grant.workers.first,
                grant.workers.count
            );
            for (&newer, seen) in self.grants.range(generation + 1..) {
                if seen.layout_generation == lg && seen.workers.contains(w) {
                    assert!(
                        ts <= seen.floor,
                        "worker {w}: {who} issued ts {ts} under generation {generation}, above the floor {} of newer generation {newer} (held by {})",
                        seen.floor,
                        seen.holder
                    );
                }
            }
            let gens = self.issued.entry((lg, w)).or_default();
            for (&gen, &(lo, hi)) in gens.iter() {
                if gen < generation {
                    assert!(
                        hi < ts,
                        "worker {w}: {who} issued ts {ts} under generation {generation}, at or below ts {hi} of older generation {gen}"
                    );
                } else if gen > generation {
                    assert!(
                        lo > ts,
                        "worker {w}: {who} issued ts {ts} under generation {generation}, at or above ts {lo} of newer generation {gen}"
                    );
                }
            }
            let e = gens.entry(generation).or_insert((ts, ts));
            e.0 = e.0.min(ts);
            e.1 = e.1.max(ts);
        }
    }

    // ---- keeper operations ----

    /// Starts a keeper operation of `p` (which must have none in flight).
    fn start_op(&mut self, p: usize, kind: OpKind) {
        let proc_ = &mut self.processes[p];
        debug_assert!(proc_.op.is_none() && proc_.state == State::Running);
        let member = Arc::clone(&proc_.member);
        let fut: Pin<Box<dyn Future<Output = Outcome>>> = match kind {
            OpKind::Acquire => {
                Box::pin(async move { Outcome::Acquired(member.keeper().acquire().await) })
            }
            OpKind::Renew | OpKind::Idle => Box::pin(async move {
                member.keeper().renew_once().await;
                Outcome::Renewed
            }),
            OpKind::Release => {
                // Node::shutdown: the shards stop, then the lease is released at what they
                // issued. Now and then a shard "panicked" and reports nothing.
                let mut exits: Vec<Option<IssuerExit>> =
                    proc_.shards.iter().map(|s| Some(s.gen.exit())).collect();
                if self.rng.chance(5) {
                    exits[0] = None;
                }
                if self.mutant == Mutant::ReleaseBelowLastIssued {
                    for e in exits.iter_mut().flatten() {
                        if let Some(last) = e.last_issued.as_mut() {
                            last.timestamp = last.timestamp.saturating_sub(1);
                        }
                    }
                }
                proc_.shards.clear();
                proc_.state = State::Stopping;
                Box::pin(async move { Outcome::Released(member.leave(&exits).await) })
            }
        };
        proc_.link.start_op(kind);
        proc_.op = Some(InFlight { kind, fut });
        let label = proc_.label();
        self.note(|| format!("{label} starts {kind:?}"));
    }

    /// Polls `p`'s operation once; true if it is suspended.
    fn poll_op(&mut self, p: usize) -> bool {
        let rt = &self.rt;
        let Some(op) = self.processes[p].op.as_mut() else {
            return false;
        };
        let poll = {
            let _enter = rt.enter();
            op.fut
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
        };
        let kind = op.kind;
        match poll {
            Poll::Pending => {
                self.observe(p);
                true
            }
            Poll::Ready(outcome) => {
                let proc_ = &mut self.processes[p];
                proc_.op = None;
                proc_.link.start_op(OpKind::Idle);
                self.finish(p, kind, outcome);
                false
            }
        }
    }

    fn finish(&mut self, p: usize, kind: OpKind, outcome: Outcome) {
        self.observe(p);
        let label = self.processes[p].label();
        match outcome {
            Outcome::Acquired(r) => {
                if let Err(e @ LeaseError::Corrupt { .. }) = &r {
                    panic!("{label}: an acquisition found the records corrupt: {e}");
                }
                let r = r.map(|v| v.grant.generation);
                self.note(|| format!("{label} {kind:?} done: {r:?}"));
            }
            Outcome::Renewed => {
                let view = self.processes[p].member.lease().current();
                let state = view.map(|v| (v.grant.generation, v.ceiling.get()));
                self.note(|| format!("{label} {kind:?} done: holds {state:?}"));
            }
            Outcome::Released(r) => {
                self.note(|| format!("{label} released: {r:?}"));
                self.totals.releases += 1;
                let proc_ = &mut self.processes[p];
                proc_.state = State::Gone;
                let (name, offset) = (proc_.name, proc_.offset);
                self.spawn(name, offset);
            }
        }
    }

    /// Resumes (or runs) `p`'s operation; whenever it is suspended, maybe runs a rival, and
    /// maybe leaves it suspended for a later step.
    fn drive(&mut self, p: usize, depth: u32) {
        while self.poll_op(p) {
            let label = self.processes[p].label();
            let at = *self.processes[p].link.suspended_at.lock().unwrap();
            self.note(|| format!("{label} suspended {at}"));
            if depth < 3 && self.rng.chance(70) {
                self.rival(p, depth + 1);
            }
            if self.rng.chance(40) {
                return;
            }
        }
    }

    /// Runs an operation of another process while `victim`'s is suspended. The PRNG picks the
    /// rival's kind, leaning towards the kind that can conflict with the victim's: a renewal or
    /// release against an acquisition, an acquisition against a renewal or release. Renewals
    /// lean towards holders whose lease has run out on their own clock (a process that was
    /// cut off or paused and comes back), whose ranges an acquirer may be taking.
    fn rival(&mut self, victim: usize, depth: u32) {
        let victim_acquires = self.processes[victim]
            .op
            .as_ref()
            .is_some_and(|op| op.kind == OpKind::Acquire);
        let roll = self.rng.below(100);
        let kind = match (victim_acquires, roll) {
            (true, 0..=59) | (false, 60..=84) => OpKind::Renew,
            (true, 60..=79) | (false, 85..=99) => OpKind::Release,
            _ => OpKind::Acquire,
        };
        let candidates: Vec<usize> = (0..self.processes.len())
            .filter(|&q| {
                let proc_ = &self.processes[q];
                q != victim
                    && proc_.state == State::Running
                    && proc_.op.is_none()
                    && match kind {
                        OpKind::Acquire => proc_.member.lease().current().is_none(),
                        _ => proc_.member.lease().current().is_some(),
                    }
            })
            .collect();
        let expired: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&q| {
                let proc_ = &self.processes[q];
                proc_.member.lease().time_left_ms(proc_.clock.wall_ms()) == 0
            })
            .collect();
        let q = if kind == OpKind::Renew && !expired.is_empty() && self.rng.chance(50) {
            self.rng.pick(&expired)
        } else {
            self.rng.pick(&candidates)
        };
        let Some(q) = q else {
            return;
        };
        self.totals.rivals[kind as usize] += 1;
        self.start_op(q, kind);
        self.drive(q, depth);
    }

    /// A keeper round of `p`: resumes its operation in flight, or starts `renew_once` (which
    /// acquires if the process holds nothing).
    fn keeper_tick(&mut self, p: usize) {
        if self.processes[p].op.is_none() {
            if self.processes[p].state != State::Running {
                return;
            }
            let kind = if self.processes[p].holds() {
                OpKind::Renew
            } else {
                OpKind::Acquire
            };
            let proc_ = &mut self.processes[p];
            let member = Arc::clone(&proc_.member);
            proc_.link.start_op(kind);
            proc_.op = Some(InFlight {
                kind,
                fut: Box::pin(async move {
                    member.keeper().renew_once().await;
                    Outcome::Renewed
                }),
            });
            let label = proc_.label();
            self.note(|| format!("{label} renew_once ({kind:?})"));
        }
        self.drive(p, 0);
    }

    fn shutdown(&mut self, p: usize) {
        let proc_ = &self.processes[p];
        if proc_.state != State::Running {
            return;
        }
        if proc_.op.is_some() {
            // The keeper's round in progress finishes before the node stops.
            self.drive(p, 0);
            return;
        }
        self.start_op(p, OpKind::Release);
        self.drive(p, 0);
    }

    // ---- shards ----

    /// A client asks a shard of `p` for IDs, through its connection.
    fn issue(&mut self, p: usize) {
        if self.processes[p].state != State::Running {
            return;
        }
        self.observe(p);
        let s = self.rng.below(self.processes[p].shards.len() as u64) as usize;
        let n = if self.rng.chance(5) {
            1 + self.rng.below(6_000)
        } else {
            1 + self.rng.below(3)
        };
        let reconnect = self.rng.chance(10);
        let proc_ = &mut self.processes[p];
        let mono_before = proc_.clock.mono_ns();
        let shard = &mut proc_.shards[s];
        if reconnect || shard.announced.is_none() {
            shard.announced = Some(shard.gen.announce());
        }
        let announced = shard.announced.expect("announced");
        let mut runs = Vec::new();
        let result = shard
            .gen
            .issue_blocking(announced, n, |first, count| runs.push((first, count)));
        if matches!(result, Err(IssueError::RangeChanged)) {
            shard.announced = None;
        }
        let generation = shard.stats.generation.load(Ordering::Relaxed);
        // The generator may have slept on the process's clock: that much time passed.
        let waited_ns = proc_.clock.mono_ns() - mono_before;
        self.totals.issue_calls += 1;
        for (first, count) in runs {
            self.record_run(p, generation, first, count);
        }
        if waited_ns > 0 {
            self.advance_but(waited_ns.div_ceil(1_000_000), Some((p, waited_ns)));
        }
    }

    // ---- the world ----

    fn heal(&mut self) {
        if self.down_for > 0 {
            self.down_for -= 1;
            if self.down_for == 0 {
                self.store.set_down(false);
            }
        }
        for proc_ in &mut self.processes {
            if proc_.cut_for > 0 {
                proc_.cut_for -= 1;
                if proc_.cut_for == 0 {
                    proc_.link.cut.store(false, Ordering::Relaxed);
                }
            }
        }
    }

    fn step(&mut self) {
        self.step_no += 1;
        self.heal();
        let alive = self.alive();
        let Some(mut p) = self.rng.pick(&alive) else {
            self.spawn(0, 0);
            return;
        };
        let action = self.rng.below(100);
        if (18..=67).contains(&action) {
            // Renewing and issuing are what holders do: aim them at holders, mostly.
            let holders: Vec<usize> = alive
                .iter()
                .copied()
                .filter(|&i| self.processes[i].holds())
                .collect();
            if !holders.is_empty() && self.rng.chance(80) {
                p = self.rng.pick(&holders).expect("not empty");
            }
        }
        match action {
            0..=17 => {
                let ms = self.rng.below(TTL_MS / 2);
                self.advance(ms);
            }
            18..=37 => self.keeper_tick(p),
            38..=67 => self.issue(p),
            68..=69 => self.shutdown(p),
            70..=71 => {
                // Crash and restart: a new process under the same name starts at once. The
                // old one either died (with whatever it had in flight) or keeps running as a
                // zombie (a paused VM, say).
                let (name, offset) = (self.processes[p].name, self.processes[p].offset);
                let label = self.processes[p].label();
                if self.rng.chance(50) || self.running() >= MAX_RUNNING {
                    let proc_ = &mut self.processes[p];
                    proc_.state = State::Gone;
                    proc_.op = None;
                    proc_.shards.clear();
                    self.note(|| format!("{label} crashed"));
                } else {
                    self.note(|| format!("{label} lives on as a zombie"));
                }
                if self.running() < MAX_RUNNING {
                    self.spawn(name, offset);
                }
            }
            72..=75 => {
                // Clock jumps: small or large, either way.
                let span = if self.rng.chance(50) { 50 } else { 4 * TTL_MS };
                let jump = self.rng.below(2 * span) as i64 - span as i64;
                self.processes[p].offset += jump;
                self.sync_clock(p);
            }
            76..=77 => {
                // Clock runs fast or slow.
                self.processes[p].drift_per_s = self.rng.below(401) as i64 - 200;
            }
            78..=80 => {
                // A partition between this process and the store, for a while.
                let steps = 1 + self.rng.below(40) as u32;
                let proc_ = &mut self.processes[p];
                proc_.cut_for = steps;
                proc_.link.cut.store(true, Ordering::Relaxed);
            }
            81..=84 if self.store.pending_faults() == 0 => {
                let fault = match self.rng.below(3) {
                    0 => Fault::Unavailable,
                    1 => Fault::UnknownApplied,
                    _ => Fault::UnknownLost,
                };
                self.store.inject(fault);
            }
            85..=86 => {
                // The whole store is down for a while.
                self.down_for = 1 + self.rng.below(30) as u32;
                self.store.set_down(true);
            }
            87..=92 => {
                // Some suspended operation resumes.
                let suspended: Vec<usize> = alive
                    .iter()
                    .copied()
                    .filter(|&i| self.processes[i].op.is_some())
                    .collect();
                if let Some(q) = self.rng.pick(&suspended) {
                    self.drive(q, 0);
                }
            }
            93 => self.delete_unused_record(),
            94 => self.schedule_successor(),
            _ => {
                // A quiet spell: time passes with nobody renewing.
                let ms = TTL_MS + self.rng.below(3 * TTL_MS);
                self.advance(ms);
            }
        }
    }

    fn finish_totals(&mut self) -> Totals {
        let mut t = self.totals;
        for (k, n) in self.sched.suspensions.iter().enumerate() {
            t.suspensions[k] = n.load(Ordering::Relaxed);
        }
        t.conflicts = self.sched.conflicts.load(Ordering::Relaxed);
        t.merges = self.sched.merges.load(Ordering::Relaxed);
        t.lost = self
            .processes
            .iter()
            .map(|p| p.member.lease().stats.lost.load(Ordering::Relaxed))
            .sum();
        t
    }
}

/// How a seed failed: the step, the message, the last events.
struct Failure {
    seed: u64,
    step: u64,
    message: String,
    trace: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed at step {}: {}",
            self.seed, self.step, self.message
        )?;
        writeln!(f, "last events:")?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn steps() -> u64 {
    env_u64("IDGEN_SIM_STEPS").unwrap_or(1_000)
}

/// Chance (percent) that a store operation suspends its keeper operation.
fn suspend_percent() -> u64 {
    env_u64("IDGEN_SIM_SUSPEND").unwrap_or(25).min(100)
}

/// Runs one seed; `suspend_percent` 0 turns interleaving off.
fn run_seed(
    seed: u64,
    mutant: Mutant,
    steps: u64,
    suspend_percent: u64,
) -> Result<Totals, Failure> {
    let mut sim = Sim::new(seed, mutant);
    sim.sched
        .suspend_percent
        .store(suspend_percent, Ordering::Relaxed);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..steps {
            sim.step();
            sim.check_records();
        }
    }));
    match result {
        Ok(()) => Ok(sim.finish_totals()),
        Err(e) => Err(Failure {
            seed,
            step: sim.step_no,
            message: e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
            trace: sim.trace.iter().cloned().collect(),
        }),
    }
}

/// The first seed in `seeds` that fails.
fn first_failure(
    mutant: Mutant,
    seeds: std::ops::Range<u64>,
    suspend_percent: u64,
) -> Option<Failure> {
    seeds
        .into_iter()
        .find_map(|seed| run_seed(seed, mutant, steps(), suspend_percent).err())
}

#[test]
fn fenced_leases_never_overlap_across_seeds() {
    let mutant = Mutant::from_env();
    let seeds = match env_u64("IDGEN_SIM_SEED") {
        Some(s) => s..s + 1,
        None => 0..env_u64("IDGEN_SIM_SEEDS").unwrap_or(200),
    };
    let n = seeds.end - seeds.start;
    let mut totals = Totals::default();
    for seed in seeds {
        match run_seed(seed, mutant, steps(), suspend_percent()) {
            Ok(t) => totals += t,
            Err(failure) => panic!("{failure}(mutant: {mutant:?})"),
        }
    }
    eprintln!("simulation: {n} seeds × {} steps: {totals:?}", steps());
    // The simulation must exercise what it claims: reuse of ranges, issuing, interleaved
    // transactions that conflict, lost leases, releases.
    if n >= 20 {
        assert!(totals.grants > n * 5, "only {} grants", totals.grants);
        assert!(
            totals.issue_calls > n * 100,
            "only {} issues",
            totals.issue_calls
        );
        // Acquisitions, renewals and releases are each suspended between their reads and
        // their commit, and each run as rivals.
        for kind in [OpKind::Acquire, OpKind::Renew, OpKind::Release] {
            let k = kind as usize;
            assert!(totals.suspensions[k] > n * 3, "{kind:?}: {totals:?}");
            assert!(totals.rivals[k] > n * 3, "{kind:?}: {totals:?}");
        }
        assert!(totals.conflicts > n, "only {} conflicts", totals.conflicts);
        assert!(totals.lost > n / 2, "only {} lost leases", totals.lost);
        assert!(totals.releases > n * 2, "only {} releases", totals.releases);
        // Windows over more records than a transaction takes, and gaps inside them.
        assert!(totals.merges > n, "only {} merges", totals.merges);
        assert!(totals.gaps > n / 4, "only {} gaps made", totals.gaps);
        // Layout switches, and grants in the successors' worker spaces.
        assert!(totals.switches > n / 2, "only {} switches", totals.switches);
        assert!(
            totals.later_grants > n,
            "only {} grants after a switch",
            totals.later_grants
        );
    }
}

fn assert_caught(mutant: Mutant) {
    let limit = 300;
    match first_failure(mutant, 0..limit, 25) {
        Some(failure) => eprintln!("{mutant:?} caught: {failure}"),
        None => panic!("mutant {mutant:?} survived {limit} seeds"),
    }
}

/// A renewal whose reads are not checked at commit can overwrite the records of a grant made
/// between its reads and its commit, and raise its ceiling over the new holder's interval.
#[test]
fn the_simulation_catches_a_renewal_without_conflict_checks() {
    assert_caught(Mutant::RenewUnchecked);
}

/// An acquisition whose re-read of the chosen records is not checked can take a range whose
/// holder renewed in between, with a floor below the holder's new ceiling.
#[test]
fn the_simulation_catches_an_acquisition_rereading_without_checks() {
    assert_caught(Mutant::AcquireRereadUnchecked);
}

/// A release below the last issued timestamp hands the next holder a floor below it.
#[test]
fn the_simulation_catches_a_release_below_the_last_issued_timestamp() {
    assert_caught(Mutant::ReleaseBelowLastIssued);
}

/// Without interleaving, nothing can land between a transaction's reads and its commit, so the
/// conflict-check mutants go unseen: the interleaving is what catches them.
#[test]
fn without_interleaving_the_conflict_check_mutants_go_unseen() {
    for mutant in [Mutant::RenewUnchecked, Mutant::AcquireRereadUnchecked] {
        if let Some(failure) = first_failure(mutant, 0..20, 0) {
            panic!("{mutant:?} caught without interleaving: {failure}");
        }
    }
}

/// A seed replays exactly: same history, same counters.
#[test]
fn a_seed_replays_exactly() {
    let run = |seed| {
        let mut sim = Sim::new(seed, Mutant::None);
        for _ in 0..400 {
            sim.step();
        }
        (sim.finish_totals(), sim.trace.clone(), sim.ids.clone())
    };
    assert!(run(3) == run(3), "seed 3 did not replay");
}

/// The same invariant checker must catch an unsafe lease: a grant whose floor ignores the
/// previous holder (here, forged by rewriting the stored lease_end downwards).
#[test]
#[should_panic(expected = "floor below ts")]
fn the_simulation_catches_a_broken_floor() {
    let mut sim = Sim::new(7, Mutant::None);
    sim.sched.suspend_percent.store(0, Ordering::Relaxed);
    sim.start_op(0, OpKind::Acquire);
    sim.drive(0, 0);
    let g = sim.processes[0].member.lease().current().unwrap().grant;
    sim.advance(10);
    for _ in 0..100 {
        if sim.totals.ids > 0 {
            break;
        }
        sim.issue(0);
    }
    assert!(sim.totals.ids > 0, "process 0 issued nothing");
    // Forge: the records say the lease ended long ago and was released, and (so that no
    // never-used range is preferred) that the whole worker space was.
    let leases = Leases::new(
        sim.store.as_ref(),
        sim.layout,
        LeaseConfig::new("sim", 2),
        Owner::this_process(Some("forger".into()), 0),
    );
    let recs = ready(leases.ranges()).unwrap();
    let mut writes: Vec<Write> = recs
        .iter()
        .map(|(id, _)| Write::Delete {
            key: leases.worker_key(*id),
        })
        .collect();
    let (first, rec) = &recs[0];
    assert_eq!(*first, 0, "process 0's record comes first");
    let whole = WorkerRecord {
        lease_end: 0,
        state: WorkerState::Released,
        count: sim.layout.worker_count(),
        ..rec.clone()
    };
    writes.push(Write::Put {
        key: leases.worker_key(0),
        value: serde_json::to_vec(&whole).unwrap(),
    });
    ready(sim.store.commit(&[], &writes)).unwrap();
    drop(leases);
    // Process 1 now takes the lowest "free" range, which is process 0's: the checker must
    // refuse the grant's floor.
    assert_eq!(g.workers.first, 0);
    sim.start_op(1, OpKind::Acquire);
    sim.drive(1, 0);
}

/// How often each mutant is caught, for tuning the simulation's weights:
/// `cargo test -p idgen-core --lib member::sim::mutant_detection_rates -- --ignored --nocapture`.
#[test]
#[ignore]
fn mutant_detection_rates() {
    let seeds = env_u64("IDGEN_SIM_SEEDS").unwrap_or(300);
    for mutant in [
        Mutant::RenewUnchecked,
        Mutant::AcquireRereadUnchecked,
        Mutant::ReleaseBelowLastIssued,
    ] {
        let failures: Vec<(u64, u64)> = (0..seeds)
            .filter_map(|seed| run_seed(seed, mutant, steps(), 25).err())
            .map(|f| (f.seed, f.step))
            .collect();
        eprintln!(
            "{mutant:?}: {} of {seeds} seeds fail; first: {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
    }
}
