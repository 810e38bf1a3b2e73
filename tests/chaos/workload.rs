//! The workload: client threads on a non-panicking client that record every answer.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idgen_protocol::client::Handshake;
use idgen_protocol::ServerHello;
use idgen_testkit::{TestConn, Timeouts};

use crate::history::{ConnLog, ErrRec, History, Shared};
use crate::Rng;

/// The kit's connection, speaking version 1, with short limits (a fault must not stall a
/// client thread).
pub(crate) fn connect(addr: SocketAddr) -> Result<(TestConn, ServerHello), String> {
    let timeouts = Timeouts {
        connect: Duration::from_millis(500),
        io: Duration::from_millis(1000),
    };
    let c = TestConn::try_open(addr, Handshake::offering(1, 1), timeouts)?;
    let hello = *c.hello();
    Ok((c, hello))
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
        let (mut c, hello) = match connect(addr) {
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
            match c.try_get_ids(n) {
                Ok(Ok(ids)) => {
                    let at = Instant::now();
                    if ids.len() != n as usize {
                        err(&mut h, format!("asked {n} IDs, got {}", ids.len()));
                    }
                    log.push(at, ids);
                }
                Ok(Err((status, message))) => {
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
