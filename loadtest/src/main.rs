//! `idgen-loadtest`: a load tester for idgen in the tradition of redis-benchmark, wrk2 and
//! rpc-perf. It measures throughput and HDR latency percentiles, optionally checks every ID
//! it received for uniqueness and per-connection order, drives idgen's ID protocol or its
//! HTTP ID API, and can run the same workload against Redis (`INCRBY key batch`) for a
//! side-by-side comparison. See `README.md`.
//!
//! # Design
//!
//! * **Runtime.** One multi-thread tokio runtime with one worker per core (`--threads`).
//!   Each connection is one task that owns its socket, read and write buffers, queue of
//!   send timestamps, latency histogram and (with `--verify`) its `Vec<u64>` of IDs, so the
//!   hot path shares nothing: no lock, no shared atomic. Work stealing spreads the
//!   connections over the cores without the load tester having to guess how busy each one
//!   will be; a current-thread runtime per OS thread would only pin connections, which buys
//!   nothing for a client whose per-connection work is a syscall pair per batch.
//! * **Framing.** idgen frames are encoded and decoded only by `idgen-protocol`
//!   (`encode_request`, `decode_response`); the load tester never parses idgen bytes itself.
//!   The HTTP target (`--target http`) writes its one request by hand and frames the answers
//!   with `httparse` and their `Content-Length` (`http.rs`): an HTTP/1.1 client this small
//!   costs a fraction of a general one (hyper's pool, per-request futures and allocations)
//!   and pipelines, which hyper's client does not.
//! * **Pipelining.** A connection keeps up to `--pipeline` requests outstanding. Every
//!   request that may be sent now is appended to one buffer and written with one `write`
//!   (coalescing), and every complete answer in the read buffer is handled before the next
//!   read. Answers come back in request order, so a FIFO of send timestamps gives latency.
//! * **Closed loop** (default): a request is sent as soon as an answer frees a slot;
//!   latency runs from the actual send. **Open loop** (`--rate`): request *k* of a connection
//!   is due at `start + offset + k × connections / rate`; latency runs from that intended
//!   time, so a server stall is charged to every request that should have been sent during it
//!   (coordinated-omission correction, as wrk2), even when the pipeline limit held it back.
//! * **TLS** (`--tls-ca`, with `--tls-cert`/`--tls-key` for mutual TLS): each connection's
//!   TCP stream is wrapped in rustls (ring provider) before the HELLO, the server's
//!   certificate and name always verified; every write is followed by a flush so the last
//!   TLS record goes out with it (a no-op on plain TCP).
//! * **Reports.** Per-connection histograms (nanoseconds, 3 significant digits) are merged at
//!   the end. The progress line, `--interval-json` and `--hdr-log` get one message per
//!   connection per second over a channel (and each connection's last, partial second when
//!   it finishes), merged per second by one task.
//! * **Errors.** ERROR frames are counted by `Status` name; a status that closes the
//!   connection (or a broken stream, or a malformed frame, described once on stderr) makes
//!   the connection reconnect after 100 ms; its outstanding requests count as unanswered.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

mod cli;
mod conn;
mod http;
mod redis;
mod report;
mod tls;

use cli::{Cli, Target, WritePattern};
use conn::{Config, Interval};
use report::{IntervalLine, Latency, Report};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DEFAULT_DURATION: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let threads = cli.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |t| t as usize,
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idgen-loadtest: error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(report_ok) => {
            if report_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(msg) => {
            eprintln!("idgen-loadtest: error: {msg}");
            ExitCode::from(2)
        }
    }
}

/// The first of a name's addresses that accepts a connection (`localhost` is `::1` and
/// `127.0.0.1` on most systems, and a node may listen on only one of them); the first address
/// if none does, so the run reports why it cannot connect.
async fn reachable(name: &str, resolved: &[SocketAddr]) -> Result<SocketAddr, String> {
    let first = *resolved
        .first()
        .ok_or_else(|| format!("--addr {name}: no address"))?;
    if resolved.len() > 1 {
        for &addr in resolved {
            let probe =
                tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr));
            if let Ok(Ok(_)) = probe.await {
                return Ok(addr);
            }
        }
    }
    Ok(first)
}

