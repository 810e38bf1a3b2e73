//! [`Pool`]: one logical client over several idgen nodes, with health tracking and
//! failover.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use idgen_id::Layout;
use tokio::task::JoinSet;

use crate::config::ClientConfig;
use crate::expand::{self, Entry, Expand, Made, Origin, Resolver};
use crate::observe::{Event, Hook, Observer};
use crate::sequence::{self, Fetched, Prefetch};
#[cfg(feature = "tls")]
use crate::TlsConfig;
use crate::{Client, ClientOptions, Error, IdOptions, MaskedIds, Status};

/// Settings for a [`Pool`].
///
/// The defaults suit a service that would rather fail a request quickly than wait for a
/// sick node: a call gets 3 s in all, and each node 1 s of it.
///
/// Made with [`PoolOptions::default`] and its setters (`PoolOptions::default()
/// .call_deadline(d)`), or through [`Pool::builder`]: fields may be added in a minor release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolOptions {
    /// Limit for connecting to one node (TCP connect plus HELLO). Default 500 ms.
    pub connect_timeout: Duration,
    /// Limit for one attempt of a call on one node, once connected. Default 1 s.
    pub request_timeout: Duration,
    /// Limit for a whole call, over every node it tries (connecting included). Default
    /// 3 s. A call that runs out of it fails with [`Error::Timeout`].
    pub call_deadline: Duration,
    /// How long a node is skipped after its first failure. Doubles with each further
    /// consecutive failure. Default 200 ms.
    pub backoff_min: Duration,
    /// The longest a node is skipped. Default 10 s.
    pub backoff_max: Duration,
}

impl PoolOptions {
    /// With [`connect_timeout`](PoolOptions::connect_timeout) `d`.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// With [`request_timeout`](PoolOptions::request_timeout) `d`.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// With [`call_deadline`](PoolOptions::call_deadline) `d`.
    pub fn call_deadline(mut self, d: Duration) -> Self {
        self.call_deadline = d;
        self
    }

    /// With [`backoff_min`](PoolOptions::backoff_min) `d`.
    pub fn backoff_min(mut self, d: Duration) -> Self {
        self.backoff_min = d;
        self
    }

    /// With [`backoff_max`](PoolOptions::backoff_max) `d`.
    pub fn backoff_max(mut self, d: Duration) -> Self {
        self.backoff_max = d;
        self
    }
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(1),
            call_deadline: Duration::from_secs(3),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
        }
    }
}

/// Builds a [`Pool`] from code, an `idgen://` URL or the environment (`IDGEN_NODES`,
/// `IDGEN_CLIENT_*`: `clients/vectors/CONFIG.md`), with hooks; the pool connects at once
/// ([`connect`](PoolBuilder::connect)) or at its first call ([`build`](PoolBuilder::build)).
///
/// A setting given both in code and in the URL or the environment is an error, never a silent
/// precedence.
///
/// ```no_run
/// use std::time::Duration;
/// use idgen_client::Pool;
///
/// # async fn run() -> Result<(), idgen_client::Error> {
/// // Reads IDGEN_NODES (e.g. `idgen://idgen-0.idgen:7420,idgen-1.idgen:7420`) and the
/// // IDGEN_CLIENT_* TLS files; connects at the first call.
/// let pool = Pool::builder()
///     .from_env()?
///     .call_deadline(Duration::from_secs(1))
///     .hook(|e: &idgen_client::Event<'_>| eprintln!("idgen: {}", e.name()))
///     .build()?;
/// let id = pool.next_id().await?;
/// # let _ = id;
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct PoolBuilder {
    nodes: Vec<String>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    options: PoolOptions,
    #[cfg(feature = "tls")]
    tls: Option<TlsConfig>,
    config: Option<(&'static str, ClientConfig)>,
    hooks: Vec<Arc<dyn Hook>>,
    expand: Option<bool>,
    resolver: Option<Resolver>,
}

impl std::fmt::Debug for PoolBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuilder")
            .field("nodes", &self.nodes)
            .field("options", &self.options)
            .field("config", &self.config)
            .field("hooks", &self.hooks.len())
            .finish_non_exhaustive()
    }
}

impl PoolBuilder {
    /// Adds a node (`host:port`, `[v6]:port`), after those given before.
    pub fn node(mut self, addr: impl ToString) -> Self {
        self.nodes.push(addr.to_string());
        self
    }

    /// Adds nodes, in order.
    pub fn nodes(mut self, addrs: impl IntoIterator<Item = impl ToString>) -> Self {
        self.nodes.extend(addrs.into_iter().map(|a| a.to_string()));
        self
    }

