//! The etcd store: the v3 API through `etcd-client`.
//!
//! Every key is stored under the namespace (`<prefix>/<key>` when the prefix is not empty), so
//! several idgen clusters can share one etcd. A key's [`Version`](super::Version) is its
//! `mod_revision`. A commit is one etcd `Txn`: its compares are the checks
//! (`version(key) = 0` for "still absent", `mod_revision(key) = v` otherwise), its success
//! branch the writes.
//!
//! Every call is bounded: gRPC requests time out after [`REQUEST_TIMEOUT`], and the whole call
//! (including waiting for a reachable endpoint) after a little more, so an unreachable etcd
//! fails fast instead of hanging. A failure that certainly did not reach etcd (connection
//! refused, "no leader") is retried for up to [`RETRY_FOR`] (the client balances requests over
//! the endpoints, so a retry may reach a live member): one dead member of a cluster is invisible
//! to callers, and a dead cluster is reported after about a second. Errors map to [`StoreError`] as follows:
//!
//! - reads (`get`, `scan`): any failure is `Unavailable`;
//! - commits: `Unavailable` only when the request certainly did not reach an etcd that could
//!   apply it (no connection could be made, or the member answered "no leader" before
//!   proposing it); any other transport error or timeout is `Unknown`;
//! - malformed or refused requests (`InvalidArgument`, permission errors) are `Invalid`.
//!
//! ## TLS and authentication
//!
//! [`EtcdStore::connect_with`] speaks TLS (`etcds://`) with the authorities, client
//! certificate and server name of an [`EtcdAccess`] (rustls with the ring provider, through
//! etcd-client's `tls` feature), and authenticates as an etcd user when one is given: the
//! client fetches a token with the password at connect and again whenever etcd says the token
//! expired (etcd forgets its simple tokens when a member restarts). A refused password, a
//! missing permission or a client certificate etcd does not accept fails the connect with an
//! error that says which.
//!
//! ## Sizes
//!
//! etcd bounds a `Txn` (`--max-txn-ops`, default 128, counted separately for the compares and
//! for the operations) and the client a response (gRPC's 4 MiB message limit). The lease logic
//! keeps its transactions well under the first (`crate::lease`); a [`scan`](KvStore::scan) is
//! read in pages of [`SCAN_PAGE`] keys, every page at the revision of the first, so a scan of
//! any size is still one snapshot. A page whose revision has been compacted away meanwhile
//! restarts the scan (a few times, then `Unavailable`).
//!
//! ## Expiring keys
//!
//! [`put_expiring`](KvStore::put_expiring) grants an etcd lease of the TTL (whole seconds, at
//! least etcd's minimum) and puts the key under it: etcd removes the key when the lease runs
//! out by etcd's clock, unless a later write has moved the key to a fresher lease. Old leases
//! hold no key once it moved; they run out by themselves.

use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, Identity,
    PutOptions, TlsOptions, Txn, TxnOp,
};
use tonic::Code;

use super::{BoxFuture, Check, Commit, CommitOrGet, Entry, EtcdAccess, KvStore, StoreError, Write};

/// How long establishing a connection to one endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one gRPC request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a call keeps retrying requests that certainly did not reach etcd.
pub const RETRY_FOR: Duration = Duration::from_millis(1000);
/// The pause between such retries, once every endpoint had a try.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// The bound on a whole call, which also covers waiting for any endpoint to become reachable.
const CALL_TIMEOUT: Duration = Duration::from_millis(3000);
/// Keys per page of a scan: with idgen's records (a few hundred bytes) far below the client's
/// 4 MiB message limit.
pub const SCAN_PAGE: usize = 1000;
/// Times a scan starts over because its revision was compacted between two pages.
const SCAN_RESTARTS: u32 = 3;

/// One page of a scan: the entries, the revision it was read at, and whether more follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPage {
    pub entries: Vec<Entry>,
    /// The store revision every page of the scan is read at.
    pub revision: i64,
    /// Whether keys after the last entry remain in the range.
    pub more: bool,
}

