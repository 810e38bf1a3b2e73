//! The coordination store: a small transactional key-value trait, and its adapters.
//!
//! The lease logic (`crate::lease`) is written once against [`KvStore`]; each store is a thin
//! adapter under it:
//!
//! | store | module | URL | transactions |
//! |---|---|---|---|
//! | embedded (default) | [`embedded`] | `embedded` or `embedded:/path/to/dir` | one redb write transaction, fsynced |
//! | etcd (feature `etcd`) | `etcd` | `etcd://host:port[,host:port…][/namespace]`, `etcds://…` over TLS | `Txn` comparing `mod_revision` / `version = 0`, then writes |
//! | FoundationDB (feature `fdb`) | `fdb` | `fdb:/etc/foundationdb/fdb.cluster` | one FDB transaction re-reading the checked keys (`db.run`, which retries) |
//! | PostgreSQL (feature `postgres`) | `postgres` | `postgres://user@host:port/database[?prefix=p]` | one `SERIALIZABLE` transaction reading the checked versions, then writes |
//! | in memory (tests) | [`memory`] | `memory` | a mutex |
//!
//! What an adapter needs beyond the URL to reach an authenticated store (TLS material, an etcd
//! user) is a [`StoreAccess`], from the `[lease]` section ([`access`]).
//!
//! ## The model: optimistic read-modify-write
//!
//! Every value carries a [`Version`]: a number that changes on every write of that key and is
//! never 0 for a present key (0 means "absent"). A transaction reads what it needs, remembering
//! the versions it saw (its *checks*), then asks the store to [`commit`](KvStore::commit) its
//! writes only if every check still holds. The store applies the whole commit atomically or not
//! at all, and answers [`Commit::Conflict`] when a check failed. That is serializable for the
//! keys a transaction checks: two transactions that read-modify-write the same key cannot both
//! commit. Scans are snapshot reads: a key seen only through a scan is not checked unless the
//! transaction also reads it with [`Txn::get`].
//!
//! A commit whose outcome is unknown (a timeout after sending it) is [`StoreError::Unknown`]:
//! callers must treat it as "may or may not have happened".
//!
//! ## Keys that expire
//!
//! [`KvStore::put_expiring`] writes a key that the store removes by itself some time after the
//! last write, where the store can ([`KvStore::expires_keys`]): etcd attaches an etcd lease, so
//! etcd's own clock (one clock, shared by every node) removes the key of a writer that stopped;
//! PostgreSQL stores an expiry by the database server's clock and reads past it as absent.
//! The embedded, memory and FoundationDB stores cannot: they do a plain put, and say so. Nodes
//! publish their clock key this way (`crate::drift`); an acquirer treats a holder whose clock
//! key is gone as dead (`crate::lease`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

// The conformance suites are for tests only: this crate's, and the integration tests with the
// `conformance` feature.
pub mod access;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod embedded;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "fdb")]
pub mod fdb;
pub mod memory;
mod pg_url;
#[cfg(feature = "postgres")]
pub mod postgres;

pub use access::{EtcdAccess, FdbTls, PgTls, Secret, StoreAccess};
pub use pg_url::PgUrl;

/// What a read saw of a key: 0 for absent, otherwise a number that changes on every write.
pub type Version = u64;

/// A boxed future, for the object-safe store trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One key and value as read, with its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub version: Version,
}

/// A write inside a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

impl Write {
    pub fn key(&self) -> &[u8] {
        match self {
            Write::Put { key, .. } | Write::Delete { key } => key,
        }
    }
}

/// A precondition of a commit: `key` is still at `version` (0: still absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub key: Vec<u8>,
    pub version: Version,
}

/// The outcome of a commit that reached the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Every check held; every write was applied.
    Applied,
    /// A check failed; nothing was written.
    Conflict,
}

/// What [`KvStore::commit_or_get`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitOrGet {
    /// Every check held, every write was applied; the version the read key has now, where
    /// the store knows it without another read (etcd: the transaction's revision).
    Applied(Option<Version>),
    /// A check failed, nothing was written; the read key as it is now (`None`: absent).
    Conflict(Option<Entry>),
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or refused the operation; nothing was written.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A commit was sent but its outcome is unknown: it may or may not have been applied.
    #[error("store commit outcome unknown: {0}")]
    Unknown(String),
    /// The store is misconfigured or its data is not what idgen wrote.
    #[error("store error: {0}")]
    Invalid(String),
}