    /// [`PoolOptions::connect_timeout`].
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// [`PoolOptions::request_timeout`].
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }

    /// [`PoolOptions::call_deadline`].
    pub fn call_deadline(mut self, d: Duration) -> Self {
        self.options.call_deadline = d;
        self
    }

    /// [`PoolOptions::backoff_min`] and [`PoolOptions::backoff_max`].
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.options.backoff_min = min;
        self.options.backoff_max = max;
        self
    }

    /// Dial every node over TLS with `tls`.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Makes each address a node's name resolves to a node of its own (`expand=true` in a URL;
    /// `clients/vectors/CONFIG.md`), e.g. every ready pod behind a Kubernetes headless Service
    /// (`idgen-headless.ids.svc.cluster.local:7420`). Names are resolved at the first call
    /// (or by [`connect`](PoolBuilder::connect)) and again, at most once a second, when a node
    /// fails; TLS verifies the name given, never the address. Without it (the default) a name
    /// is one node, whose addresses are tried in turn when connecting.
    pub fn expand(mut self, on: bool) -> Self {
        self.expand = Some(on);
        self
    }

    /// Resolves names for [`expand`](PoolBuilder::expand) (tests).
    #[cfg(test)]
    pub(crate) fn resolver(mut self, r: Resolver) -> Self {
        self.resolver = Some(r);
        self
    }

    /// Receives the pool's [`Event`]s (several hooks are called in the order added).
    pub fn hook(mut self, hook: impl Hook) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// Takes nodes and settings from an `idgen://` or `idgens://` URL.
    pub fn url(self, url: &str) -> Result<Self, Error> {
        let c = ClientConfig::parse_url(url)?;
        self.with_config("the URL", c)
    }

    /// Takes nodes and settings from `IDGEN_NODES` and the `IDGEN_CLIENT_*` variables.
    pub fn from_env(self) -> Result<Self, Error> {
        let c = ClientConfig::from_env()?;
        self.with_config("the environment", c)
    }

    /// Takes nodes and settings from a [`ClientConfig`].
    pub fn config(self, c: ClientConfig) -> Result<Self, Error> {
        self.with_config("the configuration", c)
    }

    fn with_config(mut self, from: &'static str, c: ClientConfig) -> Result<Self, Error> {
        if let Some((before, _)) = &self.config {
            return Err(Error::InvalidArgument(format!(
                "nodes and settings from {from} after {before}: give them one way"
            )));
        }
        self.config = Some((from, c));
        Ok(self)
    }

    /// The nodes, options and transport, every setting from exactly one place.
    fn resolve(self) -> Result<Setup, Error> {
        let both = |what: &str, from: &str| {
            Err(Error::InvalidArgument(format!(
                "{what} given both in code and in {from}: give it one way"
            )))
        };
        let mut options = self.options;
        let mut nodes = self.nodes;
        #[cfg(feature = "tls")]
        let mut tls = self.tls;
        let mut connect_timeout = self.connect_timeout;
        let mut request_timeout = self.request_timeout;
        let mut expand = self.expand;
        if let Some((from, c)) = self.config {
            if !nodes.is_empty() {
                return both("nodes", from);
            }
            nodes = c.nodes.clone();
            if c.connect_timeout.is_some() {
                if connect_timeout.is_some() {
                    return both("connect_timeout", from);
                }
                connect_timeout = c.connect_timeout;
            }
            if c.request_timeout.is_some() {
                if request_timeout.is_some() {
                    return both("the request timeout", from);
                }
                request_timeout = c.request_timeout;
            }
            if c.expand {
                if expand.is_some() {
                    return both("expand", from);
                }
                expand = Some(true);
            }
            if c.tls {
                #[cfg(feature = "tls")]
                {
                    if tls.is_some() {
                        return both("TLS", from);
                    }
                    let mut b = TlsConfig::builder();
                    b = match &c.ca {
                        Some(ca) => b.ca_file(ca),
                        None => b.system_roots(),
                    };
                    if let (Some(cert), Some(key)) = (&c.cert, &c.key) {
                        b = b.client_cert_files(cert, key);
                    }
                    if let Some(name) = &c.server_name {
                        b = b.server_name(name);
                    }
                    tls = Some(b.build()?);
                }
                #[cfg(not(feature = "tls"))]
                return Err(Error::InvalidArgument(format!(
                    "TLS (from {from}) needs the idgen-client crate's `tls` feature"
                )));
            }
        }
        if let Some(d) = connect_timeout {
            options.connect_timeout = d;
        }
        if let Some(d) = request_timeout {
            options.request_timeout = d;
        }
        #[cfg(feature = "tls")]
        let transport = match tls {
            Some(t) => Transport::Tls(t),
            None => Transport::Plain,
        };
        #[cfg(not(feature = "tls"))]
        let transport = Transport::Plain;
        let expand = match expand {
            Some(true) => {
                let entries = nodes
                    .iter()
                    .map(|n| Entry::parse(n))
                    .collect::<Result<Vec<_>, _>>()?;
                let resolver = self.resolver.unwrap_or_else(expand::system_resolver);
                Some(Expand::new(entries, resolver))
            }
            _ => None,
        };
        Ok(Setup {
            nodes,
            options,
            transport,
            observer: Observer::new(self.hooks),
            expand,
        })
    }

    /// A pool that connects to each node at the first call that picks it: building it
    /// reaches no node (so a service starts while the cluster is unreachable, and fails its
    /// calls until it is not). Calls need a Tokio runtime; building does not.
    pub fn build(self) -> Result<Pool, Error> {
        Pool::lazy(self.resolve()?)
    }

    /// A pool connected to every node at once, as [`Pool::connect`]: fails if none answers.
    pub async fn connect(self) -> Result<Pool, Error> {
        Pool::connect_via(self.resolve()?).await
    }
}

/// What a pool is made of, every setting resolved.
struct Setup {
    nodes: Vec<String>,
    options: PoolOptions,
    transport: Transport,
    observer: Observer,
    expand: Option<Expand>,
}

impl Setup {
    fn plain(addrs: &[impl ToString], options: PoolOptions, transport: Transport) -> Setup {
        Setup {
            nodes: addrs.iter().map(ToString::to_string).collect(),
            options,
            transport,
            observer: Observer::default(),
            expand: None,
        }
    }
}

/// A snapshot of one node's health, from [`Pool::nodes`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The address dialed: as given to [`Pool::connect`], or (with
    /// [`expand`](PoolBuilder::expand)) one address its name resolved to.
    pub addr: String,
    /// The node as configured (`addr` itself without [`expand`](PoolBuilder::expand)).
    pub entry: String,
    /// Whether the pool holds an open connection to the node.
    pub connected: bool,
    /// How much longer the node is skipped (zero when it is healthy).
    pub down_for: Duration,
    /// Consecutive failures (reset by a success).
    pub failures: u32,
    /// The error of the last failure, if the node has failed since its last success.
    pub last_error: Option<Error>,
    /// Whether calls currently go to this node first.
    pub current: bool,
}

