//! Worker-ID leases, fenced by ID time. Written once, over any [`KvStore`].
//!
//! A lease grants a contiguous range of worker IDs **and an interval of ID time**: its holder
//! issues only timestamps strictly above its *floor* (the previous holder's `lease_end`) and
//! strictly below its *ceiling* (its own `lease_end`, moved forward by each renewal). Two
//! holders of one worker ID therefore use disjoint, ordered timestamp intervals whatever their
//! clocks say; clocks decide availability, never uniqueness. `docs/ARCHITECTURE.md` walks
//! through why, step by step.
//!
//! ## Keys (under `idgen/<namespace>/`)
//!
//! | key | value (JSON) |
//! |---|---|
//! | `cluster` | [`ClusterRecord`]: the layout, written once by the first node |
//! | `generation` | the last generation number granted (a counter) |
//! | `workers/<first>` | [`WorkerRecord`]: the worker IDs `first .. first + count`: state, owner, generation, `lease_end` |
//! | `layouts/<g>/workers/<first>` | the same, for layout generation `g` ≥ 1 (its own worker space and ID time) |
//! | `clocks/<instance>` | a node's clock (`crate::drift`); on etcd it expires when the node stops publishing |
//!
//! ## Range records
//!
//! A worker record covers a *range* of worker IDs (`count`, 1 in records written before
//! ranges), and records never overlap; a worker ID with no record has never been used. A grant
//! writes one record for its whole range, so a renewal or a release reads and writes that one
//! record whatever the range's size. An acquisition reads every record overlapping the window
//! it chose (checked), takes the largest `lease_end` as its floor, deletes them and writes back
//! the parts that stick out of the window (same state, owner, generation and `lease_end`, fewer
//! worker IDs) beside its own record. A transaction touches at most [`MAX_RECORDS_PER_TXN`]
//! records (etcd's `--max-txn-ops` is 128 by default); when a window overlaps more, runs of them
//! are first merged into one released record each, with `lease_end` their maximum (raising a
//! `lease_end` only delays reuse), in transactions of the same bound.
//!
//! Every change to *which* records exist (a grant, a merge) also reads and bumps `generation`,
//! read before the records are scanned: two such changes cannot both commit from one state,
//! and one that creates a record inside another's window (where there was no key to check)
//! makes the other's commit fail. A merge runs in transactions of its own after the scan, so
//! each commits only if the counter still reads what it read before that scan (plus the
//! merge's own earlier runs): a grant that landed in a never-used gap of its run meanwhile
//! makes it choose again instead of overlaying the new record. Renewals and releases only
//! rewrite their own record.
//!
//! ## Unknown outcomes
//!
//! A grant whose commit applied but whose answer was lost leaves a record held by this
//! instance that it does not know it holds. An acquirer treats its own held records as
//! grantable (it adopts them when nothing better is free), and every grant releases the other
//! records its instance holds, at their `lease_end` (nothing was issued under them), in the
//! same transaction: no unknown outcome leaks worker IDs for the life of the process.
//!
//! ## Invariants every operation keeps
//!
//! Numbered as in `docs/ARCHITECTURE.md`, which proves them and says where each is asserted.
//!
//! 1. A stored `lease_end` is at least every timestamp any holder of those workers ever issued:
//!    a grant's floor is the largest stored `lease_end` of every record overlapping its range
//!    and its own `lease_end` is at least the floor; renewals and merges only move it forward
//!    (a trimmed remainder keeps it), and a release lowers it only to the releasing holder's
//!    true last-issued timestamp, after its shards have stopped.
//! 2. A holder raises its ceiling only to a `lease_end` whose commit it saw succeed.
//! 3. A renewal commits only if the range's record still carries the holder's generation,
//!    instance and width (one transaction, conditional on the record read); so does a release.
//!    Any grant or merge that takes one of its worker IDs deletes, overwrites or trims that
//!    record, so the holder finds its lease lost. Generations only increase.
//! 4. A grant or merge reads the generation counter before the records, commits conditional on
//!    both, and bumps the counter: two changes to which records exist cannot both commit from
//!    one state. A merge's transactions check that the counter is the one read before its
//!    scan.
//!
//! The code asserts each where it must hold (`assert!`, naming the invariant), on both sides of
//! the store: what an operation computes before its commit, and what the keeper receives and
//! publishes after it. What comes from the store is input: a record or counter that contradicts
//! them is an error ([`LeaseError::Corrupt`]), never a panic.
//!
//! ## Who counts as gone
//!
//! Another instance's held record is grantable only once `lease_end + safety` has passed on the
//! acquirer's clock **and**, where the store expires keys (etcd), the holder's clock key
//! (`clocks/<instance>`) is gone: etcd's clock, which every node shares, ran out its lease. So
//! a node whose clock runs far ahead cannot take live nodes' worker IDs. Stores that cannot
//! expire keys (embedded: one host; memory; FoundationDB) use the acquirer's clock alone.
//! Either way uniqueness rests on the fences, not on this rule.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use idgen_id::{Generation, Generations, Layout, LayoutError, WorkerRange};
use serde::{Deserialize, Serialize};

use crate::store::{Commit, Entry, KvStore, StoreError, Txn};

// The conformance suites are for tests only: this crate's, and the integration tests with the
// `conformance` feature.
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod keeper;

/// `idgen/<ns>/clocks/`: where nodes publish their clocks, one key per instance (written by
/// `crate::drift`; an acquirer reads it to tell a live holder from a gone one).
pub fn clocks_prefix(namespace: &str) -> String {
    format!("idgen/{namespace}/clocks/")
}

/// Default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Transaction attempts before giving up on contention.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
/// The version of the cluster's record formats a node writes when it creates a cluster (and
/// into worker records). 2: worker records cover ranges (`count`). A node upgrades a cluster of
/// version 1 (its one-worker records read as 1-wide ranges); binaries of version 1 refuse a
/// cluster of version 2, since they would read a range record as one worker ID.
pub const LAYOUT_VERSION: u32 = 2;
/// Version 3: the cluster record may hold a floor ([`ClusterRecord::min_id`]), which binaries
/// that read only version 2 would ignore, so they refuse a cluster of version 3. A cluster
/// moves to it only when an operator asks: `idgen store upgrade` ([`Leases::upgrade_records`]),
/// or setting a floor on a cluster that is already there; never because a node of this version
/// started, so a rollback to the previous version stays possible until then.
pub const FLOOR_VERSION: u32 = 3;
/// Version 4: the cluster record may schedule successor layouts
/// ([`ClusterRecord::successors`], layout generations), which binaries that read only version
/// 3 would ignore (and issue past the switch), so they refuse a cluster of version 4. As with
/// version 3, only `idgen store upgrade` moves a cluster there.
pub const GENERATIONS_VERSION: u32 = 4;
/// The newest record version this binary reads; a cluster of a newer one is refused.
pub const RECORD_VERSION_MAX: u32 = GENERATIONS_VERSION;
/// The shortest notice a successor layout is scheduled with: every node learns of it at its
/// next renewal (a third of its TTL) and must have time to.
pub const MIN_SWITCH_NOTICE: Duration = Duration::from_secs(5);
/// The most worker records one transaction reads and rewrites (etcd's default
/// `--max-txn-ops` is 128, for the compares and the writes each): a grant's compares are these
/// plus the cluster record and the generation counter, its writes these plus at most four.
pub const MAX_RECORDS_PER_TXN: usize = 64;
/// Merge rounds one acquisition may go through (each divides the records overlapping its
/// window by up to [`MAX_RECORDS_PER_TXN`]): enough for any worker space.
const MAX_MERGE_ROUNDS: u32 = 16;

