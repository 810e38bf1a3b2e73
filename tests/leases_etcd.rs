//! Leases on a real etcd (see `common/etcd.rs`): the lease and sequence conformance suites, and
//! the lease keeper on a 3-member cluster that loses a member, then the whole cluster, then
//! gets it back.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::generator::{Ceiling, GenError, Generator, GeneratorConfig};
use idgen_core::lease::keeper::{Keeper, LeaseShared, LeaseView};
use idgen_core::lease::{
    conformance, LeaseConfig, LeaseError, Leases, Owner, Released, MAX_RECORDS_PER_TXN,
};
use idgen_core::store::etcd::EtcdStore;
use idgen_core::store::{Commit, KvStore, Write};
use idgen_id::{Id, Layout, WorkerRange};
use tokio::sync::watch;

async fn connect(cluster: &EtcdCluster, prefix: &str) -> EtcdStore {
    EtcdStore::connect(cluster.endpoints(), prefix.to_string())
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", cluster.url(prefix)))
}

#[tokio::test(flavor = "current_thread")]
async fn etcd_passes_the_lease_conformance_suite() {
    let cluster = EtcdCluster::start(1);
    let store = conformance::Recording::new(connect(&cluster, "idgen-conformance").await);
    assert!(store.expires_keys());
    conformance::run(&store, "lease").await;
    // Only the concurrent acquisitions can conflict: they did, and still all got a range.
    assert!(
        store.conflicts() > 0,
        "the concurrent acquisitions never conflicted on etcd: the suite did not race them"
    );
    // A second run in the same etcd, other namespaces: independent.
    conformance::run(&store, "again").await;
    // The suite's grant of 256 merged 256 records first: every commit stayed small.
    let (checks, writes) = store.largest();
    assert!(
        checks <= MAX_RECORDS_PER_TXN + 2 && writes <= MAX_RECORDS_PER_TXN + 4,
        "largest commit: {checks} checks, {writes} writes"
    );
}

/// Named sequences keep their records beside the leases: the same store behaviours on etcd,
/// where the racing reservations really interleave and conflict.
#[tokio::test(flavor = "current_thread")]
async fn etcd_passes_the_sequence_conformance_suite() {
    let cluster = EtcdCluster::start(1);
    let store = conformance::Recording::new(connect(&cluster, "idgen-sequences").await);
    idgen_core::sequence::conformance::run(&store, "seq").await;
    assert!(
        store.conflicts() > 0,
        "the racing reservations never conflicted on etcd: the suite did not race them"
    );
}

fn owner(name: &str) -> Owner {
    Owner {
        node_id: name.into(),
        host: "leases-etcd".into(),
        pid: 1,
        started_unix_ms: 0,
        instance: format!("{name}-instance"),
    }
}

/// On an etcd with default flags (`--max-txn-ops` 128), one node takes the whole default worker
/// space, 1,024 worker IDs, in one grant, renews it and releases it: each is one small commit.
/// (Before range records, a grant of 127 or more worker IDs exceeded the limit.)
#[tokio::test(flavor = "current_thread")]
async fn a_grant_of_1024_worker_ids_on_a_default_etcd() {
    let cluster = EtcdCluster::start(1);
    let store = conformance::Recording::new(connect(&cluster, "idgen-1024").await);
    let layout = Layout::default();
    assert_eq!(layout.worker_count(), 1024);
    let a = Leases::new(&store, layout, LeaseConfig::new("big", 1024), owner("a"));
    let now = SystemClock::new().wall_ms();
    let started = Instant::now();
    let g = a.acquire(now).await.expect("a grant of 1,024 worker IDs");
    let acquired = started.elapsed();
    assert_eq!((g.workers.first, g.workers.count, g.floor), (0, 1024, 0));
    let mut renewals = Vec::new();
    for i in 1..=5 {
        let started = Instant::now();
        let end = a.renew(&g, now + i * 100).await.expect("renew");
        renewals.push(started.elapsed());
        assert_eq!(end, now - layout.epoch_ms() + i * 100 + 10_000);
    }
    let started = Instant::now();
    let last = g.floor + 5;
    assert_eq!(
        a.release(&g, Some(last), now + 600).await.unwrap(),
        Released::Freed { lease_end: last }
    );
    let released = started.elapsed();
    let recs = a.ranges().await.unwrap();
    assert_eq!(recs.len(), 1, "one record for the whole grant");
    assert_eq!(recs[0].1.count, 1024);
    // The next node gets all of it at once, floored at the true last timestamp.
    let b = Leases::new(&store, layout, LeaseConfig::new("big", 1024), owner("b"));
    let g2 = b.acquire(now + 700).await.unwrap();
    assert_eq!((g2.workers.first, g2.floor), (0, last));
    // The largest commits: the second grant checks the cluster record, the generation and the
    // old record; the first writes the cluster record, the generation and its record.
    assert_eq!(store.largest(), (3, 3));
    renewals.sort();
    eprintln!(
        "1,024 worker IDs on etcd: acquire {acquired:?}, renew {:?} (median of 5), release \
         {released:?}",
        renewals[2]
    );
}

