//! `PrefetchPool` against fake nodes: distinct IDs under concurrency, background refills,
//! the high-water mark, waiting and errors.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use idgen_client::{Error, Pool, PoolOptions, PrefetchOptions, PrefetchPool, Status};
use idgen_testkit::fake::{Action, Config, FakeServer, Mode};

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("test took longer than 10 s")
}

fn options() -> PoolOptions {
    PoolOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .request_timeout(Duration::from_millis(500))
        .call_deadline(Duration::from_secs(1))
        .backoff_min(Duration::from_millis(50))
        .backoff_max(Duration::from_millis(200))
}

const SIZES: PrefetchOptions = PrefetchOptions {
    low_water: 250,
    high_water: 1000,
};

/// Wait (bounded) until the buffer is full.
async fn until_full(p: &PrefetchPool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while p.buffered() < SIZES.high_water as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_get_distinct_ids_from_few_background_refills() {
    bounded(async {
        let server = FakeServer::start(Config::default()).await;
        let p = PrefetchPool::connect(&[server.addr], options(), SIZES)
            .await
            .unwrap();
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let p = p.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::with_capacity(2000);
                    let mut max_seen = 0;
                    for _ in 0..2000 {
                        mine.push(p.next_id().await.expect("next_id"));
                        max_seen = max_seen.max(p.buffered());
                    }
                    (mine, max_seen)
                })
            })
            .collect();
        let mut all = HashSet::new();
        for t in tasks {
            let (mine, max_seen) = t.await.unwrap();
            assert!(
                max_seen <= 1000,
                "buffer above its high-water mark: {max_seen}"
            );
            for id in mine {
                assert!(all.insert(id), "duplicate {id}");
            }
        }
        assert_eq!(all.len(), 16 * 2000);

        let requests = server.control.get_ids_counts();
        let stats = p.stats();
        assert!(
            requests.len() < 32_000 / 500,
            "{} wire requests for 32000 IDs",
            requests.len()
        );
        assert!(requests.iter().all(|&c| c <= 1000), "{requests:?}");
        assert!(stats.max_buffered <= 1000, "{stats:?}");
        assert_eq!(stats.refills as usize, requests.len());
        assert_eq!(stats.fetched, server.control.ids_served());
        assert!(stats.fetched >= 32_000);
        assert_eq!(stats.failed_refills, 0);
    })
    .await
}

#[tokio::test]
async fn a_paced_caller_never_waits_and_sees_increasing_ids_from_one_node() {
    bounded(async {
        let server = FakeServer::start(Config::default()).await;
        let p = PrefetchPool::connect(&[server.addr], options(), SIZES)
            .await
            .unwrap();
        until_full(&p).await;
        let mut ids = Vec::with_capacity(3000);
        for i in 0..3000 {
            ids.push(p.next_id().await.unwrap());
            if i % 50 == 49 {
                // A caller that does other work between IDs: refills finish meanwhile.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        // One node, one connection: successive refills keep increasing.
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let stats = p.stats();
        assert_eq!(
            stats.empty_waits, 0,
            "refills ran ahead of the caller: {stats:?}"
        );
        assert!(stats.refills >= 3, "{stats:?}");
        // Background refills top up from just below the low-water mark.
        let requests = server.control.get_ids_counts();
        assert_eq!(requests[0], 1000);
        assert!(requests[1..].iter().all(|&c| c > 750 - 50), "{requests:?}");
    })
    .await
}

#[tokio::test]
async fn an_empty_buffer_reports_the_refill_error_or_times_out() {
    bounded(async {
        // EXHAUSTED: no failover, the waiting caller gets it at once.
        let server = FakeServer::start(Config::default()).await;
        let pool = Pool::connect(&[server.addr], options()).await.unwrap();
        server.control.set_mode(Mode::Refuse(Status::EXHAUSTED));
        let p = PrefetchPool::new(pool.clone(), SIZES);
        let start = Instant::now();
        let err = p.next_id().await.unwrap_err();
        assert_eq!(err.status(), Some(Status::EXHAUSTED), "{err:?}");
        assert!(start.elapsed() < Duration::from_millis(500));
        assert!(p.stats().failed_refills >= 1);

        // Healthy again: the next caller starts a refill and is served.
        server.control.set_mode(Mode::Serve);
        assert!(p.next_id().await.is_ok());

        // A hanging node: the caller waits at most the call deadline.
        let hanging = FakeServer::start(Config::default()).await;
        let pool = Pool::connect(&[hanging.addr], options()).await.unwrap();
        hanging.control.push(Action::Hang(None));
        let p = PrefetchPool::new(pool, SIZES);
        let start = Instant::now();
        let err = p.next_id().await.unwrap_err();
        assert!(matches!(err, Error::Timeout), "{err:?}");
        let took = start.elapsed();
        assert!(took < Duration::from_millis(1500), "{took:?}");
    })
    .await
}

#[tokio::test]
async fn refills_fail_over_between_nodes() {
    bounded(async {
        let a = FakeServer::start(Config::default()).await;
        let b = FakeServer::start(Config {
            first_seq: 1 << 40,
            ..Config::default()
        })
        .await;
        let p = PrefetchPool::connect(&[a.addr, b.addr], options(), SIZES)
            .await
            .unwrap();
        until_full(&p).await;
        a.control.kill();
        let mut seen = HashSet::new();
        for _ in 0..5000 {
            assert!(seen.insert(p.next_id().await.unwrap()));
        }
        assert_eq!(
            a.control.ids_served(),
            1000,
            "A only filled the first buffer"
        );
        assert!(b.control.ids_served() >= 4000);
    })
    .await
}
