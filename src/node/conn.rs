//! One connection of the ID protocol, served entirely on the shard that accepted it: the I/O
//! loop. What each request does (decoding, drawing IDs from the shard's issuer, the answer,
//! the counters) is the connection's [`Responder`]'s (`super::responder`); this loop only
//! moves bytes and time.
//!
//! The loop: read what the socket has; let the responder answer every complete request in the
//! buffer into one output buffer (stopping early once [`OUTPUT_HIGH_WATER`] bytes are pending);
//! write the whole output in one call (write coalescing); repeat. A request whose IDs need a
//! later clock reading (its millisecond's slots used up, a small clock step) or its turn in the
//! shard's line of waiting requests is resumed after the wait the generator names, on a timer
//! or a yield: the shard serves its other connections meanwhile, and this connection's answers
//! keep their order. A connection that ends while a request waits gives up its place in line.
//! While a write is blocked on a client that does not read, nothing more is read from it, so a
//! slow reader costs at most the high-water mark plus one maximal answer of memory, never more.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use idgen_protocol::{encode_error, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::issuer::{wait_until, Issuer};
use super::responder::{Next, Responder, OUTPUT_HIGH_WATER};
use super::telemetry::{bump, drop_one, ShardStats};
use crate::config::ListenSection;
use idgen_core::sequence::holder::{HoldError, Holder};
use idgen_core::sequence::SequenceName;
use idgen_id::Layout;

/// First capacity of a connection's input buffer. Idle connections keep this little (10,000
/// of them must fit in well under 100 MiB); a buffer grows, doubling, only when a read fills
/// it, so busy connections still read in large chunks.
const INITIAL_INPUT: usize = 512;
/// Largest read a busy connection grows to.
const MAX_READ: usize = 64 * 1024;
/// Output buffers above this are given back once written (after a huge batch).
const OUTPUT_KEEP: usize = 4 * OUTPUT_HIGH_WATER;

/// What the ID protocol's connections on one shard share.
pub(crate) struct ConnCtx {
    /// The node's `[listen]` section: limits and timeouts of every connection.
    pub listen: ListenSection,
    pub layout: Layout,
    pub gen: Rc<RefCell<Issuer>>,
    pub stats: Arc<ShardStats>,
    pub shutdown: watch::Receiver<bool>,
    /// The node's named sequences (GET_VALUES; their reservations run on the control thread).
    pub sequences: Arc<Holder>,
    /// The `[mask]` keyring, for GET_IDS_WITH's masked option (`None`: off).
    pub mask: Option<Arc<idgen_id::mask::Keyring>>,
    /// Kept answers for idempotency keys, the node's one table (`None`: off).
    pub idempotency: Option<Arc<super::idempotency::Idempotency>>,
    /// How long a GET_IDS_WITH with `after` may wait for the clock (the cluster's max_drift).
    pub max_after_wait: std::time::Duration,
}

/// Answers a connection over the limit with OVERLOADED, then closes it.
pub(crate) async fn refuse_overloaded(mut stream: TcpStream, stats: Arc<ShardStats>) {
    let mut out = BytesMut::new();
    encode_error(
        Status::OVERLOADED,
        "connection limit reached; try another node",
        &mut out,
    );
    stats.error(Status::OVERLOADED);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        let _ = stream.write_all(&out).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Writes `out` and flushes it (a TLS stream may hold records back until flushed; a TCP
/// stream's flush does nothing).
async fn write_out<S: AsyncWrite + Unpin>(stream: &mut S, out: &[u8]) -> std::io::Result<()> {
    stream.write_all(out).await?;
    stream.flush().await
}

/// Writes `out` as [`write_out`] does, within `limit`. False if the write failed or did not end
/// in time. A write the socket takes at once (nearly all of them) arms no timer.
async fn write_within<S: AsyncWrite + Unpin>(stream: &mut S, out: &[u8], limit: Duration) -> bool {
    let mut write = std::pin::pin!(write_out(stream, out));
    let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(written) => written.is_ok(),
        // Boxed: the timer is rare, and this way it takes no room in every connection.
        Poll::Pending => matches!(
            Box::pin(tokio::time::timeout(limit, write)).await,
            Ok(Ok(()))
        ),
    }
}

/// Ends when the node starts draining (or its shutdown signal is gone).
async fn until_draining(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|draining| *draining).await;
}

struct Conn {
    ctx: Rc<ConnCtx>,
    inbuf: BytesMut,
    out: BytesMut,
    /// Room offered to the next read: doubles (to `MAX_READ`) when a read fills it.
    read_size: usize,
    /// What the requests read do.
    responder: Responder,
}

/// Serves one ID-protocol connection, plaintext or TLS (the caller set `TCP_NODELAY`).
pub(crate) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, ctx: Rc<ConnCtx>) {
    let stats = Arc::clone(&ctx.stats);
    bump(&stats.connections_open, 1);
    let mut conn = Conn {
        responder: Responder::new(Rc::clone(&ctx)),
        ctx,
        inbuf: BytesMut::with_capacity(INITIAL_INPUT),
        // Allocated by the first answer, sized by what it needs.
        out: BytesMut::new(),
        read_size: INITIAL_INPUT,
    };
    conn.run(&mut stream).await;
    drop_one(&stats.connections_open);
}