/// A 16-bit worker space (65,536 worker IDs) fully recorded by many grants: first by 512 nodes
/// of 128 worker IDs each (half released, half left to expire), then, in another namespace, by
/// 65,536 one-worker records as the previous version wrote them. A large grant over each
/// succeeds on a default etcd (merging records first where its window overlaps too many), with
/// its floor at the largest stored lease_end it covers, and records never overlap.
#[tokio::test(flavor = "current_thread")]
async fn a_fully_recorded_16_bit_space_stays_usable() {
    let cluster = EtcdCluster::start(1);
    let store = conformance::Recording::new(connect(&cluster, "idgen-16bit").await);
    let layout = Layout::new(idgen_id::DEFAULT_EPOCH_MS, 41, 16, 6, 0).unwrap();
    let now = SystemClock::new().wall_ms();
    let now_id = now - layout.epoch_ms();
    let ttl = 10_000;

    // Many nodes, 128 worker IDs each.
    let started = Instant::now();
    let mut max_end = 0;
    for i in 0..512u64 {
        let l = Leases::new(
            &store,
            layout,
            LeaseConfig::new("nodes", 128),
            owner(&format!("n{i}")),
        );
        let g = l.acquire(now + i).await.expect("a grant of 128");
        assert_eq!(g.workers.first, 128 * i);
        if i % 2 == 0 {
            l.release(&g, Some(now_id + i), now + i).await.unwrap();
            max_end = max_end.max(now_id + i);
        } else {
            max_end = max_end.max(g.lease_end);
        }
    }
    let filled = started.elapsed();
    let probe = Leases::new(&store, layout, LeaseConfig::new("nodes", 1), owner("probe"));
    let occ = probe.occupancy(now + 600).await.unwrap();
    assert_eq!((occ.free, occ.held), (32_768, 32_768));
    // Long after (the odd nodes are gone: they published no clock key), one grant of the whole
    // space: 512 records in its window, merged in runs of 64, then taken.
    let later = now + 4 * ttl;
    let all = Leases::new(
        &store,
        layout,
        LeaseConfig::new("nodes", 65_536),
        owner("all"),
    );
    let started = Instant::now();
    let g = all.acquire(later).await.expect("the whole space");
    let whole = started.elapsed();
    assert_eq!(
        (g.workers.first, g.workers.count, g.floor),
        (0, 65_536, max_end)
    );
    assert_eq!(all.ranges().await.unwrap().len(), 1);

    // One-worker records of the previous version, 65,536 of them, from 64 owners.
    let mut writes = Vec::new();
    let mut legacy_max = 0;
    let mut expect_floor = 0;
    for id in 0..65_536u64 {
        let lease_end = now_id - 100_000 + (id * 7919) % 50_000;
        legacy_max = legacy_max.max(lease_end);
        if (1_000..2_024).contains(&id) {
            expect_floor = expect_floor.max(lease_end);
        }
        let rec = serde_json::json!({
            "state": if id % 3 == 0 { "released" } else { "held" },
            "owner": owner(&format!("old{}", id % 64)),
            "generation": id + 1,
            "lease_end": lease_end,
            "layout_version": 1,
            "written_unix_ms": now,
        });
        writes.push(Write::Put {
            key: format!("idgen/old/workers/{id:05}").into_bytes(),
            value: rec.to_string().into_bytes(),
        });
    }
    writes.push(Write::Put {
        key: b"idgen/old/generation".to_vec(),
        value: b"65536".to_vec(),
    });
    for batch in writes.chunks(100) {
        assert_eq!(
            store.inner.commit(&[], batch).await.unwrap(),
            Commit::Applied
        );
    }
    // One node holds 1,000 of them (0..1000, as one range record): it publishes its clock.
    let holder = Leases::new(
        &store,
        layout,
        LeaseConfig::new("old", 1_000),
        owner("holder"),
    );
    let h = holder.acquire(now).await.expect("a grant over old records");
    assert_eq!(h.workers, WorkerRange::new(0, 1_000));
    let key = format!("idgen/old/clocks/{}", owner("holder").instance);
    let alive = br#"{"unix_ms":0,"node_id":"holder","expiring":true}"#;
    store
        .put_expiring(key.as_bytes(), alive, Duration::from_secs(600))
        .await
        .unwrap();
    // A node with a clock far ahead takes 1,024: not the live holder's, the next 1,024.
    let fast = Leases::new(
        &store,
        layout,
        LeaseConfig::new("old", 1_024),
        owner("fast"),
    );
    let started = Instant::now();
    let f = fast
        .acquire(now + 3_600_000)
        .await
        .expect("1,024 over one-worker records");
    let over_legacy = started.elapsed();
    assert_eq!((f.workers.first, f.floor), (1_000, expect_floor));
    // The rest of the space in one grant.
    let rest = Leases::new(
        &store,
        layout,
        LeaseConfig::new("old", 65_536 - 2_024),
        owner("rest"),
    );
    let started = Instant::now();
    let r = rest
        .acquire(now + 3_600_000)
        .await
        .expect("the rest of the space");
    let over_rest = started.elapsed();
    assert_eq!(r.workers.first, 2_024);
    assert!(r.floor <= legacy_max && r.floor > now_id - 100_000);
    let ranges = rest.ranges().await.unwrap();
    let shape: Vec<(u64, u64, String)> = ranges
        .iter()
        .map(|(f, r)| (*f, r.count, r.owner.node_id.clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 1_000, "holder".into()),
            (1_000, 1_024, "fast".into()),
            (2_024, 65_536 - 2_024, "rest".into()),
        ]
    );
    // The holder's lease is intact.
    assert!(holder.renew(&h, now + 1_000).await.is_ok());
    let (checks, writes) = store.largest();
    assert!(
        checks <= MAX_RECORDS_PER_TXN + 2 && writes <= MAX_RECORDS_PER_TXN + 4,
        "largest commit: {checks} checks, {writes} writes"
    );
    eprintln!(
        "16-bit space: 512 grants of 128 in {filled:?}; the whole space over 512 records in \
         {whole:?}; 1,024 over 65,536 one-worker records in {over_legacy:?}; the other 63,512 \
         in {over_rest:?}"
    );
}