/// Lease settings of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// One cluster = one namespace; several clusters can share a store.
    pub namespace: String,
    /// How far ahead of the clock a grant or renewal puts `lease_end`.
    pub ttl: Duration,
    /// How long after `lease_end` an unreleased worker ID stays reserved (default 2 × TTL).
    pub safety: Duration,
    /// Worker IDs the node asks for (shards × per-shard).
    pub workers: u64,
    /// Which part of the worker space to lease from: one region's worker IDs (the top worker
    /// bits), or the whole space. Recorded in the cluster record: every node of a namespace
    /// must agree.
    pub region: RegionScope,
    /// Transaction attempts on contention.
    pub max_attempts: u32,
    /// The most worker records one transaction reads and rewrites ([`MAX_RECORDS_PER_TXN`]
    /// unless a test lowers it to make merges common).
    pub max_records_per_txn: usize,
    /// The cluster must issue no ID at or below this (a cut-over from a database sequence):
    /// the cluster record's floor is raised to it if lower, which needs records of
    /// [`FLOOR_VERSION`]. Whatever this says, every grant obeys the floor the record holds.
    pub min_id: Option<u64>,
}

impl LeaseConfig {
    pub fn new(namespace: impl Into<String>, workers: u64) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            ttl: DEFAULT_TTL,
            safety: 2 * DEFAULT_TTL,
            workers,
            region: RegionScope::Global,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_records_per_txn: MAX_RECORDS_PER_TXN,
            min_id: None,
        }
    }
}

/// The part of the worker space a namespace's nodes lease from. A store (or namespace) per
/// region records the region it serves, so a node configured for another region, or for none,
/// is refused instead of leasing the same worker IDs as that region's own store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionScope {
    /// The whole worker space: a layout without region bits, or one global pool over all
    /// regions in one store (`--region global`).
    Global,
    /// The worker IDs of one region.
    Region(u64),
}

impl RegionScope {
    /// The region, if the scope is one.
    pub fn region(self) -> Option<u64> {
        match self {
            RegionScope::Global => None,
            RegionScope::Region(r) => Some(r),
        }
    }
}

impl std::fmt::Display for RegionScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegionScope::Global => f.write_str("the whole worker space (global)"),
            RegionScope::Region(r) => write!(f, "region {r}"),
        }
    }
}

/// Who holds a lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The node's configured name (default: the host name).
    pub node_id: String,
    pub host: String,
    pub pid: u32,
    /// Wall-clock start time of the process, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Unique per process start: tells a restarted node from its previous life.
    pub instance: String,
}

impl Owner {
    /// The identity of this process.
    pub fn this_process(node_id: Option<String>, started_unix_ms: u64) -> Owner {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".to_string());
        let pid = std::process::id();
        let node_id = node_id.unwrap_or_else(|| host.clone());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Owner {
            instance: format!("{node_id}/{host}/{pid}/{started_unix_ms}.{nanos:09}"),
            node_id,
            host,
            pid,
            started_unix_ms,
        }
    }
}

/// The layout as stored in the cluster record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutRecord {
    pub epoch_ms: u64,
    pub timestamp_bits: u8,
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub region_bits: u8,
}

impl From<Layout> for LayoutRecord {
    fn from(l: Layout) -> Self {
        LayoutRecord {
            epoch_ms: l.epoch_ms(),
            timestamp_bits: l.timestamp_bits(),
            worker_bits: l.worker_bits(),
            sequence_bits: l.sequence_bits(),
            region_bits: l.region_bits(),
        }
    }
}

impl TryFrom<LayoutRecord> for Layout {
    type Error = LayoutError;
    fn try_from(r: LayoutRecord) -> Result<Self, LayoutError> {
        Layout::new(
            r.epoch_ms,
            r.timestamp_bits,
            r.worker_bits,
            r.sequence_bits,
            r.region_bits,
        )
    }
}

/// `idgen/<ns>/cluster`: written once, by the first node of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRecord {
    pub layout: LayoutRecord,
    pub layout_version: u32,
    pub created_unix_ms: u64,
    pub created_by: String,
    /// The part of the worker space this namespace serves. Absent in records written before it
    /// existed: the next node to check the record writes its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region_scope: Option<RegionScope>,
    /// The floor: no ID at or below it is ever issued, so every grant's floor is at least its
    /// timestamp. Set for a cut-over from a database sequence (its largest value) and by a
    /// restore fence (`idgen store restored`); only ever raised. Only in records of
    /// [`FLOOR_VERSION`] or newer, which binaries that would ignore it refuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_id: Option<u64>,
    /// Layout generations 1, 2, ... in order: each layout and the Unix ms it takes over from
    /// the one before (see [`idgen_id::Generations`]). Only in records of
    /// [`GENERATIONS_VERSION`] or newer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub successors: Vec<SuccessorRecord>,
}

/// A successor layout as the cluster record stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuccessorRecord {
    pub layout: LayoutRecord,
    /// When it takes over (Unix ms).
    pub switch_unix_ms: u64,
}

/// Why `min_id` cannot be a cluster's floor under `layout`, if it cannot: it must be one of the
/// layout's IDs ([`Layout::check_id`]) whose time the layout can still pass (a floor at its
/// last millisecond would leave nothing to issue).
pub fn check_min_id(m: u64, layout: &Layout) -> Result<(), String> {
    layout
        .check_id(m)
        .map_err(|e| format!("min_id {m} is not an ID of the layout: {e}"))?;
    if layout.decompose(m).timestamp >= layout.max_timestamp() {
        return Err(format!(
            "min_id {m} lies at the layout's last millisecond: no ID is left above it"
        ));
    }
    Ok(())
}

impl ClusterRecord {
    /// The grant floor the cluster's `min_id` imposes (ID-time ms) on a generation of the
    /// cluster: IDs whose timestamp is above the floor ID's are above it, whatever their
    /// worker and sequence. A floor below the generation's first ID does not concern it.
    pub fn floor_timestamp(&self, generation: &Generation) -> u64 {
        self.min_id
            .filter(|&m| m >= generation.first_id)
            .map_or(0, |m| generation.layout.decompose(m).timestamp)
    }

    /// The cluster's layout generations: its layout, then every successor.
    pub fn generations(&self) -> Result<Generations, String> {
        let base = Layout::try_from(self.layout).map_err(|e| format!("invalid layout: {e}"))?;
        let mut gens = Generations::new(base);
        for (i, s) in self.successors.iter().enumerate() {
            let layout = Layout::try_from(s.layout)
                .map_err(|e| format!("invalid layout of generation {}: {e}", i + 1))?;
            gens = gens
                .with_successor(layout, s.switch_unix_ms)
                .map_err(|e| format!("generation {}: {e}", i + 1))?;
        }
        Ok(gens)
    }
}

/// Each generation's layout, `; `-separated, for messages.
pub fn describe_generations(gens: &Generations) -> String {
    gens.all()
        .iter()
        .map(|g| match g.switch_unix_ms {
            None => g.layout.to_string(),
            Some(s) => format!("generation {} from {s} ms: {}", g.index, g.layout),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether a worker ID is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    Held,
    Released,
}

/// `idgen/<ns>/workers/<first>`: the worker IDs `first .. first + count`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    pub state: WorkerState,
    pub owner: Owner,
    /// The grant (or merge) this record belongs to (increases on every grant in the cluster).
    pub generation: u64,
    /// ID-time ms: no holder of these worker IDs has issued, or will issue, a timestamp above
    /// this value under this grant; the next holder issues only above it.
    pub lease_end: u64,
    /// Worker IDs the record covers, from the one its key names. Records written before ranges
    /// have none: one.
    #[serde(default = "one_worker")]
    pub count: u64,
    pub layout_version: u32,
    /// The writer's wall clock when it wrote this record (ms since the Unix epoch).
    pub written_unix_ms: u64,
}

fn one_worker() -> u64 {
    1
}

/// A granted lease, as the lease operations take and return it: its terms and the `lease_end`
/// last committed for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The granted worker IDs.
    pub workers: WorkerRange,
    pub generation: u64,
    /// Issue only timestamps strictly above this (ID-time ms).
    pub floor: u64,
    /// Issue only timestamps strictly below this (ID-time ms); renewals raise it.
    pub lease_end: u64,
    /// The layout generation whose worker space and ID time the grant is in (0 until the
    /// cluster schedules a successor layout).
    pub layout_generation: u32,
}

