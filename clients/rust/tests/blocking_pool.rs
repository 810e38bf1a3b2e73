//! The blocking `Pool` and `PrefetchPool` from plain threads (the fake nodes run on a
//! runtime of their own).

use std::collections::HashSet;
use std::time::Duration;

use idgen_client::{blocking, PoolOptions, PrefetchOptions, Status};
use idgen_testkit::fake::{Config, FakeServer, Mode};

fn options() -> PoolOptions {
    PoolOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .request_timeout(Duration::from_millis(500))
        .call_deadline(Duration::from_secs(1))
        .backoff_min(Duration::from_millis(50))
        .backoff_max(Duration::from_millis(200))
}

fn servers(rt: &tokio::runtime::Runtime) -> Vec<FakeServer> {
    rt.block_on(async {
        let mut out = Vec::new();
        for k in 0..2u64 {
            out.push(
                FakeServer::start(Config {
                    first_seq: k << 40,
                    ..Config::default()
                })
                .await,
            );
        }
        out
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn blocking_pool_fails_over_from_plain_threads() {
    let rt = runtime();
    let nodes = servers(&rt);
    let addrs: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    let pool = blocking::Pool::connect(&addrs, options()).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..100 {
                    if i % 10 == 0 {
                        mine.extend(pool.next_ids(25).unwrap());
                    } else {
                        mine.push(pool.next_id().unwrap());
                    }
                }
                (t, mine)
            })
        })
        .collect();
    // Node 0 refuses while the threads run: they carry on on node 1.
    nodes[0]
        .control
        .set_mode(Mode::Refuse(Status::UNAVAILABLE_LEASE));
    let mut all = HashSet::new();
    for th in threads {
        let (_, mine) = th.join().unwrap();
        assert_eq!(mine.len(), 90 + 10 * 25);
        for id in mine {
            assert!(all.insert(id), "duplicate {id}");
        }
    }
    assert!(pool.nodes().iter().any(|n| n.current));
    assert_eq!(pool.next_ids(3).unwrap().len(), 3);
    drop(pool);
    drop(nodes);
}

#[test]
fn blocking_prefetch_pool_hands_out_distinct_ids_to_threads() {
    let rt = runtime();
    let nodes = servers(&rt);
    let addrs: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    let sizes = PrefetchOptions {
        low_water: 100,
        high_water: 400,
    };
    let ids = blocking::PrefetchPool::connect(&addrs, options(), sizes).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let ids = ids.clone();
            std::thread::spawn(move || {
                (0..1000)
                    .map(|_| ids.next_id().unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = HashSet::new();
    for th in threads {
        for id in th.join().unwrap() {
            assert!(all.insert(id), "duplicate {id}");
        }
    }
    assert_eq!(all.len(), 8000);
    let stats = ids.stats();
    assert!(stats.max_buffered <= 400, "{stats:?}");
    let requests: usize = nodes.iter().map(|s| s.control.get_ids_counts().len()).sum();
    assert!(
        requests < 8000 / 100,
        "{requests} wire requests for 8000 IDs"
    );
    drop(ids);
    drop(nodes);
}

/// A blocking pool from a builder (here a URL): nothing connected until the first call, then
/// failover as from `connect`.
#[test]
fn blocking_pool_from_a_builder_connects_at_its_first_call() {
    let rt = runtime();
    let nodes = servers(&rt);
    let url = format!("idgen://{},{}?timeout_ms=500", nodes[0].addr, nodes[1].addr);
    let pool =
        blocking::Pool::from_builder(idgen_client::Pool::builder().url(&url).unwrap()).unwrap();
    assert!(
        pool.nodes().iter().all(|n| !n.connected),
        "{:?}",
        pool.nodes()
    );
    assert_eq!(pool.next_ids(5).unwrap().len(), 5);
    assert!(nodes[0].control.ids_served() >= 5);
    nodes[0].control.kill();
    assert_eq!(pool.next_ids(5).unwrap().len(), 5);
    assert!(nodes[1].control.ids_served() >= 5);
    drop(pool);
    drop(nodes);
}
