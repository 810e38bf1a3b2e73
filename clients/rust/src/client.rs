//! The async client: one TCP (or TLS) connection, a writer task and a reader task.
//!
//! The protocol itself (the handshake, which answer belongs to which request, and what an
//! ERROR means for the connection) is `idgen_protocol::client`'s; this module is the I/O
//! around it. Callers hand a [`Command`] to the writer through an mpsc channel. The writer
//! encodes every command queued at that moment into one buffer through the shared
//! [`ClientConn`], appends one [`Pending`] entry per command to the shared in-order queue
//! (before the bytes reach the socket, so an answer can never overtake its entry), and
//! writes the buffer with one `write_all`. The reader decodes answers with the same
//! `ClientConn` and hands each to the oldest pending entry; a command that was split into
//! several GET_IDS frames consumes that many answers. Any transport or protocol failure
//! fails every pending entry, marks the connection closed, and stops both tasks.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use idgen_id::Layout;
use idgen_protocol::client::{Answer, ClientConn, ClientError, Handshake, HandshakeError};
use idgen_protocol::{IdsOptions, SeqName, ServerHello};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::sequence::{self, Fetched, Prefetch, VALUES_VERSION};
use crate::Error;
#[cfg(feature = "tls")]
use crate::TlsConfig;

/// Commands queued to the writer at most (callers wait for room beyond this, within their
/// request timeout).
const COMMAND_QUEUE: usize = 1024;
/// The writer stops coalescing queued commands into one write at about this many bytes.
const MAX_COALESCED_WRITE: usize = 64 * 1024;
/// Initial size of the read buffer.
const READ_BUFFER: usize = 64 * 1024;
/// After the HELLO could not be sent on a TLS stream: how long to wait for the alert that
/// says why.
const ALERT_WAIT: Duration = Duration::from_millis(200);

/// Connection settings for [`Client::connect_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    /// Limit for the TCP connect (every address the host name resolves to, each attempt
    /// given at most an even share of the time left), the TLS handshake and the HELLO
    /// handshake together. Default 1 s.
    pub connect_timeout: Duration,
    /// Limit for one call (`next_id`, `next_ids`, `next_value`, `next_values`, `ping`) from
    /// the moment it is made, queueing included. Default 5 s.
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
    /// Prefetch buffers of dense sequences ([`Client::with_sequence_prefetch`]); `None`: off.
    sequences: Option<Arc<Prefetch>>,
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

#[derive(Debug)]
struct Queue {
    /// Set once, when the connection fails.
    closed: Option<Error>,
    pending: VecDeque<Pending>,
    /// The protocol's view of the connection: every frame sent and not answered yet.
    protocol: ClientConn,
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
    Values {
        name: SeqName,
        count: u32,
        reply: oneshot::Sender<Result<Fetched, Error>>,
    },
    Uuids {
        count: u32,
        reply: oneshot::Sender<Result<Vec<uuid::Uuid>, Error>>,
    },
    IdsWith {
        options: IdsOptions,
        reply: oneshot::Sender<Result<WithAnswer, Error>>,
    },
}

/// What a GET_IDS_WITH was answered with.
#[derive(Debug)]
enum WithAnswer {
    Ids(Vec<u64>),
    Masked(MaskedIds),
}

/// The protocol version that has GET_UUIDS.
pub(crate) const UUIDS_VERSION: u16 = 4;
/// The protocol version that has GET_IDS_WITH: `after`, idempotency keys, masked answers.
pub(crate) const WITH_VERSION: u16 = 5;

/// Options of [`Client::next_ids_with`] and [`Client::next_masked_ids`] (protocol version 5:
/// GET_IDS_WITH, `protocol/PROTOCOL.md` §3.8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdOptions {
    /// Every ID answered is greater than this one: an ID the caller has seen, from any node
    /// of the cluster (read-your-writes order for a caller that passes on what it saw). The
    /// node waits, at most its `max_drift`, for its clock to pass that ID's time; beyond that
    /// it answers `UNAVAILABLE_CLOCK` (retry later, or on the node that issued it).
    pub after: Option<u64>,
    /// An idempotency key (1 to 64 visible ASCII characters): on a node with idempotency
    /// keys enabled (`idempotency_window`), the same call with the same key within the
    /// window gets the same IDs again. The scope is that node: retries must go to it (a
    /// [`Pool`](crate::Pool) routes a key to one node by hashing it).
    pub idempotency_key: Option<String>,
}

