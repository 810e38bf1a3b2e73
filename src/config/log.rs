//! `[log]`: the log output. Taken by the log subscriber.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{err, ser, ConfigError};

settings! {
    /// The `[log]` settings as given: flags, `IDGEN_*` variables, the file's `[log]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Logging ([log] in the file)")]
    pub struct LogArgs {
        /// Log format: `text` or `json`.
        #[arg(long, env = "IDGEN_LOG_FORMAT")]
        pub log_format: Option<String>,
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogSection {
    #[serde(serialize_with = "ser::display")]
    pub log_format: LogFormat,
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
        Ok(LogSection { log_format })
    }
}
