//! The PostgreSQL store: one table of keys, values and versions, serializable transactions.
//!
//! ```text
//!   idgen_kv (key bytea PRIMARY KEY, value bytea, version bigint, expires_at timestamptz)
//!   idgen_kv_version   a sequence: every write takes the next number as the key's version
//!   idgen_schema       one row: the schema's version (1), checked at connect
//! ```
//!
//! - **Schema.** Created on first use by the first node that connects (`CREATE … IF NOT
//!   EXISTS` under an advisory lock, so two nodes starting together do not race), in the
//!   database the URL names and the connecting role's `search_path`. Only when one of the
//!   three is missing: PostgreSQL checks the `CREATE` privilege on the schema even for a
//!   `CREATE … IF NOT EXISTS` of a table that exists, so a node that finds them needs no
//!   `CREATE`, only `SELECT` on `idgen_schema` and its reads and writes. A schema of another
//!   version is refused, never changed.
//! - **Versions.** A write takes `nextval('idgen_kv_version')`: positive, never reused, so a
//!   key's version changes on every write, also across a delete and a new put.
//! - **Commits.** One `SERIALIZABLE` transaction: read each checked key's version, compare,
//!   then write. PostgreSQL's serializable isolation makes a check on an absent key hold
//!   against a concurrent insert too; a serialization failure (`40001`) or a unique violation
//!   (`23505`) is [`Commit::Conflict`]: nothing was written.
//! - **Unknown outcomes.** An error or a timeout after `COMMIT` was sent is
//!   [`StoreError::Unknown`] (the commit may have applied); every error before it is
//!   [`StoreError::Unavailable`] (the transaction is rolled back with its connection).
//! - **Keys that expire** by the database's clock: [`put_expiring`](KvStore::put_expiring)
//!   sets `expires_at = now() + ttl`, and every read treats a key past it as absent. One clock,
//!   the server's, judges whether a writer stopped, never the reader's.
//! - **Bounded.** Every call, from taking a connection to the answer, ends within
//!   [`CALL_TIMEOUT`]; a connection that failed is dropped and the pool opens a new one.
//!
//! The URL: `postgres://[user@]host[:port][,…][/database][?prefix=p][&sslmode=verify-full]`;
//! the password comes from [`StoreAccess`](super::StoreAccess) (a file or the environment),
//! never from the URL, so it stays off command lines and out of logs. Keys are stored under
//! `prefix` (as etcd's).
//!
//! **TLS** (`sslmode=verify-full`): rustls on ring; the server's certificate must chain to
//! `postgres_ca` and name the host the URL names, and a server that does not offer TLS is
//! refused, never talked to in the clear. A client certificate is presented when one is given.
//! Without it (`sslmode=disable`) the connection is plain: a private network or a local proxy.

use std::time::Duration;

use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{BoxFuture, Check, Commit, Entry, KvStore, PgTls, PgUrl, Secret, StoreError, Write};

/// The most time one call may take, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long opening a connection may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections a node holds at most.
pub const POOL_SIZE: usize = 4;
/// The schema this build writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idgen_kv (
    key bytea PRIMARY KEY,
    value bytea NOT NULL,
    version bigint NOT NULL CHECK (version > 0),
    expires_at timestamptz
);
CREATE SEQUENCE IF NOT EXISTS idgen_kv_version;
CREATE TABLE IF NOT EXISTS idgen_schema (version integer NOT NULL);
INSERT INTO idgen_schema (version) SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM idgen_schema);
";

/// A key's value and version, unless it expired.
const GET: &str = "SELECT value, version FROM idgen_kv WHERE key = $1 \
                   AND (expires_at IS NULL OR expires_at > now())";
/// The keys from `$1` up to `$2` (exclusive), in key order: an index range, so a scan reads
/// (and, serializable, locks) its prefix only.
const SCAN: &str = "SELECT key, value, version FROM idgen_kv WHERE key >= $1 AND key < $2 \
                    AND (expires_at IS NULL OR expires_at > now()) ORDER BY key";
/// Every key from `$1` on (a prefix with no key above it: empty, or all 0xff).
const SCAN_FROM: &str = "SELECT key, value, version FROM idgen_kv WHERE key >= $1 \
                         AND (expires_at IS NULL OR expires_at > now()) ORDER BY key";
/// The versions of the keys of `$1` that exist and have not expired.
const CHECK: &str = "SELECT key, version FROM idgen_kv WHERE key = ANY($1) \
                     AND (expires_at IS NULL OR expires_at > now())";
