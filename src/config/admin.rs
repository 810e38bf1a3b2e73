//! `[admin]`: the admin HTTP server (metrics, health, layout). Taken by the admin listener.

use std::net::SocketAddr;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{parse_addr_or_off, ser, ConfigError};

settings! {
    /// The `[admin]` settings as given: flags, `IDGEN_*` variables, the file's `[admin]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Admin HTTP server ([admin] in the file)")]
    pub struct AdminArgs {
        /// Address of the admin HTTP server (metrics, health); `off` disables it.
        #[arg(long, env = "IDGEN_ADMIN_LISTEN")]
        pub admin_listen: Option<String>,
    }
}

/// The `[admin]` section, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AdminSection {
    /// `None`: no admin server.
    #[serde(serialize_with = "ser::addr_or_off")]
    pub admin_listen: Option<SocketAddr>,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 7421))),
        }
    }
}

impl AdminSection {
    /// Resolves and validates the section.
    pub fn resolve(given: AdminArgs) -> Result<AdminSection, ConfigError> {
        Ok(AdminSection {
            admin_listen: match given.admin_listen {
                Some(text) => parse_addr_or_off("admin_listen", &text)?,
                None => AdminSection::default().admin_listen,
            },
        })
    }
}