/// A transactional key-value store, as the lease logic needs it.
pub trait KvStore: Send + Sync + 'static {
    /// Reads one key.
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>>;
    /// Reads every key that starts with `prefix`, in key order (a snapshot read).
    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>>;
    /// Applies `writes` atomically if every check holds.
    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>>;
    /// [`commit`](Self::commit), and on a conflict the key `read` as it is now, so that a
    /// read-modify-write of one record tries again without a read of its own. The default
    /// reads after a conflict (two round trips); a store that does both in one (etcd: a
    /// transaction's failure branch) overrides it.
    fn commit_or_get<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
        read: &'a [u8],
    ) -> BoxFuture<'a, Result<CommitOrGet, StoreError>> {
        Box::pin(async move {
            match self.commit(checks, writes).await? {
                Commit::Applied => Ok(CommitOrGet::Applied(None)),
                Commit::Conflict => Ok(CommitOrGet::Conflict(self.get(read).await?)),
            }
        })
    }
    /// A short description for logs ("etcd 127.0.0.1:2379", "embedded /var/lib/idgen").
    fn describe(&self) -> String;
    /// Whether [`put_expiring`](Self::put_expiring) really expires keys. The default, for
    /// stores that cannot (embedded, memory, FoundationDB): no.
    fn expires_keys(&self) -> bool {
        false
    }
    /// Writes `key` (unconditionally) so that the store removes it by itself about `ttl` after
    /// this write unless it is written again, where the store [`expires_keys`](Self::expires_keys);
    /// elsewhere (the default) a plain put that stays until deleted.
    fn put_expiring<'a>(
        &'a self,
        key: &'a [u8],
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = ttl;
        Box::pin(async move {
            let writes = [Write::Put {
                key: key.to_vec(),
                value: value.to_vec(),
            }];
            // No checks: a conflict is impossible.
            self.commit(&[], &writes).await.map(|_| ())
        })
    }
}

impl fmt::Debug for dyn KvStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// One optimistic transaction: reads through [`get`](Txn::get) are checked at commit, writes are
/// buffered until [`commit`](Txn::commit).
pub struct Txn<'s> {
    store: &'s dyn KvStore,
    checks: Vec<Check>,
    writes: Vec<Write>,
}

impl<'s> Txn<'s> {
    pub fn new(store: &'s dyn KvStore) -> Self {
        Txn {
            store,
            checks: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// Reads `key` and makes the commit conditional on it not changing.
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let entry = self.store.get(key).await?;
        let version = entry.as_ref().map_or(0, |e| e.version);
        match self.checks.iter_mut().find(|c| c.key == key) {
            // Read twice inside one transaction: keep the first version seen, so a change in
            // between is still caught.
            Some(_) => {}
            None => self.checks.push(Check {
                key: key.to_vec(),
                version,
            }),
        }
        Ok(entry.map(|e| e.value))
    }

    /// Snapshot read of a prefix: not checked at commit (see [`check`](Txn::check)).
    pub async fn scan(&self, prefix: &[u8]) -> Result<Vec<Entry>, StoreError> {
        self.store.scan(prefix).await
    }

    /// Makes the commit conditional on `entry` (as a scan returned it) not changing: the same
    /// check a [`get`](Txn::get) of it would have added, without reading it again.
    pub fn check(&mut self, entry: &Entry) {
        if !self.checks.iter().any(|c| c.key == entry.key) {
            self.checks.push(Check {
                key: entry.key.clone(),
                version: entry.version,
            });
        }
    }

    /// Whether the commit is conditional on `key` (read through [`get`](Txn::get) or
    /// [`check`](Txn::check)ed).
    pub fn is_checked(&self, key: &[u8]) -> bool {
        self.checks.iter().any(|c| c.key == key)
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.retain(|w| w.key() != key.as_slice());
        self.writes.push(Write::Put { key, value });
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.writes.retain(|w| w.key() != key.as_slice());
        self.writes.push(Write::Delete { key });
    }

    /// Sends the writes, conditional on every checked read.
    pub async fn commit(self) -> Result<Commit, StoreError> {
        if self.writes.is_empty() {
            return Ok(Commit::Applied);
        }
        self.store.commit(&self.checks, &self.writes).await
    }
}

/// Which store a node uses, parsed from `--store`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `embedded` (in the data directory) or `embedded:/dir`.
    Embedded { dir: Option<std::path::PathBuf> },
    /// `etcd://host:port[,host:port…][/prefix]`, or `etcds://…` for TLS (`tls`).
    Etcd {
        endpoints: Vec<String>,
        prefix: String,
        tls: bool,
    },
    /// `fdb:/path/to/fdb.cluster` (or `fdb:` for the default cluster file).
    Fdb { cluster_file: Option<String> },
    /// `postgres://[user@]host[:port][,…][/database][?prefix=p]`.
    Postgres(PgUrl),
    /// `memory`: nothing persists; for tests and demos only.
    Memory,
}

