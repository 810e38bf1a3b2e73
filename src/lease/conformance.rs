//! The lease behaviours every store must give, as one async suite that each store's tests run
//! against a real instance of that store (`MemoryStore` and `EmbeddedStore` in unit tests, a real
//! etcd in `tests/leases_etcd.rs`).
//!
//! Every behaviour runs in its own fresh namespace (`<prefix>-<behaviour>`), and every lease
//! operation gets an explicit wall-clock reading, so the suite is deterministic on every store:
//! the store is only asked to keep records and to serialize read-modify-write transactions.
//! A failed check panics, naming the store and the behaviour.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use super::{
    Grant, LayoutRecord, LeaseConfig, LeaseError, Leases, Owner, RegionScope, Released,
    WorkerRecord, WorkerState,
};
use crate::layout::{Layout, DEFAULT_EPOCH_MS};
use crate::store::KvStore;

/// The wall clock (Unix ms) the suite runs at.
const NOW: u64 = DEFAULT_EPOCH_MS + 1_000_000;
/// The same instant in ID time.
const NOW_ID: u64 = 1_000_000;
/// The default lease TTL in ms (the suite uses [`LeaseConfig::new`]'s defaults: safety = 2 × TTL).
const TTL: u64 = 10_000;
/// Acquisitions racing in [`concurrent_acquisitions_get_disjoint_ranges`]. At most
/// `DEFAULT_MAX_ATTEMPTS`: an attempt fails only when another acquisition committed during it,
/// and each winner stops competing, so every contender commits within N attempts.
const CONTENDERS: usize = super::DEFAULT_MAX_ATTEMPTS as usize;

/// Runs every behaviour against `store`, each in a fresh namespace under `namespace_prefix`
/// (which must not have been used in this store before).
pub async fn run(store: &dyn KvStore, namespace_prefix: &str) {
    let ns = |what: &str| format!("{namespace_prefix}-{what}");
    first_acquire_creates_the_cluster_and_grants_from_zero(store, &ns("first")).await;
    a_different_layout_is_refused_naming_both(store, &ns("layout")).await;
    nodes_get_disjoint_ranges_and_a_clear_error_when_full(store, &ns("disjoint")).await;
    an_expired_lease_is_free_only_after_the_safety_period(store, &ns("expiry")).await;
    renew_moves_lease_end_forward_never_backward(store, &ns("renew")).await;
    renew_and_release_after_a_takeover_touch_nothing(store, &ns("takeover")).await;
    release_frees_at_once_with_the_true_last_timestamp(store, &ns("release")).await;
    concurrent_acquisitions_get_disjoint_ranges(store, &ns("concurrent")).await;
}

fn owner(name: &str) -> Owner {
    Owner {
        node_id: name.into(),
        host: "conformance-host".into(),
        pid: 1,
        started_unix_ms: NOW,
        instance: format!("{name}-instance"),
    }
}

fn leases<'s>(store: &'s dyn KvStore, ns: &str, layout: Layout, name: &str, n: u64) -> Leases<'s> {
    Leases::new(store, layout, LeaseConfig::new(ns, n), owner(name))
}

/// A layout with only two worker IDs (0 and 1), so grants must reuse them.
fn tiny() -> Layout {
    Layout::new(DEFAULT_EPOCH_MS, 51, 1, 11, 0).expect("valid layout")
}

async fn records(l: &Leases<'_>) -> Vec<(u64, WorkerRecord)> {
    l.workers().await.expect("read the worker records")
}

