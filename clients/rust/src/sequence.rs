//! Named sequences (protocol version 3): the checks made before sending, and the prefetch
//! buffers of dense sequences (`clients/vectors/SEQUENCES.md`).
//!
//! [`Prefetch`] keeps, per sequence name, the mode learned from the last VALUES and a buffer
//! of dense values. It is shared by [`Client`](crate::Client) and [`Pool`](crate::Pool): each
//! hands it a `fetch` function that sends one GET_VALUES (the pool's with failover).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use idgen_protocol::{SeqMode, SeqName, MAX_VALUES_PER_CALL};

use crate::{Error, Status};

/// The protocol version that has GET_VALUES.
pub(crate) const VALUES_VERSION: u16 = 3;

/// The most sequence names a [`Prefetch`] keeps a buffer (and a mode) for: the namespace's
/// bound on sequences. Beyond it the least recently used name is forgotten.
pub(crate) const MAX_NAMES: usize = 1024;

/// `name` as GET_VALUES carries it, or [`Error::InvalidArgument`].
pub(crate) fn check_name(name: &str) -> Result<SeqName, Error> {
    name.parse::<SeqName>().map_err(|e| {
        // A name is shown only when it is short and printable; else its length.
        let shown = if name.len() <= 80 && name.chars().all(|c| !c.is_control()) {
            format!("{name:?}")
        } else {
            format!("of {} bytes", name.len())
        };
        Error::InvalidArgument(format!("sequence name {shown}: {e}"))
    })
}

/// `n` within `1..=1048576` (the node's `max_batch` is checked where it is known), or
/// [`Error::InvalidArgument`].
pub(crate) fn check_count(n: u32) -> Result<(), Error> {
    if n == 0 {
        return Err(Error::InvalidArgument(
            "a call asks for at least 1 value, not 0".into(),
        ));
    }
    if n > MAX_VALUES_PER_CALL {
        return Err(Error::InvalidArgument(format!(
            "{n} values: a call asks for at most {MAX_VALUES_PER_CALL}"
        )));
    }
    Ok(())
}

/// `n` within the `max_batch` a node announced, or [`Error::InvalidArgument`].
pub(crate) fn check_batch(n: u32, max_batch: u32) -> Result<(), Error> {
    if n > max_batch {
        return Err(Error::InvalidArgument(format!(
            "{n} values: the node's max_batch is {max_batch}"
        )));
    }
    Ok(())
}

/// A GET_VALUES of `name` within a node's `max_request_frame` (every name fits the default,
/// 128), or [`Error::InvalidArgument`]: a node closes the connection on a longer frame.
pub(crate) fn check_frame(name: SeqName, max_request_frame: u32) -> Result<(), Error> {
    let length = 5 + name.as_bytes().len() as u32;
    if length > max_request_frame {
        return Err(Error::InvalidArgument(format!(
            "sequence name of {} bytes: the node takes requests of at most {max_request_frame} \
             bytes, names of at most {} bytes",
            name.as_bytes().len(),
            max_request_frame.saturating_sub(5)
        )));
    }
    Ok(())
}

/// The answer to one GET_VALUES.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fetched {
    /// The sequence's mode, from the VALUES frame.
    pub mode: SeqMode,
    /// The values, strictly increasing (checked by the protocol crate's decoder).
    pub values: Vec<u64>,
}

/// Per-name prefetch buffers for dense sequences, `K` values ahead.
pub(crate) struct Prefetch {
    k: u32,
    names: Mutex<Names>,
}

