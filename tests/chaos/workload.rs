//! The workload: client threads on a non-panicking client that record every answer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use idgen_protocol::{
    decode_response, encode_request, max_response_frame, Request, ResponseRef, ServerHello, Status,
};

use crate::history::{ConnLog, ErrRec, History, Shared};
use crate::Rng;

pub(crate) struct Client {
    pub(crate) stream: TcpStream,
    pub(crate) buf: BytesMut,
    pub(crate) max_frame: u32,
}

pub(crate) enum Answer {
    Ids(Vec<u64>),
    Error(Status, String),
}

impl Client {
    pub(crate) fn connect(addr: SocketAddr) -> Result<(Client, ServerHello), String> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_millis(1000)))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(Duration::from_millis(1000)))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let mut c = Client {
            stream,
            buf: BytesMut::new(),
            max_frame: max_response_frame(0),
        };
        c.send(&Request::Hello {
            min_version: 1,
            max_version: 1,
        })?;
        let hello = c.recv(|r| match r {
            ResponseRef::HelloOk(h) => Ok(h),
            ResponseRef::Error { status, message } => Err(format!("HELLO: {status} {message}")),
            other => Err(format!("HELLO answered with {other:?}")),
        })??;
        c.max_frame = max_response_frame(hello.max_batch);
        Ok((c, hello))
    }

    pub(crate) fn send(&mut self, req: &Request) -> Result<(), String> {
        let mut out = BytesMut::new();
        encode_request(req, &mut out);
        self.stream
            .write_all(&out)
            .map_err(|e| format!("write: {e}"))
    }

    pub(crate) fn recv<T>(&mut self, f: impl FnOnce(ResponseRef<'_>) -> T) -> Result<T, String> {
        loop {
            match decode_response(&self.buf, self.max_frame) {
                Ok(Some((resp, used))) => {
                    let out = f(resp);
                    let _ = self.buf.split_to(used);
                    return Ok(out);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("bad frame from the server: {e}")),
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("closed by the server".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    pub(crate) fn get_ids(&mut self, n: u32) -> Result<Answer, String> {
        self.send(&Request::GetIds { count: n })?;
        self.recv(|r| match r {
            ResponseRef::Ids(ids) => Ok(Answer::Ids(ids.to_vec())),
            ResponseRef::Error { status, message } => Ok(Answer::Error(status, message.into())),
            other => Err(format!("GET_IDS answered with {other:?}")),
        })?
    }
}

/// One client thread: a connection to `node` at a time, random batch sizes, recording all.
pub(crate) fn client_thread(shared: Arc<Shared>, node: usize, seed: u64) -> History {
    let mut rng = Rng(seed);
    let mut h = History::default();
    let err = |h: &mut History, what: String| {
        h.errors.push(ErrRec {
            node,
            at: Instant::now(),
            what,
        })
    };
    while !shared.stop.load(Ordering::Relaxed) {
        let addr = *shared.addrs[node].lock().unwrap();
        let Some(addr) = addr else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let (mut c, hello) = match Client::connect(addr) {
            Ok(x) => x,
            Err(e) => {
                err(&mut h, e);
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let mut log = ConnLog::new(node, shared.conn_ids.fetch_add(1, Ordering::Relaxed), hello);
        while !shared.stop.load(Ordering::Relaxed) {
            let n = 1 + rng.below(shared.max_batch) as u32;
            match c.get_ids(n) {
                Ok(Answer::Ids(ids)) => {
                    let at = Instant::now();
                    if ids.len() != n as usize {
                        err(&mut h, format!("asked {n} IDs, got {}", ids.len()));
                    }
                    log.push(at, ids);
                }
                Ok(Answer::Error(status, message)) => {
                    err(&mut h, format!("{status}: {message}"));
                    // 3xx: this node cannot serve now; reconnect (a new HELLO) after a pause.
                    std::thread::sleep(Duration::from_millis(20));
                    break;
                }
                Err(e) => {
                    err(&mut h, e);
                    std::thread::sleep(Duration::from_millis(20));
                    break;
                }
            }
            if shared.pause_us > 0 {
                std::thread::sleep(Duration::from_micros(rng.below(shared.pause_us)));
            }
        }
        if log.ids > 0 || !log.batches.is_empty() {
            h.conns.push(log);
        }
    }
    h
}
