//! Configuration of `idgen serve`: flags, `IDGEN_*` environment variables and an optional TOML
//! file, merged and validated in one place.
//!
//! Precedence, highest first: a command-line flag, its `IDGEN_*` environment variable, the TOML
//! file given by `--config`, the built-in default. Durations are written like `10s`, `500ms`,
//! `2m`. `idgen serve --check-config` validates everything, prints the resolved configuration
//! and exits. `deploy/idgen.toml` is a commented sample.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::generator::DEFAULT_MAX_ROLLBACK_WAIT;
use crate::layout::{
    Layout, DEFAULT_EPOCH_MS, DEFAULT_SEQUENCE_BITS, DEFAULT_TIMESTAMP_BITS, DEFAULT_WORKER_BITS,
};
use crate::lease::{RegionScope, DEFAULT_TTL};
use crate::store::StoreUrl;

/// The largest batch a server may be configured to accept (8 MiB of IDs per answer).
pub const MAX_BATCH_LIMIT: u32 = 1 << 20;

/// Flags of `idgen serve`. Every one can also be set by its environment variable or the file.
#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// TOML configuration file (see deploy/idgen.toml).
    #[arg(long, env = "IDGEN_CONFIG")]
    pub config: Option<PathBuf>,
    /// Validate the configuration, print it resolved, and exit.
    #[arg(long)]
    pub check_config: bool,

    /// Address the ID protocol listens on [default: 127.0.0.1:7420].
    #[arg(long, env = "IDGEN_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Address of the admin HTTP server (metrics, health) [default: 127.0.0.1:7421]; `off` disables it.
    #[arg(long, env = "IDGEN_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,
    /// Address of the HTTP ID API (POST /ids, POST /ids/batch), served by the shards [default: 127.0.0.1:7422]; `off` disables it.
    #[arg(long, env = "IDGEN_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    /// Number of shards (threads, one per core) [default: number of CPUs].
    #[arg(long, env = "IDGEN_SHARDS")]
    pub shards: Option<usize>,
    /// Worker IDs each shard leases [default: 1]; a shard issues up to this × 2^sequence_bits IDs per ms.
    #[arg(long, env = "IDGEN_WORKERS_PER_SHARD")]
    pub workers_per_shard: Option<u64>,
    /// Directory for local state (the embedded store) [default: ./idgen-data].
    #[arg(long, env = "IDGEN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Coordination store: `embedded`, `embedded:/dir`, `etcd://host:port[,host:port…][/prefix]`,
    /// `fdb:/path/to/fdb.cluster` or `memory` [default: embedded].
    #[arg(long, env = "IDGEN_STORE")]
    pub store: Option<String>,
    /// Cluster namespace inside the store; one namespace is one cluster [default: default].
    #[arg(long, env = "IDGEN_NAMESPACE")]
    pub namespace: Option<String>,
    /// This node's name in lease records [default: the host name].
    #[arg(long, env = "IDGEN_NODE_ID")]
    pub node_id: Option<String>,

    /// ID epoch: RFC 3339 (`2026-01-01T00:00:00Z`) or ms since the Unix epoch.
    #[arg(long, env = "IDGEN_EPOCH")]
    pub epoch: Option<String>,
    /// Timestamp bits [default: 41].
    #[arg(long, env = "IDGEN_TIMESTAMP_BITS")]
    pub timestamp_bits: Option<u8>,
    /// Worker bits [default: 10].
    #[arg(long, env = "IDGEN_WORKER_BITS")]
    pub worker_bits: Option<u8>,
    /// Sequence bits [default: 12].
    #[arg(long, env = "IDGEN_SEQUENCE_BITS")]
    pub sequence_bits: Option<u8>,
    /// Region bits, taken from the top of the worker field [default: 0].
    #[arg(long, env = "IDGEN_REGION_BITS")]
    pub region_bits: Option<u8>,
    /// This node's region, 0 .. 2^region_bits: required with region bits. `global`: one worker
    /// space over every region, in one shared store (see docs/OPERATIONS.md).
    #[arg(long, env = "IDGEN_REGION")]
    pub region: Option<String>,

    /// Lease TTL: how far ahead each renewal moves the lease end [default: 10s].
    #[arg(long, env = "IDGEN_LEASE_TTL")]
    pub lease_ttl: Option<String>,
    /// How long an expired, unreleased worker ID stays reserved [default: 2 × lease TTL].
    #[arg(long, env = "IDGEN_LEASE_SAFETY")]
    pub lease_safety: Option<String>,
    /// Largest clock step back that is waited out rather than refused [default: 10ms].
    #[arg(long, env = "IDGEN_MAX_ROLLBACK_WAIT")]
    pub max_rollback_wait: Option<String>,

    /// Most open connections per node [default: 20000].
    #[arg(long, env = "IDGEN_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Most IDs in one request [default: 65536].
    #[arg(long, env = "IDGEN_MAX_BATCH")]
    pub max_batch: Option<u32>,
    /// Close a connection with no complete request for this long [default: 300s].
    #[arg(long, env = "IDGEN_IDLE_TIMEOUT")]
    pub idle_timeout: Option<String>,
    /// Close a connection that has not completed its HELLO within this [default: 5s].
    #[arg(long, env = "IDGEN_HANDSHAKE_TIMEOUT")]
    pub handshake_timeout: Option<String>,
    /// Close a connection whose peer does not read its answers for this long [default: 30s].
    #[arg(long, env = "IDGEN_WRITE_TIMEOUT")]
    pub write_timeout: Option<String>,
    /// Longest a graceful shutdown waits for connections to finish [default: 10s].
    #[arg(long, env = "IDGEN_SHUTDOWN_TIMEOUT")]
    pub shutdown_timeout: Option<String>,
    /// Log format: `text` or `json` [default: text].
    #[arg(long, env = "IDGEN_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Largest clock difference from peers tolerated: beyond it the node refuses to start, or
    /// turns not ready while running [default: 1s].
    #[arg(long, env = "IDGEN_MAX_DRIFT")]
    pub max_drift: Option<String>,
    /// On SIGTERM, stay up but not ready this long before draining, so load balancers move
    /// traffic away first [default: 0s].
    #[arg(long, env = "IDGEN_DRAIN_DELAY")]
    pub drain_delay: Option<String>,
    /// Warn when the layout's timestamp range has less than this left [default: 365days].
    #[arg(long, env = "IDGEN_RANGE_WARNING")]
    pub range_warning: Option<String>,
}

