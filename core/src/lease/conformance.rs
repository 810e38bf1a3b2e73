//! The lease behaviours every store must give, as one async suite that each store's tests run
//! against a real instance of that store (`MemoryStore` and `EmbeddedStore` in unit tests, a real
//! etcd in `tests/leases_etcd.rs`).
//!
//! Every behaviour runs in its own fresh namespace (`<prefix>-<behaviour>`), and every lease
//! operation gets an explicit wall-clock reading, so the suite is deterministic on every store:
//! the store is only asked to keep records and to serialize read-modify-write transactions.
//! A failed check panics, naming the store and the behaviour.
//!
//! For tests only: built for this crate's unit tests and, for the integration tests, with the
//! `conformance` cargo feature; it is not part of the supported API.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use idgen_id::{Layout, WorkerRange, DEFAULT_EPOCH_MS};

use super::{
    Grant, LayoutRecord, LeaseConfig, LeaseError, Leases, Owner, RegionScope, Released,
    WorkerRecord, WorkerState,
};
use crate::store::{BoxFuture, Check, Commit, Entry, KvStore, StoreError, Write};

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
/// (which must not have been used in this store before). A store wrapper that checks the size
/// of every commit (`tests/leases_etcd.rs`, `lease/tests.rs`) sees the merges of
/// [`MAX_RECORDS_PER_TXN`](super::MAX_RECORDS_PER_TXN)-bounded transactions at work.
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
    never_used_worker_ids_are_chosen_before_expired_ones(store, &ns("fresh-first")).await;
    a_grant_over_part_of_a_record_keeps_the_rest_of_it(store, &ns("trim")).await;
    one_worker_records_of_earlier_versions_read_as_ranges(store, &ns("legacy")).await;
    a_window_over_many_small_records_merges_them_first(store, &ns("merge")).await;
    a_merge_over_never_used_gaps_keeps_every_record_apart(store, &ns("gaps")).await;
    a_holder_that_publishes_its_clock_is_not_taken_over(store, &ns("alive")).await;
    a_cluster_floor_fences_every_grant_once_asked_for(store, &ns("floor")).await;
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
            workers: WorkerRange::new(0, 4),
            generation: 1,
            floor: 0,
            lease_end: NOW_ID + TTL,
            layout_generation: 0,
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
    // The keys live under the namespace: one record for the whole range, under its first ID.
    let key = |s: &str| format!("idgen/{ns}/{s}").into_bytes();
    let raw = store
        .get(&key("workers/00000"))
        .await
        .unwrap()
        .expect("the record");
    let rec: WorkerRecord = serde_json::from_slice(&raw.value).unwrap();
    assert_eq!(rec.count, 4, "{ctx}");
    for id in 1..5 {
        let k = key(&format!("workers/{id:05}"));
        assert!(store.get(&k).await.unwrap().is_none(), "{ctx}: worker {id}");
    }
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
    assert_eq!((b.workers.first, b.generation, b.floor), (4, 2, 0), "{ctx}");
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
    assert_eq!(c.acquire(NOW).await.unwrap().workers.first, 0, "{ctx}");
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
        a.workers,
        WorkerRange::new(2, 1),
        "{ctx}: region 1 is workers 2..4"
    );
    let b = mk("b", 1, Some(1)).acquire(NOW).await.unwrap();
    assert_eq!(b.workers.first, 3, "{ctx}");
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
    assert_eq!(whole.workers, WorkerRange::new(0, 3), "{ctx}");
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
    assert_eq!((a.workers.first, b.workers.first), (0, 1), "{ctx}");
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
    assert_eq!(c.workers.first, 0, "{ctx}");
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
    assert_eq!((b.workers.first, b.floor), (0, end - 1), "{ctx}");
    assert_eq!(b.lease_end, end - 1, "{ctx}: max(floor, now + ttl)");
}

