//! `idgen layout plan` and `idgen layout schedule`: a successor layout for a running cluster
//! (a layout generation, see `idgen_id::Generations`), rehearsed and then scheduled in the
//! cluster record, against the store as `idgen inspect` reaches it.
//!
//! - `plan` reads the cluster's layout generations and says what a switch at `--at` to the
//!   given widths means: the successor's epoch (the latest that keeps every later ID above
//!   every earlier one, unless `--epoch` names an earlier one), the last ID before the switch
//!   and the first after it, the lifetime left to both layouts, and the throughput of each.
//!   It changes nothing.
//! - `schedule` does the same and writes the successor into the cluster record
//!   (`Leases::schedule_successor`): every node switches at that time, by its own clock, or
//!   refuses until it can.

use clap::{Args, Subcommand};
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::lease::{LeaseError, Leases, Owner};
use idgen_id::{successor_epoch, Generations, Layout, Plan};
use serde_json::json;

use super::calc::{LayoutCalcArgs, MS_PER_YEAR};
use super::exit::Failure;
use super::{open_store, InspectArgs};
use crate::config::LeaseSection;

/// `idgen layout`: the calculator (flags), or a subcommand about the cluster's layouts.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct LayoutArgs {
    #[command(subcommand)]
    pub command: Option<LayoutCommand>,
    /// The calculator's flags (absent with a subcommand).
    #[command(flatten)]
    pub calc: Option<LayoutCalcArgs>,
}

/// A successor layout for a running cluster.
#[derive(Subcommand, Debug, Clone)]
pub enum LayoutCommand {
    /// Rehearse a switch to a successor layout: its epoch, the last ID before the switch and
    /// the first after it, the lifetime and throughput of both layouts. Reads the cluster from
    /// its store; changes nothing.
    Plan(SuccessorArgs),
    /// Schedule a successor layout in the cluster record: every node switches to it at --at
    /// (by its own clock) or refuses until it can. Needs record version 4 (`idgen store
    /// upgrade`, once every node runs this release); one switch at a time.
    Schedule(SuccessorArgs),
}

impl LayoutCommand {
    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            LayoutCommand::Plan(_) => "layout plan",
            LayoutCommand::Schedule(_) => "layout schedule",
        }
    }

    /// Its arguments.
    pub fn args(&self) -> &SuccessorArgs {
        match self {
            LayoutCommand::Plan(a) | LayoutCommand::Schedule(a) => a,
        }
    }
}

/// The successor: when, its widths, its epoch.
#[derive(Args, Debug, Clone)]
pub struct SuccessorArgs {
    /// When the successor takes over: RFC 3339, ms since the Unix epoch, or a duration from
    /// now (`90s`, `2h`, `30days`).
    #[arg(long)]
    pub at: String,
    /// The successor's timestamp width. Its three widths must sum to the current layout's
    /// ID width (a layout generation keeps the width).
    #[arg(long)]
    pub timestamp_bits: u8,
    #[arg(long)]
    pub worker_bits: u8,
    #[arg(long)]
    pub sequence_bits: u8,
    #[arg(long, default_value_t = 0)]
    pub region_bits: u8,
    /// The successor's epoch: RFC 3339 or ms since the Unix epoch [default: the latest that
    /// keeps every ID after the switch above every ID before it: the longest lifetime].
    #[arg(long)]
    pub epoch: Option<String>,
    /// The store, as `idgen inspect` reaches it (its `--json` gives one JSON object).
    #[command(flatten)]
    pub store: Box<InspectArgs>,
}

/// Unix ms of `--at`: a time, or a duration from `now`.
pub fn parse_at(text: &str, now: u64) -> Result<u64, String> {
    if let Ok(d) = humantime::parse_duration(text.trim()) {
        let ms = u64::try_from(d.as_millis()).map_err(|_| format!("--at {text:?}: too far"))?;
        return Ok(now.saturating_add(ms));
    }
    super::bounds::parse_time("at", text)
}