async fn first_acquire_creates_the_cluster_and_grants_from_zero(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let a = leases(store, ns, Layout::default(), "a", 4);
    assert_eq!(a.cluster().await.unwrap(), None, "{ctx}: fresh namespace");
    let g = a.acquire(NOW).await.unwrap();
    assert_eq!(
        g,
        Grant {
            first: 0,
            count: 4,
            generation: 1,
            floor: 0,
            lease_end: NOW_ID + TTL
        },
        "{ctx}"
    );
    let cluster = a.cluster().await.unwrap().expect("cluster record created");
    assert_eq!(
        cluster.layout,
        LayoutRecord::from(Layout::default()),
        "{ctx}"
    );
    assert_eq!(cluster.created_by, "a-instance", "{ctx}");
    let recs = records(&a).await;
    assert_eq!(
        recs.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3],
        "{ctx}"
    );
    for (id, r) in &recs {
        assert!(
            r.state == WorkerState::Held
                && r.generation == 1
                && r.owner == owner("a")
                && r.lease_end == NOW_ID + TTL
                && r.written_unix_ms == NOW,
            "{ctx}: worker {id}: {r:?}"
        );
    }
    // The keys live under the namespace.
    let key = |s: &str| format!("idgen/{ns}/{s}").into_bytes();
    assert!(store.get(&key("workers/00003")).await.unwrap().is_some());
    assert!(store.get(&key("workers/00004")).await.unwrap().is_none());
    assert!(store.get(&key("cluster")).await.unwrap().is_some());
    assert_eq!(
        store.get(&key("generation")).await.unwrap().unwrap().value,
        b"1".to_vec(),
        "{ctx}"
    );
    // A second node continues after the first range, with the next generation.
    let b = leases(store, ns, Layout::default(), "b", 2)
        .acquire(NOW)
        .await
        .unwrap();
    assert_eq!((b.first, b.generation, b.floor), (4, 2, 0), "{ctx}");
}

async fn a_different_layout_is_refused_naming_both(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    leases(store, ns, Layout::default(), "a", 1)
        .acquire(NOW)
        .await
        .unwrap();
    let other = Layout::new(DEFAULT_EPOCH_MS, 40, 11, 12, 0).unwrap();
    let b = leases(store, ns, other, "b", 1);
    let err = b.acquire(NOW).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, LeaseError::LayoutMismatch { .. }),
        "{ctx}: {err:?}"
    );
    assert!(
        msg.contains("41/10/12") && msg.contains("40/11/12"),
        "{ctx}: {msg}"
    );
    // ensure_cluster refuses it the same way, and nothing of b's was written.
    assert!(matches!(
        b.ensure_cluster(NOW).await,
        Err(LeaseError::LayoutMismatch { .. })
    ));
    assert_eq!(records(&b).await.len(), 1, "{ctx}");
    assert_eq!(
        b.cluster().await.unwrap().unwrap().layout,
        LayoutRecord::from(Layout::default()),
        "{ctx}: the stored layout is unchanged"
    );
    // The same layout in another namespace is a different cluster.
    let c = leases(store, &format!("{ns}.other"), other, "c", 1);
    assert_eq!(c.acquire(NOW).await.unwrap().first, 0, "{ctx}");
}

