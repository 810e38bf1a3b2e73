//! Configuration of `idgen serve`, in sections: one section per component, and each component
//! takes only its section.
//!
//! | section | flags and file table | resolved | taken by |
//! |---|---|---|---|
//! | `[listen]` | [`ListenArgs`] | [`ListenSection`] | the shards and their connections (by value) |
//! | `[lease]` | [`LeaseArgs`] | [`LeaseSection`] | the store and the lease keeper ([`LeaseSection::lease_config`]) |
//! | `[layout]` | [`LayoutArgs`] | [`Layout`] | the generators, the connections, the lease keeper |
//! | `[clock]` | [`ClockArgs`] | [`ClockSection`] | the generators, the clock watch, the range watch |
//! | `[admin]` | [`AdminArgs`] | [`AdminSection`] | the admin HTTP listener |
//! | `[tls]` | [`TlsArgs`] | [`TlsSection`] | the TLS acceptors of the listeners |
//! | `[shutdown]` | [`ShutdownArgs`] | [`ShutdownSection`] | the node's drain and the shards' drain |
//! | `[log]` | [`LogArgs`] | [`LogSection`] | the log subscriber |
//! | `[mask]` | [`MaskArgs`] | [`MaskSection`] | the HTTP ID API's masked answers |
//!
//! A section is two types. `…Args` holds its settings as given, every one optional: the same
//! struct is the section's flags, their `IDGEN_*` environment variables and its table of the
//! TOML file (a setting's file key is its flag's name with `_` for `-`). `…Section` holds them
//! resolved and validated; its `Default` states each default once, and `idgen serve --help`
//! shows the defaults from there ([`with_defaults_in_help`]).
//!
//! Precedence, highest first: a command-line flag, its `IDGEN_*` environment variable, the TOML
//! file given by `--config`, the default. Durations are written like `10s`, `500ms`, `2m`.
//! `idgen serve --check-config` validates everything and prints the resolved configuration as
//! a complete file that `--config` accepts back. `deploy/idgen.toml` is a commented sample.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use idgen_id::Layout;

/// Declares a section's settings as given: one struct for its flags, their environment
/// variables and its table of the file, every field an `Option`; `or` merges two of them.
macro_rules! settings {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $name {
            /// These settings, and `other`'s where one is not given here.
            pub fn or(self, other: Self) -> Self {
                Self { $($field: self.$field.or(other.$field),)* }
            }
        }
    };
}

pub mod admin;
pub mod clock;
pub mod layout;
pub mod lease;
pub mod listen;
pub mod log;
pub mod mask;
pub mod shutdown;
pub mod tls;

pub use admin::{AdminArgs, AdminSection};
pub use clock::{ClockArgs, ClockSection};
pub use layout::LayoutArgs;
pub use lease::{LeaseArgs, LeaseSection};
pub use listen::{ListenArgs, ListenSection, MAX_BATCH_LIMIT};
pub use log::{LogArgs, LogFormat, LogSection, DEFAULT_LOG_LEVEL};
pub use mask::{MaskArgs, MaskSection, MASK_KEYS_ENV};
pub use shutdown::{ShutdownArgs, ShutdownSection};
pub use tls::{AdminTls, TlsArgs, TlsSection};

/// Every section's settings as given: the flags (and environment) of `idgen serve`, and the
/// TOML file, whose tables are the sections.
#[derive(Args, Deserialize, Debug, Default, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    #[command(flatten)]
    pub listen: ListenArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub layout: LayoutArgs,
    #[command(flatten)]
    pub clock: ClockArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub shutdown: ShutdownArgs,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    pub mask: MaskArgs,
}

/// Flags of `idgen serve`. Every setting can also be set by its environment variable or in its
/// section of the file.
#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// TOML configuration file, one table per section (see deploy/idgen.toml).
    #[arg(long, env = "IDGEN_CONFIG")]
    pub config: Option<PathBuf>,
    /// Validate the configuration, print it resolved as a configuration file, and exit.
    #[arg(long)]
    pub check_config: bool,
    #[command(flatten)]
    pub settings: Settings,
    /// Where each setting on the command line came from (filled by the caller from clap's
    /// matches, [`Origins::of`]): errors name the flag or variable the user wrote.
    #[arg(skip)]
    pub origins: Origins,
}

