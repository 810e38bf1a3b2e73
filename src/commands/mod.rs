//! Operator commands: `idgen decode` and `idgen inspect` (here), `idgen bounds` ([`bounds`]),
//! `idgen layout` ([`calc`]), `idgen health` ([`health`]), `idgen seq` ([`seq`]), `idgen store`
//! and `idgen migrate` ([`store`]); their exit statuses ([`exit`]).

pub mod bounds;
pub mod calc;
pub mod exit;
pub mod generations;
pub mod health;
pub mod man;
pub mod node_conn;
pub mod seq;
pub mod store;
pub mod tls;

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::lease::{LeaseConfig, Leases, Owner, WorkerState};
use idgen_core::store::{KvStore, StoreUrl};
use idgen_id::{
    Generations, Layout, DEFAULT_EPOCH_MS, DEFAULT_SEQUENCE_BITS, DEFAULT_TIMESTAMP_BITS,
    DEFAULT_WORKER_BITS,
};
use serde_json::json;

use crate::config::{
    parse_epoch, ConfigError, LeaseArgs, LeaseSection, LogArgs, LogSection, Origins, Settings,
};
use exit::Failure;

/// Where a command takes the layout from: a running node, or flags.
#[derive(Args, Debug, Clone, Default)]
pub struct LayoutSource {
    /// Read the layout from a running node's ID protocol (host:port) instead of flags.
    #[arg(long, env = "IDGEN_ADDR")]
    pub addr: Option<String>,
    #[command(flatten)]
    pub tls: tls::ClientTls,
    /// ID epoch: RFC 3339 or ms since the Unix epoch [default: 2026-01-01T00:00:00Z].
    #[arg(long)]
    pub epoch: Option<String>,
    #[arg(long, default_value_t = DEFAULT_TIMESTAMP_BITS)]
    pub timestamp_bits: u8,
    #[arg(long, default_value_t = DEFAULT_WORKER_BITS)]
    pub worker_bits: u8,
    #[arg(long, default_value_t = DEFAULT_SEQUENCE_BITS)]
    pub sequence_bits: u8,
    #[arg(long, default_value_t = 0)]
    pub region_bits: u8,
    /// The cluster's layout generations: a file holding a node's `GET /layout` answer (or
    /// its "layouts" list), so IDs of every generation decode under their own layout.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["addr", "epoch"])]
    pub layouts: Option<PathBuf>,
}

impl LayoutSource {
    /// The layout generations: from `--layouts` if given, else the one layout of
    /// [`layout`](Self::layout).
    pub fn generations(&self) -> Result<Generations, Failure> {
        let Some(path) = &self.layouts else {
            return Ok(Generations::new(self.layout()?));
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::Usage(format!("--layouts {}: {e}", path.display())))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Failure::Usage(format!("--layouts {}: not JSON: {e}", path.display())))?;
        crate::node::admin::generations_from_json(&v)
            .map_err(|e| Failure::Usage(format!("--layouts {}: {e}", path.display())))
    }

    /// The layout, from the node if `--addr` is given, else from the flags.
    pub fn layout(&self) -> Result<Layout, Failure> {
        if let Some(addr) = &self.addr {
            let conn = node_conn::NodeConn::connect(addr, &self.tls).map_err(|e| match e {
                Failure::Usage(m) => Failure::Usage(m),
                Failure::Runtime(m) => {
                    Failure::Runtime(format!("cannot read the layout from {addr}: {m}"))
                }
            })?;
            let h = conn.hello();
            return Layout::new(
                h.epoch_ms,
                h.timestamp_bits,
                h.worker_bits,
                h.sequence_bits,
                h.region_bits,
            )
            .map_err(|e| Failure::Runtime(format!("{addr} announced an invalid layout: {e}")));
        }
        let epoch = match &self.epoch {
            Some(e) => parse_epoch(e).map_err(|ConfigError(m)| Failure::Usage(m))?,
            None => DEFAULT_EPOCH_MS,
        };
        Layout::new(
            epoch,
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.region_bits,
        )
        .map_err(|e| Failure::Usage(format!("layout: {e}")))
    }
}

