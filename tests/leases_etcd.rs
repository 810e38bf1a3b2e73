//! Leases on a real etcd (see `common/etcd.rs`): the lease conformance suite, and the lease
//! keeper on a 3-member cluster that loses a member, then the whole cluster, then gets it back.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use idgen::clock::{Clock, SystemClock};
use idgen::generator::{Ceiling, GenError, Generator, ShardConfig};
use idgen::layout::{Id, Layout};
use idgen::lease::keeper::{Keeper, LeaseShared, LeaseView};
use idgen::lease::{conformance, LeaseConfig, LeaseError, Owner, Released};
use idgen::store::etcd::EtcdStore;
use idgen::store::{BoxFuture, Check, Commit, Entry, KvStore, StoreError, Write};
use tokio::sync::watch;

/// An etcd store that counts the commits etcd refused because a compare failed.
struct Counting {
    inner: EtcdStore,
    conflicts: AtomicU64,
}

impl KvStore for Counting {
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
        Box::pin(async move {
            let outcome = self.inner.commit(checks, writes).await;
            if outcome == Ok(Commit::Conflict) {
                self.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            outcome
        })
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

async fn connect(cluster: &EtcdCluster, prefix: &str) -> EtcdStore {
    EtcdStore::connect(cluster.endpoints(), prefix.to_string())
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", cluster.url(prefix)))
}

#[tokio::test(flavor = "current_thread")]
async fn etcd_passes_the_lease_conformance_suite() {
    let cluster = EtcdCluster::start(1);
    let store = Counting {
        inner: connect(&cluster, "idgen-conformance").await,
        conflicts: AtomicU64::new(0),
    };
    conformance::run(&store, "lease").await;
    // Only the concurrent acquisitions can conflict: they did, and still all got a range.
    assert!(
        store.conflicts.load(Ordering::Relaxed) > 0,
        "the concurrent acquisitions never conflicted on etcd: the suite did not race them"
    );
    // A second run in the same etcd, other namespaces: independent.
    conformance::run(&store, "again").await;
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
        ShardConfig {
            worker_first: view.grant.first,
            worker_count: view.grant.count,
            floor: view.grant.floor,
            ..ShardConfig::default()
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
