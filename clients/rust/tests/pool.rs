//! `Pool` failover, health and batch semantics against several fake nodes.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use idgen_client::{Error, Pool, PoolOptions, Status};
use idgen_testkit::fake::{Action, Config, FakeServer, Mode};

/// Every test body is bounded in time.
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("test took longer than 10 s")
}

/// Node `k`'s IDs carry `k << 40` in their counter (see `Config::first_seq`).
const NODE_SPAN: u64 = 1 << 40;
const BASE: u64 = (63_072_000_123u64 << 22) | (512 << 12);

fn node_of(id: u64) -> u64 {
    (id - BASE) / NODE_SPAN
}

async fn nodes(n: u64, max_batch: u32) -> Vec<FakeServer> {
    let mut out = Vec::new();
    for k in 0..n {
        out.push(
            FakeServer::start(Config {
                max_batch,
                first_seq: k * NODE_SPAN,
                ..Config::default()
            })
            .await,
        );
    }
    out
}

fn addrs(servers: &[FakeServer]) -> Vec<String> {
    servers.iter().map(|s| s.addr.to_string()).collect()
}

fn fast() -> PoolOptions {
    PoolOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .request_timeout(Duration::from_millis(300))
        .call_deadline(Duration::from_secs(2))
        .backoff_min(Duration::from_millis(100))
        .backoff_max(Duration::from_millis(400))
}

/// An address nothing listens on.
async fn dead_addr() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    addr.to_string()
}

#[tokio::test]
async fn connect_needs_one_live_node_and_marks_the_others_down() {
    bounded(async {
        let servers = nodes(1, 1000).await;
        let dead = dead_addr().await;
        let pool = Pool::connect(&[dead.clone(), servers[0].addr.to_string()], fast())
            .await
            .expect("one live node is enough");
        let info = pool.nodes();
        assert!(!info[0].connected && info[0].failures == 1 && info[0].down_for > Duration::ZERO);
        assert!(info[1].connected && info[1].current && info[1].failures == 0);
        assert_eq!(node_of(pool.next_id().await.unwrap()), 0);

        let dead2 = dead_addr().await;
        let err = Pool::connect(&[dead, dead2], fast()).await.unwrap_err();
        assert!(matches!(err, Error::Io(_)), "{err:?}");
        let none: [&str; 0] = [];
        assert!(Pool::connect(&none, fast()).await.is_err());
    })
    .await
}

#[tokio::test]
async fn a_count_of_0_is_refused_before_any_node_is_asked() {
    bounded(async {
        let servers = nodes(2, 1000).await;
        let pool = Pool::connect(&addrs(&servers), fast()).await.unwrap();
        let e = pool.next_ids(0).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        for s in &servers {
            assert!(s.control.get_ids_counts().is_empty(), "nothing sent");
        }
        assert!(pool.nodes().iter().all(|n| n.failures == 0));
        assert_eq!(pool.next_ids(2).await.unwrap().len(), 2);
    })
    .await
}

/// Three nodes: A is killed mid-stream, B answers UNAVAILABLE_LEASE; every call still
/// succeeds (from C), no ID twice; A and B are skipped during their backoff, and used
/// again once healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_skips_dropped_and_unavailable_nodes_and_returns_to_them_once_healthy() {
    bounded(async {
        let servers = nodes(3, 1000).await;
        let (a, b, c) = (
            &servers[0].control,
            &servers[1].control,
            &servers[2].control,
        );
        let pool = Pool::connect(&addrs(&servers), fast()).await.unwrap();
        assert!(
            pool.nodes()[0].current,
            "sticky: the first node that answered"
        );
        b.set_mode(Mode::Refuse(Status::UNAVAILABLE_LEASE));

        // Phase 1: 8 callers × 150 IDs; A dies while they run.
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for _ in 0..150 {
                        mine.push(pool.next_id().await.expect("every call succeeds"));
                    }
                    mine
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(3);
        while a.ids_served() < 200 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        a.kill();
        let mut all = HashSet::new();
        let mut per_node = [0usize; 3];
        for t in tasks {
            for id in t.await.unwrap() {
                assert!(all.insert(id), "duplicate {id}");
                per_node[node_of(id) as usize] += 1;
            }
        }
        assert_eq!(all.len(), 8 * 150);
        assert!(per_node[0] >= 200, "A served before it died: {per_node:?}");
        assert_eq!(per_node[1], 0, "B never served: {per_node:?}");
        assert!(per_node[2] > 0, "C took over: {per_node:?}");
        assert!(b.refused.load(std::sync::atomic::Ordering::Relaxed) >= 1);
        let info = pool.nodes();
        assert!(info[0].failures >= 1 && info[1].failures >= 1, "{info:?}");
        assert!(info[2].current && info[2].failures == 0, "{info:?}");
        assert!(info[1]
            .last_error
            .as_ref()
            .is_some_and(Error::is_unavailable));

        // Phase 2: within the backoff, A and B are skipped entirely.
        let a_conns = a.connections.load(std::sync::atomic::Ordering::Relaxed);
        let b_refused = b.refused.load(std::sync::atomic::Ordering::Relaxed);
        for _ in 0..50 {
            assert_eq!(node_of(pool.next_id().await.unwrap()), 2);
        }
        assert_eq!(
            a.connections.load(std::sync::atomic::Ordering::Relaxed),
            a_conns
        );
        assert_eq!(
            b.refused.load(std::sync::atomic::Ordering::Relaxed),
            b_refused
        );

        // Phase 3: A and B heal; after their backoff, C dies: A is reconnected and used.
        a.revive();
        b.set_mode(Mode::Serve);
        // Well past backoff_max (400 ms): on a loaded machine 500 ms was seen to be too close.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        c.kill();
        let ids = pool.next_ids(10).await.unwrap();
        assert!(ids.iter().all(|&id| node_of(id) == 0), "A used again");
        assert!(pool.nodes()[0].current && pool.nodes()[0].failures == 0);
        for id in ids {
            assert!(all.insert(id), "duplicate {id}");
        }

        // And B, once A refuses.
        a.set_mode(Mode::Refuse(Status::UNAVAILABLE_CLOCK));
        let id = pool.next_id().await.unwrap();
        assert_eq!(node_of(id), 1, "B used again");
        assert!(all.insert(id));
        assert!(pool.nodes()[1].current);
    })
    .await
}

