//! `idgen store upgrade|floor|restored` and `idgen migrate`: a cluster's life beyond the
//! steady state, against the store as `idgen inspect` reads it (the same `[lease]` settings:
//! flags, `IDGEN_*` variables, `--config`).
//!
//! - `upgrade` raises the cluster's records to the newest version (4, successor layouts; 3 added floors), after which
//!   binaries of earlier releases refuse the cluster. Nothing else does: a node of this release
//!   joins a version-2 cluster as it is, so a rollback stays possible until an operator runs it.
//! - `floor` raises the cluster's floor (`min_id`: no ID at or below it) for a cut-over from a
//!   database sequence; every node and embedded generator obeys it at its next grant.
//! - `restored` is the fence after a restore of the store (an etcd snapshot, a copy of the
//!   embedded store's data directory, a PostgreSQL backup) or after the store was lost and
//!   started empty: the lease records went back in time, so a node whose clock is behind could
//!   issue below IDs issued before; the fence raises the floor past any time an ID can have
//!   been issued (now + lease TTL + a margin for clocks ahead of this one).
//! - `migrate --max-id M` prints the plan of a cut-over, and changes nothing.

use std::time::Duration;

use clap::{Args, Subcommand};
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::lease::{ClusterRecord, LeaseError, Leases, Owner, RegionScope, FLOOR_VERSION};
use idgen_core::store::KvStore;
use idgen_id::Layout;
use serde_json::json;

use super::exit::Failure;
use super::{open_store, InspectArgs, LayoutSource};
use crate::config::{self, ConfigError, LayoutArgs, LeaseSection, Settings};

/// `idgen store …`.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

/// Changes to a cluster's records an operator asks for.
#[derive(Subcommand, Debug, Clone)]
pub enum StoreCommand {
    /// Raise the cluster's records to the newest version (4: floors and successor layouts),
    /// once every node runs this release:
    /// from then on binaries of earlier releases refuse the cluster (no rollback past it).
    Upgrade {
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
    /// Raise the cluster's floor to --min-id: no node issues an ID at or below it again (a
    /// cut-over from a database sequence; `idgen migrate` plans it). Floors are only raised.
    Floor {
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
    /// After restoring the store from a backup (or starting it empty after losing it): raise
    /// the floor past every ID that can have been issued before, so that no node, whatever
    /// its clock, issues one again. Run it before any node starts on the restored store.
    Restored {
        /// How far ahead of this machine's clock a node's clock may have been when it last
        /// issued (added to the lease TTL).
        #[arg(long, default_value = "60s")]
        margin: String,
        /// The layout, for a store that was lost and started empty (a cluster record that
        /// survived has its own): flags, IDGEN_* variables or the file's `[layout]`.
        #[command(flatten)]
        layout: LayoutArgs,
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
}

impl StoreCommand {
    /// The subcommand's name, for messages (`idgen store upgrade: …`).
    pub fn name(&self) -> &'static str {
        match self {
            StoreCommand::Upgrade { .. } => "store upgrade",
            StoreCommand::Floor { .. } => "store floor",
            StoreCommand::Restored { .. } => "store restored",
        }
    }

    /// The store settings the command was given.
    pub fn store(&self) -> &InspectArgs {
        match self {
            StoreCommand::Upgrade { store }
            | StoreCommand::Floor { store }
            | StoreCommand::Restored { store, .. } => store,
        }
    }
}

/// A lease error as the command's failure: what the operator wrote wrongly is a usage error
/// (2), what the store refused or could not do is a runtime failure (1).
fn failure(e: LeaseError) -> Failure {
    match e {
        LeaseError::BadRequest(m) => Failure::Usage(m),
        e => Failure::Runtime(e.to_string()),
    }
}

/// Lease operations over the cluster's own layout and region scope (or, for a cluster not yet
/// made, the ones given), with `min_id` to raise the floor to.
fn operator<'s>(
    store: &'s dyn KvStore,
    lease: &LeaseSection,
    layout: Layout,
    region: RegionScope,
    min_id: Option<u64>,
    now: u64,
) -> Leases<'s> {
    let mut config = lease.lease_config(1);
    config.region = region;
    config.min_id = min_id;
    Leases::new(
        store,
        layout,
        config,
        Owner::this_process(Some("idgen-store".into()), now),
    )
}

/// The cluster record and its layout, if the cluster exists.
async fn cluster(
    store: &dyn KvStore,
    lease: &LeaseSection,
    now: u64,
) -> Result<Option<(ClusterRecord, Layout)>, Failure> {
    let probe = operator(
        store,
        lease,
        Layout::default(),
        RegionScope::Global,
        None,
        now,
    );
    let Some(rec) = probe.cluster().await.map_err(failure)? else {
        return Ok(None);
    };
    // The layout generation in effect now: floors are IDs of the time they are set at.
    let layout = rec
        .generations()
        .map_err(|e| Failure::Runtime(format!("the cluster record's layouts: {e}")))?
        .at(now)
        .layout;
    Ok(Some((rec, layout)))
}