impl Grant {
    /// What stays fixed for the grant's whole life.
    pub fn terms(&self) -> GrantTerms {
        GrantTerms {
            workers: self.workers,
            generation: self.generation,
            floor: self.floor,
            layout_generation: self.layout_generation,
        }
    }
}

/// What a grant fixes for its whole life: the worker range, the generation and the floor. Its
/// lease end moves with every renewal and lives in one place on a node, the lease keeper
/// (whose [`Ceiling`](crate::generator::Ceiling) the shards obey).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantTerms {
    /// The granted worker IDs.
    pub workers: WorkerRange,
    pub generation: u64,
    /// Issue only timestamps strictly above this (ID-time ms).
    pub floor: u64,
    /// The layout generation the grant is in.
    pub layout_generation: u32,
}

/// Why a lease operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    #[error("layout mismatch: the cluster stores {stored}, this node is configured with {ours}")]
    LayoutMismatch { stored: String, ours: String },
    #[error("region mismatch: this store's namespace serves {stored}, this node is configured for {ours}; every node of a namespace leases from one part of the worker space (a store per region, each with its own --region; or --region global everywhere with one store)")]
    RegionMismatch {
        stored: RegionScope,
        ours: RegionScope,
    },
    #[error("no free range of {wanted} worker IDs{}: {free} free{}", region_text(*.region), expiring_text(*.expiring))]
    NoFreeRange {
        wanted: u64,
        region: Option<u64>,
        free: u64,
        /// Held worker IDs that free up by themselves after the safety period: their lease
        /// has expired, or an earlier life of this node (same node ID, another instance) holds
        /// them, whose lease runs out now that it is gone.
        expiring: u64,
    },
    #[error("invalid lease request: {0}")]
    BadRequest(String),
    #[error("lease lost: {0}")]
    Lost(String),
    #[error("gave up after {attempts} conflicting transaction attempts")]
    Contention { attempts: u32 },
    #[error("corrupt record at {key}: {detail}")]
    Corrupt { key: String, detail: String },
    /// The cluster's records are of a version that cannot hold what was asked for.
    #[error("{0}")]
    RecordVersion(String),
    /// The operation was asked for in a layout generation the cluster record does not
    /// describe as asked (a successor was scheduled, or its switch has passed): these are the
    /// cluster's generations now.
    #[error("the cluster's layouts changed: {}", describe_generations(.0))]
    Rescheduled(Box<Generations>),
    /// Nothing is left to issue in this layout generation here (its successor takes over).
    #[error("layout generation {0} is over: its successor takes over")]
    GenerationOver(u32),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn expiring_text(expiring: u64) -> String {
    if expiring == 0 {
        String::new()
    } else {
        format!(" ({expiring} more free up when their leases pass the safety period)")
    }
}

fn region_text(region: Option<u64>) -> String {
    region
        .map(|r| format!(" in region {r}"))
        .unwrap_or_default()
}

/// What the cluster record says about a lease in one layout generation.
#[derive(Debug)]
struct ClusterTerms {
    /// No grant issues at or below this (ID-time ms): the cluster's floor, the generation's
    /// first timestamp less one.
    floor: u64,
    /// No grant's `lease_end` goes above this (the timestamp before the successor's switch).
    last: Option<u64>,
    /// The generation in effect at the operation's clock.
    in_effect: u32,
    generations: Generations,
}

/// What a release found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The range is marked free with `lease_end` = the true last-issued timestamp.
    Freed { lease_end: u64 },
    /// The lease was no longer ours: nothing to release.
    AlreadyLost,
}

impl Released {
    /// The outcome's name in logs: `freed` or `already_lost`.
    pub fn name(&self) -> &'static str {
        match self {
            Released::Freed { .. } => "freed",
            Released::AlreadyLost => "already_lost",
        }
    }

    /// The `lease_end` the release wrote, if it freed the range.
    pub fn lease_end(&self) -> Option<u64> {
        match self {
            Released::Freed { lease_end } => Some(*lease_end),
            Released::AlreadyLost => None,
        }
    }
}

/// A summary of the worker space, for operators.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Worker IDs that could be granted now (in the node's region, if it has one).
    pub free: u64,
    /// Worker IDs held, with an unexpired or recently expired lease.
    pub held: u64,
    /// Size of the space looked at.
    pub total: u64,
}

/// The lease operations of one node. Every operation takes the node's wall clock reading
/// (`now_unix_ms`) explicitly, so the same code runs in production and in simulation.
pub struct Leases<'s> {
    store: &'s dyn KvStore,
    /// The layout of the generation this handle leases in.
    layout: Layout,
    /// That generation: its worker records, ID time and bounds.
    era: Generation,
    /// The layout the node is configured with: one of the cluster's generations'.
    configured: Layout,
    config: LeaseConfig,
    owner: Owner,
    prefix: String,
}

/// How a worker ID looks to an acquirer, best first: a window costs its worst worker ID, and
/// the cheapest window wins (the lowest among equals).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Avail {
    /// Never used: no record.
    Fresh,
    /// Released; nothing to wait for.
    Released,
    /// Held under an expired lease (past the safety period, and its holder's clock key gone
    /// where the store expires keys), or an orphan of this very process; nothing to wait for.
    Expired,
    /// Grantable, but its `lease_end` is still ahead of the acquirer's clock (it would wait):
    /// the smaller, the better.
    Ahead(u64),
    /// Held (or expired too recently, or its holder still publishes its clock): not grantable.
    Blocked,
}

/// Which holders are known to be alive: the instances whose clock key is present, where the
/// store expires keys; elsewhere nobody is known either way.
enum Liveness {
    Unknown,
    Publishing(HashSet<String>),
}

impl Liveness {
    fn alive(&self, instance: &str) -> bool {
        match self {
            Liveness::Unknown => false,
            Liveness::Publishing(set) => set.contains(instance),
        }
    }
}

/// One stored worker record, as a scan returned it.
struct Span {
    first: u64,
    /// One past its last worker ID.
    end: u64,
    entry: Entry,
    rec: WorkerRecord,
    avail: Avail,
}

/// The records overlapping an acquirer's search space, in worker order, as it sees them now.
struct View {
    spans: Vec<Span>,
    /// Which holders publish their clock (where the store expires keys).
    live: Liveness,
}

impl View {
    /// The search space `lo..hi` cut into segments (see [`segments`]).
    fn segments(&self, lo: u64, hi: u64) -> Vec<(u64, u64, Avail)> {
        segments(lo, hi, self.spans.iter().map(|s| (s.first, s.end, s.avail)))
    }

    /// The records overlapping `first..end`.
    fn overlapping(&self, first: u64, end: u64) -> &[Span] {
        let from = self.spans.partition_point(|s| s.end <= first);
        let to = self.spans.partition_point(|s| s.first < end);
        &self.spans[from..to.max(from)]
    }
}

impl<'s> Leases<'s> {
    /// The lease operations of a node configured with `layout`, in the cluster's layout
    /// generation 0 ([`in_generation`](Self::in_generation) picks another).
    pub fn new(store: &'s dyn KvStore, layout: Layout, config: LeaseConfig, owner: Owner) -> Self {
        let prefix = format!("idgen/{}/", config.namespace);
        Leases {
            store,
            layout,
            era: Generations::new(layout).all()[0],
            configured: layout,
            config,
            owner,
            prefix,
        }
    }

