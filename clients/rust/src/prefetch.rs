//! [`PrefetchPool`]: a [`Pool`] with a local buffer of IDs, refilled in the background.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use idgen_id::Layout;
use tokio::sync::Notify;

use crate::{Error, Pool, PoolOptions};

/// Buffer sizes for a [`PrefetchPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchOptions {
    /// When a call leaves fewer IDs than this in the buffer, a background refill starts.
    /// Default 250. Taken as at most `high_water - 1`.
    pub low_water: u32,
    /// A refill tops the buffer up to this many IDs with one
    /// [`Pool::next_ids`](crate::Pool::next_ids) call; the buffer never holds more.
    /// Default 1000. Taken as at least 1.
    pub high_water: u32,
}

impl Default for PrefetchOptions {
    fn default() -> Self {
        PrefetchOptions {
            low_water: 250,
            high_water: 1000,
        }
    }
}

/// Counters of a [`PrefetchPool`], from [`PrefetchPool::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefetchStats {
    /// IDs in the buffer now.
    pub buffered: usize,
    /// The most IDs the buffer has held (never above `high_water`).
    pub max_buffered: usize,
    /// Refills that succeeded (each one `next_ids` call on the pool).
    pub refills: u64,
    /// Refills that failed (after the pool's own failover).
    pub failed_refills: u64,
    /// IDs received from the pool.
    pub fetched: u64,
    /// Calls that found the buffer empty and had to wait for a refill.
    pub empty_waits: u64,
}

/// A [`Pool`] that hands out IDs from a local buffer, refilled in the background.
///
/// [`next_id`](PrefetchPool::next_id) takes the oldest ID from the buffer, without a
/// round trip. When that leaves fewer than
/// [`low_water`](PrefetchOptions::low_water) IDs, a background task tops the buffer up
/// to [`high_water`](PrefetchOptions::high_water) with **one**
/// [`Pool::next_ids`] call (so with the pool's failover and all-or-nothing batches). At
/// most one refill runs at a time, so the buffer never holds more than `high_water` IDs.
/// A caller that finds the buffer empty waits for the refill, for at most the pool's
/// [`call_deadline`](PoolOptions::call_deadline), and gets [`Error::Timeout`] after
/// that, or the refill's error if the refill fails. After a failed refill, background
/// refills pause for the pool's `backoff_min`; a caller facing an empty buffer always
/// starts one.
///
/// Concurrent callers always get distinct IDs (each ID is taken from the buffer once).
///
/// # Ordering guarantees
///
/// * IDs from one refill are strictly increasing, and the buffer hands them out in
///   order, so the IDs one caller receives are increasing **while they come from one
///   refill**.
/// * Successive refills from the same connection continue to increase. Refills served by
///   different nodes (after a failover) or connections may not: a caller can then receive
///   an ID lower than one it got before. Never rely on prefetched IDs being monotonic
///   across refills; they are unique and roughly time-ordered, nothing more.
///
/// # What prefetching costs
///
/// * **IDs age in the buffer.** An ID's timestamp is when the node issued it, not when
///   your code received it; with prefetching it is older than the hand-out by up to the
///   time your process takes to drain the buffer (`high_water` IDs at your request
///   rate). At 10 IDs per second and `high_water = 1000` that is over a minute and a
///   half. Size the buffer for about a second of demand, or use [`Pool`] directly, if
///   the embedded time must be close to the moment of use.
/// * **A process that exits or crashes loses its buffer**: those IDs are never used.
///   That leaves gaps in the ID space, never duplicates (the server never issues an ID
///   twice). Dropping the pool discards the buffer the same way.
///
/// # Example
///
/// ```no_run
/// use idgen_client::{PoolOptions, PrefetchOptions, PrefetchPool};
///
/// # async fn run() -> Result<(), idgen_client::Error> {
/// let ids = PrefetchPool::connect(
///     &["10.0.0.1:7420", "10.0.0.2:7420"],
///     PoolOptions::default(),
///     PrefetchOptions { low_water: 500, high_water: 2000 },
/// )
/// .await?;
/// for _ in 0..10_000 {
///     let id = ids.next_id().await?; // almost always without a round trip
///     # let _ = id;
/// }
/// println!("{:?}", ids.stats());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PrefetchPool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Pool,
    low: usize,
    high: usize,
    buffer: Mutex<Buffer>,
    /// Woken (all waiters) when a refill completes, successfully or not.
    refilled: Notify,
}

#[derive(Debug, Default)]
struct Buffer {
    ids: VecDeque<u64>,
    refilling: bool,
    /// Completed refills, failed ones included.
    generation: u64,
    /// The last completed refill's error (`None` if it succeeded) and when it failed.
    last_error: Option<(Error, Instant)>,
    stats: PrefetchStats,
}