/// A holder whose clock key is present keeps its worker IDs against an acquirer whose clock is
/// an hour ahead; once its publisher dies and etcd expires its key, the acquirer takes the range
/// over (`common::lease_cases`).
#[tokio::test(flavor = "current_thread")]
async fn a_fast_clock_evicts_only_holders_whose_clock_key_expired() {
    let cluster = EtcdCluster::start(1);
    let store: Arc<dyn KvStore> = Arc::new(connect(&cluster, "idgen-fast").await);
    common::lease_cases::a_fast_clock_evicts_only_holders_whose_clock_key_expired(store).await;
}

const TTL: Duration = Duration::from_millis(1500);
/// How late past the ceiling the generator may still be found serving (scheduling noise).
const SLACK: Duration = Duration::from_secs(1);

/// The member ID a member's status reports, and the leader it knows of.
async fn status(endpoint: &str) -> Option<(u64, u64)> {
    let mut c = etcd_client::Client::connect([endpoint], None).await.ok()?;
    let s = tokio::time::timeout(Duration::from_secs(2), c.status())
        .await
        .ok()?
        .ok()?;
    Some((s.header()?.member_id(), s.leader()))
}

/// The index of a member that is not the leader.
async fn a_follower(cluster: &EtcdCluster) -> usize {
    for (i, ep) in cluster.endpoints().iter().enumerate() {
        match status(ep).await {
            Some((me, leader)) if leader != 0 && me != leader => return i,
            _ => {}
        }
    }
    panic!("no member of the 3-member cluster reports being a follower of a leader");
}