impl Conn {
    async fn run<S: AsyncRead + AsyncWrite + Unpin>(&mut self, stream: &mut S) {
        let listen = self.ctx.listen;
        let shutdown = self.ctx.shutdown.clone();
        let opened = Instant::now();
        let mut last_request = opened;
        let mut read_at = opened;
        let mut draining = *shutdown.borrow();
        // One future and one timer for the connection's life, not one of each per read: the
        // drain signal stays registered, and the timer is moved only when the deadline comes
        // earlier than it is set for or it fires before the deadline (a request came since).
        let drain = until_draining(shutdown);
        tokio::pin!(drain);
        let timer = tokio::time::sleep_until((opened + listen.handshake_timeout).into());
        tokio::pin!(timer);
        loop {
            let before = self.responder.answered();
            let next = self.responder.answer(&mut self.inbuf, &mut self.out);
            if let Next::Wait(at) = next {
                // The answer in progress is not written before it is whole.
                wait_until(&self.ctx.gen, at).await;
                continue;
            }
            if next == Next::Values {
                // What was answered before them goes out first; then their values.
                if self.responder.answered() > before {
                    last_request = read_at;
                }
                if !self.flush(stream, read_at).await {
                    return;
                }
                self.values().await;
                continue;
            }
            if self.responder.answered() > before {
                // The requests arrived with the last read: no extra clock read.
                last_request = read_at;
            }
            if !self.flush(stream, read_at).await {
                return;
            }
            match next {
                Next::Close => {
                    let _ = stream.shutdown().await;
                    return;
                }
                Next::More => continue,
                Next::Read | Next::Wait(_) | Next::Values => {}
            }
            if draining {
                self.finish_draining(stream).await;
                return;
            }
            let deadline = if self.responder.greeted() {
                last_request + listen.idle_timeout
            } else {
                opened + listen.handshake_timeout
            };
            if deadline < timer.deadline().into_std() {
                timer.as_mut().reset(deadline.into());
            }
            self.inbuf.reserve(self.read_size);
            let offered = self.inbuf.capacity() - self.inbuf.len();
            tokio::select! {
                biased;
                () = &mut drain, if !draining => draining = true,
                read = stream.read_buf(&mut self.inbuf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        read_at = Instant::now();
                        if n == offered {
                            // A busy connection: offer more room next time.
                            self.read_size = (self.read_size * 2).min(MAX_READ);
                        }
                    }
                },
                () = &mut timer => {
                    if deadline <= timer.deadline().into_std() {
                        // Handshake or idle timeout: close without an ERROR frame (PROTOCOL.md
                        // §9).
                        return;
                    }
                    timer.as_mut().reset(deadline.into());
                }
            }
        }
    }

    /// Asks the node's holder for the values of the GET_VALUES requests waiting, within the
    /// request timeout, and answers them.
    async fn values(&mut self) {
        let Some(call) = self.responder.values_call() else {
            return;
        };
        let counts = call.counts.clone();
        // The wire's name rule is the store's: this parse cannot fail on a decoded name.
        let here = call.here;
        let timeout = self.ctx.listen.http_request_timeout;
        let got = match call.name.as_str().parse::<SequenceName>() {
            Ok(name) if here => {
                self.ctx
                    .sequences
                    .next_values_each_here(&name, &counts, timeout)
                    .await
            }
            Ok(name) => {
                self.ctx
                    .sequences
                    .next_values_each(&name, &counts, timeout)
                    .await
            }
            Err(e) => counts
                .iter()
                .map(|_| Err(HoldError::Sequence(e.clone())))
                .collect(),
        };
        self.responder.values_answered(got, &mut self.out);
    }

    /// On shutdown: everything already read has been answered; answer the next request, if one
    /// has arrived, with SHUTTING_DOWN, then close.
    async fn finish_draining<S: AsyncRead + AsyncWrite + Unpin>(&mut self, stream: &mut S) {
        // Whatever has arrived, without waiting for more.
        let _ = tokio::time::timeout(Duration::ZERO, stream.read_buf(&mut self.inbuf)).await;
        if self.responder.answer_draining(&self.inbuf, &mut self.out) {
            let _ =
                tokio::time::timeout(self.ctx.listen.write_timeout, write_out(stream, &self.out))
                    .await;
        }
        let _ = stream.shutdown().await;
    }

    /// Writes the pending output in one call. False if the connection is gone or the client
    /// stopped reading for longer than the write timeout.
    async fn flush<S: AsyncWrite + Unpin>(&mut self, stream: &mut S, read_at: Instant) -> bool {
        if self.out.is_empty() {
            return true;
        }
        if !write_within(stream, &self.out, self.ctx.listen.write_timeout).await {
            return false;
        }
        self.out.clear();
        if self.out.capacity() > OUTPUT_KEEP {
            // A huge batch grew the buffer: give the memory back.
            self.out = BytesMut::new();
        }
        let us = u64::try_from(read_at.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.responder.written(us);
        true
    }
}