/// The end of etcd's range for "every key starting with `prefix`" (etcd's `GetPrefixRangeEnd`):
/// the prefix with its last byte below 0xff incremented and what follows dropped; `\0` (every
/// key) for a prefix of only 0xff bytes or none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A namespace in an etcd cluster.
pub struct EtcdStore {
    client: Client,
    endpoints: Vec<String>,
    /// Over TLS (`etcds://`).
    tls: bool,
    prefix: String,
    /// `prefix + "/"`, or empty.
    key_prefix: Vec<u8>,
    /// Keys per page of a scan.
    page: usize,
}

/// Whether an etcd error certainly means the request was not applied.
fn not_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::InvalidUri(_)
        | etcd_client::Error::InvalidArgs(_)
        | etcd_client::Error::EndpointError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> =
                std::error::Error::source(s);
            while let Some(err) = source {
                if err.is::<tonic::ConnectError>() {
                    return true;
                }
                source = err.source();
            }
            let m = s.message();
            s.code() == Code::Unavailable
                && (m.contains("no leader")
                    || m.contains("tcp connect error")
                    || m.contains("Connection refused")
                    || m.contains("error trying to connect"))
        }
        _ => false,
    }
}

/// Whether an error message reads like a connection that was opened and then failed or was
/// closed by etcd (a refused certificate, a TLS server given plaintext), rather than one that
/// could not be opened at all (nothing listening) or timed out.
fn closed_on_us(m: &str) -> bool {
    let m = m.to_ascii_lowercase();
    let opened = [
        "certificate",
        "handshake",
        "alert",
        "connection closed",
        "broken pipe",
        "connection reset",
        "transport error",
    ];
    opened.iter().any(|w| m.contains(w))
        && !m.contains("connection refused")
        && !m.contains("tcp connect error")
}

fn tls_identity(access: &EtcdAccess) -> bool {
    access.tls.as_ref().is_some_and(|t| t.identity.is_some())
}

/// An etcd client error as plain text: a gRPC status's message, then the `Display` of each of
/// its causes. etcd-client's own text writes a status's cause in Rust `Debug` form (with the
/// endpoint's address inside), which is no message for an operator or a log pipeline.
fn plain(e: &etcd_client::Error) -> String {
    use std::error::Error as _;
    let (first, mut cause): (String, Option<&(dyn std::error::Error + 'static)>) = match e {
        etcd_client::Error::GRpcStatus(s) if s.message().is_empty() => {
            (s.code().description().to_string(), s.source())
        }
        etcd_client::Error::GRpcStatus(s) => (s.message().to_string(), s.source()),
        etcd_client::Error::TransportError(t) => (t.to_string(), t.source()),
        other => (other.to_string(), None),
    };
    let mut parts = vec![first];
    // Bounded: a cause chain is short, but nothing promises it ends.
    for _ in 0..16 {
        let Some(c) = cause else { break };
        let text = c.to_string();
        if !text.is_empty() && !parts.contains(&text) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ")
}

/// A connect error, with what it most likely means for authentication. Like every error of
/// [`EtcdStore::connect_with`], it does not name the endpoints: the caller names the store it
/// opened (`cannot open the store etcd://…: …`), and an address is said once.
fn explain(e: &etcd_client::Error, access: &EtcdAccess) -> String {
    let text = plain(e);
    match &access.user {
        Some(user) if text.contains("authentication failed") => format!(
            "{text} (etcd refused user {:?} with the password given by \
             etcd_password_file or IDGEN_ETCD_PASSWORD)",
            user.name
        ),
        _ => text,
    }
}

fn is_invalid(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::InvalidArgument | Code::PermissionDenied | Code::Unauthenticated
        ),
        _ => false,
    }
}

impl EtcdStore {
    /// Connects to an etcd cluster (`host:port` endpoints) over plaintext, without a user, and
    /// checks that it answers.
    pub async fn connect(endpoints: Vec<String>, prefix: String) -> Result<Self, StoreError> {
        Self::connect_with(endpoints, prefix, false, &EtcdAccess::default()).await
    }