    /// The same operations in layout generation `era` (as the cluster record schedules it):
    /// its worker records, its layout's ID time, its first and last timestamps.
    pub fn in_generation(mut self, era: Generation) -> Self {
        self.layout = era.layout;
        self.era = era;
        self
    }

    /// The layout generation this handle leases in.
    pub fn generation(&self) -> &Generation {
        &self.era
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }
    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn key(&self, suffix: &str) -> Vec<u8> {
        format!("{}{}", self.prefix, suffix).into_bytes()
    }
    /// The key of the worker record whose range starts at worker ID `id`:
    /// `idgen/<namespace>/workers/<id>`, the ID in decimal, zero-padded to five digits.
    pub fn worker_key(&self, id: u64) -> Vec<u8> {
        let mut key = self.workers_prefix();
        key.extend_from_slice(format!("{id:05}").as_bytes());
        key
    }
    /// `idgen/<namespace>/workers/` in generation 0, `idgen/<namespace>/layouts/<g>/workers/`
    /// in generation `g` after it.
    fn workers_prefix(&self) -> Vec<u8> {
        match self.era.index {
            0 => self.key("workers/"),
            g => self.key(&format!("layouts/{g}/workers/")),
        }
    }

    fn id_time(&self, now_unix_ms: u64) -> u64 {
        now_unix_ms.saturating_sub(self.layout.epoch_ms())
    }

    fn ttl_ms(&self) -> u64 {
        duration_ms(self.config.ttl)
    }

    /// The most worker records one transaction touches: at least two, so a merge always has
    /// a run to fold.
    fn records_per_txn(&self) -> usize {
        self.config.max_records_per_txn.max(2)
    }

    /// The worker IDs a grant may come from: the node's region, or the whole space.
    fn search_space(&self) -> Result<WorkerRange, LeaseError> {
        match self.config.region {
            RegionScope::Region(r) => {
                if r >= self.layout.region_count() {
                    return Err(LeaseError::BadRequest(format!(
                        "region {r} does not exist: the layout has {} region bits ({} regions)",
                        self.layout.region_bits(),
                        self.layout.region_count()
                    )));
                }
                let size = self.layout.workers_per_region();
                Ok(WorkerRange::new(r * size, size))
            }
            RegionScope::Global => Ok(WorkerRange::new(0, self.layout.worker_count())),
        }
    }