/// An async client over several idgen nodes, with health tracking and failover.
///
/// # Choosing a node: sticky
///
/// Every call goes to the *current* node, the one that answered the last successful call,
/// and stays there while it keeps answering. Sticky rather than round-robin because
/// one node easily serves an application's whole demand, all callers then share one
/// pipelined connection (fewer round trips, coalesced writes), and, as long as there is
/// no failover, the IDs every caller receives are strictly increasing (a connection's
/// IDs are). Round-robin would interleave IDs from different nodes on every call and
/// give up that order for no gain in throughput.
///
/// # Failover
///
/// When the current node fails a call, the pool marks it down and retries the **whole**
/// call on the next node in address order, trying each node at most once per call, all
/// within [`PoolOptions::call_deadline`]; the first node that answers becomes current.
/// A node counts as failed when it
///
/// * answers with a "try another node" status (`3xx` except `EXHAUSTED` and
///   `SEQUENCE_USED_UP`, e.g. `BUSY` or `SEQUENCE_UNAVAILABLE`; see
///   [`Error::is_unavailable`]),
/// * does not answer within [`PoolOptions::request_timeout`] ([`Error::Timeout`]),
/// * cannot be connected to, or drops or breaks the connection ([`Error::Io`],
///   [`Error::Closed`], [`Error::Protocol`], [`Error::UnexpectedResponse`]),
/// * fails the TLS handshake ([`Error::Tls`]: e.g. its certificate does not verify), or
/// * answers with a status that closes the connection (`1xx`, `5xx`).
///
/// A failed node is skipped for a backoff that starts at [`PoolOptions::backoff_min`]
/// and doubles with every consecutive failure up to [`PoolOptions::backoff_max`]; a
/// success resets it. Nodes in backoff are still tried, soonest-to-recover first, after
/// every healthy node has failed within a call, so a blip on every node at once does not
/// become an outage as long as the backoff. A dropped connection is re-established
/// lazily by the next call that picks the node. No background task probes nodes.
///
/// Errors that another node would repeat are returned at once, without failover and
/// without marking the node down: `2xx` statuses (the request itself is refused, e.g.
/// `INVALID_COUNT`, `UNKNOWN_SEQUENCE`), `EXHAUSTED` (the cluster's timestamp range has run
/// out) and `SEQUENCE_USED_UP` (the sequence is at its maximum), and the refusals made before
/// sending ([`Error::InvalidArgument`], [`Error::NodeVersion`]).
///
/// When every node has been tried, the call fails with the last node's error; when the
/// deadline runs out first, with [`Error::Timeout`].
///
/// # Batches are all or nothing
///
/// [`next_ids`](Pool::next_ids) returns exactly `n` IDs or an error, never fewer. A batch
/// that fails part-way on one node (including one split into several requests) is
/// discarded and asked for again, whole, on the next node. The discarded IDs are never
/// handed out, so failover leaves gaps in the ID space but can never duplicate an ID.
///
/// # Ordering
///
/// IDs from one call are strictly increasing. IDs from successive calls are increasing
/// while they come from one connection; after a failover (or a reconnect) they come from
/// another worker range and may be lower than earlier ones. They are always unique.
///
/// `Pool` is cheap to clone; clones share the nodes and their connections. Connections'
/// tasks run on the Tokio runtime the pool was created on.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use idgen_client::{Pool, PoolOptions};
///
/// # async fn run() -> Result<(), idgen_client::Error> {
/// let options = PoolOptions::default().call_deadline(Duration::from_secs(1));
/// let pool = Pool::connect(&["10.0.0.1:7420", "10.0.0.2:7420", "10.0.0.3:7420"], options).await?;
/// let id = pool.next_id().await?;
/// let batch = pool.next_ids(500).await?; // exactly 500, or an error
/// assert_eq!(batch.len(), 500);
/// println!("{id} issued at {} ms", pool.layout().decompose(id).unix_ms);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<Inner>,
    /// Prefetch buffers of dense sequences ([`Pool::with_sequence_prefetch`]); `None`: off.
    sequences: Option<Arc<Prefetch>>,
}

#[derive(Debug)]
struct Inner {
    options: PoolOptions,
    transport: Transport,
    /// The node list: replaced as a whole ([`PoolBuilder::expand`]), never changed in place.
    nodes: Mutex<Nodes>,
    /// Index of the node calls try first.
    current: AtomicUsize,
    /// The layout the first node that answered announced (unset while none has).
    layout: OnceLock<Layout>,
    observer: Observer,
    expand: Option<Expand>,
}

/// A snapshot of the node list.
type Nodes = Arc<[Arc<Node>]>;

fn new_node(m: Made) -> Arc<Node> {
    Arc::new(Node {
        addr: m.addr,
        entry: m.entry,
        origin: Origin {
            unresolved: m.unresolved,
            ..Origin::default()
        },
        state: Mutex::new(NodeState::default()),
        connecting: tokio::sync::Mutex::new(()),
    })
}

impl Inner {
    fn snapshot(&self) -> Nodes {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The node list a resolution of every entry makes from `old` (expand).
    async fn resolve(&self, old: &Nodes) -> Nodes {
        let Some(x) = &self.expand else {
            return old.clone();
        };
        let now = Instant::now();
        let made = x
            .resolve(
                old,
                |n| (n.addr.as_str(), n.entry.as_str(), &n.origin),
                |n| {
                    let s = n.lock();
                    s.client.as_ref().is_some_and(|c| !c.is_closed())
                        && s.down_until.is_none_or(|t| t <= now)
                },
                self.options.connect_timeout,
            )
            .await;
        made.into_iter()
            .map(|m| match m {
                Ok(i) => old[i].clone(),
                Err(m) => new_node(m),
            })
            .collect()
    }

    /// Makes `list` the node list (the current node stays current if it is in it); the
    /// nodes left out are retired.
    fn set_nodes(&self, list: Nodes) {
        let old = {
            let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            self.swap_in(&mut nodes, list.clone())
        };
        for n in old.iter() {
            if !list.iter().any(|m| Arc::ptr_eq(m, n)) {
                retire(n);
            }
        }
    }

    /// Drops `node` from the list (an address its name no longer resolves to, whose
    /// connection failed), unless it is the last node.
    fn remove(&self, node: &Node) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if nodes.len() < 2 || !nodes.iter().any(|n| std::ptr::eq(&**n, node)) {
            return;
        }
        let list: Nodes = nodes
            .iter()
            .filter(|n| !std::ptr::eq(&***n, node))
            .cloned()
            .collect();
        self.swap_in(&mut nodes, list);
        drop(nodes);
        retire(node);
    }

    /// Makes `list` the node list (`nodes`, locked by the caller), the current node staying
    /// current if it is in it; returns the list it replaces.
    fn swap_in(&self, nodes: &mut Nodes, list: Nodes) -> Nodes {
        let current = nodes.get(self.current.load(Ordering::Relaxed));
        let at = current
            .and_then(|c| list.iter().position(|n| Arc::ptr_eq(n, c)))
            .unwrap_or(0);
        self.current.store(at, Ordering::Relaxed);
        std::mem::replace(nodes, list)
    }
}

/// A node out of the list: its connection is dropped, and one made late is not kept.
fn retire(node: &Node) {
    node.origin.retired.store(true, Ordering::Relaxed);
    node.lock().client = None;
}

/// How a pool connects to its nodes.
#[derive(Debug, Clone)]
enum Transport {
    Plain,
    #[cfg(feature = "tls")]
    Tls(TlsConfig),
}

impl Transport {
    /// Connects to `node`'s address; TLS verifies its entry's name, never the address.
    async fn connect(&self, node: &Node, options: ClientOptions) -> Result<Client, Error> {
        if node.origin.unresolved {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: the name resolves to no address (expand)", node.entry),
            )
            .into());
        }
        match self {
            Transport::Plain => Client::connect_with(node.addr.as_str(), options).await,
            #[cfg(feature = "tls")]
            Transport::Tls(tls) => {
                let name = tls.server_name_for(&node.entry)?;
                Client::connect_tls_to(node.addr.as_str(), name, options, tls).await
            }
        }
    }
}