/// Where the settings given on the command line came from: a flag (`--lease-ttl`) or its
/// environment variable (`IDGEN_LEASE_TTL`). A setting not here came from the file (or is the
/// default) and is named by its file key.
///
/// An error about one setting starts with that setting's key (`lease_ttl: "soon" is not a
/// duration`); [`Origins::name`] puts the flag or variable in its place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origins {
    /// Setting key (the argument's id) → the flag or variable that gave it.
    given: std::collections::BTreeMap<String, String>,
}

impl Origins {
    /// The origins of the settings `cmd`'s arguments took in `matches` (its own matches).
    pub fn of(cmd: &clap::Command, matches: &clap::ArgMatches) -> Origins {
        let mut given = std::collections::BTreeMap::new();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            let label = match matches.value_source(id) {
                Some(clap::parser::ValueSource::CommandLine) => {
                    arg.get_long().map(|l| format!("--{l}"))
                }
                Some(clap::parser::ValueSource::EnvVariable) => {
                    arg.get_env().map(|e| e.to_string_lossy().into_owned())
                }
                _ => None,
            };
            if let Some(label) = label {
                given.insert(id.to_string(), label);
            }
        }
        Origins { given }
    }

    /// `e` with the setting it starts with named as the user wrote it: its flag or its
    /// variable, else (the file, a default) its key as it is.
    pub fn name(&self, e: ConfigError) -> ConfigError {
        let ConfigError(msg) = e;
        let key = self
            .given
            .keys()
            .filter(|k| {
                msg.strip_prefix(k.as_str())
                    .is_some_and(|rest| rest.starts_with([':', ' ']))
            })
            .max_by_key(|k| k.len());
        match key {
            Some(k) => ConfigError(format!("{}{}", self.given[k], &msg[k.len()..])),
            None => ConfigError(msg),
        }
    }
}

/// The resolved, validated configuration of a node: one value per section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeConfig {
    pub listen: ListenSection,
    pub lease: LeaseSection,
    pub layout: Layout,
    pub clock: ClockSection,
    pub admin: AdminSection,
    pub tls: TlsSection,
    pub shutdown: ShutdownSection,
    pub log: LogSection,
    pub mask: MaskSection,
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

/// The duration setting `name`: parsed if given, else `default`.
fn duration(name: &str, given: Option<String>, default: Duration) -> Result<Duration, ConfigError> {
    match given {
        Some(t) => parse_duration(name, &t),
        None => Ok(default),
    }
}

/// Parses an address setting that `off` (or `none`, or nothing) disables.
fn parse_addr_or_off(name: &str, text: &str) -> Result<Option<SocketAddr>, ConfigError> {
    match text.trim() {
        "off" | "none" | "" => Ok(None),
        a => a
            .parse()
            .map(Some)
            .map_err(|e| err(format!("{name}: {a:?}: {e}"))),
    }
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

/// Writes a duration so that it reads back exactly: whole days as `Ndays`, whole seconds as
/// `Ns`, whole milliseconds as `Nms`.
pub fn format_duration(d: Duration) -> String {
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return humantime::format_duration(d).to_string();
    }
    if d.subsec_nanos() != 0 {
        return format!("{}ms", d.as_millis());
    }
    match d.as_secs() {
        s if s > 0 && s.is_multiple_of(86_400) => format!("{}days", s / 86_400),
        s => format!("{s}s"),
    }
}

impl Settings {
    /// These settings, and `file`'s where one is not given here.
    pub fn or(self, file: Settings) -> Settings {
        Settings {
            listen: self.listen.or(file.listen),
            lease: self.lease.or(file.lease),
            layout: self.layout.or(file.layout),
            clock: self.clock.or(file.clock),
            admin: self.admin.or(file.admin),
            tls: self.tls.or(file.tls),
            shutdown: self.shutdown.or(file.shutdown),
            log: self.log.or(file.log),
            mask: self.mask.or(file.mask),
        }
    }

    /// Reads a configuration file: one TOML table per section, unknown keys refused.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("config file {}: {e}", path.display())))?;
        let in_file =
            |e: &dyn std::fmt::Display| err(format!("config file {}: {e}", path.display()));
        // A setting outside its table (the flat files of earlier versions): name its table.
        let table: toml::Table = toml::from_str(&text).map_err(|e| in_file(&e))?;
        for (key, value) in &table {
            if value.is_table() {
                continue;
            }
            if let Some(section) = section_of(key) {
                return Err(in_file(&format!(
                    "`{key}` is a setting of the [{section}] table: write it under `[{section}]`"
                )));
            }
        }
        toml::from_str(&text).map_err(|e| in_file(&e))
    }
}