async fn renew_and_release_after_a_takeover_touch_nothing(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = tiny();
    let a = leases(store, ns, layout, "a", 2);
    let g = a.acquire(NOW).await.unwrap();
    let later = NOW + 4 * TTL; // past lease_end + safety
    let b = leases(store, ns, layout, "b", 2)
        .acquire(later)
        .await
        .unwrap();
    assert_eq!(
        b.workers.first, 0,
        "{ctx}: taken over after expiry + safety"
    );
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
    // Four worker IDs: a grant of three after the release must reuse released ones.
    let layout = Layout::new(DEFAULT_EPOCH_MS, 50, 2, 11, 0).expect("valid layout");
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
    assert_eq!((b.workers.first, b.floor), (0, last), "{ctx}");
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
        assert_eq!(a.workers.count, EACH, "{ctx}");
        assert_eq!(a.floor, 0, "{ctx}");
        for b in &grants[i + 1..] {
            assert!(
                a.workers.end() <= b.workers.first || b.workers.end() <= a.workers.first,
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
            .find(|(_, g)| g.workers.contains(*id))
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

async fn never_used_worker_ids_are_chosen_before_expired_ones(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::new(DEFAULT_EPOCH_MS, 50, 2, 11, 0).expect("valid layout"); // 4 IDs
    let a = leases(store, ns, layout, "a", 2)
        .acquire(NOW)
        .await
        .unwrap();
    assert_eq!(a.workers.first, 0, "{ctx}");
    // Long after a's lease and safety period: a's range is grantable, but never-used worker
    // IDs come first, however low a's range is.
    let later = NOW + 10 * TTL;
    let b = leases(store, ns, layout, "b", 2)
        .acquire(later)
        .await
        .unwrap();
    assert_eq!(
        (b.workers.first, b.floor),
        (2, 0),
        "{ctx}: never used before expired"
    );
    // Only then the expired range, floored at its old lease_end.
    let c = leases(store, ns, layout, "c", 2)
        .acquire(later)
        .await
        .unwrap();
    assert_eq!((c.workers.first, c.floor), (0, a.lease_end), "{ctx}");
    // Released beats expired: c releases, b's lease expires; d takes c's released range.
    let c_leases = leases(store, ns, layout, "c", 2);
    c_leases.release(&c, None, later).await.unwrap();
    let much_later = later + 10 * TTL;
    let d = leases(store, ns, layout, "d", 2)
        .acquire(much_later)
        .await
        .unwrap();
    assert_eq!(
        (d.workers.first, d.floor),
        (0, a.lease_end),
        "{ctx}: released before expired"
    );
}

async fn a_grant_over_part_of_a_record_keeps_the_rest_of_it(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::new(DEFAULT_EPOCH_MS, 49, 3, 11, 0).expect("valid layout"); // 8 IDs
    let a_leases = leases(store, ns, layout, "a", 6);
    let a = a_leases.acquire(NOW).await.unwrap();
    let b = leases(store, ns, layout, "b", 2)
        .acquire(NOW)
        .await
        .unwrap();
    assert_eq!((a.workers.first, b.workers.first), (0, 6), "{ctx}");
    let last = NOW_ID + 50;
    a_leases.release(&a, Some(last), NOW + 60).await.unwrap();
    // Two of a's six released worker IDs: the other four stay one released record.
    let c = leases(store, ns, layout, "c", 2)
        .acquire(NOW + 60)
        .await
        .unwrap();
    assert_eq!((c.workers.first, c.floor), (0, last), "{ctx}");
    let view = a_leases.ranges().await.unwrap();
    let shape: Vec<(u64, u64, &str, WorkerState, u64)> = view
        .iter()
        .map(|(f, r)| (*f, r.count, r.owner.node_id.as_str(), r.state, r.lease_end))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 2, "c", WorkerState::Held, c.lease_end),
            (2, 4, "a", WorkerState::Released, last),
            (6, 2, "b", WorkerState::Held, b.lease_end),
        ],
        "{ctx}"
    );
    assert_eq!(
        view[1].1.generation, a.generation,
        "{ctx}: the rest is a's record"
    );
    // Windows start where a record (or a gap) starts: taking the front of the rest leaves its
    // back as a narrower record, again and again.
    let d = leases(store, ns, layout, "d", 2)
        .acquire(NOW + 70)
        .await
        .unwrap();
    assert_eq!((d.workers.first, d.floor), (2, last), "{ctx}");
    let e = leases(store, ns, layout, "e", 1)
        .acquire(NOW + 70)
        .await
        .unwrap();
    assert_eq!((e.workers.first, e.floor), (4, last), "{ctx}");
    let shape: Vec<(u64, u64, String)> = a_leases
        .ranges()
        .await
        .unwrap()
        .into_iter()
        .map(|(f, r)| (f, r.count, r.owner.node_id))
        .collect();
    let want: Vec<(u64, u64, String)> = [
        (0, 2, "c"),
        (2, 2, "d"),
        (4, 1, "e"),
        (5, 1, "a"),
        (6, 2, "b"),
    ]
    .into_iter()
    .map(|(f, n, o)| (f, n, o.to_string()))
    .collect();
    assert_eq!(shape, want, "{ctx}");
    // Everyone renews and releases their own record only; a's old grant is gone for good.
    assert!(matches!(
        a_leases.renew(&a, NOW + 80).await,
        Err(LeaseError::Lost(_))
    ));
    let b_leases = leases(store, ns, layout, "b", 2);
    assert!(
        b_leases.renew(&b, NOW + 80).await.unwrap() > b.lease_end,
        "{ctx}"
    );
    let c_leases = leases(store, ns, layout, "c", 2);
    assert_eq!(
        c_leases
            .release(&c, Some(last + 5), NOW + 80)
            .await
            .unwrap(),
        Released::Freed {
            lease_end: last + 5
        },
        "{ctx}"
    );
    let occ = leases(store, ns, layout, "x", 1)
        .occupancy(NOW + 80)
        .await
        .unwrap();
    assert_eq!(
        (occ.free, occ.held),
        (3, 5),
        "{ctx}: c's and a's rest are free"
    );
}