#[derive(Debug)]
struct Node {
    /// The address dialed.
    addr: String,
    /// The configured `host:port` it comes from (`addr` itself without expand).
    entry: String,
    origin: Origin,
    state: Mutex<NodeState>,
    /// Held while connecting, so concurrent callers make one connection, not many.
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct NodeState {
    client: Option<Client>,
    down_until: Option<Instant>,
    failures: u32,
    last_error: Option<Error>,
}

impl Node {
    fn lock(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether `e` says "this node failed; another node may well succeed": a status that says
/// "retry elsewhere" (`3xx` but `EXHAUSTED` and `SEQUENCE_USED_UP`) or closes the connection
/// (`1xx`, `5xx`), and every transport failure. Refusals another node would repeat (`2xx`,
/// `EXHAUSTED`, `SEQUENCE_USED_UP`) and the checks made before sending are not.
fn fails_over(e: &Error) -> bool {
    match e {
        Error::Server { status, .. } => status.retry_elsewhere() || status.closes_connection(),
        Error::InvalidArgument(_) | Error::NodeVersion { .. } => false,
        _ => true,
    }
}

impl Pool {
    /// Connect to every node in `addrs` at once (each within
    /// [`PoolOptions::connect_timeout`]) and return when all have answered or failed.
    ///
    /// Succeeds if at least one node completes the handshake; the others are marked down
    /// and retried lazily, when a call needs them after their backoff. Fails with the
    /// first node's error if none answers, or with an [`Error::Io`] of kind
    /// `InvalidInput` if `addrs` is empty. Addresses are `host:port` strings, resolved
    /// on every (re)connect.
    ///
    /// Must be called within a Tokio runtime (I/O and time enabled).
    pub async fn connect(addrs: &[impl ToString], options: PoolOptions) -> Result<Pool, Error> {
        Self::connect_via(Setup::plain(addrs, options, Transport::Plain)).await
    }

    /// A [`PoolBuilder`]: nodes and settings from code, an `idgen://` URL or the environment,
    /// hooks, and a pool that connects at once or at its first call.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// [`connect`](Pool::connect) over TLS: every node is dialed with
    /// [`Client::connect_tls`], so its certificate must chain to `tls`'s CA bundle and name
    /// the host part of its address (or `tls`'s server name).
    ///
    /// A node whose TLS handshake fails ([`Error::Tls`]: a certificate that does not verify,
    /// a client certificate it rejects) counts as failed like a node that cannot be
    /// connected to: the pool marks it down, backs off, and uses the other nodes.
    #[cfg(feature = "tls")]
    pub async fn connect_tls(
        addrs: &[impl ToString],
        options: PoolOptions,
        tls: &TlsConfig,
    ) -> Result<Pool, Error> {
        Self::connect_via(Setup::plain(addrs, options, Transport::Tls(tls.clone()))).await
    }

    /// A pool that has connected to nothing yet: each node is connected by the first call
    /// that picks it.
    fn lazy(setup: Setup) -> Result<Pool, Error> {
        if setup.nodes.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a pool needs at least one node address",
            )
            .into());
        }
        let made: Vec<Made> = match &setup.expand {
            Some(x) => x.placeholders(),
            None => setup
                .nodes
                .iter()
                .map(|a| Made {
                    addr: a.clone(),
                    entry: a.clone(),
                    unresolved: false,
                })
                .collect(),
        };
        let nodes: Nodes = made.into_iter().map(new_node).collect();
        Ok(Pool {
            inner: Arc::new(Inner {
                options: setup.options,
                transport: setup.transport,
                nodes: Mutex::new(nodes),
                current: AtomicUsize::new(0),
                layout: OnceLock::new(),
                observer: setup.observer,
                expand: setup.expand,
            }),
            sequences: None,
        })
    }

    async fn connect_via(setup: Setup) -> Result<Pool, Error> {
        let pool = Self::lazy(setup)?;
        let nodes = pool.node_list().await;
        let client_options = client_options(&pool.inner.options);
        let mut set = JoinSet::new();
        for (i, node) in nodes.iter().enumerate() {
            let node = node.clone();
            let transport = pool.inner.transport.clone();
            set.spawn(async move {
                let started = Instant::now();
                (
                    i,
                    transport.connect(&node, client_options).await,
                    started.elapsed(),
                )
            });
        }
        let mut results: Vec<Option<(Result<Client, Error>, Duration)>> = vec![None; nodes.len()];
        while let Some(joined) = set.join_next().await {
            if let Ok((i, r, took)) = joined {
                results[i] = Some((r, took));
            }
        }
        let mut first_error = None;
        for (i, r) in results.into_iter().enumerate() {
            let (r, took) = r.unwrap_or((Err(Error::Closed), Duration::ZERO));
            match r {
                Ok(client) => {
                    pool.connected(&nodes[i], &client, took);
                    nodes[i].lock().client = Some(client);
                }
                Err(e) => {
                    pool.inner.observer.emit(&Event::ConnectFailed {
                        node: &nodes[i].addr,
                        error: &e,
                        duration: took,
                    });
                    pool.node_failed(&nodes[i], &e);
                    first_error.get_or_insert(e);
                }
            }
        }
        if pool.inner.layout.get().is_none() {
            return Err(first_error.unwrap_or(Error::Closed));
        }
        let current = nodes
            .iter()
            .position(|n| n.lock().client.is_some())
            .unwrap_or(0);
        pool.inner.current.store(current, Ordering::Relaxed);
        Ok(pool)
    }

    /// The node list now, resolving it first if it never was ([`PoolBuilder::expand`]).
    async fn node_list(&self) -> Nodes {
        if let Some(x) = &self.inner.expand {
            x.first
                .get_or_init(|| async {
                    let old = self.inner.snapshot();
                    let list = self.inner.resolve(&old).await;
                    self.inner.set_nodes(list);
                    x.resolved();
                })
                .await;
        }
        self.inner.snapshot()
    }