impl std::fmt::Debug for Prefetch {
    /// `K` and how many names have a buffer, not the values (up to 1024 × `K` of them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetch")
            .field("k", &self.k)
            .field("names", &self.lock().slots.len())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Names {
    /// Bumped on every use of a name; a slot's `used` is the tick of its last use.
    tick: u64,
    slots: HashMap<SeqName, Slot>,
}

#[derive(Debug)]
struct Slot {
    used: u64,
    /// `None` until a VALUES for the name has arrived.
    mode: Option<SeqMode>,
    /// Held (across the GET_VALUES that refills it) by the one call refilling it, so the
    /// buffer grows in increasing order and every value goes to one call.
    buffer: Arc<tokio::sync::Mutex<VecDeque<u64>>>,
}

impl Prefetch {
    /// Buffers of `k` values (`k >= 1`; it is capped at 1048576, the most one GET_VALUES asks
    /// for).
    pub(crate) fn new(k: u32) -> Prefetch {
        Prefetch {
            k: k.clamp(1, MAX_VALUES_PER_CALL),
            names: Mutex::new(Names::default()),
        }
    }

    /// `K`.
    pub(crate) fn k(&self) -> u32 {
        self.k
    }

    fn lock(&self) -> MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `n` values of `name` (both checked already), from the buffer when it holds enough and
    /// the sequence is known to be dense, else from `fetch(need, want)`: one GET_VALUES of at
    /// least `need` and at most `want` values.
    pub(crate) async fn take<F, Fut>(
        &self,
        name: SeqName,
        n: u32,
        fetch: F,
    ) -> Result<Vec<u64>, Error>
    where
        F: Fn(u32, u32) -> Fut,
        Fut: Future<Output = Result<Fetched, Error>>,
    {
        let (mode, buffer) = self.slot(name);
        if mode == Some(SeqMode::Strict) {
            // Ask for exactly `n`, keep nothing: a kept strict value would be older than the
            // call it answers. Strict calls are not serialized (a node answers GET_VALUES
            // pipelined together with one commit).
            return Ok(self.learn(name, fetch(n, n).await)?.values);
        }
        // One call at a time per name from here: values enter the buffer in the order they
        // were fetched, so they leave it increasing, each to one call.
        let mut buffered = buffer.lock().await;
        match self.mode_of(name, &buffer) {
            Some(SeqMode::Dense) => {}
            // Not known yet (the first call for the name asks for exactly `n` and learns the
            // mode from its answer, keeping nothing), or learned strict while waiting.
            _ => return Ok(self.learn(name, fetch(n, n).await)?.values),
        }
        let need = n as usize;
        if buffered.len() >= need {
            return Ok(buffered.drain(..need).collect());
        }
        let want = self.k.max(n);
        let mut got = self.learn(name, fetch(n, want).await);
        if want > n && matches!(&got, Err(e) if e.status() == Some(Status::SEQUENCE_USED_UP)) {
            // Fewer than `want` may be left below the maximum, but `n` may: ask for exactly
            // what this call needs (clients/vectors/SEQUENCES.md).
            got = self.learn(name, fetch(n, n).await);
        }
        let fetched = match got {
            Ok(f) => f,
            Err(e) => {
                if e.status() == Some(Status::UNKNOWN_SEQUENCE) {
                    buffered.clear();
                }
                return Err(e);
            }
        };
        if fetched.mode == SeqMode::Strict {
            // The sequence was dropped and created again as strict: nothing is kept (the
            // values past `n` are a gap).
            buffered.clear();
            let mut values = fetched.values;
            values.truncate(need);
            return Ok(values);
        }
        // Values already buffered go first, as long as the new ones are above them (always
        // on one connection; a pool that failed over to another node may get lower ones,
        // and then drops the old ones: a gap, never an out-of-order hand-out).
        if let (Some(&last), Some(&first)) = (buffered.back(), fetched.values.first()) {
            if last >= first {
                buffered.clear();
            }
        }
        buffered.extend(fetched.values);
        if buffered.len() < need {
            // Unreachable: `fetch` answers at least `need` values.
            return Err(Error::UnexpectedResponse(format!(
                "{} values of {name} in answer to a call for {n}",
                buffered.len()
            )));
        }
        Ok(buffered.drain(..need).collect())
    }

