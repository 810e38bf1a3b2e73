//! Named sequences: small, dense numbers from the coordination store, for what sparse 64-bit
//! IDs cannot be (invoice series per tenant, per-table counters, anything strictly ordered
//! across every caller). Written once over any [`KvStore`], like the leases beside them.
//!
//! ## Keys (under `idgen/<namespace>/`)
//!
//! | key | value (JSON) |
//! |---|---|
//! | `sequences/<name>` | [`SequenceRecord`]: the definition, and `next`, the first value no block holds yet |
//! | `sequence-count` | how many `sequences/` records exist (live and dropped), bounded by [`MAX_SEQUENCES`] |
//!
//! ## Blocks
//!
//! Every value is handed out from a [`Block`]: values a node reserved in one store
//! transaction, which reads the record (checked) and moves its `next` past the block. Two
//! reservations of one sequence cannot both commit from one state, so no two blocks share a
//! value, ever; a block whose commit outcome is unknown is never handed out, and its values
//! are a gap, never a repeat. What a node does with its blocks is the mode's:
//!
//! - **dense** ([`Mode::Dense`]): a node reserves blocks ahead of demand ([`dense::Blocks`])
//!   and hands their values out from memory. Values are unique; those one node hands out
//!   increase (a later block starts above every earlier one); a gap is what a node held in
//!   its blocks when it stopped (at most two blocks of at most [`SequenceSpec::max_block`]
//!   values each per node), or a block whose reservation's outcome was lost.
//! - **strict** ([`Mode::Strict`]): no value is answered before a reservation committed
//!   after the call began covers it ([`strict::Batches`]): calls waiting together share one
//!   commit, and nothing is kept for later. If one call returned before another began, on any
//!   node, its value is the smaller: the second call's reservation committed after the first
//!   one's, and `next` only moves forward. Clocks play no part.
//!
//! Neither mode numbers without gaps across crashes: a value is handed out from memory after
//! its reservation committed, so a node that dies between the two loses it. Gapless numbering
//! needs the number and the business record to commit in one transaction of the business's
//! own database (a counter row updated in that transaction), which no service outside that
//! database can offer.
//!
//! ## Changing and dropping
//!
//! [`Sequences::alter`] changes the increment, the maximum, the largest block, or restarts
//! the sequence at a value, never below a value a block already holds. [`Sequences::drop`]
//! keeps the record as a tombstone holding `next`: a name created again starts above every
//! value the dropped sequence reserved, so values a node still hands out from an old block
//! cannot repeat under the new one. `forget` removes a tombstone (and its place in the
//! bound), for an operator who knows no node holds a block of it any more.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::store::{Check, Commit, CommitOrGet, Entry, KvStore, StoreError, Txn, Write};

pub mod check;
pub mod committer;
pub mod dense;
pub mod holder;
pub mod strict;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(test)]
mod tests;

/// The most sequences (live and dropped, see [`Sequences::drop`]) one namespace holds.
pub const MAX_SEQUENCES: u64 = 1024;
/// The longest name.
pub const MAX_NAME_LEN: usize = 64;
/// The largest value any sequence hands out: values are positive and fit a signed 64-bit
/// integer (a PostgreSQL `bigint`, a Java `long`).
pub const MAX_VALUE: u64 = i64::MAX as u64;
/// The most values one reservation takes (one block).
pub const MAX_BLOCK: u64 = 1 << 20;
/// The default bound on a dense block: a node that stops loses at most two blocks.
pub const DEFAULT_MAX_BLOCK: u64 = 4096;
/// The format of [`SequenceRecord`]s this build reads and writes.
pub const RECORD_FORMAT: u32 = 1;
/// Transaction attempts before a reservation gives up on contention.
pub const MAX_ATTEMPTS: u32 = 16;

/// A sequence's name: 1 to [`MAX_NAME_LEN`] of `a-z`, `0-9`, `.`, `_` and `-`, starting with a
/// letter or a digit (`invoice.tenant-42`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SequenceName(String);