    /// After `node` failed (expand): drops it if its name no longer resolves to it, and
    /// resolves again in the background unless that ran less than a second ago.
    fn re_resolve(&self, node: &Node) {
        let Some(x) = &self.inner.expand else {
            return;
        };
        if node.origin.gone.load(Ordering::Relaxed) {
            self.inner.remove(node);
        }
        if !x.due() {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let old = inner.snapshot();
            let list = inner.resolve(&old).await;
            if let Some(x) = &inner.expand {
                x.resolved();
            }
            inner.set_nodes(list);
        });
    }

    /// A connection to `node` is up: learn the layout, tell the hooks.
    fn connected(&self, node: &Node, client: &Client, took: Duration) {
        let _ = self.inner.layout.set(client.layout());
        self.inner.observer.emit(&Event::Connect {
            node: &node.addr,
            version: client.hello().version,
            duration: took,
        });
    }

    /// Marks `node` down after `e`, telling the hooks.
    fn node_failed(&self, node: &Node, e: &Error) {
        let backoff = mark_down(node, &self.inner.options, e.clone());
        self.inner.observer.emit(&Event::NodeDown {
            node: &node.addr,
            reason: e,
            backoff,
        });
        self.re_resolve(node);
    }

    /// One ID, with failover (see the type's docs).
    pub async fn next_id(&self) -> Result<u64, Error> {
        self.call("ids", 1, |client| async move { client.next_id().await })
            .await
    }

    /// Exactly `n` IDs, strictly increasing, all from one node, with failover of the
    /// whole batch (see the type's docs). `n == 0` is [`Error::InvalidArgument`], no node
    /// asked (as in every idgen client).
    pub async fn next_ids(&self, n: u32) -> Result<Vec<u64>, Error> {
        crate::client::check_id_count(n)?;
        self.call("ids", n.into(), move |client| async move {
            client.next_ids(n).await
        })
        .await
    }

    /// `n` IDs with [`IdOptions`] (protocol version 5; see [`Client::next_ids_with`]). With
    /// only `after`, from whichever node answers, with failover. With an idempotency key, from
    /// the one node the key picks (FNV-1a 64 of its bytes, modulo the number of nodes, in
    /// the order given): the node's table is what makes a retry get the same IDs, so a keyed
    /// call never fails over. If that node cannot answer, the call fails with its error;
    /// retrying the call elsewhere (without the key, or on another pool) gets new IDs.
    pub async fn next_ids_with(&self, n: u32, options: &IdOptions) -> Result<Vec<u64>, Error> {
        crate::client::check_id_count(n)?;
        let order = self.order_for(options).await;
        let got = self
            .call_in(
                order.clone(),
                "ids_with",
                n.into(),
                move |client| async move { client.next_ids_with(n, options).await },
            )
            .await;
        self.keyed(options, &order, got)
    }

    /// `n` IDs masked by the node (see [`Client::next_masked_ids`]), routed like
    /// [`next_ids_with`](Pool::next_ids_with).
    pub async fn next_masked_ids(&self, n: u32, options: &IdOptions) -> Result<MaskedIds, Error> {
        crate::client::check_id_count(n)?;
        let order = self.order_for(options).await;
        let got = self
            .call_in(
                order.clone(),
                "masked_ids",
                n.into(),
                move |client| async move { client.next_masked_ids(n, options).await },
            )
            .await;
        self.keyed(options, &order, got)
    }

    /// A keyed call's failure that would have failed over, said as [`Error::KeyNodeFailed`]:
    /// it was not tried elsewhere.
    fn keyed<T>(
        &self,
        options: &IdOptions,
        order: &Order,
        got: Result<T, Error>,
    ) -> Result<T, Error> {
        match (got, &options.idempotency_key, order.first()) {
            (Err(e), Some(_), Some((_, node))) if fails_over(&e) => Err(Error::KeyNodeFailed {
                node: node.addr.clone(),
                cause: Box::new(e),
            }),
            (got, _, _) => got,
        }
    }

    /// The nodes a call with `options` may try: the one its idempotency key picks, or all.
    async fn order_for(&self, options: &IdOptions) -> Order {
        let nodes = self.node_list().await;
        match &options.idempotency_key {
            Some(key) => {
                let i = key_node(key, nodes.len());
                vec![(i, nodes[i].clone())]
            }
            None => order(
                &nodes,
                self.inner.current.load(Ordering::Relaxed),
                Instant::now(),
            ),
        }
    }

    /// One version 7 UUID, with failover. See [`next_uuids`](Pool::next_uuids).
    pub async fn next_uuid(&self) -> Result<uuid::Uuid, Error> {
        self.call("uuids", 1, |client| async move { client.next_uuid().await })
            .await
    }

    /// Exactly `n` RFC 9562 version 7 UUIDs, strictly increasing, all from one node (protocol
    /// version 4; see [`Client::next_uuids`]), with failover of the whole batch like
    /// [`next_ids`](Pool::next_ids).
    ///
    /// `n == 0` is [`Error::InvalidArgument`], no node asked. A node that negotiated a version
    /// below 4 answers [`Error::NodeVersion`] at once, nothing sent and no other node tried
    /// (as for [`next_values`](Pool::next_values)): a cluster's nodes are upgraded together.
    pub async fn next_uuids(&self, n: u32) -> Result<Vec<uuid::Uuid>, Error> {
        crate::client::check_uuid_count(n)?;
        self.call("uuids", n.into(), move |client| async move {
            client.next_uuids(n).await
        })
        .await
    }

    /// The next value of the named sequence, with failover. See
    /// [`next_values`](Pool::next_values).
    pub async fn next_value(&self, name: &str) -> Result<u64, Error> {
        let values = self.next_values(name, 1).await?;
        values.first().copied().ok_or_else(|| {
            // Unreachable: the count is checked.
            Error::UnexpectedResponse(format!("no value in a one-value answer for {name}"))
        })
    }

    /// `n` values of the named sequence, strictly increasing, each in `1 ..= 2^63 - 1`, from
    /// one node (protocol version 3), with failover.
    ///
    /// The name and `n` are checked before anything is sent, as by
    /// [`Client::next_values`] ([`Error::InvalidArgument`]; `n` against the `max_batch` of
    /// the node asked). The call goes to the current node and fails over like
    /// [`next_ids`](Pool::next_ids): `SEQUENCE_UNAVAILABLE`, `BUSY`, the other "retry
    /// elsewhere" statuses, timeouts and broken connections mark the node down and ask the
    /// next one. Returned at once, the node staying healthy: `UNKNOWN_SEQUENCE`,
    /// `INVALID_SEQUENCE_NAME`, `SEQUENCE_USED_UP` and the other `2xx` statuses (every node
    /// would answer the same), and [`Error::NodeVersion`] from a node that negotiated version
    /// 1 or 2 (no other node is tried for it).
    ///
    /// A retried call asks again: values are never re-sent, so a retry cannot duplicate a
    /// value (what the failed node reserved for the call is a gap). Values of a dense
    /// sequence from different nodes interleave; a strict sequence's values follow the
    /// real-time order of the calls across nodes.
    pub async fn next_values(&self, name: &str, n: u32) -> Result<Vec<u64>, Error> {
        let name = sequence::check_name(name)?;
        sequence::check_count(n)?;
        match &self.sequences {
            None => Ok(self.fetch_values(name, n, n).await?.values),
            Some(prefetch) => {
                let call = prefetch.take(name, n, |need, want| self.fetch_values(name, need, want));
                tokio::time::timeout(self.inner.options.call_deadline, call)
                    .await
                    .unwrap_or(Err(Error::Timeout))
            }
        }
    }

    /// A pool on the same nodes and connections whose calls on **dense** sequences are
    /// answered from per-name buffers of values fetched `k` at a time, each refill one
    /// failover call; `k == 0` turns prefetch off. Clones of the returned pool share its
    /// buffers; this pool keeps its own. The rules and costs are
    /// [`Client::with_sequence_prefetch`]'s; after a failover the buffered values of the old
    /// node that are above the new node's are dropped (a gap), so each buffer still hands
    /// out increasing values.
    pub fn with_sequence_prefetch(&self, k: u32) -> Pool {
        Pool {
            inner: self.inner.clone(),
            sequences: (k > 0).then(|| Arc::new(Prefetch::new(k))),
        }
    }

    /// The `k` of [`with_sequence_prefetch`](Pool::with_sequence_prefetch); 0 when off.
    pub fn sequence_prefetch(&self) -> u32 {
        self.sequences.as_ref().map_or(0, |p| p.k())
    }

    /// One GET_VALUES of at least `need` and at most `want` values, with failover.
    async fn fetch_values(
        &self,
        name: idgen_protocol::SeqName,
        need: u32,
        want: u32,
    ) -> Result<Fetched, Error> {
        self.call("values", want.into(), move |client| async move {
            client.fetch_values(name, need, want).await
        })
        .await
    }

    /// The ID layout of the cluster (as announced by the first node that answered; every node
    /// of a cluster has the same one).
    ///
    /// # Panics
    ///
    /// On a pool made by [`PoolBuilder::build`] (which connects at the first call) before any
    /// node has answered: use [`known_layout`](Pool::known_layout) or
    /// [`fetch_layout`](Pool::fetch_layout) there. A pool made by [`Pool::connect`] or
    /// [`PoolBuilder::connect`] always knows it.
    pub fn layout(&self) -> Layout {
        self.known_layout()
            .expect("the layout of a pool no node has answered yet: use fetch_layout()")
    }

    /// The ID layout, once a node has answered (see [`layout`](Pool::layout)).
    pub fn known_layout(&self) -> Option<Layout> {
        self.inner.layout.get().copied()
    }

    /// The ID layout, connecting to a node (with failover) if none has answered yet.
    pub async fn fetch_layout(&self) -> Result<Layout, Error> {
        if let Some(l) = self.known_layout() {
            return Ok(l);
        }
        self.call("ping", 0, |client| async move { Ok(client.layout()) })
            .await
    }

    /// The options this pool was made with.
    pub fn options(&self) -> &PoolOptions {
        &self.inner.options
    }

    /// Each node's health, in address order (with [`expand`](PoolBuilder::expand): in the
    /// order of the last resolution).
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let now = Instant::now();
        let current = self.inner.current.load(Ordering::Relaxed);
        self.inner
            .snapshot()
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let s = node.lock();
                NodeInfo {
                    addr: node.addr.clone(),
                    entry: node.entry.clone(),
                    connected: s.client.as_ref().is_some_and(|c| !c.is_closed()),
                    down_for: s
                        .down_until
                        .map_or(Duration::ZERO, |t| t.saturating_duration_since(now)),
                    failures: s.failures,
                    last_error: s.last_error.clone(),
                    current: i == current,
                }
            })
            .collect()
    }

    /// Run `op` on one node after another until one succeeds, an error that failover
    /// cannot help comes back, every node has been tried, or the deadline passes.
    async fn call<T, F, Fut>(&self, name: &'static str, count: u64, op: F) -> Result<T, Error>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let nodes = self.node_list().await;
        let current = self.inner.current.load(Ordering::Relaxed);
        self.call_in(order(&nodes, current, Instant::now()), name, count, op)
            .await
    }

    /// [`call`](Self::call) over the nodes `order` names, in that order.
    async fn call_in<T, F, Fut>(
        &self,
        order: Order,
        name: &'static str,
        count: u64,
        op: F,
    ) -> Result<T, Error>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let start = Instant::now();
        let (got, node) = self.attempts(order, name, op).await;
        let observer = &self.inner.observer;
        observer.emit(&Event::Request {
            op: name,
            count,
            node: node.as_deref().map(|n| n.addr.as_str()),
            duration: start.elapsed(),
            error: got.as_ref().err(),
        });
        got
    }

    /// The attempts of one call, and the node that answered it (if one did).
    async fn attempts<T, F, Fut>(
        &self,
        order: Order,
        name: &'static str,
        op: F,
    ) -> (Result<T, Error>, Option<Arc<Node>>)
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let options = &self.inner.options;
        let start = Instant::now();
        // The node that failed last, and why: the next node tried is its failover.
        let mut failed: Option<(Arc<Node>, Error)> = None;
        let deadline = start + options.call_deadline;
        let mut last = None;
        for (i, node) in order {
            let now = Instant::now();
            if now >= deadline {
                return (Err(Error::Timeout), None);
            }
            let node = &node;
            if let Some((from, reason)) = failed.take() {
                self.inner.observer.emit(&Event::Failover {
                    from: &from.addr,
                    to: &node.addr,
                    reason: &reason,
                });
            }
            let attempt = || async {
                let client = self.client(node).await?;
                op(client).await
            };
            // Connect and request carry their own timeouts; this caps them by the
            // time left in the call.
            let mut outcome = tokio::time::timeout(deadline - now, attempt())
                .await
                .unwrap_or(Err(Error::Timeout));
            if matches!(&outcome, Err(Error::Server { status, .. }) if *status == Status::RANGE_CHANGED)
            {
                // The node took another worker range since this connection's HELLO_OK and
                // closed it: it is healthy, and a new connection learns the new range. Ask it
                // again at once, once.
                forget_client(node);
                let now = Instant::now();
                if now < deadline {
                    outcome = tokio::time::timeout(deadline - now, attempt())
                        .await
                        .unwrap_or(Err(Error::Timeout));
                }
            }
            if let Err(Error::Server { status, message }) = &outcome {
                self.inner.observer.emit(&Event::Refused {
                    node: &node.addr,
                    op: name,
                    status: *status,
                    message,
                });
            }
            match outcome {
                Ok(v) => {
                    if mark_up(node) {
                        self.inner
                            .observer
                            .emit(&Event::NodeUp { node: &node.addr });
                    }
                    self.inner.current.store(i, Ordering::Relaxed);
                    return (Ok(v), Some(node.clone()));
                }
                Err(e) if !fails_over(&e) => return (Err(e), Some(node.clone())),
                Err(e) => {
                    self.node_failed(node, &e);
                    failed = Some((node.clone(), e.clone()));
                    last = Some(e);
                }
            }
        }
        if Instant::now() >= deadline {
            return (Err(Error::Timeout), None);
        }
        (Err(last.unwrap_or(Error::Timeout)), None)
    }

    /// The node's open connection, connecting first if it has none (or a failed one).
    async fn client(&self, node: &Node) -> Result<Client, Error> {
        if let Some(c) = open_client(node) {
            return Ok(c);
        }
        let _connecting = node.connecting.lock().await;
        // Someone else may have connected while we waited.
        if let Some(c) = open_client(node) {
            return Ok(c);
        }
        let started = Instant::now();
        let client = match self
            .inner
            .transport
            .connect(node, client_options(&self.inner.options))
            .await
        {
            Ok(c) => c,
            Err(e) => {
                self.inner.observer.emit(&Event::ConnectFailed {
                    node: &node.addr,
                    error: &e,
                    duration: started.elapsed(),
                });
                return Err(e);
            }
        };
        self.connected(node, &client, started.elapsed());
        if !node.origin.retired.load(Ordering::Relaxed) {
            node.lock().client = Some(client.clone());
        }
        Ok(client)
    }
}

