//! Clock drift against the node's peers, watched from the control thread.
//!
//! Every node writes its wall clock to `idgen/<ns>/clocks/<instance>` once a second and reads
//! its peers' keys four times a second. When a peer's value `p` changes between two polls, the
//! write happened between the start of the earlier poll (`a`, our clock) and the end of the
//! later one (`b`): the peer's clock minus ours lies in `[p − b, p − a]`. That interval allows
//! for the store round trip and the polling period; its width is the estimate's uncertainty.
//! A peer counts while its key keeps changing; a silent key (a stopped node) is forgotten.
//!
//! The key is written with [`KvStore::put_expiring`] ([`CLOCK_KEY_TTL`]): on etcd it vanishes
//! a few publishing periods after its node stops, by etcd's clock, and its absence is what
//! tells an acquirer that a held lease's holder is gone (`crate::lease`). A node publishes once
//! right after its lease is granted, then every [`PUBLISH_EVERY`], and deletes its key when it
//! shuts down. Stores that cannot expire keys keep a crashed node's key until it is deleted.
//!
//! The node's drift is the median, over its peers, of the part of each interval that is
//! certainly away from zero (0 if the interval contains 0). With several peers the median
//! points at the outlier: the node whose clock is wrong sees all its peers off, the others see
//! only that one. With a single peer both nodes see the same drift.
//!
//! Drift never threatens uniqueness (leases are fenced in ID time); it degrades ordering
//! across nodes, so a node beyond `--max-drift` is taken out of rotation (not ready) and
//! refuses to start.
//!
//! The lease keeper asks the same watch whether a step of this node's wall clock is confirmed
//! ([`ClockWatch::step_verdict`]): whether the peers' clocks, measured only over polls that
//! began after the step was seen, agree with the stepped clock within `--max-drift`. A fleet
//! stepped together agrees; a node stepped alone sees every peer off.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::clock::Clock;
use crate::lease::{clocks_prefix, Owner};
use crate::store::{KvStore, Txn};

/// How often a node publishes its clock.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// How often a node reads its peers' clocks.
pub const POLL_EVERY: Duration = Duration::from_millis(250);
/// A peer whose clock key has not changed for this long is ignored.
pub const PEER_SILENT_AFTER: Duration = Duration::from_secs(10);
/// The longest a live peer takes to give an estimate measured wholly after a given moment,
/// store round trips aside: its next write (within one publishing period) is first seen by a
/// poll, the write after that by a later one, each within a polling period.
pub const VERDICT_WITHIN: Duration =
    Duration::from_millis(2 * (PUBLISH_EVERY.as_millis() as u64 + POLL_EVERY.as_millis() as u64));
/// How long a clock key outlives its last write where the store expires keys: a few
/// publishing periods, so a slow store round trip or two do not make a live node look gone.
pub const CLOCK_KEY_TTL: Duration = Duration::from_secs(5);

#[derive(Serialize, Deserialize)]
struct ClockRecord {
    unix_ms: u64,
    node_id: String,
    /// Written with an expiring put on a store that expires keys: only such a key is evidence
    /// that its node is alive (`crate::lease`); a key of an earlier version, which never
    /// expires, is not.
    #[serde(default)]
    expiring: bool,
}

#[derive(Debug)]
struct Peer {
    node_id: String,
    version: u64,
    /// Our clock at the start of the poll that first saw `version`.
    seen_since: u64,
    /// The number of that poll ([`ClockWatch::polls`]).
    seen_since_poll: u64,
    /// Peer minus us, ms: (low, high), when (monotonic) it was measured, and the number of
    /// the poll its interval began at.
    estimate: Option<(i64, i64, Instant, u64)>,
}

/// What the peers' clocks say about a step of this node's wall clock
/// ([`ClockWatch::step_verdict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepVerdict {
    /// No live peer: nobody to confirm or contradict (one node, or an embedded store).
    NoPeers,
    /// Live peers, not all measured since the step yet.
    Pending { peers: usize },
    /// The peers measured since the step agree with this node's clock within `--max-drift`
    /// (`drift_ms`: this node's minus theirs, as [`ClockWatch::drift_summary`] reckons it).
    Confirmed { peers: usize, drift_ms: i64 },
    /// The peers measured since the step disagree: this node's clock is the outlier.
    Contradicted { peers: usize, drift_ms: i64 },
}