/// The section whose table holds the setting `key`.
fn section_of(key: &str) -> Option<&'static str> {
    fn has<A: Args>(key: &str) -> bool {
        A::augment_args(clap::Command::new("section"))
            .get_arguments()
            .any(|a| a.get_id() == key)
    }
    [
        ("listen", has::<ListenArgs>(key)),
        ("lease", has::<LeaseArgs>(key)),
        ("layout", has::<LayoutArgs>(key)),
        ("clock", has::<ClockArgs>(key)),
        ("admin", has::<AdminArgs>(key)),
        ("tls", has::<TlsArgs>(key)),
        ("shutdown", has::<ShutdownArgs>(key)),
        ("log", has::<LogArgs>(key)),
        ("mask", has::<MaskArgs>(key)),
    ]
    .into_iter()
    .find_map(|(name, found)| found.then_some(name))
}

impl ServeArgs {
    /// Merges flags/env over the file over defaults and validates the result against the
    /// wall clock `now_unix_ms`.
    /// An error about one setting names it as the user wrote it: the flag, the `IDGEN_*`
    /// variable, or the file's key.
    pub fn resolve(&self, now_unix_ms: u64) -> Result<ServeConfig, ConfigError> {
        let file = match &self.config {
            Some(p) => Settings::load(p)?,
            None => Settings::default(),
        };
        ServeConfig::resolve(self.settings.clone().or(file), now_unix_ms)
            .map_err(|e| self.origins.name(e))
    }

    /// [`resolve`](Self::resolve), for a node of this build to run: a store this build cannot
    /// open (`etcd://` without the `etcd` feature) is a configuration error too, since no
    /// restart or retry can serve it.
    pub fn resolve_to_run(&self, now_unix_ms: u64) -> Result<ServeConfig, ConfigError> {
        let config = self.resolve(now_unix_ms)?;
        config.lease.supported().map_err(|e| self.origins.name(e))?;
        Ok(config)
    }
}

impl ServeConfig {
    /// Resolves and validates each section by itself, then what spans sections: the worker
    /// IDs the shards lease must fit the layout's worker space, and the ID protocol must have
    /// a listener, plaintext or TLS.
    pub fn resolve(given: Settings, now_unix_ms: u64) -> Result<ServeConfig, ConfigError> {
        let layout = layout::resolve(given.layout, now_unix_ms)?;
        let lease = LeaseSection::resolve(given.lease, &layout)?;
        let listen = ListenSection::resolve(given.listen)?;
        let (shards, per_shard) = (listen.shards, listen.workers_per_shard);
        let space = if lease.region.region().is_some() {
            layout.workers_per_region()
        } else {
            layout.worker_count()
        };
        let wanted = (shards as u64).checked_mul(per_shard);
        if per_shard == 0 || wanted.is_none_or(|w| w > space) {
            return Err(err(format!(
                "{shards} shards × {per_shard} worker IDs do not fit the {space} worker IDs the layout offers{}",
                if lease.region.region().is_some() { " per region" } else { "" }
            )));
        }
        let tls = TlsSection::resolve(given.tls)?;
        if listen.listen.is_none() && tls.tls_listen.is_none() {
            return Err(err(
                "listen is off and tls_listen is not set: the ID protocol needs an address",
            ));
        }
        Ok(ServeConfig {
            listen,
            lease,
            layout,
            clock: ClockSection::resolve(given.clock)?,
            admin: AdminSection::resolve(given.admin)?,
            tls,
            shutdown: ShutdownSection::resolve(given.shutdown)?,
            log: LogSection::resolve(given.log)?,
            mask: MaskSection::resolve(given.mask)?,
        })
    }

    /// Every section as its table of the file, in the file's order.
    fn tables(&self) -> Result<Vec<(&'static str, toml::Table)>, ConfigError> {
        fn table(name: &str, section: &impl serde::Serialize) -> Result<toml::Table, ConfigError> {
            toml::Table::try_from(section)
                .map_err(|e| err(format!("[{name}] cannot be written as TOML: {e}")))
        }
        let mut lease = table("lease", &self.lease)?;
        if self.layout.region_bits() == 0 {
            // Without region bits the scope is always the whole worker space: nothing to say.
            lease.remove("region");
        }
        Ok(vec![
            ("listen", table("listen", &self.listen)?),
            ("lease", lease),
            ("layout", layout::table(&self.layout)),
            ("clock", table("clock", &self.clock)?),
            ("admin", table("admin", &self.admin)?),
            ("tls", table("tls", &self.tls)?),
            ("shutdown", table("shutdown", &self.shutdown)?),
            ("log", table("log", &self.log)?),
            ("mask", table("mask", &self.mask)?),
        ])
    }

