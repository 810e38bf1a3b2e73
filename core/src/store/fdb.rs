//! The FoundationDB store (feature `fdb`).
//!
//! Needs FoundationDB's client library (`libfdb_c`, 7.3) at link time. With the
//! `foundationdb-clients` 7.3 package installed:
//!
//! ```text
//! cargo build --release --features fdb
//! idgen serve --store fdb:/etc/foundationdb/fdb.cluster
//! ```
//!
//! Keys live under the subspace `idgen/k/`; each value carries its version in front
//! ([`encode_versioned`]), taken from a counter at `idgen/meta/version` that every commit
//! increments in the same transaction (so a deleted and re-created key never gets an old
//! version back). A commit is one FDB transaction through `Database::run`, which retries FDB's
//! own conflicts: it re-reads every checked key and writes nothing if one changed.
//!
//! TLS: FoundationDB's own TLS, configured by network options before its network thread
//! starts ([`FdbTls`]: certificate, key, authorities, peer verification). Whether a
//! connection uses TLS is decided by the cluster file: coordinators written `host:port:tls`.
//!
//! Every transaction has a timeout ([`TRANSACTION_TIMEOUT_MS`]): without it the client retries
//! forever when the cluster is unreachable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use foundationdb::options::{DatabaseOption, NetworkOption, StreamingMode};
use foundationdb::{Database, FdbBindingError, KeySelector, RangeOption};

use super::{
    decode_versioned, encode_versioned, BoxFuture, Check, Commit, Entry, FdbTls, KvStore,
    StoreError, Write,
};

/// Where idgen's data lives in the FDB key space.
const DATA: &[u8] = b"idgen/k/";
/// The version counter.
const VERSION_KEY: &[u8] = b"idgen/meta/version";
/// How long one transaction (with its retries) may take.
pub const TRANSACTION_TIMEOUT_MS: i32 = 3000;
/// FDB's `transaction_timed_out`.
const TIMED_OUT: i32 = 1031;

/// A FoundationDB cluster.
pub struct FdbStore {
    db: Database,
    cluster_file: Option<String>,
    /// Whether TLS network options were set.
    tls: bool,
}

/// FoundationDB's network options for `tls`, in the order they are set.
fn tls_options(tls: &FdbTls) -> Vec<(&'static str, NetworkOption)> {
    let mut options = Vec::new();
    if let Some(p) = &tls.cert {
        options.push(("fdb_tls_cert", NetworkOption::TLSCertPath(p.clone())));
    }
    if let Some(p) = &tls.key {
        options.push(("fdb_tls_key", NetworkOption::TLSKeyPath(p.clone())));
    }
    if let Some(p) = &tls.ca {
        options.push(("fdb_tls_ca", NetworkOption::TLSCaPath(p.clone())));
    }
    if let Some(v) = &tls.verify_peers {
        options.push((
            "fdb_tls_verify_peers",
            NetworkOption::TLSVerifyPeers(v.clone().into_bytes()),
        ));
    }
    options
}

/// Starts FDB's network thread, once per process, with the TLS options of the first call (the
/// network can be configured only before it starts).
fn boot_network(tls: &FdbTls) -> Result<(), StoreError> {
    static NETWORK: OnceLock<Result<FdbTls, String>> = OnceLock::new();
    let booted = NETWORK
        .get_or_init(|| {
            let mut builder = foundationdb::api::FdbApiBuilder::default()
                .build()
                .map_err(|e| format!("FoundationDB client setup: {e}"))?;
            for (setting, option) in tls_options(tls) {
                builder = builder
                    .set_option(option)
                    .map_err(|e| format!("FoundationDB TLS option {setting}: {e}"))?;
            }
            // SAFETY: `boot` is unsafe because the returned guard is meant to stop the network
            // thread before the process exits. idgen uses FoundationDB until it exits, so the
            // guard is leaked on purpose: the network thread runs for the life of the process,
            // and it can be booted only once per process anyway.
            let guard = unsafe { builder.boot() }
                .map_err(|e| format!("FoundationDB network thread: {e}"))?;
            std::mem::forget(guard);
            Ok(tls.clone())
        })
        .clone()
        .map_err(StoreError::Invalid)?;
    if &booted != tls {
        return Err(StoreError::Invalid(
            "FoundationDB's network already runs with other TLS settings (one set per process)"
                .into(),
        ));
    }
    Ok(())
}

fn data_key(key: &[u8]) -> Vec<u8> {
    [DATA, key].concat()
}

/// The first key after every key that starts with `prefix` (which starts with [`DATA`], so it
/// is never all 0xff).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while end.last() == Some(&0xff) {
        end.pop();
    }
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// Errors of our own, carried through `db.run` as custom errors.
#[derive(Debug)]
struct Fail(StoreError);

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Fail {}

fn fail(e: StoreError) -> FdbBindingError {
    FdbBindingError::new_custom_error(Box::new(Fail(e)))
}

/// Maps an error out of `db.run`; `committing` when the transaction had writes.
fn map_err(e: FdbBindingError, committing: bool) -> StoreError {
    if let FdbBindingError::CustomError(inner) = &e {
        if let Some(Fail(s)) = inner.downcast_ref::<Fail>() {
            return s.clone();
        }
    }
    match e.get_fdb_error() {
        Some(f) if committing && (f.is_maybe_committed() || f.code() == TIMED_OUT) => {
            StoreError::Unknown(format!("FoundationDB commit: {f}"))
        }
        Some(f) => StoreError::Unavailable(format!("FoundationDB: {f}")),
        None => StoreError::Unavailable(format!("FoundationDB: {e:?}")),
    }
}

