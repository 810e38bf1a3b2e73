//! Idempotency keys for the HTTP ID API (`Idempotency-Key` header), off unless
//! `idempotency_window` is set: the answer to a request with a key is kept for the window, and
//! a request with the same key within it gets that answer again (the same IDs), marked with
//! `idempotent-replayed: true`.
//!
//! The scope is **one node**: the table lives in the node's memory, shared by its shards (a
//! retry may reach another shard through the same listening socket), and is gone when the
//! node restarts. A client that needs the guarantee sends a key's retries to the same node
//! (the clients hash the key to pick it); a retry that reaches another node, or this one after
//! a restart, is issued new IDs like any request.
//!
//! What is kept and for how long is bounded: only successful answers are kept (a refused
//! request can be retried and issues then), a key is tied to the request it came with (the
//! same key with another path, query or body is refused with 422, never answered with the
//! first request's IDs), a second request with a key whose first is still being answered is
//! refused with 409, and the memory the kept answers take is at most `idempotency_max_bytes`:
//! when a new key does not fit, it is refused with 503 (answers are never dropped before their
//! window ends, which would hand a retry new IDs).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest key accepted (characters, visible ASCII): the protocol's limit, so a key
/// works on both ways in.
pub const MAX_KEY_LEN: usize = idgen_protocol::MAX_IDEMPOTENCY_KEY_LEN;

/// Bytes counted for an entry beyond its key, request and answer.
const ENTRY_OVERHEAD: usize = 96;

/// The node's table of kept answers.
#[derive(Debug)]
pub struct Idempotency {
    window: Duration,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Keys in the order their answers were kept, with when each expires.
    order: VecDeque<(Instant, String)>,
    /// Bytes held by entries (kept answers and the reservations of those in flight).
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    /// The request the key came with: method, path, query and body.
    request: String,
    /// Bytes counted for the entry.
    bytes: usize,
    /// `None` while the first request is being answered.
    answer: Option<Kept>,
}

/// A kept answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub status: u16,
    pub body: Vec<u8>,
}

/// What a request with a key is to do.
#[derive(Debug)]
pub enum Begin {
    /// Answer it, then [`Ticket::keep`] the answer.
    Fresh(Ticket),
    /// Answer this again.
    Replay(Kept),
    /// The first request with this key is still being answered: 409.
    InFlight,
    /// The key came with another request: 422.
    Mismatch,
    /// No room for another key now: 503.
    Full,
}

/// The right to keep the answer of a fresh request; dropped without keeping (the request
/// failed or was given up), the key is free again.
#[derive(Debug)]
pub struct Ticket {
    table: Arc<Idempotency>,
    key: String,
    kept: bool,
}

/// Why a key is not a key.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_LEN} characters, got {}",
            key.len()
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("Idempotency-Key must be visible ASCII characters (no spaces)".into());
    }
    Ok(())
}

impl Idempotency {
    /// A table keeping answers for `window`, in at most `max_bytes`.
    pub fn new(window: Duration, max_bytes: u64) -> Arc<Self> {
        Arc::new(Idempotency {
            window,
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a request with `key` (checked by [`check_key`]) made of `request`, which may
    /// answer up to `answer_bytes`: reserved until the answer is kept.
    pub fn begin(
        self: &Arc<Self>,
        key: &str,
        request: &str,
        answer_bytes: usize,
        now: Instant,
    ) -> Begin {
        let mut inner = self.lock();
        inner.expire(now);
        if let Some(e) = inner.entries.get(key) {
            if e.request != request {
                return Begin::Mismatch;
            }
            return match &e.answer {
                Some(kept) => Begin::Replay(kept.clone()),
                None => Begin::InFlight,
            };
        }
        let bytes = key.len() + request.len() + answer_bytes + ENTRY_OVERHEAD;
        if inner.bytes.saturating_add(bytes) > self.max_bytes {
            return Begin::Full;
        }
        inner.bytes += bytes;
        inner.entries.insert(
            key.to_string(),
            Entry {
                request: request.to_string(),
                bytes,
                answer: None,
            },
        );
        Begin::Fresh(Ticket {
            table: Arc::clone(self),
            key: key.to_string(),
            kept: false,
        })
    }

    /// Keys with a kept answer or in flight, and the bytes they hold.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.entries.len(), inner.bytes)
    }
}

impl Inner {
    /// Drops the answers whose window has ended.
    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if *at > now {
                break;
            }
            if let Some((_, key)) = self.order.pop_front() {
                if let Some(e) = self.entries.remove(&key) {
                    self.bytes = self.bytes.saturating_sub(e.bytes);
                }
            }
        }
    }
}