impl SequenceName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for SequenceName {
    type Err = SequenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| SequenceError::BadName {
            name: s.chars().take(MAX_NAME_LEN + 8).collect(),
            why: why.to_string(),
        };
        if s.is_empty() {
            return Err(bad("it is empty"));
        }
        if s.len() > MAX_NAME_LEN {
            return Err(bad(&format!(
                "it has {} characters, at most {MAX_NAME_LEN} are allowed",
                s.chars().count()
            )));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'))
        {
            return Err(bad(&format!(
                "{c:?} is not allowed: use a-z, 0-9, '.', '_' and '-'"
            )));
        }
        if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(bad("it must start with a letter or a digit"));
        }
        Ok(SequenceName(s.to_string()))
    }
}

impl TryFrom<String> for SequenceName {
    type Error = SequenceError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<SequenceName> for String {
    fn from(n: SequenceName) -> String {
        n.0
    }
}

impl fmt::Display for SequenceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a sequence promises (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Blocks reserved ahead of demand: unique, increasing per node, gaps bounded by blocks.
    Dense,
    /// Real-time order across every node: each value's reservation commits after its call began.
    Strict,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dense" => Ok(Mode::Dense),
            "strict" => Ok(Mode::Strict),
            _ => Err(format!("{s:?} is not a sequence mode: use dense or strict")),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Dense => "dense",
            Mode::Strict => "strict",
        })
    }
}

/// What a sequence does once its maximum is handed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AtMax {
    /// Refuse every further call with [`SequenceError::Exhausted`] (until an operator raises
    /// the maximum). The only policy: wrapping around would hand a value out twice.
    #[default]
    Refuse,
}

/// The definition an operator gives a sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceSpec {
    pub mode: Mode,
    /// The first value (at least 1).
    pub start: u64,
    /// The step between values (at least 1).
    pub increment: u64,
    /// The largest value handed out (at most [`MAX_VALUE`]).
    pub max: u64,
    #[serde(default)]
    pub at_max: AtMax,
    /// The most values one dense block holds: what a stopped node can leave as a gap (twice).
    pub max_block: u64,
}

impl SequenceSpec {
    /// A sequence from 1 in steps of 1 up to [`MAX_VALUE`].
    pub fn new(mode: Mode) -> Self {
        SequenceSpec {
            mode,
            start: 1,
            increment: 1,
            max: MAX_VALUE,
            at_max: AtMax::Refuse,
            max_block: DEFAULT_MAX_BLOCK,
        }
    }

    fn validate(&self) -> Result<(), SequenceError> {
        let bad = |s: String| Err(SequenceError::BadSpec(s));
        if self.start == 0 {
            return bad("start must be at least 1: values are positive".into());
        }
        if self.increment == 0 || self.increment > MAX_VALUE {
            return bad(format!("increment must be 1 ..= {MAX_VALUE}"));
        }
        if self.max > MAX_VALUE {
            return bad(format!(
                "max {} is above {MAX_VALUE}: values fit a signed 64-bit integer",
                self.max
            ));
        }
        if self.start > self.max {
            return bad(format!("start {} is above max {}", self.start, self.max));
        }
        if self.max_block == 0 || self.max_block > MAX_BLOCK {
            return bad(format!("max_block must be 1 ..= {MAX_BLOCK}"));
        }
        Ok(())
    }
}

/// Whether a sequence hands out values or was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SequenceState {
    Live,
    /// Dropped: kept so that a sequence created again under the name starts above `next`.
    Dropped,
}

impl fmt::Display for SequenceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SequenceState::Live => "live",
            SequenceState::Dropped => "dropped",
        })
    }
}

/// How long to wait after conflict number `attempt` (from 0): a random time below
/// `min(2^attempt, 64)` ms, so that writers of one record fall out of step.
pub(super) fn backoff(attempt: u32) -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let cap_us = 1_000u64 << attempt.min(6);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    std::time::Duration::from_micros(h.finish() % cap_us)
}

/// One stored sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceRecord {
    pub format: u32,
    pub name: SequenceName,
    pub state: SequenceState,
    #[serde(flatten)]
    pub spec: SequenceSpec,
    /// The first value no block holds yet: every value a block ever held is below it, and it
    /// only moves forward. Above `max` once the sequence is used up.
    pub next: u64,
    /// Blocks reserved so far (store commits that moved `next`).
    pub blocks: u64,
    /// Bumped by every create, alter and drop: a holder of an older definition sees it change.
    pub revision: u64,
    pub created_unix_ms: u64,
    pub changed_unix_ms: u64,
}