    fn corrupt(key: &[u8], detail: impl std::fmt::Display) -> LeaseError {
        LeaseError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            detail: detail.to_string(),
        }
    }

    fn parse_worker(key: &[u8], raw: &[u8]) -> Result<WorkerRecord, LeaseError> {
        serde_json::from_slice(raw).map_err(|e| Self::corrupt(key, e))
    }

    fn worker_id_of(&self, key: &[u8]) -> Result<u64, LeaseError> {
        let prefix = self.workers_prefix();
        key.strip_prefix(prefix.as_slice())
            .and_then(|rest| std::str::from_utf8(rest).ok())
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| Self::corrupt(key, "not a worker key"))
    }

    fn avail(&self, rec: &WorkerRecord, now: u64, live: &Liveness) -> Avail {
        let grantable = match rec.state {
            WorkerState::Released => true,
            // Our own record from an acquisition whose outcome we did not learn.
            WorkerState::Held if rec.owner.instance == self.owner.instance => true,
            WorkerState::Held => {
                rec.lease_end
                    .saturating_add(duration_ms(self.config.safety))
                    < now
                    && !live.alive(&rec.owner.instance)
            }
        };
        if !grantable {
            Avail::Blocked
        } else if rec.lease_end >= now {
            Avail::Ahead(rec.lease_end)
        } else if rec.state == WorkerState::Released {
            Avail::Released
        } else {
            Avail::Expired
        }
    }

    /// Every worker record of the namespace, parsed and checked (each inside the layout, none
    /// overlapping another), in worker order.
    async fn read_records(&self) -> Result<Vec<(Entry, WorkerRecord)>, LeaseError> {
        let mut out = Vec::new();
        for e in self.store.scan(&self.workers_prefix()).await? {
            let first = self.worker_id_of(&e.key)?;
            let rec = Self::parse_worker(&e.key, &e.value)?;
            let inside = first
                .checked_add(rec.count)
                .is_some_and(|end| end <= self.layout.worker_count());
            if rec.count == 0 || !inside {
                return Err(Self::corrupt(
                    &e.key,
                    format!(
                        "{} worker IDs from {first} do not fit the layout's {}",
                        rec.count,
                        self.layout.worker_count()
                    ),
                ));
            }
            out.push((first, e, rec));
        }
        // Keys sort as text, worker IDs as numbers.
        out.sort_by_key(|(first, _, _)| *first);
        for pair in out.windows(2) {
            let ((a, ea, ra), (b, eb, rb)) = (&pair[0], &pair[1]);
            if a + ra.count > *b {
                // Both records, so an operator can tell which one is live (docs/OPERATIONS.md,
                // "Overlapping worker records", says how to repair it without deleting it).
                return Err(Self::corrupt(
                    &eb.key,
                    format!(
                        "workers {b}..{} ({}) overlap workers {a}..{} at {} ({})",
                        b + rb.count,
                        summary(rb),
                        a + ra.count,
                        String::from_utf8_lossy(&ea.key),
                        summary(ra)
                    ),
                ));
            }
        }
        Ok(out.into_iter().map(|(_, e, r)| (e, r)).collect())
    }

    /// The instances whose clock key is present, if the store expires keys. Only keys written
    /// to expire count (`"expiring": true`): an earlier version's key stays after a crash.
    async fn liveness(&self) -> Result<Liveness, LeaseError> {
        #[derive(Deserialize)]
        struct Clock {
            #[serde(default)]
            expiring: bool,
        }
        if !self.store.expires_keys() {
            return Ok(Liveness::Unknown);
        }
        let prefix = clocks_prefix(&self.config.namespace).into_bytes();
        let keys = self.store.scan(&prefix).await?;
        Ok(Liveness::Publishing(
            keys.iter()
                .filter(|e| serde_json::from_slice::<Clock>(&e.value).is_ok_and(|c| c.expiring))
                .filter_map(|e| e.key.strip_prefix(prefix.as_slice()))
                .map(|i| String::from_utf8_lossy(i).into_owned())
                .collect(),
        ))
    }

    /// The records overlapping `lo..hi` and how each looks to this node at `now` (ID time). A
    /// record that sticks out of the space (another scope's) is never touched.
    async fn view(&self, lo: u64, hi: u64, now: u64) -> Result<View, LeaseError> {
        let records = self.read_records().await?;
        let live = self.liveness().await?;
        let spans = records
            .into_iter()
            .filter_map(|(entry, rec)| {
                let first = self.worker_id_of(&entry.key).ok()?;
                let end = first + rec.count;
                if end <= lo || first >= hi {
                    return None;
                }
                let avail = if first < lo || end > hi {
                    Avail::Blocked
                } else {
                    self.avail(&rec, now, &live)
                };
                Some(Span {
                    first,
                    end,
                    entry,
                    rec,
                    avail,
                })
            })
            .collect();
        Ok(View { spans, live })
    }

    /// Why no window of `wanted` worker IDs could be chosen.
    fn no_free_range(&self, view: &View, lo: u64, hi: u64, now: u64, wanted: u64) -> LeaseError {
        let (mut blocked, mut expiring) = (0, 0);
        for s in view.spans.iter().filter(|s| s.avail == Avail::Blocked) {
            let width = s.end.min(hi) - s.first.max(lo);
            blocked += width;
            // Frees up by itself only if its holder is gone: a holder that still publishes its
            // clock keeps it (and releases what it holds by mistake at its next grant). An
            // earlier life of this node is gone once its clock key expires.
            let previous_life = s.rec.owner.node_id == self.owner.node_id
                && s.rec.owner.instance != self.owner.instance;
            let holder_alive = view.live.alive(&s.rec.owner.instance);
            if previous_life || (s.rec.lease_end < now && !holder_alive) {
                expiring += width;
            }
        }
        LeaseError::NoFreeRange {
            wanted,
            region: self.config.region.region(),
            free: (hi - lo) - blocked,
            expiring,
        }
    }

    /// Checks the cluster record (layout, region scope, record version), creating it if this
    /// is the first node, and raises its floor to `config.min_id` if that is higher. Runs
    /// inside `txn`. Returns the grant floor the record's floor imposes (ID-time ms).
    async fn check_cluster(
        &self,
        txn: &mut Txn<'_>,
        now_unix_ms: u64,
    ) -> Result<(ClusterRecord, Generations), LeaseError> {
        let key = self.key("cluster");
        let ours = LayoutRecord::from(self.configured);
        let scope = self.config.region;
        if let Some(m) = self.config.min_id {
            check_min_id(m, &self.configured).map_err(LeaseError::BadRequest)?;
        }
        let rec = match txn.get(&key).await? {
            Some(raw) => {
                let mut rec: ClusterRecord =
                    serde_json::from_slice(&raw).map_err(|e| Self::corrupt(&key, e))?;
                let known = rec.layout == ours || rec.successors.iter().any(|s| s.layout == ours);
                if !known || rec.layout_version == 0 || rec.layout_version > RECORD_VERSION_MAX {
                    let stored = match rec.generations() {
                        Ok(g) => describe_generations(&g),
                        Err(e) => format!("an invalid layout ({e})"),
                    };
                    return Err(LeaseError::LayoutMismatch {
                        stored: format!("{stored} (record version {})", rec.layout_version),
                        ours: format!(
                            "{} (record versions up to {RECORD_VERSION_MAX})",
                            self.configured
                        ),
                    });
                }
                if !rec.successors.is_empty() && rec.layout_version < GENERATIONS_VERSION {
                    // Binaries of that version would read the record and ignore the switch.
                    return Err(Self::corrupt(
                        &key,
                        format!(
                            "successor layouts in a record of version {}: they need version {GENERATIONS_VERSION}",
                            rec.layout_version
                        ),
                    ));
                }
                if rec.min_id.is_some() && rec.layout_version < FLOOR_VERSION {
                    // Binaries of that version would read the record and ignore the floor.
                    return Err(Self::corrupt(
                        &key,
                        format!(
                            "a floor (min_id) in a record of version {}: floors need version {FLOOR_VERSION}",
                            rec.layout_version
                        ),
                    ));
                }
                let mut upgrade = false;
                match rec.region_scope {
                    Some(stored) if stored != scope => {
                        return Err(LeaseError::RegionMismatch {
                            stored,
                            ours: scope,
                        })
                    }
                    Some(_) => {}
                    None => {
                        // A record from before scopes were recorded: record ours (the read
                        // above is checked, so concurrent nodes agree or one retries).
                        rec.region_scope = Some(scope);
                        upgrade = true;
                    }
                }
                if rec.layout_version < LAYOUT_VERSION {
                    // A cluster of one-worker records: from now on binaries that cannot read
                    // range records refuse it. Committed with (or before) the first range
                    // record this node writes.
                    rec.layout_version = LAYOUT_VERSION;
                    upgrade = true;
                }
                if let Some(m) = self.config.min_id.filter(|&m| rec.min_id < Some(m)) {
                    if rec.layout_version < FLOOR_VERSION {
                        return Err(LeaseError::RecordVersion(format!(
                            "min_id {m} needs the cluster's records at version {FLOOR_VERSION} (they are at {}, which the previous release also reads, so it would ignore the floor): once every node runs this release, run `idgen store upgrade`",
                            rec.layout_version
                        )));
                    }
                    rec.min_id = Some(m);
                    upgrade = true;
                }
                if upgrade {
                    txn.put(key.clone(), to_json(&rec));
                }
                rec
            }
            None => {
                // A new cluster: version 2 unless it starts with a floor, so that a binary of
                // the previous release can still join it (and a rollback stays possible).
                let rec = ClusterRecord {
                    layout: ours,
                    layout_version: if self.config.min_id.is_some() {
                        FLOOR_VERSION
                    } else {
                        LAYOUT_VERSION
                    },
                    created_unix_ms: now_unix_ms,
                    created_by: self.owner.instance.clone(),
                    region_scope: Some(scope),
                    min_id: self.config.min_id,
                    successors: Vec::new(),
                };
                txn.put(key.clone(), to_json(&rec));
                rec
            }
        };
        let gens = rec.generations().map_err(|e| Self::corrupt(&key, e))?;
        Ok((rec, gens))
    }

    /// What `rec` says about a lease in this handle's generation at `now_unix_ms`; the
    /// generations it describes if that generation is not the one asked for.
    fn era_terms(
        &self,
        rec: &ClusterRecord,
        gens: Generations,
        now_unix_ms: u64,
    ) -> Result<ClusterTerms, LeaseError> {
        let Some(era) = gens.get(self.era.index).filter(|g| **g == self.era) else {
            return Err(LeaseError::Rescheduled(Box::new(gens)));
        };
        Ok(ClusterTerms {
            floor: rec
                .floor_timestamp(era)
                .max(era.first_timestamp().saturating_sub(1)),
            last: gens.last_timestamp(era.index),
            in_effect: gens.at(now_unix_ms).index,
            generations: gens,
        })
    }

    /// Reads (or creates) the cluster record and checks it as an acquisition would (layout,
    /// region, version; raising its floor to `config.min_id`), for start-up checks and
    /// operator commands that do not acquire.
    pub async fn ensure_cluster(&self, now_unix_ms: u64) -> Result<(), LeaseError> {
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            self.check_cluster(&mut txn, now_unix_ms).await?;
            Ok(Attempt::Commit(txn, ()))
        })
        .await
    }

    /// Raises the cluster's records to [`RECORD_VERSION_MAX`], after which binaries that read
    /// only older versions refuse the cluster (`idgen store upgrade`: run it once every node runs this
    /// release). Returns the versions before and after; a cluster already there is left as it
    /// is. The layout is the record's own (this operation does not compare it with ours).
    pub async fn upgrade_records(&self) -> Result<(u32, u32), LeaseError> {
        let key = self.key("cluster");
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            let Some(raw) = txn.get(&key).await? else {
                return Err(LeaseError::BadRequest(format!(
                    "no cluster in namespace {:?}: nothing to upgrade (a new cluster is created at the version its first node writes)",
                    self.config.namespace
                )));
            };
            let mut rec: ClusterRecord =
                serde_json::from_slice(&raw).map_err(|e| Self::corrupt(&key, e))?;
            let before = rec.layout_version;
            if before == 0 || before > RECORD_VERSION_MAX {
                return Err(LeaseError::RecordVersion(format!(
                    "the cluster's records are at version {before}, which this release does not read (it reads 1 to {RECORD_VERSION_MAX})"
                )));
            }
            if before >= RECORD_VERSION_MAX {
                return Ok(Attempt::Return((before, before)));
            }
            rec.layout_version = RECORD_VERSION_MAX;
            txn.put(key.clone(), to_json(&rec));
            Ok(Attempt::Commit(txn, (before, RECORD_VERSION_MAX)))
        })
        .await
    }

    /// Schedules `layout` as the cluster's next layout generation from `switch_unix_ms` on
    /// (`idgen layout schedule`), in one transaction: the records must be at
    /// [`GENERATIONS_VERSION`], no other switch may be pending, the switch must be at least
    /// [`MIN_SWITCH_NOTICE`] after `now_unix_ms` and after every `lease_end` stored in the
    /// newest generation (the commit is conditional on each of those records: a renewal that
    /// commits first makes it read again), and the successor must follow the newest layout
    /// ([`Generations::with_successor`]). Every renewal or grant after the commit stops its
    /// generation before the switch. Returns the cluster's generations with the successor.
    pub async fn schedule_successor(
        &self,
        layout: Layout,
        switch_unix_ms: u64,
        now_unix_ms: u64,
    ) -> Result<Generations, LeaseError> {
        let key = self.key("cluster");
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            let Some(raw) = txn.get(&key).await? else {
                return Err(LeaseError::BadRequest(format!(
                    "no cluster in namespace {:?}: a new cluster starts with the layout its first node brings",
                    self.config.namespace
                )));
            };
            let mut rec: ClusterRecord =
                serde_json::from_slice(&raw).map_err(|e| Self::corrupt(&key, e))?;
            if rec.layout_version < GENERATIONS_VERSION || rec.layout_version > RECORD_VERSION_MAX {
                return Err(LeaseError::RecordVersion(format!(
                    "a successor layout needs the cluster's records at version {GENERATIONS_VERSION} (they are at {}; binaries that read only older versions would ignore the switch): once every node runs this release, run `idgen store upgrade`",
                    rec.layout_version
                )));
            }
            let gens = rec.generations().map_err(|e| Self::corrupt(&key, e))?;
            let newest = *gens.newest();
            if let Some(s) = newest.switch_unix_ms.filter(|&s| s > now_unix_ms) {
                return Err(LeaseError::BadRequest(format!(
                    "generation {} is already scheduled, for {s} ms: one switch at a time",
                    newest.index
                )));
            }
            let notice = duration_ms(MIN_SWITCH_NOTICE);
            if switch_unix_ms < now_unix_ms.saturating_add(notice) {
                return Err(LeaseError::BadRequest(format!(
                    "the switch at {switch_unix_ms} ms is less than {notice} ms from now ({now_unix_ms} ms): every node must hear of it first"
                )));
            }
            let next = gens
                .clone()
                .with_successor(layout, switch_unix_ms)
                .map_err(|e| LeaseError::BadRequest(e.to_string()))?;
            // Every lease of the newest generation stored now ends before the switch; the
            // ones written after this commit read the successor and stop there.
            let newest_leases = Leases::new(self.store, self.configured, self.config.clone(), self.owner.clone())
                .in_generation(newest);
            let records = newest_leases.read_records().await?;
            if records.len() > MAX_RECORDS_PER_TXN {
                return Err(LeaseError::BadRequest(format!(
                    "generation {} has {} worker records, more than one transaction checks ({MAX_RECORDS_PER_TXN}): try again when nodes have released or merged them",
                    newest.index,
                    records.len(),
                )));
            }
            let last = next.last_timestamp(newest.index).unwrap_or(u64::MAX);
            for (entry, w) in &records {
                if w.lease_end > last {
                    return Err(LeaseError::BadRequest(format!(
                        "a lease of generation {} runs to {} ms (worker record {}), past the switch: schedule it later",
                        newest.index,
                        newest.layout.epoch_ms().saturating_add(w.lease_end),
                        String::from_utf8_lossy(&entry.key)
                    )));
                }
                txn.check(entry);
            }
            rec.successors.push(SuccessorRecord {
                layout: LayoutRecord::from(layout),
                switch_unix_ms,
            });
            txn.put(key.clone(), to_json(&rec));
            Ok(Attempt::Commit(txn, next.clone()))
        })
        .await
    }

    /// Runs `attempt` until its transaction commits, at most `max_attempts` times.
    async fn transact<'a, T, F, Fut>(&'a self, mut attempt: F) -> Result<T, LeaseError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Attempt<'a, T>, LeaseError>>,
    {
        let attempts = self.config.max_attempts.max(1);
        for _ in 0..attempts {
            match attempt().await? {
                Attempt::Commit(txn, value) => match txn.commit().await? {
                    Commit::Applied => return Ok(value),
                    Commit::Conflict => continue,
                },
                Attempt::Return(value) => return Ok(value),
            }
        }
        Err(LeaseError::Contention { attempts })
    }

    /// Acquires one contiguous range of `config.workers` worker IDs: one transaction, after
    /// merging small records first where the window overlaps too many (see the module docs).
    pub async fn acquire(&self, now_unix_ms: u64) -> Result<Grant, LeaseError> {
        let wanted = self.config.workers;
        let space = self.search_space()?;
        let (lo, hi) = (space.first, space.end());
        if wanted == 0 || wanted > hi - lo {
            return Err(LeaseError::BadRequest(format!(
                "asked for {wanted} worker IDs; the {} has {}",
                if self.config.region.region().is_some() {
                    "region"
                } else {
                    "layout"
                },
                hi - lo
            )));
        }
        let now = self.id_time(now_unix_ms);
        let ttl = self.ttl_ms();
        let attempts = self.config.max_attempts.max(1);
        let (mut conflicts, mut merges) = (0, 0);
        loop {
            let mut txn = Txn::new(self.store);
            let (rec, gens) = self.check_cluster(&mut txn, now_unix_ms).await?;
            let terms = self.era_terms(&rec, gens, now_unix_ms)?;
            if terms.in_effect > self.era.index {
                // Our generation is over by our clock: acquire in the one in effect.
                return Err(LeaseError::Rescheduled(Box::new(terms.generations)));
            }
            let cluster_floor = terms.floor;
            // Read (checked) before the scan: a grant or merge that commits after this read,
            // even one that creates a record inside our window, makes our commit fail.
            let generation = self.next_generation(&mut txn).await?;
            let view = self.view(lo, hi, now).await?;
            let Some((first, _)) = choose_range(&view.segments(lo, hi), wanted) else {
                return Err(self.no_free_range(&view, lo, hi, now, wanted));
            };
            let end = first + wanted;
            let over = view.overlapping(first, end);
            let limit = self.records_per_txn();
            if over.len() > limit {
                merges += 1;
                if merges > MAX_MERGE_ROUNDS {
                    // The records kept changing under the merges.
                    return Err(LeaseError::Contention { attempts: merges });
                }
                // The merge commits only if no grant or merge committed since the counter was
                // read, before the scan that found `over` (invariant 4).
                let seen = generation - 1;
                if !self.merge(over, seen, now_unix_ms).await? {
                    conflicts += 1;
                    if conflicts >= attempts {
                        return Err(LeaseError::Contention { attempts });
                    }
                }
                continue;
            }
            // Every record overlapping the window goes, checked as scanned; the parts that stick
            // out of the window come back unchanged but narrower. The floor is at least the
            // cluster's (a cut-over or a restore fence).
            let mut floor = cluster_floor;
            for s in over {
                txn.check(&s.entry);
                txn.delete(s.entry.key.clone());
                floor = floor.max(s.rec.lease_end);
            }
            if let Some(s) = over.first().filter(|s| s.first < first) {
                let left = WorkerRecord {
                    count: first - s.first,
                    ..s.rec.clone()
                };
                txn.put(self.worker_key(s.first), to_json(&left));
            }
            if let Some(s) = over.last().filter(|s| s.end > end) {
                let right = WorkerRecord {
                    count: s.end - end,
                    ..s.rec.clone()
                };
                txn.put(self.worker_key(end), to_json(&right));
            }
            // Never move a stored lease_end backwards (invariant 1), nor past the generation's
            // last timestamp (its successor issues from the next).
            let mut lease_end = floor.max(now.saturating_add(ttl));
            if let Some(last) = terms.last {
                if floor >= last {
                    return Err(LeaseError::GenerationOver(self.era.index));
                }
                lease_end = lease_end.min(last);
            }
            // What this commit writes for the window is at or above everything stored for it,
            // and every record it replaces is checked, as is the generation counter.
            assert!(
                over.iter().all(|s| floor >= s.rec.lease_end) && lease_end >= floor,
                "invariant 1: a grant's floor {floor} and lease_end {lease_end} must be at or above every lease_end of the records it replaces"
            );
            assert!(
                txn.is_checked(&self.key("generation"))
                    && over.iter().all(|s| txn.is_checked(&s.entry.key)),
                "invariant 4: a grant commits conditional on the generation and on every record it replaces"
            );
            // Records this instance holds outside the window are orphans of acquisitions whose
            // outcome it never learned (applied, answer lost): nothing renews them and nobody
            // else may take them while this process publishes its clock. The grant releases
            // them at their lease_end (nothing was issued under them), as many as the
            // transaction has room for; a later grant takes any left.
            let room = limit.saturating_sub(over.len());
            let orphans: Vec<&Span> = view
                .spans
                .iter()
                .filter(|s| {
                    (s.end <= first || s.first >= end)
                        && s.rec.state == WorkerState::Held
                        && s.rec.owner.instance == self.owner.instance
                })
                .take(room)
                .collect();
            for s in &orphans {
                txn.check(&s.entry);
                let released = WorkerRecord {
                    state: WorkerState::Released,
                    written_unix_ms: now_unix_ms,
                    ..s.rec.clone()
                };
                txn.put(s.entry.key.clone(), to_json(&released));
            }
            let rec = WorkerRecord {
                state: WorkerState::Held,
                owner: self.owner.clone(),
                generation,
                lease_end,
                count: wanted,
                layout_version: LAYOUT_VERSION,
                written_unix_ms: now_unix_ms,
            };
            txn.put(self.worker_key(first), to_json(&rec));
            match txn.commit().await? {
                Commit::Applied => {
                    debug_assert!(
                        lo <= first && end <= hi,
                        "a grant lies inside the search space"
                    );
                    for s in &orphans {
                        tracing::warn!(
                            event = "lease_orphan_released",
                            worker_first = s.first,
                            worker_count = s.end - s.first,
                            generation = s.rec.generation,
                            lease_end = s.rec.lease_end,
                            "released worker IDs this node was granted by an acquisition whose answer was lost"
                        );
                    }
                    return Ok(Grant {
                        workers: WorkerRange::new(first, wanted),
                        generation,
                        floor,
                        lease_end,
                        layout_generation: self.era.index,
                    });
                }
                Commit::Conflict => {
                    conflicts += 1;
                    if conflicts >= attempts {
                        return Err(LeaseError::Contention { attempts });
                    }
                }
            }
        }
    }

    /// Merges `over` (consecutive grantable records, as scanned) in runs of at most
    /// `max_records_per_txn`: each run becomes one released record from its first worker ID
    /// to its last, gaps included, with the largest `lease_end` of the run, in one transaction.
    /// False if a transaction conflicted or found the records changed since the scan (choose
    /// again).
    ///
    /// `seen` is the generation counter as read before the scan that found `over`. A run
    /// covers the never-used gaps between its records, where the scan checked no key: a grant
    /// that landed in one after the scan would be overlaid by the merged record. Every grant
    /// and merge bumps the counter, so each run commits only if the counter still reads what
    /// the scan saw (plus this merge's own earlier runs).
    async fn merge(&self, over: &[Span], seen: u64, now_unix_ms: u64) -> Result<bool, LeaseError> {
        let mut expected = seen;
        for run in over.chunks(self.records_per_txn()) {
            let (Some(head), Some(tail)) = (run.first(), run.last()) else {
                continue;
            };
            if run.len() < 2 {
                continue;
            }
            let mut txn = Txn::new(self.store);
            let (rec, gens) = self.check_cluster(&mut txn, now_unix_ms).await?;
            self.era_terms(&rec, gens, now_unix_ms)?;
            let generation = self.next_generation(&mut txn).await?;
            if generation != expected.saturating_add(1) {
                // A grant or merge committed since the scan: the gaps may hold records now.
                return Ok(false);
            }
            assert!(
                txn.is_checked(&self.key("generation")),
                "invariant 4: a merge commits conditional on the generation its scan saw"
            );
            let mut lease_end = 0u64;
            for s in run {
                txn.check(&s.entry);
                txn.delete(s.entry.key.clone());
                lease_end = lease_end.max(s.rec.lease_end);
            }
            assert!(
                run.iter().all(|s| lease_end >= s.rec.lease_end),
                "invariant 1: a merged record's lease_end {lease_end} must be the largest of its run's"
            );
            debug_assert!(
                run.iter()
                    .all(|s| s.avail != Avail::Blocked && txn.is_checked(&s.entry.key)),
                "a merge takes only grantable records, each checked"
            );
            let merged = WorkerRecord {
                state: WorkerState::Released,
                owner: self.owner.clone(),
                generation,
                lease_end,
                count: tail.end - head.first,
                layout_version: LAYOUT_VERSION,
                written_unix_ms: now_unix_ms,
            };
            txn.put(self.worker_key(head.first), to_json(&merged));
            if txn.commit().await? == Commit::Conflict {
                return Ok(false);
            }
            expected = generation;
        }
        Ok(true)
    }

    async fn next_generation(&self, txn: &mut Txn<'_>) -> Result<u64, LeaseError> {
        let key = self.key("generation");
        let current = match txn.get(&key).await? {
            Some(raw) => std::str::from_utf8(&raw)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| Self::corrupt(&key, "not a number"))?,
            None => 0,
        };
        // Generations only increase (invariant 3): a counter at its end is corrupt, not wrapped.
        let next = current
            .checked_add(1)
            .ok_or_else(|| Self::corrupt(&key, "the generation counter is at its maximum"))?;
        txn.put(key, next.to_string().into_bytes());
        Ok(next)
    }

    /// Reads the record of `grant`'s range inside `txn`, failing with `Lost` unless it is still
    /// the one the grant wrote: held by this process, under the grant's generation, as wide.
    async fn read_own(&self, txn: &mut Txn<'_>, grant: &Grant) -> Result<WorkerRecord, LeaseError> {
        let key = self.worker_key(grant.workers.first);
        let range = format!("workers {}", grant.workers);
        let Some(raw) = txn.get(&key).await? else {
            return Err(LeaseError::Lost(format!("{range}: record is gone")));
        };
        let rec = Self::parse_worker(&key, &raw)?;
        if rec.generation != grant.generation
            || rec.owner.instance != self.owner.instance
            || rec.state != WorkerState::Held
            || rec.count != grant.workers.count
        {
            return Err(LeaseError::Lost(format!(
                "{range}: now {} worker IDs of generation {} ({:?}) held by {}, ours was generation {}",
                rec.count, rec.generation, rec.state, rec.owner.instance, grant.generation
            )));
        }
        Ok(rec)
    }

    /// Renews `grant` in one transaction conditional on its record still being ours; returns
    /// the new `lease_end` (never lower than before).
    pub async fn renew(&self, grant: &Grant, now_unix_ms: u64) -> Result<u64, LeaseError> {
        self.renew_seeing(grant, now_unix_ms)
            .await
            .map(|(end, _)| end)
    }

    /// As [`renew`](Self::renew), conditional on the cluster record too, whose layout
    /// generations it returns: the new `lease_end` stays at or below the last timestamp of
    /// the grant's generation once a successor is scheduled (a successor scheduled after this
    /// read makes the commit fail and the renewal read again).
    pub async fn renew_seeing(
        &self,
        grant: &Grant,
        now_unix_ms: u64,
    ) -> Result<(u64, Generations), LeaseError> {
        let now = self.id_time(now_unix_ms);
        let ttl = self.ttl_ms();
        let cluster_key = self.key("cluster");
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            let gens = match txn.get(&cluster_key).await? {
                Some(raw) => serde_json::from_slice::<ClusterRecord>(&raw)
                    .map_err(|e| Self::corrupt(&cluster_key, e))?
                    .generations()
                    .map_err(|e| Self::corrupt(&cluster_key, e))?,
                None => {
                    return Err(LeaseError::Lost(
                        "the cluster record is gone: the store was emptied".to_string(),
                    ))
                }
            };
            if gens.get(grant.layout_generation) != Some(&self.era) {
                return Err(Self::corrupt(
                    &cluster_key,
                    format!(
                        "layout generation {} of this node's grant is not the one the cluster record describes",
                        grant.layout_generation
                    ),
                ));
            }
            let mut rec = self.read_own(&mut txn, grant).await?;
            let wanted = now.saturating_add(ttl);
            let wanted = gens
                .last_timestamp(grant.layout_generation)
                .map_or(wanted, |last| wanted.min(last));
            let lease_end = rec.lease_end.max(grant.lease_end).max(wanted);
            assert!(
                lease_end >= rec.lease_end && lease_end >= grant.lease_end,
                "invariant 1: a renewal never lowers lease_end (stored {}, committed {}, writing {lease_end})",
                rec.lease_end,
                grant.lease_end
            );
            assert!(
                txn.is_checked(&self.worker_key(grant.workers.first)),
                "invariant 3: a renewal commits conditional on the record it read"
            );
            rec.lease_end = lease_end;
            rec.written_unix_ms = now_unix_ms;
            txn.put(self.worker_key(grant.workers.first), to_json(&rec));
            Ok(Attempt::Commit(txn, (lease_end, gens.clone())))
        })
        .await
    }

    /// Releases `grant` after its shards have stopped: `lease_end` becomes the true last-issued
    /// timestamp (or the floor if nothing was issued), and the range is free at once.
    pub async fn release(
        &self,
        grant: &Grant,
        last_issued: Option<u64>,
        now_unix_ms: u64,
    ) -> Result<Released, LeaseError> {
        let lease_end = last_issued.map_or(grant.floor, |t| t.max(grant.floor));
        assert!(
            lease_end >= grant.floor && last_issued.is_none_or(|t| lease_end >= t),
            "invariant 1: a release writes lease_end {lease_end} at or above the floor {} and the last issued timestamp {last_issued:?}",
            grant.floor
        );
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            let mut rec = match self.read_own(&mut txn, grant).await {
                Ok(rec) => rec,
                Err(LeaseError::Lost(_)) => return Ok(Attempt::Return(Released::AlreadyLost)),
                Err(e) => return Err(e),
            };
            assert!(
                txn.is_checked(&self.worker_key(grant.workers.first)),
                "invariant 3: a release commits conditional on the record it read"
            );
            rec.state = WorkerState::Released;
            rec.lease_end = lease_end;
            rec.written_unix_ms = now_unix_ms;
            txn.put(self.worker_key(grant.workers.first), to_json(&rec));
            Ok(Attempt::Commit(txn, Released::Freed { lease_end }))
        })
        .await
    }

    /// Every worker record in the namespace, by its first worker ID (the record's `count` says
    /// how many it covers), in worker order.
    pub async fn ranges(&self) -> Result<Vec<(u64, WorkerRecord)>, LeaseError> {
        self.read_records()
            .await?
            .into_iter()
            .map(|(e, r)| Ok((self.worker_id_of(&e.key)?, r)))
            .collect()
    }

    /// One entry per recorded worker ID, in worker order: the record that covers it (so a
    /// range record appears once per worker ID, with the range's `count`). For tests and small
    /// spaces; [`ranges`](Self::ranges) is the stored form.
    pub async fn workers(&self) -> Result<Vec<(u64, WorkerRecord)>, LeaseError> {
        let mut out = Vec::new();
        for (first, rec) in self.ranges().await? {
            out.extend((first..first + rec.count).map(|id| (id, rec.clone())));
        }
        Ok(out)
    }

    /// The cluster record, if the cluster has been created.
    pub async fn cluster(&self) -> Result<Option<ClusterRecord>, LeaseError> {
        let key = self.key("cluster");
        match self.store.get(&key).await? {
            Some(e) => Ok(Some(
                serde_json::from_slice(&e.value).map_err(|err| Self::corrupt(&key, err))?,
            )),
            None => Ok(None),
        }
    }

    /// Free and held worker IDs in the node's search space, as an acquirer would see them now.
    pub async fn occupancy(&self, now_unix_ms: u64) -> Result<Occupancy, LeaseError> {
        let space = self.search_space()?;
        let (lo, hi) = (space.first, space.end());
        let now = self.id_time(now_unix_ms);
        let blocked: u64 = self
            .view(lo, hi, now)
            .await?
            .spans
            .iter()
            .filter(|s| s.avail == Avail::Blocked)
            .map(|s| s.end.min(hi) - s.first.max(lo))
            .sum();
        Ok(Occupancy {
            free: (hi - lo) - blocked,
            held: blocked,
            total: hi - lo,
        })
    }
}

