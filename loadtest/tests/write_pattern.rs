//! The two closed-loop write patterns, seen from a server that holds back half of a window's
//! answers (`refill` sends a request for each answer, `window` nothing until the window is
//! answered), and the bench's bare responder, checked by the load tester's `--verify`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::BytesMut;
use idgen_protocol::{
    decode_request, encode_hello_ok, encode_ids, Decoded, Layout, Limits, Request, ServerHello,
    WorkerRange,
};

use common::run_loadtest;

const LIMIT: Duration = Duration::from_secs(20);
const PIPELINE: usize = 8;

/// Reads from `stream` until `want` more GET_IDS have arrived (answering HELLO on the way), or
/// until nothing arrives for `quiet`; returns how many arrived.
fn requests(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    want: usize,
    quiet: Option<Duration>,
) -> usize {
    stream.set_read_timeout(quiet).unwrap();
    let mut got = 0;
    loop {
        while let Ok(Some((decoded, used))) = decode_request(buf, &Limits::default()) {
            let _ = buf.split_to(used);
            match decoded {
                Decoded::Request(Request::Hello { .. }) => {
                    let layout = Layout::default();
                    let hello = ServerHello {
                        version: 1,
                        epoch_ms: layout.epoch_ms(),
                        timestamp_bits: layout.timestamp_bits(),
                        worker_bits: layout.worker_bits(),
                        sequence_bits: layout.sequence_bits(),
                        region_bits: layout.region_bits(),
                        max_batch: 65536,
                        max_request_frame: 64,
                        workers: WorkerRange::new(0, 1),
                        shard: 0,
                    };
                    let mut out = BytesMut::new();
                    encode_hello_ok(&hello, &mut out).unwrap();
                    stream.write_all(&out).unwrap();
                }
                Decoded::Request(Request::GetIds { .. }) => got += 1,
                other => panic!("unexpected request {other:?}"),
            }
        }
        if got >= want {
            return got;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return got, // quiet for the whole timeout
        }
    }
}

/// Serves one connection of a `--pipeline 8` run: takes the first window, answers half of it,
/// counts what arrives in the next 300 ms, then answers everything until the client closes.
/// Returns the count.
fn holding_back_half(listener: TcpListener) -> usize {
    let (mut stream, _) = listener.accept().unwrap();
    let mut buf = BytesMut::new();
    let mut next = 1u64;
    let mut answer = |stream: &mut TcpStream, n: usize| {
        let mut out = BytesMut::new();
        for _ in 0..n {
            encode_ids(&[next], &mut out);
            next += 1;
        }
        stream.write_all(&out).unwrap();
    };
    assert_eq!(requests(&mut stream, &mut buf, PIPELINE, None), PIPELINE);
    answer(&mut stream, PIPELINE / 2);
    let meanwhile = requests(
        &mut stream,
        &mut buf,
        usize::MAX,
        Some(Duration::from_millis(300)),
    );
    let mut unanswered = PIPELINE / 2 + meanwhile;
    loop {
        answer(&mut stream, unanswered);
        unanswered = requests(&mut stream, &mut buf, 1, Some(Duration::from_secs(5)));
        if unanswered == 0 {
            return meanwhile;
        }
    }
}

fn sent_while_half_a_window_was_unanswered(pattern: &str) -> usize {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(holding_back_half(listener)));
    let pipeline = PIPELINE.to_string();
    let run = run_loadtest(
        &[
            "--addr",
            &addr,
            "--json",
            "--quiet",
            "--pipeline",
            &pipeline,
            "--requests",
            "32",
            "--write-pattern",
            pattern,
        ],
        LIMIT,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["write_pattern"], pattern);
    rx.recv_timeout(LIMIT).expect("the server's count")
}

#[test]
fn refill_sends_a_request_for_each_answer() {
    assert_eq!(
        sent_while_half_a_window_was_unanswered("refill"),
        PIPELINE / 2
    );
}

#[test]
fn window_sends_nothing_until_the_whole_window_is_answered() {
    assert_eq!(sent_while_half_a_window_was_unanswered("window"), 0);
}

#[test]
fn window_writes_are_refused_with_an_open_loop_rate() {
    let run = run_loadtest(
        &[
            "--addr",
            "127.0.0.1:9",
            "--rate",
            "100",
            "--duration",
            "1s",
            "--write-pattern",
            "window",
        ],
        LIMIT,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--write-pattern"), "{}", run.stderr);
}

/// The bare responder, stopped when dropped.
struct Bare(Child, String);

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bare() -> Bare {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idgen-bare-responder"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start idgen-bare-responder");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .trim()
        .to_string();
    Bare(child, addr)
}

#[test]
fn the_bare_responder_answers_ids_ranges_and_uuids_unique_and_in_order() {
    let bare = bare();
    // (Debug builds verify every ID: the counts keep each run well under a second.)
    for (extra, batch, requests) in [
        (None, "1", "2000"),
        (None, "100", "500"),
        (Some("--ranges"), "4096", "100"),
        (Some("--uuids"), "1", "2000"),
        (Some("--uuids"), "100", "500"),
    ] {
        for pattern in ["refill", "window"] {
            let mut args = vec![
                "--addr",
                &bare.1,
                "--json",
                "--quiet",
                "--verify",
                "--connections",
                "4",
                "--pipeline",
                "16",
                "--batch",
                batch,
                "--requests",
                requests,
                "--write-pattern",
                pattern,
            ];
            args.extend(extra);
            let run = run_loadtest(&args, LIMIT);
            assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
            let report = run.json();
            let requests: u64 = requests.parse().unwrap();
            assert_eq!(report["requests"].as_u64(), Some(requests), "{report}");
            assert_eq!(
                report["ids"].as_u64(),
                Some(requests * batch.parse::<u64>().unwrap()),
                "{report}"
            );
        }
    }
}

/// A reader that closed stdout before the report (`| head -0`) ends the run with its own
/// status, quietly: no panic, no "Broken pipe".
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let bare = bare();
    let mut child = Command::new(env!("CARGO_BIN_EXE_idgen-loadtest"))
        .args(["--addr", &bare.1, "--requests", "100", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idgen-loadtest");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
