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
//! | `workers/<id>` | [`WorkerRecord`]: state, owner, generation, `lease_end` |
//!
//! ## Invariants every operation keeps
//!
//! 1. A stored `lease_end` is at least every timestamp any holder of that worker ever issued:
//!    grants and renewals only move it forward, and a release lowers it only to the releasing
//!    holder's true last-issued timestamp, after its shards have stopped.
//! 2. A new grant's floor is the stored `lease_end` of every worker in the range (their maximum).
//! 3. A renewal commits only if every record of the range still carries the holder's generation
//!    (one transaction, conditional on the records read); so does a release.
//! 4. A holder raises its ceiling only to a `lease_end` whose commit it saw succeed.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::layout::{Layout, LayoutError};
use crate::store::{Commit, KvStore, StoreError, Txn};

pub mod conformance;
pub mod keeper;

#[cfg(test)]
mod sim;

/// Default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Transaction attempts before giving up on contention.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
/// The version of the cluster record's layout description.
pub const LAYOUT_VERSION: u32 = 1;

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
}

/// Whether a worker ID is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    Held,
    Released,
}

/// `idgen/<ns>/workers/<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    pub state: WorkerState,
    pub owner: Owner,
    /// The grant this record belongs to (increases on every grant in the cluster).
    pub generation: u64,
    /// ID-time ms: no holder of this worker ID has issued, or will issue, a timestamp above
    /// this value under this grant; the next holder issues only above it.
    pub lease_end: u64,
    pub layout_version: u32,
    /// The writer's wall clock when it wrote this record (ms since the Unix epoch).
    pub written_unix_ms: u64,
}

/// A granted lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// First worker ID of the range.
    pub first: u64,
    /// Number of worker IDs.
    pub count: u64,
    pub generation: u64,
    /// Issue only timestamps strictly above this (ID-time ms).
    pub floor: u64,
    /// Issue only timestamps strictly below this (ID-time ms); renewals raise it.
    pub lease_end: u64,
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

/// What a release found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The range is marked free with `lease_end` = the true last-issued timestamp.
    Freed { lease_end: u64 },
    /// The lease was no longer ours: nothing to release.
    AlreadyLost,
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
    layout: Layout,
    config: LeaseConfig,
    owner: Owner,
    prefix: String,
}

/// How a worker ID looks to an acquirer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Avail {
    /// Held (or expired too recently): not grantable.
    Blocked,
    /// Grantable; its `lease_end` is still ahead of the acquirer's clock (it would wait).
    Ahead(u64),
    /// Grantable; nothing to wait for.
    Ready,
}

