//! The idgen node: thread-per-core shards answering the ID protocol, and a control thread.
//!
//! ```text
//!                  ┌──────────────────────── idgen process ───────────────────────────┐
//!   clients ──TCP──▶ one listening socket (no SO_REUSEPORT: no other process can bind │
//!                  │   its address); every shard accepts from it and deals           │
//!                  │   connections round-robin over the shards' handoff queues       │
//!   HTTP clients ──▶ the HTTP ID API's listening socket: the same, answered by the   │
//!                  │   shards (POST /ids, POST /ids/batch)                           │
//!                  │ shard 0 thread: current-thread tokio runtime, pinned to core 0    │
//!                  │   connections (served here only)                                 │
//!                  │   Generator: workers w0..w0+k, floor, ceiling ◀── Arc<Ceiling> ──┐ │
//!                  │ shard 1 thread: … workers w0+k..w0+2k, same floor and ceiling ◀──┤ │
//!                  │ …                                                               │ │
//!                  │ control thread (main): tokio runtime                            │ │
//!                  │   lease keeper: acquire, renew every TTL/3 ───── raises ────────┘ │
//!                  │   signals: SIGINT/SIGTERM → drain → join shards → release lease  │
//!                  │   admin HTTP: /metrics, /health, /layout (reads shard counters) │
//!                  └───────────────────────────────────┬──────────────────────────────┘
//!                                                      ▼
//!                                     coordination store (embedded / etcd / FoundationDB)
//! ```
//!
//! One address is served by one node: the ID, HTTP ID API and admin addresses are bound before
//! the lease is taken, without `SO_REUSEPORT`, so a second process on either fails at once (two
//! processes behind one port would be two uncoordinated ID spaces).
//!
//! The node is one [`Member`] of the worker space (`idgen_core::member`): it joins before the
//! shards start, each shard owns the member's issuer of its index, the control thread runs the
//! member's keeper and clock watch, and the member leaves after the shards have stopped. This
//! module keeps only the I/O around it: bind, listen, spawn the shards, the admin server.
//!
//! What crosses threads: the lease view (worker range, floor, shared ceiling) from the keeper
//! to the shards, read by a shard once per millisecond of work (the ceiling) or when its lease
//! changes; shard counters (single-writer atomics) read by the metrics scrape; the shutdown
//! signal; an accepted connection, once, through the handoff queue of the shard that will serve
//! it; a named sequence's reservation, which a shard's request hands to the control thread's
//! runtime (`idgen_core::sequence::holder`), and the block or error that comes back. Nothing else: a connection lives and dies on the shard that serves it, and the hot
//! path takes no lock, allocates nothing per request and makes no syscall per ID.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use idgen_core::clock::{CachedClock, Clock, SystemClock};
use idgen_core::lease::keeper::LeaseShared;
use idgen_core::lease::{LeaseError, Owner, Released};
use idgen_core::member::{IssuerExit, JoinError, Member, MemberSettings};
use idgen_core::sequence::holder::Holder;
use idgen_core::store::{self, StoreError};
use tokio::sync::watch;

use crate::config::ServeConfig;

pub mod admin;
pub mod audit;
mod conn;
mod forward;
mod http;
pub mod idempotency;
pub(crate) mod issuer;
pub mod metrics;
pub mod process;
mod responder;
pub(crate) mod shard;
pub mod state;
pub mod telemetry;
pub mod tls;
mod web;

pub use telemetry::ShardStats;

/// Why a node could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot open the store {url}: {source}")]
    Store { url: String, source: StoreError },
    #[error("cannot acquire a worker-ID lease: {0}")]
    Lease(#[from] LeaseError),
    #[error("cannot listen on {addr}: {source}{}", in_use_hint(source))]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start shard threads: {0}")]
    Thread(std::io::Error),
    #[error("refusing to start: {0}")]
    Clock(String),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] tls::TlsError),
}

/// One address is served by one node: say so when the address is taken.
impl From<JoinError> for ServeError {
    fn from(e: JoinError) -> Self {
        match e {
            JoinError::Clock(why) => ServeError::Clock(why),
            JoinError::Lease(e) => ServeError::Lease(e),
        }
    }
}

fn in_use_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        " (another process, perhaps another idgen node, already serves this address; one \
         address must be served by one node, or two uncoordinated ID spaces would share it)"
    } else {
        ""
    }
}

