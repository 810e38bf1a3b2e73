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

use super::conn;
use super::stats::{bump, ShardStats};
use super::{ConnGuard, ServeError, ShardExit};
use crate::clock::{Clock, SystemClock};
use crate::config::ListenSection;
use crate::generator::{GenError, Generator, ShardConfig};
use crate::layout::Layout;
use crate::lease::keeper::LeaseShared;

/// Everything a shard thread starts with.
pub(crate) struct ShardSetup {
    pub index: usize,
    /// The node's `[listen]` section: this shard's connection limits and timeouts.
    pub listen: ListenSection,
    pub layout: Layout,
    /// The `[clock]` section's: clock steps back up to this are waited out.
    pub max_rollback_wait: std::time::Duration,
    /// The `[shutdown]` section's: longest the drain waits for this shard's connections.
    pub shutdown_timeout: std::time::Duration,
    pub lease: Arc<LeaseShared>,
    pub stats: Arc<ShardStats>,
    pub shutdown: watch::Receiver<bool>,
    pub connections: Arc<AtomicUsize>,
    pub handoff: Handoff,
}

/// A connection accepted by one shard for another, with its place under the connection limit.
pub(crate) type Handed = (std::net::TcpStream, ConnGuard);

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

/// The shard's generator, rebuilt when the node's lease changes. Generic over the clock only
/// so the lease simulation (`lease/sim.rs`) can run it on simulated time; a node uses the
/// system clock.
pub(crate) struct ShardGen<C: Clock + Clone = SystemClock> {
    index: usize,
    layout: Layout,
    workers_per_shard: u64,
    max_rollback_wait: std::time::Duration,
    lease: Arc<LeaseShared>,
    stats: Arc<ShardStats>,
    clock: C,
    current: Option<(u64, Generator<C>)>,
    /// The worker sub-range `(first, count)` of `current`'s generator; `(0, 0)` without one.
    current_range: (u64, u64),
}

/// Why a request for IDs could not be served.
pub(crate) enum IssueError {
    Gen(GenError),
    NoLease,
    /// Issued from another worker range than the connection's HELLO_OK announced.
    RangeChanged,
}

/// What a shard generator is built from: the layout, the `[listen]` section's worker IDs per
/// shard and the `[clock]` section's rollback wait.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GenSettings {
    pub layout: Layout,
    pub workers_per_shard: u64,
    pub max_rollback_wait: std::time::Duration,
}

impl ShardGen {
    fn new(
        index: usize,
        settings: GenSettings,
        lease: Arc<LeaseShared>,
        stats: Arc<ShardStats>,
    ) -> Self {
        Self::with_clock(index, settings, lease, stats, SystemClock::new())
    }
}

impl<C: Clock + Clone> ShardGen<C> {
    /// A shard generator whose generators read `clock`.
    pub(crate) fn with_clock(
        index: usize,
        settings: GenSettings,
        lease: Arc<LeaseShared>,
        stats: Arc<ShardStats>,
        clock: C,
    ) -> Self {
        let mut g = ShardGen {
            index,
            layout: settings.layout,
            workers_per_shard: settings.workers_per_shard,
            max_rollback_wait: settings.max_rollback_wait,
            lease,
            stats,
            clock,
            current: None,
            current_range: (0, 0),
        };
        g.refresh();
        g
    }