impl std::str::FromStr for StoreUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "embedded" {
            return Ok(StoreUrl::Embedded { dir: None });
        }
        if let Some(dir) = s.strip_prefix("embedded:") {
            if dir.is_empty() {
                return Err("embedded: needs a directory, or use plain `embedded`".into());
            }
            return Ok(StoreUrl::Embedded {
                dir: Some(dir.into()),
            });
        }
        if s == "memory" {
            return Ok(StoreUrl::Memory);
        }
        let etcd = [("etcd://", false), ("etcds://", true)]
            .into_iter()
            .find_map(|(scheme, tls)| Some((scheme, tls, s.strip_prefix(scheme)?)));
        if let Some((scheme, tls, rest)) = etcd {
            let (hosts, prefix) = match rest.split_once('/') {
                Some((h, p)) => (h, p.trim_end_matches('/')),
                None => (rest, ""),
            };
            let endpoints: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(String::from)
                .collect();
            if endpoints.is_empty() {
                return Err(format!("{s:?}: {scheme} needs at least one host:port"));
            }
            for e in &endpoints {
                let port = e.rsplit_once(':').map(|(_, p)| p);
                if port.is_none_or(|p| p.parse::<u16>().is_err()) {
                    return Err(format!("{s:?}: etcd endpoint {e:?} is not host:port"));
                }
            }
            return Ok(StoreUrl::Etcd {
                endpoints,
                prefix: prefix.to_string(),
                tls,
            });
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return s.parse().map(StoreUrl::Postgres);
        }
        if let Some(path) = s.strip_prefix("fdb:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            return Ok(StoreUrl::Fdb {
                cluster_file: (!path.is_empty()).then(|| path.to_string()),
            });
        }
        Err(format!(
            "{s:?} is not a store URL: use `embedded`, `embedded:/dir`, `etcd://host:port[,host:port…][/prefix]` (`etcds://` for TLS), `fdb:/path/to/fdb.cluster`, `postgres://user@host:port/database` or `memory`"
        ))
    }
}

impl StoreUrl {
    /// Why this build cannot open the store, if it cannot: its adapter's feature was left out
    /// of the build. A configuration names such a store at its peril: [`open`] refuses it, and
    /// `idgen serve` (also `--check-config`) reports it as a configuration error.
    pub fn unsupported(&self) -> Option<&'static str> {
        match self {
            #[cfg(not(feature = "etcd"))]
            StoreUrl::Etcd { .. } => Some(
                "this idgen was built without etcd support: rebuild with `--features etcd` (needs protoc: Debian `protobuf-compiler libprotobuf-dev`)",
            ),
            #[cfg(not(feature = "fdb"))]
            StoreUrl::Fdb { .. } => Some(
                "this idgen was built without FoundationDB support: rebuild with `--features fdb` (needs libfdb_c)",
            ),
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => Some(
                "this idgen was built without PostgreSQL support: rebuild with `--features postgres`",
            ),
            _ => None,
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Embedded { dir: None } => f.write_str("embedded"),
            StoreUrl::Embedded { dir: Some(d) } => write!(f, "embedded:{}", d.display()),
            StoreUrl::Etcd {
                endpoints,
                prefix,
                tls,
            } => {
                let scheme = if *tls { "etcds" } else { "etcd" };
                write!(f, "{scheme}://{}", endpoints.join(","))?;
                if !prefix.is_empty() {
                    write!(f, "/{prefix}")?;
                }
                Ok(())
            }
            StoreUrl::Fdb { cluster_file: None } => f.write_str("fdb:"),
            StoreUrl::Fdb {
                cluster_file: Some(p),
            } => write!(f, "fdb:{p}"),
            StoreUrl::Postgres(u) => u.fmt(f),
            StoreUrl::Memory => f.write_str("memory"),
        }
    }
}