async fn one_worker_records_of_earlier_versions_read_as_ranges(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::new(DEFAULT_EPOCH_MS, 49, 3, 11, 0).expect("valid layout"); // 8 IDs
    let key = |s: &str| format!("idgen/{ns}/{s}").into_bytes();
    // What a node of the previous version wrote: a version-1 cluster and one record per
    // worker ID, without `count`, for workers 0..=4 (released; lease_end 100 + id).
    let cluster = serde_json::json!({
        "layout": LayoutRecord::from(layout),
        "layout_version": 1,
        "created_unix_ms": NOW,
        "created_by": "old",
    });
    let mut writes = vec![
        Write::Put {
            key: key("cluster"),
            value: cluster.to_string().into_bytes(),
        },
        Write::Put {
            key: key("generation"),
            value: b"5".to_vec(),
        },
    ];
    for id in 0..5u64 {
        let rec = serde_json::json!({
            "state": "released",
            "owner": owner("old"),
            "generation": id + 1,
            "lease_end": NOW_ID - 1_000 + id,
            "layout_version": 1,
            "written_unix_ms": NOW,
        });
        writes.push(Write::Put {
            key: key(&format!("workers/{id:05}")),
            value: rec.to_string().into_bytes(),
        });
    }
    assert_eq!(store.commit(&[], &writes).await.unwrap(), Commit::Applied);
    let old = leases(store, ns, layout, "x", 1);
    let seen = old.ranges().await.unwrap();
    assert_eq!(seen.len(), 5, "{ctx}");
    assert!(seen.iter().all(|(_, r)| r.count == 1), "{ctx}");
    // Never-used worker IDs first: 5..8.
    let a = leases(store, ns, layout, "a", 3)
        .acquire(NOW)
        .await
        .unwrap();
    assert_eq!(
        (a.workers.first, a.floor),
        (5, 0),
        "{ctx}: never-used IDs first"
    );
    // The rest: over the five old records, floored at their largest lease_end, and written
    // as one record.
    let b_leases = leases(store, ns, layout, "b", 5);
    let b = b_leases.acquire(NOW).await.unwrap();
    assert_eq!((b.workers.first, b.floor), (0, NOW_ID - 1_000 + 4), "{ctx}");
    let shape: Vec<(u64, u64)> = b_leases
        .ranges()
        .await
        .unwrap()
        .iter()
        .map(|(f, r)| (*f, r.count))
        .collect();
    assert_eq!(shape, vec![(0, 5), (5, 3)], "{ctx}");
    assert!(b_leases.renew(&b, NOW + 10).await.is_ok(), "{ctx}");
    // The cluster record now says range records: binaries of version 1 refuse it.
    let cluster = old.cluster().await.unwrap().unwrap();
    assert_eq!(cluster.layout_version, super::LAYOUT_VERSION, "{ctx}");
    // A cluster of a newer version is refused.
    let newer = serde_json::json!({
        "layout": LayoutRecord::from(layout),
        "layout_version": super::RECORD_VERSION_MAX + 1,
        "created_unix_ms": NOW,
        "created_by": "future",
    });
    let ns2 = format!("{ns}.newer");
    let writes = [Write::Put {
        key: format!("idgen/{ns2}/cluster").into_bytes(),
        value: newer.to_string().into_bytes(),
    }];
    store.commit(&[], &writes).await.unwrap();
    let err = leases(store, &ns2, layout, "d", 1)
        .acquire(NOW)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LeaseError::LayoutMismatch { .. }),
        "{ctx}: {err:?}"
    );
}

