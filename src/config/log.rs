//! `[log]`: the log output. Taken by the log subscriber.
//!
//! The level is a tracing `EnvFilter` directive list (`info`, `warn,idgen=debug`, …). It comes
//! from, highest first: `--log-level`, `IDGEN_LOG`, the file's `[log] log_level`, `RUST_LOG`,
//! and `info`. A value that does not parse, or a bare word that is no level (`verbose`,
//! `warning`: tracing would take it for a target name and log nothing else), is a
//! configuration error.

use clap::Args;
use serde::{Deserialize, Serialize};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

use super::{err, ser, ConfigError};

/// The level when neither `--log-level`, `IDGEN_LOG`, the file nor `RUST_LOG` gives one.
pub const DEFAULT_LOG_LEVEL: &str = "info";

settings! {
    /// The `[log]` settings as given: flags, `IDGEN_*` variables, the file's `[log]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Logging ([log] in the file)")]
    pub struct LogArgs {
        /// Log format: `text` or `json`.
        #[arg(long, env = "IDGEN_LOG_FORMAT")]
        pub log_format: Option<String>,
        /// Log level, as tracing directives: `info`, `debug`, `warn,idgen=debug`, `off`
        /// [default: RUST_LOG, else info].
        #[arg(long, env = "IDGEN_LOG", value_name = "DIRECTIVES")]
        pub log_level: Option<String>,
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// The `[log]` section, resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogSection {
    #[serde(serialize_with = "ser::display")]
    pub log_format: LogFormat,
    /// Checked directives; `None`: not set, so `RUST_LOG`, else [`DEFAULT_LOG_LEVEL`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
}

impl LogSection {
    /// Resolves and validates the section.
    pub fn resolve(given: LogArgs) -> Result<LogSection, ConfigError> {
        let log_format = match given.log_format.as_deref() {
            None => LogSection::default().log_format,
            Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(err(format!(
                    "log_format: {other:?} is not `text` or `json`"
                )))
            }
        };
        let log_level = match given.log_level {
            Some(text) => {
                parse_filter(&text).map_err(|e| err(format!("log_level: {e}")))?;
                Some(text.trim().to_string())
            }
            None => None,
        };
        Ok(LogSection {
            log_format,
            log_level,
        })
    }

    /// The filter of the log subscriber: `log_level`, else `RUST_LOG` (read now, and checked
    /// like `log_level`), else [`DEFAULT_LOG_LEVEL`].
    pub fn filter(&self) -> Result<EnvFilter, ConfigError> {
        if let Some(level) = &self.log_level {
            return parse_filter(level).map_err(|e| err(format!("log_level: {e}")));
        }
        match std::env::var("RUST_LOG") {
            Ok(text) if !text.trim().is_empty() => {
                parse_filter(&text).map_err(|e| err(format!("RUST_LOG: {e}")))
            }
            Ok(_) | Err(std::env::VarError::NotPresent) => parse_filter(DEFAULT_LOG_LEVEL)
                .map_err(|e| err(format!("the default log level: {e}"))),
            Err(std::env::VarError::NotUnicode(_)) => Err(err("RUST_LOG: not UTF-8")),
        }
    }
}

/// Parses tracing `EnvFilter` directives, refusing what tracing would take silently for
/// something else: an empty list, and a bare word that is no level (a target needs
/// `target=level`).
pub fn parse_filter(text: &str) -> Result<EnvFilter, String> {
    const LEVELS: &str = "off, error, warn, info, debug or trace";
    let text = text.trim();
    if text.is_empty() {
        return Err(format!(
            "empty: give a level ({LEVELS}) or directives like `warn,idgen=debug`"
        ));
    }
    for directive in text.split(',').map(str::trim) {
        // Directives with a target, a span or fields are left to tracing's own parser.
        if directive.is_empty() || directive.contains(['=', '[', ']', '{', '}']) {
            continue;
        }
        if directive.parse::<LevelFilter>().is_err() {
            return Err(format!(
                "{directive:?} is not a level ({LEVELS}); for a target write `target=level`, \
                 e.g. `{directive}=debug`"
            ));
        }
    }
    EnvFilter::builder()
        .parse(text)
        .map_err(|e| format!("{text:?} is not a list of tracing directives: {e}"))
}