    /// Rebuilds the generator if the node holds a lease of another generation. Returns whether
    /// the generator changed.
    fn refresh(&mut self) -> bool {
        let Some(view) = self.lease.current() else {
            return false;
        };
        if self
            .current
            .as_ref()
            .is_some_and(|(g, _)| *g == view.grant.generation)
        {
            return false;
        }
        let per_shard = self.workers_per_shard;
        let shard_config = ShardConfig {
            worker_first: view.grant.first + self.index as u64 * per_shard,
            worker_count: per_shard,
            floor: view.grant.floor,
            max_rollback_wait: self.max_rollback_wait,
        };
        match Generator::with_stats(
            self.layout,
            shard_config,
            Arc::clone(&view.ceiling),
            self.clock.clone(),
            Arc::clone(&self.stats.generator),
        ) {
            Ok(g) => {
                self.stats
                    .generation
                    .store(view.grant.generation, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(
                    event = "shard_lease",
                    shard = self.index,
                    generation = view.grant.generation,
                    worker_first = shard_config.worker_first,
                    worker_count = shard_config.worker_count,
                    floor = shard_config.floor,
                    "shard generator ready"
                );
                self.current = Some((view.grant.generation, g));
                self.current_range = (shard_config.worker_first, shard_config.worker_count);
                true
            }
            Err(e) => {
                tracing::error!(event = "shard_config_error", shard = self.index, error = %e, "cannot build the shard generator");
                false
            }
        }
    }

    /// The worker sub-range `(first, count)` of the generator that issues now, after picking up
    /// a new lease if the node holds one; `(0, 0)` while the shard has none. A connection
    /// announces this in HELLO_OK and is served only while it stays the same.
    pub(crate) fn range(&mut self) -> (u64, u64) {
        self.refresh();
        self.current_range
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Issues `n` IDs as runs `(first, count)` from the worker sub-range `announced` (the one
    /// the connection's HELLO_OK named), picking up a new lease first. A range other than the
    /// announced one is `RangeChanged` before any ID is drawn. On error nothing emitted may be
    /// used.
    pub(crate) fn issue(
        &mut self,
        announced: (u64, u64),
        n: u64,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<(), IssueError> {
        // A lease change reaches the generator as its old ceiling (lowered to 0 on loss), so
        // the lease is looked up only then, or while the shard has none: no shared read per
        // request.
        if self.current.is_none() && !self.refresh() {
            return Err(IssueError::NoLease);
        }
        if self.current_range != announced {
            return Err(IssueError::RangeChanged);
        }
        let Some((_, g)) = self.current.as_mut() else {
            return Err(IssueError::NoLease);
        };
        // Retried under a renewed lease only if nothing was emitted: a retry after part of
        // the batch went out would answer more IDs than asked.
        let mut emitted = 0u64;
        let first_try = g.fill_runs(n, |first, count| {
            emitted += count;
            emit(first, count)
        });
        match first_try {
            Ok(()) => Ok(()),
            Err(GenError::LeaseCeiling { .. }) if emitted == 0 && self.refresh() => {
                // A new lease generation: serve under it only if it kept the announced range.
                if self.current_range != announced {
                    return Err(IssueError::RangeChanged);
                }
                let Some((_, g)) = self.current.as_mut() else {
                    return Err(IssueError::NoLease);
                };
                g.fill_runs(n, emit).map_err(IssueError::Gen)
            }
            Err(e) => Err(IssueError::Gen(e)),
        }
    }

    pub(crate) fn exit(&self) -> ShardExit {
        ShardExit {
            last_issued: self
                .current
                .as_ref()
                .and_then(|(gen, g)| g.last_issued_timestamp().map(|ts| (*gen, ts))),
        }
    }
}

/// The shard thread's body.
pub(crate) fn run(setup: ShardSetup, listener: std::net::TcpListener) -> ShardExit {
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
            return ShardExit::default();
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, serve(setup, listener))
}

async fn serve(setup: ShardSetup, listener: std::net::TcpListener) -> ShardExit {
    let ShardSetup {
        index,
        listen,
        layout,
        max_rollback_wait,
        shutdown_timeout,
        lease,
        stats,
        mut shutdown,
        connections,
        handoff,
    } = setup;
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(event = "shard_failed", shard = index, error = %e, "cannot register the listener");
            return ShardExit::default();
        }
    };
    let settings = GenSettings {
        layout,
        workers_per_shard: listen.workers_per_shard,
        max_rollback_wait,
    };
    let gen = Rc::new(RefCell::new(ShardGen::new(
        index,
        settings,
        lease,
        Arc::clone(&stats),
    )));
    let ctx = Rc::new(conn::ConnCtx {
        listen,
        layout,
        gen: Rc::clone(&gen),
        stats: Arc::clone(&stats),
        shutdown: shutdown.clone(),
    });
    let Handoff {
        peers,
        mut inbox,
        next,
    } = handoff;
    let mut tasks = tokio::task::JoinSet::new();
    let spawn = |tasks: &mut tokio::task::JoinSet<()>, stream: TcpStream, guard: ConnGuard| {
        let ctx = Rc::clone(&ctx);
        tasks.spawn_local(async move {
            let _guard = guard;
            conn::serve(stream, ctx).await;
        });
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends: back off briefly instead of spinning.
                        tracing::warn!(event = "accept_failed", shard = index, error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                bump(&stats.connections_total, 1);
                match ConnGuard::try_new(&connections, listen.max_connections) {
                    Some(guard) => {
                        let target = next.fetch_add(1, Ordering::Relaxed) % peers.len();
                        if target == index {
                            spawn(&mut tasks, stream, guard);
                        } else {
                            match stream.into_std() {
                                Ok(std_stream) => {
                                    if let Err(e) = peers[target].try_send((std_stream, guard)) {
                                        // That shard is stopping or swamped: serve it here.
                                        let (std_stream, guard) = match e {
                                            mpsc::error::TrySendError::Full(h)
                                            | mpsc::error::TrySendError::Closed(h) => h,
                                        };
                                        if let Ok(stream) = TcpStream::from_std(std_stream) {
                                            spawn(&mut tasks, stream, guard);
                                        }
                                    }
                                }
                                Err(e) => {
                                    tracing::warn!(event = "accept_failed", shard = index, error = %e, "cannot hand a connection over");
                                }
                            }
                        }
                    }
                    None => {
                        bump(&stats.connections_refused, 1);
                        tasks.spawn_local(conn::refuse_overloaded(stream, Arc::clone(&stats)));
                    }
                }
                // Reap finished connection tasks so the set does not grow.
                while tasks.try_join_next().is_some() {}
            }
            handed = inbox.recv() => {
                let Some((std_stream, guard)) = handed else { continue };
                match TcpStream::from_std(std_stream) {
                    Ok(stream) => spawn(&mut tasks, stream, guard),
                    Err(e) => {
                        tracing::warn!(event = "accept_failed", shard = index, error = %e, "cannot take over a connection");
                    }
                }
                while tasks.try_join_next().is_some() {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::generator::Ceiling;
    use crate::lease::keeper::LeaseView;
    use crate::lease::Grant;

    fn view(generation: u64, first: u64, ceiling: u64) -> Arc<LeaseView> {
        Arc::new(LeaseView {
            grant: Grant {
                first,
                count: 1,
                generation,
                floor: 0,
                lease_end: ceiling,
            },
            ceiling: Arc::new(Ceiling::new(ceiling)),
        })
    }

    fn shard(lease: &Arc<LeaseShared>) -> ShardGen {
        let config = crate::config::ServeConfig::default();
        let settings = GenSettings {
            layout: config.layout,
            workers_per_shard: config.listen.workers_per_shard,
            max_rollback_wait: config.clock.max_rollback_wait,
        };
        ShardGen::new(0, settings, Arc::clone(lease), Arc::default())
    }

    fn now_id_ms(layout: crate::layout::Layout) -> u64 {
        SystemClock::new().wall_ms() - layout.epoch_ms()
    }

    #[test]
    fn a_batch_cut_by_the_ceiling_is_never_retried_after_part_of_it_went_out() {
        let layout = crate::layout::Layout::default();
        let per_ms = 1u64 << layout.sequence_bits();
        let mut partial = 0;
        for round in 0..20u64 {
            // The lease allows this millisecond only; a batch of three milliseconds' worth
            // emits one millisecond of IDs, then meets the ceiling.
            let lease = LeaseShared::for_test(layout, None);
            let ceiling = now_id_ms(layout) + 1;
            lease.publish_for_test(Some(view(2 * round + 1, 0, ceiling)));
            let mut g = shard(&lease);
            // Meanwhile the keeper took a new generation of the same range, far ahead.
            lease.publish_for_test(Some(view(2 * round + 2, 0, ceiling + 60_000)));
            let mut emitted = 0;
            let result = g.issue((0, 1), 3 * per_ms, |_, n| emitted += n);
            match result {
                Ok(()) => assert_eq!(emitted, 3 * per_ms, "an answer holds exactly the IDs asked"),
                Err(_) => {
                    assert!(
                        emitted <= 3 * per_ms,
                        "{emitted} IDs emitted for a batch of {}",
                        3 * per_ms
                    );
                    partial += u64::from(emitted > 0);
                }
            }
        }
        assert!(
            partial > 0,
            "the ceiling never cut a batch: the test proves nothing"
        );
    }

    #[test]
    fn a_connection_whose_range_changed_gets_range_changed_before_any_id_is_drawn() {
        let layout = crate::layout::Layout::default();
        let far = now_id_ms(layout) + 60_000;
        let lease = LeaseShared::for_test(layout, Some(view(1, 0, far)));
        let mut g = shard(&lease);
        assert_eq!(g.range(), (0, 1));
        let mut emitted = 0;
        assert!(g.issue((0, 1), 10, |_, n| emitted += n).is_ok());
        assert_eq!(emitted, 10);
        // The lease is lost (the keeper lowers the old ceiling to 0) and another range taken.
        lease.current().unwrap().ceiling.lower_to(0);
        lease.publish_for_test(Some(view(2, 5, far)));
        // (Within the millisecond it already checked, the generator may still finish: its
        // timestamp is below the old lease end, which fences the next holder.)
        std::thread::sleep(std::time::Duration::from_millis(2));
        emitted = 0;
        let refused = g.issue((0, 1), 10, |_, n| emitted += n);
        assert!(matches!(refused, Err(IssueError::RangeChanged)));
        assert_eq!(
            emitted, 0,
            "no ID is drawn for a connection that will be closed"
        );
        // A connection that learned the new range is served from it.
        assert_eq!(g.range(), (5, 1));
        assert!(g
            .issue((5, 1), 10, |first, n| {
                emitted += n;
                assert_eq!(layout.decompose(crate::layout::Id(first)).worker, 5);
            })
            .is_ok());
        assert_eq!(emitted, 10);
        // A connection from before any lease (announced 0..0) is told to reconnect too.
        assert!(matches!(
            g.issue((0, 0), 1, |_, _| {}),
            Err(IssueError::RangeChanged)
        ));
    }
}
