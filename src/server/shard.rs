//! One shard: an OS thread with a current-thread runtime, its own `SO_REUSEPORT` listener, and
//! the generator for its worker sub-range.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;

use super::conn;
use super::stats::{bump, ShardStats};
use super::{ConnGuard, ServeError, ShardExit};
use crate::clock::SystemClock;
use crate::config::ServeConfig;
use crate::generator::{GenError, Generator, ShardConfig};
use crate::lease::keeper::LeaseShared;

/// Everything a shard thread starts with.
pub(crate) struct ShardSetup {
    pub index: usize,
    pub config: ServeConfig,
    pub lease: Arc<LeaseShared>,
    pub stats: Arc<ShardStats>,
    pub shutdown: watch::Receiver<bool>,
    pub connections: Arc<AtomicUsize>,
}

/// Binds `count` listeners on one address with `SO_REUSEPORT`, so the kernel spreads incoming
/// connections over the shards. Port 0 is resolved by the first bind and reused by the rest.
pub(crate) fn bind(
    addr: SocketAddr,
    count: usize,
) -> Result<Vec<std::net::TcpListener>, ServeError> {
    let mut out = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count {
        let listen_err = |source| ServeError::Listen { addr, source };
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(listen_err)?;
        socket.set_reuse_address(true).map_err(listen_err)?;
        socket.set_reuse_port(true).map_err(listen_err)?;
        socket.set_nonblocking(true).map_err(listen_err)?;
        socket.bind(&addr.into()).map_err(listen_err)?;
        socket.listen(4096).map_err(listen_err)?;
        let listener: std::net::TcpListener = socket.into();
        if addr.port() == 0 {
            addr = listener.local_addr().map_err(listen_err)?;
        }
        out.push(listener);
    }
    Ok(out)
}

/// The shard's generator, rebuilt when the node's lease changes.
pub(crate) struct ShardGen {
    index: usize,
    config: ServeConfig,
    lease: Arc<LeaseShared>,
    stats: Arc<ShardStats>,
    current: Option<(u64, Generator<SystemClock>)>,
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

impl ShardGen {
    fn new(
        index: usize,
        config: ServeConfig,
        lease: Arc<LeaseShared>,
        stats: Arc<ShardStats>,
    ) -> Self {
        let mut g = ShardGen {
            index,
            config,
            lease,
            stats,
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
        let per_shard = self.config.workers_per_shard;
        let shard_config = ShardConfig {
            worker_first: view.grant.first + self.index as u64 * per_shard,
            worker_count: per_shard,
            floor: view.grant.floor,
            max_rollback_wait: self.config.max_rollback_wait,
        };
        match Generator::with_stats(
            self.config.layout,
            shard_config,
            Arc::clone(&view.ceiling),
            SystemClock::new(),
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

    /// The worker sub-range of the generator that issued last (no refresh).
    pub(crate) fn issuing_range(&self) -> (u64, u64) {
        self.current_range
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Issues `n` IDs as runs `(first, count)`; on error nothing emitted may be used.
    pub(crate) fn issue(
        &mut self,
        n: u64,
        mut emit: impl FnMut(u64, u64),
    ) -> Result<(), IssueError> {
        if self.current.is_none() && !self.refresh() {
            return Err(IssueError::NoLease);
        }
        let Some((_, g)) = self.current.as_mut() else {
            return Err(IssueError::NoLease);
        };
        match g.fill_runs(n, &mut emit) {
            Ok(()) => Ok(()),
            Err(GenError::LeaseCeiling { .. }) if self.refresh() => {
                // A new lease (new range, new floor): try once more under it.
                let Some((_, g)) = self.current.as_mut() else {
                    return Err(IssueError::NoLease);
                };
                g.fill_runs(n, emit).map_err(IssueError::Gen)
            }
            Err(e) => Err(IssueError::Gen(e)),
        }
    }

    fn exit(&self) -> ShardExit {
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
        config,
        lease,
        stats,
        mut shutdown,
        connections,
    } = setup;
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(event = "shard_failed", shard = index, error = %e, "cannot register the listener");
            return ShardExit::default();
        }
    };
    let gen = Rc::new(RefCell::new(ShardGen::new(
        index,
        config.clone(),
        lease,
        Arc::clone(&stats),
    )));
    let ctx = Rc::new(conn::ConnCtx {
        config: config.clone(),
        gen: Rc::clone(&gen),
        stats: Arc::clone(&stats),
        shutdown: shutdown.clone(),
    });
    let mut tasks = tokio::task::JoinSet::new();
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
                match ConnGuard::try_new(&connections, config.max_connections) {
                    Some(guard) => {
                        let ctx = Rc::clone(&ctx);
                        tasks.spawn_local(async move {
                            let _guard = guard;
                            conn::serve(stream, ctx).await;
                        });
                    }
                    None => {
                        bump(&stats.connections_refused, 1);
                        tasks.spawn_local(conn::refuse_overloaded(stream, Arc::clone(&stats)));
                    }
                }
                // Reap finished connection tasks so the set does not grow.
                while tasks.try_join_next().is_some() {}
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(config.shutdown_timeout, async {
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