/// The TOML file: the same settings, snake_case, all optional.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub admin_listen: Option<String>,
    pub http_listen: Option<String>,
    pub shards: Option<usize>,
    pub workers_per_shard: Option<u64>,
    pub data_dir: Option<PathBuf>,
    pub store: Option<String>,
    pub namespace: Option<String>,
    pub node_id: Option<String>,
    pub epoch: Option<toml::Value>,
    pub timestamp_bits: Option<u8>,
    pub worker_bits: Option<u8>,
    pub sequence_bits: Option<u8>,
    pub region_bits: Option<u8>,
    /// A region number, or the string "global".
    pub region: Option<toml::Value>,
    pub lease_ttl: Option<String>,
    pub lease_safety: Option<String>,
    pub max_rollback_wait: Option<String>,
    pub max_connections: Option<usize>,
    pub max_batch: Option<u32>,
    pub idle_timeout: Option<String>,
    pub handshake_timeout: Option<String>,
    pub write_timeout: Option<String>,
    pub shutdown_timeout: Option<String>,
    pub log_format: Option<String>,
    pub max_drift: Option<String>,
    pub drain_delay: Option<String>,
    pub range_warning: Option<String>,
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The resolved, validated configuration of a node.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub admin_listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    pub shards: usize,
    pub workers_per_shard: u64,
    pub data_dir: PathBuf,
    pub store: StoreUrl,
    pub namespace: String,
    pub node_id: Option<String>,
    pub layout: Layout,
    /// One region's worker IDs, or the whole worker space (also every layout without region
    /// bits).
    pub region: RegionScope,
    pub lease_ttl: Duration,
    pub lease_safety: Duration,
    pub max_rollback_wait: Duration,
    pub max_connections: usize,
    pub max_batch: u32,
    pub idle_timeout: Duration,
    pub handshake_timeout: Duration,
    pub write_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub log_format: LogFormat,
    pub max_drift: Duration,
    pub drain_delay: Duration,
    pub range_warning: Duration,
}