/// IDs masked by a node (GET_IDS_WITH's masked option): the key ID of the key that masked
/// them and the masked integers, in the order of the IDs (which is not theirs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaskedIds {
    /// The key ID (`0..=61`): the first character of the string forms.
    pub key_id: u8,
    /// The masked integers.
    pub ids: Vec<u64>,
}

impl MaskedIds {
    /// The 12-character string forms (`clients/vectors/MASK.md`): the key ID's character and
    /// the value in 11 base62 digits.
    pub fn strings(&self) -> Vec<String> {
        self.ids
            .iter()
            .filter_map(|&m| idgen_id::mask::masked_str(self.key_id, m))
            .collect()
    }
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
    Values {
        /// The answer, once its VALUES has arrived.
        got: Option<Fetched>,
        reply: oneshot::Sender<Result<Fetched, Error>>,
    },
    Uuids {
        /// UUIDs still to come, over all parts.
        remaining: u32,
        /// Largest part (the server's `max_batch`); parts are full except the last.
        batch: u32,
        uuids: Vec<uuid::Uuid>,
        /// The first error among the parts; the caller gets it instead of the UUIDs.
        failed: Option<Error>,
        reply: oneshot::Sender<Result<Vec<uuid::Uuid>, Error>>,
    },
    IdsWith {
        /// The answer, once its IDS or MASKED_IDS has arrived.
        got: Option<WithAnswer>,
        reply: oneshot::Sender<Result<WithAnswer, Error>>,
    },
}

