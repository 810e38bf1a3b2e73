//! `[lease]`: the coordination store and this node's worker-ID lease in it. The store is
//! opened from it (with its [`StoreAccess`]: TLS material and credentials, read from their files
//! here, so a bad file is a configuration error); the lease keeper takes it as a
//! [`LeaseConfig`].
//!
//! Secrets are never settings: the etcd password comes from the file `etcd_password_file`
//! names or from the environment variable [`ETCD_PASSWORD_ENV`] (PostgreSQL's from
//! `postgres_password_file` or [`POSTGRES_PASSWORD_ENV`]), not from a flag, the TOML file or
//! the store URL, and `--check-config` prints the file's path, never the password.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use idgen_core::lease::{LeaseConfig, RegionScope, DEFAULT_TTL};
use idgen_core::store::access::{self, EtcdTls, EtcdUser};
use idgen_core::store::{FdbTls, Secret, StoreAccess, StoreUrl};
use idgen_id::Layout;
use serde::{Deserialize, Serialize, Serializer};

use super::{de, duration, err, ser, ConfigError};

/// The environment variable that may hold the etcd password instead of `etcd_password_file`.
pub const ETCD_PASSWORD_ENV: &str = "IDGEN_ETCD_PASSWORD";
/// The environment variable that may hold the PostgreSQL password instead of
/// `postgres_password_file`.
pub const POSTGRES_PASSWORD_ENV: &str = "IDGEN_POSTGRES_PASSWORD";

