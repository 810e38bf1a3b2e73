//! `[admin]`: the admin HTTP server (metrics, health, layout). Taken by the admin listener.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::listen::nonzero;
use super::{duration, err, parse_addr_or_off, ser, ConfigError};

settings! {
    /// The `[admin]` settings as given: flags, `IDGEN_*` variables, the file's `[admin]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Admin HTTP server ([admin] in the file)")]
    pub struct AdminArgs {
        /// Address of the admin HTTP server (metrics, health); `off` disables it.
        #[arg(long, env = "IDGEN_ADMIN_LISTEN")]
        pub admin_listen: Option<String>,
        /// Close an admin connection that is idle or sends a request's head or body for longer
        /// than this.
        #[arg(long, env = "IDGEN_ADMIN_REQUEST_TIMEOUT")]
        pub admin_request_timeout: Option<String>,
        /// Also expose the metrics under the names of the previous release, in their old units
        /// (docs/METRICS.md lists them); `--metrics-legacy-names` alone means true.
        #[arg(
            long,
            env = "IDGEN_METRICS_LEGACY_NAMES",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "true"
        )]
        pub metrics_legacy_names: Option<bool>,
    }
}

/// The `[admin]` section, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AdminSection {
    /// `None`: no admin server.
    #[serde(serialize_with = "ser::addr_or_off")]
    pub admin_listen: Option<SocketAddr>,
    #[serde(serialize_with = "ser::duration")]
    pub admin_request_timeout: Duration,
    /// `/metrics` also carries the previous release's names.
    pub metrics_legacy_names: bool,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 7421))),
            admin_request_timeout: Duration::from_secs(10),
            metrics_legacy_names: false,
        }
    }
}

impl AdminSection {
    /// Resolves and validates the section.
    pub fn resolve(given: AdminArgs) -> Result<AdminSection, ConfigError> {
        let d = AdminSection::default();
        Ok(AdminSection {
            admin_listen: match given.admin_listen {
                Some(text) => parse_addr_or_off("admin_listen", &text)?,
                None => d.admin_listen,
            },
            admin_request_timeout: nonzero(duration(
                "admin_request_timeout",
                given.admin_request_timeout,
                d.admin_request_timeout,
            )?)
            .ok_or_else(|| err("admin_request_timeout: must be more than 0"))?,
            metrics_legacy_names: given.metrics_legacy_names.unwrap_or(d.metrics_legacy_names),
        })
    }
}