    /// The name's mode and buffer, making a slot (and forgetting the least recently used
    /// name beyond [`MAX_NAMES`]) if it has none.
    fn slot(&self, name: SeqName) -> (Option<SeqMode>, Arc<tokio::sync::Mutex<VecDeque<u64>>>) {
        let mut names = self.lock();
        names.tick += 1;
        let tick = names.tick;
        if let Some(slot) = names.slots.get_mut(&name) {
            slot.used = tick;
            return (slot.mode, slot.buffer.clone());
        }
        if names.slots.len() >= MAX_NAMES {
            let oldest = names
                .slots
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(n, _)| *n);
            if let Some(oldest) = oldest {
                names.slots.remove(&oldest);
            }
        }
        let buffer = Arc::new(tokio::sync::Mutex::new(VecDeque::new()));
        names.slots.insert(
            name,
            Slot {
                used: tick,
                mode: None,
                buffer: buffer.clone(),
            },
        );
        (None, buffer)
    }

    /// The mode known for `name` if `buffer` is still its buffer (not forgotten since).
    fn mode_of(
        &self,
        name: SeqName,
        buffer: &Arc<tokio::sync::Mutex<VecDeque<u64>>>,
    ) -> Option<SeqMode> {
        let names = self.lock();
        let slot = names.slots.get(&name)?;
        if Arc::ptr_eq(&slot.buffer, buffer) {
            slot.mode
        } else {
            None
        }
    }

    /// Remember the mode of an answer; forget the name on `UNKNOWN_SEQUENCE`.
    fn learn(&self, name: SeqName, result: Result<Fetched, Error>) -> Result<Fetched, Error> {
        let mut names = self.lock();
        match &result {
            Ok(fetched) => {
                if let Some(slot) = names.slots.get_mut(&name) {
                    slot.mode = Some(fetched.mode);
                }
            }
            Err(e) if e.status() == Some(Status::UNKNOWN_SEQUENCE) => {
                names.slots.remove(&name);
            }
            Err(_) => {}
        }
        result
    }

