//! `idgen seq create|alter|drop|list|get`: named sequences, kept in the coordination store
//! (`idgen_core::sequence`), managed against the store as `idgen inspect` reads it: the same
//! `[lease]` settings (flags, `IDGEN_*` variables, `--config`) say which store and namespace.
//! Each change is logged as an audit event (`event=sequence_created`, `sequence_altered`,
//! `sequence_dropped`) with the record it left.

use clap::{Args, Subcommand};
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::sequence::{
    Alter, Mode, SequenceError, SequenceName, SequenceRecord, SequenceSpec, Sequences,
    DEFAULT_MAX_BLOCK, MAX_BLOCK, MAX_VALUE,
};
use serde_json::json;

use super::exit::Failure;
use super::tls::ClientTls;
use super::InspectArgs;
use crate::config::LeaseSection;
use crate::config::ListenSection;

/// `idgen seq …`.
#[derive(Args, Debug, Clone)]
pub struct SeqArgs {
    #[command(subcommand)]
    pub command: SeqCommand,
}

/// The operations on named sequences.
#[derive(Subcommand, Debug, Clone)]
pub enum SeqCommand {
    /// Create a sequence. Values are positive and fit a signed 64-bit integer.
    Create {
        /// 1 to 64 of a-z, 0-9, '.', '_', '-', starting with a letter or a digit.
        name: String,
        /// dense: blocks reserved ahead, unique and increasing per node, gaps when a node
        /// stops; strict: each value's reservation commits after its call began (real-time
        /// order across nodes), one store commit per batch of waiting calls.
        #[arg(long, default_value = "dense")]
        mode: String,
        /// The first value.
        #[arg(long, default_value_t = 1)]
        start: u64,
        /// The step between values.
        #[arg(long, default_value_t = 1)]
        increment: u64,
        /// The largest value handed out; past it calls are refused.
        #[arg(long, default_value_t = MAX_VALUE)]
        max: u64,
        /// The most values one dense block holds (what a stopped node can lose, twice).
        #[arg(long, default_value_t = DEFAULT_MAX_BLOCK)]
        max_block: u64,
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
    /// Change a sequence: never below a value already handed out.
    Alter {
        name: String,
        #[arg(long)]
        increment: Option<u64>,
        /// The new maximum: at least the largest value a block holds.
        #[arg(long)]
        max: Option<u64>,
        #[arg(long)]
        max_block: Option<u64>,
        /// Continue at this value (at least the next value not yet reserved).
        #[arg(long)]
        restart: Option<u64>,
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
    /// Drop a sequence: calls are refused. Its record stays so that a sequence created again
    /// under the name starts above every value it reserved.
    Drop {
        name: String,
        /// Also remove the record (and its place among the namespace's 1024): only once no
        /// node can still hold a block of it (every node restarted since the drop).
        #[arg(long)]
        forget: bool,
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
    /// List the namespace's sequences, dropped ones included.
    List {
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
    /// Show one sequence.
    Get {
        name: String,
        #[command(flatten)]
        store: Box<InspectArgs>,
    },
    /// Take values from a running node's HTTP ID API (POST /seq/NAME), one per line.
    Next {
        name: String,
        /// How many values.
        #[arg(short = 'n', long = "count", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_BLOCK as i64))]
        count: u32,
        /// The node's HTTP ID API address (host:port).
        #[arg(long, default_value_t = ListenSection::default().http_listen.map_or_else(String::new, |a| a.to_string()), env = "IDGEN_HTTP_ADDR")]
        addr: String,
        /// Give up after this long.
        #[arg(long, default_value = "10s")]
        timeout: String,
        #[command(flatten)]
        tls: ClientTls,
    },
}

impl SeqCommand {
    /// The subcommand's name, for messages (`idgen seq create: …`).
    pub fn name(&self) -> &'static str {
        match self {
            SeqCommand::Create { .. } => "seq create",
            SeqCommand::Alter { .. } => "seq alter",
            SeqCommand::Drop { .. } => "seq drop",
            SeqCommand::List { .. } => "seq list",
            SeqCommand::Get { .. } => "seq get",
            SeqCommand::Next { .. } => "seq next",
        }
    }
}

fn parse_name(name: &str) -> Result<SequenceName, Failure> {
    name.parse()
        .map_err(|e: SequenceError| Failure::Usage(e.to_string()))
}

/// A sequence error as the command's failure: what the operator wrote wrongly is a usage
/// error (2), what the store refused or could not do is a runtime failure (1).
fn failure(e: SequenceError) -> Failure {
    match e {
        SequenceError::BadName { .. } | SequenceError::BadSpec(_) => Failure::Usage(e.to_string()),
        e => Failure::Runtime(e.to_string()),
    }
}

/// The record as the JSON `--json` prints and the audit events carry.
pub fn record_json(rec: &SequenceRecord) -> serde_json::Value {
    json!({
        "name": rec.name.as_str(),
        "mode": rec.spec.mode.to_string(),
        "state": rec.state.to_string(),
        "start": rec.spec.start,
        "increment": rec.spec.increment,
        "max": rec.spec.max,
        "max_block": rec.spec.max_block,
        "next": rec.next,
        "remaining": rec.remaining(),
        "blocks": rec.blocks,
        "revision": rec.revision,
        "created_unix_ms": rec.created_unix_ms,
        "changed_unix_ms": rec.changed_unix_ms,
    })
}

fn table(records: &[SequenceRecord]) -> String {
    let mut s = format!(
        "{:<24} {:<6} {:<7} {:>20} {:>20} {:>20} {:>9}\n",
        "name", "mode", "state", "next", "max", "remaining", "increment"
    );
    for r in records {
        s.push_str(&format!(
            "{:<24} {:<6} {:<7} {:>20} {:>20} {:>20} {:>9}\n",
            r.name.as_str(),
            r.spec.mode.to_string(),
            r.state.to_string(),
            r.next,
            r.spec.max,
            r.remaining(),
            r.spec.increment
        ));
    }
    s
}

/// Logs a change as an audit event, with the record it left.
fn audit(event: &'static str, rec: &SequenceRecord) {
    tracing::info!(
        event,
        name = rec.name.as_str(),
        mode = %rec.spec.mode,
        next = rec.next,
        max = rec.spec.max,
        increment = rec.spec.increment,
        revision = rec.revision,
        "sequence {}: {}",
        rec.name,
        event.trim_start_matches("sequence_")
    );
}

/// One command, its input checked.
enum Op {
    Create(SequenceName, SequenceSpec),
    Alter(SequenceName, Alter),
    Drop(SequenceName, bool),
    Get(SequenceName),
    List,
}

impl SeqCommand {
    /// The store settings the command was given (`seq next` asks a node, not the store).
    pub fn store(&self) -> Option<&InspectArgs> {
        match self {
            SeqCommand::Create { store, .. }
            | SeqCommand::Alter { store, .. }
            | SeqCommand::Drop { store, .. }
            | SeqCommand::List { store }
            | SeqCommand::Get { store, .. } => Some(store),
            SeqCommand::Next { .. } => None,
        }
    }

    /// What the operator wrote, checked before any store is opened.
    fn op(&self) -> Result<Op, Failure> {
        Ok(match self {
            SeqCommand::Create {
                name,
                mode,
                start,
                increment,
                max,
                max_block,
                ..
            } => Op::Create(
                parse_name(name)?,
                SequenceSpec {
                    mode: mode.parse::<Mode>().map_err(Failure::Usage)?,
                    start: *start,
                    increment: *increment,
                    max: *max,
                    at_max: Default::default(),
                    max_block: *max_block,
                },
            ),
            SeqCommand::Alter {
                name,
                increment,
                max,
                max_block,
                restart,
                ..
            } => {
                let change = Alter {
                    increment: *increment,
                    max: *max,
                    max_block: *max_block,
                    restart: *restart,
                };
                if change == Alter::default() {
                    return Err(Failure::Usage(
                        "nothing to change: give --increment, --max, --max-block or --restart"
                            .into(),
                    ));
                }
                Op::Alter(parse_name(name)?, change)
            }
            SeqCommand::Drop { name, forget, .. } => Op::Drop(parse_name(name)?, *forget),
            SeqCommand::Get { name, .. } => Op::Get(parse_name(name)?),
            SeqCommand::List { .. } => Op::List,
            SeqCommand::Next { .. } => {
                return Err(Failure::Usage(
                    "seq next asks a node (seq::next), not the store".into(),
                ))
            }
        })
    }
}

/// Runs one `idgen seq` command against the store `lease` names (its settings resolved);
/// answers what to print.
pub async fn run(cmd: &SeqCommand, lease: &LeaseSection) -> Result<String, Failure> {
    let op = cmd.op()?;
    let as_json = cmd.store().is_some_and(|s| s.json);
    // Creating a sequence may make a node's embedded store (before its first start; run it as
    // the node's user); every other command needs one that exists.
    let store = super::open_store(lease, matches!(op, Op::Create(..)))
        .await
        .map_err(Failure::Runtime)?;
    let seqs = Sequences::new(store.as_ref(), &lease.namespace);
    let now = SystemClock::new().wall_ms();
    let show = |recs: &[SequenceRecord]| {
        if as_json {
            match recs {
                [one] => record_json(one).to_string(),
                all => serde_json::Value::Array(all.iter().map(record_json).collect()).to_string(),
            }
        } else {
            table(recs).trim_end().to_string()
        }
    };
    let changed = |event: &'static str, rec: SequenceRecord| {
        audit(event, &rec);
        show(&[rec])
    };
    match op {
        Op::Create(name, spec) => {
            let rec = seqs.create(&name, spec, now).await.map_err(failure)?;
            Ok(changed("sequence_created", rec))
        }
        Op::Alter(name, change) => {
            let rec = seqs.alter(&name, change, now).await.map_err(failure)?;
            Ok(changed("sequence_altered", rec))
        }
        Op::Drop(name, forget) => {
            let rec = seqs.drop(&name, forget, now).await.map_err(failure)?;
            Ok(changed("sequence_dropped", rec))
        }
        Op::Get(name) => match seqs.get(&name).await.map_err(failure)? {
            Some(rec) => Ok(show(&[rec])),
            None => Err(Failure::Runtime(format!(
                "no sequence named {name} in namespace {:?}",
                lease.namespace
            ))),
        },
        Op::List => {
            let all = seqs.list().await.map_err(failure)?;
            // A list is always an array, even of one.
            Ok(if as_json {
                serde_json::Value::Array(all.iter().map(record_json).collect()).to_string()
            } else {
                show(&all)
            })
        }
    }
}

/// `idgen seq next NAME -n N`: `N` values from the node's HTTP ID API at `addr`, one per line
/// (`POST /seq/NAME`, or `/seq/NAME/batch` for more than one). A refusal is a runtime failure
/// naming the node's answer; a name that cannot be one is a usage error before any request.
pub fn next(
    name: &str,
    count: u32,
    addr: &str,
    timeout: &str,
    tls: &ClientTls,
) -> Result<Vec<u64>, Failure> {
    let name = parse_name(name)?;
    let timeout = crate::config::parse_duration("timeout", timeout)?;
    let connector = tls.connector(addr, b"http/1.1").map_err(Failure::Usage)?;
    let (path, body) = if count == 1 {
        (format!("/seq/{name}"), None)
    } else {
        (
            format!("/seq/{name}/batch"),
            Some(format!("{{\"count\": {count}}}")),
        )
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Runtime(e.to_string()))?;
    let (status, text) = rt
        .block_on(async {
            tokio::time::timeout(
                timeout,
                super::health::call(addr, "POST", &path, body, connector),
            )
            .await
            .map_err(|_| format!("{addr}: no answer within {timeout:?}"))?
        })
        .map_err(Failure::Runtime)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::Runtime(format!("{addr}: not JSON ({e}): {text}")))?;
    if status != 200 {
        let why = v["error"].as_str().unwrap_or(&text);
        return Err(Failure::Runtime(format!("{addr}: {status}: {why}")));
    }
    let values: Option<Vec<u64>> = if count == 1 {
        v["value"].as_u64().map(|x| vec![x])
    } else {
        v["values"]
            .as_array()
            .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
    };
    values.filter(|v| v.len() == count as usize).ok_or_else(|| {
        Failure::Runtime(format!("{addr}: an answer without {count} values: {text}"))
    })
}