/// The nodes one call tries, in order, each with its index in the list it comes from.
type Order = Vec<(usize, Arc<Node>)>;

/// The order in which one call tries `nodes`: healthy nodes from the current one on, in
/// list order; then nodes in backoff, soonest-to-recover first.
fn order(nodes: &Nodes, current: usize, now: Instant) -> Order {
    let n = nodes.len();
    let start = current % n.max(1);
    let mut healthy = Vec::with_capacity(n);
    let mut down = Vec::new();
    for k in 0..n {
        let i = (start + k) % n;
        match nodes[i].lock().down_until {
            Some(t) if t > now => down.push((t, i)),
            _ => healthy.push(i),
        }
    }
    down.sort();
    healthy
        .into_iter()
        .chain(down.into_iter().map(|(_, i)| i))
        .map(|i| (i, nodes[i].clone()))
        .collect()
}

/// The node an idempotency key goes to: FNV-1a 64 of its bytes, modulo the number of nodes
/// (the same in every idgen client, so keys spread the same way whatever the language).
pub(crate) fn key_node(key: &str, nodes: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % nodes.max(1) as u64) as usize
}

fn open_client(node: &Node) -> Option<Client> {
    let mut s = node.lock();
    match &s.client {
        Some(c) if !c.is_closed() => Some(c.clone()),
        Some(_) => {
            s.client = None;
            None
        }
        None => None,
    }
}