async fn a_window_over_many_small_records_merges_them_first(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::new(DEFAULT_EPOCH_MS, 45, 8, 10, 0).expect("valid layout"); // 256 IDs
                                                                                     // 256 nodes take one worker ID each; even ones release it, odd ones let it expire.
    let mut grants = Vec::new();
    for i in 0..256u64 {
        let l = leases(store, ns, layout, &format!("n{i}"), 1);
        let g = l.acquire(NOW + i).await.unwrap();
        assert_eq!(g.workers.first, i, "{ctx}");
        if i % 2 == 0 {
            l.release(&g, Some(NOW_ID + 100 + i), NOW + i)
                .await
                .unwrap();
        }
        grants.push(g);
    }
    let occ = leases(store, ns, layout, "x", 1)
        .occupancy(NOW + 300)
        .await
        .unwrap();
    assert_eq!((occ.free, occ.held), (128, 128), "{ctx}");
    // Long after: one node takes 200 of them. Its window overlaps 200 records: it merges them
    // (in runs of at most MAX_RECORDS_PER_TXN) and then takes the window.
    let later = NOW + 10 * TTL;
    let big = leases(store, ns, layout, "big", 200);
    let g = big.acquire(later).await.unwrap();
    assert_eq!(g.workers.first, 0, "{ctx}");
    let max_end = grants[..200].iter().map(|g| g.lease_end).max().unwrap();
    let max_released = (0..200).step_by(2).map(|i| NOW_ID + 100 + i).max().unwrap();
    assert_eq!(
        g.floor,
        max_end.max(max_released),
        "{ctx}: the largest lease_end of the 200"
    );
    // Records never overlap and the rest of the space is as it was, floors included: the
    // 56 records above the window are untouched or merged, none lowered.
    let ranges = big.ranges().await.unwrap();
    let mut at = 0;
    for (first, r) in &ranges {
        assert!(*first >= at, "{ctx}: overlapping records at {first}");
        at = first + r.count;
    }
    assert_eq!(at, 256, "{ctx}");
    for (id, r) in big.workers().await.unwrap() {
        if id >= 200 {
            let was = if id % 2 == 0 {
                NOW_ID + 100 + id
            } else {
                grants[id as usize].lease_end
            };
            assert!(r.lease_end >= was, "{ctx}: worker {id} lease_end lowered");
        } else {
            assert_eq!(r.generation, g.generation, "{ctx}: worker {id}");
        }
    }
    // Renewing and releasing the 200 touch one record.
    let end = big.renew(&g, later + 1_000).await.unwrap();
    assert_eq!(end, NOW_ID + 10 * TTL + 1_000 + TTL, "{ctx}");
    big.release(&g, None, later + 1_000).await.unwrap();
    // And the whole space is one grant away.
    let all = leases(store, ns, layout, "all", 256)
        .acquire(later + 2_000)
        .await
        .unwrap();
    assert_eq!(all.workers, WorkerRange::new(0, 256), "{ctx}");
}

