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
//! The URL: `postgres://[user@]host[:port][/database][?prefix=p]`; the password comes from
//! [`StoreAccess`](super::StoreAccess) (a file or the environment), never from the URL, so it
//! stays off command lines and out of logs. Keys are stored under `prefix` (as etcd's).

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

use super::{BoxFuture, Check, Commit, Entry, KvStore, PgUrl, Secret, StoreError, Write};

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

fn unavailable(what: &str, e: &tokio_postgres::Error) -> StoreError {
    if is_refusal(e) {
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
    /// the schema if it is missing and checks its version.
    pub async fn connect(url: &PgUrl, password: Option<&Secret>) -> Result<PgStore, StoreError> {
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
        let manager = Manager::from_config(
            cfg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
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
        let row = client
            .query_opt(
                "SELECT value, version FROM idgen_kv WHERE key = $1 \
                 AND (expires_at IS NULL OR expires_at > now())",
                &[&full],
            )
            .await
            .map_err(|e| unavailable("get", &e))?;
        row.map(|r| self.entry(full, r.get(0), r.get(1)))
            .transpose()
    }

    async fn scan_inner(&self, prefix: &[u8]) -> Result<Vec<Entry>, StoreError> {
        let client = self.client().await?;
        let from = self.full(prefix);
        let to = upper_bound(&from);
        let rows =
            match &to {
                Some(to) => client
                    .query(
                        "SELECT key, value, version FROM idgen_kv WHERE key >= $1 AND key < $2 \
                         AND (expires_at IS NULL OR expires_at > now()) ORDER BY key",
                        &[&from, to],
                    )
                    .await,
                None => {
                    client
                        .query(
                            "SELECT key, value, version FROM idgen_kv WHERE key >= $1 \
                         AND (expires_at IS NULL OR expires_at > now()) ORDER BY key",
                            &[&from],
                        )
                        .await
                }
            }
            .map_err(|e| unavailable("scan", &e))?;
        rows.into_iter()
            .map(|r| self.entry(r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// The commit's transaction: `Ok(None)` when a check failed (rolled back). Errors before
    /// `COMMIT` is sent are `Unavailable`; the caller judges the `COMMIT` itself.
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
        for c in checks {
            let row = match tx
                .query_opt(
                    "SELECT version FROM idgen_kv WHERE key = $1 \
                     AND (expires_at IS NULL OR expires_at > now())",
                    &[&self.full(&c.key)],
                )
                .await
            {
                Ok(r) => r,
                Err(e) => return conflict_or("check", e),
            };
            let now = row.map_or(0, |r| r.get::<_, i64>(0));
            if u64::try_from(now).ok() != Some(c.version) {
                // Nothing written; the transaction rolls back when dropped.
                return Ok(Commit::Conflict);
            }
        }
        let expires = expires_ms.map(|ms| format!("{ms} milliseconds"));
        for w in writes {
            let done = match w {
                Write::Put { key, value } => {
                    tx.execute(
                        "INSERT INTO idgen_kv (key, value, version, expires_at) \
                         VALUES ($1, $2, nextval('idgen_kv_version'), now() + $3::text::interval) \
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, \
                         version = EXCLUDED.version, expires_at = EXCLUDED.expires_at",
                        &[&self.full(key), value, &expires],
                    )
                    .await
                }
                Write::Delete { key } => {
                    tx.execute("DELETE FROM idgen_kv WHERE key = $1", &[&self.full(key)])
                        .await
                }
            };
            if let Err(e) = done {
                return conflict_or("write", e);
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