impl SuccessorArgs {
    /// The successor layout after `current`, switching at `switch`.
    fn layout(&self, current: &Layout, switch: u64) -> Result<Layout, Failure> {
        let latest = successor_epoch(current, switch, self.worker_bits, self.sequence_bits)
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "the switch at {switch} ms is not inside the current layout's range ({current})"
                ))
            })?;
        let epoch = match &self.epoch {
            Some(e) => crate::config::parse_epoch(e).map_err(|e| Failure::Usage(e.0))?,
            None => latest,
        };
        Layout::new(
            epoch,
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.region_bits,
        )
        .map_err(|e| Failure::Usage(format!("successor layout: {e}")))
    }
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// The plan as text or JSON.
pub fn report(plan: &Plan, scheduled: bool, as_json: bool) -> String {
    let (c, n) = (plan.current, plan.successor);
    let switch = n.switch_unix_ms.unwrap_or(0);
    let rate = |l: &Layout| l.sequence_count().saturating_mul(1000);
    if as_json {
        let layout = |l: &Layout| {
            json!({
                "epoch_ms": l.epoch_ms(),
                "timestamp_bits": l.timestamp_bits(),
                "worker_bits": l.worker_bits(),
                "sequence_bits": l.sequence_bits(),
                "region_bits": l.region_bits(),
                "ends_at": rfc3339(l.end_unix_ms()),
                "ids_per_second_per_worker": rate(l),
                "worker_ids": l.worker_count(),
            })
        };
        return json!({
            "scheduled": scheduled,
            "switch_unix_ms": switch,
            "switch": rfc3339(switch),
            "current": {"layout_generation": c.index, "layout": layout(&c.layout), "years_left_at_switch": plan.current_left_ms as f64 / MS_PER_YEAR},
            "successor": {"layout_generation": n.index, "layout": layout(&n.layout), "years_left_at_switch": plan.successor_left_ms as f64 / MS_PER_YEAR},
            "last_id_before": plan.last_id_before,
            "last_id_before_str": plan.last_id_before.to_string(),
            "first_id": n.first_id,
            "first_id_str": n.first_id.to_string(),
        })
        .to_string()
            + "\n";
    }
    let verb = if scheduled { "scheduled" } else { "plan" };
    format!(
        "{verb}: layout generation {} -> {} at {} ({switch} ms)\n\
         current:   {}\n\
         \x20          ends {} ({:.2} years left at the switch); {} IDs/s per worker, {} worker IDs\n\
         successor: {}\n\
         \x20          ends {} ({:.2} years from the switch); {} IDs/s per worker, {} worker IDs\n\
         IDs before the switch are at most {}; from the switch on they are at least {} (ORDER BY id keeps working)\n{}",
        c.index,
        n.index,
        rfc3339(switch),
        c.layout,
        rfc3339(c.layout.end_unix_ms()),
        plan.current_left_ms as f64 / MS_PER_YEAR,
        rate(&c.layout),
        c.layout.worker_count(),
        n.layout,
        rfc3339(n.layout.end_unix_ms()),
        plan.successor_left_ms as f64 / MS_PER_YEAR,
        rate(&n.layout),
        n.layout.worker_count(),
        plan.last_id_before,
        n.first_id,
        if scheduled {
            "Every node switches at that time by its own clock (or refuses until it can). Clients decode IDs of both with GET /layout's \"layouts\".\n"
        } else {
            "Nothing was changed: `idgen layout schedule` with the same flags schedules it.\n"
        },
    )
}

/// Runs `cmd` against the store `lease` names.
pub async fn run(cmd: &LayoutCommand, lease: &LeaseSection) -> Result<String, Failure> {
    let args = cmd.args();
    let now = SystemClock::new().wall_ms();
    let switch = parse_at(&args.at, now).map_err(Failure::Usage)?;
    let store = open_store(lease, false).await.map_err(Failure::Runtime)?;
    let mut config = lease.lease_config(1);
    config.min_id = None;
    let owner = Owner::this_process(Some("idgen-layout".into()), now);
    let probe = Leases::new(
        store.as_ref(),
        Layout::default(),
        config.clone(),
        owner.clone(),
    );
    let rec = probe
        .cluster()
        .await
        .map_err(|e| Failure::Runtime(e.to_string()))?
        .ok_or_else(|| {
            Failure::Runtime(format!(
                "no cluster in namespace {:?} of {}: no node has started there",
                lease.namespace, lease.store
            ))
        })?;
    let gens: Generations = rec
        .generations()
        .map_err(|e| Failure::Runtime(format!("the cluster record's layouts: {e}")))?;
    let current = gens.newest().layout;
    let successor = args.layout(&current, switch)?;
    let plan = gens
        .plan(successor, switch)
        .map_err(|e| Failure::Usage(e.0))?;
    match cmd {
        LayoutCommand::Plan(_) => Ok(report(&plan, false, args.store.json)),
        LayoutCommand::Schedule(_) => {
            let leases = Leases::new(store.as_ref(), current, config, owner);
            leases
                .schedule_successor(successor, switch, now)
                .await
                .map_err(|e| match e {
                    LeaseError::BadRequest(m) => Failure::Usage(m),
                    e => Failure::Runtime(e.to_string()),
                })?;
            tracing::info!(
                event = "layout_scheduled",
                namespace = %lease.namespace,
                layout_generation = plan.successor.index,
                switch_unix_ms = switch,
                layout = %successor,
                "successor layout scheduled"
            );
            Ok(report(&plan, true, args.store.json))
        }
    }
}