impl SequenceRecord {
    /// Values still to be reserved before the maximum: 0 once used up.
    pub fn remaining(&self) -> u64 {
        if self.next > self.spec.max {
            0
        } else {
            (self.spec.max - self.next) / self.spec.increment + 1
        }
    }

    fn check(&self, key: &[u8]) -> Result<(), SequenceError> {
        let corrupt = |d: String| SequenceError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            detail: d,
        };
        if self.format != RECORD_FORMAT {
            return Err(SequenceError::Format {
                key: String::from_utf8_lossy(key).into_owned(),
                found: self.format,
            });
        }
        self.spec.validate().map_err(|e| corrupt(e.to_string()))?;
        if self.next < self.spec.start {
            return Err(corrupt(format!(
                "next {} is below start {}",
                self.next, self.spec.start
            )));
        }
        // A reservation ends at most one increment past the maximum, both at most MAX_VALUE.
        if self.next > 2 * MAX_VALUE {
            return Err(corrupt(format!("next {} is out of range", self.next)));
        }
        Ok(())
    }
}

/// Values reserved in one store commit: `first, first + step, …`, `count` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub first: u64,
    pub count: u64,
    pub step: u64,
    /// The record's revision the block was reserved under, and the definition's mode and
    /// block bound at that revision.
    pub revision: u64,
    pub mode: Mode,
    pub max_block: u64,
    /// The sequence's maximum at that revision.
    pub max: u64,
    /// Values the record had left below the maximum once this block was taken.
    pub remaining: u64,
}

impl Block {
    /// The `i`th value (`i < count`).
    pub fn value(&self, i: u64) -> u64 {
        debug_assert!(i < self.count);
        self.first + i * self.step
    }
    /// The largest value (`count > 0`).
    pub fn last(&self) -> u64 {
        self.value(self.count - 1)
    }
}

/// What an operator changes with [`Sequences::alter`]; `None` keeps a setting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Alter {
    pub increment: Option<u64>,
    pub max: Option<u64>,
    pub max_block: Option<u64>,
    /// Continue at this value: at least the record's `next` (never below a value handed out).
    pub restart: Option<u64>,
}

/// Why a sequence operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("bad sequence name {name:?}: {why}")]
    BadName { name: String, why: String },
    #[error("bad sequence definition: {0}")]
    BadSpec(String),
    #[error("no sequence named {0}")]
    NotFound(SequenceName),
    #[error("sequence {0} exists already")]
    Exists(SequenceName),
    #[error("sequence {name} has handed out every value up to its maximum {max}: raise it with `idgen seq alter {name} --max N`")]
    Exhausted { name: SequenceName, max: u64 },
    #[error("the namespace holds {MAX_SEQUENCES} sequences, the most it may (dropped ones count until forgotten: `idgen seq drop --forget NAME`)")]
    TooMany,
    #[error("sequence {name}: {detail}")]
    Refused { name: SequenceName, detail: String },
    #[error("gave up after {attempts} conflicting transaction attempts")]
    Contention { attempts: u32 },
    #[error("sequence record {key} has format {found}; this build reads format {RECORD_FORMAT}: upgrade idgen")]
    Format { key: String, found: u32 },
    #[error("corrupt sequence record at {key}: {detail}")]
    Corrupt { key: String, detail: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The sequences of one namespace in one store. Every operation that stamps a time takes the
/// caller's wall clock reading (`now_unix_ms`), as the leases do.
pub struct Sequences<'s> {
    store: &'s dyn KvStore,
    prefix: String,
}

impl<'s> Sequences<'s> {
    pub fn new(store: &'s dyn KvStore, namespace: &str) -> Self {
        Sequences {
            store,
            prefix: format!("idgen/{namespace}/"),
        }
    }

    /// `idgen/<namespace>/sequences/<name>`.
    pub fn key(&self, name: &SequenceName) -> Vec<u8> {
        format!("{}sequences/{name}", self.prefix).into_bytes()
    }
    fn count_key(&self) -> Vec<u8> {
        format!("{}sequence-count", self.prefix).into_bytes()
    }
    fn records_prefix(&self) -> Vec<u8> {
        format!("{}sequences/", self.prefix).into_bytes()
    }