/// Writes the keys of `$1` with the values of `$2` (distinct keys), each a new version,
/// expiring `$3` from now (none: never).
const PUT: &str = "INSERT INTO idgen_kv (key, value, version, expires_at) \
                   SELECT k, v, nextval('idgen_kv_version'), now() + $3::text::interval \
                   FROM unnest($1::bytea[], $2::bytea[]) AS w(k, v) \
                   ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, \
                   version = EXCLUDED.version, expires_at = EXCLUDED.expires_at";
/// Deletes the keys of `$1`.
const DELETE: &str = "DELETE FROM idgen_kv WHERE key = ANY($1)";

/// The PostgreSQL store.
pub struct PgStore {
    pool: Pool,
    prefix: Vec<u8>,
    describe: String,
}

/// An error in full: the server's message and SQLSTATE for a database error (whose `Display`
/// says only "db error"), otherwise the error and its causes.
fn explain(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A refusal that waiting will not cure: a wrong password or user (class 28), a database that
/// does not exist (3D000), a missing privilege (42501).
fn is_refusal(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        c.code().starts_with("28")
            || *c == SqlState::INVALID_CATALOG_NAME
            || *c == SqlState::INSUFFICIENT_PRIVILEGE
    })
}

/// A TLS failure that waiting will not cure: a certificate that does not verify, a server
/// without TLS.
fn is_tls_refusal(text: &str) -> bool {
    [
        "invalid peer certificate",
        "server does not support TLS",
        "CertificateRequired",
    ]
    .iter()
    .any(|t| text.contains(t))
}

fn unavailable(what: &str, e: &tokio_postgres::Error) -> StoreError {
    if is_refusal(e) || is_tls_refusal(&explain(e)) {
        StoreError::Invalid(format!("PostgreSQL {what}: {}", explain(e)))
    } else {
        StoreError::Unavailable(format!("PostgreSQL {what}: {}", explain(e)))
    }
}

/// `40001` (serialization failure) and `23505` (unique violation): another transaction won.
fn is_conflict(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::UNIQUE_VIOLATION
    })
}

impl PgStore {
    /// Connects (one connection first, so a wrong address or password fails here), creates
    /// the schema if it is missing and checks its version. `tls` is required when the URL
    /// says `sslmode=verify-full`, and refused otherwise.
    pub async fn connect(
        url: &PgUrl,
        password: Option<&Secret>,
        tls: Option<&PgTls>,
    ) -> Result<PgStore, StoreError> {
        let mut cfg = tokio_postgres::Config::new();
        for (h, p) in &url.hosts {
            cfg.host(h).port(*p);
        }
        cfg.user(url.user.as_deref().unwrap_or("idgen"));
        if let Some(d) = &url.database {
            cfg.dbname(d);
        }
        if let Some(pw) = password {
            cfg.password(pw.expose());
        }
        cfg.application_name("idgen");
        cfg.connect_timeout(CONNECT_TIMEOUT);
        // A read-write primary, when several hosts are named (a failover pair).
        cfg.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match (url.tls, tls) {
            (true, Some(tls)) => {
                // Require: no fallback to a plain connection when the server declines TLS.
                cfg.ssl_mode(SslMode::Require);
                let connector = MakeRustlsConnect::new(client_config(tls)?);
                Manager::from_config(cfg, connector, manager_config)
            }
            (false, None) => {
                cfg.ssl_mode(SslMode::Disable);
                Manager::from_config(cfg, NoTls, manager_config)
            }
            (true, None) => {
                return Err(StoreError::Invalid(format!(
                    "{url} asks for TLS: give the authorities of the server's certificate \
                     (postgres_ca)"
                )))
            }
            (false, Some(_)) => {
                return Err(StoreError::Invalid(format!(
                    "TLS material is given but {url} is plaintext: add sslmode=verify-full"
                )))
            }
        };
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(CALL_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Invalid(format!("PostgreSQL pool: {e}")))?;
        let mut prefix = url.prefix.clone().into_bytes();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        let store = PgStore {
            pool,
            prefix,
            describe: format!("postgres {url}"),
        };
        store.bounded("schema", store.init_schema()).await?;
        Ok(store)
    }