fn version_of(key: &[u8], raw: Option<&[u8]>) -> Result<u64, FdbBindingError> {
    match raw {
        None => Ok(0),
        Some(raw) => decode_versioned(raw).map(|(v, _)| v).map_err(|e| {
            fail(StoreError::Invalid(format!(
                "FoundationDB key {:?}: {e}",
                String::from_utf8_lossy(key)
            )))
        }),
    }
}

impl FdbStore {
    /// Opens the cluster named by `cluster_file` (None: FDB's default cluster file), with
    /// FoundationDB's TLS configured by `tls`.
    pub fn open(cluster_file: Option<&str>, tls: &FdbTls) -> Result<Self, StoreError> {
        boot_network(tls)?;
        let what = cluster_file.unwrap_or("the default cluster file");
        let db = Database::new(cluster_file)
            .map_err(|e| StoreError::Invalid(format!("FoundationDB {what}: {e}")))?;
        db.set_option(DatabaseOption::TransactionTimeout(TRANSACTION_TIMEOUT_MS))
            .map_err(|e| StoreError::Invalid(format!("FoundationDB {what}: {e}")))?;
        Ok(FdbStore {
            db,
            cluster_file: cluster_file.map(String::from),
            tls: !tls.is_empty(),
        })
    }
}

impl KvStore for FdbStore {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        Box::pin(async move {
            let raw = self
                .db
                .run(|trx, _| async move { Ok(trx.get(&data_key(key), false).await?) })
                .await
                .map_err(|e| map_err(e, false))?;
            match raw {
                None => Ok(None),
                Some(raw) => {
                    let (version, value) = decode_versioned(&raw)?;
                    Ok(Some(Entry {
                        key: key.to_vec(),
                        value: value.to_vec(),
                        version,
                    }))
                }
            }
        })
    }

    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        Box::pin(async move {
            let begin = data_key(prefix);
            let end = prefix_end(&begin);
            self.db
                .run(|trx, _| {
                    let (begin, end) = (begin.clone(), end.clone());
                    async move {
                        let mut out = Vec::new();
                        let mut opt = Some(RangeOption {
                            mode: StreamingMode::WantAll,
                            ..RangeOption::from((
                                KeySelector::first_greater_or_equal(begin),
                                KeySelector::first_greater_or_equal(end),
                            ))
                        });
                        let mut iteration = 1;
                        while let Some(range) = opt {
                            let kvs = trx.get_range(&range, iteration, false).await?;
                            for kv in kvs.iter() {
                                let key = &kv.key()[DATA.len()..];
                                let (version, value) = decode_versioned(kv.value())
                                    .map_err(|e| fail(StoreError::Invalid(e.to_string())))?;
                                out.push(Entry {
                                    key: key.to_vec(),
                                    value: value.to_vec(),
                                    version,
                                });
                            }
                            opt = range.next_range(&kvs);
                            iteration += 1;
                        }
                        Ok(out)
                    }
                })
                .await
                .map_err(|e| map_err(e, false))
        })
    }

    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        Box::pin(async move {
            // Once an attempt may have committed, a later "conflict" may be our own write.
            let maybe_applied = &AtomicBool::new(false);
            self.db
                .run(|trx, maybe_committed| async move {
                    if bool::from(maybe_committed) {
                        maybe_applied.store(true, Ordering::Relaxed);
                    }
                    for c in checks {
                        let raw = trx.get(&data_key(&c.key), false).await?;
                        if version_of(&c.key, raw.as_deref())? != c.version {
                            if maybe_applied.load(Ordering::Relaxed) {
                                return Err(fail(StoreError::Unknown(
                                    "FoundationDB commit: an earlier attempt may have committed"
                                        .into(),
                                )));
                            }
                            return Ok(Commit::Conflict);
                        }
                    }
                    let raw = trx.get(VERSION_KEY, false).await?;
                    let mut version = match raw.as_deref() {
                        None => 0,
                        Some(b) => u64::from_be_bytes(b.try_into().map_err(|_| {
                            fail(StoreError::Invalid(
                                "FoundationDB version counter is corrupt".into(),
                            ))
                        })?),
                    };
                    for w in writes {
                        match w {
                            Write::Put { key, value } => {
                                // Above every version given before, and never 0.
                                version = version.checked_add(1).ok_or_else(|| {
                                    fail(StoreError::Invalid(
                                        "FoundationDB version counter is at its maximum".into(),
                                    ))
                                })?;
                                trx.set(&data_key(key), &encode_versioned(version, value));
                            }
                            Write::Delete { key } => trx.clear(&data_key(key)),
                        }
                    }
                    trx.set(VERSION_KEY, &version.to_be_bytes());
                    Ok(Commit::Applied)
                })
                .await
                .map_err(|e| map_err(e, true))
        })
    }

    fn describe(&self) -> String {
        format!(
            "fdb {}{}",
            self.cluster_file
                .as_deref()
                .unwrap_or("(default cluster file)"),
            if self.tls {
                " (TLS settings given)"
            } else {
                ""
            }
        )
    }
}