    fn parse(key: &[u8], raw: &[u8]) -> Result<SequenceRecord, SequenceError> {
        let rec: SequenceRecord =
            serde_json::from_slice(raw).map_err(|e| SequenceError::Corrupt {
                key: String::from_utf8_lossy(key).into_owned(),
                detail: e.to_string(),
            })?;
        rec.check(key)?;
        Ok(rec)
    }

    fn encode(rec: &SequenceRecord) -> Vec<u8> {
        serde_json::to_vec(rec).expect("a sequence record serializes")
    }

    async fn read(
        &self,
        txn: &mut Txn<'_>,
        name: &SequenceName,
    ) -> Result<Option<SequenceRecord>, SequenceError> {
        let key = self.key(name);
        match txn.get(&key).await? {
            None => Ok(None),
            Some(raw) => Self::parse_named(&key, name, &raw).map(Some),
        }
    }

    /// [`parse`](Self::parse) of the record stored at `key` for `name`, which it must name.
    fn parse_named(
        key: &[u8],
        name: &SequenceName,
        raw: &[u8],
    ) -> Result<SequenceRecord, SequenceError> {
        let rec = Self::parse(key, raw)?;
        if rec.name != *name {
            return Err(SequenceError::Corrupt {
                key: String::from_utf8_lossy(key).into_owned(),
                detail: format!("the record names {}", rec.name),
            });
        }
        Ok(rec)
    }