fn forget_client(node: &Node) {
    node.lock().client = None;
}

fn client_options(options: &PoolOptions) -> ClientOptions {
    ClientOptions {
        connect_timeout: options.connect_timeout,
        request_timeout: options.request_timeout,
    }
}

/// Marks `node` healthy; whether it had failed.
fn mark_up(node: &Node) -> bool {
    let mut s = node.lock();
    let was_down = s.failures > 0;
    s.down_until = None;
    s.failures = 0;
    s.last_error = None;
    was_down
}

/// Marks `node` down for its next backoff, which it returns.
fn mark_down(node: &Node, options: &PoolOptions, cause: Error) -> Duration {
    let mut s = node.lock();
    s.failures = s.failures.saturating_add(1);
    let backoff = backoff(options, s.failures);
    s.down_until = Some(Instant::now() + backoff);
    if cause.closes_connection() {
        // Make the next use reconnect even if the client has not noticed yet.
        s.client = None;
    }
    s.last_error = Some(cause);
    backoff
}

/// `backoff_min · 2^(failures-1)`, at most `backoff_max`.
fn backoff(options: &PoolOptions, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(30);
    options
        .backoff_min
        .saturating_mul(1u32 << doublings)
        .min(options.backoff_max)
        .max(options.backoff_min.min(options.backoff_max))
}

#[cfg(test)]
mod tests {
    use super::*;

    mod expand {
        use super::*;
        use std::collections::HashMap;
        use std::net::IpAddr;

        use idgen_testkit::fake::{Config, FakeServer};

        /// A resolver answering from a table the test changes, counting lookups.
        #[derive(Clone, Default)]
        struct Table(Arc<Mutex<Answers>>);

        /// The answer for each host, and how many lookups there were.
        type Answers = (HashMap<String, Vec<IpAddr>>, usize);

        impl Table {
            fn set(&self, host: &str, ips: &[&str]) {
                let ips = ips.iter().map(|s| s.parse().unwrap()).collect();
                self.0.lock().unwrap().0.insert(host.into(), ips);
            }
            fn lookups(&self) -> usize {
                self.0.lock().unwrap().1
            }
            fn resolver(&self) -> Resolver {
                let t = self.clone();
                Arc::new(move |host: String| {
                    let mut g = t.0.lock().unwrap();
                    g.1 += 1;
                    let got = g.0.get(&host).cloned().unwrap_or_default();
                    Box::pin(async move {
                        if got.is_empty() {
                            Err(std::io::Error::new(
                                std::io::ErrorKind::NotFound,
                                "no such host",
                            ))
                        } else {
                            Ok(got)
                        }
                    })
                })
            }
        }

        async fn fake_at(ip: &str, port: u16, k: u64) -> FakeServer {
            FakeServer::start(Config {
                listen: Some(ip.parse().unwrap()),
                port,
                first_seq: k << 40,
                ..Config::default()
            })
            .await
        }

        fn addrs(pool: &Pool) -> Vec<String> {
            pool.nodes().into_iter().map(|n| n.addr).collect()
        }

        fn slow_backoff(b: PoolBuilder) -> PoolBuilder {
            b.backoff(Duration::from_secs(10), Duration::from_secs(10))
        }