impl<'s> Leases<'s> {
    pub fn new(store: &'s dyn KvStore, layout: Layout, config: LeaseConfig, owner: Owner) -> Self {
        let prefix = format!("idgen/{}/", config.namespace);
        Leases {
            store,
            layout,
            config,
            owner,
            prefix,
        }
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
    fn worker_key(&self, id: u64) -> Vec<u8> {
        self.key(&format!("workers/{id:05}"))
    }
    fn workers_prefix(&self) -> Vec<u8> {
        self.key("workers/")
    }

    fn id_time(&self, now_unix_ms: u64) -> u64 {
        now_unix_ms.saturating_sub(self.layout.epoch_ms())
    }

    fn ttl_ms(&self) -> u64 {
        duration_ms(self.config.ttl)
    }

    /// The worker IDs a grant may come from: the node's region, or the whole space.
    fn search_space(&self) -> Result<(u64, u64), LeaseError> {
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
                Ok((r * size, (r + 1) * size))
            }
            RegionScope::Global => Ok((0, self.layout.worker_count())),
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

    fn avail(&self, rec: &WorkerRecord, now: u64) -> Avail {
        let grantable = match rec.state {
            WorkerState::Released => true,
            // Our own record from an acquisition whose outcome we did not learn.
            WorkerState::Held if rec.owner.instance == self.owner.instance => true,
            WorkerState::Held => {
                rec.lease_end
                    .saturating_add(duration_ms(self.config.safety))
                    < now
            }
        };
        if !grantable {
            Avail::Blocked
        } else if rec.lease_end >= now {
            Avail::Ahead(rec.lease_end)
        } else {
            Avail::Ready
        }
    }

    /// Checks the cluster record (layout and region scope), creating it if this is the first
    /// node. Runs inside `txn`.
    async fn check_cluster(&self, txn: &mut Txn<'_>, now_unix_ms: u64) -> Result<(), LeaseError> {
        let key = self.key("cluster");
        let ours = LayoutRecord::from(self.layout);
        let scope = self.config.region;
        match txn.get(&key).await? {
            Some(raw) => {
                let mut rec: ClusterRecord =
                    serde_json::from_slice(&raw).map_err(|e| Self::corrupt(&key, e))?;
                if rec.layout != ours || rec.layout_version != LAYOUT_VERSION {
                    let stored = match Layout::try_from(rec.layout) {
                        Ok(l) => l.to_string(),
                        Err(e) => format!("an invalid layout ({e})"),
                    };
                    return Err(LeaseError::LayoutMismatch {
                        stored: format!("{stored} (layout version {})", rec.layout_version),
                        ours: format!("{} (layout version {LAYOUT_VERSION})", self.layout),
                    });
                }
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
                        txn.put(key, to_json(&rec));
                    }
                }
            }
            None => {
                let rec = ClusterRecord {
                    layout: ours,
                    layout_version: LAYOUT_VERSION,
                    created_unix_ms: now_unix_ms,
                    created_by: self.owner.instance.clone(),
                    region_scope: Some(scope),
                };
                txn.put(key, to_json(&rec));
            }
        }
        Ok(())
    }

    /// Reads (or creates) the cluster record and returns the stored layout check's outcome;
    /// for `idgen inspect` and start-up checks that do not acquire.
    pub async fn ensure_cluster(&self, now_unix_ms: u64) -> Result<(), LeaseError> {
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            self.check_cluster(&mut txn, now_unix_ms).await?;
            Ok(Attempt::Commit(txn, ()))
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
                Attempt::Retry => continue,
                Attempt::Return(value) => return Ok(value),
            }
        }
        Err(LeaseError::Contention { attempts })
    }

    /// Acquires one contiguous range of `config.workers` worker IDs, in one transaction.
    pub async fn acquire(&self, now_unix_ms: u64) -> Result<Grant, LeaseError> {
        let wanted = self.config.workers;
        let (lo, hi) = self.search_space()?;
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
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            self.check_cluster(&mut txn, now_unix_ms).await?;

            // Snapshot view of the worker space.
            let mut avail = std::collections::BTreeMap::new();
            let mut expiring = 0;
            for e in txn.scan(&self.workers_prefix()).await? {
                let id = self.worker_id_of(&e.key)?;
                if (lo..hi).contains(&id) {
                    let rec = Self::parse_worker(&e.key, &e.value)?;
                    let a = self.avail(&rec, now);
                    let previous_life = rec.owner.node_id == self.owner.node_id
                        && rec.owner.instance != self.owner.instance;
                    if a == Avail::Blocked && (rec.lease_end < now || previous_life) {
                        expiring += 1;
                    }
                    avail.insert(id, a);
                }
            }
            let Some(first) = choose_range(&avail, lo, hi, wanted) else {
                let blocked = avail.values().filter(|a| **a == Avail::Blocked).count() as u64;
                return Err(LeaseError::NoFreeRange {
                    wanted,
                    region: self.config.region.region(),
                    free: (hi - lo) - blocked,
                    expiring,
                });
            };

            // Re-read the chosen records with conflict checks: the commit succeeds only if
            // none of them changed since.
            let generation = self.next_generation(&mut txn).await?;
            let mut floor = 0u64;
            for id in first..first + wanted {
                let key = self.worker_key(id);
                if let Some(raw) = txn.get(&key).await? {
                    let rec = Self::parse_worker(&key, &raw)?;
                    if self.avail(&rec, now) == Avail::Blocked {
                        // Changed between the scan and this read: start over.
                        return Ok(Attempt::Retry);
                    }
                    floor = floor.max(rec.lease_end);
                }
            }
            // Never move a stored lease_end backwards (invariant 1).
            let lease_end = floor.max(now.saturating_add(ttl));
            for id in first..first + wanted {
                let rec = WorkerRecord {
                    state: WorkerState::Held,
                    owner: self.owner.clone(),
                    generation,
                    lease_end,
                    layout_version: LAYOUT_VERSION,
                    written_unix_ms: now_unix_ms,
                };
                txn.put(self.worker_key(id), to_json(&rec));
            }
            Ok(Attempt::Commit(
                txn,
                Grant {
                    first,
                    count: wanted,
                    generation,
                    floor,
                    lease_end,
                },
            ))
        })
        .await
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
        let next = current + 1;
        txn.put(key, next.to_string().into_bytes());
        Ok(next)
    }

    /// Reads the records of `grant`'s range inside `txn`, failing with `Lost` unless every one
    /// is still held by this process under the grant's generation.
    async fn read_own(
        &self,
        txn: &mut Txn<'_>,
        grant: &Grant,
    ) -> Result<Vec<WorkerRecord>, LeaseError> {
        let mut recs = Vec::with_capacity(grant.count as usize);
        for id in grant.first..grant.first + grant.count {
            let key = self.worker_key(id);
            let Some(raw) = txn.get(&key).await? else {
                return Err(LeaseError::Lost(format!("worker {id}: record is gone")));
            };
            let rec = Self::parse_worker(&key, &raw)?;
            if rec.generation != grant.generation
                || rec.owner.instance != self.owner.instance
                || rec.state != WorkerState::Held
            {
                return Err(LeaseError::Lost(format!(
                    "worker {id}: now generation {} ({:?}) held by {}, ours was generation {}",
                    rec.generation, rec.state, rec.owner.instance, grant.generation
                )));
            }
            recs.push(rec);
        }
        Ok(recs)
    }

    /// Renews `grant` in one transaction conditional on every record still being ours;
    /// returns the new `lease_end` (never lower than before).
    pub async fn renew(&self, grant: &Grant, now_unix_ms: u64) -> Result<u64, LeaseError> {
        let now = self.id_time(now_unix_ms);
        let ttl = self.ttl_ms();
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            let recs = self.read_own(&mut txn, grant).await?;
            let stored = recs.iter().map(|r| r.lease_end).max().unwrap_or(0);
            let lease_end = stored.max(grant.lease_end).max(now.saturating_add(ttl));
            for (i, mut rec) in recs.into_iter().enumerate() {
                rec.lease_end = lease_end;
                rec.written_unix_ms = now_unix_ms;
                txn.put(self.worker_key(grant.first + i as u64), to_json(&rec));
            }
            Ok(Attempt::Commit(txn, lease_end))
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
        self.transact(|| async {
            let mut txn = Txn::new(self.store);
            let recs = match self.read_own(&mut txn, grant).await {
                Ok(recs) => recs,
                Err(LeaseError::Lost(_)) => return Ok(Attempt::Return(Released::AlreadyLost)),
                Err(e) => return Err(e),
            };
            for (i, mut rec) in recs.into_iter().enumerate() {
                rec.state = WorkerState::Released;
                rec.lease_end = lease_end;
                rec.written_unix_ms = now_unix_ms;
                txn.put(self.worker_key(grant.first + i as u64), to_json(&rec));
            }
            Ok(Attempt::Commit(txn, Released::Freed { lease_end }))
        })
        .await
    }

    /// Every worker record in the namespace, by worker ID.
    pub async fn workers(&self) -> Result<Vec<(u64, WorkerRecord)>, LeaseError> {
        let mut out = Vec::new();
        for e in self.store.scan(&self.workers_prefix()).await? {
            out.push((
                self.worker_id_of(&e.key)?,
                Self::parse_worker(&e.key, &e.value)?,
            ));
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
        let (lo, hi) = self.search_space()?;
        let now = self.id_time(now_unix_ms);
        let mut blocked = 0;
        for (id, rec) in self.workers().await? {
            if (lo..hi).contains(&id) && self.avail(&rec, now) == Avail::Blocked {
                blocked += 1;
            }
        }
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
    /// What was read changed under the attempt: start over.
    Retry,
    /// Nothing to write: return the value.
    Return(T),
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Records are plain structs of strings and integers: serialization cannot fail.
    serde_json::to_vec(value).expect("lease records serialize")
}

pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Picks the first worker ID of a grantable window of `n` IDs in `lo..hi`: the lowest window
/// with nothing to wait for, else the window whose largest `lease_end` is smallest. IDs absent
/// from `avail` have never been used.
fn choose_range(
    avail: &std::collections::BTreeMap<u64, Avail>,
    lo: u64,
    hi: u64,
    n: u64,
) -> Option<u64> {
    // First choice: no Blocked and no Ahead record in the window.
    let mut start = lo;
    while start + n <= hi {
        match avail
            .range(start..start + n)
            .rfind(|(_, a)| **a != Avail::Ready)
        {
            None => return Some(start),
            Some((&id, _)) => start = id + 1,
        }
    }
    // Second choice: windows without Blocked records; the least wait wins. Candidate starts:
    // `lo` and just after every record that is not Ready.
    let mut best: Option<(u64, u64)> = None; // (max lease_end, start)
    let starts = std::iter::once(lo).chain(
        avail
            .iter()
            .filter(|(_, a)| **a != Avail::Ready)
            .map(|(&id, _)| id + 1),
    );
    for start in starts {
        if start < lo || start + n > hi {
            continue;
        }
        let mut wait = 0u64;
        let mut blocked = false;
        for (_, a) in avail.range(start..start + n) {
            match a {
                Avail::Blocked => {
                    blocked = true;
                    break;
                }
                Avail::Ahead(end) => wait = wait.max(*end),
                Avail::Ready => {}
            }
        }
        if !blocked && best.is_none_or(|(w, _)| wait < w) {
            best = Some((wait, start));
        }
    }
    best.map(|(_, start)| start)
}

#[cfg(test)]
mod tests;