    /// Names with a slot now (for tests).
    #[cfg(test)]
    fn names(&self) -> usize {
        self.lock().slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn name(s: &str) -> SeqName {
        s.parse().unwrap()
    }

    /// A sequence that counts from 1 and records every (need, want) asked of it.
    struct Source {
        mode: Mutex<SeqMode>,
        next: AtomicU64,
        asked: Mutex<Vec<(u32, u32)>>,
    }

    impl Source {
        fn new(mode: SeqMode) -> Source {
            Source {
                mode: Mutex::new(mode),
                next: AtomicU64::new(1),
                asked: Mutex::new(Vec::new()),
            }
        }

        async fn fetch(&self, need: u32, want: u32) -> Result<Fetched, Error> {
            self.asked.lock().unwrap().push((need, want));
            let start = self.next.fetch_add(u64::from(want), Ordering::SeqCst);
            Ok(Fetched {
                mode: *self.mode.lock().unwrap(),
                values: (start..start + u64::from(want)).collect(),
            })
        }

        fn asked(&self) -> Vec<(u32, u32)> {
            self.asked.lock().unwrap().clone()
        }
    }

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn debug_shows_k_and_names_not_values() {
        let p = Prefetch::new(0);
        assert_eq!(p.k(), 1);
        assert_eq!(Prefetch::new(u32::MAX).k(), MAX_VALUES_PER_CALL);
        let s = Source::new(SeqMode::Dense);
        block_on(async {
            for _ in 0..2 {
                p.take(name("x"), 1, |n, w| s.fetch(n, w)).await.unwrap();
            }
        });
        assert_eq!(format!("{p:?}"), "Prefetch { k: 1, names: 1 }");
    }

    #[test]
    fn names_and_counts_are_checked() {
        assert!(check_name("invoice.tenant-42").is_ok());
        assert!(check_name(&"a".repeat(64)).is_ok());
        for bad in ["", "Orders", ".x", "-x", "a/b", "café", "a b", "a\n"] {
            let e = check_name(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}: {e:?}");
        }
        let long = check_name(&"a".repeat(65)).unwrap_err().to_string();
        assert!(long.contains("at most 64 bytes"), "{long}");
        let huge = check_name(&"a".repeat(1000)).unwrap_err().to_string();
        assert!(huge.contains("of 1000 bytes"), "{huge}");
        assert!(check_count(1).is_ok() && check_count(MAX_VALUES_PER_CALL).is_ok());
        assert!(matches!(check_count(0), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            check_count(MAX_VALUES_PER_CALL + 1),
            Err(Error::InvalidArgument(_))
        ));
        assert!(check_frame(name(&"a".repeat(64)), 128).is_ok());
        assert!(check_frame(name(&"a".repeat(59)), 64).is_ok());
        let e = check_frame(name(&"a".repeat(60)), 64)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid argument: sequence name of 60 bytes: the node takes requests of at most 64 \
             bytes, names of at most 59 bytes"
        );
        assert!(check_batch(100, 100).is_ok());
        let e = check_batch(101, 100).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid argument: 101 values: the node's max_batch is 100"
        );
    }

    #[test]
    fn dense_values_are_buffered_and_handed_out_in_order() {
        let p = Prefetch::new(10);
        let s = Source::new(SeqMode::Dense);
        let orders = name("orders");
        block_on(async {
            let mut got = Vec::new();
            for _ in 0..25 {
                got.extend(p.take(orders, 1, |n, w| s.fetch(n, w)).await.unwrap());
            }
            // First call: exactly 1 (the mode is learned); then 10 at a time.
            assert_eq!(s.asked(), [(1, 1), (1, 10), (1, 10), (1, 10)]);
            assert_eq!(got, (1..=25).collect::<Vec<u64>>());
            // 6 values left (26..=31): a call for 8 takes them and 2 of a new fetch.
            let eight = p.take(orders, 8, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(eight, (26..=33).collect::<Vec<u64>>());
            // More than K: max(K, n) = n asked; the old values go first.
            let big = p.take(orders, 30, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(big, (34..=63).collect::<Vec<u64>>());
            assert_eq!(s.asked()[4..], [(8, 10), (30, 30)]);
        });
    }

    #[test]
    fn strict_values_are_never_kept() {
        let p = Prefetch::new(100);
        let s = Source::new(SeqMode::Strict);
        let ledger = name("ledger");
        block_on(async {
            for i in 1..=5u64 {
                let got = p.take(ledger, 2, |n, w| s.fetch(n, w)).await.unwrap();
                assert_eq!(got, [2 * i - 1, 2 * i]);
            }
            assert_eq!(s.asked(), [(2, 2); 5]);
        });
    }

    #[test]
    fn a_sequence_that_turns_strict_is_no_longer_buffered() {
        let p = Prefetch::new(10);
        let s = Source::new(SeqMode::Dense);
        let x = name("x");
        block_on(async {
            p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap(), [2]);
            // 9 buffered; a call for 12 fetches, finds the sequence strict now.
            *s.mode.lock().unwrap() = SeqMode::Strict;
            let got = p.take(x, 12, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(got, (12..=23).collect::<Vec<u64>>());
            let next = p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(next, [24]);
            assert_eq!(s.asked(), [(1, 1), (1, 10), (12, 12), (1, 1)]);
        });
    }

    #[test]
    fn lower_values_after_a_failover_drop_the_old_ones() {
        let p = Prefetch::new(10);
        let s = Source::new(SeqMode::Dense);
        let x = name("x");
        block_on(async {
            p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap();
            p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap(); // buffer 3..=11
                                                               // Another node whose values are below the buffered ones.
            s.next.store(1, Ordering::SeqCst);
            let got = p.take(x, 12, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(got, (1..=12).collect::<Vec<u64>>());
        });
    }

    #[test]
    fn unknown_sequence_forgets_the_name_and_its_buffer() {
        let p = Prefetch::new(10);
        let s = Source::new(SeqMode::Dense);
        let x = name("x");
        let unknown = || async {
            Err::<Fetched, _>(Error::Server {
                status: Status::UNKNOWN_SEQUENCE,
                message: "no such sequence".into(),
            })
        };
        block_on(async {
            p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap();
            p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap(); // buffer 3..=11
            let e = p.take(x, 20, |_, _| unknown()).await.unwrap_err();
            assert_eq!(e.status(), Some(Status::UNKNOWN_SEQUENCE));
            assert_eq!(p.names(), 0);
            // Mode forgotten: exactly 1 asked, and not from the old buffer.
            let got = p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(got, [12]);
            assert_eq!(s.asked().last(), Some(&(1, 1)));
            // Other errors keep the buffer.
            p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap(); // buffer 14..=22
            let e = p
                .take(x, 50, |_, _| async { Err::<Fetched, _>(Error::Timeout) })
                .await
                .unwrap_err();
            assert!(matches!(e, Error::Timeout));
            assert_eq!(p.take(x, 1, |n, w| s.fetch(n, w)).await.unwrap(), [14]);
        });
    }

    #[test]
    fn at_most_1024_names_least_recently_used_forgotten() {
        let p = Prefetch::new(4);
        let s = Source::new(SeqMode::Dense);
        block_on(async {
            let first = name("first");
            p.take(first, 1, |n, w| s.fetch(n, w)).await.unwrap();
            p.take(first, 1, |n, w| s.fetch(n, w)).await.unwrap(); // 3 buffered
            for i in 0..MAX_NAMES - 1 {
                p.take(name(&format!("n{i}")), 1, |n, w| s.fetch(n, w))
                    .await
                    .unwrap();
            }
            assert_eq!(p.names(), MAX_NAMES);
            let asked = s.asked().len();
            // "first" is used again (from its buffer): "n0" is now the oldest.
            p.take(first, 1, |n, w| s.fetch(n, w)).await.unwrap();
            p.take(name("newest"), 1, |n, w| s.fetch(n, w))
                .await
                .unwrap();
            assert_eq!(p.names(), MAX_NAMES);
            p.take(first, 1, |n, w| s.fetch(n, w)).await.unwrap();
            assert_eq!(s.asked().len(), asked + 1, "first still buffered");
            // n0 was forgotten (and n1 for it): its mode is learned again with a call for
            // exactly 1, while n2, still known dense, refills 4 at once.
            p.take(name("n0"), 1, |n, w| s.fetch(n, w)).await.unwrap();
            p.take(name("n2"), 1, |n, w| s.fetch(n, w)).await.unwrap();
            let asked = s.asked();
            assert_eq!(asked[asked.len() - 2..], [(1, 1), (1, 4)]);
        });
    }

    #[test]
    fn concurrent_callers_get_distinct_increasing_values() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let p = Arc::new(Prefetch::new(50));
        let s = Arc::new(Source::new(SeqMode::Dense));
        let x = name("x");
        let mut all = rt.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (p, s) = (p.clone(), s.clone());
                    tokio::spawn(async move {
                        let mut mine = Vec::new();
                        for i in 0..100u32 {
                            let n = 1 + i % 3;
                            mine.extend(p.take(x, n, |n, w| s.fetch(n, w)).await.unwrap());
                            tokio::task::yield_now().await;
                        }
                        mine
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                let mine = t.await.unwrap();
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "per-caller order");
                all.extend(mine);
            }
            all
        });
        let total = all.len();
        assert_eq!(total, 8 * (34 + 2 * 33 + 3 * 33));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), total, "every value to one caller");
        // One first call learns the mode (the others wait for it), then 50 at a time.
        let requests = s.asked().len();
        assert!(requests <= 2 + total / 50, "{requests} requests");
        assert_eq!(s.asked().iter().filter(|&&(_, w)| w != 50).count(), 1);
    }
}
