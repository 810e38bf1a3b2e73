//! The async client: one TCP connection, a writer task and a reader task.
//!
//! Callers hand a [`Command`] to the writer through an mpsc channel. The writer encodes
//! every command queued at that moment into one buffer, appends one [`Pending`] entry per
//! command to the shared in-order queue (before the bytes reach the socket, so an answer
//! can never overtake its entry), and writes the buffer with one `write_all`. The reader
//! decodes answers and hands each to the oldest pending entry; a command that was split
//! into several GET_IDS frames consumes that many answers. Any transport or protocol
//! failure fails every pending entry, marks the connection closed, and stops both tasks.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use idgen_protocol::{
    decode_response, encode_request, max_response_frame, Request, ResponseRef, ServerHello,
    MAX_SUPPORTED_VERSION, MIN_SUPPORTED_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::{Error, Layout};

/// Commands queued to the writer at most (callers wait for room beyond this, within their
/// request timeout).
const COMMAND_QUEUE: usize = 1024;
/// The writer stops coalescing queued commands into one write at about this many bytes.
const MAX_COALESCED_WRITE: usize = 64 * 1024;
/// Initial size of the read buffer.
const READ_BUFFER: usize = 64 * 1024;

/// Connection settings for [`Client::connect_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    /// Limit for the TCP connect plus the HELLO handshake. Default 1 s.
    pub connect_timeout: Duration,
    /// Limit for one call (`next_id`, `next_ids`, `ping`) from the moment it is made,
    /// queueing included. Default 5 s.
    pub request_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// An async idgen client over one TCP connection.
///
/// `Client` is cheap to clone (an [`Arc`]); all clones share the connection, and their
/// requests are pipelined on it. Requests are answered in the order they are sent, and
/// the IDs one connection hands out are strictly increasing, so the IDs each caller
/// receives are increasing too.
///
/// The connection's background tasks run on the Tokio runtime that
/// [`connect`](Client::connect) was called on (either flavour). They stop, and the
/// connection closes, when the last clone is dropped or the connection fails. A client
/// does not reconnect: after a failure every call returns [`Error::Closed`]; make a new
/// client (to this node or another one).
#[derive(Debug, Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    hello: ServerHello,
    layout: Layout,
    options: ClientOptions,
    commands: mpsc::Sender<Command>,
    conn: Arc<Conn>,
    next_token: AtomicU64,
}

/// State shared by the callers, the writer and the reader.
#[derive(Debug)]
struct Conn {
    /// Fast-path mirror of `queue.closed.is_some()`.
    closed: AtomicBool,
    queue: Mutex<Queue>,
    stop_reader: Notify,
    stop_writer: Notify,
}

#[derive(Debug, Default)]
struct Queue {
    /// Set once, when the connection fails.
    closed: Option<Error>,
    pending: VecDeque<Pending>,
}