        /// Each address is a node, in the resolver's order with duplicates removed (a literal
        /// entry too); a failing node re-resolves the name at most once a second, adding
        /// what appeared and dropping what is gone.
        #[tokio::test]
        async fn each_address_is_a_node_and_a_failure_resolves_again() {
            let a = fake_at("127.0.0.2", 0, 1).await;
            let port = a.addr.port();
            let b = fake_at("127.0.0.3", port, 2).await;
            let table = Table::default();
            table.set(
                "idgen-headless.test",
                &["127.0.0.2", "127.0.0.3", "127.0.0.2"],
            );
            let entry = format!("idgen-headless.test:{port}");
            let pool = slow_backoff(Pool::builder())
                .nodes([entry.clone(), format!("127.0.0.3:{port}")])
                .expand(true)
                .resolver(table.resolver())
                .build()
                .unwrap();
            assert_eq!(table.lookups(), 0, "building resolves nothing");
            pool.next_ids(2).await.unwrap();
            assert_eq!(addrs(&pool), [a.addr.to_string(), b.addr.to_string()]);
            assert!(
                pool.nodes().iter().all(|n| n.entry == entry),
                "{:?}",
                pool.nodes()
            );
            assert_eq!(table.lookups(), 1);
            assert!(
                a.control.ids_served() > 0,
                "the first address answers first"
            );

            // a goes away from the name and dies; a new pod c appears.
            let c = fake_at("127.0.0.4", port, 3).await;
            table.set("idgen-headless.test", &["127.0.0.3", "127.0.0.4"]);
            tokio::time::sleep(crate::expand::RESOLVE_EVERY + Duration::from_millis(100)).await;
            a.control.kill();
            for _ in 0..20 {
                pool.next_ids(1).await.unwrap();
            }
            let want = [b.addr.to_string(), c.addr.to_string()];
            let deadline = Instant::now() + Duration::from_secs(5);
            while addrs(&pool) != want {
                assert!(
                    Instant::now() < deadline,
                    "nodes {:?}, want {want:?}",
                    addrs(&pool)
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(table.lookups(), 2, "one failure, one resolution");
            // c serves when b fails.
            b.control.kill();
            let served = c.control.ids_served();
            pool.next_ids(1).await.unwrap();
            assert!(c.control.ids_served() > served);
        }

        /// A name that resolves to nothing is a node that is down, not an error: the other
        /// nodes serve, and the name is looked up again after a failure.
        #[tokio::test]
        async fn a_name_without_addresses_is_a_node_that_is_down() {
            let b = fake_at("127.0.0.3", 0, 1).await;
            let port = b.addr.port();
            let table = Table::default();
            let pool = slow_backoff(Pool::builder())
                .nodes([format!("nothing.test:{port}"), format!("127.0.0.3:{port}")])
                .expand(true)
                .resolver(table.resolver())
                .connect()
                .await
                .unwrap();
            let nodes = pool.nodes();
            assert_eq!(nodes.len(), 2);
            assert_eq!(nodes[0].addr, format!("nothing.test:{port}"));
            assert!(nodes[0].down_for > Duration::ZERO, "{nodes:?}");
            let err = nodes[0].last_error.as_ref().expect("an error");
            assert!(err.to_string().contains("resolves to no address"), "{err}");
            pool.next_ids(3).await.unwrap();
            // The name gets an address; the next failure's resolution finds it.
            let a = fake_at("127.0.0.2", port, 2).await;
            table.set("nothing.test", &["127.0.0.2"]);
            tokio::time::sleep(crate::expand::RESOLVE_EVERY + Duration::from_millis(100)).await;
            b.control.kill();
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let _ = pool.next_ids(1).await;
                if a.control.ids_served() > 0 {
                    break;
                }
                assert!(Instant::now() < deadline, "nodes {:?}", pool.nodes());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(addrs(&pool)[0], a.addr.to_string());
        }

        /// TLS verifies (and sends as SNI) the name given, never the address dialed.
        #[cfg(feature = "tls")]
        #[tokio::test]
        async fn tls_verifies_the_name_not_the_address() {
            use idgen_testkit::fake::ServerTls;
            use idgen_testkit::{TestCa, Validity};
            let ca = TestCa::new("idgen test ca");
            let cert = ca.server_for(&["idgen-headless.test"], Validity::Current, "headless");
            let server = FakeServer::start(Config {
                listen: Some("127.0.0.2".parse().unwrap()),
                tls: Some(ServerTls::new(&cert)),
                ..Config::default()
            })
            .await;
            let table = Table::default();
            table.set("idgen-headless.test", &["127.0.0.2"]);
            let pool = Pool::builder()
                .node(format!("idgen-headless.test:{}", server.addr.port()))
                .expand(true)
                .resolver(table.resolver())
                .tls(TlsConfig::builder().ca_file(&ca.ca).build().unwrap())
                .build()
                .unwrap();
            assert_eq!(pool.next_ids(2).await.unwrap().len(), 2);
            assert_eq!(addrs(&pool), [server.addr.to_string()]);
        }

        #[test]
        fn expand_comes_from_one_place() {
            let both = Pool::builder()
                .url("idgen://idgen-headless.test:7420?expand=true")
                .unwrap()
                .expand(true)
                .build();
            assert!(matches!(both, Err(Error::InvalidArgument(m)) if m.contains("expand")));
            let bad = Pool::builder()
                .node("idgen-headless.test")
                .expand(true)
                .build();
            assert!(matches!(bad, Err(Error::InvalidArgument(m)) if m.contains("host:port")));
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let o = PoolOptions::default();
        let ms = |f| backoff(&o, f).as_millis();
        assert_eq!(
            (1..=8).map(ms).collect::<Vec<_>>(),
            [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
        );
        assert_eq!(ms(u32::MAX), 10_000);
    }

    #[test]
    fn caller_errors_do_not_fail_over() {
        let server = |code| Error::Server {
            status: Status(code),
            message: String::new(),
        };
        for code in [200, 201, 202, 203, 204, 299, 304, 307] {
            assert!(!fails_over(&server(code)), "{code}");
        }
        for code in [100, 300, 301, 302, 303, 305, 306, 308, 399, 400, 500, 600] {
            assert!(fails_over(&server(code)), "{code}");
        }
        assert!(fails_over(&Error::Timeout) && fails_over(&Error::Closed));
        assert!(!fails_over(&Error::InvalidArgument("n".into())));
        assert!(!fails_over(&Error::NodeVersion {
            version: 2,
            required: 3
        }));
    }
}

#[cfg(test)]
mod key_tests {
    use super::key_node;

    /// The FNV-1a 64 choices every client makes the same way (fixed expectations: a change
    /// of hash would send retries of one key to another node in a mixed fleet).
    #[test]
    fn a_key_picks_its_node_by_fnv1a() {
        assert_eq!(key_node("", 3), (0xcbf2_9ce4_8422_2325u64 % 3) as usize);
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(key_node("a", 7), (0xaf63_dc4c_8601_ec8cu64 % 7) as usize);
        assert_eq!(key_node("a", 1), 0);
        assert_eq!(key_node("order-42", 5), key_node("order-42", 5));
        let spread: std::collections::HashSet<usize> =
            (0..100).map(|i| key_node(&format!("k{i}"), 4)).collect();
        assert_eq!(spread.len(), 4);
    }
}