/// The clock watch's findings, shared with health and metrics.
#[derive(Debug)]
pub struct ClockWatch {
    max_drift_ms: u64,
    peers: Mutex<HashMap<String, Peer>>,
    excessive: AtomicBool,
    /// Polls begun so far.
    polls: AtomicU64,
}

impl ClockWatch {
    pub fn new(max_drift: Duration) -> Arc<ClockWatch> {
        Arc::new(ClockWatch {
            max_drift_ms: crate::lease::duration_ms(max_drift),
            peers: Mutex::new(HashMap::new()),
            excessive: AtomicBool::new(false),
            polls: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Peer>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Polls begun so far: a step seen now is judged by estimates whose interval began at a
    /// later poll.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::SeqCst)
    }

    /// Numbers a poll about to begin.
    fn begin_poll(&self) -> u64 {
        self.polls.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// (this node's clock minus its peers', ms: the median of certain drifts; live peers).
    pub fn drift_summary(&self) -> (i64, usize) {
        Self::median(self.lock().values().filter_map(|p| p.estimate))
    }

    /// Whether the peers confirm a step of this node's wall clock seen when
    /// [`polls`](ClockWatch::polls) read `after_poll`: judged only by estimates whose interval
    /// began at a later poll, so none straddles the step (an interval that does contains zero
    /// and would "agree" with any step), once every live peer has such an estimate.
    pub fn step_verdict(&self, after_poll: u64) -> StepVerdict {
        let live: Vec<_> = self
            .lock()
            .values()
            .filter_map(|p| p.estimate)
            .filter(|(_, _, at, _)| at.elapsed() < PEER_SILENT_AFTER)
            .collect();
        if live.is_empty() {
            return StepVerdict::NoPeers;
        }
        let peers = live.len();
        let (drift_ms, n) = Self::median(live.into_iter().filter(|e| e.3 > after_poll));
        if n < peers {
            // Every live peer has its say: one peer stepped with this node must not outvote
            // the others before they are measured.
            return StepVerdict::Pending { peers };
        }
        if drift_ms.unsigned_abs() <= self.max_drift_ms {
            StepVerdict::Confirmed { peers: n, drift_ms }
        } else {
            StepVerdict::Contradicted { peers: n, drift_ms }
        }
    }

    /// The median certain drift (us minus peer) of the live estimates among `estimates`, and
    /// how many there were.
    fn median(estimates: impl Iterator<Item = (i64, i64, Instant, u64)>) -> (i64, usize) {
        let mut certain: Vec<i64> = estimates
            .filter(|(_, _, at, _)| at.elapsed() < PEER_SILENT_AFTER)
            .map(|(lo, hi, _, _)| {
                // Peer minus us → us minus peer.
                if lo > 0 {
                    -lo
                } else if hi < 0 {
                    -hi
                } else {
                    0
                }
            })
            .collect();
        if certain.is_empty() {
            return (0, 0);
        }
        certain.sort_unstable();
        let n = certain.len();
        let median = if n % 2 == 1 {
            certain[n / 2]
        } else {
            // Of the two middle values, the one closer to zero: with two peers that disagree,
            // do not blame this node.
            let (a, b) = (certain[n / 2 - 1], certain[n / 2]);
            if a.abs() <= b.abs() {
                a
            } else {
                b
            }
        };
        (median, n)
    }

    /// A description of the drift if it exceeds `--max-drift`.
    pub fn excessive_drift(&self) -> Option<String> {
        let (drift, peers) = self.drift_summary();
        (peers > 0 && drift.unsigned_abs() > self.max_drift_ms).then(|| {
            format!(
                "clock differs from {peers} peer(s) by {drift} ms (more than the allowed {} ms)",
                self.max_drift_ms
            )
        })
    }

    /// One poll that finds peer `instance`'s clock key at `version`, holding `peer_ms`, read
    /// between `a` and `b` (our clock, ms): for tests of the watch's readers.
    #[cfg(test)]
    pub(crate) fn poll_for_test(&self, instance: &str, version: u64, peer_ms: u64, a: u64, b: u64) {
        let poll = self.begin_poll();
        let rec = ClockRecord {
            unix_ms: peer_ms,
            node_id: instance.into(),
            expiring: false,
        };
        self.observe("me", &[(instance.into(), version, rec)], poll, a, b);
    }

    /// Records poll number `poll` of the peers' clock keys, read between `a` and `b` (our
    /// clock, ms).
    fn observe(
        &self,
        own_instance: &str,
        entries: &[(String, u64, ClockRecord)],
        poll: u64,
        a: u64,
        b: u64,
    ) {
        let mut peers = self.lock();
        for (instance, version, rec) in entries {
            if instance == own_instance {
                continue;
            }
            match peers.get_mut(instance) {
                Some(p) if p.version == *version => {}
                Some(p) => {
                    let lo = rec.unix_ms as i64 - b as i64;
                    let hi = rec.unix_ms as i64 - p.seen_since as i64;
                    p.estimate = Some((lo, hi, Instant::now(), p.seen_since_poll));
                    p.version = *version;
                    p.seen_since = a;
                    p.seen_since_poll = poll;
                    p.node_id.clone_from(&rec.node_id);
                }
                None => {
                    peers.insert(
                        instance.clone(),
                        Peer {
                            node_id: rec.node_id.clone(),
                            version: *version,
                            seen_since: a,
                            seen_since_poll: poll,
                            estimate: None,
                        },
                    );
                }
            }
        }
        // Forget keys that vanished.
        peers.retain(|k, _| entries.iter().any(|(i, _, _)| i == k));
    }
}

/// Publishes this node's clock and compares it with its peers'.
pub struct ClockWatcher<C: Clock> {
    store: Arc<dyn KvStore>,
    prefix: String,
    owner: Owner,
    clock: C,
    watch: Arc<ClockWatch>,
}

impl<C: Clock> ClockWatcher<C> {
    pub fn new(
        store: Arc<dyn KvStore>,
        namespace: &str,
        owner: Owner,
        clock: C,
        watch: Arc<ClockWatch>,
    ) -> Self {
        ClockWatcher {
            store,
            prefix: clocks_prefix(namespace),
            owner,
            clock,
            watch,
        }
    }

    fn own_key(&self) -> Vec<u8> {
        format!("{}{}", self.prefix, self.owner.instance).into_bytes()
    }

    /// Writes this node's clock key (expiring, where the store can).
    pub async fn publish(&self) {
        let rec = ClockRecord {
            unix_ms: self.clock.wall_ms(),
            node_id: self.owner.node_id.clone(),
            expiring: self.store.expires_keys(),
        };
        let value = serde_json::to_vec(&rec).unwrap_or_default();
        let key = self.own_key();
        if let Err(e) = self.store.put_expiring(&key, &value, CLOCK_KEY_TTL).await {
            tracing::debug!(error = %e, "could not publish the clock");
        }
    }

    async fn poll(&self) {
        let poll = self.watch.begin_poll();
        let a = self.clock.wall_ms();
        let Ok(entries) = self.store.scan(self.prefix.as_bytes()).await else {
            return;
        };
        let b = self.clock.wall_ms();
        let parsed: Vec<(String, u64, ClockRecord)> = entries
            .into_iter()
            .filter_map(|e| {
                let instance = String::from_utf8(e.key.get(self.prefix.len()..)?.to_vec()).ok()?;
                let rec: ClockRecord = serde_json::from_slice(&e.value).ok()?;
                Some((instance, e.version, rec))
            })
            .collect();
        self.watch
            .observe(&self.owner.instance, &parsed, poll, a, b);
    }

    /// Start-up check: watch the peers for a little over one publishing period and refuse if
    /// this node's clock is too far from theirs.
    pub async fn check_at_start(&self) -> Result<(), String> {
        let until = Instant::now() + PUBLISH_EVERY + 2 * POLL_EVERY;
        self.poll().await;
        if self.watch.lock().is_empty() {
            return Ok(()); // no peers have ever published: nothing to compare with
        }
        while Instant::now() < until {
            tokio::time::sleep(POLL_EVERY).await;
            self.poll().await;
        }
        match self.watch.excessive_drift() {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Runs until `shutdown` turns true, then removes this node's clock key.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) {
        let mut next_publish = Instant::now();
        loop {
            if Instant::now() >= next_publish {
                self.publish().await;
                next_publish = Instant::now() + PUBLISH_EVERY;
            }
            self.poll().await;
            let excessive = self.watch.excessive_drift();
            let was = self
                .watch
                .excessive
                .swap(excessive.is_some(), Ordering::Relaxed);
            match (&excessive, was) {
                (Some(why), false) => tracing::warn!(
                    event = "clock_drift_excessive",
                    detail = %why,
                    "clock drift beyond --max-drift: not ready"
                ),
                (None, true) => tracing::info!(
                    event = "clock_drift_recovered",
                    "clock drift back within --max-drift"
                ),
                _ => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL_EVERY) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                let mut txn = Txn::new(self.store.as_ref());
                txn.delete(self.own_key());
                let _ = tokio::time::timeout(Duration::from_secs(1), txn.commit()).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ms: u64) -> ClockRecord {
        ClockRecord {
            unix_ms: ms,
            node_id: "p".into(),
            expiring: false,
        }
    }

    /// One poll of `entries`, read between `a` and `b`.
    fn observe(w: &ClockWatch, entries: &[(String, u64, ClockRecord)], a: u64, b: u64) {
        let poll = w.begin_poll();
        w.observe("me", entries, poll, a, b);
    }

    #[test]
    fn drift_needs_a_change_and_takes_the_median_of_certain_parts() {
        let w = ClockWatch::new(Duration::from_secs(1));
        // First sighting: no estimate yet.
        observe(&w, &[("a".into(), 1, rec(10_000))], 10_000, 10_010);
        assert_eq!(w.drift_summary(), (0, 0));
        // The value changed: peer a wrote 13_000 while our clock read between 10_000 and
        // 12_020, so a is ahead by 980..3000 ms: we are behind it by at least 980.
        observe(&w, &[("a".into(), 2, rec(13_000))], 12_000, 12_020);
        assert_eq!(w.drift_summary(), (-980, 1));
        assert!(w.excessive_drift().is_none(), "980 ms is within 1 s");
        // A second peer that agrees with us: the median (closer to zero of two) clears us.
        observe(
            &w,
            &[("a".into(), 2, rec(13_000)), ("b".into(), 7, rec(12_100))],
            12_250,
            12_260,
        );
        observe(
            &w,
            &[("a".into(), 2, rec(13_000)), ("b".into(), 8, rec(12_500))],
            12_500,
            12_510,
        );
        assert_eq!(w.drift_summary(), (0, 2));
        // Our own key is never a peer; vanished keys are forgotten.
        observe(&w, &[("me".into(), 9, rec(99_999_999))], 13_000, 13_010);
        assert_eq!(w.drift_summary(), (0, 0));
    }

    #[test]
    fn an_outlier_sees_every_peer_off() {
        let w = ClockWatch::new(Duration::from_secs(1));
        let hour = 3_600_000u64;
        let peers = |v: u64, t: u64| -> Vec<(String, u64, ClockRecord)> {
            vec![("a".into(), v, rec(t)), ("b".into(), v, rec(t + 5))]
        };
        // We are an hour ahead of both peers.
        observe(&w, &peers(1, 1_000), hour + 1_000, hour + 1_010);
        observe(&w, &peers(2, 2_000), hour + 2_000, hour + 2_010);
        let (drift, n) = w.drift_summary();
        assert_eq!(n, 2);
        assert!(drift > 3_590_000, "{drift}");
        let why = w.excessive_drift().expect("excessive");
        assert!(why.contains("2 peer(s)"), "{why}");
    }

    #[test]
    fn a_step_is_judged_only_by_estimates_begun_after_it() {
        let w = ClockWatch::new(Duration::from_secs(1));
        let minute = 60_000u64;
        assert_eq!(w.step_verdict(w.polls()), StepVerdict::NoPeers);
        // Peer a agrees with us before the step.
        observe(&w, &[("a".into(), 1, rec(1_000))], 1_000, 1_010);
        observe(&w, &[("a".into(), 2, rec(2_000))], 2_000, 2_010);
        assert_eq!(w.drift_summary(), (0, 1));
        // Our clock steps a minute ahead; the peer's did not. The estimate whose interval
        // straddles the step contains zero: it must not count as agreement.
        let seen = w.polls();
        assert_eq!(w.step_verdict(seen), StepVerdict::Pending { peers: 1 });
        observe(
            &w,
            &[("a".into(), 3, rec(3_000))],
            minute + 3_000,
            minute + 3_010,
        );
        assert_eq!(
            w.drift_summary(),
            (0, 1),
            "the straddling interval contains zero"
        );
        assert_eq!(w.step_verdict(seen), StepVerdict::Pending { peers: 1 });
        observe(
            &w,
            &[("a".into(), 4, rec(4_000))],
            minute + 4_000,
            minute + 4_010,
        );
        let StepVerdict::Contradicted { peers: 1, drift_ms } = w.step_verdict(seen) else {
            panic!("{:?}", w.step_verdict(seen))
        };
        assert!(drift_ms > 58_000, "{drift_ms}");
        // Had the peer stepped with us (a fleet stepped together), it would confirm.
        let w = ClockWatch::new(Duration::from_secs(1));
        observe(&w, &[("a".into(), 1, rec(1_000))], 1_000, 1_010);
        observe(&w, &[("a".into(), 2, rec(2_000))], 2_000, 2_010);
        let seen = w.polls();
        observe(
            &w,
            &[("a".into(), 3, rec(minute + 3_000))],
            minute + 3_000,
            minute + 3_010,
        );
        observe(
            &w,
            &[("a".into(), 4, rec(minute + 4_000))],
            minute + 4_000,
            minute + 4_010,
        );
        assert_eq!(
            w.step_verdict(seen),
            StepVerdict::Confirmed {
                peers: 1,
                drift_ms: 0
            }
        );
        // With a second live peer, the verdict waits until it is measured too (one peer stepped
        // with this node does not outvote another not yet measured).
        let w = ClockWatch::new(Duration::from_secs(1));
        let both = |v: u64, a_ms: u64, b_ms: u64| -> Vec<(String, u64, ClockRecord)> {
            vec![("a".into(), v, rec(a_ms)), ("b".into(), v, rec(b_ms))]
        };
        observe(&w, &both(1, 1_000, 1_000), 1_000, 1_010);
        observe(&w, &both(2, 2_000, 2_000), 2_000, 2_010);
        let seen = w.polls();
        let only_a = |v: u64, a_ms: u64| -> Vec<(String, u64, ClockRecord)> {
            vec![("a".into(), v, rec(a_ms)), ("b".into(), 2, rec(2_000))]
        };
        observe(
            &w,
            &only_a(3, minute + 3_000),
            minute + 3_000,
            minute + 3_010,
        );
        observe(
            &w,
            &only_a(4, minute + 4_000),
            minute + 4_000,
            minute + 4_010,
        );
        assert_eq!(w.step_verdict(seen), StepVerdict::Pending { peers: 2 });
        observe(
            &w,
            &both(5, minute + 5_000, 5_000),
            minute + 5_000,
            minute + 5_010,
        );
        observe(
            &w,
            &both(6, minute + 6_000, 6_000),
            minute + 6_000,
            minute + 6_010,
        );
        // Peer a stepped with us, b did not: of the three clocks, two agree, and the median
        // (the closer to zero of two) does not blame this node, as for the drift alarm.
        assert_eq!(
            w.step_verdict(seen),
            StepVerdict::Confirmed {
                peers: 2,
                drift_ms: 0
            }
        );
    }
}
