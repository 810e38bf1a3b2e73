//! A blocking API for code without an async runtime.
//!
//! [`Client`], [`Pool`] and [`PrefetchPool`] wrap their async counterparts and run them on
//! a private current-thread Tokio runtime on a background thread (one per object, shared
//! by its clones). Calls can be made from any thread (also from one that is itself inside
//! a Tokio runtime, although blocking there stalls that runtime's thread); calls from
//! many threads at once are pipelined like the async versions' calls.
//!
//! ```no_run
//! let client = idgen_client::blocking::Client::connect("127.0.0.1:7420")?;
//! let id = client.next_id()?;
//! let batch = client.next_ids(100)?;
//! assert!(batch[0] > id);
//! # Ok::<(), idgen_client::Error>(())
//! ```
//!
//! Several nodes, with failover and prefetching:
//!
//! ```no_run
//! use idgen_client::{blocking, PoolOptions, PrefetchOptions};
//!
//! let nodes = ["10.0.0.1:7420", "10.0.0.2:7420"];
//! let pool = blocking::Pool::connect(&nodes, PoolOptions::default())?;
//! let batch = pool.next_ids(1000)?; // exactly 1000, or an error
//!
//! let ids = blocking::PrefetchPool::connect(&nodes, PoolOptions::default(), PrefetchOptions::default())?;
//! let handles: Vec<_> = (0..4)
//!     .map(|_| {
//!         let ids = ids.clone();
//!         std::thread::spawn(move || ids.next_id())
//!     })
//!     .collect();
//! for h in handles {
//!     println!("{}", h.join().unwrap()?);
//! }
//! # let _ = batch;
//! # Ok::<(), idgen_client::Error>(())
//! ```

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use idgen_id::Layout;
use idgen_protocol::ServerHello;
use tokio::runtime::Handle;

use crate::{ClientOptions, Error, NodeInfo, PoolOptions, PrefetchOptions, PrefetchStats};

/// A current-thread Tokio runtime on its own thread, driving whatever was spawned on it
/// until this is dropped.
#[derive(Debug)]
struct Background {
    handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The runtime thread only waits for `stop`; it ends promptly.
            let _ = thread.join();
        }
    }
}

impl Background {
    /// Start the thread and its runtime, and run `init` on it; the runtime then keeps
    /// running (driving the tasks `init` spawned) until the `Background` is dropped.
    fn start<T, F, Fut>(init: F) -> Result<(T, Arc<Background>), Error>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>>,
    {
        let (init_tx, init_rx) = std::sync::mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("idgen-client".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = init_tx.send(Err(Error::from(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match init().await {
                        Ok(value) => {
                            let _ = init_tx.send(Ok((value, Handle::current())));
                            // Drive the spawned tasks until the owner drops.
                            let _ = stop_rx.await;
                        }
                        Err(e) => {
                            let _ = init_tx.send(Err(e));
                        }
                    }
                });
            })?;
        let (value, handle) = match init_rx.recv() {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Closed);
            }
        };
        let background = Background {
            handle,
            stop: Some(stop_tx),
            thread: Some(thread),
        };
        Ok((value, Arc::new(background)))
    }

    /// Run `fut` on the background runtime and wait for it. The async call's own
    /// timeouts bound the wait.
    fn run<T, Fut>(&self, fut: Fut) -> Result<T, Error>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        // A dropped sender means the runtime is gone.
        rx.recv().unwrap_or(Err(Error::Closed))
    }
}

/// A blocking idgen client over one TCP connection.
///
/// Cheap to clone; all clones share the connection and the background thread. The thread
/// and its runtime stop, and the connection closes, when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Client {
    client: crate::Client,
    background: Arc<Background>,
}