/// Flags of `idgen inspect`: the store as `idgen serve` reaches it (the `[lease]` settings:
/// flags, `IDGEN_*` variables, the file given by `--config`, with serve's precedence), and the
/// `[log]` settings.
#[derive(Args, Debug, Default, Clone)]
pub struct InspectArgs {
    /// A node's TOML configuration file (as `idgen serve --config`): its lease table says
    /// which store and how to reach it (TLS, user), its log table how to log; flags and IDGEN_*
    /// variables override it.
    #[arg(long, env = "IDGEN_CONFIG")]
    pub config: Option<PathBuf>,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub log: LogArgs,
    /// Where each setting on the command line came from ([`crate::config::Origins::of`]).
    #[arg(skip)]
    pub origins: Origins,
}

/// The `[lease]` settings `idgen inspect` takes no notice of: it shows every region and
/// leases nothing. Hidden from its help (accepted, so a node's environment does no harm).
pub const INSPECT_IGNORES: [&str; 2] = ["node_id", "region"];

impl InspectArgs {
    /// The `[lease]` and `[log]` sections: flags and environment over the file over the
    /// defaults, resolved (and the store's TLS and password files read) as `idgen serve` does.
    /// The file's other tables are read too (unknown keys are refused) but not used.
    pub fn resolve(&self) -> Result<(LeaseSection, LogSection), ConfigError> {
        let file = match &self.config {
            Some(p) => Settings::load(p)?,
            None => Settings::default(),
        };
        let mut lease = self.lease.clone().or(file.lease);
        // Every region is shown: the node's own (and the layout it is checked against) does
        // not matter here. The layout comes from the cluster record.
        lease.region = Some("global".to_string());
        lease.node_id = None;
        let resolved = LeaseSection::resolve(lease, &Layout::default())
            .and_then(|lease| lease.supported().map(|()| lease))
            .and_then(|lease| Ok((lease, LogSection::resolve(self.log.clone().or(file.log))?)));
        resolved.map_err(|e| self.origins.name(e))
    }
}

/// `idgen decode ID…`: one line per ID (or one JSON object per line with `--json`). A version 7
/// UUID idgen issued is decoded too: the ID it was made from, and its fields.
pub fn decode(gens: &Generations, ids: &[String], as_json: bool) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(ids.len());
    let several = gens.all().len() > 1;
    for text in ids {
        if crate::node::admin::looks_like_uuid(text) {
            let (u, parts) = crate::node::admin::parse_uuid_in(gens, text)?;
            if as_json {
                out.push(crate::node::admin::decoded_uuid_json(gens, &u, &parts).to_string());
            } else {
                let p = parts.parts;
                let time = humantime::format_rfc3339_millis(
                    std::time::UNIX_EPOCH + Duration::from_millis(p.unix_ms),
                );
                out.push(format!(
                    "{u}  id={}  time={time}  region={}  worker={}  sequence={}",
                    parts.id, p.region, p.worker, p.sequence
                ));
            }
            continue;
        }
        let id = crate::node::admin::parse_id(text)?;
        if id >= 1 << 63 {
            return Err(format!("{text}: the sign bit is set; not an idgen ID"));
        }
        let (generation, p) = gens
            .decompose(idgen_id::Id(id))
            .map_err(|e| format!("{text}: {e}"))?;
        if as_json {
            out.push(crate::node::admin::decoded_json(gens, id).to_string());
        } else {
            let time = humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + Duration::from_millis(p.unix_ms),
            );
            // The layout generation only when there is more than one to tell apart.
            let generation = if several {
                format!("  layout_generation={}", generation.index)
            } else {
                String::new()
            };
            out.push(format!(
                "{id}  time={time}  region={}  worker={}  sequence={}{generation}",
                p.region, p.worker, p.sequence
            ));
        }
    }
    Ok(out)
}

