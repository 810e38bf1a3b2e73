use super::*;
use crate::layout::DEFAULT_EPOCH_MS;
use crate::store::memory::{Fault, MemoryStore};
use crate::store::{BoxFuture, Check, Entry, Write};

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

#[tokio::test(flavor = "current_thread")]
async fn first_acquire_creates_the_cluster_and_grants_from_zero() {
    let s = MemoryStore::new();
    let a = leases(&s, "a", 4);
    let g = a.acquire(NOW).await.unwrap();
    assert_eq!(
        g,
        Grant {
            first: 0,
            count: 4,
            generation: 1,
            floor: 0,
            lease_end: NOW_ID + TTL
        }
    );
    let cluster = a.cluster().await.unwrap().unwrap();
    assert_eq!(cluster.layout, LayoutRecord::from(Layout::default()));
    let recs = a.workers().await.unwrap();
    assert_eq!(recs.len(), 4);
    assert!(recs.iter().all(|(_, r)| r.state == WorkerState::Held
        && r.generation == 1
        && r.owner.node_id == "a"
        && r.lease_end == NOW_ID + TTL));
    // Keys live under the namespace.
    assert!(s.get(b"idgen/t/workers/00003").await.unwrap().is_some());
    assert!(s.get(b"idgen/t/cluster").await.unwrap().is_some());
}

#[tokio::test(flavor = "current_thread")]
async fn a_different_layout_is_refused_naming_both() {
    let s = MemoryStore::new();
    leases(&s, "a", 1).acquire(NOW).await.unwrap();
    let other = Layout::new(DEFAULT_EPOCH_MS, 40, 11, 12, 0).unwrap();
    let b = Leases::new(&s, other, LeaseConfig::new("t", 1), owner("b"));
    let err = b.acquire(NOW).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LeaseError::LayoutMismatch { .. }));
    assert!(
        msg.contains("41/10/12") && msg.contains("40/11/12"),
        "{msg}"
    );
    // The same layout in another namespace is a different cluster.
    let c = Leases::new(&s, other, LeaseConfig::new("other", 1), owner("c"));
    assert_eq!(c.acquire(NOW).await.unwrap().first, 0);
}

// Disjoint ranges, regions and a clear error when full: the conformance suite's
// `nodes_get_disjoint_ranges_and_a_clear_error_when_full`, run on the memory store by
// `memory_store_passes_the_lease_conformance_suite` (and on the embedded store and etcd).

#[tokio::test(flavor = "current_thread")]
async fn an_expired_lease_is_free_only_after_the_safety_period() {
    let s = MemoryStore::new();
    let a = leases(&s, "a", 1).acquire(NOW).await.unwrap();
    let b = leases(&s, "b", 1);
    // Expired (past lease_end) but inside the safety period (2 × TTL): still reserved.
    let expired = NOW + TTL + 2 * TTL; // lease_end + safety, exactly
    assert_eq!(b.acquire(expired).await.unwrap().first, 1);
    // With a full worker space, the refusal says that one ID is only waiting out its safety.
    let full = Layout::new(DEFAULT_EPOCH_MS, 52, 1, 10, 0).unwrap(); // 2 workers: 0 and 1
    let d = Leases::new(&s, full, LeaseConfig::new("t2", 1), owner("d"));
    d.acquire(NOW).await.unwrap();
    Leases::new(&s, full, LeaseConfig::new("t2", 1), owner("e"))
        .acquire(NOW)
        .await
        .unwrap();
    let err = Leases::new(&s, full, LeaseConfig::new("t2", 1), owner("f"))
        .acquire(NOW + TTL + 1)
        .await
        .unwrap_err();
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
    // One ms past the safety period: worker 0 is free again, floored at its old lease_end.
    let c = leases(&s, "c", 1).acquire(expired + 1).await.unwrap();
    assert_eq!(c.first, 0);
    assert_eq!(c.floor, a.lease_end);
    assert!(c.lease_end > c.floor);
}

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
    assert_eq!((g2.first, g2.floor), (0, g.lease_end));
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
    assert_eq!(b.first, 2, "a never-used range beats one it would wait for");
    assert_eq!(b.floor, 0);
    // When only the released range fits, it is taken, with the floor to wait for.
    let layout = Layout::new(DEFAULT_EPOCH_MS, 51, 1, 11, 0).unwrap(); // 2 workers
    let s2 = MemoryStore::new();
    let mk = |name: &str| Leases::new(&s2, layout, LeaseConfig::new("t", 2), owner(name));
    let g = mk("a").acquire(NOW).await.unwrap();
    mk("a").release(&g, Some(ahead), NOW).await.unwrap();
    let g2 = mk("b").acquire(NOW).await.unwrap();
    assert_eq!((g2.first, g2.floor), (0, ahead));
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
    assert_eq!(b.first, 0);
    assert_eq!(b.floor, end - 1);
    assert_eq!(b.lease_end, end - 1, "max(floor, now + ttl)");
}