#[derive(Debug)]
enum Command {
    Ids {
        count: u32,
        reply: oneshot::Sender<Result<Vec<u64>, Error>>,
    },
    Ping {
        token: u64,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

/// One command waiting for its answers.
#[derive(Debug)]
enum Pending {
    Ids {
        /// IDs still to come, over all parts.
        remaining: u32,
        /// Largest part (the server's `max_batch`); parts are full except the last.
        batch: u32,
        ids: Vec<u64>,
        /// The first error among the parts; the caller gets it instead of the IDs.
        failed: Option<Error>,
        reply: oneshot::Sender<Result<Vec<u64>, Error>>,
    },
    Ping {
        token: u64,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

impl Pending {
    fn fail(self, e: Error) {
        match self {
            Pending::Ids { reply, .. } => drop(reply.send(Err(e))),
            Pending::Ping { reply, .. } => drop(reply.send(Err(e))),
        }
    }
}

impl Conn {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock cannot leave the queue inconsistent in a way
        // that matters more than losing the connection; keep going.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mark the connection failed and fail every pending entry with `cause`.
    fn fail(&self, queue: &mut Queue, cause: Error) {
        if queue.closed.is_none() {
            queue.closed = Some(cause.clone());
        }
        self.closed.store(true, Ordering::Release);
        for p in queue.pending.drain(..) {
            p.fail(cause.clone());
        }
        self.stop_reader.notify_one();
        self.stop_writer.notify_one();
    }
}

impl Client {
    /// Connect to `addr` with default [`ClientOptions`], and do the HELLO handshake.
    ///
    /// Must be called within a Tokio runtime (with I/O and time enabled); the
    /// connection's tasks are spawned on it.
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Client, Error> {
        Self::connect_with(addr, ClientOptions::default()).await
    }

    /// Connect to `addr` with `options`, and do the HELLO handshake.
    ///
    /// Each address `addr` resolves to is tried in turn; `connect_timeout` bounds the
    /// whole connect and handshake. Fails with [`Error::Timeout`], [`Error::Io`],
    /// [`Error::Server`] (e.g. `OVERLOADED` or `UNSUPPORTED_VERSION`),
    /// [`Error::Protocol`] or [`Error::UnexpectedResponse`].
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        options: ClientOptions,
    ) -> Result<Client, Error> {
        let (stream, hello, leftover) = tokio::time::timeout(options.connect_timeout, open(addr))
            .await
            .map_err(|_| Error::Timeout)??;
        // Every decoded HELLO_OK has a valid layout; checked again rather than assumed.
        let layout = hello.layout()?;
        let (read, write) = stream.into_split();
        let conn = Arc::new(Conn {
            closed: AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            stop_reader: Notify::new(),
            stop_writer: Notify::new(),
        });
        let (commands, rx) = mpsc::channel(COMMAND_QUEUE);
        // Protocol version 2 answers batches as runs of consecutive IDs (RANGES): a few bytes
        // for thousands of IDs, expanded here.
        let ranges = hello.version >= 2;
        tokio::spawn(write_loop(
            write,
            rx,
            conn.clone(),
            hello.max_batch.max(1),
            ranges,
        ));
        tokio::spawn(read_loop(
            read,
            leftover,
            conn.clone(),
            max_response_frame(hello.max_batch),
        ));
        Ok(Client {
            shared: Arc::new(Shared {
                hello,
                layout,
                options,
                commands,
                conn,
                next_token: AtomicU64::new(1),
            }),
        })
    }

    /// One ID.
    pub async fn next_id(&self) -> Result<u64, Error> {
        let ids = self.next_ids(1).await?;
        ids.first().copied().ok_or_else(|| {
            // Unreachable: next_ids checks the count.
            Error::UnexpectedResponse("no ID in a one-ID answer".into())
        })
    }

    /// `n` IDs, strictly increasing, all or nothing.
    ///
    /// A count above the server's `max_batch` is sent as several GET_IDS requests, one
    /// right behind the other, and the answers are joined in order; if any part fails,
    /// the call fails and the IDs of the other parts are discarded (an unused ID is
    /// never handed out again, so nothing can collide). `n == 0` returns an empty vector
    /// without asking the server.
    pub async fn next_ids(&self, n: u32) -> Result<Vec<u64>, Error> {
        if n == 0 {
            return Ok(Vec::new());
        }
        self.call(|reply| Command::Ids { count: n, reply }).await
    }

    /// Send a PING and wait for its PONG; returns the round-trip time, measured from the
    /// call (queueing behind other requests included).
    pub async fn ping(&self) -> Result<Duration, Error> {
        let start = Instant::now();
        let token = self.shared.next_token.fetch_add(1, Ordering::Relaxed);
        self.call(|reply| Command::Ping { token, reply }).await?;
        Ok(start.elapsed())
    }

    /// The server's HELLO_OK: negotiated version, layout and this connection's limits.
    pub fn hello(&self) -> &ServerHello {
        &self.shared.hello
    }

    /// The ID layout announced by the server, for taking IDs apart.
    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// The options this client was connected with.
    pub fn options(&self) -> &ClientOptions {
        &self.shared.options
    }

    /// Whether the connection has failed (every later call returns [`Error::Closed`]).
    pub fn is_closed(&self) -> bool {
        self.shared.conn.closed.load(Ordering::Acquire)
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, Error>>) -> Command,
    ) -> Result<T, Error> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let (reply, answer) = oneshot::channel();
        let command = make(reply);
        let exchange = async {
            self.shared
                .commands
                .send(command)
                .await
                .map_err(|_| Error::Closed)?;
            // A dropped sender means the writer stopped before taking the command.
            answer.await.unwrap_or(Err(Error::Closed))
        };
        tokio::time::timeout(self.shared.options.request_timeout, exchange)
            .await
            .unwrap_or(Err(Error::Timeout))
    }
}

/// Connect (trying every resolved address), set TCP_NODELAY, and do the handshake.
/// Returns the stream, the HELLO_OK and any bytes read past it.
async fn open(addr: impl ToSocketAddrs) -> Result<(TcpStream, ServerHello, BytesMut), Error> {
    let mut last: Option<std::io::Error> = None;
    let mut stream = None;
    for a in tokio::net::lookup_host(addr).await? {
        match connect_one(a).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = stream.ok_or_else(|| {
        last.unwrap_or_else(|| std::io::Error::other("address resolved to no socket address"))
    })?;

    let mut hello_frame = Vec::with_capacity(13);
    encode_request(
        &Request::Hello {
            min_version: MIN_SUPPORTED_VERSION,
            max_version: MAX_SUPPORTED_VERSION,
        },
        &mut hello_frame,
    );
    stream.write_all(&hello_frame).await?;

    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    loop {
        // Before HELLO_OK only HELLO_OK or ERROR may arrive: 258 bytes covers both.
        if let Some((response, used)) = decode_response(&buf, max_response_frame(0))? {
            let hello = match response {
                ResponseRef::HelloOk(h) => h,
                ResponseRef::Error { status, message } => {
                    return Err(Error::Server {
                        status,
                        message: message.to_owned(),
                    })
                }
                other => {
                    return Err(Error::UnexpectedResponse(format!(
                        "{other:?} in answer to HELLO"
                    )))
                }
            };
            if !(MIN_SUPPORTED_VERSION..=MAX_SUPPORTED_VERSION).contains(&hello.version) {
                return Err(Error::UnexpectedResponse(format!(
                    "server picked protocol version {}, offered {MIN_SUPPORTED_VERSION}..={MAX_SUPPORTED_VERSION}",
                    hello.version
                )));
            }
            buf.advance(used);
            return Ok((stream, hello, buf));
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "server closed the connection during the handshake",
            )
            .into());
        }
    }
}