    /// Connects to an etcd cluster over TLS when `tls` (with `access.tls`: its authorities are
    /// required), as `access.user` when set, and checks that it answers.
    pub async fn connect_with(
        endpoints: Vec<String>,
        prefix: String,
        tls: bool,
        access: &EtcdAccess,
    ) -> Result<Self, StoreError> {
        if endpoints.is_empty() {
            return Err(StoreError::Invalid("etcd: no endpoints given".into()));
        }
        let prefix = prefix.trim_matches('/').to_string();
        let scheme = if tls { "etcds" } else { "etcd" };
        let what = format!("{scheme} {}", endpoints.join(","));
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            // A member cut off from its leader refuses at once instead of stalling.
            .with_require_leader(true);
        match (tls, &access.tls) {
            (true, Some(t)) => {
                let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(&t.ca_pem));
                if let Some(id) = &t.identity {
                    config = config.identity(Identity::from_pem(&id.cert_pem, id.key_pem.expose()));
                }
                if let Some(name) = &t.server_name {
                    config = config.domain_name(name.clone());
                }
                options = options.with_tls(config);
            }
            (true, None) => {
                return Err(StoreError::Invalid(
                    "TLS needs the authorities to verify etcd's certificates (etcd_ca)".into(),
                ))
            }
            (false, Some(_)) => {
                return Err(StoreError::Invalid(
                    "TLS settings are given for a plaintext etcd:// URL: use etcds://".into(),
                ))
            }
            (false, None) => {}
        }
        if let Some(user) = &access.user {
            if !tls {
                tracing::warn!(
                    event = "etcd_password_in_plaintext",
                    store = %what,
                    user = %user.name,
                    "the etcd password goes over plaintext: use etcds:// outside a trusted network"
                );
            }
            options = options
                .with_user(user.name.clone(), user.password.expose().to_string())
                // etcd forgets its simple tokens when a member restarts: fetch a new one.
                .with_auto_token_refresh(true);
        }
        let client = match tokio::time::timeout(
            CALL_TIMEOUT,
            Client::connect(endpoints.clone(), Some(options)),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) if is_invalid(&e) => return Err(StoreError::Invalid(explain(&e, access))),
            Ok(Err(e)) => return Err(StoreError::Unavailable(explain(&e, access))),
            Err(_) => return Err(StoreError::Unavailable("connect timed out".into())),
        };
        let key_prefix = if prefix.is_empty() {
            Vec::new()
        } else {
            format!("{prefix}/").into_bytes()
        };
        let store = EtcdStore {
            client,
            endpoints,
            tls,
            prefix,
            key_prefix,
            page: SCAN_PAGE,
        };
        // The channel connects lazily: make one read so a wrong address, a certificate etcd
        // refuses or a missing permission fails here, clearly (and, like every error here,
        // without the endpoints: the caller names the store).
        let probe = store.full_key(b"\0probe");
        let failed = match store
            .call(|mut c| {
                let key = probe.clone();
                async move { c.get(key, None).await }
            })
            .await
        {
            Some(Ok(_)) => return Ok(store),
            Some(Err(e)) if is_invalid(&e) => StoreError::Invalid(plain(&e)),
            Some(Err(e)) => StoreError::Unavailable(plain(&e)),
            None => StoreError::Unavailable(format!("no answer within {CALL_TIMEOUT:?}")),
        };
        match failed {
            StoreError::Unavailable(m) if tls && closed_on_us(&m) => {
                Err(StoreError::Unavailable(format!(
                    "{m} (the TLS handshake with etcd failed: check that etcd_ca holds the \
                     authority of etcd's certificate, that the certificate names the endpoint \
                     host or etcd_server_name, and that etcd accepts the client certificate \
                     given by etcd_cert{})",
                    if tls_identity(access) {
                        ""
                    } else {
                        ": none is set"
                    }
                )))
            }
            StoreError::Unavailable(m) if !tls && closed_on_us(&m) => {
                Err(StoreError::Unavailable(format!(
                    "{m} (etcd closed the connection: if it serves TLS, write the store as \
                     etcds://)"
                )))
            }
            StoreError::Invalid(m) if m.contains("permission denied") => {
                Err(StoreError::Invalid(format!(
                    "{m} (the etcd user needs a role with readwrite on the prefix {:?})",
                    store.key_prefix_text()
                )))
            }
            StoreError::Invalid(m) if m.contains("user name is empty") => {
                Err(StoreError::Invalid(format!(
                    "{m} (etcd has authentication on: set etcd_user, and its password in \
                     etcd_password_file or IDGEN_ETCD_PASSWORD)"
                )))
            }
            e => Err(e),
        }
    }

    /// The keys' prefix as text, for messages.
    fn key_prefix_text(&self) -> String {
        String::from_utf8_lossy(&self.key_prefix).into_owned()
    }

    /// Reads scans in pages of `keys` keys instead of [`SCAN_PAGE`] (at least 1).
    pub fn with_scan_page(mut self, keys: usize) -> Self {
        self.page = keys.max(1);
        self
    }

    /// One page of a scan of `prefix`: at most `limit` keys after `after` (from the first key
    /// of the prefix if `None`), read at `revision` (the newest if `None`).
    /// [`scan`](KvStore::scan) is a loop of these at the first page's revision.
    pub async fn scan_page(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        revision: Option<i64>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        let full = self.full_key(prefix);
        let end = prefix_end(&full);
        let start = match after {
            // The smallest key after `after`.
            Some(a) => {
                let mut k = self.full_key(a);
                k.push(0);
                k
            }
            // etcd refuses an empty key; "\0" is the smallest key there is.
            None if full.is_empty() => vec![0],
            None => full,
        };
        let mut options = GetOptions::new()
            .with_range(end)
            .with_limit(i64::try_from(limit.max(1)).unwrap_or(i64::MAX));
        if let Some(rev) = revision {
            options = options.with_revision(rev);
        }
        let resp: GetResponse = self
            .read("scan", |mut c| {
                let (start, options) = (start.clone(), options.clone());
                async move { c.get(start, Some(options)).await }
            })
            .await?;
        let revision = match revision {
            Some(r) => r,
            None => resp.header().map(|h| h.revision()).ok_or_else(|| {
                StoreError::Invalid(format!(
                    "{}: a range response without a header",
                    self.describe()
                ))
            })?,
        };
        Ok(ScanPage {
            entries: resp
                .kvs()
                .iter()
                .map(|kv| self.entry(kv))
                .collect::<Result<_, _>>()?,
            revision,
            more: resp.more(),
        })
    }

    /// A whole scan, page after page at one revision. `Ok(None)`: that revision was compacted
    /// before the last page was read.
    async fn scan_once(&self, prefix: &[u8]) -> Result<Option<Vec<Entry>>, StoreError> {
        let mut out = Vec::new();
        let mut revision = None;
        loop {
            let after = out.last().map(|e: &Entry| e.key.clone());
            let page = match self
                .scan_page(prefix, after.as_deref(), revision, self.page)
                .await
            {
                Ok(p) => p,
                Err(StoreError::Unavailable(m))
                    if revision.is_some() && m.contains("compacted") =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            };
            revision = Some(page.revision);
            let got = page.entries.len();
            out.extend(page.entries);
            if !page.more || got == 0 {
                return Ok(Some(out));
            }
        }
    }

    fn full_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.key_prefix.len() + key.len());
        k.extend_from_slice(&self.key_prefix);
        k.extend_from_slice(key);
        k
    }

    fn entry(&self, kv: &etcd_client::KeyValue) -> Result<Entry, StoreError> {
        let key = kv
            .key()
            .strip_prefix(self.key_prefix.as_slice())
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "etcd returned key {:?} outside namespace {:?}",
                    String::from_utf8_lossy(kv.key()),
                    self.prefix
                ))
            })?;
        let version = u64::try_from(kv.mod_revision())
            .ok()
            .filter(|v| *v != 0)
            .ok_or_else(|| {
                StoreError::Invalid(format!("etcd mod_revision {}", kv.mod_revision()))
            })?;
        Ok(Entry {
            key: key.to_vec(),
            value: kv.value().to_vec(),
            version,
        })
    }

    /// Runs `op` on a fresh request, within [`CALL_TIMEOUT`] overall. A failure that certainly
    /// did not reach etcd (connection refused, "no leader") is retried for up to [`RETRY_FOR`]:
    /// the client balances over the endpoints, so the next try may reach a live one.
    /// `None` means the call timed out.
    async fn call<T, Fut>(
        &self,
        op: impl Fn(Client) -> Fut,
    ) -> Option<Result<T, etcd_client::Error>>
    where
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let start = tokio::time::Instant::now();
        let attempts = async {
            let mut tries = 0;
            loop {
                match op(self.client.clone()).await {
                    Err(e) if not_sent(&e) && !is_invalid(&e) && start.elapsed() < RETRY_FOR => {
                        tries += 1;
                        // A try per endpoint at once, then gently: all may be down.
                        if tries >= self.endpoints.len() {
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                    }
                    r => return r,
                }
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, attempts).await.ok()
    }

    /// A read through [`call`](Self::call): every failure of a read is `Unavailable`.
    async fn read<T, Fut>(&self, what: &str, op: impl Fn(Client) -> Fut) -> Result<T, StoreError>
    where
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        match self.call(op).await {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) if is_invalid(&e) => Err(StoreError::Invalid(format!(
                "{} {what}: {}",
                self.describe(),
                plain(&e)
            ))),
            Some(Err(e)) => Err(StoreError::Unavailable(format!(
                "{} {what}: {}",
                self.describe(),
                plain(&e)
            ))),
            None => Err(StoreError::Unavailable(format!(
                "{} {what}: timed out after {CALL_TIMEOUT:?}",
                self.describe()
            ))),
        }
    }
}

