//! The floor beneath idgen's request path, for `scripts/bench`: a bare responder of the same
//! frames on the same I/O as one shard of a node (a current-thread tokio runtime, a task per
//! connection, each read's answers written in one write), with no generator, clock, lease or
//! accounting: GET_IDS, GET_RANGES, GET_VALUES (any name, as one dense sequence) and GET_UUIDS
//! (the counter's IDs as version 7 UUIDs, random bits 0) are answered from a counter, HELLO
//! with a fixed layout.
//! What idgen costs above it is idgen's; what it costs itself is the kernel's and tokio's.
//!
//! ```text
//! idgen-bare-responder [HOST:PORT]      (default 127.0.0.1:0; prints "listening on ADDR")
//! ```

use std::cell::Cell;
use std::io::Write;
use std::rc::Rc;

use bytes::{Buf, BytesMut};
use idgen_protocol::{
    decode_request_for, encode_error, encode_hello_ok, encode_ids_header, encode_pong,
    encode_ranges, encode_uuids_header, encode_values_header, negotiate_version, Decoded, Limits,
    Request, SeqMode, ServerHello, Status,
};
use idgen_protocol::{Layout, WorkerRange};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind(&addr).await?;
        println!("listening on {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        let next = Rc::new(Cell::new(1u64));
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            tokio::task::spawn_local(serve(stream, Rc::clone(&next)));
        }
    })
}

/// Serves one connection until it closes or sends a malformed frame.
async fn serve(mut stream: TcpStream, next: Rc<Cell<u64>>) {
    let limits = Limits::default();
    let layout = Layout::default();
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    let mut wbuf = BytesMut::with_capacity(64 * 1024);
    // The negotiated version (1 until HELLO): version 2 adds GET_RANGES, 3 GET_VALUES, 4
    // GET_UUIDS.
    let mut negotiated = 1;
    loop {
        match stream.read_buf(&mut rbuf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            let (decoded, used) = match decode_request_for(&rbuf, &limits, negotiated) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => return,
            };
            rbuf.advance(used);
            match decoded {
                Decoded::Request(Request::Hello {
                    min_version,
                    max_version,
                }) => {
                    let Some(version) = negotiate_version(min_version, max_version) else {
                        encode_error(Status::UNSUPPORTED_VERSION, "no common version", &mut wbuf);
                        let _ = stream.write_all(&wbuf).await;
                        return;
                    };
                    negotiated = version;
                    let hello = ServerHello {
                        version,
                        epoch_ms: layout.epoch_ms(),
                        timestamp_bits: layout.timestamp_bits(),
                        worker_bits: layout.worker_bits(),
                        sequence_bits: layout.sequence_bits(),
                        region_bits: layout.region_bits(),
                        max_batch: limits.max_batch,
                        max_request_frame: limits.max_request_frame,
                        workers: WorkerRange::new(0, 1),
                        shard: 0,
                    };
                    if encode_hello_ok(&hello, &mut wbuf).is_err() {
                        return;
                    }
                }
                Decoded::Request(Request::GetIds { count }) => {
                    let first = next.get();
                    next.set(first + u64::from(count));
                    encode_ids_header(count, &mut wbuf);
                    // One pass the compiler vectorizes: the floor for batches too.
                    let start = wbuf.len();
                    wbuf.resize(start + 8 * count as usize, 0);
                    for (id, out) in (first..).zip(wbuf[start..].chunks_exact_mut(8)) {
                        out.copy_from_slice(&id.to_be_bytes());
                    }
                }
                Decoded::Request(Request::GetRanges { count }) => {
                    let first = next.get();
                    next.set(first + u64::from(count));
                    encode_ranges(&[(first, count)], &mut wbuf);
                }
                Decoded::Request(Request::Ping { token }) => encode_pong(token, &mut wbuf),
                // Any name: one counter, from 1, as a dense sequence (the floor of GET_VALUES).
                Decoded::Request(
                    Request::GetValues { count, .. } | Request::GetValuesHere { count, .. },
                ) => {
                    let first = next.get().max(1);
                    next.set(first + u64::from(count));
                    encode_values_header(SeqMode::Dense, count, &mut wbuf);
                    for v in first..first + u64::from(count) {
                        wbuf.extend_from_slice(&v.to_be_bytes());
                    }
                }
                // The IDs' version 7 UUIDs (the id crate's mapping), with the random bits 0:
                // what a node adds above this (its CSPRNG, its generator) is its own cost.
                Decoded::Request(Request::GetUuids { count }) => {
                    let first = next.get();
                    next.set(first + u64::from(count));
                    encode_uuids_header(count, &mut wbuf);
                    for id in first..first + u64::from(count) {
                        match layout.uuid_v7(id, 0) {
                            Ok(u) => wbuf.extend_from_slice(&u),
                            // The counter would have to pass the layout's time range first.
                            Err(_) => return,
                        }
                    }
                }
                // Plain IDs whatever the options: the floor a node's options add to.
                Decoded::Request(Request::GetIdsWith(o)) if !o.masked => {
                    let first = next.get();
                    next.set(first + u64::from(o.count));
                    encode_ids_header(o.count, &mut wbuf);
                    for id in first..first + u64::from(o.count) {
                        wbuf.extend_from_slice(&id.to_be_bytes());
                    }
                }
                Decoded::Request(Request::GetIdsWith(_)) => encode_error(
                    Status::INVALID_OPTION,
                    "the bare responder has no masking keys",
                    &mut wbuf,
                ),
                Decoded::Reject { status, message } => encode_error(status, message, &mut wbuf),
            }
        }
        if !wbuf.is_empty() {
            if stream.write_all(&wbuf).await.is_err() {
                return;
            }
            wbuf.clear();
        }
    }
}