    async fn read_count(&self, txn: &mut Txn<'_>) -> Result<u64, SequenceError> {
        let key = self.count_key();
        match txn.get(&key).await? {
            None => Ok(0),
            Some(raw) => std::str::from_utf8(&raw)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| SequenceError::Corrupt {
                    key: String::from_utf8_lossy(&key).into_owned(),
                    detail: "not a count".into(),
                }),
        }
    }

    /// Runs `f` on a new transaction until its writes commit, or gives up after
    /// [`MAX_ATTEMPTS`] conflicts. `f` hands the transaction back with what to return once its
    /// writes are applied.
    async fn transact<T, F, Fut>(&self, mut f: F) -> Result<T, SequenceError>
    where
        F: FnMut(Txn<'s>) -> Fut,
        Fut: std::future::Future<Output = Result<(Txn<'s>, T), SequenceError>>,
    {
        for attempt in 0..MAX_ATTEMPTS {
            let (txn, out) = f(Txn::new(self.store)).await?;
            match txn.commit().await? {
                Commit::Applied => return Ok(out),
                // Writers of one record that retry at once collide again: wait a random
                // while, up to twice as long after each conflict, so they fall out of step.
                Commit::Conflict => tokio::time::sleep(backoff(attempt)).await,
            }
        }
        Err(SequenceError::Contention {
            attempts: MAX_ATTEMPTS,
        })
    }

    /// Creates a sequence. A dropped sequence of the same name is replaced, starting above every
    /// value it reserved (`start` is raised to its `next` if below).
    pub async fn create(
        &self,
        name: &SequenceName,
        spec: SequenceSpec,
        now_unix_ms: u64,
    ) -> Result<SequenceRecord, SequenceError> {
        spec.validate()?;
        self.transact(|mut txn| {
            let spec = spec.clone();
            async move {
                let old = self.read(&mut txn, name).await?;
                let (next, revision, blocks) = match &old {
                    Some(r) if r.state == SequenceState::Live => {
                        return Err(SequenceError::Exists(name.clone()))
                    }
                    Some(r) => (spec.start.max(r.next), r.revision + 1, r.blocks),
                    None => {
                        let count = self.read_count(&mut txn).await?;
                        if count >= MAX_SEQUENCES {
                            return Err(SequenceError::TooMany);
                        }
                        txn.put(self.count_key(), (count + 1).to_string().into_bytes());
                        (spec.start, 1, 0)
                    }
                };
                let rec = SequenceRecord {
                    format: RECORD_FORMAT,
                    name: name.clone(),
                    state: SequenceState::Live,
                    spec,
                    next,
                    blocks,
                    revision,
                    created_unix_ms: now_unix_ms,
                    changed_unix_ms: now_unix_ms,
                };
                txn.put(self.key(name), Self::encode(&rec));
                Ok((txn, rec))
            }
        })
        .await
    }

    /// Changes a live sequence (see [`Alter`]): never so that a value a block already holds
    /// could be handed out again or fall above the maximum.
    pub async fn alter(
        &self,
        name: &SequenceName,
        change: Alter,
        now_unix_ms: u64,
    ) -> Result<SequenceRecord, SequenceError> {
        self.transact(|mut txn| {
            let change = change.clone();
            async move {
                let mut rec = self.live(&mut txn, name).await?;
                let refused = |detail: String| SequenceError::Refused {
                    name: name.clone(),
                    detail,
                };
                // Every value a block holds is below `next`.
                let held = (rec.blocks > 0).then(|| rec.next - 1);
                if let Some(restart) = change.restart {
                    if restart < rec.next {
                        return Err(refused(format!(
                            "cannot restart at {restart}: values below {} may have been handed out",
                            rec.next
                        )));
                    }
                    if restart > change.max.unwrap_or(rec.spec.max) {
                        return Err(refused(format!(
                            "cannot restart at {restart}: it is above the maximum"
                        )));
                    }
                    rec.next = restart;
                }
                if let Some(inc) = change.increment {
                    rec.spec.increment = inc;
                }
                if let Some(max) = change.max {
                    if let Some(held) = held.filter(|&h| max < h) {
                        return Err(refused(format!(
                            "cannot lower max to {max}: values up to {held} may have been handed out"
                        )));
                    }
                    rec.spec.max = max;
                }
                if let Some(b) = change.max_block {
                    rec.spec.max_block = b;
                }
                rec.spec.validate()?;
                rec.revision += 1;
                rec.changed_unix_ms = now_unix_ms;
                txn.put(self.key(name), Self::encode(&rec));
                Ok((txn, rec))
            }
        })
        .await
    }

    /// Drops a sequence: calls are refused from then on. The record stays as a tombstone
    /// (see the module docs) unless `forget`, which also removes a dropped one's tombstone.
    pub async fn drop(
        &self,
        name: &SequenceName,
        forget: bool,
        now_unix_ms: u64,
    ) -> Result<SequenceRecord, SequenceError> {
        self.transact(|mut txn| async move {
            let mut rec = self
                .read(&mut txn, name)
                .await?
                .ok_or_else(|| SequenceError::NotFound(name.clone()))?;
            if rec.state == SequenceState::Dropped && !forget {
                return Err(SequenceError::NotFound(name.clone()));
            }
            rec.state = SequenceState::Dropped;
            rec.revision += 1;
            rec.changed_unix_ms = now_unix_ms;
            if forget {
                let count = self.read_count(&mut txn).await?;
                txn.put(
                    self.count_key(),
                    count.saturating_sub(1).to_string().into_bytes(),
                );
                txn.delete(self.key(name));
            } else {
                txn.put(self.key(name), Self::encode(&rec));
            }
            Ok((txn, rec))
        })
        .await
    }

    async fn live(
        &self,
        txn: &mut Txn<'_>,
        name: &SequenceName,
    ) -> Result<SequenceRecord, SequenceError> {
        match self.read(txn, name).await? {
            Some(r) if r.state == SequenceState::Live => Ok(r),
            _ => Err(SequenceError::NotFound(name.clone())),
        }
    }

    /// One sequence as stored, dropped ones included.
    pub async fn get(&self, name: &SequenceName) -> Result<Option<SequenceRecord>, SequenceError> {
        let key = self.key(name);
        match self.store.get(&key).await? {
            None => Ok(None),
            Some(e) => Self::parse(&key, &e.value).map(Some),
        }
    }

    /// Every sequence of the namespace, dropped ones included, in name order.
    pub async fn list(&self) -> Result<Vec<SequenceRecord>, SequenceError> {
        let mut out = Vec::new();
        for e in self.store.scan(&self.records_prefix()).await? {
            out.push(Self::parse(&e.key, &e.value)?);
        }
        Ok(out)
    }

    /// Reserves the next block of at most `want` values (1 ..= [`MAX_BLOCK`]) in one store
    /// commit: fewer when the maximum is nearer, [`SequenceError::Exhausted`] when no value is
    /// left. A commit whose outcome is unknown is an error: its values are never handed out.
    /// A conflict (another holder moved the record first) is tried again after a random
    /// backoff, up to [`MAX_ATTEMPTS`] times.
    pub async fn reserve(&self, name: &SequenceName, want: u64) -> Result<Block, SequenceError> {
        for attempt in 0..MAX_ATTEMPTS {
            match self.reserve_once(name, want).await? {
                Some(block) => return Ok(block),
                None => tokio::time::sleep(backoff(attempt)).await,
            }
        }
        Err(SequenceError::Contention {
            attempts: MAX_ATTEMPTS,
        })
    }

    /// One attempt of [`reserve`](Self::reserve): read the record, reserve, commit if the
    /// record did not change in between. `None`: it did (another holder reserved first);
    /// nothing was written, and the caller may try again at once with what it wants by then
    /// (the strict mode does: calls that arrived meanwhile join the next attempt).
    pub async fn reserve_once(
        &self,
        name: &SequenceName,
        want: u64,
    ) -> Result<Option<Block>, SequenceError> {
        self.reserve_once_for(name, want, |left| want.min(left), &mut None)
            .await
    }

    /// [`reserve_once`](Self::reserve_once) for calls of `sizes` values each (a strict
    /// commit): near the maximum it reserves only what whole calls take
    /// ([`strict::fitting`]), so no value is reserved that no call is answered with.
    ///
    /// `seen` is the record as the caller's last attempt left it: with it, the attempt reads
    /// nothing and is one store round trip (its commit is checked against that version, so a
    /// record changed since is a conflict, never a value twice); the attempt leaves in it
    /// what it learnt (the record it wrote, at the version the store gave it, or the record
    /// another holder wrote first, which the store returned with the conflict).
    pub async fn reserve_once_fitting(
        &self,
        name: &SequenceName,
        sizes: &[u64],
        seen: &mut Option<Entry>,
    ) -> Result<Option<Block>, SequenceError> {
        let want: u64 = sizes.iter().sum();
        self.reserve_once_for(name, want, |left| strict::fitting(sizes, left), seen)
            .await
    }

    async fn reserve_once_for(
        &self,
        name: &SequenceName,
        want: u64,
        count_of: impl FnOnce(u64) -> u64,
        seen: &mut Option<Entry>,
    ) -> Result<Option<Block>, SequenceError> {
        if want == 0 || want > MAX_BLOCK {
            return Err(SequenceError::BadSpec(format!(
                "a block holds 1 ..= {MAX_BLOCK} values, not {want}"
            )));
        }
        let key = self.key(name);
        let entry = match seen.take().filter(|e| e.key == key) {
            Some(e) => Some(e),
            None => self.store.get(&key).await?,
        };
        let Some(entry) = entry else {
            return Err(SequenceError::NotFound(name.clone()));
        };
        let mut rec = Self::parse_named(&key, name, &entry.value)?;
        if rec.state != SequenceState::Live {
            return Err(SequenceError::NotFound(name.clone()));
        }
        let count = count_of(rec.remaining()).min(want);
        if count == 0 {
            return Err(SequenceError::Exhausted {
                name: name.clone(),
                max: rec.spec.max,
            });
        }
        let block = Block {
            first: rec.next,
            count,
            step: rec.spec.increment,
            revision: rec.revision,
            mode: rec.spec.mode,
            max_block: rec.spec.max_block,
            max: rec.spec.max,
            // count <= what was left, and the block takes exactly count of it.
            remaining: rec.remaining() - count,
        };
        // At most max + increment (the remaining count keeps the last value <= max), and
        // max + increment <= 2 × MAX_VALUE < u64::MAX.
        rec.next = block.last() + block.step;
        rec.blocks += 1;
        debug_assert_eq!(block.remaining, rec.remaining());
        assert!(
            block.first >= 1 && block.last() <= rec.spec.max,
            "a block stays within 1 ..= max"
        );
        let value = Self::encode(&rec);
        let checks = [Check {
            key: key.clone(),
            version: entry.version,
        }];
        let writes = [Write::Put {
            key: key.clone(),
            value: value.clone(),
        }];
        match self.store.commit_or_get(&checks, &writes, &key).await? {
            CommitOrGet::Applied(version) => {
                *seen = version.map(|version| Entry {
                    key,
                    value,
                    version,
                });
                Ok(Some(block))
            }
            CommitOrGet::Conflict(now) => {
                *seen = now;
                Ok(None)
            }
        }
    }
}