impl KvStore for EtcdStore {
    fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
        Box::pin(async move {
            let key = self.full_key(key);
            let resp = self
                .read("get", |mut c| {
                    let key = key.clone();
                    async move { c.get(key, None).await }
                })
                .await?;
            resp.kvs().first().map(|kv| self.entry(kv)).transpose()
        })
    }

    fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
        Box::pin(async move {
            // Pages of range reads (etcd returns them in key order), all at the revision of the
            // first: together one consistent snapshot.
            for _ in 0..SCAN_RESTARTS {
                if let Some(entries) = self.scan_once(prefix).await? {
                    return Ok(entries);
                }
            }
            Err(StoreError::Unavailable(format!(
                "{} scan: its revision was compacted between pages {SCAN_RESTARTS} times",
                self.describe()
            )))
        })
    }

    fn commit<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        Box::pin(async move {
            Ok(match self.txn(checks, writes, None).await? {
                CommitOrGet::Applied(_) => Commit::Applied,
                CommitOrGet::Conflict(_) => Commit::Conflict,
            })
        })
    }

    fn commit_or_get<'a>(
        &'a self,
        checks: &'a [Check],
        writes: &'a [Write],
        read: &'a [u8],
    ) -> BoxFuture<'a, Result<CommitOrGet, StoreError>> {
        Box::pin(self.txn(checks, writes, Some(read)))
    }

    fn describe(&self) -> String {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        format!("{scheme} {}/{}", self.endpoints.join(","), self.prefix)
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
            let what = self.describe();
            // etcd leases count whole seconds.
            let secs = i64::try_from(ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX);
            let lease = match self
                .call(|mut c| async move { c.lease_grant(secs, None).await })
                .await
            {
                Some(Ok(resp)) => resp.id(),
                Some(Err(e)) if is_invalid(&e) => {
                    return Err(StoreError::Invalid(format!(
                        "{what} lease grant: {}",
                        plain(&e)
                    )))
                }
                Some(Err(e)) if not_sent(&e) => {
                    return Err(StoreError::Unavailable(format!(
                        "{what} lease grant: {}",
                        plain(&e)
                    )))
                }
                // A lease may have been granted: it holds nothing and runs out by itself.
                Some(Err(e)) => {
                    return Err(StoreError::Unknown(format!(
                        "{what} lease grant: {}",
                        plain(&e)
                    )))
                }
                None => {
                    return Err(StoreError::Unknown(format!(
                        "{what} lease grant: timed out after {CALL_TIMEOUT:?}"
                    )))
                }
            };
            let key = self.full_key(key);
            let result = self
                .call(|mut c| {
                    let (key, value) = (key.clone(), value.to_vec());
                    async move {
                        c.put(key, value, Some(PutOptions::new().with_lease(lease)))
                            .await
                    }
                })
                .await;
            match result {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) if is_invalid(&e) => {
                    Err(StoreError::Invalid(format!("{what} put: {}", plain(&e))))
                }
                Some(Err(e)) if not_sent(&e) => Err(StoreError::Unavailable(format!(
                    "{what} put: {}",
                    plain(&e)
                ))),
                Some(Err(e)) => Err(StoreError::Unknown(format!("{what} put: {}", plain(&e)))),
                None => Err(StoreError::Unknown(format!(
                    "{what} put: timed out after {CALL_TIMEOUT:?}"
                ))),
            }
        })
    }
}

