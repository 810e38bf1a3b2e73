//! Rust client for idgen, the 64-bit time-ordered unique ID service.
//!
//! What to use:
//!
//! | you have | use |
//! |---|---|
//! | several nodes (production) | [`Pool`]: health-aware failover, all-or-nothing batches |
//! | many single IDs per second | [`PrefetchPool`]: a [`Pool`] plus a local buffer refilled in the background |
//! | counters (order or invoice numbers) | named sequences: [`Pool::next_value`], [`Pool::next_values`] (and on [`Client`], [`blocking`]) |
//! | one node, full control | [`Client`]: one pipelined connection, no reconnect |
//! | no async runtime | [`blocking::Pool`], [`blocking::PrefetchPool`], [`blocking::Client`] |
//! | IDs to print, parse or sort as text | [`forms`]: decimal, base62, Crockford base32 |
//! | IDs to show the public | [`mask`]: FF1 encryption (AES) that hides time and worker, never colliding |
//! | nodes on a TLS listener | [`TlsConfig`] and the `connect_tls` constructors (feature `tls`) |
//!
//! # Several nodes
//!
//! ```no_run
//! use std::time::Duration;
//! use idgen_client::{Pool, PoolOptions, PrefetchOptions, PrefetchPool};
//!
//! # async fn run() -> Result<(), idgen_client::Error> {
//! let nodes = ["10.0.0.1:7420", "10.0.0.2:7420", "10.0.0.3:7420"];
//! let options = PoolOptions::default().call_deadline(Duration::from_millis(500));
//! // Succeeds if any node answers; the others are retried when needed.
//! let pool = Pool::connect(&nodes, options).await?;
//! let id = pool.next_id().await?;
//! let batch = pool.next_ids(1000).await?; // exactly 1000 IDs, or an error
//!
//! // Single IDs without a round trip each.
//! let ids = PrefetchPool::new(pool.clone(), PrefetchOptions::default());
//! let fast = ids.next_id().await?;
//! # let _ = (id, batch, fast);
//! # Ok(())
//! # }
//! ```
//!
//! A [`Pool`] sends every call to one node at a time (sticky) and, when that node answers
//! "unavailable" (`3xx`), times out, or drops or breaks the connection, marks it down for
//! an exponential backoff and retries the whole call on the next node, each node at most
//! once per call, within one deadline. Refusals that another node would repeat (`2xx`,
//! `EXHAUSTED`, `SEQUENCE_USED_UP`) are returned at once. Failover leaves gaps in the ID space, never
//! duplicates. See [`Pool`] for the exact rules and [`PrefetchPool`] for what prefetching
//! costs (IDs age in the buffer) and which ordering remains.
//!
//! # Named sequences
//!
//! A named sequence is a counter the cluster keeps (protocol version 3), created by an
//! operator with `idgen seq create NAME [--mode dense|strict]`. Its values are `u64`s in
//! `1 ..= 2^63 - 1` (each fits an `i64`), strictly increasing within a call.
//!
//! ```no_run
//! use idgen_client::{Pool, PoolOptions};
//!
//! # async fn run() -> Result<(), idgen_client::Error> {
//! let pool = Pool::connect(&["10.0.0.1:7420", "10.0.0.2:7420"], PoolOptions::default()).await?;
//! let order = pool.next_value("orders").await?;
//! let lines = pool.next_values("invoice.lines", 10).await?;
//! // Dense sequences from a local buffer, 100 values per round trip.
//! let buffered = pool.with_sequence_prefetch(100);
//! let next = buffered.next_value("orders").await?;
//! # let _ = (order, lines, next);
//! # Ok(())
//! # }
//! ```
//!
//! The name and count are checked before sending ([`Error::InvalidArgument`]); a node that
//! negotiated version 1 or 2 fails the call with [`Error::NodeVersion`]; the node's refusals
//! are [`Error::Server`] (`UNKNOWN_SEQUENCE`, `SEQUENCE_USED_UP`, ...). See
//! [`Client::next_values`], [`Pool::next_values`] for failover and
//! [`Client::with_sequence_prefetch`] for prefetch (dense sequences only) and its costs.
//!
//! # TLS and mutual TLS
//!
//! With the feature `tls` (on by default) every constructor has a `connect_tls` twin
//! ([`Client::connect_tls`], [`Pool::connect_tls`], [`PrefetchPool::connect_tls`] and the
//! [`blocking`] ones) that takes a [`TlsConfig`]: the CA bundle to verify nodes against and,
//! for nodes that require mutual TLS, a client certificate and key.
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # async fn run() -> Result<(), idgen_client::Error> {
//! use idgen_client::{Pool, PoolOptions, TlsConfig};
//!
//! let tls = TlsConfig::builder()
//!     .ca_file("/etc/idgen/tls/ca.crt")
//!     .client_cert_files("/etc/idgen/tls/client.crt", "/etc/idgen/tls/client.key")
//!     .build()?;
//! let pool = Pool::connect_tls(&["id-1.internal:7420", "id-2.internal:7420"], PoolOptions::default(), &tls).await?;
//! let id = pool.next_id().await?;
//! # let _ = id;
//! # Ok(())
//! # }
//! ```
//!
//! The node's certificate must chain to the bundle and name the host dialed (or the name
//! given with [`TlsConfigBuilder::server_name`]); this cannot be turned off. A failed
//! handshake is an [`Error::Tls`] whose [`TlsErrorKind`] names the cause, and a [`Pool`]
//! fails over from such a node as from one that is down. See the [`tls`] module.
//!
//! # Text forms and masking
//!
//! ```
//! use idgen_client::{forms, mask::{Keyring, DEFAULT_WIDTH}};
//!
//! let id = 123_456_789_012_345_678;
//! assert_eq!(forms::to_base62(id).unwrap(), "097Qs0B7n2M");
//! assert_eq!(forms::parse_base32("03DMV9EK31WTE").unwrap(), id);
//!
//! let ring = Keyring::parse("1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f").unwrap();
//! let public = ring.mask_str(id, DEFAULT_WIDTH).unwrap(); // 12 characters, names key 1
//! assert_eq!(ring.unmask_str(&public, DEFAULT_WIDTH).unwrap(), id);
//! ```
//!
//! Keys come from a file or `IDGEN_MASK_KEYS`, never from code: see [`mask`].
//!
//! # One connection: `Client`
//!
//! A [`Client`] holds one TCP connection to an idgen node and is shared by any number of
//! callers (it is `Clone + Send + Sync`, and cloning is cheap). Calls are multiplexed and
//! pipelined on the connection: everything queued at a moment goes out in one write, and
//! answers are matched to callers by position, as the protocol answers strictly in order.
//! Requests larger than the server's `max_batch` are split and re-joined transparently.
//! All framing is the [`idgen_protocol`] crate's; the wire format is its `PROTOCOL.md`.
//!
//! IDs from one connection are strictly increasing, so the IDs each caller receives are
//! increasing. [`Client::layout`] takes an ID apart into time, worker, region and sequence.
//!
//! Non-async code uses [`blocking::Client`], which has the same methods.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use idgen_client::{Client, ClientOptions, Error};
//!
//! # async fn run() -> Result<(), Error> {
//! let options = ClientOptions {
//!     request_timeout: Duration::from_secs(2),
//!     ..ClientOptions::default()
//! };
//! let client = Client::connect_with("127.0.0.1:7420", options).await?;
//! println!("max batch {}", client.hello().max_batch);
//!
//! let id = client.next_id().await?;
//! let parts = client.layout().decompose(id);
//! println!("{id}: issued at {} ms, worker {}", parts.unix_ms, parts.worker);
//! // The IDs of the last minute, for a range query: lo <= id < hi.
//! let b = client.layout().bounds(parts.unix_ms - 60_000, parts.unix_ms + 1).expect("bounds");
//! println!("WHERE id >= {} AND id < {}", b.lo, b.hi);
//!
//! // Clones share the connection; their requests are pipelined on it.
//! let other = client.clone();
//! let batch = tokio::spawn(async move { other.next_ids(10_000).await });
//! let ids = batch.await.expect("task")?;
//! assert!(ids.windows(2).all(|w| w[0] < w[1]));
//!
//! match client.next_id().await {
//!     Ok(id) => println!("{id}"),
//!     // 3xx: this node cannot serve now; another node can.
//!     Err(e) if e.is_unavailable() || e.closes_connection() => { /* connect elsewhere */ }
//!     Err(e) => return Err(e),
//! }
//! println!("rtt {:?}", client.ping().await?);
//! # Ok(())
//! # }
//! ```
//!
//! # Failures
//!
//! When the connection fails (I/O error, the server closes, a malformed frame, or an
//! ERROR whose status closes the connection), every caller still waiting gets that error
//! and later calls fail at once with [`Error::Closed`]. A client does not reconnect.
//! ERROR statuses that keep the connection open (`2xx`, `3xx`) fail only their own call.
//! A call that exceeds [`ClientOptions::request_timeout`] fails with [`Error::Timeout`] and
//! leaves the connection usable.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
mod client;
pub mod config;
mod error;
mod expand;
pub mod mask;
pub mod observe;
mod pool;
mod prefetch;
mod sequence;
#[cfg(feature = "tls")]
pub mod tls;

