use super::*;

// Behaviours every store gives (the first grant, a different layout refused, expiry and the
// safety period, release, ...) are the conformance suite's (`conformance.rs`), run on the
// memory store by `memory_store_passes_the_lease_conformance_suite`; this file holds what
// only the memory store's faults and wrappers can show.
use crate::store::memory::{Fault, MemoryStore};
use crate::store::{BoxFuture, Check, Entry, Write};
use idgen_id::DEFAULT_EPOCH_MS;

const NOW: u64 = DEFAULT_EPOCH_MS + 1_000_000; // Unix ms
const NOW_ID: u64 = 1_000_000;
const TTL: u64 = 10_000;

fn owner(name: &str) -> Owner {
    Owner {
        node_id: name.into(),
        host: "test-host".into(),
        pid: 1,
        started_unix_ms: NOW,
        instance: format!("{name}-instance"),
    }
}

fn leases<'s>(store: &'s dyn KvStore, name: &str, workers: u64) -> Leases<'s> {
    Leases::new(
        store,
        Layout::default(),
        LeaseConfig::new("t", workers),
        owner(name),
    )
}

// Disjoint ranges, regions and a clear error when full: the conformance suite's
// `nodes_get_disjoint_ranges_and_a_clear_error_when_full`, run on the memory store by
// `memory_store_passes_the_lease_conformance_suite` (and on the embedded store and etcd).

#[tokio::test(flavor = "current_thread")]
async fn a_previous_life_of_this_node_counts_as_expiring() {
    // A node killed and restarted at once finds its worker IDs still held under a live lease by
    // its previous life (same node ID, another instance): they free up by themselves, so the
    // refusal says so and start-up keeps trying (`Keeper::acquire_patiently`).
    let s = MemoryStore::new();
    let full = Layout::new(DEFAULT_EPOCH_MS, 52, 1, 10, 0).unwrap(); // 2 workers
    let life = |instance: &str| Owner {
        instance: instance.into(),
        ..owner("node")
    };
    let first = Leases::new(&s, full, LeaseConfig::new("t", 2), life("node-1"));
    let g = first.acquire(NOW).await.unwrap();
    let second = Leases::new(&s, full, LeaseConfig::new("t", 2), life("node-2"));
    let err = second.acquire(NOW + 100).await.unwrap_err();
    assert!(
        matches!(
            err,
            LeaseError::NoFreeRange {
                free: 0,
                expiring: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("2 more free up"), "{err}");
    // Another node's live lease is not expiring: that node may well be running.
    let other = Leases::new(&s, full, LeaseConfig::new("t", 2), owner("other"));
    assert!(matches!(
        other.acquire(NOW + 100).await,
        Err(LeaseError::NoFreeRange { expiring: 0, .. })
    ));
    // Only past the safety period does the second life get the range, above the old lease_end.
    let after = NOW + TTL + 2 * TTL + 1;
    let g2 = second.acquire(after).await.unwrap();
    assert_eq!((g2.workers.first, g2.floor), (0, g.lease_end));
}

#[tokio::test(flavor = "current_thread")]
async fn prefers_ranges_with_nothing_to_wait_for() {
    let s = MemoryStore::new();
    let a = leases(&s, "a", 2);
    let g = a.acquire(NOW).await.unwrap();
    // Released with a last-issued timestamp ahead of what the next node's clock reads.
    let ahead = NOW_ID + 5_000;
    a.release(&g, Some(ahead), NOW).await.unwrap();
    let b = leases(&s, "b", 2).acquire(NOW).await.unwrap();
    assert_eq!(
        b.workers.first, 2,
        "a never-used range beats one it would wait for"
    );
    assert_eq!(b.floor, 0);
    // When only the released range fits, it is taken, with the floor to wait for.
    let layout = Layout::new(DEFAULT_EPOCH_MS, 51, 1, 11, 0).unwrap(); // 2 workers
    let s2 = MemoryStore::new();
    let mk = |name: &str| Leases::new(&s2, layout, LeaseConfig::new("t", 2), owner(name));
    let g = mk("a").acquire(NOW).await.unwrap();
    mk("a").release(&g, Some(ahead), NOW).await.unwrap();
    let g2 = mk("b").acquire(NOW).await.unwrap();
    assert_eq!((g2.workers.first, g2.floor), (0, ahead));
    assert_eq!(
        g2.lease_end,
        NOW_ID + TTL,
        "lease_end = max(floor, now + ttl)"
    );
}

/// A layout with only two worker IDs, so grants must reuse them.
fn tiny() -> Layout {
    Layout::new(DEFAULT_EPOCH_MS, 51, 1, 11, 0).unwrap()
}

fn tiny_leases<'s>(store: &'s dyn KvStore, name: &str) -> Leases<'s> {
    Leases::new(store, tiny(), LeaseConfig::new("t", 2), owner(name))
}

