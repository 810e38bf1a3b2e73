//! The client against the real `idgen` server binary.
//!
//! The binary is `$IDGEN_BIN`, else `$CARGO_TARGET_DIR/debug/idgen`, else
//! `<workspace>/target/debug/idgen` (build it first: `cargo build -p idgen`).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idgen_client::Client;

fn idgen_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("IDGEN_BIN") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("debug").join("idgen")
}

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `idgen serve` on a loopback port and read `listening on <addr>` from its stdout.
fn start_server() -> (Server, SocketAddr) {
    let bin = idgen_bin();
    let mut child = Command::new(&bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--shards",
            "2",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("listening on ").nth(1) {
                let _ = tx.send(rest.trim().to_owned());
            }
            // Keep draining so the server never blocks on a full pipe.
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("server printed `listening on <addr>` within 15 s");
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|e| panic!("bad address {addr:?}: {e}"));
    assert!(addr.ip().is_loopback());
    (server, addr)
}

#[tokio::test]
#[ignore = "needs the idgen server binary; run by scripts/test once the server lands"]
async fn twenty_thousand_ids_from_ten_tasks() {
    let (_server, addr) = start_server();
    let run = async {
        let client = Client::connect(addr).await.expect("connect");
        let layout = client.layout();
        assert_eq!(
            u32::from(layout.timestamp_bits)
                + u32::from(layout.worker_bits)
                + u32::from(layout.sequence_bits),
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
        let parts = layout.decode(*all.iter().max().unwrap());
        assert!(
            parts.unix_ms.abs_diff(now_ms) < 60_000,
            "{parts:?} vs now {now_ms}"
        );
        let hello = client.hello();
        assert!((u64::from(hello.worker_first)
            ..u64::from(hello.worker_first) + u64::from(hello.worker_count))
            .contains(&parts.worker));
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("test finished within 60 s");
}