pub use client::{Client, ClientOptions, IdOptions, MaskedIds};
pub use config::ClientConfig;
pub use error::{Error, TlsError, TlsErrorKind};
// Re-exported because the client's API hands these out: an application needs only this crate.
/// The ID model, shared with the server and the protocol crate (`idgen-id`): the layout the
/// server announced ([`Client::layout`]), the parts of an ID, worker ranges, the text forms,
/// and the ID bounds of a time interval for range queries ([`Layout::bounds`],
/// [`Layout::min_id_at`], [`Layout::max_id_at`]).
pub use idgen_id::{
    forms, Bounds, Generation, Generations, Id, Layout, LayoutError, Parts, TimeError, WorkerRange,
};
pub use idgen_protocol::{FrameError, ServerHello, Status};
/// The `uuid` crate, whose `Uuid`s [`Client::next_uuids`] hands out.
pub use uuid;
/// The former name of [`Parts`].
pub type IdParts = Parts;
pub use observe::{Event, Hook};
pub use pool::{NodeInfo, Pool, PoolBuilder, PoolOptions};
pub use prefetch::{PrefetchOptions, PrefetchPool, PrefetchStats};
#[cfg(feature = "tls")]
pub use tls::{TlsConfig, TlsConfigBuilder};

/// The examples of `README.md`, compiled (and, where they need no server, run) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
