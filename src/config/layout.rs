//! `[layout]`: the ID layout, fixed per cluster. It resolves to a [`Layout`], whose `Default`
//! (`idgen_id::Layout::default`) is the default layout; the generators, the connections and the lease
//! keeper take it by value.

use clap::Args;
use idgen_id::Layout;
use serde::Deserialize;

use super::{de, err, parse_epoch, ConfigError};

settings! {
    /// The `[layout]` settings as given: flags, `IDGEN_*` variables, the file's `[layout]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "ID layout, fixed per cluster ([layout] in the file)")]
    pub struct LayoutArgs {
        /// ID epoch: RFC 3339 (`2026-01-01T00:00:00Z`) or ms since the Unix epoch.
        #[arg(long, env = "IDGEN_EPOCH")]
        #[serde(deserialize_with = "de::epoch")]
        pub epoch: Option<String>,
        /// Timestamp bits.
        #[arg(long, env = "IDGEN_TIMESTAMP_BITS")]
        pub timestamp_bits: Option<u8>,
        /// Worker bits.
        #[arg(long, env = "IDGEN_WORKER_BITS")]
        pub worker_bits: Option<u8>,
        /// Sequence bits.
        #[arg(long, env = "IDGEN_SEQUENCE_BITS")]
        pub sequence_bits: Option<u8>,
        /// Region bits, taken from the top of the worker field.
        #[arg(long, env = "IDGEN_REGION_BITS")]
        pub region_bits: Option<u8>,
    }
}

/// Resolves and validates the section against the wall clock `now_unix_ms` (the epoch must
/// not be in the future).
pub fn resolve(given: LayoutArgs, now_unix_ms: u64) -> Result<Layout, ConfigError> {
    let d = Layout::default();
    let epoch_ms = match given.epoch {
        Some(text) => parse_epoch(&text)?,
        None => d.epoch_ms(),
    };
    let layout = Layout::new(
        epoch_ms,
        given.timestamp_bits.unwrap_or(d.timestamp_bits()),
        given.worker_bits.unwrap_or(d.worker_bits()),
        given.sequence_bits.unwrap_or(d.sequence_bits()),
        given.region_bits.unwrap_or(d.region_bits()),
    )
    .map_err(|e| err(format!("layout: {e}")))?;
    layout
        .check_epoch(now_unix_ms)
        .map_err(|e| err(format!("layout: {e}")))?;
    Ok(layout)
}

/// The layout as the file's `[layout]` table: the epoch as a TOML date-time (or ms, should
/// it have none), the bits as integers.
pub(super) fn table(layout: &Layout) -> toml::Table {
    let ms = layout.epoch_ms();
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    let text = if ms.is_multiple_of(1000) {
        humantime::format_rfc3339_seconds(time).to_string()
    } else {
        humantime::format_rfc3339_millis(time).to_string()
    };
    let epoch = match text.parse::<toml::value::Datetime>() {
        Ok(t) => toml::Value::Datetime(t),
        Err(_) => toml::Value::Integer(i64::try_from(ms).unwrap_or(i64::MAX)),
    };
    let mut t = toml::Table::new();
    t.insert("epoch".into(), epoch);
    for (key, bits) in [
        ("timestamp_bits", layout.timestamp_bits()),
        ("worker_bits", layout.worker_bits()),
        ("sequence_bits", layout.sequence_bits()),
        ("region_bits", layout.region_bits()),
    ] {
        t.insert(key.into(), toml::Value::Integer(bits.into()));
    }
    t
}