settings! {
    /// The `[lease]` settings as given: flags, `IDGEN_*` variables, the file's `[lease]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "Store and lease ([lease] in the file)")]
    pub struct LeaseArgs {
        /// Coordination store: `embedded`, `embedded:/dir`, `etcd://host:port[,host:port…][/prefix]`,
        /// `etcds://…` (etcd over TLS), `fdb:/path/to/fdb.cluster`,
        /// `postgres://user@host:port/database[?prefix=p]` or `memory`.
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
        /// Issue no ID at or below this one: the largest value of the database sequence (or
        /// other ID source) this cluster takes over from. Stored as the cluster's floor, which
        /// every node obeys; needs the cluster's records at version 3 (`idgen store upgrade`).
        /// `idgen migrate --max-id` plans it [default: none].
        #[arg(long, env = "IDGEN_MIN_ID")]
        pub min_id: Option<u64>,
        /// etcds:// only: the authorities (PEM bundle) etcd's certificates must chain to.
        /// Required with etcds://; for the system's authorities name their bundle, e.g.
        /// /etc/ssl/certs/ca-certificates.crt [default: none].
        #[arg(long, env = "IDGEN_ETCD_CA")]
        pub etcd_ca: Option<PathBuf>,
        /// etcds:// only: client certificate chain (PEM) for an etcd that verifies clients
        /// (--client-cert-auth: mutual TLS); needs --etcd-key [default: none].
        #[arg(long, env = "IDGEN_ETCD_CERT")]
        pub etcd_cert: Option<PathBuf>,
        /// The private key (PEM) of --etcd-cert [default: none].
        #[arg(long, env = "IDGEN_ETCD_KEY")]
        pub etcd_key: Option<PathBuf>,
        /// etcds:// only: the name etcd's certificates must carry [default: each endpoint's
        /// host].
        #[arg(long, env = "IDGEN_ETCD_SERVER_NAME")]
        pub etcd_server_name: Option<String>,
        /// etcd user, for an etcd with authentication on (`auth enable`). Its password comes
        /// from --etcd-password-file or the IDGEN_ETCD_PASSWORD variable, never from a flag
        /// [default: none: no etcd authentication].
        #[arg(long, env = "IDGEN_ETCD_USER")]
        pub etcd_user: Option<String>,
        /// File holding the etcd user's password (one trailing line break is ignored); or
        /// set IDGEN_ETCD_PASSWORD instead [default: none].
        #[arg(long, env = "IDGEN_ETCD_PASSWORD_FILE")]
        pub etcd_password_file: Option<PathBuf>,
        /// The etcd password itself: no flag and no file key; filled from IDGEN_ETCD_PASSWORD
        /// when the section is resolved.
        #[arg(skip)]
        #[serde(skip)]
        pub etcd_password: Option<Secret>,
        /// postgres:// only: file holding the PostgreSQL role's password (one trailing line
        /// break is ignored); or set IDGEN_POSTGRES_PASSWORD instead [default: none: no
        /// password, e.g. a trusted local socket or peer].
        #[arg(long, env = "IDGEN_POSTGRES_PASSWORD_FILE")]
        pub postgres_password_file: Option<PathBuf>,
        /// The PostgreSQL password itself: no flag and no file key; filled from
        /// IDGEN_POSTGRES_PASSWORD when the section is resolved.
        #[arg(skip)]
        #[serde(skip)]
        pub postgres_password: Option<Secret>,
        /// postgres:// with sslmode=verify-full only: the authorities (PEM bundle) the
        /// server's certificate must chain to; required there [default: none].
        #[arg(long, env = "IDGEN_POSTGRES_CA")]
        pub postgres_ca: Option<PathBuf>,
        /// sslmode=verify-full only: client certificate chain (PEM), for a server that asks
        /// for one; needs --postgres-key [default: none].
        #[arg(long, env = "IDGEN_POSTGRES_CERT")]
        pub postgres_cert: Option<PathBuf>,
        /// The private key (PEM) of --postgres-cert [default: none].
        #[arg(long, env = "IDGEN_POSTGRES_KEY")]
        pub postgres_key: Option<PathBuf>,
        /// fdb: only: this node's certificate chain (PEM) for FoundationDB's TLS (network
        /// option TLS_CERT_PATH; coordinators written host:port:tls in the cluster file use
        /// TLS); needs --fdb-tls-key [default: none: FoundationDB's own].
        #[arg(long, env = "IDGEN_FDB_TLS_CERT")]
        pub fdb_tls_cert: Option<PathBuf>,
        /// fdb: only: the private key (PEM) of --fdb-tls-cert (TLS_KEY_PATH) [default: none:
        /// FoundationDB's own].
        #[arg(long, env = "IDGEN_FDB_TLS_KEY")]
        pub fdb_tls_key: Option<PathBuf>,
        /// fdb: only: the authorities (PEM bundle) the cluster's certificates must chain to
        /// (TLS_CA_PATH) [default: none: FoundationDB's own].
        #[arg(long, env = "IDGEN_FDB_TLS_CA")]
        pub fdb_tls_ca: Option<PathBuf>,
        /// fdb: only: FoundationDB's peer verification rules (TLS_VERIFY_PEERS), e.g.
        /// `Check.Valid=1,S.CN=fdb.example.com` [default: FoundationDB's, Check.Valid=1].
        #[arg(long, env = "IDGEN_FDB_TLS_VERIFY_PEERS")]
        pub fdb_tls_verify_peers: Option<String>,
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
    /// No ID at or below this (the cluster's floor, raised to it at start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_ca: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_key: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_server_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_user: Option<String>,
    /// The file's path, never its content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_password_file: Option<PathBuf>,
    /// The file's path, never its content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres_password_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres_ca: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres_key: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fdb_tls_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fdb_tls_key: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fdb_tls_ca: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fdb_tls_verify_peers: Option<String>,
    /// What the files above hold (and the password), for the store's adapter: never written.
    #[serde(skip)]
    pub access: StoreAccess,
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
            min_id: None,
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_server_name: None,
            etcd_user: None,
            etcd_password_file: None,
            postgres_password_file: None,
            postgres_ca: None,
            postgres_cert: None,
            postgres_key: None,
            fdb_tls_cert: None,
            fdb_tls_key: None,
            fdb_tls_ca: None,
            fdb_tls_verify_peers: None,
            access: StoreAccess::default(),
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
        let store = match given.store.as_deref() {
            Some(text) => text.parse().map_err(|e| err(format!("store: {e}")))?,
            None => d.store,
        };
        // The store's TLS material and credentials, every file read and checked now.
        let password = match given.etcd_password.clone() {
            Some(p) => Some(p),
            None => std::env::var(ETCD_PASSWORD_ENV).ok().map(Secret::new),
        };
        let access = StoreAccess {
            etcd: etcd_access(&store, &given, password)?,
            fdb: fdb_tls(&store, &given)?,
            postgres_password: postgres_password(&store, &given)?,
            postgres_tls: postgres_tls(&store, &given)?,
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
        if let Some(m) = given.min_id {
            idgen_core::lease::check_min_id(m, layout).map_err(err)?;
        }
        Ok(LeaseSection {
            store,
            data_dir: given.data_dir.unwrap_or(d.data_dir),
            namespace,
            node_id: given.node_id,
            region,
            lease_ttl,
            lease_safety,
            min_id: given.min_id,
            etcd_ca: given.etcd_ca,
            etcd_cert: given.etcd_cert,
            etcd_key: given.etcd_key,
            etcd_server_name: given.etcd_server_name,
            etcd_user: given.etcd_user,
            etcd_password_file: given.etcd_password_file,
            postgres_password_file: given.postgres_password_file,
            postgres_ca: given.postgres_ca,
            postgres_cert: given.postgres_cert,
            postgres_key: given.postgres_key,
            fdb_tls_cert: given.fdb_tls_cert,
            fdb_tls_key: given.fdb_tls_key,
            fdb_tls_ca: given.fdb_tls_ca,
            fdb_tls_verify_peers: given.fdb_tls_verify_peers,
            access,
        })
    }

    /// Whether this build can open the store: a store whose adapter was left out of the build
    /// (`etcd://` without the `etcd` feature) is a configuration error, found before anything
    /// starts.
    pub fn supported(&self) -> Result<(), ConfigError> {
        match self.store.unsupported() {
            Some(why) => Err(err(format!("store: {}: {why}", self.store))),
            None => Ok(()),
        }
    }

    /// Whether the etcd password comes from [`ETCD_PASSWORD_ENV`] (and so is not in the
    /// printed configuration, not even as a path).
    pub fn etcd_password_from_env(&self) -> bool {
        self.access.etcd.user.is_some() && self.etcd_password_file.is_none()
    }

    /// Whether the PostgreSQL password was read from [`POSTGRES_PASSWORD_ENV`].
    pub fn postgres_password_from_env(&self) -> bool {
        self.access.postgres_password.is_some() && self.postgres_password_file.is_none()
    }

    /// The lease keeper's settings, for `workers` worker IDs.
    pub fn lease_config(&self, workers: u64) -> LeaseConfig {
        let mut config = LeaseConfig::new(self.namespace.clone(), workers);
        config.ttl = self.lease_ttl;
        config.safety = self.lease_safety;
        config.region = self.region;
        config.min_id = self.min_id;
        config
    }
}

/// The first of these settings that is given, by name.
fn first_given(settings: &[(&'static str, bool)]) -> Option<&'static str> {
    settings.iter().find(|(_, given)| *given).map(|(n, _)| *n)
}

/// The etcd TLS material and user, read and checked.
fn etcd_access(
    store: &StoreUrl,
    given: &LeaseArgs,
    password: Option<Secret>,
) -> Result<access::EtcdAccess, ConfigError> {
    let tls_settings = [
        ("etcd_ca", given.etcd_ca.is_some()),
        ("etcd_cert", given.etcd_cert.is_some()),
        ("etcd_key", given.etcd_key.is_some()),
        ("etcd_server_name", given.etcd_server_name.is_some()),
    ];
    let user_settings = [
        ("etcd_user", given.etcd_user.is_some()),
        ("etcd_password_file", given.etcd_password_file.is_some()),
        (ETCD_PASSWORD_ENV, password.is_some()),
    ];
    let tls = match store {
        StoreUrl::Etcd { tls, .. } => *tls,
        other => {
            return match first_given(&tls_settings).or(first_given(&user_settings)) {
                Some(name) => Err(err(format!(
                    "{name} is set but the store is {other}: the etcd settings are for an \
                     etcd:// or etcds:// store"
                ))),
                None => Ok(access::EtcdAccess::default()),
            }
        }
    };
    let tls = match (tls, first_given(&tls_settings)) {
        (false, Some(name)) => {
            return Err(err(format!(
                "{name} is a TLS setting but the store {store} is plaintext: write the store as \
                 etcds://"
            )))
        }
        (false, None) => None,
        (true, _) => {
            let Some(ca) = &given.etcd_ca else {
                return Err(err(format!(
                    "etcd_ca: the store {store} is etcd over TLS and needs the authorities (PEM \
                     bundle) that etcd's certificates chain to (--etcd-ca); for the system's \
                     authorities name their bundle, e.g. /etc/ssl/certs/ca-certificates.crt"
                )));
            };
            let identity = match (&given.etcd_cert, &given.etcd_key) {
                (Some(cert), Some(key)) => Some(
                    access::read_identity(("etcd_cert", cert), ("etcd_key", key)).map_err(err)?,
                ),
                (Some(_), None) => {
                    return Err(err(
                        "etcd_cert is set without etcd_key: a client certificate needs its \
                         private key (--etcd-key)",
                    ))
                }
                (None, Some(_)) => {
                    return Err(err(
                        "etcd_key is set without etcd_cert: the private key needs its client \
                         certificate (--etcd-cert)",
                    ))
                }
                (None, None) => None,
            };
            let server_name = match given.etcd_server_name.as_deref().map(str::trim) {
                Some("") => return Err(err("etcd_server_name: empty")),
                Some(name) => {
                    rustls::pki_types::ServerName::try_from(name).map_err(|e| {
                        err(format!(
                            "etcd_server_name: {name:?} is neither a DNS name nor an IP address ({e})"
                        ))
                    })?;
                    Some(name.to_string())
                }
                None => None,
            };
            Some(EtcdTls {
                ca_pem: access::read_ca_bundle("etcd_ca", ca).map_err(err)?,
                identity,
                server_name,
            })
        }
    };
    let from_file = match &given.etcd_password_file {
        Some(path) => Some(access::read_password("etcd_password_file", path).map_err(err)?),
        None => None,
    };
    let user = match (
        given.etcd_user.as_deref().map(str::trim),
        from_file,
        password,
    ) {
        (None, None, None) => None,
        (Some(""), _, _) => return Err(err("etcd_user: empty")),
        (Some(_), Some(_), Some(_)) => {
            return Err(err(format!(
                "etcd_password_file and {ETCD_PASSWORD_ENV} are both set: give the etcd password \
                 one way"
            )))
        }
        (Some(name), Some(password), None) | (Some(name), None, Some(password)) => {
            if password.expose().is_empty() {
                return Err(err(format!("{ETCD_PASSWORD_ENV} is set but empty")));
            }
            Some(EtcdUser {
                name: name.to_string(),
                password,
            })
        }
        (Some(name), None, None) => {
            return Err(err(format!(
                "etcd_user {name:?} is set without a password: name a file holding it with \
                 --etcd-password-file, or set {ETCD_PASSWORD_ENV} (passwords are never flags)"
            )))
        }
        (None, Some(_), _) => {
            return Err(err(
                "etcd_password_file is set without etcd_user: name the etcd user (--etcd-user)",
            ))
        }
        (None, None, Some(_)) => {
            return Err(err(format!(
                "{ETCD_PASSWORD_ENV} is set without etcd_user: name the etcd user (--etcd-user)"
            )))
        }
    };
    Ok(access::EtcdAccess { tls, user })
}

/// The PostgreSQL password, from its file or the environment (one way, for a postgres:// store
/// only).
fn postgres_password(store: &StoreUrl, given: &LeaseArgs) -> Result<Option<Secret>, ConfigError> {
    let from_env = match &given.postgres_password {
        Some(p) => Some(p.expose().to_string()),
        None => std::env::var(POSTGRES_PASSWORD_ENV).ok(),
    };
    if !matches!(store, StoreUrl::Postgres(_)) {
        return match (&given.postgres_password_file, &from_env) {
            (Some(_), _) => Err(err(format!(
                "postgres_password_file is set but the store is {store}: it is for a \
                 postgres:// store"
            ))),
            _ => Ok(None),
        };
    }
    match (&given.postgres_password_file, from_env) {
        (Some(_), Some(_)) => Err(err(format!(
            "postgres_password_file and {POSTGRES_PASSWORD_ENV} are both set: give the \
             PostgreSQL password one way"
        ))),
        (Some(path), None) => access::read_password("postgres_password_file", path)
            .map(Some)
            .map_err(err),
        (None, Some(p)) if p.is_empty() => {
            Err(err(format!("{POSTGRES_PASSWORD_ENV} is set but empty")))
        }
        (None, Some(p)) => Ok(Some(Secret::new(p))),
        (None, None) => Ok(None),
    }
}

/// PostgreSQL's TLS material, read and checked: for `sslmode=verify-full` only, and required
/// there.
fn postgres_tls(store: &StoreUrl, given: &LeaseArgs) -> Result<Option<access::PgTls>, ConfigError> {
    let settings = [
        ("postgres_ca", given.postgres_ca.is_some()),
        ("postgres_cert", given.postgres_cert.is_some()),
        ("postgres_key", given.postgres_key.is_some()),
    ];
    let tls = match store {
        StoreUrl::Postgres(u) => u.tls,
        other => {
            return match first_given(&settings) {
                Some(name) => Err(err(format!(
                    "{name} is set but the store is {other}: it is for a postgres:// store"
                ))),
                None => Ok(None),
            }
        }
    };
    if !tls {
        return match first_given(&settings) {
            Some(name) => Err(err(format!(
                "{name} is a TLS setting but the store {store} is plaintext: add \
                 sslmode=verify-full to the store URL"
            ))),
            None => Ok(None),
        };
    }
    let Some(ca) = &given.postgres_ca else {
        return Err(err(format!(
            "postgres_ca: the store {store} is PostgreSQL over TLS and needs the authorities \
             (PEM bundle) its certificate chains to (--postgres-ca); for the system's \
             authorities name their bundle, e.g. /etc/ssl/certs/ca-certificates.crt"
        )));
    };
    let identity = match (&given.postgres_cert, &given.postgres_key) {
        (Some(cert), Some(key)) => Some(
            access::read_identity(("postgres_cert", cert), ("postgres_key", key)).map_err(err)?,
        ),
        (Some(_), None) => {
            return Err(err(
                "postgres_cert is set without postgres_key: a client certificate needs its \
                 private key (--postgres-key)",
            ))
        }
        (None, Some(_)) => {
            return Err(err(
                "postgres_key is set without postgres_cert: the private key needs its client \
                 certificate (--postgres-cert)",
            ))
        }
        (None, None) => None,
    };
    Ok(Some(access::PgTls {
        ca_pem: access::read_ca_bundle("postgres_ca", ca).map_err(err)?,
        identity,
    }))
}

/// FoundationDB's TLS settings, their files checked.
fn fdb_tls(store: &StoreUrl, given: &LeaseArgs) -> Result<FdbTls, ConfigError> {
    let settings = [
        ("fdb_tls_cert", given.fdb_tls_cert.is_some()),
        ("fdb_tls_key", given.fdb_tls_key.is_some()),
        ("fdb_tls_ca", given.fdb_tls_ca.is_some()),
        ("fdb_tls_verify_peers", given.fdb_tls_verify_peers.is_some()),
    ];
    if !matches!(store, StoreUrl::Fdb { .. }) {
        return match first_given(&settings) {
            Some(name) => Err(err(format!(
                "{name} is set but the store is {store}: the fdb_tls settings are for an fdb: \
                 store"
            ))),
            None => Ok(FdbTls::default()),
        };
    }
    match (&given.fdb_tls_cert, &given.fdb_tls_key) {
        (Some(_), None) => return Err(err("fdb_tls_cert is set without fdb_tls_key")),
        (None, Some(_)) => return Err(err("fdb_tls_key is set without fdb_tls_cert")),
        _ => {}
    }
    // FoundationDB takes the paths as UTF-8 strings and reads the files itself: check here
    // that they are there and hold what they should, so a mistake stops the start-up.
    let path = |setting: &str, p: &std::path::Path| -> Result<String, ConfigError> {
        p.to_str()
            .map(String::from)
            .ok_or_else(|| err(format!("{setting}: {} is not UTF-8", p.display())))
    };
    let mut tls = FdbTls::default();
    if let Some(p) = &given.fdb_tls_cert {
        access::read_cert_chain("fdb_tls_cert", p).map_err(err)?;
        tls.cert = Some(path("fdb_tls_cert", p)?);
    }
    if let Some(p) = &given.fdb_tls_key {
        access::read_private_key("fdb_tls_key", p).map_err(err)?;
        tls.key = Some(path("fdb_tls_key", p)?);
    }
    if let Some(p) = &given.fdb_tls_ca {
        access::read_ca_bundle("fdb_tls_ca", p).map_err(err)?;
        tls.ca = Some(path("fdb_tls_ca", p)?);
    }
    tls.verify_peers = match given.fdb_tls_verify_peers.as_deref().map(str::trim) {
        Some("") => return Err(err("fdb_tls_verify_peers: empty")),
        v => v.map(String::from),
    };
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idgen_testkit::TestCa;

    fn resolve(f: impl FnOnce(&mut LeaseArgs)) -> Result<LeaseSection, String> {
        let mut given = LeaseArgs {
            // Never the test process's own environment.
            etcd_password: None,
            ..LeaseArgs::default()
        };
        f(&mut given);
        LeaseSection::resolve(given, &Layout::default()).map_err(|e| e.0)
    }

    const TLS_URL: &str = "etcds://127.0.0.1:2379,127.0.0.1:22379/idgen";

    #[test]
    fn etcd_over_tls_reads_its_files() {
        let ca = TestCa::new("etcd test ca");
        let client = ca.client("idgen-node");
        let s = resolve(|l| {
            l.store = Some(TLS_URL.into());
            l.etcd_ca = Some(ca.ca.clone());
            l.etcd_cert = Some(client.cert.clone());
            l.etcd_key = Some(client.key.clone());
            l.etcd_server_name = Some("etcd.internal".into());
        })
        .unwrap();
        let tls = s.access.etcd.tls.as_ref().expect("TLS");
        assert_eq!(tls.ca_pem, ca.ca_pem);
        let id = tls.identity.as_ref().expect("client certificate");
        assert_eq!(id.cert_pem, client.cert_pem);
        assert_eq!(id.key_pem.expose(), client.key_pem);
        assert_eq!(tls.server_name.as_deref(), Some("etcd.internal"));
        assert!(s.access.etcd.user.is_none());
        // The key never shows in Debug (logs, panics).
        let shown = format!("{s:?}");
        let key_body = client.key_pem.lines().nth(1).unwrap();
        assert!(!shown.contains(key_body), "{shown}");
        // Server TLS only: a CA alone.
        let s = resolve(|l| {
            l.store = Some(TLS_URL.into());
            l.etcd_ca = Some(ca.ca.clone());
        })
        .unwrap();
        assert!(s.access.etcd.tls.unwrap().identity.is_none());
    }

    #[test]
    fn etcd_tls_mistakes_are_refused_with_the_setting_named() {
        let ca = TestCa::new("etcd test ca");
        let client = ca.client("idgen-node");
        let other = ca.client("other");
        let starts = |f: &dyn Fn(&mut LeaseArgs), want: &str| {
            let e = resolve(|l| f(l)).unwrap_err();
            assert!(e.starts_with(want), "want {want:?}: {e}");
            e
        };
        // etcds:// without authorities: required (no silent fallback to anything).
        let e = starts(&|l| l.store = Some(TLS_URL.into()), "etcd_ca:");
        assert!(e.contains("--etcd-ca"), "{e}");
        // A certificate without its key, and the reverse.
        starts(
            &|l| {
                l.store = Some(TLS_URL.into());
                l.etcd_ca = Some(ca.ca.clone());
                l.etcd_cert = Some(client.cert.clone());
            },
            "etcd_cert is set without etcd_key",
        );
        starts(
            &|l| {
                l.store = Some(TLS_URL.into());
                l.etcd_ca = Some(ca.ca.clone());
                l.etcd_key = Some(client.key.clone());
            },
            "etcd_key is set without etcd_cert",
        );
        // Someone else's key.
        let e = starts(
            &|l| {
                l.store = Some(TLS_URL.into());
                l.etcd_ca = Some(ca.ca.clone());
                l.etcd_cert = Some(client.cert.clone());
                l.etcd_key = Some(other.key.clone());
            },
            "etcd_key:",
        );
        assert!(e.contains("does not belong"), "{e}");
        // A key where the CA belongs; a missing file.
        let e = starts(
            &|l| {
                l.store = Some(TLS_URL.into());
                l.etcd_ca = Some(client.key.clone());
            },
            "etcd_ca:",
        );
        assert!(e.contains(&client.key.display().to_string()), "{e}");
        starts(
            &|l| {
                l.store = Some(TLS_URL.into());
                l.etcd_ca = Some(ca.dir().join("missing.crt"));
            },
            "etcd_ca: cannot read",
        );
        // TLS settings on a plaintext URL, etcd settings on another store.
        let e = starts(
            &|l| {
                l.store = Some("etcd://127.0.0.1:2379/idgen".into());
                l.etcd_ca = Some(ca.ca.clone());
            },
            "etcd_ca is a TLS setting",
        );
        assert!(e.contains("etcds://"), "{e}");
        starts(
            &|l| l.etcd_ca = Some(ca.ca.clone()),
            "etcd_ca is set but the store is embedded",
        );
        starts(
            &|l| {
                l.store = Some(TLS_URL.into());
                l.etcd_ca = Some(ca.ca.clone());
                l.etcd_server_name = Some("not a name".into());
            },
            "etcd_server_name:",
        );
    }

    #[test]
    fn etcd_users_need_a_password_from_a_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("etcd-password");
        std::fs::write(&file, "correct horse\n").unwrap();
        let url = "etcd://127.0.0.1:2379/idgen";
        let s = resolve(|l| {
            l.store = Some(url.into());
            l.etcd_user = Some("idgen".into());
            l.etcd_password_file = Some(file.clone());
        })
        .unwrap();
        let user = s.access.etcd.user.as_ref().unwrap();
        assert_eq!(
            (user.name.as_str(), user.password.expose()),
            ("idgen", "correct horse")
        );
        assert!(!s.etcd_password_from_env());
        assert!(!format!("{s:?}").contains("correct horse"));
        // As the environment gives it.
        let s = resolve(|l| {
            l.store = Some(url.into());
            l.etcd_user = Some("idgen".into());
            l.etcd_password = Some(Secret::new("from env"));
        })
        .unwrap();
        assert_eq!(
            s.access.etcd.user.as_ref().unwrap().password.expose(),
            "from env"
        );
        assert!(s.etcd_password_from_env());

        for (f, want) in [
            (
                Box::new(|l: &mut LeaseArgs| l.etcd_user = Some("idgen".into()))
                    as Box<dyn Fn(&mut LeaseArgs)>,
                "etcd_user \"idgen\" is set without a password",
            ),
            (
                Box::new(|l: &mut LeaseArgs| l.etcd_password_file = Some(file.clone())),
                "etcd_password_file is set without etcd_user",
            ),
            (
                Box::new(|l: &mut LeaseArgs| l.etcd_password = Some(Secret::new("x"))),
                "IDGEN_ETCD_PASSWORD is set without etcd_user",
            ),
            (
                Box::new(|l: &mut LeaseArgs| {
                    l.etcd_user = Some("idgen".into());
                    l.etcd_password_file = Some(file.clone());
                    l.etcd_password = Some(Secret::new("x"));
                }),
                "etcd_password_file and IDGEN_ETCD_PASSWORD are both set",
            ),
            (
                Box::new(|l: &mut LeaseArgs| {
                    l.etcd_user = Some("idgen".into());
                    l.etcd_password = Some(Secret::new(""));
                }),
                "IDGEN_ETCD_PASSWORD is set but empty",
            ),
            (
                Box::new(|l: &mut LeaseArgs| {
                    l.etcd_user = Some("idgen".into());
                    l.etcd_password_file = Some(dir.path().join("none"));
                }),
                "etcd_password_file: cannot read",
            ),
        ] {
            let e = resolve(|l| {
                l.store = Some(url.into());
                f(l);
            })
            .unwrap_err();
            assert!(e.starts_with(want), "want {want:?}: {e}");
            assert!(!e.contains("correct horse"), "{e}");
        }
        let e = resolve(|l| {
            l.etcd_user = Some("idgen".into());
            l.etcd_password_file = Some(file.clone());
        })
        .unwrap_err();
        assert!(
            e.starts_with("etcd_user is set but the store is embedded"),
            "{e}"
        );
    }

    #[test]
    fn foundationdb_tls_settings_pass_through_checked() {
        let ca = TestCa::new("fdb test ca");
        let node = ca.client("idgen-node");
        let s = resolve(|l| {
            l.store = Some("fdb:/etc/foundationdb/fdb.cluster".into());
            l.fdb_tls_cert = Some(node.cert.clone());
            l.fdb_tls_key = Some(node.key.clone());
            l.fdb_tls_ca = Some(ca.ca.clone());
            l.fdb_tls_verify_peers = Some("Check.Valid=1,S.CN=fdb".into());
        })
        .unwrap();
        let path = |p: &std::path::Path| Some(p.to_str().unwrap().to_string());
        assert_eq!(
            s.access.fdb,
            FdbTls {
                cert: path(&node.cert),
                key: path(&node.key),
                ca: path(&ca.ca),
                verify_peers: Some("Check.Valid=1,S.CN=fdb".into()),
            }
        );
        let fdb = |f: &dyn Fn(&mut LeaseArgs)| {
            resolve(|l| {
                l.store = Some("fdb:".into());
                f(l);
            })
            .unwrap_err()
        };
        assert!(fdb(&|l| l.fdb_tls_cert = Some(node.cert.clone()))
            .starts_with("fdb_tls_cert is set without fdb_tls_key"));
        assert!(fdb(&|l| {
            l.fdb_tls_cert = Some(node.key.clone());
            l.fdb_tls_key = Some(node.key.clone());
        })
        .starts_with("fdb_tls_cert:"));
        assert!(
            fdb(&|l| l.fdb_tls_verify_peers = Some(" ".into())).starts_with("fdb_tls_verify_peers")
        );
        let e = resolve(|l| l.fdb_tls_ca = Some(ca.ca.clone())).unwrap_err();
        assert!(
            e.starts_with("fdb_tls_ca is set but the store is embedded"),
            "{e}"
        );
    }

    #[test]
    fn the_postgres_password_comes_from_a_file_or_the_environment_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pg-password");
        std::fs::write(&file, "pg secret\n").unwrap();
        let url = "postgres://idgen@127.0.0.1:5432/idgen";
        let s = resolve(|l| {
            l.store = Some(url.into());
            l.postgres_password_file = Some(file.clone());
        })
        .unwrap();
        assert_eq!(
            s.access.postgres_password.as_ref().map(Secret::expose),
            Some("pg secret")
        );
        assert!(!s.postgres_password_from_env());
        assert!(!format!("{s:?}").contains("pg secret"));
        let s = resolve(|l| {
            l.store = Some(url.into());
            l.postgres_password = Some(Secret::new("from env"));
        })
        .unwrap();
        assert_eq!(
            s.access.postgres_password.as_ref().map(Secret::expose),
            Some("from env")
        );
        assert!(s.postgres_password_from_env());

        let both = resolve(|l| {
            l.store = Some(url.into());
            l.postgres_password_file = Some(file.clone());
            l.postgres_password = Some(Secret::new("x"));
        })
        .unwrap_err();
        assert!(both.contains("are both set"), "{both}");
        let empty = resolve(|l| {
            l.store = Some(url.into());
            l.postgres_password = Some(Secret::new(""));
        })
        .unwrap_err();
        assert!(empty.contains("is set but empty"), "{empty}");
        let elsewhere = resolve(|l| {
            l.store = Some("etcd://127.0.0.1:2379/idgen".into());
            l.postgres_password_file = Some(file.clone());
        })
        .unwrap_err();
        assert!(
            elsewhere.contains("postgres_password_file is set but the store is etcd"),
            "{elsewhere}"
        );
        // A password in the URL is refused, naming the right way.
        let in_url =
            resolve(|l| l.store = Some("postgres://idgen:pw@127.0.0.1/idgen".into())).unwrap_err();
        assert!(!in_url.contains("pw@"), "{in_url}");
    }

    #[test]
    fn postgres_tls_needs_verify_full_and_its_authorities() {
        let ca = TestCa::new("pg test ca");
        let client = ca.client("idgen");
        let tls_url = "postgres://idgen@db:5432/idgen?sslmode=verify-full";
        let s = resolve(|l| {
            l.store = Some(tls_url.into());
            l.postgres_ca = Some(ca.ca.clone());
            l.postgres_cert = Some(client.cert.clone());
            l.postgres_key = Some(client.key.clone());
        })
        .unwrap();
        let tls = s.access.postgres_tls.as_ref().expect("TLS");
        assert_eq!(tls.ca_pem, ca.ca_pem);
        assert!(tls.identity.is_some());
        assert!(!format!("{s:?}").contains(&client.key_pem));

        type Case<'a> = (Box<dyn Fn(&mut LeaseArgs) + 'a>, &'a str);
        let cases: Vec<Case> = vec![
            (
                Box::new(|l: &mut LeaseArgs| l.store = Some(tls_url.into())),
                "postgres_ca: the store",
            ),
            (
                Box::new(|l: &mut LeaseArgs| {
                    l.store = Some("postgres://idgen@db/idgen".into());
                    l.postgres_ca = Some(ca.ca.clone());
                }),
                "postgres_ca is a TLS setting but the store",
            ),
            (
                Box::new(|l: &mut LeaseArgs| {
                    l.store = Some("embedded".into());
                    l.postgres_ca = Some(ca.ca.clone());
                }),
                "postgres_ca is set but the store is embedded",
            ),
            (
                Box::new(|l: &mut LeaseArgs| {
                    l.store = Some(tls_url.into());
                    l.postgres_ca = Some(ca.ca.clone());
                    l.postgres_cert = Some(client.cert.clone());
                }),
                "postgres_cert is set without postgres_key",
            ),
            (
                Box::new(|l: &mut LeaseArgs| {
                    l.store = Some(tls_url.into());
                    l.postgres_ca = Some(client.key.clone());
                }),
                "postgres_ca:",
            ),
        ];
        for (f, want) in cases {
            let e = resolve(f).unwrap_err();
            assert!(e.contains(want), "{e} (wanted {want})");
        }
    }
}