impl EtcdStore {
    /// One transaction: the checks as compares, the writes as its success branch, and (with
    /// `read`) a range read of that key as its failure branch.
    async fn txn(
        &self,
        checks: &[Check],
        writes: &[Write],
        read: Option<&[u8]>,
    ) -> Result<CommitOrGet, StoreError> {
        let compares: Vec<Compare> = checks
            .iter()
            .map(|c| {
                let key = self.full_key(&c.key);
                if c.version == 0 {
                    Ok(Compare::version(key, CompareOp::Equal, 0))
                } else {
                    let rev = i64::try_from(c.version).map_err(|_| {
                        StoreError::Invalid(format!("etcd: version {} out of range", c.version))
                    })?;
                    Ok(Compare::mod_revision(key, CompareOp::Equal, rev))
                }
            })
            .collect::<Result<_, StoreError>>()?;
        let ops: Vec<TxnOp> = writes
            .iter()
            .map(|w| match w {
                Write::Put { key, value } => TxnOp::put(self.full_key(key), value.clone(), None),
                Write::Delete { key } => TxnOp::delete(self.full_key(key), None),
            })
            .collect();
        let mut txn = Txn::new().when(compares).and_then(ops);
        if let Some(key) = read {
            txn = txn.or_else(vec![TxnOp::get(self.full_key(key), None)]);
        }
        let what = self.describe();
        let result = self
            .call(|mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        // A timeout may have cut off a retry that followed an unsent attempt, but it may
        // equally have cut off a sent one: unknown.
        match result {
            Some(Ok(resp)) if resp.succeeded() => Ok(CommitOrGet::Applied(
                read.and_then(|_| resp.header())
                    .and_then(|h| u64::try_from(h.revision()).ok()),
            )),
            Some(Ok(resp)) => {
                let mut now = None;
                for op in resp.op_responses() {
                    if let etcd_client::TxnOpResponse::Get(get) = op {
                        now = get.kvs().first().map(|kv| self.entry(kv)).transpose()?;
                    }
                }
                Ok(CommitOrGet::Conflict(now))
            }
            Some(Err(e)) if is_invalid(&e) => {
                Err(StoreError::Invalid(format!("{what} commit: {}", plain(&e))))
            }
            Some(Err(e)) if not_sent(&e) => Err(StoreError::Unavailable(format!(
                "{what} commit: {}",
                plain(&e)
            ))),
            Some(Err(e)) => Err(StoreError::Unknown(format!("{what} commit: {}", plain(&e)))),
            None => Err(StoreError::Unknown(format!(
                "{what} commit: timed out after {CALL_TIMEOUT:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{closed_on_us, prefix_end};

    #[test]
    fn connections_closed_by_etcd_are_told_from_nothing_listening() {
        for closed in [
            r#"grpc request error: code: 'Unknown error', message: "transport error", source: tonic::transport::Error(Transport, hyper::Error(Io, Custom { kind: BrokenPipe, error: "stream closed because of a broken pipe" }))"#,
            r#"message: "operation was canceled", source: tonic::transport::Error(Transport, hyper::Error(Canceled, "connection closed"))"#,
            r#"message: "invalid peer certificate: UnknownIssuer""#,
        ] {
            assert!(closed_on_us(closed), "{closed}");
        }
        for not_opened in [
            r#"message: "tcp connect error", source: tonic::transport::Error(Transport, ConnectError(ConnectError("tcp connect error", Os { code: 111, kind: ConnectionRefused, message: "Connection refused" })))"#,
            "etcds 127.0.0.1:1/tls get: timed out after 3s",
        ] {
            assert!(!closed_on_us(not_opened), "{not_opened}");
        }
    }

    #[test]
    fn prefix_ends_as_etcd_computes_them() {
        assert_eq!(prefix_end(b"idgen/"), b"idgen0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
