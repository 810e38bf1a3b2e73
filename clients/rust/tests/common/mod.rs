//! A scriptable in-test idgen server on 127.0.0.1:0, built on the protocol crate's
//! server-side decode/encode functions.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use idgen_protocol::{
    decode_request, encode_error, encode_hello_ok, encode_ids, encode_pong, Decoded, Limits,
    Request, ServerConnState, ServerHello, Status,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does instead of answering the next GET_IDS or PING normally.
#[derive(Debug, Clone)]
pub enum Action {
    /// Answer with this ERROR; close afterwards if the status says so.
    Error(Status, &'static str),
    /// Close the connection without answering this request or any later one.
    Drop,
    /// Answer normally (a no-op step in a script).
    Serve,
    /// Answer normally after this long (reading nothing meanwhile).
    Delay(Duration),
    /// Send these bytes instead of the answer.
    Raw(Vec<u8>),
    /// Stop answering; keep the socket open (forever with `None`, else for that long,
    /// then close).
    Hang(Option<Duration>),
}

#[derive(Debug, Clone)]
pub struct Config {
    pub max_batch: u32,
    /// Send these bytes instead of a HELLO_OK.
    pub hello_raw: Option<Vec<u8>>,
    /// Accept connections but never answer the HELLO.
    pub silent_handshake: bool,
    /// The first ID's sequence offset: give each fake node of one test its own range
    /// (e.g. `k << 40`) so that their IDs cannot coincide.
    pub first_seq: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_batch: 1000,
            hello_raw: None,
            silent_handshake: false,
            first_seq: 0,
        }
    }
}

pub const EPOCH_MS: u64 = 1_704_067_200_000;

pub fn hello(max_batch: u32) -> ServerHello {
    ServerHello {
        version: 1,
        epoch_ms: EPOCH_MS,
        timestamp_bits: 41,
        worker_bits: 10,
        sequence_bits: 12,
        region_bits: 0,
        max_batch,
        max_request_frame: 64,
        worker_first: 512,
        worker_count: 512,
        shard: 1,
    }
}

/// How the server answers GET_IDS when no script step is queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Answer normally.
    #[default]
    Serve,
    /// Answer every GET_IDS with this ERROR (closing afterwards if the status says so).
    Refuse(Status),
}

#[derive(Debug, Default)]
pub struct Control {
    mode: Mutex<Mode>,
    /// Killed: every open connection is closed, and new ones are closed right after
    /// accept (before the handshake), until revived.
    down: std::sync::atomic::AtomicBool,
    kill: tokio::sync::Notify,
    /// GET_IDS answered with the `Refuse` mode's ERROR.
    pub refused: AtomicUsize,
    script: Mutex<VecDeque<Action>>,
    /// The count of every GET_IDS served normally, in order.
    pub get_ids: Mutex<Vec<u32>>,
    pub pings: AtomicUsize,
    pub connections: AtomicUsize,
    /// Next sequence number; IDs are `base | seq` with the default layout's worker 512.
    next: AtomicU64,
}

impl Control {
    pub fn push(&self, action: Action) {
        self.script.lock().unwrap().push_back(action);
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Close every connection and refuse new ones (as a crashed node would, minus
    /// the refused connect: a new connection is accepted and closed at once).
    pub fn kill(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.kill.notify_waiters();
    }

    /// Serve connections again after [`Control::kill`].
    pub fn revive(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// IDs served normally, summed.
    pub fn ids_served(&self) -> u64 {
        self.get_ids
            .lock()
            .unwrap()
            .iter()
            .map(|&c| u64::from(c))
            .sum()
    }

    pub fn get_ids_counts(&self) -> Vec<u32> {
        self.get_ids.lock().unwrap().clone()
    }

    /// `count` strictly increasing IDs (worker 512, a fixed timestamp, then a counter
    /// that spills into the timestamp: still 63-bit and increasing).
    fn ids(&self, count: u32) -> Vec<u64> {
        let start = self.next.fetch_add(u64::from(count), Ordering::Relaxed);
        let base = (63_072_000_123u64 << 22) | (512 << 12);
        (start..start + u64::from(count))
            .map(|i| base + i)
            .collect()
    }
}

pub struct FakeServer {
    pub addr: SocketAddr,
    pub control: Arc<Control>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub async fn start(config: Config) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let control = Arc::new(Control::default());
        control.next.store(config.first_seq, Ordering::Relaxed);
        let ctl = control.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                ctl.connections.fetch_add(1, Ordering::Relaxed);
                if ctl.is_down() {
                    drop(sock);
                    continue;
                }
                tokio::spawn(serve(sock, ctl.clone(), config.clone()));
            }
        });
        FakeServer {
            addr,
            control,
            task,
        }
    }
}

