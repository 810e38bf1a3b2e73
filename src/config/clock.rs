//! `[clock]`: how the node treats its clock. The generators take the rollback wait, the clock
//! watch the drift, the range watch the warning; the start and readiness checks whether the
//! kernel's clock must be synchronised.

use std::time::Duration;

use clap::Args;
use idgen_core::generator::DEFAULT_MAX_ROLLBACK_WAIT;
use serde::{Deserialize, Serialize};

use super::{duration, err, ser, ConfigError};

settings! {
    /// The `[clock]` settings as given: flags, `IDGEN_*` variables, the file's `[clock]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Clock ([clock] in the file)")]
    pub struct ClockArgs {
        /// Largest clock step back that is waited out rather than refused.
        #[arg(long, env = "IDGEN_MAX_ROLLBACK_WAIT")]
        pub max_rollback_wait: Option<String>,
        /// Largest clock difference from peers tolerated: beyond it the node refuses to start,
        /// or turns not ready while running.
        #[arg(long, env = "IDGEN_MAX_DRIFT")]
        pub max_drift: Option<String>,
        /// Warn when the layout's timestamp range has less than this left.
        #[arg(long, env = "IDGEN_RANGE_WARNING")]
        pub range_warning: Option<String>,
        /// Refuse to start, and turn not ready, while the kernel says the clock is not
        /// synchronised (adjtimex: no NTP client disciplines it) or bounds its error above
        /// --max-drift; `--require-sync` alone means true. Off: the state is only reported
        /// (metrics, a warning at start).
        #[arg(
            long,
            env = "IDGEN_REQUIRE_SYNC",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "true"
        )]
        pub require_sync: Option<bool>,
    }
}

/// The `[clock]` section, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ClockSection {
    #[serde(serialize_with = "ser::duration")]
    pub max_rollback_wait: Duration,
    #[serde(serialize_with = "ser::duration")]
    pub max_drift: Duration,
    #[serde(serialize_with = "ser::duration")]
    pub range_warning: Duration,
    pub require_sync: bool,
}

impl Default for ClockSection {
    fn default() -> Self {
        ClockSection {
            max_rollback_wait: DEFAULT_MAX_ROLLBACK_WAIT,
            max_drift: Duration::from_secs(1),
            range_warning: Duration::from_secs(365 * 86_400),
            require_sync: false,
        }
    }
}

impl ClockSection {
    /// Resolves and validates the section.
    pub fn resolve(given: ClockArgs) -> Result<ClockSection, ConfigError> {
        let d = ClockSection::default();
        let max_rollback_wait = duration(
            "max_rollback_wait",
            given.max_rollback_wait,
            d.max_rollback_wait,
        )?;
        if max_rollback_wait > Duration::from_secs(1) {
            return Err(err(format!(
                "max_rollback_wait: {max_rollback_wait:?} is too long: requests wait that long for the clock (at most 1s)"
            )));
        }
        Ok(ClockSection {
            max_rollback_wait,
            max_drift: duration("max_drift", given.max_drift, d.max_drift)?,
            range_warning: duration("range_warning", given.range_warning, d.range_warning)?,
            require_sync: given.require_sync.unwrap_or(d.require_sync),
        })
    }
}
