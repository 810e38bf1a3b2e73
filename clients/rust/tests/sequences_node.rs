//! Named sequences against a real node (`clients/vectors/SEQUENCES.md`, "Tests each client
//! runs"): the sequences are created with `idgen seq create ... --data-dir DIR` before
//! `idgen serve --data-dir DIR` starts.
//!
//! The node is the `idgen` binary of `IDGEN_BIN` (or the one Cargo built next to this test,
//! `cargo build -p idgen`); without one these tests fail, they never skip.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idgen_client::{blocking, Client, Error, Pool, PoolOptions, Status};
use idgen_testkit::node::{idgen_binary, NodeProc};

/// A data directory of its own, removed when dropped (after the node that uses it).
struct DataDir(PathBuf);

impl DataDir {
    fn new(tag: &str) -> DataDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "idgen-client-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("data dir");
        DataDir(dir)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `idgen seq create ARGS --data-dir DIR`, which must succeed.
fn seq_create(dir: &Path, args: &[&str]) {
    let out = Command::new(idgen_binary())
        .args(["seq", "create"])
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run idgen seq create");
    assert!(
        out.status.success(),
        "idgen seq create {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A node on 127.0.0.1:0 over `dir` with `orders` (dense), `ledger` (strict) and `tiny`
/// (dense, at most 5) created first.
fn node(dir: &DataDir, args: &[&str]) -> NodeProc {
    seq_create(&dir.0, &["orders"]);
    seq_create(&dir.0, &["ledger", "--mode", "strict"]);
    seq_create(&dir.0, &["tiny", "--max", "5"]);
    NodeProc::try_start_in(Some(&dir.0), args, &[])
        .unwrap_or_else(|e| panic!("idgen serve did not start: {e}"))
}

fn strictly_increasing(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `f` on a fresh runtime, bounded in time; the node's log is shown if it fails.
fn run<F: std::future::Future<Output = ()>>(node: &NodeProc, f: F) {
    let outcome =
        runtime().block_on(async { tokio::time::timeout(Duration::from_secs(60), f).await });
    assert!(outcome.is_ok(), "timed out; node log:\n{}", node.log());
}

fn pool_options() -> PoolOptions {
    PoolOptions::default()
        .call_deadline(Duration::from_secs(10))
        .request_timeout(Duration::from_secs(5))
}

#[test]
fn dense_and_strict_sequences_give_unique_increasing_values() {
    let dir = DataDir::new("values");
    let node = node(&dir, &[]);
    run(&node, async {
        let client = Client::connect(node.addr).await.unwrap();
        assert_eq!(client.hello().version, idgen_protocol::PROTOCOL_VERSION);
        for seq in ["orders", "ledger"] {
            let mut got = Vec::new();
            for _ in 0..100 {
                got.push(client.next_value(seq).await.unwrap());
            }
            got.extend(client.next_values(seq, 200).await.unwrap());
            got.push(client.next_value(seq).await.unwrap());
            assert_eq!(got.len(), 301);
            assert!(strictly_increasing(&got), "{seq}: {got:?}");
            assert!(got[0] >= 1 && *got.last().unwrap() < 1 << 63, "{seq}");

            // Concurrent callers on one connection: every value once, each one's increasing.
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let c = client.clone();
                    tokio::spawn(async move {
                        let mut mine = Vec::new();
                        for _ in 0..25 {
                            mine.push(c.next_value(seq).await.unwrap());
                        }
                        mine
                    })
                })
                .collect();
            let mut all: HashSet<u64> = got.iter().copied().collect();
            for t in tasks {
                let mine = t.await.unwrap();
                assert!(strictly_increasing(&mine), "{seq}: {mine:?}");
                all.extend(mine);
            }
            assert_eq!(all.len(), 301 + 8 * 25, "{seq}: every value once");
        }

        // Strict: calls made one after another are increasing whatever the connection.
        let other = Client::connect(node.addr).await.unwrap();
        let mut ordered = Vec::new();
        for i in 0..20 {
            let c = if i % 2 == 0 { &client } else { &other };
            ordered.push(c.next_value("ledger").await.unwrap());
        }
        assert!(strictly_increasing(&ordered), "{ordered:?}");
        // Dense: unique across connections.
        let a = client.next_values("orders", 50).await.unwrap();
        let b = other.next_values("orders", 50).await.unwrap();
        let both: HashSet<u64> = a.iter().chain(&b).copied().collect();
        assert_eq!(both.len(), 100);
    });
}

#[test]
fn prefetch_keeps_dense_values_only() {
    let dir = DataDir::new("prefetch");
    let node = node(&dir, &[]);
    run(&node, async {
        let pool = Pool::connect(&[node.addr.to_string()], pool_options())
            .await
            .unwrap();
        let first = pool.with_sequence_prefetch(64);
        let second = pool.with_sequence_prefetch(64);
        // Dense: values unique and each client's increasing.
        let mut seen = HashSet::new();
        let (mut from_first, mut from_second) = (Vec::new(), Vec::new());
        for _ in 0..300 {
            from_first.push(first.next_value("orders").await.unwrap());
            from_second.push(second.next_value("orders").await.unwrap());
        }
        from_first.extend(first.next_values("orders", 100).await.unwrap());
        assert!(strictly_increasing(&from_first) && strictly_increasing(&from_second));
        seen.extend(from_first.iter().chain(&from_second).copied());
        assert_eq!(seen.len(), 700, "every value once");
        // Strict: never buffered, so calls alternating between the two prefetching pools
        // still see the real-time order.
        let mut ordered = Vec::new();
        for i in 0..40 {
            let p = if i % 2 == 0 { &first } else { &second };
            ordered.push(p.next_value("ledger").await.unwrap());
        }
        assert!(strictly_increasing(&ordered), "{ordered:?}");
        // Many tasks on one prefetching client.
        let client = Client::connect(node.addr)
            .await
            .unwrap()
            .with_sequence_prefetch(100);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for _ in 0..100 {
                        mine.push(c.next_value("orders").await.unwrap());
                    }
                    mine
                })
            })
            .collect();
        for t in tasks {
            let mine = t.await.unwrap();
            assert!(strictly_increasing(&mine));
            for v in mine {
                assert!(seen.insert(v), "{v} handed out twice");
            }
        }
    });
}

