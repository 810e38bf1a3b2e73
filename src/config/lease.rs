//! `[lease]`: the coordination store and this node's worker-ID lease in it. The store is
//! opened from it; the lease keeper takes it as a [`LeaseConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize, Serializer};

use super::{de, duration, err, ser, ConfigError};
use crate::layout::Layout;
use crate::lease::{LeaseConfig, RegionScope, DEFAULT_TTL};
use crate::store::StoreUrl;

settings! {
    /// The `[lease]` settings as given: flags, `IDGEN_*` variables, the file's `[lease]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Store and lease ([lease] in the file)")]
    pub struct LeaseArgs {
        /// Coordination store: `embedded`, `embedded:/dir`, `etcd://host:port[,host:port…][/prefix]`,
        /// `fdb:/path/to/fdb.cluster` or `memory`.
        #[arg(long, env = "IDGEN_STORE")]
        pub store: Option<String>,
        /// Directory for local state (the embedded store).
        #[arg(long, env = "IDGEN_DATA_DIR")]
        pub data_dir: Option<PathBuf>,
        /// Cluster namespace inside the store; one namespace is one cluster.
        #[arg(long, env = "IDGEN_NAMESPACE")]
        pub namespace: Option<String>,
        /// This node's name in lease records [default: the host name].
        #[arg(long, env = "IDGEN_NODE_ID")]
        pub node_id: Option<String>,
        /// This node's region, 0 .. 2^region_bits: required with region bits. `global`: one worker
        /// space over every region, in one shared store (see docs/OPERATIONS.md).
        #[arg(long, env = "IDGEN_REGION")]
        #[serde(deserialize_with = "de::region")]
        pub region: Option<String>,
        /// Lease TTL: how far ahead each renewal moves the lease end.
        #[arg(long, env = "IDGEN_LEASE_TTL")]
        pub lease_ttl: Option<String>,
        /// How long an expired, unreleased worker ID stays reserved [default: 2 × lease TTL].
        #[arg(long, env = "IDGEN_LEASE_SAFETY")]
        pub lease_safety: Option<String>,
    }
}

/// The `[lease]` section, resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseSection {
    #[serde(serialize_with = "ser::display")]
    pub store: StoreUrl,
    pub data_dir: PathBuf,
    pub namespace: String,
    /// `None`: the host name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// One region's worker IDs, or the whole worker space (also every layout without region
    /// bits).
    #[serde(serialize_with = "region")]
    pub region: RegionScope,
    #[serde(serialize_with = "ser::duration")]
    pub lease_ttl: Duration,
    #[serde(serialize_with = "ser::duration")]
    pub lease_safety: Duration,
}

impl Default for LeaseSection {
    fn default() -> Self {
        LeaseSection {
            store: StoreUrl::Embedded { dir: None },
            data_dir: PathBuf::from("idgen-data"),
            namespace: "default".to_string(),
            node_id: None,
            region: RegionScope::Global,
            lease_ttl: DEFAULT_TTL,
            lease_safety: 2 * DEFAULT_TTL,
        }
    }
}

/// A region as the file writes it: its number, or "global".
fn region<S: Serializer>(r: &RegionScope, s: S) -> Result<S::Ok, S::Error> {
    match r {
        RegionScope::Region(r) => s.serialize_u64(*r),
        RegionScope::Global => s.serialize_str("global"),
    }
}

impl LeaseSection {
    /// Resolves and validates the section; the region against the `layout`'s region bits.
    pub fn resolve(given: LeaseArgs, layout: &Layout) -> Result<LeaseSection, ConfigError> {
        let d = LeaseSection::default();
        let region = match given.region.as_deref().map(str::trim) {
            None if layout.region_bits() > 0 => {
                return Err(err(format!(
                    "region: the layout has {} region bits, so every node needs --region: its \
                     region (0..{}), with one store (or namespace) per region; or \
                     `--region global` for one worker space over all regions in one shared store",
                    layout.region_bits(),
                    layout.region_count()
                )))
            }
            None | Some("global") => RegionScope::Global,
            Some(t) => {
                let r: u64 = t.parse().map_err(|_| {
                    err(format!(
                        "region: {t:?} is neither a region number nor `global`"
                    ))
                })?;
                if layout.region_bits() == 0 {
                    return Err(err(format!(
                        "region {r} is set but the layout has no region bits (set --region-bits)"
                    )));
                }
                if r >= layout.region_count() {
                    return Err(err(format!(
                        "region {r} does not fit {} region bits (0..{})",
                        layout.region_bits(),
                        layout.region_count()
                    )));
                }
                RegionScope::Region(r)
            }
        };
        let store = match given.store {
            Some(text) => text.parse().map_err(|e| err(format!("store: {e}")))?,
            None => d.store,
        };
        let namespace = given.namespace.unwrap_or(d.namespace);
        if namespace.is_empty()
            || !namespace
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(err(format!(
                "namespace: {namespace:?} must be non-empty letters, digits, '-', '_' or '.'"
            )));
        }
        let lease_ttl = duration("lease_ttl", given.lease_ttl, d.lease_ttl)?;
        if lease_ttl < Duration::from_millis(100) {
            return Err(err(format!(
                "lease_ttl: {lease_ttl:?} is too short (at least 100ms)"
            )));
        }
        // The safety period follows the TTL unless set.
        let lease_safety = duration("lease_safety", given.lease_safety, 2 * lease_ttl)?;
        Ok(LeaseSection {
            store,
            data_dir: given.data_dir.unwrap_or(d.data_dir),
            namespace,
            node_id: given.node_id,
            region,
            lease_ttl,
            lease_safety,
        })
    }

    /// The lease keeper's settings, for `workers` worker IDs.
    pub fn lease_config(&self, workers: u64) -> LeaseConfig {
        let mut config = LeaseConfig::new(self.namespace.clone(), workers);
        config.ttl = self.lease_ttl;
        config.safety = self.lease_safety;
        config.region = self.region;
        config
    }
}