    /// The configuration as a complete TOML file: every section, every resolved value. A
    /// node given this file (and nothing else) resolves the same configuration.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        let mut out = String::from(
            "# idgen serve: the resolved configuration, every section (idgen serve --config FILE)\n",
        );
        for (name, table) in self.tables()? {
            out.push_str(&format!("\n[{name}]\n"));
            if name == "layout" {
                out.push_str(&format!("# {}\n", self.layout));
            }
            for (key, value) in &table {
                out.push_str(&format!("{key} = {value}\n"));
            }
            if name == "lease" && self.lease.node_id.is_none() {
                out.push_str("# node_id is not set: the host name\n");
            }
            if name == "log" && self.log.log_level.is_none() {
                out.push_str("# log_level is not set: RUST_LOG, else info\n");
            }
            if name == "lease" && self.lease.etcd_password_from_env() {
                out.push_str(
                    "# the etcd password comes from IDGEN_ETCD_PASSWORD (never written)\n",
                );
            }
            if name == "mask" {
                out.push_str(&format!("# {}\n", self.mask.summary()));
            }
            if name == "lease" && self.lease.postgres_password_from_env() {
                out.push_str(
                    "# the PostgreSQL password comes from IDGEN_POSTGRES_PASSWORD (never written)\n",
                );
            }
        }
        Ok(out)
    }
}

/// Each setting's default as `--help` shows it: key (the flag's id) → value, from the
/// sections' `Default`s.
pub fn defaults() -> Vec<(String, String)> {
    let Ok(tables) = ServeConfig::default().tables() else {
        return Vec::new();
    };
    tables
        .into_iter()
        .flat_map(|(_, table)| table.into_iter())
        .map(|(key, value)| {
            let text = match value {
                toml::Value::String(s) => s,
                other => other.to_string(),
            };
            (key, text)
        })
        .collect()
}

/// Adds `[default: …]` from [`defaults`] to the help of every argument of `cmd` named like a
/// setting, unless its help states the default in words already (`[default: number of CPUs]`).
pub fn with_defaults_in_help(mut cmd: clap::Command) -> clap::Command {
    for (key, value) in defaults() {
        let Some(arg) = cmd.get_arguments().find(|a| a.get_id() == key.as_str()) else {
            continue;
        };
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        if help.contains("[default:") {
            continue;
        }
        let help = format!("{} [default: {value}]", help.trim_end_matches('.'));
        cmd = cmd.mut_arg(key.as_str(), |a| a.help(help));
    }
    cmd
}

/// Serde helpers: how resolved values are written in the file.
mod ser {
    use std::net::SocketAddr;
    use std::time::Duration;

    use serde::Serializer;

    pub(super) fn duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    /// An address, or `off` for none.
    pub(super) fn addr_or_off<S: Serializer>(
        a: &Option<SocketAddr>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => s.collect_str(a),
            None => s.serialize_str("off"),
        }
    }

    pub(super) fn display<S: Serializer>(
        v: &impl std::fmt::Display,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }
}

/// Deserialize helpers: file values that are not strings, taken as the text a flag would be.
mod de {
    use serde::{Deserialize, Deserializer};

    /// An epoch: a TOML date-time, an RFC 3339 string or an integer of ms.
    pub(super) fn epoch<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(i) if i < 0 => {
                Err(serde::de::Error::custom(format!("epoch: {i} is negative")))
            }
            toml::Value::Integer(i) => Ok(Some(i.to_string())),
            toml::Value::String(s) => Ok(Some(s)),
            toml::Value::Datetime(t) => Ok(Some(t.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "epoch: {other} is neither a date nor ms since the Unix epoch"
            ))),
        }
    }

    /// A region: a number or the string "global".
    pub(super) fn region<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(i) => Ok(Some(i.to_string())),
            toml::Value::String(s) => Ok(Some(s)),
            other => Err(serde::de::Error::custom(format!(
                "region: {other} is neither a region number nor \"global\""
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
