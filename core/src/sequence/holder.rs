//! One process's holder of every sequence it is asked for: the async side of [`Blocks`] and
//! [`Batches`], written once for `idgen serve` and the embedded generator.
//!
//! ```text
//!   caller (a shard's request, an application thread's task)
//!     holder.next_values(name, n) ──▶ the sequence's state (a mutex, never held across an await)
//!        dense:  take from the blocks; ask for the next block when low ─┐
//!        strict: join the waiting calls; start a commit when none runs ─┤
//!                                                                        ▼
//!     reservations run on the holder's runtime (the node's control thread, the embedded
//!     generator's background runtime): one store transaction each, never on the caller's thread
//! ```
//!
//! A sequence is learnt on first use (its record says its mode); a reservation that finds it
//! dropped or changed in mode forgets what was held. A failed reservation is answered to the
//! calls waiting for it and retried by the next call: a store that comes back heals the
//! holder without a restart. Nothing here waits on the clock but a caller's deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

use super::dense::Blocks;
use super::strict::{Batches, Values};
use super::{Block, Mode, SequenceError, SequenceName, Sequences, MAX_BLOCK};
use crate::histogram::Histogram;
use crate::store::{BoxFuture, KvStore};

/// What a [`Forward`] answers: per call, its mode and values, or `None` (committed here).
pub type Forwarded = Vec<Option<(Mode, Vec<u64>)>>;

/// Where a holder sends the strict calls another node commits (`idgen serve`'s forwarder,
/// see [`super::committer`]). Forwarding is only ever a choice of where the commit happens:
/// every answer still comes from a reservation committed after its call began.
pub trait Forward: Send + Sync {
    /// Strict calls of `counts` values of `name`, all begun, sent to the committer and answered
    /// there by `until`: one entry per call, `Some` with its values (increasing, above every
    /// earlier call's) or `None` for a call the committer did not answer (it is this node,
    /// there is none, it cannot be reached in time, or it refused): the holder commits those
    /// itself. Never an error: a forward that fails costs only time.
    fn forward<'a>(
        &'a self,
        name: &'a SequenceName,
        counts: &'a [u64],
        until: tokio::time::Instant,
    ) -> BoxFuture<'a, Forwarded>;
}

/// The most calls one strict sequence keeps waiting on one holder; more are refused as busy.
pub const MAX_WAITING: usize = 65_536;
/// How long a strict commit that keeps losing the record to other holders is tried again
/// before its calls are answered with the contention (their own deadlines come first).
const CONTENTION_RETRY_FOR: Duration = Duration::from_secs(10);
/// How long a failed reservation is the answer to calls that find nothing held, instead of a
/// new reservation each.
const FAILURE_ANSWERED_FOR_MS: u64 = 1_000;
/// The most sequences one holder keeps state for (at most the namespace's bound).
pub const MAX_HELD: usize = super::MAX_SEQUENCES as usize;

/// Why a call got no values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// The sequence said no (unknown, dropped, used up) or the count is out of range.
    #[error(transparent)]
    Sequence(#[from] SequenceError),
    /// No reservation came in time (the store is slow or unreachable): retry, here or elsewhere.
    #[error("no values within {0:?}: the store did not answer a reservation in time")]
    Timeout(Duration),
    /// Too many calls wait for this sequence on this holder.
    #[error("too many calls wait for this sequence")]
    Busy,
}

type Answer = oneshot::Sender<Result<Values, SequenceError>>;

/// What a holder knows of one sequence.
enum Held {
    Dense {
        blocks: Blocks,
        /// Why the last reservation failed, and when (the holder's ms): answered to a call
        /// that finds nothing held within [`FAILURE_ANSWERED_FOR_MS`] of it; later calls ask again.
        failed: Option<(SequenceError, u64)>,
    },
    Strict(Batches<Answer>),
}

impl Held {
    fn mode(&self) -> Mode {
        match self {
            Held::Dense { .. } => Mode::Dense,
            Held::Strict(_) => Mode::Strict,
        }
    }
}

