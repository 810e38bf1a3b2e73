//! One shard: an OS thread with a current-thread runtime, its descriptor of the node's one
//! listening socket, and the generator for its worker sub-range.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use super::issuer::Issuer;
use super::telemetry::{bump, ShardStats};
use super::tls::{ServerTls, TlsListener};
use super::{conn, http};
use super::{ConnGuard, ServeError};
use crate::config::ListenSection;
use idgen_core::member::IssuerExit;
use idgen_core::sequence::holder::Holder;
use idgen_id::Layout;

/// Everything a shard thread starts with.
pub(crate) struct ShardSetup {
    pub index: usize,
    /// The node's `[listen]` section: this shard's connection limits and timeouts.
    pub listen: ListenSection,
    pub layout: Layout,
    /// The `[shutdown]` section's: longest the drain waits for this shard's connections.
    pub shutdown_timeout: std::time::Duration,
    /// The shard's sub-range of the node's lease (the member's issuer `index`).
    pub issuer: Issuer,
    pub stats: Arc<ShardStats>,
    pub shutdown: watch::Receiver<bool>,
    pub connections: Arc<AtomicUsize>,
    pub handoff: Handoff,
    /// The node's TLS, if a listener uses it.
    pub tls: Option<Arc<ServerTls>>,
    /// The `[tls]` section's: the HTTP ID API serves HTTPS.
    pub http_tls: bool,
    /// The node's named sequences, shared by every shard (reservations run on the control
    /// thread's runtime).
    pub sequences: Arc<Holder>,
    /// The `[mask]` section's keyring: `?format=masked` on the HTTP ID API (`None`: off).
    pub mask: Option<Arc<idgen_id::mask::Keyring>>,
    /// Kept answers for `Idempotency-Key`, one table for the node (`None`: off).
    pub idempotency: Option<Arc<super::idempotency::Idempotency>>,
    /// How long an HTTP request with `?after=` may wait for the clock.
    pub max_after_wait: std::time::Duration,
}

/// One shard's descriptors of the node's listening sockets.
pub(crate) struct Listeners {
    /// The ID protocol, plaintext.
    pub protocol: Option<std::net::TcpListener>,
    /// The ID protocol over TLS.
    pub protocol_tls: Option<std::net::TcpListener>,
    /// The HTTP ID API (HTTPS when `tls_http`).
    pub http: Option<std::net::TcpListener>,
}

/// A front (ARCHITECTURE.md's word): the way an accepted connection reaches the shard, named
/// by the listener it came in on, and so the protocol it speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Front {
    /// The ID protocol (PROTOCOL.md).
    Protocol,
    /// The ID protocol over TLS.
    ProtocolTls,
    /// The HTTP ID API.
    Http,
}

/// A connection accepted by one shard for another, with its place under the connection limit.
pub(crate) struct Handed {
    stream: std::net::TcpStream,
    guard: ConnGuard,
    front: Front,
}

/// How accepted connections are spread over the shards. Every shard accepts from the one
/// listening socket, and whichever is free takes a new connection; the kernel tends to wake
/// the same one, so the accepting shard deals connections round-robin and hands each one that
/// is not its own to its shard over a bounded queue (as pelikan's listener hands sessions to
/// its workers). Accepting is not the hot path: one atomic and one queue push per connection.
pub(crate) struct Handoff {
    /// The queues into every shard (this one's included, unused), by shard index.
    pub peers: Arc<Vec<mpsc::Sender<Handed>>>,
    /// This shard's queue.
    pub inbox: mpsc::Receiver<Handed>,
    /// The next shard in the round.
    pub next: Arc<AtomicUsize>,
}

impl Handoff {
    /// One handoff per shard, all sharing the round.
    pub(crate) fn for_shards(count: usize) -> Vec<Handoff> {
        let (senders, inboxes): (Vec<_>, Vec<_>) =
            (0..count).map(|_| mpsc::channel(HANDOFF_QUEUE)).unzip();
        let peers = Arc::new(senders);
        let next = Arc::new(AtomicUsize::new(0));
        inboxes
            .into_iter()
            .map(|inbox| Handoff {
                peers: Arc::clone(&peers),
                inbox,
                next: Arc::clone(&next),
            })
            .collect()
    }
}

/// Connections queued for one shard at most; past it the accepting shard serves them itself.
const HANDOFF_QUEUE: usize = 1024;