async fn a_merge_over_never_used_gaps_keeps_every_record_apart(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::new(DEFAULT_EPOCH_MS, 46, 7, 10, 0).expect("valid layout"); // 128 IDs
                                                                                     // A namespace as an earlier version or an operator leaves it: one-worker records released
                                                                                     // long ago over 0..100, each at its own lease_end, and never-used gaps at every fifth
                                                                                     // worker ID (0, 5, 10, ...).
    let setup = leases(store, ns, layout, "setup", 1);
    setup.ensure_cluster(NOW).await.unwrap();
    let used: Vec<u64> = (0..100).filter(|w| w % 5 != 0).collect();
    let lease_end = |w: u64| NOW_ID - 50_000 + w;
    for chunk in used.chunks(40) {
        let writes: Vec<Write> = chunk
            .iter()
            .map(|&w| Write::Put {
                key: setup.worker_key(w),
                value: serde_json::to_vec(&WorkerRecord {
                    state: WorkerState::Released,
                    owner: owner("old"),
                    generation: w + 1,
                    lease_end: lease_end(w),
                    count: 1,
                    layout_version: super::LAYOUT_VERSION,
                    written_unix_ms: NOW - 50_000,
                })
                .unwrap(),
            })
            .collect();
        assert_eq!(
            store.commit(&[], &writes).await,
            Ok(Commit::Applied),
            "{ctx}"
        );
    }
    // A one-worker node takes the lowest never-used worker ID, floored at nothing.
    let small = leases(store, ns, layout, "small", 1);
    let s = small.acquire(NOW).await.unwrap();
    assert_eq!((s.workers.first, s.floor), (0, 0), "{ctx}");
    // A node that wants 90 worker IDs gets 1..91: 72 records and 18 gaps, more than one
    // transaction takes, so it merges runs over the gaps first, around the small node's record.
    let big = leases(store, ns, layout, "big", 90);
    let g = big.acquire(NOW + 1).await.unwrap();
    assert_eq!(g.workers.first, 1, "{ctx}");
    let max_end = used
        .iter()
        .filter(|&&w| (1..91).contains(&w))
        .map(|&w| lease_end(w))
        .max();
    assert_eq!(
        Some(g.floor),
        max_end,
        "{ctx}: the largest lease_end of the window"
    );
    // The records never overlap: the small node's is intact and renews; the records above the
    // window are untouched.
    let ranges = big.ranges().await.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let mut at = 0;
    for (first, r) in &ranges {
        assert!(*first >= at, "{ctx}: overlapping records at {first}");
        at = first + r.count;
    }
    assert_eq!(ranges[0].0, 0, "{ctx}");
    assert_eq!(
        (ranges[0].1.state, ranges[0].1.count, ranges[0].1.generation),
        (WorkerState::Held, 1, s.generation),
        "{ctx}"
    );
    assert!(small.renew(&s, NOW + 2).await.is_ok(), "{ctx}");
    for (first, r) in ranges.iter().filter(|(first, _)| *first >= 91) {
        assert_eq!(
            (r.count, r.lease_end, r.owner.node_id.as_str()),
            (1, lease_end(*first), "old"),
            "{ctx}: worker {first}"
        );
    }
}

async fn a_holder_that_publishes_its_clock_is_not_taken_over(store: &dyn KvStore, ns: &str) {
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::new(DEFAULT_EPOCH_MS, 50, 2, 11, 0).expect("valid layout"); // 4 IDs
    let a_leases = leases(store, ns, layout, "a", 2);
    let a = a_leases.acquire(NOW).await.unwrap();
    let o_leases = leases(store, ns, layout, "old", 2);
    let o = o_leases.acquire(NOW).await.unwrap();
    assert_eq!((a.workers.first, o.workers.first), (0, 2), "{ctx}");
    // a publishes its clock key as a running node does (long-lived here: the suite's clock is
    // not the store's); "old" runs an earlier version, whose key does not say it expires (a
    // crash leaves such a key behind for good): no sign of life.
    let key = |name: &str| {
        format!(
            "{}{}",
            crate::lease::clocks_prefix(ns),
            owner(name).instance
        )
    };
    let value = br#"{"unix_ms":0,"node_id":"a","expiring":true}"#;
    let old_value = br#"{"unix_ms":0,"node_id":"old"}"#;
    let ttl = Duration::from_secs(600);
    store
        .put_expiring(key("a").as_bytes(), value, ttl)
        .await
        .unwrap();
    store
        .put_expiring(key("old").as_bytes(), old_value, ttl)
        .await
        .unwrap();
    // Nodes whose clock is an hour ahead see both leases long expired.
    let ahead = NOW + 3_600_000;
    let f = leases(store, ns, layout, "fast", 2);
    let f2 = leases(store, ns, layout, "fast2", 2);
    if store.expires_keys() {
        // a is alive by the store's clock: not taken over; "old" is.
        let g = f.acquire(ahead).await.unwrap();
        assert_eq!((g.workers.first, g.floor), (2, o.lease_end), "{ctx}");
        // a's range is not promised to free up either: its holder publishes its clock.
        let err = f2.acquire(ahead).await.unwrap_err();
        assert!(
            matches!(
                err,
                LeaseError::NoFreeRange {
                    free: 0,
                    expiring: 0,
                    ..
                }
            ),
            "{ctx}: {err:?}"
        );
        assert!(a_leases.renew(&a, NOW + 1_000).await.is_ok(), "{ctx}");
        let a_end = a_leases.ranges().await.unwrap()[0].1.lease_end;
        // a's key expires (deleted here, as the store would): a is gone, its range taken over
        // above its lease_end.
        let mut txn = crate::store::Txn::new(store);
        txn.delete(key("a").into_bytes());
        txn.commit().await.unwrap();
        let g2 = f2.acquire(ahead).await.unwrap();
        assert_eq!((g2.workers.first, g2.floor), (0, a_end), "{ctx}");
    } else {
        // Without keys that expire, the acquirer's clock alone decides (one host: embedded).
        let g = f.acquire(ahead).await.unwrap();
        assert_eq!((g.workers.first, g.floor), (0, a.lease_end), "{ctx}");
        let g2 = f2.acquire(ahead).await.unwrap();
        assert_eq!((g2.workers.first, g2.floor), (2, o.lease_end), "{ctx}");
    }
    assert!(matches!(
        a_leases.renew(&a, NOW + 2_000).await,
        Err(LeaseError::Lost(_))
    ));
    assert!(matches!(
        o_leases.renew(&o, NOW + 2_000).await,
        Err(LeaseError::Lost(_))
    ));
}