/// Opens the store `lease` names for `idgen inspect` and `idgen seq`. Unless `create` (`idgen
/// seq create`, which writes), an embedded store must exist already (no data directory or
/// database is made for it: a mistyped --data-dir is an error, not a new store), and one a
/// running node has open is refused with what to do instead. redb locks its database file for
/// the one process that has it open (and idgen locks the directory's `LOCK` file), so a second
/// process cannot read a serving node's embedded store, not even read-only.
pub(crate) async fn open_store(
    lease: &LeaseSection,
    create: bool,
) -> Result<std::sync::Arc<dyn KvStore>, String> {
    let url = &lease.store;
    let embedded_dir = match url {
        StoreUrl::Embedded { dir } => Some(dir.as_deref().unwrap_or(&lease.data_dir)),
        _ => None,
    };
    if let Some(dir) = embedded_dir.filter(|_| !create) {
        if !dir.join(idgen_core::store::embedded::DB_FILE).is_file() {
            return Err(format!(
                "no embedded store in {}: no node has run with this data directory; give \
                 the command the node's own file (--config), or its --data-dir or --store",
                dir.display()
            ));
        }
    }
    idgen_core::store::open(url, &lease.data_dir, &lease.access)
        .await
        .map_err(|e| {
            let running = embedded_dir.and_then(idgen_core::store::embedded::in_use);
            match running {
                None => format!("cannot open the store {url}: {e}"),
                Some(pid) => format!(
                    "cannot open the store {url}: a running node (pid {}) has it open, and an \
                     embedded store is open to one process at a time. Stop the node \
                     (systemctl stop idgen) and run the command again; while it runs, its admin \
                     port shows its own lease (GET /health/ready) and /metrics the lease gauges",
                    if pid.is_empty() { "unknown" } else { &pid }
                ),
            }
        })
}