#[tokio::test(flavor = "current_thread")]
async fn renew_and_release_detect_a_lost_lease() {
    let s = MemoryStore::new();
    let a = leases(&s, "a", 1);
    let g = a.acquire(NOW).await.unwrap();
    let later = NOW + 4 * TTL;
    let b = leases(&s, "b", 1).acquire(later).await.unwrap();
    assert_eq!(b.first, 0, "taken over after expiry + safety");
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
    let a = leases(&s, "a", 3);
    let g = a.acquire(NOW).await.unwrap();
    let last = NOW_ID + 17;
    assert_eq!(
        a.release(&g, Some(last), NOW + 20).await.unwrap(),
        Released::Freed { lease_end: last }
    );
    let b = leases(&s, "b", 3).acquire(NOW + 20).await.unwrap();
    assert_eq!((b.first, b.floor), (0, last));
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
    // wait for its own orphaned records' lease_end (they free up after expiry + safety).
    let s = MemoryStore::new();
    let a = leases(&s, "a", 2);
    s.inject(Fault::UnknownApplied);
    assert!(matches!(
        a.acquire(NOW).await,
        Err(LeaseError::Store(StoreError::Unknown(_)))
    ));
    let g = a.acquire(NOW + 1).await.unwrap();
    assert_eq!((g.first, g.floor, g.generation), (2, 0, 2));

    // Without room, it adopts its own records, floored at their lease_end.
    let s = MemoryStore::new();
    let a = tiny_leases(&s, "a");
    s.inject(Fault::UnknownApplied);
    assert!(a.acquire(NOW).await.is_err());
    let g = a.acquire(NOW + 1).await.unwrap();
    assert_eq!((g.first, g.floor, g.generation), (0, NOW_ID + TTL, 2));
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

/// A store that lets another node's acquisition slip in before this node's next commit.
struct Racy<'a> {
    inner: &'a MemoryStore,
    rival: std::sync::Mutex<Option<Box<dyn FnOnce() + Send + 'a>>>,
}

impl KvStore for Racy<'static> {
    fn get<'b>(&'b self, key: &'b [u8]) -> BoxFuture<'b, Result<Option<Entry>, StoreError>> {
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
        if let Some(rival) = self.rival.lock().unwrap().take() {
            rival();
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
    let racy: &'static Racy<'static> = Box::leak(Box::new(Racy {
        inner,
        rival: std::sync::Mutex::new(Some(Box::new(move || {
            // The rival takes workers 0..2 between our reads and our commit.
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let g = std::thread::spawn(move || rt.block_on(leases(inner, "rival", 2).acquire(NOW)))
                .join()
                .unwrap()
                .unwrap();
            assert_eq!(g.first, 0);
        }))),
    }));
    let g = leases(racy, "a", 2).acquire(NOW).await.unwrap();
    assert_eq!(
        g.first, 2,
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

#[test]
fn choose_range_prefers_ready_then_least_wait() {
    use std::collections::BTreeMap;
    let m = |v: &[(u64, Avail)]| v.iter().copied().collect::<BTreeMap<_, _>>();
    assert_eq!(choose_range(&m(&[]), 0, 8, 3), Some(0));
    assert_eq!(choose_range(&m(&[(1, Avail::Blocked)]), 0, 8, 3), Some(2));
    assert_eq!(
        choose_range(&m(&[(1, Avail::Blocked), (5, Avail::Blocked)]), 0, 8, 3),
        Some(2)
    );
    assert_eq!(
        choose_range(&m(&[(1, Avail::Blocked), (4, Avail::Blocked)]), 0, 8, 3),
        Some(5)
    );
    assert_eq!(choose_range(&m(&[(5, Avail::Blocked)]), 4, 8, 3), None);
    assert_eq!(choose_range(&m(&[(0, Avail::Ready)]), 0, 1, 1), Some(0));
    // Only windows with something to wait for: the least wait wins.
    let waits = m(&[
        (0, Avail::Ahead(50)),
        (1, Avail::Ahead(10)),
        (2, Avail::Ahead(30)),
        (3, Avail::Blocked),
    ]);
    assert_eq!(choose_range(&waits, 0, 4, 1), Some(1));
    assert_eq!(choose_range(&waits, 0, 4, 2), Some(1));
    assert_eq!(choose_range(&waits, 0, 3, 3), Some(0));
    assert_eq!(choose_range(&waits, 0, 4, 4), None);
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