/// Polls every future until all are done (a dependency-free `join_all`).
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
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

/// A store for tests that passes everything through to `inner` and records the largest commit
/// (checks, writes) and how many commits a failed check refused. It can also claim to expire
/// keys where `inner` cannot, to run the expiring-store branches of the lease logic on the
/// memory store (whose keys never expire by themselves: the suite deletes a clock key where a
/// real store would let it expire).
pub struct Recording<S> {
    pub inner: S,
    expires: Option<bool>,
    checks: std::sync::atomic::AtomicUsize,
    writes: std::sync::atomic::AtomicUsize,
    conflicts: std::sync::atomic::AtomicU64,
}

impl<S: KvStore> Recording<S> {
    pub fn new(inner: S) -> Self {
        Recording {
            inner,
            expires: None,
            checks: Default::default(),
            writes: Default::default(),
            conflicts: Default::default(),
        }
    }

    /// As [`new`](Self::new), answering `expires` to [`KvStore::expires_keys`].
    pub fn claiming_expiry(inner: S, expires: bool) -> Self {
        Recording {
            expires: Some(expires),
            ..Self::new(inner)
        }
    }

    /// The largest commit so far: (checks, writes).
    pub fn largest(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.checks.load(Relaxed), self.writes.load(Relaxed))
    }

    /// Commits refused because a check failed.
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<S: KvStore> KvStore for Recording<S> {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        self.inner.get(key)
    }
    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        self.inner.scan(prefix)
    }
    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        use std::sync::atomic::Ordering::Relaxed;
        self.checks.fetch_max(checks.len(), Relaxed);
        self.writes.fetch_max(writes.len(), Relaxed);
        Box::pin(async move {
            let outcome = self.inner.commit(checks, writes).await;
            if outcome == Ok(Commit::Conflict) {
                self.conflicts.fetch_add(1, Relaxed);
            }
            outcome
        })
    }
    fn describe(&self) -> String {
        match self.expires {
            Some(e) => format!("{} (expires keys: {e})", self.inner.describe()),
            None => self.inner.describe(),
        }
    }
    fn expires_keys(&self) -> bool {
        self.expires.unwrap_or_else(|| self.inner.expires_keys())
    }
    fn put_expiring<'a>(
        &'a self,
        key: &'a [u8],
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.put_expiring(key, value, ttl)
    }
}