impl Client {
    /// Connect to `addr` with default [`ClientOptions`], and do the HELLO handshake.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, Error> {
        Self::connect_with(addr, ClientOptions::default())
    }

    /// Connect to `addr` with `options`, and do the HELLO handshake. `addr` is resolved
    /// on the calling thread; each resolved address is tried in turn.
    pub fn connect_with(addr: impl ToSocketAddrs, options: ClientOptions) -> Result<Client, Error> {
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
        let (client, background) = Background::start(move || async move {
            crate::Client::connect_with(&addrs[..], options).await
        })?;
        Ok(Client { client, background })
    }

    /// Connect to `addr` (`host:port`) over TLS, and do the HELLO handshake. `addr` is
    /// resolved on the calling thread; the certificate must name its host part (or `tls`'s
    /// server name). See [`crate::Client::connect_tls`].
    #[cfg(feature = "tls")]
    pub fn connect_tls(
        addr: &str,
        options: ClientOptions,
        tls: &crate::TlsConfig,
    ) -> Result<Client, Error> {
        let name = tls.server_name_for(addr)?;
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
        let tls = tls.clone();
        let (client, background) = Background::start(move || async move {
            crate::Client::connect_tls_to(&addrs[..], name, options, &tls).await
        })?;
        Ok(Client { client, background })
    }

    /// One ID. See [`crate::Client::next_id`].
    pub fn next_id(&self) -> Result<u64, Error> {
        let c = self.client.clone();
        self.background.run(async move { c.next_id().await })
    }

    /// `n` IDs, strictly increasing, all or nothing. See [`crate::Client::next_ids`].
    pub fn next_ids(&self, n: u32) -> Result<Vec<u64>, Error> {
        let c = self.client.clone();
        self.background.run(async move { c.next_ids(n).await })
    }

    /// One version 7 UUID. See [`crate::Client::next_uuid`].
    pub fn next_uuid(&self) -> Result<uuid::Uuid, Error> {
        let c = self.client.clone();
        self.background.run(async move { c.next_uuid().await })
    }

    /// `n` version 7 UUIDs, strictly increasing, all or nothing. See
    /// [`crate::Client::next_uuids`].
    pub fn next_uuids(&self, n: u32) -> Result<Vec<uuid::Uuid>, Error> {
        let c = self.client.clone();
        self.background.run(async move { c.next_uuids(n).await })
    }

    /// The next value of the named sequence. See [`crate::Client::next_value`].
    pub fn next_value(&self, name: &str) -> Result<u64, Error> {
        let c = self.client.clone();
        let name = name.to_owned();
        self.background
            .run(async move { c.next_value(&name).await })
    }

    /// `n` values of the named sequence, strictly increasing. See
    /// [`crate::Client::next_values`].
    pub fn next_values(&self, name: &str, n: u32) -> Result<Vec<u64>, Error> {
        let c = self.client.clone();
        let name = name.to_owned();
        self.background
            .run(async move { c.next_values(&name, n).await })
    }

    /// A client on the same connection and background thread whose calls on dense sequences
    /// are answered from buffers of `k` values (0: off). See
    /// [`crate::Client::with_sequence_prefetch`] for the rules and what it costs.
    pub fn with_sequence_prefetch(&self, k: u32) -> Client {
        Client {
            client: self.client.with_sequence_prefetch(k),
            background: self.background.clone(),
        }
    }

    /// The `k` of [`with_sequence_prefetch`](Client::with_sequence_prefetch); 0 when off.
    pub fn sequence_prefetch(&self) -> u32 {
        self.client.sequence_prefetch()
    }

    /// Round-trip time of a PING. See [`crate::Client::ping`].
    pub fn ping(&self) -> Result<Duration, Error> {
        let c = self.client.clone();
        self.background.run(async move { c.ping().await })
    }

    /// The server's HELLO_OK.
    pub fn hello(&self) -> &ServerHello {
        self.client.hello()
    }

    /// The ID layout announced by the server.
    pub fn layout(&self) -> Layout {
        self.client.layout()
    }

    /// Whether the connection has failed.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// A blocking [`crate::Pool`]: several nodes, health tracking, failover, all-or-nothing
/// batches.
///
/// Cheap to clone; clones share the nodes, their connections and one background thread,
/// which stops when the last clone (and the last [`PrefetchPool`] made from it) is
/// dropped.
#[derive(Debug, Clone)]
pub struct Pool {
    pool: crate::Pool,
    background: Arc<Background>,
}

impl Pool {
    /// Connect to the nodes; succeeds if at least one answers. See
    /// [`crate::Pool::connect`].
    pub fn connect(addrs: &[impl ToString], options: PoolOptions) -> Result<Pool, Error> {
        let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let (pool, background) =
            Background::start(move || async move { crate::Pool::connect(&addrs, options).await })?;
        Ok(Pool { pool, background })
    }

    /// A pool from a [`crate::PoolBuilder`] (nodes and settings from code, an `idgen://`
    /// URL or the environment; hooks; `expand`), connected at its first call as
    /// [`crate::PoolBuilder::build`] makes it: a service starts while the cluster is
    /// unreachable.
    ///
    /// ```no_run
    /// use idgen_client::{blocking, Pool};
    ///
    /// // IDGEN_NODES=idgen://idgen-headless.ids.svc.cluster.local:7420?expand=true
    /// let pool = blocking::Pool::from_builder(Pool::builder().from_env()?)?;
    /// let id = pool.next_id()?;
    /// # let _ = id;
    /// # Ok::<(), idgen_client::Error>(())
    /// ```
    pub fn from_builder(builder: crate::PoolBuilder) -> Result<Pool, Error> {
        let (pool, background) = Background::start(move || async move { builder.build() })?;
        Ok(Pool { pool, background })
    }

    /// Connect to the nodes over TLS; succeeds if at least one answers. See
    /// [`crate::Pool::connect_tls`].
    #[cfg(feature = "tls")]
    pub fn connect_tls(
        addrs: &[impl ToString],
        options: PoolOptions,
        tls: &crate::TlsConfig,
    ) -> Result<Pool, Error> {
        let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let tls = tls.clone();
        let (pool, background) = Background::start(move || async move {
            crate::Pool::connect_tls(&addrs, options, &tls).await
        })?;
        Ok(Pool { pool, background })
    }

