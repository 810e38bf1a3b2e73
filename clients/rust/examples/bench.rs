//! Throughput of the client against one node, as one JSON line, for `scripts/bench` (beside
//! the Java, Go and TypeScript clients' bench programs, which take the same flags):
//!
//! ```text
//! cargo run --release -p idgen-client --example bench -- \
//!     --addr 127.0.0.1:7420 --batch 4096 --seconds 5 --connections 2 --pipeline 8
//! {"client":"rust","batch":4096,"ids_per_sec":…,"requests_per_sec":…,"errors":0}
//! ```
//!
//! `--connections` clients, each with `--pipeline` callers in a loop of `next_ids(batch)`, on
//! one thread (a current-thread runtime), counted for `--seconds` after `--warmup` seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idgen_client::Client;

struct Args {
    addr: String,
    batch: u32,
    seconds: f64,
    connections: usize,
    pipeline: usize,
    warmup: f64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:7420".into(),
        batch: 1,
        seconds: 5.0,
        connections: 1,
        pipeline: 1,
        warmup: 1.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--addr" => a.addr = value,
            "--batch" => a.batch = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = value.parse().map_err(|e| bad(&e))?,
            "--connections" => a.connections = value.parse().map_err(|e| bad(&e))?,
            "--pipeline" => a.pipeline = value.parse().map_err(|e| bad(&e))?,
            "--warmup" => a.warmup = value.parse().map_err(|e| bad(&e))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.batch == 0 || a.connections == 0 || a.pipeline == 0 || a.seconds <= 0.0 {
        return Err("--batch, --connections, --pipeline and --seconds must be positive".into());
    }
    Ok(a)
}

fn main() -> std::process::ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench: {e}\nusage: bench --addr HOST:PORT --batch N --seconds S --connections C --pipeline P [--warmup S]");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(args))
}

async fn run(a: Args) -> std::process::ExitCode {
    let ids = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(a.warmup);
    let end = measure_from + Duration::from_secs_f64(a.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.connections {
        let client = match Client::connect(a.addr.as_str()).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bench: cannot connect to {}: {e}", a.addr);
                return std::process::ExitCode::FAILURE;
            }
        };
        for _ in 0..a.pipeline {
            let (client, ids, requests, errors) = (
                client.clone(),
                Arc::clone(&ids),
                Arc::clone(&requests),
                Arc::clone(&errors),
            );
            let batch = a.batch;
            tasks.spawn(async move {
                loop {
                    let now = Instant::now();
                    if now >= end {
                        return;
                    }
                    let result = client.next_ids(batch).await;
                    if Instant::now() < measure_from {
                        continue;
                    }
                    match result {
                        Ok(got) => {
                            ids.fetch_add(got.len() as u64, Ordering::Relaxed);
                            requests.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    let secs = a.seconds;
    println!(
        "{{\"client\":\"rust\",\"batch\":{},\"ids_per_sec\":{:.0},\"requests_per_sec\":{:.0},\"errors\":{}}}",
        a.batch,
        ids.load(Ordering::Relaxed) as f64 / secs,
        requests.load(Ordering::Relaxed) as f64 / secs,
        errors.load(Ordering::Relaxed)
    );
    std::process::ExitCode::SUCCESS
}
