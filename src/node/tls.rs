//! TLS on the node's listeners (rustls, ring provider): the server configurations of the ID
//! protocol's TLS listener, the HTTPS ID API and the admin port (each a [`TlsListener`]), built from the `[tls]`
//! section's files and rebuilt when those files change; the handshake, bounded by a timeout;
//! the client's identity; and the counters the metrics scrape reads.
//!
//! A listener takes the configuration current when a connection arrives: a reload never
//! touches connections already open. A new file that does not load (half written, a key that
//! does not match the certificate, an unparsable bundle) is logged and counted, and the node
//! keeps serving the configuration it has.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;

use crate::config::{AdminTls, TlsSection};

/// ALPN protocol name of the ID protocol over TLS (PROTOCOL.md §2.1).
pub const ALPN_IDGEN: &[u8] = b"idgen/1";
/// ALPN protocol name of the HTTPS listeners.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Distinct client identities the metrics name; connections of any further identity count
/// under `other`, so a stream of certificates cannot grow the label set without bound.
pub const MAX_IDENTITY_LABELS: usize = 32;
/// The label of a connection without a client certificate.
pub const ANONYMOUS: &str = "anonymous";
/// The label of identities past [`MAX_IDENTITY_LABELS`].
pub const OTHER: &str = "other";

/// A listener that may serve TLS: two of the shards' fronts (the ID protocol over TLS, the
/// HTTPS ID API) and the admin port, which is no front (it issues no ID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsListener {
    /// The ID protocol's TLS listener.
    Protocol,
    /// The HTTPS ID API.
    Http,
    /// The admin port.
    Admin,
}

impl TlsListener {
    pub const ALL: [TlsListener; 3] =
        [TlsListener::Protocol, TlsListener::Http, TlsListener::Admin];

    /// The listener's name in logs (`front=`) and metric labels (`listener=`).
    pub fn name(self) -> &'static str {
        match self {
            TlsListener::Protocol => "protocol",
            TlsListener::Http => "http",
            TlsListener::Admin => "admin",
        }
    }

    fn alpn(self) -> &'static [u8] {
        match self {
            TlsListener::Protocol => ALPN_IDGEN,
            TlsListener::Http | TlsListener::Admin => ALPN_HTTP1,
        }
    }
}

/// Why the TLS files do not make a configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("client authorities: {0}")]
    Verifier(String),
}

fn file_err(path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// How a handshake ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Refused: not TLS, a bad or missing client certificate, no protocol in common.
    Failed,
    /// Not finished within the timeout.
    Timeout,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Failed, Outcome::Timeout];
    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Timeout => "timeout",
        }
    }
}

/// The node's TLS counters, read by the metrics scrape.
#[derive(Debug, Default)]
pub struct TlsStats {
    /// Handshakes by listener and outcome.
    handshakes: [[AtomicU64; 3]; 3],
    /// Reloads of the files: applied, failed.
    reloads: [AtomicU64; 2],
    /// When the serving certificate (the chain's first) expires, Unix seconds.
    cert_not_after: AtomicU64,
    /// Connections by client identity, [`MAX_IDENTITY_LABELS`] at most, then [`OTHER`].
    identities: Mutex<Vec<(String, u64)>>,
    /// Unix seconds of the last handshake failure logged (failures are logged once a second).
    failure_logged: AtomicU64,
}