async fn nodes_get_disjoint_ranges_and_a_clear_error_when_full(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::new(DEFAULT_EPOCH_MS, 49, 2, 12, 1).unwrap(); // 4 workers, 2 regions
    let mk_in = |ns: &str, name: &str, n: u64, region: Option<u64>| {
        let mut c = LeaseConfig::new(ns, n);
        c.region = region.map_or(RegionScope::Global, RegionScope::Region);
        Leases::new(store, layout, c, owner(name))
    };
    let mk = |name: &str, n: u64, region: Option<u64>| mk_in(ns, name, n, region);
    let a = mk("a", 1, Some(1)).acquire(NOW).await.unwrap();
    assert_eq!(
        (a.first, a.count),
        (2, 1),
        "{ctx}: region 1 is workers 2..4"
    );
    let b = mk("b", 1, Some(1)).acquire(NOW).await.unwrap();
    assert_eq!(b.first, 3, "{ctx}");
    assert_eq!(b.generation, a.generation + 1, "{ctx}");
    let err = mk("c", 1, Some(1)).acquire(NOW).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "no free range of 1 worker IDs in region 1: 0 free",
        "{ctx}"
    );
    // The namespace serves region 1: a node of region 0, or of the global pool, is refused
    // (it would lease worker IDs that another region's store hands out too).
    for (name, region) in [("r0", Some(0)), ("global", None)] {
        let err = mk(name, 1, region).acquire(NOW).await.unwrap_err();
        assert_eq!(
            err,
            LeaseError::RegionMismatch {
                stored: RegionScope::Region(1),
                ours: region.map_or(RegionScope::Global, RegionScope::Region),
            },
            "{ctx}"
        );
        assert!(err.to_string().contains("serves region 1"), "{ctx}: {err}");
    }
    // A global pool, in another namespace of the same store.
    let global = format!("{ns}.global");
    let err = mk_in(&global, "d", 5, None).acquire(NOW).await.unwrap_err();
    assert!(matches!(err, LeaseError::BadRequest(_)), "{ctx}: {err:?}");
    let whole = mk_in(&global, "e", 3, None).acquire(NOW).await.unwrap();
    assert_eq!((whole.first, whole.count), (0, 3), "{ctx}");
    let err = mk_in(&global, "f", 2, None).acquire(NOW).await.unwrap_err();
    assert_eq!(
        err,
        LeaseError::NoFreeRange {
            wanted: 2,
            region: None,
            free: 1,
            expiring: 0
        },
        "{ctx}"
    );
    assert_eq!(
        err.to_string(),
        "no free range of 2 worker IDs: 1 free",
        "{ctx}"
    );
    assert!(matches!(
        mk_in(&global, "g", 1, Some(1)).acquire(NOW).await,
        Err(LeaseError::RegionMismatch { .. })
    ));
    let occ = mk("x", 1, Some(1)).occupancy(NOW).await.unwrap();
    assert_eq!((occ.free, occ.held, occ.total), (0, 2, 2), "{ctx}");
    // Every worker ID is held by exactly the node it was granted to.
    let owners: Vec<(u64, String)> = records(&mk("x", 1, Some(1)))
        .await
        .into_iter()
        .map(|(id, r)| (id, r.owner.node_id))
        .collect();
    assert_eq!(owners, vec![(2, "a".into()), (3, "b".into())], "{ctx}");
    let owners: Vec<(u64, String)> = records(&mk_in(&global, "x", 1, None))
        .await
        .into_iter()
        .map(|(id, r)| (id, r.owner.node_id))
        .collect();
    assert_eq!(
        owners,
        vec![(0, "e".into()), (1, "e".into()), (2, "e".into())],
        "{ctx}"
    );
    assert!(matches!(
        mk("g", 0, Some(1)).acquire(NOW).await,
        Err(LeaseError::BadRequest(_))
    ));
    assert!(matches!(
        mk("h", 1, Some(2)).acquire(NOW).await,
        Err(LeaseError::BadRequest(_))
    ));
}

async fn an_expired_lease_is_free_only_after_the_safety_period(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = tiny();
    let a = leases(store, ns, layout, "a", 1)
        .acquire(NOW)
        .await
        .unwrap();
    let b = leases(store, ns, layout, "b", 1)
        .acquire(NOW)
        .await
        .unwrap();
    assert_eq!((a.first, b.first), (0, 1), "{ctx}");
    // Exactly at lease_end + safety (2 × TTL), both are still reserved, and the refusal says
    // they are only waiting out their safety period.
    let at_safety = NOW + TTL + 2 * TTL;
    let err = leases(store, ns, layout, "c", 1)
        .acquire(at_safety)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LeaseError::NoFreeRange {
            wanted: 1,
            region: None,
            free: 0,
            expiring: 2
        },
        "{ctx}"
    );
    assert!(err.to_string().contains("2 more free up"), "{ctx}: {err}");
    // b renews meanwhile; a does not.
    let b_end = leases(store, ns, layout, "b", 1)
        .renew(&b, NOW + 2 * TTL)
        .await
        .unwrap();
    assert_eq!(b_end, NOW_ID + 3 * TTL, "{ctx}");
    // One ms past the safety period: worker 0 is free again, floored at its old lease_end;
    // worker 1 (renewed) is not.
    let c = leases(store, ns, layout, "c", 1)
        .acquire(at_safety + 1)
        .await
        .unwrap();
    assert_eq!(c.first, 0, "{ctx}");
    assert_eq!(c.floor, a.lease_end, "{ctx}: new floor = old lease_end");
    assert_eq!(c.lease_end, NOW_ID + 3 * TTL + 1 + TTL, "{ctx}");
    assert!(c.generation > b.generation, "{ctx}");
    let recs = records(&leases(store, ns, layout, "x", 1)).await;
    assert_eq!(recs[0].1.owner.node_id, "c", "{ctx}");
    assert_eq!(
        (recs[1].1.owner.node_id.as_str(), recs[1].1.lease_end),
        ("b", b_end),
        "{ctx}"
    );
}