/// One worker ID of the two of [`tiny`].
fn tiny_leases1<'s>(store: &'s dyn KvStore, name: &str) -> Leases<'s> {
    Leases::new(store, tiny(), LeaseConfig::new("t", 1), owner(name))
}

#[tokio::test(flavor = "current_thread")]
async fn lease_end_never_moves_backwards() {
    let s = MemoryStore::new();
    let a = tiny_leases(&s, "a");
    let g = a.acquire(NOW).await.unwrap();
    // Renewing with a clock that went back keeps lease_end.
    let end = a.renew(&g, NOW - 60_000).await.unwrap();
    assert_eq!(end, g.lease_end);
    let end = a.renew(&g, NOW + 1_000).await.unwrap();
    assert_eq!(end, NOW_ID + 1_000 + TTL);
    // A grant to a node whose clock is an hour behind the stored lease_end keeps it too: the
    // new holder waits for its clock instead of reusing the old holder's timestamps.
    a.release(&g, Some(end - 1), NOW).await.unwrap();
    let b = tiny_leases(&s, "b").acquire(NOW - 3_600_000).await.unwrap();
    assert_eq!(b.workers.first, 0);
    assert_eq!(b.floor, end - 1);
    assert_eq!(b.lease_end, end - 1, "max(floor, now + ttl)");
}

#[tokio::test(flavor = "current_thread")]
async fn renew_and_release_detect_a_lost_lease() {
    let s = MemoryStore::new();
    let a = tiny_leases(&s, "a");
    let g = a.acquire(NOW).await.unwrap();
    let later = NOW + 4 * TTL;
    let b = tiny_leases(&s, "b").acquire(later).await.unwrap();
    assert_eq!(b.workers.first, 0, "taken over after expiry + safety");
    assert!(matches!(a.renew(&g, later).await, Err(LeaseError::Lost(_))));
    assert_eq!(
        a.release(&g, Some(NOW_ID + 5), later).await.unwrap(),
        Released::AlreadyLost
    );
    // b's records are untouched by a's attempts.
    let recs = a.workers().await.unwrap();
    assert_eq!(recs[0].1.owner.node_id, "b");
    assert_eq!(recs[0].1.generation, b.generation);
}

#[tokio::test(flavor = "current_thread")]
async fn release_frees_at_once_with_the_true_last_timestamp() {
    let s = MemoryStore::new();
    // Four worker IDs: the next grant of three must reuse the released ones.
    fn leases<'s>(s: &'s MemoryStore, name: &str, n: u64) -> Leases<'s> {
        let four = Layout::new(DEFAULT_EPOCH_MS, 50, 2, 11, 0).unwrap();
        Leases::new(s, four, LeaseConfig::new("t", n), owner(name))
    }
    let a = leases(&s, "a", 3);
    let g = a.acquire(NOW).await.unwrap();
    let last = NOW_ID + 17;
    assert_eq!(
        a.release(&g, Some(last), NOW + 20).await.unwrap(),
        Released::Freed { lease_end: last }
    );
    let b = leases(&s, "b", 3).acquire(NOW + 20).await.unwrap();
    assert_eq!((b.workers.first, b.floor), (0, last));
    // Releasing without having issued anything keeps the floor as lease_end.
    let c = leases(&s, "b", 3);
    assert_eq!(
        c.release(&b, None, NOW + 30).await.unwrap(),
        Released::Freed { lease_end: last }
    );
}

#[tokio::test(flavor = "current_thread")]
async fn unknown_outcomes_are_safe() {
    // With room to spare, a retry after an unknown acquisition takes a fresh range rather than
    // wait for its own orphaned records' lease_end.
    let s = MemoryStore::new();
    let a = leases(&s, "a", 2);
    s.inject(Fault::UnknownApplied);
    assert!(matches!(
        a.acquire(NOW).await,
        Err(LeaseError::Store(StoreError::Unknown(_)))
    ));
    let g = a.acquire(NOW + 1).await.unwrap();
    assert_eq!((g.workers.first, g.floor, g.generation), (2, 0, 2));
    // ... and releases the orphan in the same commit, at its lease_end: free for anyone now.
    let recs = a.ranges().await.unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!((recs[0].0, recs[0].1.state), (0, WorkerState::Released));
    assert_eq!(recs[0].1.lease_end, NOW_ID + TTL, "kept, never lowered");

    // Without room, it adopts its own records, floored at their lease_end.
    let s = MemoryStore::new();
    let a = tiny_leases(&s, "a");
    s.inject(Fault::UnknownApplied);
    assert!(a.acquire(NOW).await.is_err());
    let g = a.acquire(NOW + 1).await.unwrap();
    assert_eq!(
        (g.workers.first, g.floor, g.generation),
        (0, NOW_ID + TTL, 2)
    );
    // Nobody else may take them meanwhile.
    assert!(matches!(
        tiny_leases(&s, "b").acquire(NOW + 1).await,
        Err(LeaseError::NoFreeRange {
            free: 0,
            expiring: 0,
            ..
        })
    ));

    // A renewal lost on the way leaves the stored lease_end where it was.
    s.inject(Fault::UnknownLost);
    assert!(a.renew(&g, NOW + 100).await.is_err());
    let recs = a.workers().await.unwrap();
    assert_eq!(recs[0].1.lease_end, g.lease_end);
}