    async fn init_schema(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| unavailable("begin", &e))?;
        // One creator at a time (a fixed key: "idgen" in ASCII).
        tx.execute("SELECT pg_advisory_xact_lock(1768187749)", &[])
            .await
            .map_err(|e| unavailable("advisory lock", &e))?;
        // Created only when missing, so that a role without CREATE on the schema can start
        // once the tables exist (see the module docs).
        let present: bool = tx
            .query_one(
                "SELECT to_regclass('idgen_kv') IS NOT NULL \
                 AND to_regclass('idgen_kv_version') IS NOT NULL \
                 AND to_regclass('idgen_schema') IS NOT NULL",
                &[],
            )
            .await
            .map_err(|e| unavailable("schema lookup", &e))?
            .get(0);
        if !present {
            tx.batch_execute(SCHEMA)
                .await
                .map_err(|e| StoreError::Invalid(format!("PostgreSQL schema: {}", explain(&e))))?;
        }
        let rows = tx
            .query("SELECT version FROM idgen_schema", &[])
            .await
            .map_err(|e| unavailable("schema version", &e))?;
        let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        if versions != [SCHEMA_VERSION] {
            return Err(StoreError::Invalid(format!(
                "the idgen_schema table says {versions:?}; this idgen reads schema \
                 {SCHEMA_VERSION} only: upgrade idgen, or point it at another database"
            )));
        }
        tx.commit().await.map_err(|e| unavailable("commit", &e))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => unavailable("connection", &e),
            other => StoreError::Unavailable(format!("PostgreSQL connection: {other}")),
        })
    }

    /// Runs `f` within [`CALL_TIMEOUT`]; past it, `on_timeout`.
    async fn bounded<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(CALL_TIMEOUT, f).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "PostgreSQL {what}: no answer within {CALL_TIMEOUT:?}"
            ))),
        }
    }

    fn full(&self, key: &[u8]) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(key);
        k
    }

    fn entry(&self, key: Vec<u8>, value: Vec<u8>, version: i64) -> Result<Entry, StoreError> {
        let key = key
            .strip_prefix(self.prefix.as_slice())
            .ok_or_else(|| StoreError::Invalid("a key outside the store's prefix".into()))?
            .to_vec();
        let version = u64::try_from(version)
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| StoreError::Invalid(format!("a stored version of {version}")))?;
        Ok(Entry {
            key,
            value,
            version,
        })
    }

    async fn get_inner(&self, key: &[u8]) -> Result<Option<Entry>, StoreError> {
        let client = self.client().await?;
        let full = self.full(key);
        let rows = query(&client, GET, &[&full])
            .await
            .map_err(|e| unavailable("get", &e))?;
        // At most one row: `key` is the primary key.
        rows.into_iter()
            .next()
            .map(|r| self.entry(full, r.get(0), r.get(1)))
            .transpose()
    }

    async fn scan_inner(&self, prefix: &[u8]) -> Result<Vec<Entry>, StoreError> {
        let client = self.client().await?;
        let from = self.full(prefix);
        let rows = match upper_bound(&from) {
            Some(to) => query(&client, SCAN, &[&from, &to]).await,
            None => query(&client, SCAN_FROM, &[&from]).await,
        }
        .map_err(|e| unavailable("scan", &e))?;
        rows.into_iter()
            .map(|r| self.entry(r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// The commit's transaction: at most five round trips whatever its size (begin, one read
    /// of every checked version, one upsert of every put, one delete of every deleted key,
    /// commit), each statement prepared once per connection. Errors before `COMMIT` is sent
    /// are `Unavailable` (or a conflict); the `COMMIT` itself is judged apart.
    async fn commit_inner(
        &self,
        checks: &[Check],
        writes: &[Write],
        expires_ms: Option<u64>,
    ) -> Result<Commit, StoreError> {
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::Serializable)
            .start()
            .await
            .map_err(|e| unavailable("begin", &e))?;
        let conflict_or = |what: &str, e: tokio_postgres::Error| {
            if is_conflict(&e) {
                Ok(Commit::Conflict)
            } else {
                Err(unavailable(what, &e))
            }
        };
        if !checks.is_empty() {
            let keys: Vec<Vec<u8>> = checks.iter().map(|c| self.full(&c.key)).collect();
            let rows = match query(&tx, CHECK, &[&keys]).await {
                Ok(rows) => rows,
                Err(e) => return conflict_or("check", e),
            };
            let found: std::collections::HashMap<Vec<u8>, i64> =
                rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            for (c, key) in checks.iter().zip(&keys) {
                let now = found.get(key).copied().unwrap_or(0);
                if u64::try_from(now).ok() != Some(c.version) {
                    // Nothing written; the transaction rolls back when dropped.
                    return Ok(Commit::Conflict);
                }
            }
        }
        // The last write of a key wins, as in the other stores: a put then a delete of one key
        // is a delete, a delete then a put a put.
        let mut last: std::collections::BTreeMap<Vec<u8>, Option<&[u8]>> = Default::default();
        for w in writes {
            match w {
                Write::Put { key, value } => last.insert(self.full(key), Some(value.as_slice())),
                Write::Delete { key } => last.insert(self.full(key), None),
            };
        }
        let (mut put_keys, mut put_values, mut deletes) = (Vec::new(), Vec::new(), Vec::new());
        for (key, value) in last {
            match value {
                Some(v) => {
                    put_keys.push(key);
                    put_values.push(v);
                }
                None => deletes.push(key),
            }
        }
        if !put_keys.is_empty() {
            let expires = expires_ms.map(|ms| format!("{ms} milliseconds"));
            let done = query(&tx, PUT, &[&put_keys, &put_values, &expires]).await;
            if let Err(e) = done {
                return conflict_or("write", e);
            }
        }
        if !deletes.is_empty() {
            let done = query(&tx, DELETE, &[&deletes]).await;
            if let Err(e) = done {
                return conflict_or("delete", e);
            }
        }
        match tx.commit().await {
            Ok(()) => Ok(Commit::Applied),
            // PostgreSQL refused the commit (a serialization failure found at commit): nothing
            // was written.
            Err(e) if is_conflict(&e) => Ok(Commit::Conflict),
            Err(e) => Err(StoreError::Unknown(format!(
                "PostgreSQL commit: {}",
                explain(&e)
            ))),
        }
    }

    async fn commit_bounded(
        &self,
        checks: &[Check],
        writes: &[Write],
        expires_ms: Option<u64>,
    ) -> Result<Commit, StoreError> {
        match tokio::time::timeout(CALL_TIMEOUT, self.commit_inner(checks, writes, expires_ms))
            .await
        {
            Ok(r) => r,
            // The transaction may have been at its COMMIT: the outcome is unknown.
            Err(_) => Err(StoreError::Unknown(format!(
                "PostgreSQL commit: no answer within {CALL_TIMEOUT:?}"
            ))),
        }
    }
}

/// Runs `sql` with `params` on `client` (a pooled connection or its transaction), the statement
/// prepared once per connection.
async fn query(
    client: &impl deadpool_postgres::GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let stmt = client.prepare_cached(sql).await?;
    client.query(&stmt, params).await
}

/// The rustls client configuration for `tls`: ring, TLS 1.2 and 1.3, the server verified
/// against `ca_pem` (rustls checks the name too), the client certificate when given.
fn client_config(tls: &PgTls) -> Result<rustls::ClientConfig, StoreError> {
    let invalid = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Invalid(format!("PostgreSQL TLS: {what}: {e}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(tls.ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| invalid("postgres_ca", &e))?;
        roots.add(cert).map_err(|e| invalid("postgres_ca", &e))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| invalid("protocol versions", &e))?
    .with_root_certificates(roots);
    match &tls.identity {
        None => Ok(builder.with_no_client_auth()),
        Some(id) => {
            let chain = CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid("postgres_cert", &e))?;
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.expose().as_bytes())
                .map_err(|e| invalid("postgres_key", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid("postgres_cert", &e))
        }
    }
}

/// The smallest key above every key that starts with `prefix` (`None`: no such key).
fn upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

impl KvStore for PgStore {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        Box::pin(self.bounded("get", self.get_inner(key)))
    }

    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        Box::pin(self.bounded("scan", self.scan_inner(prefix)))
    }

    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        Box::pin(self.commit_bounded(checks, writes, None))
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn expires_keys(&self) -> bool {
        true
    }

    fn put_expiring<'a>(
        &'a self,
        key: &'a [u8],
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let writes = [Write::Put {
                key: key.to_vec(),
                value: value.to_vec(),
            }];
            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            match self.commit_bounded(&[], &writes, Some(ms)).await? {
                Commit::Applied => Ok(()),
                // Two writers of one key at once: the other's write stands, as after a put.
                Commit::Conflict => Ok(()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_scan_ends_below_the_next_prefix() {
        assert_eq!(upper_bound(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(upper_bound(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(upper_bound(b"\xff\xff"), None);
        assert_eq!(upper_bound(b""), None);
    }
}