impl PrefetchPool {
    /// Prefetch through `pool` with `options`, and start filling the buffer at once.
    ///
    /// Must be called within a Tokio runtime; refills run as tasks on it.
    pub fn new(pool: Pool, options: PrefetchOptions) -> PrefetchPool {
        let high = options.high_water.max(1) as usize;
        let low = (options.low_water as usize).min(high - 1);
        let this = PrefetchPool {
            inner: Arc::new(Inner {
                pool,
                low,
                high,
                buffer: Mutex::new(Buffer::default()),
                refilled: Notify::new(),
            }),
        };
        this.start_refill(&mut this.inner.lock(), true);
        this
    }

    /// [`Pool::connect`], then [`PrefetchPool::new`].
    pub async fn connect(
        addrs: &[impl ToString],
        pool_options: PoolOptions,
        options: PrefetchOptions,
    ) -> Result<PrefetchPool, Error> {
        Ok(PrefetchPool::new(
            Pool::connect(addrs, pool_options).await?,
            options,
        ))
    }

    /// [`Pool::connect_tls`], then [`PrefetchPool::new`].
    #[cfg(feature = "tls")]
    pub async fn connect_tls(
        addrs: &[impl ToString],
        pool_options: PoolOptions,
        options: PrefetchOptions,
        tls: &crate::TlsConfig,
    ) -> Result<PrefetchPool, Error> {
        Ok(PrefetchPool::new(
            Pool::connect_tls(addrs, pool_options, tls).await?,
            options,
        ))
    }

    /// One ID from the buffer (see the type's docs for waiting, errors and ordering).
    pub async fn next_id(&self) -> Result<u64, Error> {
        // Taking from the buffer never waits; spend task budget so that a caller in a
        // tight loop still yields now and then, and refills on the same runtime thread
        // (current-thread runtimes) get to run before the buffer runs dry.
        tokio::task::coop::consume_budget().await;
        let deadline = tokio::time::Instant::now() + self.inner.pool.options().call_deadline;
        let mut seen_generation = None;
        // Each pass either returns or waits for a refill to complete; the deadline bounds
        // the passes.
        loop {
            let notified = self.inner.refilled.notified();
            tokio::pin!(notified);
            {
                let mut b = self.inner.lock();
                if let Some(id) = b.ids.pop_front() {
                    self.start_refill(&mut b, false);
                    return Ok(id);
                }
                match seen_generation {
                    None => {
                        seen_generation = Some(b.generation);
                        b.stats.empty_waits += 1;
                    }
                    // A refill completed since we started waiting and left nothing: it
                    // failed (or others took its IDs); report its error if it has one.
                    Some(g) if g != b.generation => {
                        if let Some((e, _)) = &b.last_error {
                            return Err(e.clone());
                        }
                        seen_generation = Some(b.generation);
                    }
                    Some(_) => {}
                }
                self.start_refill(&mut b, true);
                // Register before unlocking, so a refill completing right after cannot
                // be missed.
                notified.as_mut().enable();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Error::Timeout);
            }
        }
    }

    /// IDs in the buffer now.
    pub fn buffered(&self) -> usize {
        self.inner.lock().ids.len()
    }

    /// Counters (buffer level, refills, waits).
    pub fn stats(&self) -> PrefetchStats {
        let b = self.inner.lock();
        PrefetchStats {
            buffered: b.ids.len(),
            ..b.stats
        }
    }

    /// The pool refills go through (for batches: [`Pool::next_ids`] is one round trip
    /// anyway, and keeps the buffer for single IDs).
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The cluster's ID layout.
    pub fn layout(&self) -> Layout {
        self.inner.pool.layout()
    }

    /// Start a refill unless one is running; unless `urgent`, only below the low-water
    /// mark and not within `backoff_min` of a failed refill.
    fn start_refill(&self, b: &mut Buffer, urgent: bool) {
        if b.refilling {
            return;
        }
        if !urgent {
            if b.ids.len() >= self.inner.low {
                return;
            }
            let pause = self.inner.pool.options().backoff_min;
            if matches!(&b.last_error, Some((_, at)) if at.elapsed() < pause) {
                return;
            }
        }
        let want = self.inner.high.saturating_sub(b.ids.len());
        if want == 0 {
            return;
        }
        b.refilling = true;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            // `want` ≤ high_water, a u32.
            let result = inner.pool.next_ids(want as u32).await;
            {
                let mut b = inner.lock();
                b.refilling = false;
                b.generation += 1;
                match result {
                    Ok(ids) => {
                        b.stats.refills += 1;
                        b.stats.fetched += ids.len() as u64;
                        // Only this task adds IDs, and callers only took some since
                        // `want` was computed, so this stays within high_water.
                        b.ids.extend(ids);
                        debug_assert!(b.ids.len() <= inner.high);
                        b.stats.max_buffered = b.stats.max_buffered.max(b.ids.len());
                        b.last_error = None;
                    }
                    Err(e) => {
                        b.stats.failed_refills += 1;
                        b.last_error = Some((e, Instant::now()));
                    }
                }
            }
            inner.refilled.notify_waiters();
        });
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        self.buffer.lock().unwrap_or_else(|p| p.into_inner())
    }
}