fn no_cluster(lease: &LeaseSection) -> Failure {
    Failure::Runtime(format!(
        "no cluster in namespace {:?} of {}: no node has started there",
        lease.namespace, lease.store
    ))
}

/// A time (Unix ms) in RFC 3339.
fn rfc3339(unix_ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(unix_ms))
        .to_string()
}

/// `no ID at or below M (its time T)`.
fn floor_text(layout: &Layout, min_id: Option<u64>) -> String {
    match min_id {
        None => "none".to_string(),
        Some(m) => format!(
            "no ID at or below {m} (IDs issue only after {})",
            rfc3339(layout.decompose(m).unix_ms)
        ),
    }
}

/// The largest ID of ID-time `t`: a floor there leaves every ID of later milliseconds.
fn last_id_of(layout: &Layout, t: u64) -> Result<u64, Failure> {
    layout
        .compose(t, layout.max_worker(), layout.max_sequence())
        .map(|id| id.0)
        .map_err(|e| Failure::Runtime(format!("the fence lies outside the layout: {e}")))
}

/// Runs `cmd` against the store `lease` names; `raw` is what was given (for the layout of a
/// store that starts empty). Returns what to print.
pub async fn run(
    cmd: &StoreCommand,
    lease: &LeaseSection,
    as_layout: impl FnOnce() -> Result<(Layout, RegionScope), Failure>,
) -> Result<String, Failure> {
    let now = SystemClock::new().wall_ms();
    match cmd {
        StoreCommand::Upgrade { .. } => {
            let store = open_store(lease, false).await.map_err(Failure::Runtime)?;
            let (rec, layout) = cluster(store.as_ref(), lease, now)
                .await?
                .ok_or_else(|| no_cluster(lease))?;
            let region = rec.region_scope.unwrap_or(RegionScope::Global);
            let (before, after) = operator(store.as_ref(), lease, layout, region, None, now)
                .upgrade_records()
                .await
                .map_err(failure)?;
            tracing::info!(
                event = "store_upgraded",
                namespace = %lease.namespace,
                from = before,
                to = after,
                "cluster records at version {after}"
            );
            Ok(if before == after {
                format!(
                    "namespace {} already at record version {after}: nothing to do\n",
                    lease.namespace
                )
            } else {
                format!(
                    "namespace {}: record version {before} -> {after}. Binaries of earlier releases now refuse this cluster; floors (`idgen store floor`, `idgen store restored`, min_id) and successor layouts (`idgen layout schedule`) can be set.\n",
                    lease.namespace
                )
            })
        }
        StoreCommand::Floor { .. } => {
            let m = lease.min_id.ok_or_else(|| {
                Failure::Usage(
                    "give --min-id: the largest ID the cluster must stay above (see `idgen migrate --max-id`)".into(),
                )
            })?;
            let store = open_store(lease, false).await.map_err(Failure::Runtime)?;
            let (rec, layout) = cluster(store.as_ref(), lease, now)
                .await?
                .ok_or_else(|| no_cluster(lease))?;
            idgen_core::lease::check_min_id(m, &layout).map_err(Failure::Usage)?;
            raise(store.as_ref(), lease, layout, &rec, m, now).await
        }
        StoreCommand::Restored { margin, .. } => {
            let margin = humantime::parse_duration(margin)
                .map_err(|e| Failure::Usage(format!("margin: {margin:?}: {e}")))?;
            // A store that was lost starts empty: it is made, not refused.
            let store = open_store(lease, true).await.map_err(Failure::Runtime)?;
            let (rec, layout, region) = match cluster(store.as_ref(), lease, now).await? {
                Some((rec, layout)) => {
                    let region = rec.region_scope.unwrap_or(RegionScope::Global);
                    (Some(rec), layout, region)
                }
                None => {
                    let (layout, region) = as_layout()?;
                    (None, layout, region)
                }
            };
            let now_id = layout.id_time(now).ok_or_else(|| {
                Failure::Runtime("this machine's clock reads before the layout's epoch".into())
            })?;
            // Every timestamp issued before the restore is below its holder's ceiling, which a
            // renewal put at most one TTL past the holder's clock; records that survived may
            // say more.
            let probe = operator(store.as_ref(), lease, layout, region, None, now);
            let stored_end = match &rec {
                Some(_) => probe
                    .ranges()
                    .await
                    .map_err(failure)?
                    .iter()
                    .map(|(_, r)| r.lease_end)
                    .max()
                    .unwrap_or(0),
                None => 0,
            };
            let ahead = idgen_core::lease::duration_ms(lease.lease_ttl + margin);
            let fence = now_id.saturating_add(ahead).max(stored_end);
            let m = last_id_of(&layout, fence)?;
            match rec {
                Some(rec) => raise(store.as_ref(), lease, layout, &rec, m, now).await,
                None => {
                    operator(store.as_ref(), lease, layout, region, Some(m), now)
                        .ensure_cluster(now)
                        .await
                        .map_err(failure)?;
                    tracing::info!(
                        event = "store_fenced",
                        namespace = %lease.namespace,
                        min_id = m,
                        "an empty store: cluster record made with the fence"
                    );
                    Ok(format!(
                        "namespace {}: the store was empty; cluster record made (layout {layout}, record version {FLOOR_VERSION})\nfloor: {}\n",
                        lease.namespace,
                        floor_text(&layout, Some(m))
                    ))
                }
            }
        }
    }
}