/// What one attempt of a transaction decided.
enum Attempt<'a, T> {
    /// Commit these writes; on success the operation returns the value.
    Commit(Txn<'a>, T),
    /// Nothing to write: return the value.
    Return(T),
}

/// A worker record in a few words, for errors: state, holder, generation and `lease_end`.
fn summary(rec: &WorkerRecord) -> String {
    let state = match rec.state {
        WorkerState::Held => "held",
        WorkerState::Released => "released",
    };
    format!(
        "{state} by {} under generation {}, lease_end {}",
        rec.owner.instance, rec.generation, rec.lease_end
    )
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Records are plain structs of strings and integers: serialization cannot fail.
    serde_json::to_vec(value).expect("lease records serialize")
}

/// `d` in whole milliseconds, saturating.
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The search space `lo..hi` cut into consecutive segments `(start, end, avail)`: `records`
/// (non-overlapping, in order, cut to the space) and the never-used gaps between them.
fn segments(
    lo: u64,
    hi: u64,
    records: impl Iterator<Item = (u64, u64, Avail)>,
) -> Vec<(u64, u64, Avail)> {
    let mut out = Vec::new();
    let mut at = lo;
    for (first, end, avail) in records {
        let (a, b) = (first.max(lo), end.min(hi));
        if a >= b {
            continue;
        }
        if a > at {
            out.push((at, a, Avail::Fresh));
        }
        out.push((a, b, avail));
        at = b;
    }
    if at < hi {
        out.push((at, hi, Avail::Fresh));
    }
    out
}