#[test]
fn unknown_bad_and_used_up_sequences() {
    let dir = DataDir::new("errors");
    let node = node(&dir, &[]);
    run(&node, async {
        let client = Client::connect(node.addr).await.unwrap();
        // Unknown: UNKNOWN_SEQUENCE, the connection still usable.
        let e = client.next_value("nope").await.unwrap_err();
        assert_eq!(e.status(), Some(Status::UNKNOWN_SEQUENCE), "{e:?}");
        assert!(!e.closes_connection() && !e.is_unavailable());
        // A bad name: refused by the client, before sending.
        for bad in ["Orders", "", ".x", "a/b"] {
            let e = client.next_value(bad).await.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}: {e:?}");
        }
        assert!(!client.is_closed());

        // Used up after its 5 values.
        assert_eq!(client.next_values("tiny", 3).await.unwrap(), [1, 2, 3]);
        assert_eq!(client.next_values("tiny", 2).await.unwrap(), [4, 5]);
        for n in [1, 2] {
            let e = client.next_values("tiny", n).await.unwrap_err();
            assert_eq!(e.status(), Some(Status::SEQUENCE_USED_UP), "{e:?}");
        }
        assert!(!client.is_closed());
        client.next_value("orders").await.unwrap();

        // A pool returns both at once and keeps the node healthy; with prefetch too.
        let pool = Pool::connect(&[node.addr.to_string()], pool_options())
            .await
            .unwrap()
            .with_sequence_prefetch(16);
        for (seq, status) in [
            ("nope", Status::UNKNOWN_SEQUENCE),
            ("tiny", Status::SEQUENCE_USED_UP),
        ] {
            let e = pool.next_value(seq).await.unwrap_err();
            assert_eq!(e.status(), Some(status), "{seq}: {e:?}");
        }
        assert!(matches!(
            pool.next_value("Bad").await,
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(pool.nodes()[0].failures, 0);
    });
}

#[test]
fn prefetch_reaches_the_last_values_below_a_maximum() {
    let dir = DataDir::new("prefetch-max");
    let node = node(&dir, &[]);
    run(&node, async {
        // A fetch of 100 is refused with only 5 values in the sequence: the call asks again
        // for exactly what it needs, so every value below the maximum is handed out.
        let client = Client::connect(node.addr)
            .await
            .unwrap()
            .with_sequence_prefetch(100);
        let mut got = Vec::new();
        for _ in 0..5 {
            got.push(client.next_value("tiny").await.unwrap());
        }
        assert_eq!(got, [1, 2, 3, 4, 5]);
        let e = client.next_value("tiny").await.unwrap_err();
        assert_eq!(e.status(), Some(Status::SEQUENCE_USED_UP), "{e:?}");
    });
}

#[test]
fn a_call_for_max_batch_values_is_one_answer() {
    let dir = DataDir::new("batch");
    let node = node(&dir, &["--max-batch", "100"]);
    run(&node, async {
        let client = Client::connect(node.addr).await.unwrap();
        assert_eq!(client.hello().max_batch, 100);
        for seq in ["orders", "ledger"] {
            let values = client.next_values(seq, 100).await.unwrap();
            assert_eq!(values.len(), 100);
            assert!(strictly_increasing(&values));
            let e = client.next_values(seq, 101).await.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        }
        assert!(!client.is_closed());
        // Prefetch asks for no more than max_batch.
        let buffered = client.with_sequence_prefetch(1000);
        let mut got = Vec::new();
        for _ in 0..250 {
            got.push(buffered.next_value("orders").await.unwrap());
        }
        assert!(strictly_increasing(&got));
    });
}

#[test]
fn blocking_client_against_a_node() {
    let dir = DataDir::new("blocking");
    let node = node(&dir, &[]);
    let client = blocking::Client::connect(node.addr).unwrap();
    let first = client.next_value("ledger").unwrap();
    let more = client.next_values("ledger", 10).unwrap();
    assert!(first < more[0] && strictly_increasing(&more));
    let buffered = client.with_sequence_prefetch(32);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let c = buffered.clone();
            std::thread::spawn(move || {
                (0..50)
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
    assert_eq!(all.len(), 200);
    assert_eq!(
        client.next_value("nope").unwrap_err().status(),
        Some(Status::UNKNOWN_SEQUENCE)
    );
}