#[tokio::test(flavor = "current_thread")]
async fn corrupt_records_are_reported_not_trusted() {
    let s = MemoryStore::new();
    let a = leases(&s, "a", 1);
    a.acquire(NOW).await.unwrap();
    s.commit(
        &[],
        &[Write::Put {
            key: b"idgen/t/workers/00005".to_vec(),
            value: b"{not json".to_vec(),
        }],
    )
    .await
    .unwrap();
    let err = leases(&s, "b", 1).acquire(NOW).await.unwrap_err();
    assert!(
        matches!(&err, LeaseError::Corrupt { key, .. } if key == "idgen/t/workers/00005"),
        "{err}"
    );
    s.commit(
        &[],
        &[Write::Put {
            key: b"idgen/t/generation".to_vec(),
            value: b"seven".to_vec(),
        }],
    )
    .await
    .unwrap();
    s.commit(
        &[],
        &[Write::Delete {
            key: b"idgen/t/workers/00005".to_vec(),
        }],
    )
    .await
    .unwrap();
    assert!(matches!(
        leases(&s, "b", 1).acquire(NOW).await,
        Err(LeaseError::Corrupt { .. })
    ));
}

/// Where a [`Racy`] store lets its rival in.
enum Before {
    /// This node's next commit.
    Commit,
    /// The `nth` read of `key` (1 for the first).
    Read { key: Vec<u8>, nth: usize },
}

/// A store that lets another node's operation (`rival`, on the inner store, on a thread of
/// its own) slip in at one point of this node's: before its next commit, or before the `nth`
/// read of a key.
struct Racy {
    inner: &'static MemoryStore,
    before: Before,
    reads: std::sync::atomic::AtomicUsize,
    rival: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Racy {
    fn new(
        inner: &'static MemoryStore,
        before: Before,
        rival: impl FnOnce() + Send + 'static,
    ) -> &'static Racy {
        Box::leak(Box::new(Racy {
            inner,
            before,
            reads: Default::default(),
            rival: std::sync::Mutex::new(Some(Box::new(rival))),
        }))
    }

    fn let_the_rival_in(&self) {
        if let Some(rival) = self.rival.lock().unwrap().take() {
            std::thread::spawn(rival).join().unwrap();
        }
    }
}

impl KvStore for Racy {
    fn get<'b>(&'b self, key: &'b [u8]) -> BoxFuture<'b, Result<Option<Entry>, StoreError>> {
        if let Before::Read { key: at, nth } = &self.before {
            if key == at.as_slice()
                && 1 + self
                    .reads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    == *nth
            {
                self.let_the_rival_in();
            }
        }
        self.inner.get(key)
    }
    fn scan<'b>(&'b self, prefix: &'b [u8]) -> BoxFuture<'b, Result<Vec<Entry>, StoreError>> {
        self.inner.scan(prefix)
    }
    fn commit<'b>(
        &'b self,
        checks: &'b [Check],
        writes: &'b [Write],
    ) -> BoxFuture<'b, Result<Commit, StoreError>> {
        if matches!(self.before, Before::Commit) {
            self.let_the_rival_in();
        }
        self.inner.commit(checks, writes)
    }
    fn describe(&self) -> String {
        "racy".into()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn competing_acquisitions_serialize() {
    let inner: &'static MemoryStore = Box::leak(Box::new(MemoryStore::new()));
    leases(inner, "setup", 1).ensure_cluster(NOW).await.unwrap();
    // The rival takes workers 0..2 between our reads and our commit.
    let racy = Racy::new(inner, Before::Commit, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let g = rt.block_on(leases(inner, "rival", 2).acquire(NOW)).unwrap();
        assert_eq!(g.workers.first, 0);
    });
    let g = leases(racy, "a", 2).acquire(NOW).await.unwrap();
    assert_eq!(
        g.workers.first, 2,
        "our first attempt conflicted; the retry chose again"
    );
    assert_eq!(g.generation, 2);
    let owners: Vec<String> = leases(inner, "x", 1)
        .workers()
        .await
        .unwrap()
        .into_iter()
        .map(|(_, r)| r.owner.node_id)
        .collect();
    assert_eq!(owners, vec!["rival", "rival", "a", "a"]);
}

