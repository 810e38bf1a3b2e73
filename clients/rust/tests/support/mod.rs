//! A fake idgen node that speaks protocol version 3 (or pretends to be a version 1 or 2
//! node): named sequences held in memory, answered with VALUES, and a script of what to do
//! instead of answering the next GET_VALUES. It records every frame it reads after HELLO.
//! (The test kit's fake node speaks version 1 only.)

#![allow(dead_code)] // Each test file uses its own part.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use idgen_protocol::{
    decode_request_for, encode_error, encode_hello_ok, encode_ids, encode_pong, encode_ranges,
    encode_values, Decoded, Limits, Request, SeqMode, ServerHello, Status, WorkerRange,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the node does instead of answering the next GET_VALUES normally.
#[derive(Debug, Clone)]
pub enum Step {
    /// Answer with this ERROR (and close afterwards if the status says so).
    Error(Status, &'static str),
    /// Send these bytes instead of the answer.
    Raw(Vec<u8>),
    /// Close the connection without answering.
    Drop,
    /// Stop answering (keep the socket open until the node is dropped).
    Hang,
}

#[derive(Debug, Clone, Copy)]
struct Seq {
    mode: SeqMode,
    next: u64,
    max: u64,
}

#[derive(Debug, Default)]
pub struct Control {
    sequences: Mutex<HashMap<String, Seq>>,
    script: Mutex<VecDeque<Step>>,
    /// Every GET_VALUES read (name, count), in order, over all connections.
    requests: Mutex<Vec<(String, u32)>>,
    /// Every frame read after HELLO, whole (length prefix included), in order.
    frames: Mutex<Vec<Vec<u8>>>,
    pub connections: AtomicUsize,
}

impl Control {
    /// A sequence of `mode` whose values are `start, start + 1, ..., max`.
    pub fn create(&self, name: &str, mode: SeqMode, start: u64, max: u64) {
        self.sequences.lock().unwrap().insert(
            name.to_string(),
            Seq {
                mode,
                next: start,
                max,
            },
        );
    }

    pub fn drop_sequence(&self, name: &str) {
        self.sequences.lock().unwrap().remove(name);
    }

    pub fn push(&self, step: Step) {
        self.script.lock().unwrap().push_back(step);
    }

    pub fn requests(&self) -> Vec<(String, u32)> {
        self.requests.lock().unwrap().clone()
    }

    /// The counts of the GET_VALUES of `name`, in order.
    pub fn counts(&self, name: &str) -> Vec<u32> {
        self.requests()
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, c)| c)
            .collect()
    }

    pub fn frames(&self) -> Vec<Vec<u8>> {
        self.frames.lock().unwrap().clone()
    }

    /// The answer to GET_VALUES of `count` values of `name` (no script step).
    fn values(&self, name: &str, count: u32, out: &mut Vec<u8>) {
        let mut sequences = self.sequences.lock().unwrap();
        let Some(seq) = sequences.get_mut(name) else {
            encode_error(Status::UNKNOWN_SEQUENCE, "no such sequence", out);
            return;
        };
        let left = seq.max.saturating_sub(seq.next).saturating_add(1);
        if seq.next > seq.max || left < u64::from(count) {
            encode_error(
                Status::SEQUENCE_USED_UP,
                "the sequence is at its maximum",
                out,
            );
            return;
        }
        let values: Vec<u64> = (seq.next..seq.next + u64::from(count)).collect();
        seq.next += u64::from(count);
        encode_values(seq.mode, &values, out);
    }
}

pub struct Config {
    /// The version HELLO_OK announces (whatever the client offered).
    pub version: u16,
    pub max_batch: u32,
    pub max_request_frame: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: 3,
            max_batch: 1000,
            max_request_frame: 128,
        }
    }
}

