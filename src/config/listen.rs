//! `[listen]`: the ID protocol's front end. Its address, the HTTP ID API's address, the shards
//! that serve them and the limits and timeouts of their connections. The shards and their
//! connections take this section, by value.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{duration, err, parse_addr_or_off, ser, ConfigError};

/// The largest batch a server may be configured to accept (8 MiB of IDs per answer).
pub const MAX_BATCH_LIMIT: u32 = 1 << 20;

settings! {
    /// The `[listen]` settings as given: flags, `IDGEN_*` variables, the file's `[listen]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "ID protocol and shards ([listen] in the file)")]
    pub struct ListenArgs {
        /// Address the ID protocol listens on, plaintext; `off` disables it (with tls_listen set).
        #[arg(long, env = "IDGEN_LISTEN")]
        pub listen: Option<String>,
        /// Address of the HTTP ID API (POST /ids, POST /ids/batch); `off` disables it.
        #[arg(long, env = "IDGEN_HTTP_LISTEN")]
        pub http_listen: Option<String>,
        /// Number of shards (threads, one per core) [default: number of CPUs].
        #[arg(long, env = "IDGEN_SHARDS")]
        pub shards: Option<usize>,
        /// Worker IDs each shard leases; a shard issues up to this × 2^sequence_bits IDs per ms.
        #[arg(long, env = "IDGEN_WORKERS_PER_SHARD")]
        pub workers_per_shard: Option<u64>,
        /// Most open connections per node.
        #[arg(long, env = "IDGEN_MAX_CONNECTIONS")]
        pub max_connections: Option<usize>,
        /// Most IDs in one request.
        #[arg(long, env = "IDGEN_MAX_BATCH")]
        pub max_batch: Option<u32>,
        /// Close a connection with no complete request for this long.
        #[arg(long, env = "IDGEN_IDLE_TIMEOUT")]
        pub idle_timeout: Option<String>,
        /// Close a connection that has not completed its HELLO within this.
        #[arg(long, env = "IDGEN_HANDSHAKE_TIMEOUT")]
        pub handshake_timeout: Option<String>,
        /// Close a connection whose peer does not read its answers for this long.
        #[arg(long, env = "IDGEN_WRITE_TIMEOUT")]
        pub write_timeout: Option<String>,
        /// HTTP ID API: close a connection that is idle or sends a request's head or body for
        /// longer than this.
        #[arg(long, env = "IDGEN_HTTP_REQUEST_TIMEOUT")]
        pub http_request_timeout: Option<String>,
        /// HTTP ID API: how long the answer to a request with an `Idempotency-Key` header is
        /// kept, so a retry with the same key gets the same IDs; 0 (the default) turns the
        /// header off (such requests are refused).
        #[arg(long, env = "IDGEN_IDEMPOTENCY_WINDOW")]
        pub idempotency_window: Option<String>,
        /// HTTP ID API: the most memory kept answers may take (bytes); new keys are refused
        /// (503) while it is full.
        #[arg(long, env = "IDGEN_IDEMPOTENCY_MAX_BYTES")]
        pub idempotency_max_bytes: Option<u64>,
        /// Address other nodes reach this node's plaintext ID protocol at (an IP and port, as
        /// they dial it; port 0: the port `listen` is bound to); with it, the node may become
        /// the one that commits every node's strict sequence calls (the others forward theirs
        /// to it). Unset: it never does.
        #[arg(long, env = "IDGEN_ADVERTISE")]
        pub advertise: Option<String>,
    }
}

/// The `[listen]` section, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ListenSection {
    /// `None`: no plaintext listener for the ID protocol (TLS only).
    #[serde(serialize_with = "ser::addr_or_off")]
    pub listen: Option<SocketAddr>,
    /// `None`: the HTTP ID API is off.
    #[serde(serialize_with = "ser::addr_or_off")]
    pub http_listen: Option<SocketAddr>,
    pub shards: usize,
    pub workers_per_shard: u64,
    pub max_connections: usize,
    pub max_batch: u32,
    #[serde(serialize_with = "ser::duration")]
    pub idle_timeout: Duration,
    #[serde(serialize_with = "ser::duration")]
    pub handshake_timeout: Duration,
    #[serde(serialize_with = "ser::duration")]
    pub write_timeout: Duration,
    #[serde(serialize_with = "ser::duration")]
    pub http_request_timeout: Duration,
    /// Zero: idempotency keys are off.
    #[serde(serialize_with = "ser::duration")]
    pub idempotency_window: Duration,
    pub idempotency_max_bytes: u64,
    /// `None`: this node never commits other nodes' strict calls.
    #[serde(serialize_with = "ser::addr_or_off")]
    pub advertise: Option<SocketAddr>,
}