async fn renew_moves_lease_end_forward_never_backward(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let a = leases(store, ns, tiny(), "a", 2);
    let g = a.acquire(NOW).await.unwrap();
    let stored = |recs: Vec<(u64, WorkerRecord)>| -> Vec<u64> {
        recs.into_iter().map(|(_, r)| r.lease_end).collect()
    };
    // Forward.
    let end = a.renew(&g, NOW + 1_000).await.unwrap();
    assert_eq!(end, NOW_ID + 1_000 + TTL, "{ctx}");
    assert_eq!(stored(records(&a).await), vec![end, end], "{ctx}");
    // A clock that went back (a minute, then an hour) keeps lease_end, in the answer and in the
    // store, even when the caller's grant carries the older lease_end.
    for back in [60_000, 3_600_000] {
        assert_eq!(a.renew(&g, NOW - back).await.unwrap(), end, "{ctx}");
        assert_eq!(stored(records(&a).await), vec![end, end], "{ctx}");
    }
    // A renewal that falls short of the stored lease_end (clock barely moved) keeps it too.
    assert_eq!(a.renew(&g, NOW + 500).await.unwrap(), end, "{ctx}");
    // Released with its true last timestamp, a node whose clock is an hour behind gets the range
    // floored there, and its lease_end does not drop below the floor either.
    assert_eq!(
        a.release(&g, Some(end - 1), NOW + 1_000).await.unwrap(),
        Released::Freed { lease_end: end - 1 },
        "{ctx}"
    );
    let b = leases(store, ns, tiny(), "b", 2)
        .acquire(NOW - 3_600_000)
        .await
        .unwrap();
    assert_eq!((b.first, b.floor), (0, end - 1), "{ctx}");
    assert_eq!(b.lease_end, end - 1, "{ctx}: max(floor, now + ttl)");
}

async fn renew_and_release_after_a_takeover_touch_nothing(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::default();
    let a = leases(store, ns, layout, "a", 2);
    let g = a.acquire(NOW).await.unwrap();
    let later = NOW + 4 * TTL; // past lease_end + safety
    let b = leases(store, ns, layout, "b", 2)
        .acquire(later)
        .await
        .unwrap();
    assert_eq!(b.first, 0, "{ctx}: taken over after expiry + safety");
    assert_eq!(b.floor, g.lease_end, "{ctx}");
    let before = records(&a).await;
    let err = a.renew(&g, later).await.unwrap_err();
    assert!(matches!(err, LeaseError::Lost(_)), "{ctx}: {err:?}");
    assert_eq!(
        a.release(&g, Some(NOW_ID + 5), later).await.unwrap(),
        Released::AlreadyLost,
        "{ctx}"
    );
    // b's records are exactly as b wrote them.
    assert_eq!(records(&a).await, before, "{ctx}");
    assert!(before
        .iter()
        .all(|(_, r)| r.owner.node_id == "b" && r.generation == b.generation));
    // And b still renews and releases normally.
    let b_leases = leases(store, ns, layout, "b", 2);
    assert_eq!(
        b_leases.renew(&b, later + 1).await.unwrap(),
        NOW_ID + 4 * TTL + 1 + TTL,
        "{ctx}"
    );
    assert!(matches!(
        b_leases.release(&b, None, later + 2).await.unwrap(),
        Released::Freed { .. }
    ));
    // A release after someone else's release (the range is free, not ours) is AlreadyLost too.
    assert_eq!(
        a.release(&g, None, later + 3).await.unwrap(),
        Released::AlreadyLost,
        "{ctx}"
    );
}