/// `choose_range` over records `(first, end, avail)` in `lo..hi`; the first worker ID only.
fn choose(lo: u64, hi: u64, records: &[(u64, u64, Avail)], n: u64) -> Option<u64> {
    choose_range(&segments(lo, hi, records.iter().copied()), n).map(|(first, _)| first)
}

#[test]
fn choose_range_avoids_blocked_and_takes_the_least_wait() {
    use Avail::*;
    let one = |v: &[(u64, Avail)]| v.iter().map(|&(i, a)| (i, i + 1, a)).collect::<Vec<_>>();
    assert_eq!(choose(0, 8, &[], 3), Some(0));
    assert_eq!(choose(0, 8, &one(&[(1, Blocked)]), 3), Some(2));
    assert_eq!(
        choose(0, 8, &one(&[(1, Blocked), (5, Blocked)]), 3),
        Some(2)
    );
    assert_eq!(
        choose(0, 8, &one(&[(1, Blocked), (4, Blocked)]), 3),
        Some(5)
    );
    assert_eq!(choose(4, 8, &one(&[(5, Blocked)]), 3), None);
    assert_eq!(choose(0, 1, &one(&[(0, Released)]), 1), Some(0));
    // Only windows with something to wait for: the least wait wins.
    let waits = one(&[(0, Ahead(50)), (1, Ahead(10)), (2, Ahead(30)), (3, Blocked)]);
    assert_eq!(choose(0, 4, &waits, 1), Some(1));
    assert_eq!(choose(0, 4, &waits, 2), Some(1));
    assert_eq!(choose(0, 3, &waits, 3), Some(0));
    assert_eq!(choose(0, 4, &waits, 4), None);
    // Wide records: a window may start inside one, never in a blocked one.
    let wide = [(0, 10, Released), (10, 20, Blocked), (20, 40, Ahead(7))];
    assert_eq!(choose(0, 40, &wide, 10), Some(0));
    assert_eq!(choose(0, 40, &wide, 11), Some(20));
    assert_eq!(choose(0, 40, &wide, 21), None);
    assert_eq!(
        choose(5, 40, &wide, 5),
        Some(5),
        "records cut to the search space"
    );
}

#[test]
fn choose_range_prefers_never_used_then_released_then_expired_then_ahead() {
    use Avail::*;
    let recs = [(0, 2, Expired), (2, 4, Released)];
    assert_eq!(choose(0, 8, &recs, 2), Some(4), "never used first");
    assert_eq!(choose(0, 8, &recs, 4), Some(4));
    assert_eq!(
        choose(0, 8, &recs, 5),
        Some(2),
        "released and never used beat expired"
    );
    assert_eq!(choose(0, 4, &recs, 2), Some(2), "released before expired");
    assert_eq!(choose(0, 4, &recs, 4), Some(0));
    let recs = [(0, 2, Ahead(5)), (2, 4, Expired)];
    assert_eq!(choose(0, 4, &recs, 2), Some(2), "expired before ahead");
    assert_eq!(choose(0, 4, &recs, 3), Some(0));
    // Costs compare as a whole: one expired ID makes a window expired.
    let recs = [
        (0, 1, Released),
        (1, 2, Expired),
        (2, 3, Released),
        (3, 4, Released),
    ];
    assert_eq!(choose(0, 4, &recs, 2), Some(2));
}

#[test]
fn choose_range_is_linear_in_records() {
    // A 16-bit space of one-worker records, all grantable but one blocked in every 1,000.
    let recs: Vec<(u64, u64, Avail)> = (0..65_536u64)
        .map(|i| {
            let a = match i % 1000 {
                999 => Avail::Blocked,
                k => Avail::Ahead(1_000 + (i * 7919) % 5000 + k),
            };
            (i, i + 1, a)
        })
        .collect();
    let started = std::time::Instant::now();
    let got = choose(0, 65_536, &recs, 900);
    assert!(got.is_some());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The answer is the brute-force minimum.
    let cost = |s: u64| {
        recs[s as usize..(s + 900) as usize]
            .iter()
            .map(|r| r.2)
            .max()
            .unwrap()
    };
    let best = (0..=65_536 - 900)
        .filter(|&s| cost(s) != Avail::Blocked)
        .min_by_key(|&s| (cost(s), s))
        .unwrap();
    assert_eq!(got, Some(best));
}