/// A configuration error: says which setting and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// Parses a duration like `10s`, `500ms`, `2m`.
pub fn parse_duration(name: &str, text: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        err(format!(
            "{name}: {text:?} is not a duration ({e}); write e.g. 10s or 500ms"
        ))
    })
}

/// Parses an epoch: RFC 3339 or integer ms since the Unix epoch.
pub fn parse_epoch(text: &str) -> Result<u64, ConfigError> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(ms);
    }
    let time = humantime::parse_rfc3339_weak(t).map_err(|e| {
        err(format!(
            "epoch: {t:?} is neither ms since the Unix epoch nor RFC 3339 like 2026-01-01T00:00:00Z ({e})"
        ))
    })?;
    let d = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| err(format!("epoch: {t:?} is before 1970")))?;
    u64::try_from(d.as_millis()).map_err(|_| err(format!("epoch: {t:?} is out of range")))
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("config file {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| err(format!("config file {}: {e}", path.display())))
    }
}

impl ServeArgs {
    /// Merges flags/env over the file over defaults and validates the result against the
    /// wall clock `now_unix_ms`.
    pub fn resolve(&self, now_unix_ms: u64) -> Result<ServeConfig, ConfigError> {
        let file = match &self.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        macro_rules! pick {
            ($field:ident) => {
                self.$field.clone().or(file.$field.clone())
            };
        }
        let duration = |name: &str, v: Option<String>, default: Duration| match v {
            Some(t) => parse_duration(name, &t),
            None => Ok(default),
        };

        let epoch_ms = match (&self.epoch, &file.epoch) {
            (Some(t), _) => parse_epoch(t)?,
            (None, Some(toml::Value::Integer(i))) => {
                u64::try_from(*i).map_err(|_| err(format!("epoch: {i} is negative")))?
            }
            (None, Some(toml::Value::String(s))) => parse_epoch(s)?,
            (None, Some(toml::Value::Datetime(d))) => parse_epoch(&d.to_string())?,
            (None, Some(other)) => {
                return Err(err(format!(
                    "epoch: {other} is neither a date nor ms since the Unix epoch"
                )))
            }
            (None, None) => DEFAULT_EPOCH_MS,
        };
        let layout = Layout::new(
            epoch_ms,
            pick!(timestamp_bits).unwrap_or(DEFAULT_TIMESTAMP_BITS),
            pick!(worker_bits).unwrap_or(DEFAULT_WORKER_BITS),
            pick!(sequence_bits).unwrap_or(DEFAULT_SEQUENCE_BITS),
            pick!(region_bits).unwrap_or(0),
        )
        .map_err(|e| err(format!("layout: {e}")))?;
        layout
            .check_epoch(now_unix_ms)
            .map_err(|e| err(format!("layout: {e}")))?;

        let region_text = match (&self.region, &file.region) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(toml::Value::Integer(i))) => Some(i.to_string()),
            (None, Some(toml::Value::String(t))) => Some(t.trim().to_string()),
            (None, Some(other)) => {
                return Err(err(format!(
                    "region: {other} is neither a region number nor \"global\""
                )))
            }
            (None, None) => None,
        };
        let region = match region_text.as_deref() {
            None if layout.region_bits() > 0 => {
                return Err(err(format!(
                    "region: the layout has {} region bits, so every node needs --region: its \
                     region (0..{}), with one store (or namespace) per region; or \
                     `--region global` for one worker space over all regions in one shared store",
                    layout.region_bits(),
                    layout.region_count()
                )))
            }
            None | Some("global") => RegionScope::Global,
            Some(t) => {
                let r: u64 = t.parse().map_err(|_| {
                    err(format!(
                        "region: {t:?} is neither a region number nor `global`"
                    ))
                })?;
                if layout.region_bits() == 0 {
                    return Err(err(format!(
                        "region {r} is set but the layout has no region bits (set --region-bits)"
                    )));
                }
                if r >= layout.region_count() {
                    return Err(err(format!(
                        "region {r} does not fit {} region bits (0..{})",
                        layout.region_bits(),
                        layout.region_count()
                    )));
                }
                RegionScope::Region(r)
            }
        };

        let shards = match pick!(shards) {
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        if shards == 0 || shards > 1024 {
            return Err(err(format!("shards: {shards} is not in 1..=1024")));
        }
        let workers_per_shard = pick!(workers_per_shard).unwrap_or(1);
        let space = if region.region().is_some() {
            layout.workers_per_region()
        } else {
            layout.worker_count()
        };
        let wanted = (shards as u64).checked_mul(workers_per_shard);
        if workers_per_shard == 0 || wanted.is_none_or(|w| w > space) {
            return Err(err(format!(
                "{shards} shards × {workers_per_shard} worker IDs do not fit the {space} worker IDs the layout offers{}",
                if region.region().is_some() { " per region" } else { "" }
            )));
        }

        let store_text = pick!(store).unwrap_or_else(|| "embedded".to_string());
        let store: StoreUrl = store_text.parse().map_err(|e| err(format!("store: {e}")))?;
        let namespace = pick!(namespace).unwrap_or_else(|| "default".to_string());
        if namespace.is_empty()
            || !namespace
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(err(format!(
                "namespace: {namespace:?} must be non-empty letters, digits, '-', '_' or '.'"
            )));
        }

        let lease_ttl = duration("lease_ttl", pick!(lease_ttl), DEFAULT_TTL)?;
        if lease_ttl < Duration::from_millis(100) {
            return Err(err(format!(
                "lease_ttl: {lease_ttl:?} is too short (at least 100ms)"
            )));
        }
        let lease_safety = duration("lease_safety", pick!(lease_safety), 2 * lease_ttl)?;
        let max_rollback_wait = duration(
            "max_rollback_wait",
            pick!(max_rollback_wait),
            DEFAULT_MAX_ROLLBACK_WAIT,
        )?;
        if max_rollback_wait > Duration::from_secs(1) {
            return Err(err(format!(
                "max_rollback_wait: {max_rollback_wait:?} is too long: requests wait that long for the clock (at most 1s)"
            )));
        }

        let max_batch = pick!(max_batch).unwrap_or(idgen_protocol::DEFAULT_MAX_BATCH);
        if max_batch == 0 || max_batch > MAX_BATCH_LIMIT {
            return Err(err(format!(
                "max_batch: {max_batch} is not in 1..={MAX_BATCH_LIMIT}"
            )));
        }
        let max_connections = pick!(max_connections).unwrap_or(20_000);
        if max_connections == 0 {
            return Err(err("max_connections: must be at least 1"));
        }
        let optional_addr = |name: &str, value: Option<String>, default: SocketAddr| match value
            .as_deref()
            .map(str::trim)
        {
            None => Ok(Some(default)),
            Some("off") | Some("none") | Some("") => Ok(None),
            Some(a) => a
                .parse()
                .map(Some)
                .map_err(|e| err(format!("{name}: {a:?}: {e}"))),
        };
        let admin_listen = optional_addr(
            "admin_listen",
            pick!(admin_listen),
            SocketAddr::from(([127, 0, 0, 1], 7421)),
        )?;
        let http_listen = optional_addr(
            "http_listen",
            pick!(http_listen),
            SocketAddr::from(([127, 0, 0, 1], 7422)),
        )?;
        let log_format = match pick!(log_format).as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(err(format!(
                    "log_format: {other:?} is not `text` or `json`"
                )))
            }
        };

        Ok(ServeConfig {
            listen: pick!(listen).unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7420))),
            admin_listen,
            http_listen,
            shards,
            workers_per_shard,
            data_dir: pick!(data_dir).unwrap_or_else(|| PathBuf::from("idgen-data")),
            store,
            namespace,
            node_id: pick!(node_id),
            layout,
            region,
            lease_ttl,
            lease_safety,
            max_rollback_wait,
            max_connections,
            max_batch,
            idle_timeout: duration(
                "idle_timeout",
                pick!(idle_timeout),
                Duration::from_secs(300),
            )?,
            handshake_timeout: duration(
                "handshake_timeout",
                pick!(handshake_timeout),
                Duration::from_secs(5),
            )?,
            write_timeout: duration(
                "write_timeout",
                pick!(write_timeout),
                Duration::from_secs(30),
            )?,
            shutdown_timeout: duration(
                "shutdown_timeout",
                pick!(shutdown_timeout),
                Duration::from_secs(10),
            )?,
            log_format,
            max_drift: duration("max_drift", pick!(max_drift), Duration::from_secs(1))?,
            drain_delay: duration("drain_delay", pick!(drain_delay), Duration::ZERO)?,
            range_warning: duration(
                "range_warning",
                pick!(range_warning),
                Duration::from_secs(365 * 86_400),
            )?,
        })
    }
}