async fn serve(mut sock: TcpStream, ctl: Arc<Control>, config: Config) {
    let limits = Limits {
        max_request_frame: 64,
        max_batch: config.max_batch,
    };
    let mut state = ServerConnState::new();
    let mut buf = BytesMut::with_capacity(4096);
    let mut out: Vec<u8> = Vec::new();
    loop {
        let killed = ctl.kill.notified();
        tokio::pin!(killed);
        killed.as_mut().enable();
        if ctl.is_down() {
            return;
        }
        let read = tokio::select! {
            r = sock.read_buf(&mut buf) => r,
            () = killed => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        out.clear();
        loop {
            let (decoded, used) = match decode_request(&buf, &limits) {
                Ok(None) => break,
                Ok(Some(frame)) => frame,
                Err(e) => {
                    encode_error(e.status(), &e.to_string(), &mut out);
                    let _ = sock.write_all(&out).await;
                    return;
                }
            };
            buf.advance(used);
            if let Err(e) = state.check(&decoded) {
                encode_error(e.status(), &e.to_string(), &mut out);
                let _ = sock.write_all(&out).await;
                return;
            }
            let request = match decoded {
                Decoded::Reject { status, message } => {
                    encode_error(status, message, &mut out);
                    continue;
                }
                Decoded::Request(Request::Hello { .. }) => {
                    if config.silent_handshake {
                        hang(sock, None).await;
                        return;
                    }
                    match &config.hello_raw {
                        Some(raw) => out.extend_from_slice(raw),
                        None => encode_hello_ok(&hello(config.max_batch), &mut out),
                    }
                    continue;
                }
                Decoded::Request(r) => r,
            };
            let mut action = ctl.script.lock().unwrap().pop_front();
            if action.is_none() && matches!(request, Request::GetIds { .. }) {
                if let Mode::Refuse(status) = *ctl.mode.lock().unwrap() {
                    ctl.refused.fetch_add(1, Ordering::Relaxed);
                    action = Some(Action::Error(status, "refused (test mode)"));
                }
            }
            if let Some(Action::Delay(d)) = action {
                tokio::time::sleep(d).await;
            }
            match action {
                None | Some(Action::Serve) | Some(Action::Delay(_)) => match request {
                    Request::GetIds { count } => {
                        ctl.get_ids.lock().unwrap().push(count);
                        encode_ids(&ctl.ids(count), &mut out);
                    }
                    Request::Ping { token } => {
                        ctl.pings.fetch_add(1, Ordering::Relaxed);
                        encode_pong(token, &mut out);
                    }
                    // The fake speaks version 1 (its HELLO_OK says so): version-1 decoding
                    // never yields GET_RANGES, and HELLO was answered above.
                    Request::Hello { .. } | Request::GetRanges { .. } => unreachable!(),
                },
                Some(Action::Error(status, message)) => {
                    encode_error(status, message, &mut out);
                    if status.closes_connection() {
                        let _ = sock.write_all(&out).await;
                        return;
                    }
                }
                Some(Action::Raw(bytes)) => out.extend_from_slice(&bytes),
                Some(Action::Drop) => {
                    let _ = sock.write_all(&out).await;
                    return;
                }
                Some(Action::Hang(limit)) => {
                    let _ = sock.write_all(&out).await;
                    hang(sock, limit).await;
                    return;
                }
            }
        }
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Read and discard until EOF (or until `limit` has passed), answering nothing.
async fn hang(mut sock: TcpStream, limit: Option<Duration>) {
    let drain = async {
        let mut sink = [0u8; 4096];
        while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    match limit {
        Some(d) => {
            let _ = tokio::time::timeout(d, drain).await;
        }
        None => drain.await,
    }
}