/// Picks the cheapest window of `n` worker IDs over `segments` (consecutive, covering the
/// search space, as [`View::segments`] cuts it): the one whose worst worker ID is best
/// ([`Avail`]'s order: never used, released, expired, then the least wait), the lowest among
/// equals; `None` if every window holds a blocked worker ID. Returns its first worker ID and
/// cost.
///
/// Only windows starting where a segment starts need looking at: moving a window down to the
/// start of the segment it starts in covers no segment it did not cover. The window's cost is
/// a sliding maximum (a queue of segments of decreasing cost), so this is linear in segments.
fn choose_range(segments: &[(u64, u64, Avail)], n: u64) -> Option<(u64, Avail)> {
    let hi = segments.last()?.1;
    let mut best: Option<(Avail, u64)> = None;
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut next = 0;
    for (i, &(start, _, _)) in segments.iter().enumerate() {
        let Some(end) = start.checked_add(n).filter(|&e| e <= hi) else {
            break;
        };
        while next < segments.len() && segments[next].0 < end {
            while queue
                .back()
                .is_some_and(|&j| segments[j].2 <= segments[next].2)
            {
                queue.pop_back();
            }
            queue.push_back(next);
            next += 1;
        }
        // Segments before this one end at or before `start`.
        while queue.front().is_some_and(|&j| j < i) {
            queue.pop_front();
        }
        let cost = queue.front().map_or(Avail::Fresh, |&j| segments[j].2);
        if cost != Avail::Blocked && best.is_none_or(|(c, _)| cost < c) {
            best = Some((cost, start));
            if cost == Avail::Fresh {
                break;
            }
        }
    }
    best.map(|(cost, start)| (start, cost))
}

#[cfg(test)]
mod tests;