/// Opens the store a URL names. `data_dir` is where `embedded` keeps its database; `access`
/// holds the TLS material and credentials for etcd and FoundationDB.
pub async fn open(
    url: &StoreUrl,
    data_dir: &std::path::Path,
    access: &StoreAccess,
) -> Result<Arc<dyn KvStore>, StoreError> {
    // A build without a store's feature refuses its URL below and has no use for its access.
    #[cfg(not(all(feature = "etcd", feature = "fdb", feature = "postgres")))]
    let _ = access;
    match url {
        StoreUrl::Embedded { dir } => {
            let dir = dir.as_deref().unwrap_or(data_dir);
            Ok(Arc::new(embedded::EmbeddedStore::open(dir)?))
        }
        #[cfg(feature = "etcd")]
        StoreUrl::Etcd {
            endpoints,
            prefix,
            tls,
        } => Ok(Arc::new(
            etcd::EtcdStore::connect_with(endpoints.clone(), prefix.clone(), *tls, &access.etcd)
                .await?,
        )),
        #[cfg(not(feature = "etcd"))]
        StoreUrl::Etcd { .. } => Err(StoreError::Invalid(
            url.unsupported().unwrap_or_default().into(),
        )),
        #[cfg(feature = "fdb")]
        StoreUrl::Fdb { cluster_file } => Ok(Arc::new(fdb::FdbStore::open(
            cluster_file.as_deref(),
            &access.fdb,
        )?)),
        #[cfg(not(feature = "fdb"))]
        StoreUrl::Fdb { .. } => Err(StoreError::Invalid(
            url.unsupported().unwrap_or_default().into(),
        )),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(u) => Ok(Arc::new(
            postgres::PgStore::connect(
                u,
                access.postgres_password.as_ref(),
                access.postgres_tls.as_ref(),
            )
            .await?,
        )),
        #[cfg(not(feature = "postgres"))]
        StoreUrl::Postgres(_) => Err(StoreError::Invalid(
            url.unsupported().unwrap_or_default().into(),
        )),
        StoreUrl::Memory => Ok(Arc::new(memory::MemoryStore::new())),
    }
}

/// Encodes a value with its version in front: for stores (embedded, FoundationDB, memory) that
/// keep the version inside the value.
pub fn encode_versioned(version: Version, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + value.len());
    v.extend_from_slice(&version.to_be_bytes());
    v.extend_from_slice(value);
    v
}

/// The inverse of [`encode_versioned`].
pub fn decode_versioned(raw: &[u8]) -> Result<(Version, &[u8]), StoreError> {
    if raw.len() < 8 {
        return Err(StoreError::Invalid(format!(
            "stored value of {} bytes is shorter than its version header",
            raw.len()
        )));
    }
    let (v, rest) = raw.split_at(8);
    let version = u64::from_be_bytes(v.try_into().expect("8 bytes"));
    if version == 0 {
        return Err(StoreError::Invalid("stored value has version 0".into()));
    }
    Ok((version, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_parse_and_print() {
        let cases = [
            ("embedded", StoreUrl::Embedded { dir: None }),
            (
                "embedded:/var/lib/idgen",
                StoreUrl::Embedded {
                    dir: Some("/var/lib/idgen".into()),
                },
            ),
            (
                "etcd://127.0.0.1:2379,127.0.0.1:22379/idgen",
                StoreUrl::Etcd {
                    endpoints: vec!["127.0.0.1:2379".into(), "127.0.0.1:22379".into()],
                    prefix: "idgen".into(),
                    tls: false,
                },
            ),
            (
                "etcds://etcd-0.etcd:2379,etcd-1.etcd:2379/idgen",
                StoreUrl::Etcd {
                    endpoints: vec!["etcd-0.etcd:2379".into(), "etcd-1.etcd:2379".into()],
                    prefix: "idgen".into(),
                    tls: true,
                },
            ),
            (
                "etcds://[::1]:2379",
                StoreUrl::Etcd {
                    endpoints: vec!["[::1]:2379".into()],
                    prefix: "".into(),
                    tls: true,
                },
            ),
            (
                "etcd://localhost:2379",
                StoreUrl::Etcd {
                    endpoints: vec!["localhost:2379".into()],
                    prefix: "".into(),
                    tls: false,
                },
            ),
            (
                "fdb:/etc/foundationdb/fdb.cluster",
                StoreUrl::Fdb {
                    cluster_file: Some("/etc/foundationdb/fdb.cluster".into()),
                },
            ),
            ("fdb:", StoreUrl::Fdb { cluster_file: None }),
            ("memory", StoreUrl::Memory),
            (
                "postgres://idgen@127.0.0.1:5432/idgen",
                StoreUrl::Postgres(PgUrl {
                    user: Some("idgen".into()),
                    hosts: vec![("127.0.0.1".into(), 5432)],
                    database: Some("idgen".into()),
                    prefix: String::new(),
                    tls: false,
                }),
            ),
        ];
        for (text, want) in cases {
            let got: StoreUrl = text.parse().unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string().parse::<StoreUrl>().unwrap(), want);
        }
        for bad in [
            "",
            "etcd://",
            "etcd://host",
            "etcd://host:notaport",
            "etcds://",
            "etcds://host",
            "https://host:2379",
            "redis://x",
            "embedded:",
            "postgres://",
            "postgres://user:secret@db",
        ] {
            let err = bad.parse::<StoreUrl>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn versioned_values_round_trip_and_reject_garbage() {
        let raw = encode_versioned(7, b"abc");
        assert_eq!(decode_versioned(&raw).unwrap(), (7, &b"abc"[..]));
        assert!(decode_versioned(b"short").is_err());
        assert!(decode_versioned(&encode_versioned(0, b"x")).is_err());
    }
}
