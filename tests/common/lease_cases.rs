//! Lease cases that need a store which expires keys by its own clock (etcd, PostgreSQL), run
//! by each store's test binary on a real server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idgen_core::clock::{Clock, SystemClock};
use idgen_core::drift::{ClockWatch, ClockWatcher, CLOCK_KEY_TTL};
use idgen_core::lease::{LeaseConfig, LeaseError, Leases, Owner};
use idgen_core::store::KvStore;
use idgen_id::Layout;
use tokio::sync::watch;

fn owner(name: &str) -> Owner {
    Owner {
        node_id: name.into(),
        host: "lease-cases".into(),
        pid: 1,
        started_unix_ms: 0,
        instance: format!("{name}-instance"),
    }
}

/// A holder whose clock key is present (its publisher runs) keeps its worker IDs against an
/// acquirer whose clock is an hour ahead, which takes never-used ones instead, or none; once
/// the holder's publisher dies and the store expires its key (by the store's own clock), the same acquirer takes the range over,
/// floored at the holder's lease_end.
pub async fn a_fast_clock_evicts_only_holders_whose_clock_key_expired(store: Arc<dyn KvStore>) {
    assert!(
        store.expires_keys(),
        "{} does not expire keys",
        store.describe()
    );
    let layout = Layout::new(idgen_id::DEFAULT_EPOCH_MS, 41, 2, 20, 0).unwrap(); // 4 IDs
    let clock = SystemClock::new();
    let now = clock.wall_ms();
    let hour = 3_600_000;
    let live = Owner::this_process(Some("live".into()), now);
    let holder = Leases::new(
        store.as_ref(),
        layout,
        LeaseConfig::new("fast", 2),
        live.clone(),
    );
    let h = holder.acquire(now).await.unwrap();
    assert_eq!(h.workers.first, 0);
    // The holder's clock publisher, as a node runs it.
    let watcher = ClockWatcher::new(
        Arc::clone(&store),
        "fast",
        live.clone(),
        clock,
        ClockWatch::new(Duration::from_secs(1)),
    );
    watcher.publish().await;
    let (_stop, stop_rx) = watch::channel(false);
    let publisher = tokio::spawn(async move { watcher.run(stop_rx).await });

    let fast = Leases::new(
        store.as_ref(),
        layout,
        LeaseConfig::new("fast", 2),
        owner("fast"),
    );
    // An hour ahead, the holder's lease looks long expired; never-used IDs come first anyway.
    let f = fast.acquire(now + hour).await.unwrap();
    assert_eq!((f.workers.first, f.floor), (2, 0));
    // With no never-used IDs left: refused, not evicting the live holder.
    let fast2 = Leases::new(
        store.as_ref(),
        layout,
        LeaseConfig::new("fast", 2),
        owner("fast2"),
    );
    let err = fast2.acquire(now + hour).await.unwrap_err();
    assert!(
        matches!(err, LeaseError::NoFreeRange { free: 0, .. }),
        "{err:?}"
    );
    let end = holder
        .renew(&h, clock.wall_ms())
        .await
        .expect("the holder still holds");

    // The holder dies: its publisher stops without deleting its key (a crash).
    publisher.abort();
    let died = Instant::now();
    let key = format!("idgen/fast/clocks/{}", live.instance);
    assert!(store.get(key.as_bytes()).await.unwrap().is_some());
    let taken = loop {
        match fast2.acquire(clock.wall_ms() + hour).await {
            Ok(g) => break g,
            Err(LeaseError::NoFreeRange { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            died.elapsed() < CLOCK_KEY_TTL + Duration::from_secs(5),
            "not taken over {:?} after the holder died",
            died.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let after = died.elapsed();
    assert!(
        store.get(key.as_bytes()).await.unwrap().is_none(),
        "the store expired the key"
    );
    assert!(
        after >= CLOCK_KEY_TTL - Duration::from_secs(2),
        "taken over after {after:?}"
    );
    assert_eq!(
        (taken.workers.first, taken.floor),
        (0, end),
        "floored at the dead holder's lease_end"
    );
    assert!(matches!(
        holder.renew(&h, clock.wall_ms()).await,
        Err(LeaseError::Lost(_))
    ));
    eprintln!("the dead holder's range was taken over {after:?} after its publisher stopped");
}