/// Reserves the ID protocol's address: binds one socket to it, without listening yet, so a
/// node finds out that the address is taken before it touches the store. No `SO_REUSEPORT`:
/// the kernel then refuses the address to every other socket, of any process, while this
/// node serves it (two processes behind one port would be two uncoordinated ID spaces).
/// `SO_REUSEADDR` only lets a restarted node bind past its predecessor's TIME_WAIT
/// connections; it never lets two sockets listen on one address.
pub(crate) fn reserve(addr: SocketAddr) -> Result<Socket, ServeError> {
    let listen_err = |source| ServeError::Listen { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(listen_err)?;
    socket.set_reuse_address(true).map_err(listen_err)?;
    socket.set_nonblocking(true).map_err(listen_err)?;
    socket.bind(&addr.into()).map_err(listen_err)?;
    Ok(socket)
}

/// [`listen`] on the socket if one was reserved, else no listener for any shard.
pub(crate) fn listen_all(
    socket: Option<Socket>,
    count: usize,
) -> Result<Vec<Option<std::net::TcpListener>>, ServeError> {
    match socket {
        Some(socket) => Ok(listen(socket, count)?.into_iter().map(Some).collect()),
        None => Ok((0..count).map(|_| None).collect()),
    }
}

/// Starts listening on the reserved socket and hands each of `count` shards its own
/// descriptor of it: every shard accepts from the one listening socket on its own runtime
/// (whichever shard is free first takes a new connection).
pub(crate) fn listen(
    socket: Socket,
    count: usize,
) -> Result<Vec<std::net::TcpListener>, ServeError> {
    let addr = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let listen_err = |source| ServeError::Listen { addr, source };
    socket.listen(4096).map_err(listen_err)?;
    let listener: std::net::TcpListener = socket.into();
    let mut out = Vec::with_capacity(count);
    for _ in 1..count {
        out.push(listener.try_clone().map_err(listen_err)?);
    }
    out.push(listener);
    Ok(out)
}

/// The shard thread's body: serves the ID protocol, plaintext and over TLS, and the HTTP ID
/// API from the listeners the node runs.
pub(crate) fn run(setup: ShardSetup, listeners: Listeners) -> IssuerExit {
    if let Some(cores) = core_affinity::get_core_ids() {
        if !cores.is_empty() {
            let core = cores[setup.index % cores.len()];
            if !core_affinity::set_for_current(core) {
                tracing::debug!(shard = setup.index, "could not pin the shard to a core");
            }
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(event = "shard_failed", shard = setup.index, error = %e, "cannot build the shard runtime");
            return IssuerExit::default();
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, serve(setup, listeners))
}

async fn serve(setup: ShardSetup, listeners: Listeners) -> IssuerExit {
    let ShardSetup {
        index,
        listen,
        layout,
        shutdown_timeout,
        issuer,
        stats,
        mut shutdown,
        connections,
        handoff,
        tls,
        http_tls,
        sequences,
        mask,
        idempotency,
        max_after_wait,
    } = setup;
    let register = |l: std::net::TcpListener| match tokio::net::TcpListener::from_std(l) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::error!(event = "shard_failed", shard = index, error = %e, "cannot register the listener");
            None
        }
    };
    let mut registered = Vec::with_capacity(3);
    for l in [listeners.protocol, listeners.protocol_tls, listeners.http] {
        registered.push(match l.map(register) {
            Some(None) => return IssuerExit::default(),
            Some(Some(l)) => Some(l),
            None => None,
        });
    }
    let http_listener = registered.pop().flatten();
    let tls_listener = registered.pop().flatten();
    let listener = registered.pop().flatten();
    let gen = Rc::new(RefCell::new(issuer));
    let Handoff {
        peers,
        mut inbox,
        next,
    } = handoff;
    let mut dealer = Dealer {
        index,
        max_connections: listen.max_connections,
        connections,
        peers,
        next,
        tasks: tokio::task::JoinSet::new(),
        protocol: Rc::new(conn::ConnCtx {
            listen,
            layout,
            gen: Rc::clone(&gen),
            stats: Arc::clone(&stats),
            shutdown: shutdown.clone(),
            sequences: Arc::clone(&sequences),
            mask: mask.clone(),
            idempotency: idempotency.clone(),
            max_after_wait,
        }),
        http: Rc::new(http::HttpCtx {
            layout,
            gen: Rc::clone(&gen),
            sequences,
            stats: Arc::clone(&stats),
            max_batch: listen.max_batch,
            mask,
            request_timeout: listen.http_request_timeout,
            idempotency,
            max_after_wait,
            shutdown_timeout,
            shutdown: shutdown.clone(),
        }),
        stats,
        tls,
        http_tls,
        handshake_timeout: listen.handshake_timeout,
        http_timeout: listen.http_request_timeout,
    };
    loop {
        tokio::select! {
            accepted = accept_on(listener.as_ref()) => dealer.accepted(accepted, Front::Protocol).await,
            accepted = accept_on(tls_listener.as_ref()) => dealer.accepted(accepted, Front::ProtocolTls).await,
            accepted = accept_on(http_listener.as_ref()) => dealer.accepted(accepted, Front::Http).await,
            handed = inbox.recv() => {
                let Some(Handed { stream: std_stream, guard, front }) = handed else { continue };
                match TcpStream::from_std(std_stream) {
                    Ok(stream) => dealer.spawn(stream, guard, front),
                    Err(e) => {
                        tracing::warn!(event = "accept_failed", shard = index, error = %e, "cannot take over a connection");
                    }
                }
                dealer.reap();
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
    }
    // Connections handed over but not yet taken are closed: their clients reconnect.
    inbox.close();
    drop(listener);
    drop(tls_listener);
    drop(http_listener);
    let mut tasks = dealer.tasks;
    let drained = tokio::time::timeout(shutdown_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            event = "shard_drain_timeout",
            shard = index,
            open = tasks.len(),
            "connections still open at the shutdown timeout: closing them"
        );
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    let exit = gen.borrow().exit();
    exit
}

/// Accepts from `listener`, or never if there is none.
async fn accept_on(
    listener: Option<&tokio::net::TcpListener>,
) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Deals a shard's accepted connections: each to the next shard in the round (this one's
/// served here), under the node's connection limit.
struct Dealer {
    index: usize,
    max_connections: usize,
    connections: Arc<AtomicUsize>,
    peers: Arc<Vec<mpsc::Sender<Handed>>>,
    next: Arc<AtomicUsize>,
    tasks: tokio::task::JoinSet<()>,
    protocol: Rc<conn::ConnCtx>,
    http: Rc<http::HttpCtx>,
    stats: Arc<ShardStats>,
    tls: Option<Arc<ServerTls>>,
    /// The HTTP ID API is HTTPS.
    http_tls: bool,
    handshake_timeout: std::time::Duration,
    http_timeout: std::time::Duration,
}

impl Dealer {
    async fn accepted(&mut self, accepted: std::io::Result<(TcpStream, SocketAddr)>, front: Front) {
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!(event = "accept_failed", shard = self.index, error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                return;
            }
        };
        bump(&self.stats.connections_total, 1);
        let Some(guard) = ConnGuard::try_new(&self.connections, self.max_connections) else {
            bump(&self.stats.connections_refused, 1);
            let stats = Arc::clone(&self.stats);
            match front {
                Front::Protocol => {
                    self.tasks
                        .spawn_local(conn::refuse_overloaded(stream, stats));
                }
                Front::Http if !self.http_tls => {
                    self.tasks
                        .spawn_local(http::refuse_overloaded(stream, stats));
                }
                // Over TLS, the refusal would cost a handshake per connection past the limit:
                // close at once instead (a client retries elsewhere either way).
                Front::ProtocolTls | Front::Http => {
                    stats.error(idgen_protocol::Status::OVERLOADED);
                    drop(stream);
                }
            }
            self.reap();
            return;
        };
        let target = self.next.fetch_add(1, Ordering::Relaxed) % self.peers.len();
        if target == self.index {
            self.spawn(stream, guard, front);
        } else {
            match stream.into_std() {
                Ok(std_stream) => {
                    if let Err(e) = self.peers[target].try_send(Handed {
                        stream: std_stream,
                        guard,
                        front,
                    }) {
                        // That shard is stopping or swamped: serve it here.
                        let (mpsc::error::TrySendError::Full(h)
                        | mpsc::error::TrySendError::Closed(h)) = e;
                        if let Ok(stream) = TcpStream::from_std(h.stream) {
                            self.spawn(stream, h.guard, h.front);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(event = "accept_failed", shard = self.index, error = %e, "cannot hand a connection over");
                }
            }
        }
        self.reap();
    }

    /// Serves a connection on this shard (a TLS connection's handshake runs here too).
    fn spawn(&mut self, stream: TcpStream, guard: ConnGuard, front: Front) {
        let _ = stream.set_nodelay(true);
        let peer = stream.peer_addr().ok();
        let tls = match (front, &self.tls) {
            (Front::ProtocolTls, Some(tls)) => Some((
                Arc::clone(tls),
                TlsListener::Protocol,
                self.handshake_timeout,
            )),
            (Front::Http, Some(tls)) if self.http_tls => {
                Some((Arc::clone(tls), TlsListener::Http, self.http_timeout))
            }
            (Front::ProtocolTls, None) => return,
            _ => None,
        };
        // One task type per kind of connection, so that a plaintext connection's task has no
        // room for a TLS session's state.
        match (front, tls) {
            (Front::Protocol | Front::ProtocolTls, None) => {
                let ctx = Rc::clone(&self.protocol);
                self.tasks.spawn_local(async move {
                    let _guard = guard;
                    conn::serve(stream, ctx).await;
                });
            }
            (Front::Protocol | Front::ProtocolTls, Some((tls, listener, timeout))) => {
                let ctx = Rc::clone(&self.protocol);
                self.tasks.spawn_local(async move {
                    let _guard = guard;
                    if let Some((stream, _client)) =
                        tls.accept(listener, stream, peer, timeout).await
                    {
                        conn::serve(stream, ctx).await;
                    }
                });
            }
            (Front::Http, None) => {
                let ctx = Rc::clone(&self.http);
                self.tasks.spawn_local(async move {
                    let _guard = guard;
                    http::serve(stream, ctx).await;
                });
            }
            (Front::Http, Some((tls, listener, timeout))) => {
                let ctx = Rc::clone(&self.http);
                self.tasks.spawn_local(async move {
                    let _guard = guard;
                    if let Some((stream, _client)) =
                        tls.accept(listener, stream, peer, timeout).await
                    {
                        http::serve(stream, ctx).await;
                    }
                });
            }
        }
    }

    /// Reaps finished connection tasks so the set does not grow.
    fn reap(&mut self) {
        while self.tasks.try_join_next().is_some() {}
    }
}