pub struct SeqNode {
    pub addr: SocketAddr,
    pub control: Arc<Control>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SeqNode {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn hello(config: &Config) -> ServerHello {
    ServerHello {
        version: config.version,
        epoch_ms: 1_704_067_200_000,
        timestamp_bits: 41,
        worker_bits: 10,
        sequence_bits: 12,
        region_bits: 0,
        max_batch: config.max_batch,
        max_request_frame: config.max_request_frame,
        workers: WorkerRange::new(512, 512),
        shard: 1,
    }
}

impl SeqNode {
    /// Starts the node on 127.0.0.1:0 on the current Tokio runtime.
    pub async fn start(config: Config) -> SeqNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let control = Arc::new(Control::default());
        let ctl = control.clone();
        let hello = hello(&config);
        let task = tokio::spawn(async move {
            // Connection tasks end with the runtime, or when their client closes.
            while let Ok((sock, _)) = listener.accept().await {
                ctl.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(sock, ctl.clone(), hello));
            }
        });
        SeqNode {
            addr,
            control,
            task,
        }
    }

    /// [`SeqNode::start`] on a runtime of its own (one thread), for tests without one: the
    /// runtime is returned with the node and must outlive it.
    pub fn spawn(config: Config) -> (tokio::runtime::Runtime, SeqNode) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let node = rt.block_on(SeqNode::start(config));
        (rt, node)
    }
}

async fn serve(mut sock: TcpStream, ctl: Arc<Control>, hello: ServerHello) {
    let limits = Limits {
        max_request_frame: hello.max_request_frame,
        max_batch: hello.max_batch,
    };
    let mut version = None;
    let mut buf = BytesMut::with_capacity(4096);
    let mut next_id = 1u64;
    loop {
        let mut out = Vec::new();
        let mut close = false;
        loop {
            let decoded = match decode_request_for(&buf, &limits, version.unwrap_or(1)) {
                Ok(None) => break,
                Ok(Some((decoded, used))) => {
                    if version.is_some() {
                        ctl.frames.lock().unwrap().push(buf[..used].to_vec());
                    }
                    buf.advance(used);
                    decoded
                }
                Err(e) => {
                    encode_error(e.status(), "bad frame", &mut out);
                    close = true;
                    break;
                }
            };
            match decoded {
                Decoded::Request(Request::Hello { .. }) if version.is_none() => {
                    version = Some(hello.version);
                    encode_hello_ok(&hello, &mut out).unwrap();
                }
                _ if version.is_none() => {
                    encode_error(Status::HANDSHAKE_REQUIRED, "HELLO first", &mut out);
                    close = true;
                    break;
                }
                Decoded::Request(Request::Hello { .. }) => {
                    encode_error(Status::HANDSHAKE_REQUIRED, "second HELLO", &mut out);
                    close = true;
                    break;
                }
                Decoded::Reject { status, message } => encode_error(status, message, &mut out),
                Decoded::Request(Request::Ping { token }) => encode_pong(token, &mut out),
                Decoded::Request(Request::GetIds { count }) => {
                    let ids: Vec<u64> = (next_id..next_id + u64::from(count)).collect();
                    next_id += u64::from(count);
                    encode_ids(&ids, &mut out);
                }
                Decoded::Request(Request::GetRanges { count }) => {
                    encode_ranges(&[(next_id, count)], &mut out);
                    next_id += u64::from(count);
                }
                Decoded::Request(
                    Request::GetUuids { .. }
                    | Request::GetIdsWith(_)
                    | Request::GetValuesHere { .. },
                ) => {
                    encode_error(Status::UNKNOWN_OPCODE, "no UUIDs or options here", &mut out);
                }
                Decoded::Request(Request::GetValues { count, name }) => {
                    ctl.requests
                        .lock()
                        .unwrap()
                        .push((name.as_str().to_string(), count));
                    let step = ctl.script.lock().unwrap().pop_front();
                    match step {
                        None => ctl.values(name.as_str(), count, &mut out),
                        Some(Step::Error(status, message)) => {
                            encode_error(status, message, &mut out);
                            if status.closes_connection() {
                                close = true;
                                break;
                            }
                        }
                        Some(Step::Raw(bytes)) => out.extend_from_slice(&bytes),
                        Some(Step::Drop) => {
                            let _ = sock.write_all(&out).await;
                            return;
                        }
                        Some(Step::Hang) => {
                            let _ = sock.write_all(&out).await;
                            // Until the runtime (or the node's task) goes away.
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            return;
                        }
                    }
                }
            }
        }
        if !out.is_empty() && sock.write_all(&out).await.is_err() {
            return;
        }
        if close {
            return;
        }
        match sock.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