/// A running node (shards started, lease held).
pub struct Node {
    addr: Option<SocketAddr>,
    tls_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    tls: Option<Arc<tls::ServerTls>>,
    shutdown: watch::Sender<bool>,
    shards: Vec<JoinHandle<IssuerExit>>,
    member: Arc<Member<SystemClock>>,
    member_task: tokio::task::JoinHandle<()>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    admin: Option<(SocketAddr, watch::Sender<bool>, tokio::task::JoinHandle<()>)>,
    draining: Arc<AtomicBool>,
    shard_stats: Vec<Arc<ShardStats>>,
    config: Arc<ServeConfig>,
}

impl Node {
    /// Opens the store, acquires the lease, binds the listeners and starts the shards. Call it
    /// on the control thread's runtime.
    pub async fn start(config: ServeConfig) -> Result<Node, ServeError> {
        let clock = SystemClock::new();
        let config = Arc::new(config);
        // Certificate files first: a bad one fails before the store is touched.
        let tls = tls::ServerTls::new(&config.tls)?;
        let store = store::open(
            &config.lease.store,
            &config.lease.data_dir,
            &config.lease.access,
        )
        .await
        .map_err(|source| ServeError::Store {
            url: config.lease.store.to_string(),
            source,
        })?;
        // Bind the ID and admin ports before taking a lease, so a busy port fails fast, before
        // the store's records are touched.
        let reserved = config.listen.listen.map(shard::reserve).transpose()?;
        let reserved_tls = config.tls.tls_listen.map(shard::reserve).transpose()?;
        let reserved_http = config.listen.http_listen.map(shard::reserve).transpose()?;
        let admin_listener = match config.admin.admin_listen {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Listen { addr, source })?,
            ),
            None => None,
        };
        // The node joins the worker space as one member with an issuer per shard: clock check,
        // patient acquisition (long enough for a crashed predecessor's lease and clock key to
        // run out, so a restarted cluster whose worker IDs are all still held comes back),
        // clock key published.
        let lease_config = config.lease.lease_config(config.listen.workers());
        let settings = MemberSettings {
            layout: config.layout,
            patience: MemberSettings::default_patience(&lease_config),
            lease: lease_config,
            workers_per_issuer: config.listen.workers_per_shard,
            max_drift: config.clock.max_drift,
            max_rollback_wait: config.clock.max_rollback_wait,
        };
        let owner = Owner::this_process(config.lease.node_id.clone(), clock.wall_ms());
        // Named sequences live in the same store and namespace; their reservations run here,
        // on the control thread's runtime, never on a shard's.
        let sequences = Holder::new(
            Arc::clone(&store),
            &config.lease.namespace,
            tokio::runtime::Handle::current(),
        );
        match state::kernel_sync_problem(config.clock.max_drift) {
            Some(why) if config.clock.require_sync => {
                return Err(ServeError::Clock(format!("{why} (require_sync is on)")))
            }
            Some(why) => tracing::warn!(
                event = "clock_unsynchronized",
                "{why}; serving anyway (IDs stay unique; their order across nodes follows the clocks). Set require_sync to refuse"
            ),
            None => {}
        }
        // Strict sequence calls go to the node that commits them (forward.rs).
        // An advertised port 0 is the port `listen` was bound to.
        let advertise = config.listen.advertise.map(|mut a| {
            let bound = reserved
                .as_ref()
                .and_then(|s| s.local_addr().ok())
                .and_then(|l| l.as_socket());
            if let (0, Some(bound)) = (a.port(), bound) {
                a.set_port(bound.port());
            }
            a
        });
        let forwarder = forward::Forwarder::new(
            owner.instance.clone(),
            advertise,
            Arc::clone(&store),
            &config.lease.namespace,
            tokio::runtime::Handle::current(),
        );
        forwarder.refresh().await;
        sequences
            .set_forward(Arc::clone(&forwarder) as Arc<dyn idgen_core::sequence::holder::Forward>);
        let (member, view) = Member::join(store, settings, owner, clock).await?;
        let member = Arc::new(member);
        let lease = member.lease();

        let shards_n = config.listen.shards;
        let listeners = (|| {
            Ok::<_, ServeError>([
                shard::listen_all(reserved, shards_n)?,
                shard::listen_all(reserved_tls, shards_n)?,
                shard::listen_all(reserved_http, shards_n)?,
            ])
        })();
        let [listeners, tls_listeners, http_listeners] = match listeners {
            Ok(listeners) => listeners,
            Err(e) => {
                // Another process took the address while the lease was acquired: give the
                // worker IDs back at once rather than leaving them blocked for TTL + safety.
                // No shard has started: nothing was issued under it.
                if let Err(release) = member.leave(&[]).await {
                    tracing::warn!(event = "lease_release_failed", error = %release, "could not release the unused lease");
                }
                return Err(e);
            }
        };
        let bound = |l: &[Option<std::net::TcpListener>], want: Option<SocketAddr>| match (
            l.first().and_then(Option::as_ref),
            want,
        ) {
            (Some(l), Some(want)) => l
                .local_addr()
                .map(Some)
                .map_err(|source| ServeError::Listen { addr: want, source }),
            _ => Ok(None),
        };
        let addr = bound(&listeners, config.listen.listen)?;
        let tls_addr = bound(&tls_listeners, config.tls.tls_listen)?;
        let http_addr = bound(&http_listeners, config.listen.http_listen)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let connections = Arc::new(AtomicUsize::new(0));
        // One table of kept answers for the node: a retry may reach any shard.
        let idempotency = (!config.listen.idempotency_window.is_zero()).then(|| {
            idempotency::Idempotency::new(
                config.listen.idempotency_window,
                config.listen.idempotency_max_bytes,
            )
        });
        let mut shards = Vec::with_capacity(config.listen.shards);
        let mut shard_stats = Vec::with_capacity(config.listen.shards);
        let handoffs = shard::Handoff::for_shards(config.listen.shards);
        let fronts = listeners.into_iter().zip(tls_listeners).zip(http_listeners);
        for (index, (((protocol, protocol_tls), http), handoff)) in fronts.zip(handoffs).enumerate()
        {
            let stats = Arc::new(ShardStats::default());
            shard_stats.push(Arc::clone(&stats));
            let ctx = shard::ShardSetup {
                index,
                listen: config.listen,
                layout: config.layout,
                shutdown_timeout: config.shutdown.shutdown_timeout,
                issuer: member.issuer(index, CachedClock::new(), Arc::clone(&stats.generator)),
                stats,
                shutdown: shutdown_rx.clone(),
                connections: Arc::clone(&connections),
                handoff,
                tls: tls.clone(),
                http_tls: config.tls.tls_http,
                sequences: Arc::clone(&sequences),
                mask: config.mask.keys.clone(),
                idempotency: idempotency.clone(),
                max_after_wait: config.clock.max_drift,
            };
            let listeners = shard::Listeners {
                protocol,
                protocol_tls,
                http,
            };
            let handle = std::thread::Builder::new()
                .name(format!("idgen-shard-{index}"))
                .spawn(move || shard::run(ctx, listeners))
                .map_err(ServeError::Thread)?;
            shards.push(handle);
        }
        let member_task = {
            let member = Arc::clone(&member);
            let rx = shutdown_rx.clone();
            tokio::spawn(async move { member.run(rx).await })
        };
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(forwarder.run(shutdown_rx.clone())));
        if let Some(tls) = &tls {
            tasks.push(tokio::spawn(Arc::clone(tls).watch(shutdown_rx.clone())));
        }
        tasks.push(tokio::spawn(audit::observe(
            shard_stats.clone(),
            config.layout,
            config.clock.range_warning,
            clock,
            shutdown_rx.clone(),
        )));
        let draining = Arc::new(AtomicBool::new(false));
        let admin = match admin_listener {
            Some(listener) => {
                let admin_addr = listener.local_addr().map_err(|source| ServeError::Listen {
                    addr: config
                        .admin
                        .admin_listen
                        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
                    source,
                })?;
                let state = Arc::new(state::NodeState {
                    config: Arc::clone(&config),
                    lease: Arc::clone(&lease),
                    shards: shard_stats.clone(),
                    draining: Arc::clone(&draining),
                    clock_watch: member.clock_watch(),
                    tls: tls.clone(),
                    sequences: Arc::clone(&sequences),
                });
                let admin_tls = tls
                    .as_ref()
                    .filter(|t| t.serves(tls::TlsListener::Admin))
                    .map(Arc::clone);
                let request_timeout = config.admin.admin_request_timeout;
                let (stop, mut stop_rx) = watch::channel(false);
                let task = tokio::spawn(async move {
                    let stopped = async move {
                        while !*stop_rx.borrow() {
                            if stop_rx.changed().await.is_err() {
                                break;
                            }
                        }
                    };
                    if let Err(e) =
                        admin::serve(listener, state, admin_tls, request_timeout, stopped).await
                    {
                        tracing::error!(event = "admin_failed", error = %e, "admin HTTP server stopped");
                    }
                });
                Some((admin_addr, stop, task))
            }
            None => None,
        };
        // Every address as plain text, and absent when off (an Option records nothing when
        // None): in JSON mode this event is the only place the addresses are written.
        tracing::info!(
            event = "node_started",
            listen = addr.map(tracing::field::display),
            tls_listen = tls_addr.map(tracing::field::display),
            http_listen = http_addr.map(tracing::field::display),
            admin_listen = admin.as_ref().map(|(a, _, _)| tracing::field::display(*a)),
            shards = config.listen.shards,
            worker_first = view.grant.workers.first,
            worker_count = view.grant.workers.count,
            generation = view.grant.generation,
            store = %config.lease.store,
            namespace = %config.lease.namespace,
            layout = %config.layout,
            "idgen node started"
        );
        Ok(Node {
            addr,
            tls_addr,
            http_addr,
            tls,
            shutdown,
            shards,
            member,
            member_task,
            tasks,
            admin,
            draining,
            shard_stats,
            config,
        })
    }

    /// Where the admin HTTP server listens, if it runs.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|(a, _, _)| *a)
    }

    /// Where the HTTP ID API listens, if it runs.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// Where the ID protocol listens, plaintext, if it does.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Where the ID protocol listens over TLS, if it does.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Whether the HTTP ID API serves HTTPS.
    pub fn http_is_tls(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|t| t.serves(tls::TlsListener::Http))
    }

    /// Whether the admin port serves HTTPS.
    pub fn admin_is_tls(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|t| t.serves(tls::TlsListener::Admin))
    }

    /// The lease state, for health and metrics.
    pub fn lease(&self) -> Arc<LeaseShared> {
        self.member.lease()
    }

    /// Per-shard counters.
    pub fn shard_stats(&self) -> &[Arc<ShardStats>] {
        &self.shard_stats
    }

    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// Graceful shutdown: stop accepting, answer what was received, stop the shards, then
    /// release the lease with the true last-issued timestamp.
    pub async fn shutdown(self) -> Result<Released, ServeError> {
        self.draining.store(true, Ordering::Relaxed);
        let drain_delay = self.config.shutdown.drain_delay;
        if !drain_delay.is_zero() {
            tracing::info!(
                event = "node_draining",
                delay_ms = idgen_core::lease::duration_ms(drain_delay),
                "not ready; draining after the delay"
            );
            tokio::time::sleep(drain_delay).await;
        }
        tracing::info!(event = "node_draining", "draining: no new connections");
        let _ = self.shutdown.send(true);
        let _ = self.member_task.await;
        for t in self.tasks {
            let _ = t.await;
        }
        let shards = self.shards;
        // A shard that panicked reports nothing: `None`, its last timestamp unknown.
        let exits = tokio::task::spawn_blocking(move || {
            shards
                .into_iter()
                .map(|h| h.join().ok())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let released = self.member.leave(&exits).await;
        if let Some((_, stop, task)) = self.admin {
            let _ = stop.send(true);
            let _ = task.await;
        }
        let released = released?;
        tracing::info!(
            event = "node_stopped",
            outcome = released.name(),
            lease_end = released.lease_end(),
            "idgen node stopped"
        );
        Ok(released)
    }
}

/// Counts open connections across shards; decrements on drop.
pub(crate) struct ConnGuard(Arc<AtomicUsize>);

impl ConnGuard {
    pub(crate) fn try_new(counter: &Arc<AtomicUsize>, max: usize) -> Option<ConnGuard> {
        let prev = counter.fetch_add(1, Ordering::AcqRel);
        if prev >= max {
            counter.fetch_sub(1, Ordering::AcqRel);
            None
        } else {
            Some(ConnGuard(Arc::clone(counter)))
        }
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