impl Default for ListenSection {
    fn default() -> Self {
        ListenSection {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 7420))),
            http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 7422))),
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()),
            workers_per_shard: 1,
            max_connections: 20_000,
            max_batch: idgen_protocol::DEFAULT_MAX_BATCH,
            idle_timeout: Duration::from_secs(300),
            handshake_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(30),
            http_request_timeout: Duration::from_secs(10),
            idempotency_window: Duration::ZERO,
            idempotency_max_bytes: 64 << 20,
            advertise: None,
        }
    }
}

impl ListenSection {
    /// Resolves and validates the section. (Whether shards × workers per shard fit the
    /// layout is checked with the layout.)
    pub fn resolve(given: ListenArgs) -> Result<ListenSection, ConfigError> {
        let d = ListenSection::default();
        let shards = given.shards.unwrap_or(d.shards);
        if shards == 0 || shards > 1024 {
            return Err(err(format!("shards: {shards} is not in 1..=1024")));
        }
        let max_batch = given.max_batch.unwrap_or(d.max_batch);
        if max_batch == 0 || max_batch > MAX_BATCH_LIMIT {
            return Err(err(format!(
                "max_batch: {max_batch} is not in 1..={MAX_BATCH_LIMIT}"
            )));
        }
        let max_connections = given.max_connections.unwrap_or(d.max_connections);
        if max_connections == 0 {
            return Err(err("max_connections: must be at least 1"));
        }
        let listen = match given.listen {
            Some(text) => parse_addr_or_off("listen", &text)?,
            None => d.listen,
        };
        let http_listen = match given.http_listen {
            Some(text) => parse_addr_or_off("http_listen", &text)?,
            None => d.http_listen,
        };
        let advertise = match given.advertise {
            None => None,
            Some(text) => {
                let a = parse_addr_or_off("advertise", &text)?;
                if let Some(a) = a {
                    if a.ip().is_unspecified() {
                        return Err(err(format!(
                            "advertise: {a} is not an address other nodes can dial: give this node's IP and its listen port"
                        )));
                    }
                    if listen.is_none() {
                        return Err(err(
                            "advertise: needs the plaintext listen address (strict calls are forwarded over it)",
                        ));
                    }
                }
                a
            }
        };
        Ok(ListenSection {
            listen,
            http_listen,
            advertise,
            shards,
            workers_per_shard: given.workers_per_shard.unwrap_or(d.workers_per_shard),
            max_connections,
            max_batch,
            idle_timeout: duration("idle_timeout", given.idle_timeout, d.idle_timeout)?,
            handshake_timeout: duration(
                "handshake_timeout",
                given.handshake_timeout,
                d.handshake_timeout,
            )?,
            write_timeout: duration("write_timeout", given.write_timeout, d.write_timeout)?,
            http_request_timeout: nonzero(duration(
                "http_request_timeout",
                given.http_request_timeout,
                d.http_request_timeout,
            )?)
            .ok_or_else(|| err("http_request_timeout: must be more than 0"))?,
            idempotency_window: {
                let w = duration(
                    "idempotency_window",
                    given.idempotency_window,
                    d.idempotency_window,
                )?;
                if w > Duration::from_secs(86_400) {
                    return Err(err("idempotency_window: at most 24h"));
                }
                w
            },
            idempotency_max_bytes: match given
                .idempotency_max_bytes
                .unwrap_or(d.idempotency_max_bytes)
            {
                n @ 4096..=0x10_0000_0000 => n,
                n => {
                    return Err(err(format!(
                        "idempotency_max_bytes: {n} is not in 4096..=68719476736 (64 GiB)"
                    )))
                }
            },
        })
    }

    /// Worker IDs the node leases: shards × worker IDs per shard.
    pub fn workers(&self) -> u64 {
        self.shards as u64 * self.workers_per_shard
    }
}

/// `d`, unless it is zero.
pub(super) fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}