async fn release_frees_at_once_with_the_true_last_timestamp(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::default();
    let a = leases(store, ns, layout, "a", 3);
    let g = a.acquire(NOW).await.unwrap();
    let last = NOW_ID + 17;
    assert_eq!(
        a.release(&g, Some(last), NOW + 20).await.unwrap(),
        Released::Freed { lease_end: last },
        "{ctx}"
    );
    let recs = records(&a).await;
    assert_eq!(recs.len(), 3, "{ctx}");
    assert!(
        recs.iter()
            .all(|(_, r)| r.state == WorkerState::Released && r.lease_end == last),
        "{ctx}: {recs:?}"
    );
    assert_eq!(
        a.occupancy(NOW + 20).await.unwrap().held,
        0,
        "{ctx}: free at once"
    );
    // The next grant, at once, gets the same range floored at the true last timestamp.
    let b_leases = leases(store, ns, layout, "b", 3);
    let b = b_leases.acquire(NOW + 20).await.unwrap();
    assert_eq!((b.first, b.floor), (0, last), "{ctx}");
    assert_eq!(b.lease_end, NOW_ID + 20 + TTL, "{ctx}");
    // Releasing without having issued anything keeps the floor as lease_end.
    assert_eq!(
        b_leases.release(&b, None, NOW + 30).await.unwrap(),
        Released::Freed { lease_end: last },
        "{ctx}"
    );
    // A last-issued timestamp below the floor (impossible for a correct holder) cannot lower it.
    let c_leases = leases(store, ns, layout, "c", 3);
    let c = c_leases.acquire(NOW + 40).await.unwrap();
    assert_eq!(
        c_leases
            .release(&c, Some(last - 10), NOW + 50)
            .await
            .unwrap(),
        Released::Freed { lease_end: last },
        "{ctx}"
    );
}

async fn concurrent_acquisitions_get_disjoint_ranges(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::default();
    const EACH: u64 = 3;
    let names: Vec<String> = (0..CONTENDERS).map(|i| format!("n{i}")).collect();
    let all: Vec<Leases<'_>> = names
        .iter()
        .map(|n| leases(store, ns, layout, n, EACH))
        .collect();
    // All start together in this task; on a networked store each one suspends on every read and
    // commit, so their transactions interleave and conflict (the first creates the cluster
    // record while the others try to).
    let grants = join_all(all.iter().map(|l| l.acquire(NOW)).collect()).await;
    let grants: Vec<Grant> = grants
        .into_iter()
        .enumerate()
        .map(|(i, g)| g.unwrap_or_else(|e| panic!("{ctx}: contender {i}: {e}")))
        .collect();
    for (i, a) in grants.iter().enumerate() {
        assert_eq!(a.count, EACH, "{ctx}");
        assert_eq!(a.floor, 0, "{ctx}");
        for b in &grants[i + 1..] {
            assert!(
                a.first + a.count <= b.first || b.first + b.count <= a.first,
                "{ctx}: overlapping grants {a:?} and {b:?}"
            );
        }
    }
    let mut gens: Vec<u64> = grants.iter().map(|g| g.generation).collect();
    gens.sort_unstable();
    assert_eq!(
        gens,
        (1..=CONTENDERS as u64).collect::<Vec<_>>(),
        "{ctx}: one generation per grant, no gaps (failed attempts write nothing)"
    );
    // The store agrees: every worker record belongs to the grant that covers it.
    let recs = records(&all[0]).await;
    assert_eq!(recs.len(), CONTENDERS * EACH as usize, "{ctx}");
    for (id, r) in &recs {
        let (i, g) = grants
            .iter()
            .enumerate()
            .find(|(_, g)| (g.first..g.first + g.count).contains(id))
            .unwrap_or_else(|| panic!("{ctx}: worker {id} is in no grant"));
        assert_eq!(r.owner.node_id, names[i], "{ctx}: worker {id}");
        assert_eq!(r.generation, g.generation, "{ctx}: worker {id}");
        assert_eq!(r.state, WorkerState::Held, "{ctx}: worker {id}");
    }
    assert!(
        all[0].cluster().await.unwrap().is_some(),
        "{ctx}: one cluster record"
    );
}

/// Polls every future until all are done (a dependency-free `join_all`).
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}