/// Raises the floor of the existing cluster `rec` to `m`; says what it was and is.
async fn raise(
    store: &dyn KvStore,
    lease: &LeaseSection,
    layout: Layout,
    rec: &ClusterRecord,
    m: u64,
    now: u64,
) -> Result<String, Failure> {
    let region = rec.region_scope.unwrap_or(RegionScope::Global);
    let leases = operator(store, lease, layout, region, Some(m), now);
    leases.ensure_cluster(now).await.map_err(failure)?;
    let after = leases
        .cluster()
        .await
        .map_err(failure)?
        .ok_or_else(|| no_cluster(lease))?;
    tracing::info!(
        event = "store_floor_raised",
        namespace = %lease.namespace,
        before = rec.min_id,
        after = after.min_id,
        "cluster floor"
    );
    let mut s = format!(
        "namespace {}\nfloor before: {}\nfloor now:    {}\n",
        lease.namespace,
        floor_text(&layout, rec.min_id),
        floor_text(&layout, after.min_id)
    );
    if after.min_id > Some(m) {
        s.push_str(&format!(
            "(the floor was already above {m}: floors are only raised)\n"
        ));
    }
    s.push_str("Nodes obey it from their next grant; a node whose clock reads before its time refuses until the clock passes it.\n");
    Ok(s)
}

/// The layout and region `idgen store restored` gives a store that starts empty: `[layout]`
/// from flags, `IDGEN_*` variables or the file `--config` names; the region from `--region`.
pub fn layout_for_empty_store(
    layout: &LayoutArgs,
    store: &InspectArgs,
    now: u64,
) -> Result<(Layout, RegionScope), Failure> {
    let file = match &store.config {
        Some(p) => Settings::load(p).map_err(|ConfigError(e)| Failure::Usage(e))?,
        None => Settings::default(),
    };
    let given_region = store.lease.region.clone().or(file.lease.region);
    let layout = config::layout::resolve(layout.clone().or(file.layout), now)
        .map_err(|ConfigError(e)| Failure::Usage(e))?;
    let region = match given_region.as_deref().map(str::trim) {
        None | Some("global") => RegionScope::Global,
        Some(t) => RegionScope::Region(t.parse().map_err(|_| {
            Failure::Usage(format!(
                "region: {t:?} is neither a region number nor `global`"
            ))
        })?),
    };
    Ok((layout, region))
}