impl std::fmt::Display for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        writeln!(f, "listen            = {}", self.listen)?;
        match self.admin_listen {
            Some(a) => writeln!(f, "admin_listen      = {a}")?,
            None => writeln!(f, "admin_listen      = off")?,
        }
        match self.http_listen {
            Some(a) => writeln!(f, "http_listen       = {a}")?,
            None => writeln!(f, "http_listen       = off")?,
        }
        writeln!(f, "shards            = {}", self.shards)?;
        writeln!(f, "workers_per_shard = {}", self.workers_per_shard)?;
        writeln!(f, "data_dir          = {}", self.data_dir.display())?;
        writeln!(f, "store             = {}", self.store)?;
        writeln!(f, "namespace         = {}", self.namespace)?;
        writeln!(f, "layout            = {}", self.layout)?;
        match self.region {
            RegionScope::Region(r) => writeln!(f, "region            = {r}")?,
            RegionScope::Global if self.layout.region_bits() > 0 => {
                writeln!(f, "region            = global")?
            }
            RegionScope::Global => {}
        }
        writeln!(f, "lease_ttl         = {}", d(self.lease_ttl))?;
        writeln!(f, "lease_safety      = {}", d(self.lease_safety))?;
        writeln!(f, "max_rollback_wait = {}", d(self.max_rollback_wait))?;
        writeln!(f, "max_connections   = {}", self.max_connections)?;
        writeln!(f, "max_batch         = {}", self.max_batch)?;
        writeln!(f, "idle_timeout      = {}", d(self.idle_timeout))?;
        writeln!(f, "handshake_timeout = {}", d(self.handshake_timeout))?;
        writeln!(f, "write_timeout     = {}", d(self.write_timeout))?;
        writeln!(f, "shutdown_timeout  = {}", d(self.shutdown_timeout))?;
        writeln!(f, "max_drift         = {}", d(self.max_drift))?;
        writeln!(f, "drain_delay       = {}", d(self.drain_delay))?;
        write!(f, "range_warning     = {}", d(self.range_warning))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = DEFAULT_EPOCH_MS + 1_000_000;

    #[test]
    fn defaults_resolve() {
        let c = ServeArgs::default().resolve(NOW).unwrap();
        assert_eq!(c.listen, "127.0.0.1:7420".parse().unwrap());
        assert_eq!(c.admin_listen, Some("127.0.0.1:7421".parse().unwrap()));
        assert_eq!(c.store, StoreUrl::Embedded { dir: None });
        assert_eq!(c.layout, Layout::default());
        assert_eq!(c.lease_ttl, Duration::from_secs(10));
        assert_eq!(c.lease_safety, Duration::from_secs(20));
        assert_eq!(c.workers_per_shard, 1);
        assert!(c.shards >= 1);
        assert!(c.to_string().contains("41/10/12"));
    }

    #[test]
    fn flags_beat_the_file_which_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idgen.toml");
        std::fs::write(
            &path,
            "shards = 3\nlease_ttl = \"4s\"\nepoch = 2026-02-01T00:00:00Z\nstore = \"memory\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            shards: Some(2),
            ..ServeArgs::default()
        };
        let c = args.resolve(NOW + 40 * 86_400_000).unwrap();
        assert_eq!(c.shards, 2, "flag wins");
        assert_eq!(
            c.lease_ttl,
            Duration::from_secs(4),
            "file wins over default"
        );
        assert_eq!(c.lease_safety, Duration::from_secs(8), "safety follows ttl");
        assert_eq!(c.store, StoreUrl::Memory);
        assert_eq!(c.layout.epoch_ms(), DEFAULT_EPOCH_MS + 31 * 86_400_000);
    }

    #[test]
    fn garbage_is_refused_with_the_setting_named() {
        let bad = |args: ServeArgs| args.resolve(NOW).unwrap_err().to_string();
        let base = ServeArgs::default;
        assert!(bad(ServeArgs {
            lease_ttl: Some("ten seconds".into()),
            ..base()
        })
        .starts_with("lease_ttl:"));
        assert!(bad(ServeArgs {
            timestamp_bits: Some(40),
            ..base()
        })
        .contains("sum to 63"));
        assert!(bad(ServeArgs {
            epoch: Some("2999-01-01T00:00:00Z".into()),
            ..base()
        })
        .contains("future"));
        assert!(bad(ServeArgs {
            epoch: Some("yesterday".into()),
            ..base()
        })
        .starts_with("epoch:"));
        assert!(bad(ServeArgs {
            shards: Some(0),
            ..base()
        })
        .starts_with("shards:"));
        assert!(bad(ServeArgs {
            shards: Some(64),
            workers_per_shard: Some(32),
            ..base()
        })
        .contains("do not fit"));
        assert!(bad(ServeArgs {
            store: Some("redis://x".into()),
            ..base()
        })
        .starts_with("store:"));
        assert!(bad(ServeArgs {
            region: Some("1".into()),
            ..base()
        })
        .contains("no region bits"));
        assert!(bad(ServeArgs {
            max_batch: Some(0),
            ..base()
        })
        .starts_with("max_batch:"));
        assert!(bad(ServeArgs {
            namespace: Some("a/b".into()),
            ..base()
        })
        .starts_with("namespace:"));
        assert!(bad(ServeArgs {
            log_format: Some("xml".into()),
            ..base()
        })
        .starts_with("log_format:"));
        assert!(bad(ServeArgs {
            max_rollback_wait: Some("5s".into()),
            ..base()
        })
        .starts_with("max_rollback_wait:"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.toml");
        std::fs::write(&path, "shardz = 2\n").unwrap();
        assert!(bad(ServeArgs {
            config: Some(path),
            ..base()
        })
        .contains("unknown field"));
        assert!(bad(ServeArgs {
            config: Some("/nonexistent/idgen.toml".into()),
            ..base()
        })
        .contains("/nonexistent/idgen.toml"));
    }

    #[test]
    fn regions_and_admin_off() {
        let with_region = |region: Option<&str>| ServeArgs {
            region_bits: Some(3),
            region: region.map(String::from),
            admin_listen: Some("off".into()),
            epoch: Some(DEFAULT_EPOCH_MS.to_string()),
            shards: Some(2),
            ..ServeArgs::default()
        };
        let c = with_region(Some("5")).resolve(NOW).unwrap();
        assert_eq!(c.region, RegionScope::Region(5));
        assert_eq!(c.admin_listen, None);
        assert!(c.to_string().contains("region            = 5"));
        assert!(with_region(Some("8")).resolve(NOW).is_err());
        assert!(with_region(Some("west")).resolve(NOW).is_err());
        // Region bits without a region would lease region 0's worker IDs in every region's
        // store: refused, with both ways out named.
        let e = with_region(None).resolve(NOW).unwrap_err().to_string();
        assert!(
            e.contains("needs --region") && e.contains("--region global"),
            "{e}"
        );
        // The documented opt-in: one worker space over all regions.
        let g = with_region(Some("global")).resolve(NOW).unwrap();
        assert_eq!(g.region, RegionScope::Global);
        assert!(g.to_string().contains("region            = global"));
        // Without region bits, the scope is the whole space; `global` says so explicitly.
        let plain = ServeArgs::default().resolve(NOW).unwrap();
        assert_eq!(plain.region, RegionScope::Global);
        assert!(!plain.to_string().contains("region            ="));
    }
}