impl TlsStats {
    fn handshake(&self, listener: TlsListener, outcome: Outcome) {
        self.handshakes[listener as usize][outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Handshakes by listener and outcome, for the metrics scrape.
    pub fn handshakes(&self) -> Vec<(&'static str, &'static str, u64)> {
        let mut out = Vec::new();
        for listener in TlsListener::ALL {
            for outcome in Outcome::ALL {
                let n =
                    self.handshakes[listener as usize][outcome as usize].load(Ordering::Relaxed);
                out.push((listener.name(), outcome.name(), n));
            }
        }
        out
    }

    /// Reloads applied and failed.
    pub fn reloads(&self) -> [(&'static str, u64); 2] {
        [
            ("applied", self.reloads[0].load(Ordering::Relaxed)),
            ("failed", self.reloads[1].load(Ordering::Relaxed)),
        ]
    }

    /// When the serving certificate expires, Unix seconds (0: unknown).
    pub fn cert_not_after(&self) -> u64 {
        self.cert_not_after.load(Ordering::Relaxed)
    }

    /// Counts a connection of `identity` and returns the label it is counted under.
    pub fn client(&self, identity: Option<&str>) -> String {
        let label = identity.unwrap_or(ANONYMOUS);
        let mut ids = self.identities.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = ids.iter_mut().find(|(l, _)| l == label) {
            entry.1 += 1;
            return entry.0.clone();
        }
        let label = if ids.len() < MAX_IDENTITY_LABELS {
            label
        } else {
            OTHER
        };
        match ids.iter_mut().find(|(l, _)| l == label) {
            Some(entry) => entry.1 += 1,
            None => ids.push((label.to_string(), 1)),
        }
        label.to_string()
    }

    /// Connections by identity label.
    pub fn clients(&self) -> Vec<(String, u64)> {
        self.identities
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a failure may be logged now (one line a second at most: a flood of bad
    /// handshakes must not flood the log; the counters count every one).
    fn may_log_failure(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.failure_logged.swap(now, Ordering::Relaxed) != now
    }
}

/// When the files were last seen changed: modification time and length of each.
type Stamp = Vec<Option<(SystemTime, u64)>>;

/// The node's TLS: the current configuration of every listener that serves TLS, and what
/// rebuilds them.
pub struct ServerTls {
    section: TlsSection,
    configs: [RwLock<Option<Arc<ServerConfig>>>; 3],
    stamp: Mutex<Stamp>,
    pub stats: TlsStats,
}

/// The certificate chain, key and client authorities, as read from the files.
struct Loaded {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: Option<Arc<RootCertStore>>,
    not_after: u64,
}

impl ServerTls {
    /// Loads the section's files and builds a configuration for every listener that uses TLS.
    /// `None` if no listener uses TLS.
    pub fn new(section: &TlsSection) -> Result<Option<Arc<ServerTls>>, TlsError> {
        if section.listeners().is_empty() {
            return Ok(None);
        }
        let tls = ServerTls {
            section: section.clone(),
            configs: Default::default(),
            stamp: Mutex::new(Vec::new()),
            stats: TlsStats::default(),
        };
        let stamp = tls.stamp();
        tls.apply(tls.load()?)?;
        *tls.stamp.lock().unwrap_or_else(|p| p.into_inner()) = stamp;
        Ok(Some(Arc::new(tls)))
    }

    /// Whether `listener` serves TLS on this node.
    pub fn serves(&self, listener: TlsListener) -> bool {
        self.current(listener).is_some()
    }

    fn uses(&self, listener: TlsListener) -> Option<bool> {
        let s = &self.section;
        match listener {
            TlsListener::Protocol => s.tls_listen.is_some().then(|| s.mutual()),
            TlsListener::Http => s.tls_http.then(|| s.mutual()),
            TlsListener::Admin => match s.tls_admin {
                AdminTls::Off => None,
                AdminTls::Tls => Some(false),
                AdminTls::Mtls => Some(true),
            },
        }
    }

    fn files(&self) -> Vec<&Path> {
        let s = &self.section;
        [&s.tls_cert, &s.tls_key, &s.tls_client_ca]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
            .collect()
    }

    fn stamp(&self) -> Stamp {
        self.files()
            .into_iter()
            .map(|p| {
                let m = std::fs::metadata(p).ok()?;
                Some((m.modified().ok()?, m.len()))
            })
            .collect()
    }

    fn load(&self) -> Result<Loaded, TlsError> {
        let s = &self.section;
        let (Some(cert), Some(key)) = (&s.tls_cert, &s.tls_key) else {
            return Err(TlsError::Verifier(
                "tls_cert and tls_key are required".into(),
            ));
        };
        let chain = read_certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| file_err(key, format!("no private key in PEM: {e}")))?;
        let not_after = x509_parser::parse_x509_certificate(&chain[0])
            .map(|(_, c)| u64::try_from(c.validity().not_after.timestamp()).unwrap_or(0))
            .map_err(|e| file_err(cert, format!("cannot parse the certificate: {e}")))?;
        let roots = match &s.tls_client_ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for der in read_certs(ca)? {
                    roots
                        .add(der)
                        .map_err(|e| file_err(ca, format!("not a usable authority: {e}")))?;
                }
                Some(Arc::new(roots))
            }
            None => None,
        };
        Ok(Loaded {
            chain,
            key,
            roots,
            not_after,
        })
    }

    fn apply(&self, loaded: Loaded) -> Result<(), TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut built = Vec::new();
        for listener in TlsListener::ALL {
            let Some(mutual) = self.uses(listener) else {
                continue;
            };
            let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()?;
            let builder = match (&loaded.roots, mutual) {
                (Some(roots), true) => {
                    let verifier = WebPkiClientVerifier::builder_with_provider(
                        Arc::clone(roots),
                        Arc::clone(&provider),
                    )
                    .build()
                    .map_err(|e| TlsError::Verifier(e.to_string()))?;
                    builder.with_client_cert_verifier(verifier)
                }
                (None, true) => {
                    return Err(TlsError::Verifier(format!(
                        "the {} listener asks for client certificates but tls_client_ca is not set",
                        listener.name()
                    )))
                }
                (_, false) => builder.with_no_client_auth(),
            };
            let mut config =
                builder.with_single_cert(loaded.chain.clone(), loaded.key.clone_key())?;
            config.alpn_protocols = vec![listener.alpn().to_vec()];
            built.push((listener, Arc::new(config)));
        }
        for (listener, config) in built {
            *self.configs[listener as usize]
                .write()
                .unwrap_or_else(|p| p.into_inner()) = Some(config);
        }
        self.stats
            .cert_not_after
            .store(loaded.not_after, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if loaded.not_after <= now {
            tracing::error!(
                event = "tls_certificate_expired",
                not_after = loaded.not_after,
                "the node's certificate has expired: clients that verify it refuse the node"
            );
        } else if loaded.not_after - now < 14 * 86_400 {
            tracing::warn!(
                event = "tls_certificate_expiring",
                days_left = (loaded.not_after - now) / 86_400,
                "the node's certificate expires in less than 14 days"
            );
        }
        Ok(())
    }

    /// Rebuilds the configurations if a file changed since the last look. A file that does
    /// not load leaves the current configurations serving.
    pub fn reload_if_changed(&self) {
        let stamp = self.stamp();
        {
            let mut last = self.stamp.lock().unwrap_or_else(|p| p.into_inner());
            if *last == stamp {
                return;
            }
            *last = stamp;
        }
        match self.load().and_then(|l| self.apply(l)) {
            Ok(()) => {
                self.stats.reloads[0].fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    event = "tls_reloaded",
                    "TLS certificate, key or client authorities changed: reloaded"
                );
            }
            Err(e) => {
                self.stats.reloads[1].fetch_add(1, Ordering::Relaxed);
                tracing::error!(event = "tls_reload_failed", error = %e, "cannot reload the TLS files: serving the previous ones");
            }
        }
    }

    /// Checks the files every `tls_reload_interval` until `shutdown` turns true.
    pub async fn watch(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.section.tls_reload_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let tls = Arc::clone(&self);
                    // File reads and parsing off the control thread's runtime.
                    let _ = tokio::task::spawn_blocking(move || tls.reload_if_changed()).await;
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        return;
                    }
                }
            }
        }
    }

    fn current(&self, listener: TlsListener) -> Option<Arc<ServerConfig>> {
        self.configs[listener as usize]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs the server side of a handshake on `io` within `timeout`. On success, the stream
    /// and the label its client is counted under (its identity, [`ANONYMOUS`] or [`OTHER`]).
    /// A failure is counted and logged (once a second at most) and the connection dropped.
    pub async fn accept<IO>(
        &self,
        listener: TlsListener,
        io: IO,
        peer: Option<std::net::SocketAddr>,
        timeout: Duration,
    ) -> Option<(TlsStream<IO>, String)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self.current(listener)?;
        let accept = tokio_rustls::TlsAcceptor::from(config).accept(io);
        let error = match tokio::time::timeout(timeout, accept).await {
            Ok(Ok(stream)) => {
                self.stats.handshake(listener, Outcome::Ok);
                let identity = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| identity(c));
                let label = self.stats.client(identity.as_deref());
                tracing::debug!(
                    event = "tls_accepted",
                    front = listener.name(),
                    peer = peer.map(tracing::field::display),
                    client = identity.as_deref().unwrap_or(ANONYMOUS),
                    "TLS connection"
                );
                return Some((stream, label));
            }
            Ok(Err(e)) => {
                self.stats.handshake(listener, Outcome::Failed);
                e.to_string()
            }
            Err(_) => {
                self.stats.handshake(listener, Outcome::Timeout);
                format!(
                    "not finished within {}",
                    humantime::format_duration(timeout)
                )
            }
        };
        if self.stats.may_log_failure() {
            tracing::warn!(event = "tls_handshake_failed", front = listener.name(), peer = peer.map(tracing::field::display), error = %error, "TLS handshake failed (logged once a second at most; idgen_tls_handshakes_total counts each)");
        }
        None
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, format!("cannot read: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(file_err(path, "no certificate in the file (PEM expected)"));
    }
    Ok(certs)
}