struct Seq {
    state: Mutex<Option<Held>>,
    /// Wakes dense calls waiting for a block.
    arrived: Notify,
    stats: SeqStats,
}

/// Upper bounds (inclusive, µs) of the reservation-duration histogram's buckets: 0.5 ms to 10 s.
pub const COMMIT_BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// What one holder counts of one sequence (read by the node's metrics scrape).
#[derive(Default)]
pub struct SeqStats {
    /// Values answered to callers.
    pub values: AtomicU64,
    /// Reservations committed (blocks, or strict commits).
    pub commits: AtomicU64,
    /// Reservations that failed (or whose outcome is unknown).
    pub commit_failures: AtomicU64,
    /// Durations of the reservations, failed ones included, µs.
    pub commit_duration: Histogram<14>,
    /// Values left below the maximum after the last reservation (`u64::MAX` before one).
    pub remaining: AtomicU64,
    /// Values of [`values`](Self::values) that another node committed (strict calls
    /// forwarded to the committer, [`Forward`]).
    pub forwarded: AtomicU64,
}

impl SeqStats {
    fn reserved(&self, started: Instant, got: &Result<Block, SequenceError>) {
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.commit_duration.record(&COMMIT_BUCKETS_US, us);
        match got {
            Ok(b) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                self.remaining.store(b.remaining, Ordering::Relaxed);
            }
            // Nothing was written: no commit, and nothing left.
            Err(SequenceError::Exhausted { .. }) => {
                self.remaining.store(0, Ordering::Relaxed);
            }
            Err(_) => {
                self.commit_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The sequences of one namespace, as one process hands them out.
pub struct Holder {
    store: Arc<dyn KvStore>,
    namespace: String,
    rt: tokio::runtime::Handle,
    seqs: Mutex<HashMap<SequenceName, Arc<Seq>>>,
    /// Milliseconds for block sizing (the holder's own monotonic clock).
    started: Instant,
    /// Where strict calls go when another node commits them (set once by `idgen serve`).
    forward: OnceLock<Arc<dyn Forward>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding it left plain data: still consistent enough to refuse or serve.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Holder {
    /// A holder of `namespace`'s sequences in `store`, running its reservations on `rt`.
    pub fn new(store: Arc<dyn KvStore>, namespace: &str, rt: tokio::runtime::Handle) -> Arc<Self> {
        Arc::new(Holder {
            store,
            namespace: namespace.to_string(),
            rt,
            seqs: Mutex::new(HashMap::new()),
            started: Instant::now(),
            forward: OnceLock::new(),
        })
    }

    /// Sends strict calls through `forward` from now on (once; a second call is ignored).
    pub fn set_forward(&self, forward: Arc<dyn Forward>) {
        let _ = self.forward.set(forward);
    }

    /// The runtime the reservations run on.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.rt
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn seq(&self, name: &SequenceName) -> Result<Arc<Seq>, HoldError> {
        let mut seqs = lock(&self.seqs);
        if let Some(s) = seqs.get(name) {
            return Ok(Arc::clone(s));
        }
        if seqs.len() >= MAX_HELD {
            // Forget sequences nothing is held for (dropped ones, mostly).
            seqs.retain(|_, s| lock(&s.state).is_some());
            if seqs.len() >= MAX_HELD {
                return Err(HoldError::Busy);
            }
        }
        let s = Arc::new(Seq {
            state: Mutex::new(None),
            arrived: Notify::new(),
            stats: SeqStats {
                remaining: AtomicU64::new(u64::MAX),
                ..SeqStats::default()
            },
        });
        seqs.insert(name.clone(), Arc::clone(&s));
        Ok(s)
    }

    /// `n` values of sequence `name` (1 ..= [`MAX_BLOCK`]), in increasing order, within
    /// `deadline`. Dense: from the blocks held (a store round trip only when they ran out).
    /// Strict: from a reservation committed after this call began.
    pub async fn next_values(
        self: &Arc<Self>,
        name: &SequenceName,
        n: u64,
        deadline: Duration,
    ) -> Result<Vec<u64>, HoldError> {
        self.next_values_of(name, n, deadline)
            .await
            .map(|(_, values)| values)
    }

    /// [`next_values`](Self::next_values), with the mode of the sequence that answered (the
    /// ID protocol's VALUES says it, so a client knows whether it may prefetch).
    pub async fn next_values_of(
        self: &Arc<Self>,
        name: &SequenceName,
        n: u64,
        deadline: Duration,
    ) -> Result<(Mode, Vec<u64>), HoldError> {
        let mut each = self.next_values_each(name, &[n], deadline).await;
        each.pop().unwrap_or(Err(HoldError::Timeout(deadline)))
    }

    /// Several calls of one sequence that arrived together (pipelined requests of one
    /// connection), each answered on its own, in order: dense ones one after another from the
    /// blocks; strict ones all waiting for the same commit (each gets its values, or is refused
    /// on its own if the maximum comes between them). Every call's values are above the
    /// previous call's.
    pub async fn next_values_each(
        self: &Arc<Self>,
        name: &SequenceName,
        counts: &[u64],
        deadline: Duration,
    ) -> Vec<Result<(Mode, Vec<u64>), HoldError>> {
        self.values_each(name, counts, deadline, true).await
    }

    /// [`next_values_each`](Self::next_values_each) committed here, never forwarded (the calls
    /// another node forwarded to this one: GET_VALUES_HERE).
    pub async fn next_values_each_here(
        self: &Arc<Self>,
        name: &SequenceName,
        counts: &[u64],
        deadline: Duration,
    ) -> Vec<Result<(Mode, Vec<u64>), HoldError>> {
        self.values_each(name, counts, deadline, false).await
    }

    async fn values_each(
        self: &Arc<Self>,
        name: &SequenceName,
        counts: &[u64],
        deadline: Duration,
        may_forward: bool,
    ) -> Vec<Result<(Mode, Vec<u64>), HoldError>> {
        let all = |e: HoldError| counts.iter().map(|_| Err(e.clone())).collect::<Vec<_>>();
        if let Some(&n) = counts.iter().find(|&&n| n == 0 || n > MAX_BLOCK) {
            return all(SequenceError::BadSpec(format!(
                "a call takes 1 ..= {MAX_BLOCK} values, not {n}"
            ))
            .into());
        }
        let until = tokio::time::Instant::now() + deadline;
        let seq = match self.seq(name) {
            Ok(s) => s,
            Err(e) => return all(e),
        };
        let mode = lock(&seq.state).as_ref().map(Held::mode);
        let mode = match mode {
            Some(m) => m,
            None => match self.learn(name, &seq, until, deadline).await {
                Ok(m) => m,
                Err(e) => return all(e),
            },
        };
        let got = match mode {
            Mode::Dense => {
                let mut got = Vec::with_capacity(counts.len());
                for &n in counts {
                    got.push(self.dense(name, &seq, n, until, deadline).await);
                }
                got
            }
            Mode::Strict => match self.forward.get().filter(|_| may_forward) {
                Some(fwd) => {
                    self.strict_forwarded(fwd.as_ref(), name, &seq, counts, until, deadline)
                        .await
                }
                None => self.strict(name, &seq, counts, until, deadline).await,
            },
        };
        got.into_iter()
            .map(|r| {
                r.map(|v| {
                    seq.stats
                        .values
                        .fetch_add(v.len() as u64, Ordering::Relaxed);
                    (mode, v)
                })
            })
            .collect()
    }

    /// Every sequence this holder has been asked for, in name order, with what it counted.
    pub fn each_stats(&self, mut f: impl FnMut(&SequenceName, &SeqStats)) {
        let seqs: Vec<(SequenceName, Arc<Seq>)> = {
            let map = lock(&self.seqs);
            let mut v: Vec<_> = map
                .iter()
                .map(|(n, s)| (n.clone(), Arc::clone(s)))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        for (n, s) in &seqs {
            f(n, &s.stats);
        }
    }

    /// Reads the record to learn the sequence's mode (first use on this holder).
    async fn learn(
        &self,
        name: &SequenceName,
        seq: &Seq,
        until: tokio::time::Instant,
        deadline: Duration,
    ) -> Result<Mode, HoldError> {
        let store = Arc::clone(&self.store);
        let ns = self.namespace.clone();
        let n = name.clone();
        let read = self
            .rt
            .spawn(async move { Sequences::new(store.as_ref(), &ns).get(&n).await });
        let rec =
            match tokio::time::timeout_at(until, read).await {
                Err(_) => return Err(HoldError::Timeout(deadline)),
                Ok(Err(join)) => {
                    return Err(SequenceError::Store(crate::store::StoreError::Unavailable(
                        format!("the reservation task stopped: {join}"),
                    ))
                    .into())
                }
                Ok(Ok(r)) => r?,
            };
        let Some(rec) = rec.filter(|r| r.state == super::SequenceState::Live) else {
            // A name the namespace does not have takes no place here (nor a metrics series):
            // asking for made-up names cannot fill the holder.
            let mut seqs = lock(&self.seqs);
            let unused = seqs.get(name).is_some_and(|s| {
                std::ptr::eq(Arc::as_ptr(s), seq)
                    && lock(&s.state).is_none()
                    && s.stats.values.load(Ordering::Relaxed) == 0
            });
            if unused {
                seqs.remove(name);
            }
            return Err(SequenceError::NotFound(name.clone()).into());
        };
        let mut st = lock(&seq.state);
        let held = st.get_or_insert_with(|| match rec.spec.mode {
            Mode::Dense => Held::Dense {
                blocks: Blocks::new(rec.spec.max_block),
                failed: None,
            },
            Mode::Strict => Held::Strict(Batches::new()),
        });
        Ok(held.mode())
    }

    async fn dense(
        self: &Arc<Self>,
        name: &SequenceName,
        seq: &Arc<Seq>,
        n: u64,
        until: tokio::time::Instant,
        deadline: Duration,
    ) -> Result<Vec<u64>, HoldError> {
        let mut out = Vec::with_capacity(n.min(4096) as usize);
        loop {
            // Registered before the state is read, so a block that lands in between wakes it.
            let arrived = seq.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let mut st = lock(&seq.state);
                let Some(Held::Dense { blocks, failed }) = st.as_mut() else {
                    // Forgotten (dropped, or recreated in the other mode) while we waited.
                    return Err(SequenceError::NotFound(name.clone()).into());
                };
                let want = n - out.len() as u64;
                let now = self.now_ms();
                if out.is_empty() && want <= blocks.max_block() {
                    // All or nothing where it can be: a call refused at the maximum takes no
                    // value (no gap), and what is left goes to smaller calls.
                    blocks.take_whole(want, now, &mut out);
                } else {
                    blocks.take(want, now, &mut out);
                }
                if out.len() as u64 != n && !blocks.is_fetching() {
                    let recent = failed
                        .take()
                        .filter(|(_, at)| now.saturating_sub(*at) < FAILURE_ANSWERED_FOR_MS);
                    if let Some((e, _)) = recent {
                        // Nothing more held and the last reservation failed: say why (values
                        // taken for this call are a gap). The next call asks again.
                        return Err(e.into());
                    }
                }
                if let Some(size) = blocks.start_fetch() {
                    self.fetch(name.clone(), Arc::clone(seq), size);
                }
                if out.len() as u64 == n {
                    return Ok(out);
                }
            }
            if tokio::time::timeout_at(until, arrived).await.is_err() {
                return Err(HoldError::Timeout(deadline));
            }
        }
    }

    /// Reserves a dense block on the holder's runtime; the calls waiting are woken.
    fn fetch(self: &Arc<Self>, name: SequenceName, seq: Arc<Seq>, size: u64) {
        let me = Arc::clone(self);
        self.rt.spawn(async move {
            let started = Instant::now();
            let got = Sequences::new(me.store.as_ref(), &me.namespace)
                .reserve(&name, size)
                .await;
            seq.stats.reserved(started, &got);
            let now = me.now_ms();
            let mut st = lock(&seq.state);
            match (st.as_mut(), got) {
                (Some(Held::Dense { blocks, failed }), Ok(b)) if b.mode == Mode::Dense => {
                    match blocks.fetched(b, b.max_block, now) {
                        Ok(()) => *failed = None,
                        Err(behind) => {
                            let corrupt = SequenceError::Corrupt {
                                key: String::from_utf8_lossy(
                                    &Sequences::new(me.store.as_ref(), &me.namespace).key(&name),
                                )
                                .into_owned(),
                                detail: behind.to_string(),
                            };
                            *failed = Some((corrupt, now));
                        }
                    }
                }
                (Some(Held::Dense { blocks, failed }), Err(e)) => {
                    blocks.fetch_failed();
                    if matches!(e, SequenceError::Contention { .. }) {
                        // Other holders won the record this time: the waiting calls ask again
                        // (within their deadlines) rather than fail.
                    } else if matches!(e, SequenceError::NotFound(_)) {
                        // Dropped: nothing held is handed out any more.
                        blocks.discard();
                        *st = None;
                    } else {
                        *failed = Some((e, now));
                    }
                }
                // Recreated in the other mode: forget the dense state; the next call learns.
                (Some(Held::Dense { .. }), Ok(_)) => *st = None,
                _ => {}
            }
            drop(st);
            seq.arrived.notify_waiters();
        });
    }

    /// Strict calls sent to the committer first; those it did not answer are committed here.
    async fn strict_forwarded(
        self: &Arc<Self>,
        fwd: &dyn Forward,
        name: &SequenceName,
        seq: &Arc<Seq>,
        counts: &[u64],
        until: tokio::time::Instant,
        deadline: Duration,
    ) -> Vec<Result<Vec<u64>, HoldError>> {
        let answered = fwd.forward(name, counts, until).await;
        let mut out: Vec<Option<Result<Vec<u64>, HoldError>>> = Vec::with_capacity(counts.len());
        let mut left = Vec::new();
        // Only the calls before the first one the committer did not answer keep its values:
        // the rest are committed here, after it, so each call's values stay above the
        // previous call's.
        for (i, &n) in counts.iter().enumerate() {
            match answered.get(i).cloned().flatten() {
                Some((_, values)) if values.len() as u64 == n && left.is_empty() => {
                    seq.stats
                        .forwarded
                        .fetch_add(values.len() as u64, Ordering::Relaxed);
                    out.push(Some(Ok(values)));
                }
                _ => {
                    left.push(n);
                    out.push(None);
                }
            }
        }
        if !left.is_empty() {
            let mut here = self
                .strict(name, seq, &left, until, deadline)
                .await
                .into_iter();
            for slot in out.iter_mut().filter(|s| s.is_none()) {
                *slot = here.next();
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or(Err(HoldError::Timeout(deadline))))
            .collect()
    }

    /// Strict calls of `counts` values each, queued together for the next commit (their
    /// order is their values' order), each answered on its own.
    async fn strict(
        self: &Arc<Self>,
        name: &SequenceName,
        seq: &Arc<Seq>,
        counts: &[u64],
        until: tokio::time::Instant,
        deadline: Duration,
    ) -> Vec<Result<Vec<u64>, HoldError>> {
        let mut answers = Vec::with_capacity(counts.len());
        {
            let mut st = lock(&seq.state);
            let Some(Held::Strict(q)) = st.as_mut() else {
                let gone = HoldError::from(SequenceError::NotFound(name.clone()));
                return counts.iter().map(|_| Err(gone.clone())).collect();
            };
            if q.waiting() + counts.len() > MAX_WAITING {
                return counts.iter().map(|_| Err(HoldError::Busy)).collect();
            }
            for &n in counts {
                let (tx, rx) = oneshot::channel();
                q.push(tx, n);
                answers.push(rx);
            }
            if q.start_commit().is_some() {
                self.commit(name.clone(), Arc::clone(seq), q.in_flight_sizes());
            }
        }
        let mut got = Vec::with_capacity(counts.len());
        for rx in answers {
            got.push(match tokio::time::timeout_at(until, rx).await {
                Err(_) => Err(HoldError::Timeout(deadline)),
                // The holder let the call go without an answer (the sequence was forgotten).
                Ok(Err(_)) => Err(SequenceError::NotFound(name.clone()).into()),
                Ok(Ok(r)) => r.map(|v| v.iter().collect()).map_err(HoldError::from),
            });
        }
        got
    }

    /// Runs strict commits on the holder's runtime, one after another while calls wait. An
    /// attempt that loses the record to another holder is tried again at once, with the calls
    /// that arrived meanwhile (so contention grows the commits instead of queueing calls
    /// behind them). Never after a backoff: each attempt is one store round trip, which paces
    /// the retries (one attempt in flight per holder and sequence), and a holder that waited
    /// longer after each loss would leave the record to whichever holder never loses, the
    /// busiest: its neighbours' calls would starve.
    fn commit(self: &Arc<Self>, name: SequenceName, seq: Arc<Seq>, sizes: Vec<u64>) {
        let me = Arc::clone(self);
        self.rt.spawn(async move {
            let mut sizes = sizes;
            let mut contended_since: Option<Instant> = None;
            let mut lost = 0u32;
            // The record as the last attempt left it: the next attempt reads nothing.
            let mut seen = None;
            loop {
                let started = Instant::now();
                let got = match Sequences::new(me.store.as_ref(), &me.namespace)
                    .reserve_once_fitting(&name, &sizes, &mut seen)
                    .await
                {
                    Ok(Some(block)) => Ok(block),
                    Ok(None) => Err(SequenceError::Contention {
                        attempts: lost.saturating_add(1),
                    }),
                    Err(e) => Err(e),
                };
                seq.stats.reserved(started, &got);
                // What next, decided under the lock; any pause comes after it is let go.
                let next = {
                    let mut st = lock(&seq.state);
                    let Some(Held::Strict(q)) = st.as_mut() else {
                        return;
                    };
                    match got {
                        Ok(b) if b.mode == Mode::Strict => {
                            answer(q.committed(b), &name, &b);
                            Some(q.start_commit().map(|_| q.in_flight_sizes()))
                        }
                        Ok(_) => {
                            // Recreated as dense: these values are not strict ones. Forget.
                            for tx in q.drain_all() {
                                let _ = tx.send(Err(SequenceError::NotFound(name.clone())));
                            }
                            *st = None;
                            return;
                        }
                        // Other holders won the record this time: the calls wait on (within
                        // their deadlines) for the same commit, tried again with the calls
                        // that came meanwhile.
                        Err(SequenceError::Contention { .. })
                            if contended_since.get_or_insert(started).elapsed()
                                < CONTENTION_RETRY_FOR =>
                        {
                            if q.retry_commit().is_some() {
                                sizes = q.in_flight_sizes();
                            }
                            lost = lost.saturating_add(1);
                            None
                        }
                        Err(e) => {
                            let gone = matches!(e, SequenceError::NotFound(_));
                            for tx in q.failed() {
                                let _ = tx.send(Err(e.clone()));
                            }
                            if gone {
                                for tx in q.drain_all() {
                                    let _ = tx.send(Err(e.clone()));
                                }
                                *st = None;
                                return;
                            }
                            Some(q.start_commit().map(|_| q.in_flight_sizes()))
                        }
                    }
                };
                // `None`: the same commit, tried again at once (after letting the runtime's
                // other tasks run, for a store that answers without waiting); `Some(next)`:
                // this commit is over, and the next one.
                let Some(next) = next else {
                    tokio::task::yield_now().await;
                    continue;
                };
                contended_since = None;
                lost = 0;
                match next {
                    Some(next) => sizes = next,
                    None => return,
                }
            }
        });
    }
}

fn answer(done: Vec<(Answer, Option<Values>)>, name: &SequenceName, b: &Block) {
    for (tx, v) in done {
        let r = v.ok_or_else(|| SequenceError::Exhausted {
            name: name.clone(),
            max: b.max,
        });
        let _ = tx.send(r);
    }
}