/// Run the load; `Ok(false)` when --verify failed, `Err` on a fatal error.
async fn run(cli: Cli) -> Result<bool, String> {
    let mut addrs = Vec::new();
    for a in &cli.addrs {
        let resolved: Vec<SocketAddr> = tokio::net::lookup_host(a.as_str())
            .await
            .map_err(|e| format!("--addr {a}: {e}"))?
            .collect();
        addrs.push(reachable(a, &resolved).await?);
    }
    let tls = match &cli.tls_ca {
        None => None,
        Some(ca) => {
            let client = cli.tls_cert.as_deref().zip(cli.tls_key.as_deref());
            let tls = tls::Tls::new(
                ca,
                client,
                cli.tls_server_name.as_deref(),
                cli.target == Target::Idgen,
            )?;
            let names = cli
                .addrs
                .iter()
                .map(|a| tls.name_for(a))
                .collect::<Result<Vec<_>, _>>()?;
            Some((tls, names))
        }
    };
    let transport = match &tls {
        None => "tcp",
        Some((t, _)) if t.client_cert => "mtls",
        Some(_) => "tls",
    };
    if cli.target == Target::Redis && cli.redis_key.is_empty() {
        return Err("--redis-key must not be empty".into());
    }
    if cli.ranges && cli.target != Target::Idgen {
        return Err("--ranges is for the idgen target (GET_RANGES) only".into());
    }
    if cli.uuids && cli.target != Target::Idgen {
        return Err("--uuids is for the idgen target (GET_UUIDS) only".into());
    }
    if cli.sequence.is_some() && cli.target == Target::Redis {
        return Err(
            "--sequence is for the idgen (GET_VALUES) and http (POST /seq/NAME) targets".into(),
        );
    }
    if cli.sequence.is_some() && cli.ranges {
        return Err("--sequence and --ranges exclude each other".into());
    }
    let sequence = match (&cli.sequence, cli.target) {
        (Some(name), Target::Idgen) => Some(
            name.parse::<idgen_protocol::SeqName>()
                .map_err(|e| format!("--sequence {name}: {e}"))?,
        ),
        _ => None,
    };
    let outputs = Outputs {
        progress: !cli.quiet,
        interval_json: cli
            .interval_json
            .as_deref()
            .map(|p| create(p, "--interval-json"))
            .transpose()?,
        hdr_log: cli
            .hdr_log
            .as_deref()
            .map(|p| create(p, "--hdr-log"))
            .transpose()?,
    };
    if cli.verify {
        if let Some(n) = cli.requests {
            let ids = n.saturating_mul(cli.batch as u64);
            if ids > report::VERIFY_WARN_IDS {
                eprintln!(
                    "idgen-loadtest: warning: --verify keeps every ID: {ids} IDs need about {} MiB",
                    ids.saturating_mul(8) >> 20
                );
            }
        }
    }

    let connections = cli.connections as usize;
    let start = Instant::now();
    let wall_start = std::time::SystemTime::now();
    let warmup_end = start + cli.warmup;
    let end = match cli.requests {
        Some(_) => None,
        None => Some(warmup_end + cli.duration.unwrap_or(DEFAULT_DURATION)),
    };
    let interval = cli
        .rate
        .map(|r| Duration::from_secs_f64(connections as f64 / r));
    let (tx, rx) = mpsc::unbounded_channel();
    let mut cfg = Config::new(
        cli.target,
        addrs.clone(),
        cli.pipeline as usize,
        cli.batch,
        cli.verify,
        cli.ranges,
        cli.uuids,
        start,
        warmup_end,
        end,
        interval,
        &cli.redis_key,
        &cli.addrs,
        sequence,
        outputs.any().then_some(tx),
        tls,
    );
    cfg.window = cli.write_pattern == WritePattern::Window;
    if cli.after_id.is_some() || cli.idempotency_keys || cli.masked {
        if cli.target != Target::Idgen {
            return Err(
                "--after-id, --idempotency-keys and --masked are for the idgen target (GET_IDS_WITH) only"
                    .into(),
            );
        }
        cfg = cfg.with_options(cli.after_id, cli.idempotency_keys, cli.masked);
    }
    if let (Some(name), Target::Http) = (&cli.sequence, cli.target) {
        let path = format!("/seq/{name}");
        for (request, host) in cfg.requests.iter_mut().zip(&cli.addrs) {
            request.clear();
            http::encode_request_at(host, &path, cli.batch, request);
        }
    }
    let cfg = Arc::new(cfg);
    let (done, finished_rx) = tokio::sync::oneshot::channel();
    let recorder = outputs
        .any()
        .then(|| tokio::spawn(record(start, wall_start, rx, finished_rx, outputs)));

    let mut tasks = JoinSet::new();
    for i in 0..connections {
        let budget = cli.requests.map(|n| {
            let (share, extra) = (n / connections as u64, n % connections as u64);
            share + u64::from((i as u64) < extra)
        });
        if budget == Some(0) {
            continue;
        }
        // Open loop: stagger the connections' schedules evenly over one period.
        let first_send = cli
            .rate
            .map(|r| start + Duration::from_secs_f64(i as f64 / r));
        let cfg = Arc::clone(&cfg);
        tasks.spawn(async move { conn::run(&cfg, i, budget, first_send).await });
    }
    let mut results = Vec::with_capacity(connections);
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(stats)) => results.push(stats),
            Ok(Err(msg)) => {
                tasks.abort_all();
                return Err(msg);
            }
            Err(e) => {
                tasks.abort_all();
                return Err(format!("a connection task failed: {e}"));
            }
        }
    }
    let finished = Instant::now();
    let _ = done.send(());
    if let Some(recorder) = recorder {
        recorder
            .await
            .map_err(|e| format!("the interval recorder failed: {e}"))??;
    }

    let m = report::merge(results, cli.verify);
    let stop = m.last_answer.unwrap_or(finished).max(warmup_end);
    let duration_s = stop.duration_since(warmup_end).as_secs_f64();
    let per_sec = |n: u64| {
        if duration_s > 0.0 {
            (n as f64 / duration_s).round()
        } else {
            0.0
        }
    };
    let verify = cli.verify.then_some(());
    let report = Report {
        target: cli.target.name(),
        transport,
        addrs: addrs.iter().map(|a| a.to_string()).collect(),
        connections: cli.connections,
        pipeline: cli.pipeline,
        batch: cli.batch,
        rate: cli.rate,
        write_pattern: cli.rate.is_none().then(|| cli.write_pattern.name()),
        warmup_s: cli.warmup.as_secs_f64(),
        duration_s: (duration_s * 1000.0).round() / 1000.0,
        requests: m.requests,
        ids: m.ids,
        requests_per_sec: per_sec(m.requests),
        ids_per_sec: per_sec(m.ids),
        errors: m.errors,
        reconnects: m.reconnects,
        unanswered: m.unanswered,
        latency_us: Latency::from_histogram(&m.hist),
        verified_ids: verify.map(|()| m.verified_ids),
        duplicates: verify.map(|()| m.duplicates),
        out_of_order: verify.map(|()| m.out_of_order),
        sign_bit: verify.map(|()| m.sign_bit),
        wrong_count: verify.map(|()| m.wrong_count),
        verify_ok: verify.map(|()| {
            m.duplicates == 0 && m.out_of_order == 0 && m.sign_bit == 0 && m.wrong_count == 0
        }),
    };
    let text = if cli.json {
        let json = serde_json::to_string(&report).map_err(|e| format!("JSON: {e}"))?;
        format!("{json}\n")
    } else {
        report.table()
    };
    // A reader that closed early (`| head`) has what it wanted: not an error, never a panic.
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(format!("cannot write the report: {e}"))
        }
        _ => {}
    }
    Ok(report.ok())
}