fn id_time_now(layout: Layout) -> u64 {
    SystemClock::new().wall_ms() - layout.epoch_ms()
}

/// Calls `next_id` until it fails or `within` passes, checking every ID against the ceiling.
/// Returns the IDs issued and the error (if any).
fn serve_until_refused(
    generator: &mut Generator<SystemClock>,
    ceiling: &Ceiling,
    layout: Layout,
    within: Duration,
) -> (Vec<u64>, Option<GenError>) {
    let start = Instant::now();
    let mut ids = Vec::new();
    while start.elapsed() < within {
        match generator.next_id() {
            Ok(id) => {
                let ts = layout.decompose(id).timestamp;
                // The ceiling only rises while the lease is held, so this is at least the
                // ceiling the generator checked.
                assert!(
                    ts < ceiling.get(),
                    "issued timestamp {ts} at or above the ceiling {}",
                    ceiling.get()
                );
                ids.push(id.0);
            }
            Err(e) => return (ids, Some(e)),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (ids, None)
}

/// A lease keeper on its own thread and runtime (as on a node's control thread), with its own
/// etcd client, running its `run` loop until told to stop; then it releases with the last
/// timestamp the test's generator issued.
struct KeeperThread {
    shared: Arc<LeaseShared>,
    view: Arc<LeaseView>,
    stop: watch::Sender<bool>,
    last_issued: std::sync::mpsc::Sender<Option<u64>>,
    handle: std::thread::JoinHandle<Result<Released, LeaseError>>,
}

impl KeeperThread {
    fn start(endpoints: Vec<String>, layout: Layout, config: LeaseConfig) -> KeeperThread {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (last_tx, last_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = watch::channel(false);
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let store: Arc<dyn KvStore> = Arc::new(
                    EtcdStore::connect(endpoints, "idgen-keeper".into())
                        .await
                        .expect("connect to etcd"),
                );
                let clock = SystemClock::new();
                let owner = Owner::this_process(Some("keeper-test".into()), clock.wall_ms());
                let keeper = Keeper::new(store, layout, config, owner, clock);
                let view = keeper.acquire().await.expect("first acquisition");
                let _ = ready_tx.send((keeper.shared(), view));
                keeper.run(stop_rx).await;
                match last_rx.recv() {
                    Ok(last) => keeper.release(last).await,
                    Err(_) => Ok(Released::AlreadyLost), // the test failed: nothing to check
                }
            })
        });
        let (shared, view) = ready_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the keeper acquired a lease");
        KeeperThread {
            shared,
            view,
            stop,
            last_issued: last_tx,
            handle,
        }
    }

    fn stop_and_release(self, last_issued: Option<u64>) -> Released {
        self.last_issued.send(last_issued).unwrap();
        self.stop.send(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.handle.is_finished() {
            assert!(Instant::now() < deadline, "the keeper did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.handle.join().expect("keeper thread").expect("release")
    }
}

/// A keeper on a 3-member etcd, TTL 1.5 s (default timing: renew every 500 ms), driven by its own
/// `run` loop: (a) one member killed: renewals keep succeeding and the ceiling keeps rising;
/// (b) the whole cluster stopped: renewals fail, the ceiling freezes, and a generator on it
/// refuses with `LeaseCeiling` within TTL + slack, never issuing at or above the ceiling;
/// (c) the cluster back: renewals and the generator resume within seconds.
#[test]
fn keeper_on_three_member_etcd_rides_out_a_member_fails_closed_and_recovers() {
    let mut cluster = EtcdCluster::start(3);
    let layout = Layout::default();
    let mut config = LeaseConfig::new("keeper", 2);
    config.ttl = TTL;
    config.safety = 2 * TTL;
    let keeper = KeeperThread::start(cluster.endpoints(), layout, config);
    let (shared, view) = (Arc::clone(&keeper.shared), Arc::clone(&keeper.view));
    let ceiling = Arc::clone(&view.ceiling);
    let mut generator = Generator::new(
        layout,
        GeneratorConfig {
            workers: view.grant.workers,
            floor: view.grant.floor,
            ..GeneratorConfig::default()
        },
        Arc::clone(&ceiling),
        SystemClock::new(),
    )
    .expect("generator on the grant");
    let ok = || shared.stats.renew_ok.load(Ordering::Relaxed);
    let failed = || shared.stats.renew_failed.load(Ordering::Relaxed);

    // (a) One member (a follower, so no election is involved) killed.
    let victim = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(a_follower(&cluster))
    };
    cluster.kill(victim);
    let (ok0, failed0, ceiling0) = (ok(), failed(), ceiling.get());
    let watch_for = 6 * (TTL / 3); // six renew periods
    let start = Instant::now();
    while start.elapsed() < watch_for {
        let now = id_time_now(layout);
        assert!(
            ceiling.get() > now,
            "with one member of three down the ceiling was reached ({} ≤ {now}) after {:?}: \
             renew_ok {} (from {ok0}), renew_failed {} (from {failed0})",
            ceiling.get(),
            start.elapsed(),
            ok(),
            failed()
        );
        let id = generator.next_id().expect("serves with one member down");
        assert!(layout.decompose(id).timestamp < ceiling.get());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        ok() >= ok0 + 4,
        "renewals with one member down: {} ok (from {ok0}), {} failed (from {failed0})",
        ok(),
        failed()
    );
    assert!(
        ceiling.get() >= ceiling0 + 1500,
        "the ceiling rose only from {ceiling0} to {} in {watch_for:?}",
        ceiling.get()
    );
    eprintln!(
        "one member down: renew_ok +{}, renew_failed +{}",
        ok() - ok0,
        failed() - failed0
    );

    // (b) The whole cluster stopped.
    cluster.stop_all();
    let stopped_at = Instant::now();
    let stopped_id_time = id_time_now(layout);
    let (ids, err) = serve_until_refused(&mut generator, &ceiling, layout, TTL + SLACK);
    let refused_after = stopped_at.elapsed();
    match err {
        Some(GenError::LeaseCeiling {
            timestamp,
            ceiling: c,
        }) => {
            assert!(timestamp >= c, "{timestamp} < {c}");
        }
        other => panic!(
            "no LeaseCeiling within TTL + slack ({:?}) of stopping etcd: {other:?}; ceiling {}, \
             now {}",
            TTL + SLACK,
            ceiling.get(),
            id_time_now(layout)
        ),
    }
    let frozen = ceiling.get();
    assert!(
        frozen <= stopped_id_time + TTL.as_millis() as u64,
        "the ceiling {frozen} is beyond what any renewal before the stop could grant ({} + TTL)",
        stopped_id_time
    );
    assert!(
        ids.iter()
            .all(|&id| layout.decompose(Id(id)).timestamp < frozen),
        "an ID at or above the ceiling"
    );
    let failed_at_refusal = failed();
    let ok_at_refusal = ok();
    // Stays refused, with failing renewals and a frozen ceiling, for another second.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        match generator.next_id() {
            Err(GenError::LeaseCeiling { .. }) => {}
            other => panic!("served with etcd down and the ceiling reached: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ceiling.get(), frozen, "the ceiling moved with etcd down");
    assert_eq!(ok(), ok_at_refusal, "a renewal succeeded with etcd down");
    assert!(
        failed() > failed_at_refusal,
        "renewals kept failing with etcd down: {} then {}",
        failed_at_refusal,
        failed()
    );

    // (c) The cluster back.
    cluster.start_all();
    let back_at = Instant::now();
    let ok_before = ok();
    let resumed = loop {
        if ok() > ok_before && ceiling.get() > id_time_now(layout) {
            if let Ok(id) = generator.next_id() {
                break id;
            }
        }
        assert!(
            back_at.elapsed() < Duration::from_secs(10),
            "no successful renewal within 10 s of etcd's return: renew_ok {}, renew_failed {}",
            ok(),
            failed()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let resumed_after = back_at.elapsed();
    assert!(layout.decompose(resumed).timestamp < ceiling.get());
    assert_eq!(
        shared.current().expect("lease held").grant.generation,
        view.grant.generation,
        "the same lease, renewed: nobody else took it"
    );
    eprintln!(
        "refused {refused_after:?} after etcd stopped; resumed {resumed_after:?} after it returned"
    );

    let last = generator.last_issued_timestamp();
    assert!(last.is_some_and(|t| t >= layout.decompose(resumed).timestamp));
    match keeper.stop_and_release(last) {
        Released::Freed { lease_end } => assert_eq!(Some(lease_end), last),
        other => panic!("release: {other:?}"),
    }
}