async fn connect_one(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn write_loop(
    mut write: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Command>,
    conn: Arc<Conn>,
    batch: u32,
    ranges: bool,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let first = tokio::select! {
            c = rx.recv() => match c {
                Some(c) => c,
                None => break,
            },
            () = conn.stop_writer.notified() => break,
        };
        buf.clear();
        {
            let mut queue = conn.lock();
            enqueue(first, &mut queue, &mut buf, batch, ranges);
            while buf.len() < MAX_COALESCED_WRITE {
                match rx.try_recv() {
                    Ok(c) => enqueue(c, &mut queue, &mut buf, batch, ranges),
                    Err(_) => break,
                }
            }
        }
        if buf.is_empty() {
            // The connection has failed; these callers were answered with `Closed`.
            break;
        }
        if let Err(e) = write.write_all(&buf).await {
            let mut queue = conn.lock();
            conn.fail(&mut queue, e.into());
            break;
        }
    }
    // Every client is gone or the connection failed: close our side and stop the reader
    // (a no-op if it already stopped). Commands still queued are dropped with `rx`, which
    // answers their callers with `Closed`.
    let _ = write.shutdown().await;
    conn.stop_reader.notify_one();
}

/// Append `command`'s frames to `buf` and its entry to the pending queue, or answer it
/// with `Closed` if the connection has failed.
fn enqueue(command: Command, queue: &mut Queue, buf: &mut Vec<u8>, batch: u32, ranges: bool) {
    if queue.closed.is_some() {
        match command {
            Command::Ids { reply, .. } => drop(reply.send(Err(Error::Closed))),
            Command::Ping { reply, .. } => drop(reply.send(Err(Error::Closed))),
        }
        return;
    }
    match command {
        Command::Ids { count, reply } => {
            let mut left = count;
            while left > 0 {
                let part = left.min(batch);
                let request = if ranges {
                    Request::GetRanges { count: part }
                } else {
                    Request::GetIds { count: part }
                };
                encode_request(&request, buf);
                left -= part;
            }
            queue.pending.push_back(Pending::Ids {
                remaining: count,
                batch,
                ids: Vec::with_capacity(count.min(1 << 20) as usize),
                failed: None,
                reply,
            });
        }
        Command::Ping { token, reply } => {
            encode_request(&Request::Ping { token }, buf);
            queue.pending.push_back(Pending::Ping { token, reply });
        }
    }
}