impl Ticket {
    /// Keeps `answer` for the window (from now).
    pub fn keep(mut self, answer: Kept, now: Instant) {
        let table = Arc::clone(&self.table);
        let mut inner = table.lock();
        if let Some(e) = inner.entries.get_mut(&self.key) {
            let bytes = self.key.len() + e.request.len() + answer.body.len() + ENTRY_OVERHEAD;
            let before = e.bytes;
            e.bytes = bytes;
            e.answer = Some(answer);
            inner.bytes = inner.bytes.saturating_sub(before).saturating_add(bytes);
            inner
                .order
                .push_back((now + table.window, self.key.clone()));
        }
        self.kept = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let mut inner = self.table.lock();
        if let Some(e) = inner.entries.remove(&self.key) {
            inner.bytes = inner.bytes.saturating_sub(e.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(b: Begin) -> Ticket {
        match b {
            Begin::Fresh(t) => t,
            other => panic!("not fresh: {other:?}"),
        }
    }

    #[test]
    fn a_retry_gets_the_kept_answer_within_the_window_and_a_new_one_after() {
        let t = Idempotency::new(Duration::from_secs(10), 1 << 20);
        let now = Instant::now();
        let ticket = fresh(t.begin("k1", "POST /ids", 100, now));
        assert!(matches!(
            t.begin("k1", "POST /ids", 100, now),
            Begin::InFlight
        ));
        let kept = Kept {
            status: 200,
            body: b"{\"id\":1}".to_vec(),
        };
        ticket.keep(kept.clone(), now);
        match t.begin("k1", "POST /ids", 100, now + Duration::from_secs(9)) {
            Begin::Replay(k) => assert_eq!(k, kept),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            t.begin("k1", "POST /ids/batch {\"count\":2}", 100, now),
            Begin::Mismatch
        ));
        // After the window the key is new again.
        let later = now + Duration::from_secs(11);
        drop(fresh(t.begin("k1", "POST /ids", 100, later)));
        assert_eq!(t.usage(), (0, 0), "a dropped ticket frees its key");
    }

    #[test]
    fn the_table_refuses_new_keys_when_full_and_never_drops_a_kept_answer_early() {
        let t = Idempotency::new(Duration::from_secs(60), 4096);
        let now = Instant::now();
        let mut n = 0;
        loop {
            match t.begin(&format!("key-{n}"), "POST /ids", 200, now) {
                Begin::Fresh(ticket) => ticket.keep(
                    Kept {
                        status: 200,
                        body: vec![b'x'; 200],
                    },
                    now,
                ),
                Begin::Full => break,
                other => panic!("{other:?}"),
            }
            n += 1;
        }
        assert!(n > 5, "{n}");
        assert!(t.usage().1 <= 4096);
        // Every kept answer is still there.
        for i in 0..n {
            assert!(matches!(
                t.begin(&format!("key-{i}"), "POST /ids", 200, now),
                Begin::Replay(_)
            ));
        }
        // Once they expire there is room again.
        let later = now + Duration::from_secs(61);
        assert!(matches!(
            t.begin("another", "POST /ids", 200, later),
            Begin::Fresh(_)
        ));
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key("order-42/retry").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("with space").is_err());
        assert!(check_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(check_key("é").is_err());
    }
}
