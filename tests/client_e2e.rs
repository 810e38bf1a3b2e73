//! The Rust client (`idgen-client`) and `idgen get` against a real `idgen serve` process.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::node::NodeProc;
use idgen_client::Client;

#[tokio::test(flavor = "current_thread")]
async fn many_tasks_share_one_pipelined_connection() {
    let node = NodeProc::start(&["--store", "memory", "--shards", "2"]);
    let run = async {
        let client = Client::connect(node.addr).await.expect("connect");
        let layout = client.layout();
        assert_eq!(
            u32::from(layout.timestamp_bits())
                + u32::from(layout.worker_bits())
                + u32::from(layout.sequence_bits()),
            63
        );
        client.ping().await.expect("ping");
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::with_capacity(2000);
                    for _ in 0..1000 {
                        mine.push(c.next_id().await.expect("next_id"));
                    }
                    for _ in 0..10 {
                        mine.extend(c.next_ids(100).await.expect("next_ids"));
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::with_capacity(20_000);
        for t in tasks {
            let mine = t.await.unwrap();
            assert_eq!(mine.len(), 2000);
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "per-task order");
            all.extend(mine);
        }
        assert_eq!(all.len(), 20_000, "all unique");
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let parts = layout.decompose(*all.iter().max().unwrap());
        assert!(
            parts.unix_ms.abs_diff(now_ms) < 60_000,
            "{parts:?} vs now {now_ms}"
        );
        let hello = client.hello();
        assert!(hello.workers.contains(parts.worker));
        // A batch above the server's limit is split by the client and returned whole.
        let big = client.next_ids(150_000).await.expect("split batch");
        assert_eq!(big.len(), 150_000);
        assert!(big.windows(2).all(|w| w[0] < w[1]));
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("test finished within 60 s");
}

#[test]
fn blocking_client_and_the_get_command() {
    let node = NodeProc::start(&["--store", "memory", "--shards", "1"]);
    let client = idgen_client::blocking::Client::connect(node.addr).expect("connect");
    let a = client.next_id().unwrap();
    let b = client.next_ids(10).unwrap();
    assert!(b[0] > a && b.windows(2).all(|w| w[0] < w[1]));

    let ids = get_command(node.addr, 2500);
    assert_eq!(ids.len(), 2500);
    assert!(ids[0] > b[9] && ids.windows(2).all(|w| w[0] < w[1]));

    // Nothing listening: a clear error and a non-zero exit, no panic.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["get", "--addr", "127.0.0.1:1", "-n", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("127.0.0.1:1"));
}

/// `idgen get` asks for more IDs than one request may carry in several requests, and a count
/// of zero is a usage error, not an empty answer.
#[test]
fn the_get_command_splits_counts_over_the_nodes_max_batch() {
    let node = NodeProc::start(&["--store", "memory", "--shards", "1", "--max-batch", "100"]);
    let ids = get_command(node.addr, 250);
    assert_eq!(ids.len(), 250);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["get", "--addr", &node.addr.to_string(), "-n", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}

/// `idgen get --addr ADDR -n N`, which must succeed: its IDs, one per line.
fn get_command(addr: std::net::SocketAddr, n: u32) -> Vec<u64> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idgen"))
        .args(["get", "--addr", &addr.to_string(), "-n", &n.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().expect("one decimal ID per line"))
        .collect()
}