/// Where the per-second figures go.
struct Outputs {
    /// The progress line on stderr.
    progress: bool,
    interval_json: Option<std::io::BufWriter<std::fs::File>>,
    hdr_log: Option<std::io::BufWriter<std::fs::File>>,
}

impl Outputs {
    fn any(&self) -> bool {
        self.progress || self.interval_json.is_some() || self.hdr_log.is_some()
    }
}

fn create(path: &std::path::Path, flag: &str) -> Result<std::io::BufWriter<std::fs::File>, String> {
    std::fs::File::create(path)
        .map(std::io::BufWriter::new)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// Merges the connections' per-second messages, once a second and once more when the run has
/// finished (`finished`: then every connection has sent its last one), into the progress line
/// on stderr, a line of `--interval-json` and a histogram of `--hdr-log`.
async fn record(
    start: Instant,
    wall_start: std::time::SystemTime,
    mut rx: mpsc::UnboundedReceiver<Interval>,
    mut finished: tokio::sync::oneshot::Receiver<()>,
    mut out: Outputs,
) -> Result<(), String> {
    use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
    use hdrhistogram::serialization::V2DeflateSerializer;
    use std::io::Write as _;

    let hdr_err = |e: std::io::Error| format!("--hdr-log: {e}");
    let mut serializer = V2DeflateSerializer::new();
    let mut hdr = match out.hdr_log.as_mut() {
        None => None,
        Some(file) => Some(
            IntervalLogWriterBuilder::new()
                .add_comment(
                    "idgen-loadtest: request latency in nanoseconds, one histogram per second",
                )
                .with_start_time(wall_start)
                .with_base_time(wall_start)
                // As HdrHistogram's Java log writer: the max column in milliseconds.
                .with_max_value_divisor(1e6)
                .begin_log_with(file, &mut serializer)
                .map_err(hdr_err)?,
        ),
    };
    if let Some(hdr) = hdr.as_mut() {
        hdr.write_comment(
            "Legend: interval start (s since BaseTime), length (s), max (ms), histogram",
        )
        .map_err(hdr_err)?;
    }
    // A little after each second boundary, so the connections have flushed that second.
    let period = Duration::from_secs(1);
    let mut tick = tokio::time::interval_at(start + period + Duration::from_millis(20), period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last = start;
    loop {
        let (now, last_one) = tokio::select! {
            now = tick.tick() => (now, false),
            _ = &mut finished => (Instant::now(), true),
        };
        let mut sum = Interval::new();
        while let Ok(iv) = rx.try_recv() {
            sum.merge(&iv);
        }
        let length = now.duration_since(last);
        let from = last.duration_since(start);
        last = now;
        let line = IntervalLine::new(now.duration_since(start), length, &sum);
        if out.progress && !last_one {
            eprintln!(
                "[{:>6.1}s] {:>10.0} req/s {:>12.0} IDs/s  errors {}  p99 {} µs",
                line.t,
                sum.requests as f64 / length.as_secs_f64().max(1e-3),
                sum.ids as f64 / length.as_secs_f64().max(1e-3),
                sum.errors,
                line.p99_us,
            );
        }
        // The last, partial second only if something happened in it.
        if !last_one || !sum.is_empty() {
            if let Some(file) = out.interval_json.as_mut() {
                let json = serde_json::to_string(&line).map_err(|e| format!("JSON: {e}"))?;
                writeln!(file, "{json}").map_err(|e| format!("--interval-json: {e}"))?;
            }
            if let Some(hdr) = hdr.as_mut() {
                hdr.write_histogram(&sum.hist, from, length, None)
                    .map_err(|e| format!("--hdr-log: {e:?}"))?;
            }
        }
        if last_one {
            break;
        }
    }
    drop(hdr);
    for (file, flag) in [
        (out.interval_json.as_mut(), "--interval-json"),
        (out.hdr_log.as_mut(), "--hdr-log"),
    ] {
        if let Some(file) = file {
            file.flush().map_err(|e| format!("{flag}: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::reachable;

    #[test]
    fn a_name_connects_to_the_address_that_listens() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            // As `localhost` resolves on a dual-stack host: ::1 first, nobody listening there.
            let v6: std::net::SocketAddr = format!("[::1]:{port}").parse().unwrap();
            let v4 = listener.local_addr().unwrap();
            assert_eq!(reachable("localhost", &[v6, v4]).await.unwrap(), v4);
            assert_eq!(reachable("localhost", &[v4]).await.unwrap(), v4);
            assert!(reachable("nowhere", &[]).await.is_err());
        });
    }
}
