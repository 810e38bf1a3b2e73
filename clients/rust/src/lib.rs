//! Rust client for idgen, the 64-bit time-ordered unique ID service.
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
//! let client = Client::connect_with("127.0.0.1:7700", options).await?;
//! println!("max batch {}", client.hello().max_batch);
//!
//! let id = client.next_id().await?;
//! let parts = client.layout().decode(id);
//! println!("{id}: issued at {} ms, worker {}", parts.unix_ms, parts.worker);
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
mod error;
pub mod forms;
mod layout;
pub mod mask;
mod pool;
mod prefetch;

pub use client::{Client, ClientOptions};
pub use error::Error;
pub use idgen_protocol::{FrameError, ServerHello, Status};
pub use layout::{IdParts, Layout};
pub use pool::{NodeInfo, Pool, PoolOptions};
pub use prefetch::{PrefetchOptions, PrefetchPool, PrefetchStats};