    /// One ID, with failover. See [`crate::Pool::next_id`].
    pub fn next_id(&self) -> Result<u64, Error> {
        let p = self.pool.clone();
        self.background.run(async move { p.next_id().await })
    }

    /// Exactly `n` IDs, strictly increasing, with failover of the whole batch. See
    /// [`crate::Pool::next_ids`].
    pub fn next_ids(&self, n: u32) -> Result<Vec<u64>, Error> {
        let p = self.pool.clone();
        self.background.run(async move { p.next_ids(n).await })
    }

    /// One version 7 UUID, with failover. See [`crate::Pool::next_uuid`].
    pub fn next_uuid(&self) -> Result<uuid::Uuid, Error> {
        let p = self.pool.clone();
        self.background.run(async move { p.next_uuid().await })
    }

    /// Exactly `n` version 7 UUIDs, strictly increasing, with failover of the whole batch.
    /// See [`crate::Pool::next_uuids`].
    pub fn next_uuids(&self, n: u32) -> Result<Vec<uuid::Uuid>, Error> {
        let p = self.pool.clone();
        self.background.run(async move { p.next_uuids(n).await })
    }

    /// The next value of the named sequence, with failover. See
    /// [`crate::Pool::next_value`].
    pub fn next_value(&self, name: &str) -> Result<u64, Error> {
        let p = self.pool.clone();
        let name = name.to_owned();
        self.background
            .run(async move { p.next_value(&name).await })
    }

    /// `n` values of the named sequence, strictly increasing, with failover. See
    /// [`crate::Pool::next_values`].
    pub fn next_values(&self, name: &str, n: u32) -> Result<Vec<u64>, Error> {
        let p = self.pool.clone();
        let name = name.to_owned();
        self.background
            .run(async move { p.next_values(&name, n).await })
    }

    /// A pool on the same nodes, connections and background thread whose calls on dense
    /// sequences are answered from buffers of `k` values (0: off). See
    /// [`crate::Pool::with_sequence_prefetch`].
    pub fn with_sequence_prefetch(&self, k: u32) -> Pool {
        Pool {
            pool: self.pool.with_sequence_prefetch(k),
            background: self.background.clone(),
        }
    }

    /// The `k` of [`with_sequence_prefetch`](Pool::with_sequence_prefetch); 0 when off.
    pub fn sequence_prefetch(&self) -> u32 {
        self.pool.sequence_prefetch()
    }

    /// The cluster's ID layout.
    pub fn layout(&self) -> Layout {
        self.pool.layout()
    }

    /// Each node's health, in address order.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.pool.nodes()
    }
}

/// A blocking [`crate::PrefetchPool`]: IDs from a local buffer refilled in the background.
///
/// Read the async type's docs for the ordering guarantees and what prefetching costs
/// (IDs age in the buffer; a crash leaves gaps, never duplicates). Cheap to clone; clones
/// share the buffer.
#[derive(Debug, Clone)]
pub struct PrefetchPool {
    prefetch: crate::PrefetchPool,
    background: Arc<Background>,
}

impl PrefetchPool {
    /// Connect a [`Pool`] and prefetch through it. See [`crate::PrefetchPool::connect`].
    pub fn connect(
        addrs: &[impl ToString],
        pool_options: PoolOptions,
        options: PrefetchOptions,
    ) -> Result<PrefetchPool, Error> {
        Ok(Self::new(&Pool::connect(addrs, pool_options)?, options))
    }

    /// Connect a [`Pool`] over TLS and prefetch through it. See
    /// [`crate::PrefetchPool::connect_tls`].
    #[cfg(feature = "tls")]
    pub fn connect_tls(
        addrs: &[impl ToString],
        pool_options: PoolOptions,
        options: PrefetchOptions,
        tls: &crate::TlsConfig,
    ) -> Result<PrefetchPool, Error> {
        Ok(Self::new(
            &Pool::connect_tls(addrs, pool_options, tls)?,
            options,
        ))
    }

    /// Prefetch through `pool` (sharing its connections and background thread), and
    /// start filling the buffer at once.
    pub fn new(pool: &Pool, options: PrefetchOptions) -> PrefetchPool {
        let _runtime = pool.background.handle.enter();
        PrefetchPool {
            prefetch: crate::PrefetchPool::new(pool.pool.clone(), options),
            background: pool.background.clone(),
        }
    }

    /// One ID from the buffer. See [`crate::PrefetchPool::next_id`].
    pub fn next_id(&self) -> Result<u64, Error> {
        let p = self.prefetch.clone();
        self.background.run(async move { p.next_id().await })
    }

    /// Counters (buffer level, refills, waits).
    pub fn stats(&self) -> PrefetchStats {
        self.prefetch.stats()
    }

    /// The cluster's ID layout.
    pub fn layout(&self) -> Layout {
        self.prefetch.layout()
    }
}
