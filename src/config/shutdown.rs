//! `[shutdown]`: how a node stops. The node's drain takes the delay; each shard's drain takes
//! the timeout.

use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{duration, ser, ConfigError};

settings! {
    /// The `[shutdown]` settings as given: flags, `IDGEN_*` variables, the file's `[shutdown]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Shutdown ([shutdown] in the file)")]
    pub struct ShutdownArgs {
        /// On SIGTERM, stay up but not ready this long before draining, so load balancers move
        /// traffic away first.
        #[arg(long, env = "IDGEN_DRAIN_DELAY")]
        pub drain_delay: Option<String>,
        /// Longest a graceful shutdown waits for connections to finish.
        #[arg(long, env = "IDGEN_SHUTDOWN_TIMEOUT")]
        pub shutdown_timeout: Option<String>,
    }
}

/// The `[shutdown]` section, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ShutdownSection {
    #[serde(serialize_with = "ser::duration")]
    pub drain_delay: Duration,
    #[serde(serialize_with = "ser::duration")]
    pub shutdown_timeout: Duration,
}

impl Default for ShutdownSection {
    fn default() -> Self {
        ShutdownSection {
            drain_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

impl ShutdownSection {
    /// Resolves and validates the section.
    pub fn resolve(given: ShutdownArgs) -> Result<ShutdownSection, ConfigError> {
        let d = ShutdownSection::default();
        Ok(ShutdownSection {
            drain_delay: duration("drain_delay", given.drain_delay, d.drain_delay)?,
            shutdown_timeout: duration(
                "shutdown_timeout",
                given.shutdown_timeout,
                d.shutdown_timeout,
            )?,
        })
    }
}