/// `idgen migrate --max-id M`: the plan of a cut-over from a sequence whose largest value is
/// `max_id` to this layout. Changes nothing.
pub fn migrate_plan(
    layout: &Layout,
    max_id: u64,
    now: u64,
    as_json: bool,
) -> Result<String, Failure> {
    if let Err(e) = layout.check_id(max_id) {
        return Err(Failure::Usage(format!(
            "max id {max_id} is above every ID of the layout {layout}: {e}; no floor can hold it, a wider layout or a new ID column is needed"
        )));
    }
    let parts = layout.decompose(max_id);
    let now_id = layout.id_time(now).unwrap_or(0);
    let behind_ms = parts.timestamp.saturating_add(1).saturating_sub(now_id);
    let ready = behind_ms == 0;
    // Move the epoch back far enough that IDs issued now lie a day above the floor's time.
    const DAY_MS: u64 = 86_400_000;
    let shift = behind_ms.saturating_add(DAY_MS);
    let new_epoch = layout.epoch_ms().checked_sub(shift);
    let mut steps: Vec<String> = Vec::new();
    if ready {
        steps.push("1. Upgrade every node to this release, then run `idgen store upgrade` (record version 4; earlier releases then refuse the cluster).".into());
        steps.push(format!("2. Stop writers that take values from the old sequence, note its last value, and run `idgen store floor --min-id {max_id}` (or set `min_id = {max_id}` under [lease] in every node's file before a new cluster's first start)."));
        steps.push("3. Check: `idgen inspect` shows the floor; a node started with min_id shows it under `idgen serve --check-config`.".into());
        steps.push("4. Point writers at idgen: every ID it issues is above the old sequence's values, whatever a node's clock says.".into());
    } else {
        steps.push(format!(
            "The floor's time lies {} in this layout's future: nodes would refuse to issue until then.",
            humantime::format_duration(Duration::from_millis(behind_ms))
        ));
        match new_epoch {
            Some(e) => {
                let moved = Layout::new(
                    e,
                    layout.timestamp_bits(),
                    layout.worker_bits(),
                    layout.sequence_bits(),
                    layout.region_bits(),
                )
                .map_err(|err| Failure::Runtime(err.to_string()))?;
                steps.push(format!(
                    "1. Start a new cluster (a new namespace: the layout is fixed per cluster) with the epoch moved back to {} (--epoch {e}): IDs issued now then lie about a day above the floor's time; the layout ends {} instead of {}.",
                    rfc3339(e),
                    rfc3339(moved.end_unix_ms()),
                    rfc3339(layout.end_unix_ms())
                ));
                steps.push(format!("2. Run `idgen migrate --max-id {max_id} --epoch {e}` (with the other layout flags) and follow its plan."));
            }
            None => steps.push("No epoch can be moved back that far: this layout cannot hold IDs above the sequence; choose more timestamp bits or a coarser time unit (`idgen layout`).".into()),
        }
    }
    if as_json {
        return Ok(json!({
            "layout": layout.to_string(),
            "max_id": max_id,
            "max_id_unix_ms": parts.unix_ms,
            "max_id_time": rfc3339(parts.unix_ms),
            "ready": ready,
            "floor_ahead_ms": behind_ms,
            "suggested_epoch_ms": if ready { None } else { new_epoch },
            "steps": steps,
        })
        .to_string()
            + "\n");
    }
    let mut s = format!(
        "layout      {layout}\nmax id      {max_id}: time {}, worker {}, sequence {}\nnow         {}\n",
        rfc3339(parts.unix_ms),
        parts.worker,
        parts.sequence,
        rfc3339(now)
    );
    s.push_str(if ready {
        "verdict     ready: IDs issued now are already above it; the floor makes that hold whatever a node's clock says\n\n"
    } else {
        "verdict     not with this epoch\n\n"
    });
    for step in steps {
        s.push_str(&step);
        s.push('\n');
    }
    Ok(s)
}

/// `idgen migrate` flags.
#[derive(Args, Debug, Clone)]
pub struct MigrateArgs {
    /// The largest value the old sequence (or ID source) handed out.
    #[arg(long)]
    pub max_id: u64,
    #[command(flatten)]
    pub layout: LayoutSource,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

impl MigrateArgs {
    /// The plan, for the layout given.
    pub fn plan(&self) -> Result<String, Failure> {
        let layout = self.layout.layout()?;
        migrate_plan(
            &layout,
            self.max_id,
            SystemClock::new().wall_ms(),
            self.json,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_for_a_sequence_in_the_past_is_ready_and_one_in_the_future_moves_the_epoch() {
        let layout = Layout::default();
        let now = layout.epoch_ms() + 400 * 86_400_000;
        // A PostgreSQL sequence at ten million: its "time" is the epoch's first millisecond.
        let plan = migrate_plan(&layout, 10_000_000, now, true).unwrap();
        let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
        assert_eq!(v["ready"], true, "{plan}");
        assert!(v["steps"][1]
            .as_str()
            .unwrap()
            .contains("idgen store floor --min-id 10000000"));
        // An ID whose time is ten days ahead of now: the epoch must move back past it.
        let ahead = layout
            .compose(400 * 86_400_000 + 10 * 86_400_000, 3, 4)
            .unwrap()
            .0;
        let plan = migrate_plan(&layout, ahead, now, true).unwrap();
        let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
        assert_eq!(v["ready"], false, "{plan}");
        let e = v["suggested_epoch_ms"].as_u64().unwrap();
        let moved = Layout::new(e, 41, 10, 12, 0).unwrap();
        // With the moved epoch, IDs issued now are above the sequence's largest value.
        let now_id = moved.id_time(now).unwrap();
        assert!(moved.compose(now_id, 0, 0).unwrap().0 > ahead, "{plan}");
        let again = migrate_plan(&moved, ahead, now, true).unwrap();
        assert!(again.contains("\"ready\":true"), "{again}");
        // Above every ID of the layout: refused as usage.
        assert!(matches!(
            migrate_plan(&layout, 1 << 63, now, false),
            Err(Failure::Usage(_))
        ));
    }
}