#[tokio::test(flavor = "current_thread")]
async fn memory_store_passes_the_lease_conformance_suite() {
    conformance::run(&MemoryStore::new(), "conf").await;
}

#[tokio::test(flavor = "current_thread")]
async fn embedded_store_passes_the_lease_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::embedded::EmbeddedStore::open(dir.path()).unwrap();
    conformance::run(&store, "conf").await;
    // Run twice in one store: the namespaces keep the runs apart.
    conformance::run(&store, "conf2").await;
}

#[tokio::test(flavor = "current_thread")]
async fn the_conformance_suite_keeps_every_commit_small_and_knows_live_holders() {
    for expires in [false, true] {
        let store = conformance::Recording::claiming_expiry(MemoryStore::new(), expires);
        conformance::run(&store, "sized").await;
        let (checks, writes) = store.largest();
        // The grant of 256 merges 256 one-worker records first: without merges its commit
        // would check 258 keys.
        assert!(
            checks <= MAX_RECORDS_PER_TXN + 2 && writes <= MAX_RECORDS_PER_TXN + 4,
            "largest commit: {checks} checks, {writes} writes"
        );
        assert!(checks > 8, "the suite never made a large commit: {checks}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn renew_and_release_touch_one_record_however_wide() {
    let store = conformance::Recording::claiming_expiry(MemoryStore::new(), false);
    let a = leases(&store, "a", 1024);
    let g = a.acquire(NOW).await.unwrap();
    assert_eq!(
        store.largest(),
        (2, 3),
        "cluster + generation; cluster, generation, record"
    );
    let commits = store.inner.commits();
    a.renew(&g, NOW + 1).await.unwrap();
    a.release(&g, None, NOW + 2).await.unwrap();
    assert_eq!(store.inner.commits(), commits + 2);
    assert_eq!(store.largest(), (2, 3));
    let recs = store.inner.scan(b"idgen/t/workers/").await.unwrap();
    assert_eq!(recs.len(), 1);
}

/// Grants of any width (1 to 100 worker IDs in a space of 256) taken, renewed, released,
/// abandoned (crashes) and taken over under clocks that jump, with unknown commit outcomes:
/// trimmed remainders and merges must keep every worker ID's holders in disjoint, ordered
/// timestamp intervals, and records never overlap. (`sim.rs` checks the same with fixed-width
/// grants, which never trim a record.)
#[test]
fn grants_of_any_width_keep_successive_holders_apart() {
    struct Proc {
        name: String,
        life: u32,
        offset: i64,
        grant: Option<Grant>,
        ceiling: u64,
        last: Option<u64>,
    }
    let layout = Layout::new(DEFAULT_EPOCH_MS, 45, 8, 10, 0).unwrap();
    let widths = [1, 1, 2, 3, 4, 6, 8, 16, 40, 100];
    let (mut grants, mut issues, mut merged) = (0u64, 0u64, 0u64);
    for seed in 1..=20u64 {
        let store = MemoryStore::new();
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        };
        let mut procs: Vec<Proc> = (0..8)
            .map(|i| Proc {
                name: format!("p{i}"),
                life: 0,
                offset: 0,
                grant: None,
                ceiling: 0,
                last: None,
            })
            .collect();
        let mut now = DEFAULT_EPOCH_MS + 10_000_000;
        // The space starts fully recorded, one record per worker ID (as the previous version
        // wrote them): wide windows must merge before they are granted.
        let writes: Vec<Write> = (0..256u64)
            .map(|id| Write::Put {
                key: format!("idgen/w/workers/{id:05}").into_bytes(),
                value: serde_json::to_vec(&WorkerRecord {
                    state: WorkerState::Released,
                    owner: owner("old"),
                    generation: 0,
                    lease_end: 10_000_000 - next(5_000),
                    count: 1,
                    layout_version: 1,
                    written_unix_ms: 0,
                })
                .unwrap(),
            })
            .collect();
        block_on(store.commit(&[], &writes)).unwrap();
        // worker → generation → (lowest, highest) timestamp issued
        let mut issued: std::collections::HashMap<
            u64,
            std::collections::BTreeMap<u64, (u64, u64)>,
        > = Default::default();
        for step in 0..1_200 {
            let action = next(100);
            let mut p = next(procs.len() as u64) as usize;
            if (30..=79).contains(&action) && next(5) > 0 {
                // Renewing and issuing are what holders do: aim them at holders, mostly.
                let holders: Vec<usize> = (0..procs.len())
                    .filter(|&i| procs[i].grant.is_some())
                    .collect();
                if !holders.is_empty() {
                    p = holders[next(holders.len() as u64) as usize];
                }
            }
            let clock = now.saturating_add_signed(procs[p].offset);
            let id_now = clock - layout.epoch_ms();
            let mk = |proc_: &Proc, width: u64| {
                let mut c = LeaseConfig::new("w", width);
                c.ttl = Duration::from_millis(3_000);
                c.safety = Duration::from_millis(6_000);
                c.max_attempts = 3;
                let owner = Owner {
                    instance: format!("{}#{}", proc_.name, proc_.life),
                    ..owner(&proc_.name)
                };
                Leases::new(&store, layout, c, owner)
            };
            let ctx = format!("seed {seed} step {step} proc {p}");
            match action {
                0..=14 => now += next(1_500),
                15..=29 if procs[p].grant.is_none() => {
                    let width = widths[next(widths.len() as u64) as usize];
                    let before = store.commits();
                    if let Ok(g) = block_on(mk(&procs[p], width).acquire(clock)) {
                        grants += 1;
                        merged += (store.commits() - before).saturating_sub(1);
                        for w in g.workers.ids() {
                            let max = issued
                                .get(&w)
                                .and_then(|gens| gens.values().map(|r| r.1).max())
                                .unwrap_or(0);
                            assert!(
                                g.floor >= max,
                                "{ctx}: {g:?} floor below {max} of worker {w}"
                            );
                        }
                        procs[p].ceiling = g.lease_end;
                        procs[p].last = None;
                        procs[p].grant = Some(g);
                    }
                }
                30..=49 => {
                    if let Some(g) = procs[p].grant.clone() {
                        match block_on(mk(&procs[p], g.workers.count).renew(&g, clock)) {
                            Ok(end) => {
                                procs[p].ceiling = procs[p].ceiling.max(end);
                                procs[p].grant.as_mut().unwrap().lease_end = end;
                            }
                            Err(LeaseError::Lost(_)) => procs[p].grant = None,
                            Err(_) => {}
                        }
                    }
                }
                50..=79 => {
                    let proc_ = &mut procs[p];
                    let Some(g) = proc_.grant.clone() else {
                        continue;
                    };
                    if id_now <= g.floor
                        || id_now >= proc_.ceiling
                        || proc_.last.is_some_and(|l| id_now < l)
                    {
                        continue;
                    }
                    proc_.last = Some(id_now);
                    issues += 1;
                    for w in g.workers.ids() {
                        let gens = issued.entry(w).or_default();
                        for (&gen, &(lo, hi)) in gens.iter() {
                            if gen < g.generation {
                                assert!(hi < id_now, "{ctx}: worker {w}: gen {} issued {id_now} ≤ {hi} of older gen {gen}", g.generation);
                            } else if gen > g.generation {
                                assert!(lo > id_now, "{ctx}: worker {w}: gen {} issued {id_now} ≥ {lo} of newer gen {gen}", g.generation);
                            }
                        }
                        let e = gens.entry(g.generation).or_insert((id_now, id_now));
                        e.0 = e.0.min(id_now);
                        e.1 = e.1.max(id_now);
                    }
                }
                80..=84 => {
                    if let Some(g) = procs[p].grant.take() {
                        let last = procs[p].last;
                        let _ = block_on(mk(&procs[p], g.workers.count).release(&g, last, clock));
                    }
                }
                85..=88 => {
                    // A restart: the next life is another instance; the old one either died
                    // (its grant abandoned) or goes on as a zombie (a paused VM, say).
                    let life = procs.iter().filter(|q| q.name == procs[p].name).count() as u32;
                    let name = procs[p].name.clone();
                    if next(2) == 0 || procs.len() >= 14 {
                        procs[p].grant = None;
                    }
                    if procs.len() < 14 {
                        procs.push(Proc {
                            name,
                            life,
                            offset: procs[p].offset,
                            grant: None,
                            ceiling: 0,
                            last: None,
                        });
                    }
                }
                89..=92 => procs[p].offset += next(40_000) as i64 - 20_000,
                93..=95 if store.pending_faults() == 0 => store.inject(match next(2) {
                    0 => Fault::UnknownApplied,
                    _ => Fault::UnknownLost,
                }),
                96..=97 => now += 10_000 + next(10_000),
                _ => {}
            }
            if step % 25 == 0 {
                // Records never overlap (ranges() refuses overlapping ones).
                block_on(mk(&procs[0], 1).ranges()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            }
        }
    }
    eprintln!("{grants} grants, {issues} issue steps, {merged} merge commits");
    assert!(
        grants > 1_000 && issues > 2_000 && merged > 20,
        "{grants} {issues} {merged}"
    );
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("a memory store operation did not complete"),
    }
}

/// 128 worker IDs.
fn layout128() -> Layout {
    Layout::new(DEFAULT_EPOCH_MS, 46, 7, 10, 0).unwrap()
}

/// Writes a one-worker record for each of `ids` as it is (no checks), and the generation
/// counter: a namespace of many small records, as ones from before ranges leave it.
async fn write_records(s: &MemoryStore, ids: impl Iterator<Item = u64>, rec: &WorkerRecord) {
    let l = Leases::new(s, layout128(), LeaseConfig::new("t", 1), owner("setup"));
    l.ensure_cluster(NOW).await.unwrap();
    let mut writes: Vec<Write> = ids
        .map(|id| Write::Put {
            key: l.worker_key(id),
            value: serde_json::to_vec(&WorkerRecord {
                generation: id + 1,
                ..rec.clone()
            })
            .unwrap(),
        })
        .collect();
    writes.push(Write::Put {
        key: b"idgen/t/generation".to_vec(),
        value: b"500".to_vec(),
    });
    s.commit(&[], &writes).await.unwrap();
}

fn released_long_ago() -> WorkerRecord {
    WorkerRecord {
        state: WorkerState::Released,
        owner: owner("old"),
        generation: 1,
        lease_end: NOW_ID - 100_000,
        count: 1,
        layout_version: LAYOUT_VERSION,
        written_unix_ms: NOW - 100_000,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_merge_never_overlays_a_grant_made_in_a_gap_after_its_scan() {
    // Released one-worker records over 0..128 but for a never-used gap at worker 30. A node
    // that wants 90 worker IDs chooses 0..90, which overlaps 89 records: it merges 0..65 first
    // (64 records and the gap). Between its scan and the merge's read of the generation, a
    // rival takes the never-used worker 30.
    let inner: &'static MemoryStore = Box::leak(Box::new(MemoryStore::new()));
    write_records(inner, (0..128).filter(|&w| w != 30), &released_long_ago()).await;
    let rival = move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let g = rt
            .block_on(
                Leases::new(inner, layout128(), LeaseConfig::new("t", 1), owner("rival"))
                    .acquire(NOW),
            )
            .unwrap();
        assert_eq!(
            (g.workers.first, g.floor),
            (30, 0),
            "the rival takes the gap"
        );
    };
    // The acquisition's own read of the generation, then the merge's.
    let before = Before::Read {
        key: b"idgen/t/generation".to_vec(),
        nth: 2,
    };
    let racy = Racy::new(inner, before, rival);
    let big = Leases::new(racy, layout128(), LeaseConfig::new("t", 90), owner("big"));
    let g = big.acquire(NOW).await.unwrap();
    assert!(
        g.workers.first > 30,
        "the grant avoids the rival's worker: {g:?}"
    );
    // The rival's record is intact and no record overlaps another.
    let ranges = big.ranges().await.expect("no overlapping records");
    let (_, rival) = ranges.iter().find(|(first, _)| *first == 30).unwrap();
    assert_eq!(
        (rival.state, rival.count, rival.owner.node_id.as_str()),
        (WorkerState::Held, 1, "rival")
    );
    assert_eq!(rival.lease_end, NOW_ID + TTL);
}

#[tokio::test(flavor = "current_thread")]
async fn an_overlap_error_names_both_records() {
    let s = MemoryStore::new();
    write_records(&s, 0..1, &released_long_ago()).await;
    let held = WorkerRecord {
        state: WorkerState::Released,
        count: 65,
        ..released_long_ago()
    };
    let l = Leases::new(&s, layout128(), LeaseConfig::new("t", 1), owner("x"));
    s.commit(
        &[],
        &[Write::Put {
            key: l.worker_key(0),
            value: serde_json::to_vec(&held).unwrap(),
        }],
    )
    .await
    .unwrap();
    write_records(
        &s,
        30..31,
        &WorkerRecord {
            state: WorkerState::Held,
            owner: owner("live"),
            lease_end: NOW_ID + TTL,
            ..released_long_ago()
        },
    )
    .await;
    let err = l.acquire(NOW).await.unwrap_err();
    let LeaseError::Corrupt { key, detail } = &err else {
        panic!("expected corrupt records, got {err}");
    };
    assert_eq!(key, "idgen/t/workers/00030");
    for part in [
        "workers 30..31 (held by live-instance",
        &format!("lease_end {}", NOW_ID + TTL),
        "workers 0..65 at idgen/t/workers/00000 (released by old-instance",
    ] {
        assert!(detail.contains(part), "{part:?} missing from: {detail}");
    }
}

/// Publishes `name`'s clock key, as a running node does (on a store that expires keys, that
/// is what tells an acquirer the holder is alive).
async fn publish_clock(store: &dyn KvStore, name: &str) {
    let key = format!("{}{}-instance", clocks_prefix("t"), name);
    let value = format!(r#"{{"unix_ms":{NOW},"node_id":"{name}","expiring":true}}"#);
    store
        .put_expiring(key.as_bytes(), value.as_bytes(), Duration::from_secs(5))
        .await
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn an_acquisition_whose_answer_was_lost_orphans_no_record() {
    // A store that expires keys (etcd): a node that publishes its clock keeps what it holds.
    let s = conformance::Recording::claiming_expiry(MemoryStore::new(), true);
    publish_clock(&s, "a").await;
    let a = tiny_leases1(&s, "a");
    // The first grant (worker 0) commits, but its answer is lost (the keeper's timeout, a
    // leader change); the retry takes worker 1.
    s.inner.inject(Fault::UnknownApplied);
    assert!(matches!(
        a.acquire(NOW).await,
        Err(LeaseError::Store(StoreError::Unknown(_)))
    ));
    let g = a.acquire(NOW + 1).await.unwrap();
    assert_eq!(g.workers.first, 1);
    // An hour later, with `a` alive and renewing worker 1, another node gets worker 0: the
    // retry released it.
    let hour = 3_600_000;
    a.renew(&g, NOW + hour).await.unwrap();
    let b = tiny_leases1(&s, "b").acquire(NOW + hour).await.unwrap();
    assert_eq!(
        (b.workers.first, b.floor),
        (0, NOW_ID + TTL),
        "floored at the orphan's lease_end"
    );
    // Worker IDs whose holders still publish their clocks are not promised to free up, even
    // once their lease_end has passed: nobody else may take them.
    publish_clock(&s, "b").await;
    match tiny_leases1(&s, "c").acquire(NOW + hour + 10 * TTL).await {
        Err(LeaseError::NoFreeRange { free, expiring, .. }) => {
            assert_eq!(
                (free, expiring),
                (0, 0),
                "live holders' ranges do not expire"
            )
        }
        other => panic!("expected no free range, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_scheduled_successor_caps_the_old_generation_and_fences_the_new_one() {
    let s = MemoryStore::new();
    let a = leases(&s, "a", 4);
    let g = a.acquire(NOW).await.unwrap();
    let base = Layout::default();
    let switch = NOW + 60_000;
    let next = Layout::new(
        idgen_id::successor_epoch(&base, switch, 9, 12).unwrap(),
        42,
        9,
        12,
        0,
    )
    .unwrap();
    // Not on records of version 2; too soon; past a stored lease; then scheduled once.
    let err = a.schedule_successor(next, switch, NOW).await.unwrap_err();
    assert!(matches!(err, LeaseError::RecordVersion(_)), "{err:?}");
    a.upgrade_records().await.unwrap();
    let err = a
        .schedule_successor(next, NOW + 1_000, NOW)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("every node must hear"), "{err}");
    let err = a
        .schedule_successor(next, NOW + TTL / 2, NOW - 10_000)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("past the switch"), "{err}");
    let gens = a.schedule_successor(next, switch, NOW).await.unwrap();
    assert!(a
        .schedule_successor(next, switch + 60_000, NOW)
        .await
        .is_err());
    let last = gens.last_timestamp(0).unwrap();
    assert_eq!(last, switch - DEFAULT_EPOCH_MS - 1);

    // A renewal close to the switch stops at the old generation's last timestamp.
    let (end, seen) = a.renew_seeing(&g, switch - 1_000).await.unwrap();
    assert_eq!((end, seen), (last, gens.clone()));
    // Acquiring in generation 0 after the switch is refused with the new generations; in
    // generation 1 the grant starts at the switch, in its own worker space.
    let b = leases(&s, "b", 4);
    let err = b.acquire(switch + 10).await.unwrap_err();
    assert!(
        matches!(&err, LeaseError::Rescheduled(g) if **g == gens),
        "{err:?}"
    );
    let b1 = leases(&s, "b", 4).in_generation(gens.all()[1]);
    let g1 = b1.acquire(switch + 10).await.unwrap();
    assert_eq!(g1.layout_generation, 1);
    assert_eq!(
        g1.workers.first, 0,
        "generation 1 has its own worker records"
    );
    assert_eq!(g1.floor, switch - next.epoch_ms() - 1);
    let first_new = next.compose(g1.floor + 1, 0, 0).unwrap().0;
    let last_old = base
        .compose(last, base.max_worker(), base.max_sequence())
        .unwrap()
        .0;
    assert!(last_old < first_new);
    // A grant in generation 0 before the switch ends by the old generation's last timestamp.
    let early = leases(&s, "c", 4).acquire(switch - 5_000).await.unwrap();
    assert_eq!(early.lease_end, last);
}