/// `idgen inspect`: the cluster record, every lease, free worker IDs per region, from the
/// store `lease` names (reached with its TLS material and user) in its namespace; expired
/// leases count as held for its safety period.
pub async fn inspect(lease: &LeaseSection, as_json: bool) -> Result<String, String> {
    let (url, namespace, safety) = (&lease.store, lease.namespace.as_str(), lease.lease_safety);
    let store = open_store(lease, false).await?;
    let now = SystemClock::new().wall_ms();
    // Leases needs a layout; the cluster record has the real one.
    let probe = Leases::new(
        store.as_ref(),
        Layout::default(),
        LeaseConfig::new(namespace, 1),
        Owner::this_process(Some("inspect".into()), now),
    );
    let Some(cluster) = probe.cluster().await.map_err(|e| e.to_string())? else {
        return Err(format!(
            "no cluster in namespace {namespace:?} of {url}: no node has started there"
        ));
    };
    // The leases of the layout generation in effect now (its own worker records).
    let gens = cluster
        .generations()
        .map_err(|e| format!("stored layouts: {e}"))?;
    let era = *gens.at(now);
    let layout = era.layout;
    let records = probe
        .in_generation(era)
        .ranges()
        .await
        .map_err(|e| e.to_string())?;
    let now_id = now.saturating_sub(layout.epoch_ms());
    // One line per grant: a record, or consecutive one-worker records of one grant (written
    // before records covered ranges).
    let mut leases: Vec<serde_json::Value> = Vec::new();
    let mut i = 0;
    while i < records.len() {
        let (first, rec) = &records[i];
        let mut end = first + rec.count;
        let mut j = i + 1;
        while j < records.len()
            && records[j].0 == end
            && records[j].1.generation == rec.generation
            && records[j].1.state == rec.state
            && records[j].1.owner == rec.owner
        {
            end = records[j].0 + records[j].1.count;
            j += 1;
        }
        let left_ms = rec.lease_end as i64 - now_id as i64;
        let status = match rec.state {
            WorkerState::Released => "released".to_string(),
            WorkerState::Held if left_ms > 0 => "held".to_string(),
            WorkerState::Held => "expired".to_string(),
        };
        leases.push(json!({
            "workers": format!("{first}..={}", end - 1),
            "first": first,
            "count": end - first,
            "state": status,
            "generation": rec.generation,
            "node_id": rec.owner.node_id,
            "host": rec.owner.host,
            "pid": rec.owner.pid,
            "instance": rec.owner.instance,
            "lease_end": rec.lease_end,
            "time_left_ms": left_ms,
        }));
        i = j;
    }
    let mut regions = Vec::new();
    for r in 0..layout.region_count().min(1024) {
        let lo = r * layout.workers_per_region();
        let hi = lo + layout.workers_per_region();
        let held: u64 = records
            .iter()
            .filter(|(_, rec)| {
                rec.state == WorkerState::Held
                    && rec.lease_end + idgen_core::lease::duration_ms(safety) >= now_id
            })
            .map(|(first, rec)| (first + rec.count).min(hi).saturating_sub((*first).max(lo)))
            .sum();
        regions.push(json!({"region": r, "workers": layout.workers_per_region(), "held": held, "free": layout.workers_per_region() - held}));
    }
    if as_json {
        return Ok(json!({
            "namespace": namespace,
            "layout": cluster.layout,
            "layout_generation": era.index,
            "layouts": crate::node::admin::generations_json(&gens),
            "layout_version": cluster.layout_version,
            "min_id": cluster.min_id,
            "created_unix_ms": cluster.created_unix_ms,
            "leases": leases,
            "regions": regions,
        })
        .to_string());
    }
    let mut s = String::new();
    s.push_str(&format!("namespace   {namespace} in {url}\n"));
    s.push_str(&format!("layout      {layout}\n"));
    for g in gens.all().iter().filter(|g| g.index > 0) {
        let when = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + Duration::from_millis(g.switch_unix_ms.unwrap_or(0)),
        );
        let state = if g.index == era.index {
            "in effect since"
        } else if g.index > era.index {
            "scheduled for"
        } else {
            "replaced; was from"
        };
        s.push_str(&format!(
            "generation  {}: {state} {when}, IDs from {}: {}\n",
            g.index, g.first_id, g.layout
        ));
    }
    s.push_str(&format!("records     version {}\n", cluster.layout_version));
    if let Some(m) = cluster.min_id {
        s.push_str(&format!(
            "floor       no ID at or below {m} (IDs issue only after {})\n",
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + Duration::from_millis(layout.decompose(m).unix_ms)
            )
        ));
    }
    s.push_str(&format!(
        "range ends  {} ({} days left)\n\n",
        humantime::format_rfc3339(
            std::time::UNIX_EPOCH + Duration::from_millis(gens.newest().layout.end_unix_ms())
        ),
        gens.newest().layout.time_left(now).as_secs() / 86_400
    ));
    s.push_str(&format!(
        "{:<14} {:<9} {:>10} {:<24} {:>12}\n",
        "workers", "state", "generation", "owner (host/pid)", "time left"
    ));
    for l in &leases {
        let left = l["time_left_ms"].as_i64().unwrap_or(0);
        let left_text = match l["state"].as_str() {
            Some("released") => "-".to_string(),
            _ if left >= 0 => format!("{:.1}s", left as f64 / 1e3),
            _ => format!("{:.1}s ago", -left as f64 / 1e3),
        };
        s.push_str(&format!(
            "{:<14} {:<9} {:>10} {:<24} {:>12}\n",
            l["workers"].as_str().unwrap_or(""),
            l["state"].as_str().unwrap_or(""),
            l["generation"],
            format!(
                "{} ({}/{})",
                l["node_id"].as_str().unwrap_or(""),
                l["host"].as_str().unwrap_or(""),
                l["pid"]
            ),
            left_text
        ));
    }
    s.push('\n');
    for r in &regions {
        s.push_str(&format!(
            "region {:<4} {} of {} worker IDs free\n",
            r["region"], r["free"], r["workers"]
        ));
    }
    Ok(s)
}