/// A certificate's identity: its first URI SAN (a SPIFFE ID in a mesh), else its first DNS
/// SAN, else its subject's common name.
pub fn identity(der: &CertificateDer<'_>) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let names = &san.value.general_names;
        let uri = names.iter().find_map(|n| match n {
            GeneralName::URI(u) => Some(*u),
            _ => None,
        });
        let dns = names.iter().find_map(|n| match n {
            GeneralName::DNSName(d) => Some(*d),
            _ => None,
        });
        if let Some(name) = uri.or(dns) {
            return Some(name.to_string());
        }
    }
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string);
    cn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_labels_are_bounded() {
        let stats = TlsStats::default();
        assert_eq!(stats.client(None), ANONYMOUS);
        for i in 0..MAX_IDENTITY_LABELS + 10 {
            stats.client(Some(&format!("svc-{i}")));
        }
        assert_eq!(stats.client(Some("svc-0")), "svc-0");
        assert_eq!(stats.client(Some("svc-late")), OTHER);
        let clients = stats.clients();
        assert_eq!(clients.len(), MAX_IDENTITY_LABELS + 1);
        let other = clients.iter().find(|(l, _)| l == OTHER).map(|e| e.1);
        // anonymous and svc-0..=svc-30 hold the labels: svc-31..=svc-41 and svc-late are other.
        assert_eq!(other, Some(12));
    }
}