#[tokio::test]
async fn a_batch_whose_node_dies_midway_is_retried_whole_elsewhere() {
    bounded(async {
        // max_batch 100: a 500-ID batch is five GET_IDS; A serves two, then drops.
        let servers = nodes(2, 100).await;
        let (a, b) = (&servers[0].control, &servers[1].control);
        let pool = Pool::connect(&addrs(&servers), fast()).await.unwrap();
        a.push(Action::Serve);
        a.push(Action::Serve);
        a.push(Action::Drop);
        let ids = pool.next_ids(500).await.expect("failed over");
        assert_eq!(ids.len(), 500, "never half-filled");
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.iter().all(|&id| node_of(id) == 1), "all from B");
        assert_eq!(a.get_ids_counts(), [100, 100], "A's part was discarded");
        assert_eq!(b.get_ids_counts(), [100; 5]);
        assert!(pool.nodes()[1].current);
    })
    .await
}

#[tokio::test]
async fn a_node_that_hangs_times_out_and_the_call_fails_over() {
    bounded(async {
        let servers = nodes(2, 1000).await;
        let pool = Pool::connect(&addrs(&servers), fast()).await.unwrap();
        servers[0].control.push(Action::Hang(None));
        let start = Instant::now();
        let ids = pool.next_ids(3).await.unwrap();
        assert!(ids.iter().all(|&id| node_of(id) == 1));
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(1),
            "{took:?}"
        );
        assert!(matches!(pool.nodes()[0].last_error, Some(Error::Timeout)));
    })
    .await
}

#[tokio::test]
async fn caller_errors_and_exhausted_are_returned_without_failover() {
    bounded(async {
        let servers = nodes(2, 1000).await;
        let (a, b) = (&servers[0].control, &servers[1].control);
        let pool = Pool::connect(&addrs(&servers), fast()).await.unwrap();
        for status in [
            Status::INVALID_COUNT,
            Status::BATCH_TOO_LARGE,
            Status::EXHAUSTED,
        ] {
            a.push(Action::Error(status, "scripted"));
            let err = pool.next_ids(5).await.unwrap_err();
            assert_eq!(err.status(), Some(status), "{err:?}");
            let info = pool.nodes();
            assert!(info[0].current && info[0].failures == 0, "{info:?}");
        }
        assert!(b.get_ids_counts().is_empty(), "B never asked");
        assert_eq!(node_of(pool.next_id().await.unwrap()), 0);
    })
    .await
}

#[tokio::test]
async fn when_every_node_fails_the_last_error_is_returned() {
    bounded(async {
        let servers = nodes(2, 1000).await;
        let pool = Pool::connect(&addrs(&servers), fast()).await.unwrap();
        servers[0]
            .control
            .set_mode(Mode::Refuse(Status::UNAVAILABLE_LEASE));
        servers[1]
            .control
            .set_mode(Mode::Refuse(Status::UNAVAILABLE_CLOCK));
        let err = pool.next_id().await.unwrap_err();
        assert_eq!(err.status(), Some(Status::UNAVAILABLE_CLOCK), "{err:?}");
        // Both are in backoff now; a call still tries them (soonest to recover first)
        // rather than failing untried.
        servers[0].control.set_mode(Mode::Serve);
        assert_eq!(node_of(pool.next_id().await.unwrap()), 0);
    })
    .await
}

#[tokio::test]
async fn the_call_deadline_bounds_a_call_over_hanging_nodes() {
    bounded(async {
        let servers = nodes(2, 1000).await;
        let options = fast()
            .request_timeout(Duration::from_secs(5))
            .call_deadline(Duration::from_millis(300));
        let pool = Pool::connect(&addrs(&servers), options).await.unwrap();
        servers[0].control.push(Action::Hang(None));
        servers[1].control.push(Action::Hang(None));
        let start = Instant::now();
        assert!(matches!(pool.next_id().await, Err(Error::Timeout)));
        let took = start.elapsed();
        assert!(took < Duration::from_millis(800), "{took:?}");
    })
    .await
}

#[tokio::test]
async fn a_node_whose_range_changed_is_asked_again_at_once_on_a_new_connection() {
    bounded(async {
        // One node: the lease change closes the connection with RANGE_CHANGED; the same
        // call reconnects (a new HELLO_OK names the new range) and is served, with no
        // backoff and no error seen by the caller.
        let servers = nodes(1, 1000).await;
        let pool = Pool::connect(&addrs(&servers), fast()).await.unwrap();
        assert_eq!(pool.next_ids(3).await.unwrap().len(), 3);
        servers[0]
            .control
            .push(Action::Error(Status::RANGE_CHANGED, "worker range changed"));
        let started = Instant::now();
        let ids = pool.next_ids(5).await.expect("served after one reconnect");
        assert_eq!(ids.len(), 5);
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            servers[0]
                .control
                .connections
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
        assert!(
            pool.nodes()[0].last_error.is_none(),
            "the node is not counted as failed"
        );
        // And the next call is served normally too.
        assert_eq!(pool.next_ids(2).await.unwrap().len(), 2);
    })
    .await;
}