async fn read_loop(mut read: OwnedReadHalf, mut buf: BytesMut, conn: Arc<Conn>, max_frame: u32) {
    if buf.capacity() < READ_BUFFER {
        buf.reserve(READ_BUFFER - buf.len());
    }
    loop {
        // Answer everything complete in the buffer under one lock.
        {
            let mut queue = conn.lock();
            if queue.closed.is_some() {
                break;
            }
            loop {
                match decode_response(&buf, max_frame) {
                    Ok(None) => break,
                    Ok(Some((response, used))) => {
                        let outcome = answer(&mut queue, response);
                        buf.advance(used);
                        if let Err(cause) = outcome {
                            conn.fail(&mut queue, cause);
                            return;
                        }
                    }
                    Err(e) => {
                        conn.fail(&mut queue, Error::Protocol(e));
                        return;
                    }
                }
            }
        }
        // Make room for the frame in progress (up to max_frame, checked by the decoder).
        if let Some(&[a, b, c, d]) = buf.get(..4) {
            let total = 4 + u32::from_be_bytes([a, b, c, d]) as usize;
            buf.reserve(total.saturating_sub(buf.len()));
        }
        let read_result = tokio::select! {
            r = read.read_buf(&mut buf) => r,
            () = conn.stop_reader.notified() => break,
        };
        let cause = match read_result {
            Ok(0) => std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                if buf.is_empty() {
                    "server closed the connection"
                } else {
                    "server closed the connection in the middle of a frame"
                },
            )
            .into(),
            Ok(_) => continue,
            Err(e) => e.into(),
        };
        let mut queue = conn.lock();
        conn.fail(&mut queue, cause);
        break;
    }
}

/// Hand one answer to the oldest pending entry. `Err` is a reason to drop the
/// connection (every pending entry gets it).
fn answer(queue: &mut Queue, response: ResponseRef<'_>) -> Result<(), Error> {
    let Some(front) = queue.pending.front_mut() else {
        return Err(Error::UnexpectedResponse(format!(
            "{response:?} with no request outstanding"
        )));
    };
    // A closing ERROR answers its own request and ends the connection; the requests behind
    // it stay unanswered and get the same error (for SHUTTING_DOWN: retry elsewhere).
    let mut closing = None;
    let done = match (front, response) {
        (
            Pending::Ids {
                remaining,
                batch,
                ids,
                failed,
                reply,
            },
            response,
        ) => {
            let part = (*remaining).min(*batch);
            match response {
                ResponseRef::Ids(got) if got.len() == part as usize => {
                    // Skip the copy when the caller has given up (timed out).
                    if failed.is_none() && !reply.is_closed() {
                        ids.extend(got.iter());
                    }
                }
                ResponseRef::Ranges(runs) if runs.total() == part => {
                    if failed.is_none() && !reply.is_closed() {
                        runs.expand_into(ids);
                    }
                }
                ResponseRef::Error { status, message } => {
                    let e = Error::Server {
                        status,
                        message: message.to_owned(),
                    };
                    if status.closes_connection() {
                        closing = Some(e.clone());
                    }
                    failed.get_or_insert(e);
                }
                other => {
                    return Err(Error::UnexpectedResponse(format!(
                        "{other:?} in answer to GET_IDS of {part}"
                    )))
                }
            }
            *remaining -= part;
            *remaining == 0 || closing.is_some()
        }
        (Pending::Ping { token, .. }, response) => match response {
            ResponseRef::Pong(t) if t == *token => true,
            ResponseRef::Error { status, message } => {
                if status.closes_connection() {
                    closing = Some(Error::Server {
                        status,
                        message: message.to_owned(),
                    });
                }
                true
            }
            other => {
                return Err(Error::UnexpectedResponse(format!(
                    "{other:?} in answer to PING {token}"
                )))
            }
        },
    };
    if done {
        if let Some(entry) = queue.pending.pop_front() {
            finish(entry, response);
        }
    }
    match closing {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Answer a completed entry.
fn finish(entry: Pending, last: ResponseRef<'_>) {
    match entry {
        Pending::Ids {
            ids, failed, reply, ..
        } => {
            let _ = reply.send(match failed {
                Some(e) => Err(e),
                None => Ok(ids),
            });
        }
        Pending::Ping { reply, .. } => {
            let _ = reply.send(match last {
                ResponseRef::Error { status, message } => Err(Error::Server {
                    status,
                    message: message.to_owned(),
                }),
                _ => Ok(()),
            });
        }
    }
}
