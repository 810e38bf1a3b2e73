//! Named sequences (`clients/vectors/SEQUENCES.md`) against the in-test fake version 3 node
//! (`support`): the calls, the checks before sending, the answers and their errors, the
//! pool's failover, and prefetch of dense sequences only.

mod support;

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use idgen_client::{blocking, Client, ClientOptions, Error, Pool, PoolOptions, Status};
use idgen_protocol::SeqMode;
use support::{Config, SeqNode, Step};

/// Every test body is bounded in time.
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test took longer than 20 s")
}

const MAX: u64 = (1 << 63) - 1;

/// A version 3 node with the dense sequence `orders` and the strict `ledger`, both from 1.
async fn node() -> SeqNode {
    node_with(Config::default()).await
}

async fn node_with(config: Config) -> SeqNode {
    let node = SeqNode::start(config).await;
    node.control.create("orders", SeqMode::Dense, 1, MAX);
    node.control.create("ledger", SeqMode::Strict, 1, MAX);
    node
}

fn strictly_increasing(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

fn fast_pool() -> PoolOptions {
    PoolOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .request_timeout(Duration::from_millis(500))
        .call_deadline(Duration::from_secs(3))
        .backoff_min(Duration::from_millis(100))
        .backoff_max(Duration::from_millis(400))
}

#[tokio::test]
async fn values_of_dense_and_strict_sequences_one_request_per_call() {
    bounded(async {
        let node = node().await;
        let client = Client::connect(node.addr).await.unwrap();
        assert_eq!(client.hello().version, 3);
        assert_eq!(client.sequence_prefetch(), 0);
        assert_eq!(client.next_value("orders").await.unwrap(), 1);
        assert_eq!(client.next_values("orders", 4).await.unwrap(), [2, 3, 4, 5]);
        assert_eq!(client.next_value("ledger").await.unwrap(), 1);
        assert_eq!(client.next_values("ledger", 2).await.unwrap(), [2, 3]);
        assert_eq!(node.control.counts("orders"), [1, 4]);
        assert_eq!(node.control.counts("ledger"), [1, 2]);

        // Many callers on one connection: pipelined, every value once, each caller's
        // values increasing; one GET_VALUES per call without prefetch.
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for _ in 0..25 {
                        mine.push(c.next_value("orders").await.unwrap());
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        for t in tasks {
            let mine = t.await.unwrap();
            assert!(strictly_increasing(&mine), "{mine:?}");
            all.extend(mine);
        }
        assert_eq!(all.len(), 500);
        assert_eq!(node.control.counts("orders").len(), 2 + 500);
        // IDs still work on the same connection.
        assert_eq!(client.next_ids(3).await.unwrap().len(), 3);
    })
    .await
}

#[tokio::test]
async fn a_values_answer_of_max_batch_values_is_taken() {
    bounded(async {
        // A VALUES of max_batch values is one byte longer than an IDS of as many IDs.
        let node = node_with(Config {
            max_batch: 100,
            ..Config::default()
        })
        .await;
        let client = Client::connect(node.addr).await.unwrap();
        let values = client.next_values("orders", 100).await.unwrap();
        assert_eq!(values, (1..=100).collect::<Vec<u64>>());
        assert!(!client.is_closed());
        // And IDS of max_batch IDs still are.
        assert_eq!(client.next_ids(100).await.unwrap().len(), 100);
        let e = client.next_values("orders", 101).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains("max_batch is 100"), "{e}");
    })
    .await
}

#[tokio::test]
async fn bad_names_and_counts_fail_before_sending() {
    bounded(async {
        let node = node_with(Config {
            max_batch: 2_000_000,
            ..Config::default()
        })
        .await;
        let client = Client::connect(node.addr).await.unwrap();
        let long = "a".repeat(65);
        for name in [
            "", "Orders", ".orders", "-x", "_x", "a/b", "café", "a b", &long,
        ] {
            match client.next_value(name).await {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("sequence name"), "{m}"),
                other => panic!("{name:?}: {other:?}"),
            }
            assert!(matches!(
                client.next_values(name, 3).await,
                Err(Error::InvalidArgument(_))
            ));
        }
        for n in [0, (1 << 20) + 1, u32::MAX] {
            let e = client.next_values("orders", n).await.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{n}: {e:?}");
            assert!(!e.closes_connection());
        }
        // Nothing reached the node; the longest name and count do.
        assert!(node.control.frames().is_empty());
        node.control.create(&"z".repeat(64), SeqMode::Dense, 1, MAX);
        assert_eq!(client.next_value(&"z".repeat(64)).await.unwrap(), 1);
        assert_eq!(
            client.next_values("orders", 1 << 20).await.unwrap().len(),
            1 << 20
        );
        assert_eq!(node.control.frames().len(), 2);

        // The same on a pool and a blocking client.
        let pool = Pool::connect(&[node.addr.to_string()], fast_pool())
            .await
            .unwrap();
        assert!(matches!(
            pool.next_value("Bad").await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            pool.next_values("orders", 0).await,
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(node.control.frames().len(), 2);
        assert_eq!(pool.nodes()[0].failures, 0);
    })
    .await
}

#[tokio::test]
async fn a_version_1_or_2_node_is_refused_without_sending() {
    bounded(async {
        for version in [1, 2] {
            let old = node_with(Config {
                version,
                ..Config::default()
            })
            .await;
            let client = Client::connect(old.addr).await.unwrap();
            assert_eq!(client.hello().version, version);
            let e = client.next_value("orders").await.unwrap_err();
            assert!(
                matches!(e, Error::NodeVersion { version: v, required: 3 } if v == version),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "the node speaks protocol version {version}; named sequences need version 3"
                )
            );
            assert!(!e.closes_connection() && !e.is_unavailable());
            // Also with prefetch; the connection still serves IDs.
            let buffered = client.with_sequence_prefetch(10);
            assert!(matches!(
                buffered.next_values("orders", 5).await,
                Err(Error::NodeVersion { .. })
            ));
            assert_eq!(client.next_ids(2).await.unwrap().len(), 2);
            // Only the GET_IDS reached the node.
            assert_eq!(old.control.frames().len(), 1, "version {version}");
            assert!(old.control.requests().is_empty());

            // A pool fails at once: no other node is tried, the node stays healthy.
            let new = node().await;
            let pool = Pool::connect(&[old.addr.to_string(), new.addr.to_string()], fast_pool())
                .await
                .unwrap();
            let e = pool.next_values("orders", 2).await.unwrap_err();
            assert!(matches!(e, Error::NodeVersion { .. }), "{e:?}");
            assert!(new.control.requests().is_empty());
            let nodes = pool.nodes();
            assert!(nodes[0].current && nodes[0].failures == 0 && nodes[1].failures == 0);
        }
    })
    .await
}

#[tokio::test]
async fn refusals_are_mapped_and_keep_the_connection() {
    bounded(async {
        let node = node().await;
        let client = Client::connect(node.addr).await.unwrap();
        // Real refusals from the node's own state.
        let e = client.next_value("nope").await.unwrap_err();
        assert_eq!(e.status(), Some(Status::UNKNOWN_SEQUENCE));
        node.control.create("tiny", SeqMode::Dense, 1, 5);
        assert_eq!(client.next_values("tiny", 3).await.unwrap(), [1, 2, 3]);
        let e = client.next_values("tiny", 3).await.unwrap_err();
        assert_eq!(e.status(), Some(Status::SEQUENCE_USED_UP));
        assert_eq!(client.next_values("tiny", 2).await.unwrap(), [4, 5]);
        // Scripted ones.
        for (status, unavailable) in [
            (Status::UNKNOWN_SEQUENCE, false),
            (Status::INVALID_SEQUENCE_NAME, false),
            (Status::SEQUENCE_USED_UP, false),
            (Status::INVALID_COUNT, false),
            (Status::BATCH_TOO_LARGE, false),
            (Status::SEQUENCE_UNAVAILABLE, true),
            (Status::BUSY, true),
            (Status(399), true),
        ] {
            node.control.push(Step::Error(status, "scripted"));
            match client.next_value("orders").await {
                Err(Error::Server { status: s, message }) => {
                    assert_eq!((s, message.as_str()), (status, "scripted"));
                }
                other => panic!("{status}: {other:?}"),
            }
            let e = Error::Server {
                status,
                message: String::new(),
            };
            assert_eq!(e.is_unavailable(), unavailable, "{status}");
            assert!(!client.is_closed(), "{status}");
            client.next_value("orders").await.unwrap();
        }
        // A closing status ends the connection.
        node.control.push(Step::Error(Status::INTERNAL, "bye"));
        let e = client.next_value("orders").await.unwrap_err();
        assert_eq!(e.status(), Some(Status::INTERNAL));
        assert!(e.closes_connection() && client.is_closed());
        assert!(matches!(
            client.next_value("orders").await,
            Err(Error::Closed)
        ));
    })
    .await
}

#[tokio::test]
async fn broken_answers_drop_the_connection() {
    bounded(async {
        let frame = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = Vec::new();
            f(&mut b);
            b
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            // Two values for a call of one.
            (
                frame(&|b| idgen_protocol::encode_values(SeqMode::Dense, &[1, 2], b)),
                "unexpected",
            ),
            // IDS for GET_VALUES.
            (
                frame(&|b| idgen_protocol::encode_ids(&[1], b)),
                "unexpected",
            ),
            // Mode 2.
            (
                vec![0, 0, 0, 14, 0x85, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1],
                "frame",
            ),
            // Value 0.
            (
                vec![0, 0, 0, 14, 0x85, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                "frame",
            ),
        ];
        for (bytes, kind) in cases {
            let node = node().await;
            let client = Client::connect(node.addr).await.unwrap();
            node.control.push(Step::Raw(bytes.clone()));
            let e = client.next_value("orders").await.unwrap_err();
            match kind {
                "unexpected" => assert!(matches!(e, Error::UnexpectedResponse(_)), "{e:?}"),
                _ => {
                    assert!(matches!(e, Error::Protocol(_)), "{e:?}");
                    assert_eq!(e.status(), Some(Status::BAD_FRAME));
                }
            }
            assert!(client.is_closed(), "{bytes:?}");
        }
        // A dropped connection.
        let node = node().await;
        let client = Client::connect(node.addr).await.unwrap();
        node.control.push(Step::Drop);
        assert!(matches!(
            client.next_value("orders").await,
            Err(Error::Io(_))
        ));
    })
    .await
}

#[tokio::test]
async fn a_call_without_an_answer_times_out() {
    bounded(async {
        let node = node().await;
        let options = ClientOptions {
            request_timeout: Duration::from_millis(200),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(node.addr, options).await.unwrap();
        node.control.push(Step::Hang);
        assert!(matches!(
            client.next_value("orders").await,
            Err(Error::Timeout)
        ));
        let buffered = client.with_sequence_prefetch(10);
        assert!(matches!(
            buffered.next_value("orders").await,
            Err(Error::Timeout)
        ));
    })
    .await
}

#[tokio::test]
async fn prefetch_on_a_dense_sequence_costs_about_calls_over_k_requests() {
    bounded(async {
        let node = node().await;
        let client = Client::connect(node.addr)
            .await
            .unwrap()
            .with_sequence_prefetch(100);
        assert_eq!(client.sequence_prefetch(), 100);
        let mut got = Vec::new();
        for _ in 0..1000 {
            got.push(client.next_value("orders").await.unwrap());
        }
        assert_eq!(got, (1..=1000).collect::<Vec<u64>>());
        // The first call learns the mode with exactly 1; then 100 at a time.
        let mut expected = vec![1];
        expected.extend([100; 10]);
        assert_eq!(node.control.counts("orders"), expected);

        // n above what is buffered: max(K, n) asked, the buffered values first.
        // (1001 is buffered: it goes first.)
        let five = client.next_values("orders", 5).await.unwrap();
        assert_eq!(five, [1001, 1002, 1003, 1004, 1005]);
        let big = client.next_values("orders", 250).await.unwrap();
        assert_eq!(big, (1006..=1255).collect::<Vec<u64>>());
        assert_eq!(node.control.counts("orders")[11..], [100, 250]);

        // Many tasks share one buffer: every value once, each caller's increasing.
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for i in 0..100u32 {
                        mine.extend(c.next_values("orders", 1 + i % 2).await.unwrap());
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        for t in tasks {
            let mine = t.await.unwrap();
            assert!(strictly_increasing(&mine), "{mine:?}");
            all.extend(mine);
        }
        assert_eq!(all.len(), 10 * 150);
        assert!(all.iter().all(|&v| v > 1255));
        let refills = node.control.counts("orders").len() - 13;
        assert!(refills <= 1500 / 100 + 1, "{refills} refills");

        // A client without prefetch on the same connection asks every time.
        let plain = Client::connect(node.addr).await.unwrap();
        let before = node.control.counts("orders").len();
        plain.next_value("orders").await.unwrap();
        plain.next_value("orders").await.unwrap();
        assert_eq!(node.control.counts("orders").len(), before + 2);
    })
    .await
}

#[tokio::test]
async fn prefetch_never_keeps_strict_values() {
    bounded(async {
        let node = node().await;
        let client = Client::connect(node.addr)
            .await
            .unwrap()
            .with_sequence_prefetch(100);
        let mut got = Vec::new();
        for _ in 0..50 {
            got.push(client.next_value("ledger").await.unwrap());
        }
        got.extend(client.next_values("ledger", 3).await.unwrap());
        assert_eq!(got, (1..=53).collect::<Vec<u64>>());
        let mut expected = vec![1; 50];
        expected.push(3);
        assert_eq!(node.control.counts("ledger"), expected);
        // Concurrent strict calls each send their own request too.
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move { c.next_value("ledger").await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(node.control.counts("ledger").len(), 51 + 10);
    })
    .await
}

#[tokio::test]
async fn unknown_sequence_empties_the_buffer_and_forgets_the_mode() {
    bounded(async {
        let node = node().await;
        node.control.create("x", SeqMode::Dense, 1, MAX);
        let client = Client::connect(node.addr)
            .await
            .unwrap()
            .with_sequence_prefetch(10);
        assert_eq!(client.next_value("x").await.unwrap(), 1);
        assert_eq!(client.next_value("x").await.unwrap(), 2); // 3..=11 buffered
        node.control.drop_sequence("x");
        // From the buffer while it can answer.
        assert_eq!(client.next_value("x").await.unwrap(), 3);
        let e = client.next_values("x", 20).await.unwrap_err();
        assert_eq!(e.status(), Some(Status::UNKNOWN_SEQUENCE));
        // Created again, strict: the old buffer is gone, the mode learned again.
        node.control.create("x", SeqMode::Strict, 1000, MAX);
        assert_eq!(client.next_value("x").await.unwrap(), 1000);
        assert_eq!(client.next_value("x").await.unwrap(), 1001);
        assert_eq!(node.control.counts("x"), [1, 10, 20, 1, 1]);
    })
    .await
}

#[tokio::test]
async fn pool_fails_over_on_unavailable_and_busy_only() {
    bounded(async {
        let a = node().await;
        let b = SeqNode::start(Config::default()).await;
        b.control.create("orders", SeqMode::Dense, 1_000_000, MAX);
        b.control.create("ledger", SeqMode::Strict, 1_000_000, MAX);
        let pool = Pool::connect(&[a.addr.to_string(), b.addr.to_string()], fast_pool())
            .await
            .unwrap();
        assert_eq!(pool.next_value("orders").await.unwrap(), 1);

        // Returned at once, node a stays current and healthy, b is not asked.
        for status in [
            Status::UNKNOWN_SEQUENCE,
            Status::INVALID_SEQUENCE_NAME,
            Status::SEQUENCE_USED_UP,
            Status::INVALID_COUNT,
            Status::BATCH_TOO_LARGE,
        ] {
            a.control.push(Step::Error(status, "no"));
            let e = pool.next_value("orders").await.unwrap_err();
            assert_eq!(e.status(), Some(status));
            assert!(b.control.requests().is_empty(), "{status}");
            let nodes = pool.nodes();
            assert!(nodes[0].current && nodes[0].failures == 0, "{status}");
        }

        // Retried on b; a marked down.
        for status in [Status::SEQUENCE_UNAVAILABLE, Status::BUSY] {
            let pool = Pool::connect(&[a.addr.to_string(), b.addr.to_string()], fast_pool())
                .await
                .unwrap();
            assert!(pool.next_value("ledger").await.unwrap() < 1_000_000);
            let asked_b = b.control.requests().len();
            a.control.push(Step::Error(status, "later"));
            let v = pool.next_values("ledger", 2).await.unwrap();
            assert!(v[0] >= 1_000_000 && v[1] == v[0] + 1, "{status}: {v:?}");
            assert_eq!(b.control.requests().len(), asked_b + 1);
            let nodes = pool.nodes();
            assert!(
                nodes[1].current && nodes[0].failures == 1,
                "{status}: {nodes:?}"
            );
            assert_eq!(
                nodes[0].last_error.as_ref().and_then(Error::status),
                Some(status)
            );
        }

        // A closed connection is retried elsewhere too.
        let pool = Pool::connect(&[a.addr.to_string(), b.addr.to_string()], fast_pool())
            .await
            .unwrap();
        a.control.push(Step::Drop);
        let v = pool.next_value("orders").await.unwrap();
        assert!(v >= 1_000_000, "{v}");

        // Every node unavailable: the last node's error.
        let pool = Pool::connect(&[a.addr.to_string(), b.addr.to_string()], fast_pool())
            .await
            .unwrap();
        a.control
            .push(Step::Error(Status::SEQUENCE_UNAVAILABLE, "a"));
        b.control
            .push(Step::Error(Status::SEQUENCE_UNAVAILABLE, "b"));
        match pool.next_value("orders").await {
            Err(Error::Server { status, message }) => {
                assert_eq!(
                    (status, message.as_str()),
                    (Status::SEQUENCE_UNAVAILABLE, "b")
                )
            }
            other => panic!("{other:?}"),
        }
    })
    .await
}

#[tokio::test]
async fn pool_prefetch_on_dense_only_with_failover() {
    bounded(async {
        let a = node().await;
        let b = SeqNode::start(Config::default()).await;
        b.control.create("orders", SeqMode::Dense, 1_000_000, MAX);
        b.control.create("ledger", SeqMode::Strict, 1_000_000, MAX);
        let pool = Pool::connect(&[a.addr.to_string(), b.addr.to_string()], fast_pool())
            .await
            .unwrap()
            .with_sequence_prefetch(50);
        assert_eq!(pool.sequence_prefetch(), 50);
        let mut got = Vec::new();
        for _ in 0..200 {
            got.push(pool.next_value("orders").await.unwrap());
        }
        assert_eq!(got, (1..=200).collect::<Vec<u64>>());
        assert_eq!(a.control.counts("orders"), [1, 50, 50, 50, 50]);
        for _ in 0..5 {
            pool.next_value("ledger").await.unwrap();
        }
        assert_eq!(a.control.counts("ledger"), [1; 5]);

        // 1 value left in the buffer (201); a refill that fails over to b: b's values are
        // above the buffered one, which goes first.
        a.control
            .push(Step::Error(Status::SEQUENCE_UNAVAILABLE, "later"));
        let three = pool.next_values("orders", 3).await.unwrap();
        assert_eq!(three, [201, 1_000_000, 1_000_001]);
        assert_eq!(b.control.counts("orders"), [50]);
        let more = pool.next_values("orders", 48).await.unwrap();
        assert_eq!(more, (1_000_002..1_000_050).collect::<Vec<u64>>());
        assert_eq!(b.control.counts("orders"), [50]);
    })
    .await
}

#[test]
fn blocking_client_and_pool() {
    let (_rt, node) = SeqNode::spawn(Config::default());
    node.control.create("orders", SeqMode::Dense, 1, MAX);
    node.control.create("ledger", SeqMode::Strict, 1, MAX);

    let client = blocking::Client::connect(node.addr).unwrap();
    assert_eq!(client.next_value("orders").unwrap(), 1);
    assert_eq!(client.next_values("orders", 3).unwrap(), [2, 3, 4]);
    assert!(matches!(
        client.next_value("No"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        client.next_value("nope").unwrap_err().status(),
        Some(Status::UNKNOWN_SEQUENCE)
    );
    let buffered = client.with_sequence_prefetch(20);
    assert_eq!(buffered.sequence_prefetch(), 20);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let c = buffered.clone();
            std::thread::spawn(move || {
                (0..30)
                    .map(|_| c.next_value("orders").unwrap())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in threads {
        let mine = t.join().unwrap();
        assert!(strictly_increasing(&mine));
        all.extend(mine);
    }
    assert_eq!(all.len(), 120);
    assert!(node.control.counts("orders").len() <= 2 + 1 + 120 / 20 + 1);

    let pool = blocking::Pool::connect(&[node.addr.to_string()], PoolOptions::default()).unwrap();
    assert_eq!(pool.next_value("ledger").unwrap(), 1);
    assert_eq!(pool.next_values("ledger", 2).unwrap(), [2, 3]);
    let buffered = pool.with_sequence_prefetch(10);
    assert_eq!(buffered.sequence_prefetch(), 10);
    let a = buffered.next_value("orders").unwrap();
    let b = buffered.next_value("orders").unwrap();
    let c = buffered.next_value("orders").unwrap();
    assert!(a < b && b < c);
    assert_eq!(
        buffered.next_values("orders", 0).unwrap_err().to_string(),
        "invalid argument: a call asks for at least 1 value, not 0"
    );
}