async fn a_cluster_floor_fences_every_grant_once_asked_for(store: &dyn KvStore, ns: &str) {
    use super::{FLOOR_VERSION, LAYOUT_VERSION, RECORD_VERSION_MAX};
    let ctx = format!("{} [{ns}]", store.describe());
    let layout = Layout::default();
    let with_floor = |name: &str, n: u64, min_id: u64| {
        let mut config = LeaseConfig::new(ns, n);
        config.min_id = Some(min_id);
        Leases::new(store, layout, config, owner(name))
    };
    // The largest ID of ID-time F: the floor a cut-over to a sequence whose last value was it
    // sets, and what a restore fence sets.
    let floor_at = |t: u64| {
        layout
            .compose(t, layout.max_worker(), layout.max_sequence())
            .unwrap()
            .0
    };
    let f = NOW_ID + 5_000;
    // A cluster made by a node without a floor stays at version 2: the previous release can
    // still join it.
    let a = leases(store, ns, layout, "a", 1);
    let ga = a.acquire(NOW).await.unwrap();
    assert_eq!(ga.floor, 0, "{ctx}");
    let cluster = a.cluster().await.unwrap().unwrap();
    assert_eq!(
        (cluster.layout_version, cluster.min_id),
        (LAYOUT_VERSION, None),
        "{ctx}"
    );
    // A floor is not a side effect of a node starting: on a version-2 cluster it is refused,
    // and nothing is written.
    let err = with_floor("b", 1, floor_at(f))
        .acquire(NOW)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LeaseError::RecordVersion(m) if m.contains("idgen store upgrade")),
        "{ctx}: {err:?}"
    );
    assert_eq!(a.cluster().await.unwrap().unwrap(), cluster, "{ctx}");
    // The operator's upgrade, then the floor.
    assert_eq!(
        a.upgrade_records().await.unwrap(),
        (LAYOUT_VERSION, RECORD_VERSION_MAX),
        "{ctx}"
    );
    assert_eq!(
        a.upgrade_records().await.unwrap(),
        (RECORD_VERSION_MAX, RECORD_VERSION_MAX),
        "{ctx}"
    );
    let b = with_floor("b", 1, floor_at(f)).acquire(NOW).await.unwrap();
    assert_eq!(
        (b.workers.first, b.floor),
        (1, f),
        "{ctx}: the floor fences the grant"
    );
    let cluster = a.cluster().await.unwrap().unwrap();
    assert_eq!(
        (cluster.layout_version, cluster.min_id),
        (RECORD_VERSION_MAX, Some(floor_at(f))),
        "{ctx}"
    );
    // Every later grant obeys it, also one by a node that was not told (and one whose clock is
    // behind: its lease_end is the floor, so it issues nothing until its clock passes it).
    let c = leases(store, ns, layout, "c", 1)
        .acquire(NOW - 60_000)
        .await
        .unwrap();
    assert_eq!((c.workers.first, c.floor, c.lease_end), (2, f, f), "{ctx}");
    // Never lowered: a lower min_id changes nothing.
    let d = with_floor("d", 1, floor_at(NOW_ID - 1))
        .acquire(NOW)
        .await
        .unwrap();
    assert_eq!(d.floor, f, "{ctx}");
    assert_eq!(
        a.cluster().await.unwrap().unwrap().min_id,
        Some(floor_at(f)),
        "{ctx}"
    );
    // A floor the layout cannot pass, or not an ID of it, is refused before anything is read.
    let past_end = floor_at(layout.max_timestamp());
    let err = with_floor("e", 1, past_end).acquire(NOW).await.unwrap_err();
    assert!(matches!(err, LeaseError::BadRequest(_)), "{ctx}: {err:?}");
    let err = with_floor("e", 1, 1 << 63).acquire(NOW).await.unwrap_err();
    assert!(matches!(err, LeaseError::BadRequest(_)), "{ctx}: {err:?}");
    // A new cluster made by a node with a floor starts at version 3.
    let ns2 = format!("{ns}.new");
    let mut config = LeaseConfig::new(ns2.as_str(), 1);
    config.min_id = Some(floor_at(f));
    let first = Leases::new(store, layout, config, owner("f"));
    assert_eq!(first.acquire(NOW).await.unwrap().floor, f, "{ctx}");
    let created = first.cluster().await.unwrap().unwrap();
    assert_eq!(
        (created.layout_version, created.min_id),
        (FLOOR_VERSION, Some(floor_at(f))),
        "{ctx}"
    );
    // A floor in a record of version 2 (that binaries of version 2 would ignore) is corrupt.
    let bad = serde_json::json!({
        "layout": LayoutRecord::from(layout),
        "layout_version": LAYOUT_VERSION,
        "created_unix_ms": NOW,
        "created_by": "hand-edited",
        "region_scope": "global",
        "min_id": floor_at(f),
    });
    let ns3 = format!("{ns}.bad");
    let writes = [Write::Put {
        key: format!("idgen/{ns3}/cluster").into_bytes(),
        value: bad.to_string().into_bytes(),
    }];
    store.commit(&[], &writes).await.unwrap();
    let err = leases(store, &ns3, layout, "g", 1)
        .acquire(NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Corrupt { .. }), "{ctx}: {err:?}");
}