impl Pending {
    fn fail(self, e: Error) {
        match self {
            Pending::Ids { reply, .. } => drop(reply.send(Err(e))),
            Pending::Ping { reply, .. } => drop(reply.send(Err(e))),
            Pending::Values { reply, .. } => drop(reply.send(Err(e))),
            Pending::Uuids { reply, .. } => drop(reply.send(Err(e))),
            Pending::IdsWith { reply, .. } => drop(reply.send(Err(e))),
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
    /// Each address `addr` resolves to is tried in turn, until one accepts (a refused one
    /// costs nothing; one that does not answer is left after its share of the time left);
    /// `connect_timeout` bounds the whole connect and handshake. Fails with
    /// [`Error::Timeout`], [`Error::Io`], [`Error::Server`] (e.g. `OVERLOADED` or
    /// `UNSUPPORTED_VERSION`), [`Error::Protocol`] or [`Error::UnexpectedResponse`].
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        options: ClientOptions,
    ) -> Result<Client, Error> {
        let deadline = tokio::time::Instant::now() + options.connect_timeout;
        tokio::time::timeout_at(deadline, async {
            let mut stream = tcp_connect(addr, deadline).await?;
            let (protocol, leftover) = handshake(&mut stream, false).await?;
            let (read, write) = stream.into_split();
            Ok(Client::start(read, write, protocol, leftover, options))
        })
        .await
        .map_err(|_| Error::Timeout)?
    }

    /// Connect to `addr` (`host:port`) over TLS with `tls`, and do the HELLO handshake.
    ///
    /// The node's certificate must chain to `tls`'s CA bundle and name the host part of
    /// `addr` (or `tls`'s server name); see [`TlsConfig`]. `connect_timeout` bounds the TCP
    /// connect, the TLS handshake and the HELLO handshake together. Fails as
    /// [`connect_with`](Client::connect_with) does, and with [`Error::Tls`] when the TLS
    /// handshake fails (its [`kind`](crate::TlsError::kind) says why).
    #[cfg(feature = "tls")]
    pub async fn connect_tls(
        addr: &str,
        options: ClientOptions,
        tls: &TlsConfig,
    ) -> Result<Client, Error> {
        let name = tls.server_name_for(addr)?;
        Self::connect_tls_to(addr, name, options, tls).await
    }

    /// [`connect_tls`](Client::connect_tls) with the server name given.
    #[cfg(feature = "tls")]
    pub(crate) async fn connect_tls_to(
        addr: impl ToSocketAddrs,
        name: rustls::pki_types::ServerName<'static>,
        options: ClientOptions,
        tls: &TlsConfig,
    ) -> Result<Client, Error> {
        let connector = tls.connector().clone();
        let deadline = tokio::time::Instant::now() + options.connect_timeout;
        tokio::time::timeout_at(deadline, async {
            let tcp = tcp_connect(addr, deadline).await?;
            // A failed handshake is an I/O error carrying the rustls error: `Error::Tls`.
            let mut stream = connector.connect(name, tcp).await?;
            let (protocol, leftover) = handshake(&mut stream, true).await?;
            let (read, write) = tokio::io::split(stream);
            Ok(Client::start(read, write, protocol, leftover, options))
        })
        .await
        .map_err(|_| Error::Timeout)?
    }

    /// Start the connection's reader and writer tasks on a handshaken stream.
    fn start<R, W>(
        read: R,
        write: W,
        protocol: ClientConn,
        leftover: BytesMut,
        options: ClientOptions,
    ) -> Client
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let hello = *protocol.hello();
        let layout = protocol.layout();
        // Protocol version 2 answers batches as runs of consecutive IDs (RANGES): a few bytes
        // for thousands of IDs, expanded here.
        let ranges = protocol.ranges();
        let conn = Arc::new(Conn {
            closed: AtomicBool::new(false),
            queue: Mutex::new(Queue {
                closed: None,
                pending: VecDeque::new(),
                protocol,
            }),
            stop_reader: Notify::new(),
            stop_writer: Notify::new(),
        });
        let (commands, rx) = mpsc::channel(COMMAND_QUEUE);
        tokio::spawn(write_loop(
            write,
            rx,
            conn.clone(),
            hello.max_batch.max(1),
            ranges,
        ));
        tokio::spawn(read_loop(read, leftover, conn.clone()));
        Client {
            shared: Arc::new(Shared {
                hello,
                layout,
                options,
                commands,
                conn,
                next_token: AtomicU64::new(1),
            }),
            sequences: None,
        }
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
    /// never handed out again, so nothing can collide). `n == 0` is
    /// [`Error::InvalidArgument`], nothing sent (as in every idgen client).
    pub async fn next_ids(&self, n: u32) -> Result<Vec<u64>, Error> {
        check_id_count(n)?;
        self.call(|reply| Command::Ids { count: n, reply }).await
    }

    /// `n` IDs with [`IdOptions`] (protocol version 5: one GET_IDS_WITH), strictly increasing,
    /// all or nothing. `n` must be `1..=max_batch` (a call with options is one request, never
    /// split: an idempotency key names one answer), and the key 1 to 64 visible ASCII
    /// characters, else [`Error::InvalidArgument`]; a node that negotiated a version below 5
    /// is [`Error::NodeVersion`]; nothing is sent in those cases. The node's refusals are
    /// [`Error::Server`]: `UNAVAILABLE_CLOCK` for an `after` too far ahead of its clock,
    /// `INVALID_OPTION` for one that is no ID of the cluster or a key on a node without keys,
    /// `IDEMPOTENCY_KEY_REUSED` for a key that came with another request,
    /// `IDEMPOTENCY_KEY_IN_FLIGHT` while its first request is answered.
    pub async fn next_ids_with(&self, n: u32, options: &IdOptions) -> Result<Vec<u64>, Error> {
        let options = self.ids_options(n, options, false)?;
        match self
            .call(|reply| Command::IdsWith { options, reply })
            .await?
        {
            WithAnswer::Ids(ids) => Ok(ids),
            WithAnswer::Masked(_) => Err(Error::UnexpectedResponse(
                "MASKED_IDS in answer to GET_IDS_WITH without the masked option".into(),
            )),
        }
    }

    /// `n` IDs masked by the node with its current masking key (GET_IDS_WITH's masked
    /// option), as [`next_ids_with`](Client::next_ids_with) otherwise: the masked integers
    /// and the key ID, whose string forms [`MaskedIds::strings`] makes. A node without
    /// masking keys refuses with `INVALID_OPTION`.
    pub async fn next_masked_ids(&self, n: u32, options: &IdOptions) -> Result<MaskedIds, Error> {
        let options = self.ids_options(n, options, true)?;
        match self
            .call(|reply| Command::IdsWith { options, reply })
            .await?
        {
            WithAnswer::Masked(m) => Ok(m),
            WithAnswer::Ids(_) => Err(Error::UnexpectedResponse(
                "IDS in answer to GET_IDS_WITH with the masked option".into(),
            )),
        }
    }

    fn ids_options(&self, n: u32, options: &IdOptions, masked: bool) -> Result<IdsOptions, Error> {
        check_id_count(n)?;
        let hello = &self.shared.hello;
        if n > hello.max_batch {
            return Err(Error::InvalidArgument(format!(
                "a call with options is one request: at most the node's max_batch ({}) IDs, not {n}",
                hello.max_batch
            )));
        }
        if hello.version < WITH_VERSION {
            return Err(Error::NodeVersion {
                version: hello.version,
                required: WITH_VERSION,
            });
        }
        if options.after.is_some_and(|a| a >> 63 != 0) {
            return Err(Error::InvalidArgument(
                "after has the sign bit set: not an ID".into(),
            ));
        }
        let key = match &options.idempotency_key {
            None => None,
            Some(k) => Some(
                k.parse::<idgen_protocol::IdemKey>()
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?,
            ),
        };
        Ok(IdsOptions {
            count: n,
            after: options.after,
            key,
            masked,
        })
    }

    /// One version 7 UUID (protocol version 4: GET_UUIDS). See
    /// [`next_uuids`](Client::next_uuids).
    pub async fn next_uuid(&self) -> Result<uuid::Uuid, Error> {
        let uuids = self.next_uuids(1).await?;
        uuids.first().copied().ok_or_else(|| {
            // Unreachable: the answer's count is checked.
            Error::UnexpectedResponse("no UUID in a one-UUID answer".into())
        })
    }

    /// `n` RFC 9562 version 7 UUIDs, strictly increasing, all or nothing (protocol version 4:
    /// GET_UUIDS, answered by UUIDS; `protocol/PROTOCOL.md` §3.7).
    ///
    /// Each is made by the node from one ID it issues: its 48-bit Unix millisecond is the
    /// ID's time, the bits after it the ID's worker and sequence, the rest random. So two
    /// UUIDs of a cluster are equal only if two of its IDs were (the worker leases exclude
    /// it), and the UUIDs of one client's connection increase with its IDs.
    /// [`Layout::decode_uuid_v7`](idgen_id::Layout::decode_uuid_v7) with [`layout`](Client::layout)
    /// takes one apart.
    ///
    /// Like [`next_ids`](Client::next_ids): a count above the node's `max_batch` is sent as
    /// several requests and joined; `n == 0` is [`Error::InvalidArgument`]; a node that
    /// negotiated a version below 4 is [`Error::NodeVersion`]; in both cases nothing is sent.
    pub async fn next_uuids(&self, n: u32) -> Result<Vec<uuid::Uuid>, Error> {
        check_uuid_count(n)?;
        let version = self.shared.hello.version;
        if version < UUIDS_VERSION {
            return Err(Error::NodeVersion {
                version,
                required: UUIDS_VERSION,
            });
        }
        self.call(|reply| Command::Uuids { count: n, reply }).await
    }

    /// The next value of the named sequence (protocol version 3). See
    /// [`next_values`](Client::next_values).
    pub async fn next_value(&self, name: &str) -> Result<u64, Error> {
        let values = self.next_values(name, 1).await?;
        values.first().copied().ok_or_else(|| {
            // Unreachable: the count is checked.
            Error::UnexpectedResponse(format!("no value in a one-value answer for {name}"))
        })
    }

    /// `n` values of the named sequence, strictly increasing, each in `1 ..= 2^63 - 1`
    /// (protocol version 3: GET_VALUES, answered by VALUES).
    ///
    /// Checked before anything is sent: `name` is 1 to 64 bytes of `a-z`, `0-9`, `.`, `_`
    /// and `-` starting with a letter or a digit (and its request fits the node's
    /// `max_request_frame`), and `1 <= n <= max_batch` (the node's, and at most 1048576);
    /// else [`Error::InvalidArgument`]. A node that negotiated version 1
    /// or 2 has no sequences over this protocol: [`Error::NodeVersion`], nothing sent.
    ///
    /// The node's refusals are [`Error::Server`] with the status: `UNKNOWN_SEQUENCE` (the
    /// namespace has no such sequence), `SEQUENCE_USED_UP` (at its maximum; no node can help),
    /// `SEQUENCE_UNAVAILABLE` or `BUSY` (this node could not reserve values in time: another
    /// node, or later, may succeed); the connection stays usable after each. A failed or
    /// timed-out call hands out nothing; a value the node reserved for it is a gap, never
    /// handed out twice.
    ///
    /// Without prefetch every call is one GET_VALUES. With
    /// [`with_sequence_prefetch`](Client::with_sequence_prefetch) calls on dense sequences are
    /// answered from a local buffer.
    pub async fn next_values(&self, name: &str, n: u32) -> Result<Vec<u64>, Error> {
        let name = sequence::check_name(name)?;
        sequence::check_count(n)?;
        self.check_values(name, n)?;
        match &self.sequences {
            None => Ok(self.fetch_values(name, n, n).await?.values),
            Some(prefetch) => {
                // One limit for the whole call: waiting for another call's refill of the same
                // buffer included.
                let call = prefetch.take(name, n, |need, want| self.fetch_values(name, need, want));
                tokio::time::timeout(self.shared.options.request_timeout, call)
                    .await
                    .unwrap_or(Err(Error::Timeout))
            }
        }
    }

    /// A client on the same connection whose calls on **dense** sequences are answered from
    /// per-name buffers of values fetched `k` at a time (`clients/vectors/SEQUENCES.md`);
    /// `k == 0` turns prefetch off. Clones of the returned client share its buffers; other
    /// clients of the connection (this one included) keep theirs.
    ///
    /// * A call is answered from its sequence's buffer while the buffer holds enough values;
    ///   values leave it in increasing order, each to exactly one call. When it cannot answer,
    ///   the call asks the node for `max(k, n)` values (at most the node's `max_batch`), takes
    ///   what it needs and keeps the rest. Calls of one name that need the node wait for one
    ///   another, so `c` calls of one value cost about `c / k` round trips.
    /// * **Only dense sequences are buffered.** The first call for a name asks for exactly
    ///   `n` values and learns the sequence's mode from the answer; a strict sequence's calls
    ///   each ask for exactly what they need, never kept (a kept value would be older than
    ///   the call it answers, breaking strict's real-time order).
    /// * `UNKNOWN_SEQUENCE` empties the name's buffer and forgets its mode. Buffers are kept
    ///   for at most 1024 names, the least recently used forgotten beyond that.
    /// * The cost: values waiting in a buffer are lost when the client is dropped or the
    ///   process stops (gaps, up to `k` per name), and values that two clients hand out
    ///   interleave rather than follow the order of the calls.
    ///
    /// `k` is capped at 1048576.
    pub fn with_sequence_prefetch(&self, k: u32) -> Client {
        Client {
            shared: self.shared.clone(),
            sequences: (k > 0).then(|| Arc::new(Prefetch::new(k))),
        }
    }

    /// The `k` of [`with_sequence_prefetch`](Client::with_sequence_prefetch); 0 when off.
    pub fn sequence_prefetch(&self) -> u32 {
        self.sequences.as_ref().map_or(0, |p| p.k())
    }

    /// Whether the node speaks named sequences and takes a GET_VALUES of `n` values of
    /// `name` (its frame within the node's `max_request_frame`).
    fn check_values(&self, name: SeqName, n: u32) -> Result<(), Error> {
        let hello = &self.shared.hello;
        if hello.version < VALUES_VERSION {
            return Err(Error::NodeVersion {
                version: hello.version,
                required: VALUES_VERSION,
            });
        }
        sequence::check_frame(name, hello.max_request_frame)?;
        sequence::check_batch(n, hello.max_batch)
    }

    /// One GET_VALUES of `name` for at least `need` (checked against the node) and at most
    /// `want` values, as many as the node's `max_batch` allows.
    pub(crate) async fn fetch_values(
        &self,
        name: SeqName,
        need: u32,
        want: u32,
    ) -> Result<Fetched, Error> {
        self.check_values(name, need)?;
        let count = want
            .min(self.shared.hello.max_batch)
            .min(idgen_protocol::MAX_VALUES_PER_CALL)
            .max(need);
        self.call(|reply| Command::Values { name, count, reply })
            .await
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

/// Connect to the first of the addresses `addr` resolves to that accepts, and set
/// TCP_NODELAY.
///
/// The addresses are tried one at a time in the resolver's order (a user's `localhost` may be
/// `::1` then `127.0.0.1` while the node listens on `127.0.0.1` only). A refused address moves
/// on at once; an attempt may use at most an even share of the time left before `deadline`
/// (time left / addresses left), so one address that does not answer cannot use up the time
/// of those behind it. Fails with the last address's error.
async fn tcp_connect(
    addr: impl ToSocketAddrs,
    deadline: tokio::time::Instant,
) -> Result<TcpStream, Error> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr).await?.collect();
    let mut last: Option<Error> = None;
    for (i, a) in addrs.iter().enumerate() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let share = left / u32::try_from(addrs.len() - i).unwrap_or(u32::MAX);
        match tokio::time::timeout(share, connect_one(*a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = Some(e.into()),
            Err(_) => last = Some(Error::Timeout),
        }
    }
    Err(last.unwrap_or_else(|| {
        if addrs.is_empty() {
            std::io::Error::other("address resolved to no socket address").into()
        } else {
            Error::Timeout
        }
    }))
}

/// The HELLO handshake on a connected stream (`tls`: a TLS stream). Returns the
/// connection's protocol state and any bytes read past HELLO_OK.
async fn handshake<S>(stream: &mut S, tls: bool) -> Result<(ClientConn, BytesMut), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handshake = Handshake::new();
    let sent = match stream.write_all(&handshake.hello()).await {
        Ok(()) => stream.flush().await,
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        if tls {
            // With TLS 1.3 a server that refuses the client certificate says so after the
            // handshake and closes; the HELLO may then meet a reset. Its alert says why.
            let mut scratch = BytesMut::with_capacity(4096);
            let read = tokio::time::timeout(ALERT_WAIT, stream.read_buf(&mut scratch)).await;
            if let Ok(Err(read_error)) = read {
                if let tls_error @ Error::Tls(_) = Error::from(read_error) {
                    return Err(tls_error);
                }
            }
        }
        return Err(e.into());
    }
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    loop {
        if let Some((protocol, used)) = handshake.receive(&buf).map_err(handshake_error)? {
            buf.advance(used);
            return Ok((protocol, buf));
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

/// `n` IDs for one call: at least 1, as every idgen client requires (the node would answer
/// `INVALID_COUNT`), or [`Error::InvalidArgument`] before anything is sent.
pub(crate) fn check_id_count(n: u32) -> Result<(), Error> {
    if n == 0 {
        return Err(Error::InvalidArgument(
            "a call asks for at least 1 ID, not 0".into(),
        ));
    }
    Ok(())
}

/// `n == 0` is refused before anything is sent, as for IDs.
pub(crate) fn check_uuid_count(n: u32) -> Result<(), Error> {
    if n == 0 {
        return Err(Error::InvalidArgument(
            "a call asks for at least 1 UUID, not 0".into(),
        ));
    }
    Ok(())
}

fn handshake_error(e: HandshakeError) -> Error {
    match e {
        HandshakeError::Refused {
            status, message, ..
        } => Error::Server { status, message },
        HandshakeError::Frame(e) => Error::Protocol(e),
        other => Error::UnexpectedResponse(other.to_string()),
    }
}

fn answer_error(e: ClientError) -> Error {
    match e {
        ClientError::Frame(e) => Error::Protocol(e),
        other => Error::UnexpectedResponse(other.to_string()),
    }
}

async fn connect_one(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
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
        // `flush` is a no-op on TCP; a TLS stream may hold the last record until flushed.
        let written = match write.write_all(&buf).await {
            Ok(()) => write.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
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
            Command::Values { reply, .. } => drop(reply.send(Err(Error::Closed))),
            Command::Uuids { reply, .. } => drop(reply.send(Err(Error::Closed))),
            Command::IdsWith { reply, .. } => drop(reply.send(Err(Error::Closed))),
        }
        return;
    }
    match command {
        Command::Ids { count, reply } => {
            let mut left = count;
            while left > 0 {
                let part = left.min(batch);
                if ranges {
                    queue.protocol.get_ranges(part, buf);
                } else {
                    queue.protocol.get_ids(part, buf);
                }
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
            queue.protocol.ping(token, buf);
            queue.pending.push_back(Pending::Ping { token, reply });
        }
        Command::Values { name, count, reply } => {
            if !queue.protocol.values() {
                // Checked by the caller already; never send GET_VALUES below version 3.
                let version = queue.protocol.hello().version;
                let _ = reply.send(Err(Error::NodeVersion {
                    version,
                    required: VALUES_VERSION,
                }));
                return;
            }
            queue.protocol.get_values(name, count, buf);
            queue
                .pending
                .push_back(Pending::Values { got: None, reply });
        }
        Command::Uuids { count, reply } => {
            if !queue.protocol.uuids() {
                // Checked by the caller already; never send GET_UUIDS below version 4.
                let version = queue.protocol.hello().version;
                let _ = reply.send(Err(Error::NodeVersion {
                    version,
                    required: UUIDS_VERSION,
                }));
                return;
            }
            let mut left = count;
            while left > 0 {
                let part = left.min(batch);
                queue.protocol.get_uuids(part, buf);
                left -= part;
            }
            queue.pending.push_back(Pending::Uuids {
                remaining: count,
                batch,
                uuids: Vec::with_capacity(count.min(1 << 20) as usize),
                failed: None,
                reply,
            });
        }
        Command::IdsWith { options, reply } => {
            if !queue.protocol.ids_with() {
                // Checked by the caller already; never send GET_IDS_WITH below version 5.
                let version = queue.protocol.hello().version;
                let _ = reply.send(Err(Error::NodeVersion {
                    version,
                    required: WITH_VERSION,
                }));
                return;
            }
            queue.protocol.get_ids_with(options, buf);
            queue
                .pending
                .push_back(Pending::IdsWith { got: None, reply });
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(mut read: R, mut buf: BytesMut, conn: Arc<Conn>) {
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
                match queue.protocol.decode(&buf) {
                    Ok(None) => break,
                    Ok(Some((response, used))) => {
                        let outcome = answer(&mut queue.pending, response);
                        buf.advance(used);
                        if let Err(cause) = outcome {
                            conn.fail(&mut queue, cause);
                            return;
                        }
                    }
                    Err(e) => {
                        conn.fail(&mut queue, answer_error(e));
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

/// Hand one answer (already matched to its frame by the protocol's `ClientConn`) to the
/// oldest pending entry. `Err` is a reason to drop the connection (every pending entry gets
/// it).
fn answer(pending: &mut VecDeque<Pending>, response: Answer<'_>) -> Result<(), Error> {
    let Some(front) = pending.front_mut() else {
        return Err(Error::UnexpectedResponse(format!(
            "{response:?} with no call outstanding"
        )));
    };
    // A closing ERROR answers its own request and ends the connection; the requests behind
    // it stay unanswered and get the same error (for SHUTTING_DOWN: retry elsewhere).
    let mut closing = None;
    let mut refused = None;
    if let Answer::Refused(r) = response {
        let e = Error::Server {
            status: r.status,
            message: r.message.to_owned(),
        };
        if r.after.closes() {
            closing = Some(e.clone());
        }
        refused = Some(e);
    }
    let done = match front {
        Pending::Ids {
            remaining,
            batch,
            ids,
            failed,
            reply,
        } => {
            let part = (*remaining).min(*batch);
            match response {
                Answer::Ids(got) => {
                    // Skip the copy when the caller has given up (timed out).
                    if failed.is_none() && !reply.is_closed() {
                        ids.extend(got.iter());
                    }
                }
                Answer::Ranges(runs) => {
                    if failed.is_none() && !reply.is_closed() {
                        runs.expand_into(ids);
                    }
                }
                Answer::Refused(_) => {
                    if let Some(e) = refused.take() {
                        failed.get_or_insert(e);
                    }
                }
                Answer::Pong(_) | Answer::Values(_) | Answer::Uuids(_) | Answer::MaskedIds(_) => {
                    return Err(Error::UnexpectedResponse(format!(
                        "{response:?} in answer to GET_IDS of {part}"
                    )))
                }
            }
            *remaining -= part;
            *remaining == 0 || closing.is_some()
        }
        Pending::Uuids {
            remaining,
            batch,
            uuids,
            failed,
            reply,
        } => {
            let part = (*remaining).min(*batch);
            match response {
                Answer::Uuids(got) => {
                    // Skip the copy when the caller has given up (timed out).
                    if failed.is_none() && !reply.is_closed() {
                        uuids.extend(got.iter().map(uuid::Uuid::from_bytes));
                    }
                }
                Answer::Refused(_) => {
                    if let Some(e) = refused.take() {
                        failed.get_or_insert(e);
                    }
                }
                _ => {
                    return Err(Error::UnexpectedResponse(format!(
                        "{response:?} in answer to GET_UUIDS of {part}"
                    )))
                }
            }
            *remaining -= part;
            *remaining == 0 || closing.is_some()
        }
        Pending::IdsWith { got, reply } => {
            match response {
                // Skip the copy when the caller has given up (timed out).
                Answer::Ids(ids) if !reply.is_closed() => {
                    *got = Some(WithAnswer::Ids(ids.to_vec()));
                }
                Answer::MaskedIds(m) if !reply.is_closed() => {
                    *got = Some(WithAnswer::Masked(MaskedIds {
                        key_id: m.key_id(),
                        ids: m.ids().to_vec(),
                    }));
                }
                Answer::Ids(_) | Answer::MaskedIds(_) | Answer::Refused(_) => {}
                other => {
                    return Err(Error::UnexpectedResponse(format!(
                        "{other:?} in answer to GET_IDS_WITH"
                    )))
                }
            }
            true
        }
        Pending::Ping { token, .. } => match response {
            Answer::Pong(t) if t == *token => true,
            Answer::Refused(_) => true,
            other => {
                return Err(Error::UnexpectedResponse(format!(
                    "{other:?} in answer to PING {token}"
                )))
            }
        },
        Pending::Values { got, reply } => match response {
            Answer::Values(values) => {
                // Skip the copy when the caller has given up (timed out).
                if !reply.is_closed() {
                    *got = Some(Fetched {
                        mode: values.mode(),
                        values: values.to_vec(),
                    });
                }
                true
            }
            Answer::Refused(_) => true,
            other => {
                return Err(Error::UnexpectedResponse(format!(
                    "{other:?} in answer to GET_VALUES"
                )))
            }
        },
    };
    if done {
        if let Some(entry) = pending.pop_front() {
            finish(entry, refused);
        }
    }
    match closing {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Answer a completed entry; `refused` is the ERROR of its last frame, if it was one.
fn finish(entry: Pending, refused: Option<Error>) {
    match entry {
        Pending::Ids {
            ids, failed, reply, ..
        } => {
            let _ = reply.send(match failed {
                Some(e) => Err(e),
                None => Ok(ids),
            });
        }
        Pending::Uuids {
            uuids,
            failed,
            reply,
            ..
        } => {
            let _ = reply.send(match failed {
                Some(e) => Err(e),
                None => Ok(uuids),
            });
        }
        Pending::Ping { reply, .. } => {
            let _ = reply.send(match refused {
                Some(e) => Err(e),
                None => Ok(()),
            });
        }
        Pending::Values { got, reply } => {
            let _ = reply.send(match (refused, got) {
                (Some(e), _) => Err(e),
                (None, Some(fetched)) => Ok(fetched),
                // Only when the caller had given up (no one reads this).
                (None, None) => Err(Error::Timeout),
            });
        }
        Pending::IdsWith { got, reply } => {
            let _ = reply.send(match (refused, got) {
                (Some(e), _) => Err(e),
                (None, Some(answer)) => Ok(answer),
                // Only when the caller had given up (no one reads this).
                (None, None) => Err(Error::Timeout),
            });
        }
    }
}
