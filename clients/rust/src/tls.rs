//! TLS and mutual TLS to idgen nodes (feature `tls`, on by default).
//!
//! A [`TlsConfig`] says whom to trust (a CA bundle), who this client is (optionally a client
//! certificate and its key, for nodes that require mutual TLS) and, if it differs from the
//! address dialed, which name the node's certificate must carry. It is made once, from PEM
//! files or PEM text, and shared by every connection made with it (cloning is cheap).
//!
//! ```no_run
//! use idgen_client::{Pool, PoolOptions, TlsConfig};
//!
//! # async fn run() -> Result<(), idgen_client::Error> {
//! let tls = TlsConfig::builder()
//!     .ca_file("/etc/idgen/ca.crt")
//!     .client_cert_files("/etc/idgen/client.crt", "/etc/idgen/client.key") // mutual TLS
//!     .build()?;
//! let pool = Pool::connect_tls(&["id-1.internal:7420", "id-2.internal:7420"], PoolOptions::default(), &tls).await?;
//! let id = pool.next_id().await?;
//! # let _ = id;
//! # Ok(())
//! # }
//! ```
//!
//! What is verified, always (there is no switch that turns it off):
//!
//! * the node's certificate chains to a certificate of the CA bundle, and is valid now;
//! * the certificate names the server name: by default the host part of the address dialed
//!   (`id-1.internal` for `id-1.internal:7420`; for an IP literal such as `10.0.0.1:7420`
//!   or `[::1]:7420`, the IP address, which the certificate must carry as an IP address
//!   SAN), or the name given with [`TlsConfigBuilder::server_name`].
//!
//! The client offers the ALPN protocol `idgen/1`. TLS 1.3 and 1.2 are accepted, with rustls'
//! default cipher suites on the *ring* provider.
//!
//! A failed handshake is an [`Error::Tls`] whose [`TlsError::kind`] names the cause (unknown
//! issuer, wrong name, expired, a client certificate the node requires or rejects, ...). A
//! [`Pool`](crate::Pool) treats it as a fault of that node: it moves on to the next node and
//! backs off, as for any connect failure.
//!
//! With TLS 1.3 a node that rejects the client's certificate (or its absence) says so only
//! after the client has finished its side of the handshake; the client then learns it from
//! the node's answer to its HELLO, still within [`connect`](crate::Client::connect_tls) and
//! with the same error kinds.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError};
use tokio_rustls::TlsConnector;

use crate::error::{TlsError, TlsErrorKind};
use crate::Error;

/// The ALPN protocol name of idgen's binary protocol over TLS.
pub const ALPN: &[u8] = b"idgen/1";

fn config_error(message: impl Into<String>) -> Error {
    Error::Tls(TlsError::new(TlsErrorKind::Config, message))
}

/// The TLS settings of a client: whom to trust, who the client is, which name to verify.
///
/// Made with [`TlsConfig::builder`]; cheap to clone (the rustls configuration is shared).
#[derive(Clone)]
pub struct TlsConfig {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
    client_cert: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .field("client_cert", &self.client_cert)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Start a configuration; a CA bundle ([`ca_file`](TlsConfigBuilder::ca_file) or
    /// [`ca_pem`](TlsConfigBuilder::ca_pem)) is required.
    pub fn builder() -> TlsConfigBuilder {
        TlsConfigBuilder::default()
    }

    /// The name a node dialed at `addr` (`host:port`, `[v6]:port`) must carry in its
    /// certificate: the configured [`server_name`](TlsConfigBuilder::server_name), else the
    /// host part of `addr` (an IP address for an IP literal).
    pub(crate) fn server_name_for(&self, addr: &str) -> Result<ServerName<'static>, Error> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        let host = host_of(addr);
        if host.is_empty() {
            return Err(config_error(format!(
                "no host in the address {addr:?} to verify the server's certificate against \
                 (expected host:port)"
            )));
        }
        ServerName::try_from(host.to_owned()).map_err(|_| {
            config_error(format!(
                "the host {host:?} of the address {addr:?} is neither a DNS name nor an IP \
                 address; set a server name to verify"
            ))
        })
    }

    /// Whether a client certificate is configured (mutual TLS).
    pub fn has_client_cert(&self) -> bool {
        self.client_cert
    }

    pub(crate) fn connector(&self) -> &TlsConnector {
        &self.connector
    }
}

/// The host part of `host:port`, `[v6]:port` or a bare host.
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match addr.rsplit_once(':') {
        Some((host, _)) => host,
        None => addr,
    }
}

/// Where a PEM document comes from.
#[derive(Clone)]
enum Pem {
    File(PathBuf),
    Text(Vec<u8>),
}

impl Pem {
    fn describe(&self, what: &str) -> String {
        match self {
            Pem::File(p) => format!("{what} {}", p.display()),
            Pem::Text(_) => format!("{what} (PEM text)"),
        }
    }

    fn certificates(&self, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
        let certs: Result<Vec<_>, _> = match self {
            Pem::File(p) => {
                CertificateDer::pem_file_iter(p).and_then(|iter| iter.collect::<Result<_, _>>())
            }
            Pem::Text(t) => CertificateDer::pem_slice_iter(t).collect(),
        };
        let certs =
            certs.map_err(|e| config_error(format!("reading the {}: {e}", self.describe(what))))?;
        if certs.is_empty() {
            return Err(config_error(format!(
                "the {} holds no certificate",
                self.describe(what)
            )));
        }
        Ok(certs)
    }

    fn key(&self) -> Result<PrivateKeyDer<'static>, Error> {
        let key = match self {
            Pem::File(p) => PrivateKeyDer::from_pem_file(p),
            Pem::Text(t) => PrivateKeyDer::from_pem_slice(t),
        };
        // The error names the file, never the key's content.
        key.map_err(|e| config_error(format!("reading the {}: {e}", self.describe("client key"))))
    }
}

/// Builds a [`TlsConfig`]; see [`TlsConfig::builder`]. Files are read by
/// [`build`](TlsConfigBuilder::build), which reports every problem as an [`Error::Tls`] of
/// kind [`TlsErrorKind::Config`].
#[derive(Clone, Default)]
pub struct TlsConfigBuilder {
    ca: Vec<Pem>,
    system_roots: bool,
    client: Option<(Pem, Pem)>,
    server_name: Option<String>,
}

impl fmt::Debug for TlsConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfigBuilder")
            .field("ca_bundles", &self.ca.len())
            .field("client_cert", &self.client.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsConfigBuilder {
    /// Trust the certificates of this PEM file (a CA bundle: one or more certificates).
    /// May be given several times; every certificate is trusted.
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.ca.push(Pem::File(path.as_ref().to_owned()));
        self
    }

    /// Trust the platform's roots (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else the system's
    /// bundle), as `idgens://` without `ca` does: for nodes whose certificates a public or
    /// company-wide authority the machine trusts signed.
    pub fn system_roots(mut self) -> Self {
        self.system_roots = true;
        self
    }

    /// Trust the certificates of this PEM text, as [`ca_file`](TlsConfigBuilder::ca_file).
    pub fn ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.ca.push(Pem::Text(pem.as_ref().to_vec()));
        self
    }

    /// Present this client certificate (PEM: the certificate, then any intermediates) and
    /// its private key (PEM: PKCS#8, PKCS#1 or SEC1) to nodes that ask for one (mutual TLS).
    pub fn client_cert_files(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Self {
        self.client = Some((
            Pem::File(cert.as_ref().to_owned()),
            Pem::File(key.as_ref().to_owned()),
        ));
        self
    }

    /// As [`client_cert_files`](TlsConfigBuilder::client_cert_files), from PEM text.
    pub fn client_cert_pem(mut self, cert: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Self {
        self.client = Some((
            Pem::Text(cert.as_ref().to_vec()),
            Pem::Text(key.as_ref().to_vec()),
        ));
        self
    }

    /// Verify this name (a DNS name or an IP address) in every node's certificate instead
    /// of the host part of the address dialed: for nodes dialed by an address their
    /// certificates do not carry (e.g. one certificate `idgen.internal` for the whole
    /// cluster).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Read the files and make the configuration.
    pub fn build(self) -> Result<TlsConfig, Error> {
        if self.ca.is_empty() && !self.system_roots {
            return Err(config_error(
                "no CA bundle: give the certificates that the nodes' certificates chain to",
            ));
        }
        let mut roots = rustls::RootCertStore::empty();
        if self.system_roots {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                return Err(config_error(format!(
                    "no trusted roots found on this machine ({} errors): give a CA bundle",
                    found.errors.len()
                )));
            }
            // Roots the platform lists that rustls cannot use are skipped, as browsers do.
            let _ = roots.add_parsable_certificates(found.certs);
        }
        for pem in &self.ca {
            for cert in pem.certificates("CA bundle")? {
                roots
                    .add(cert)
                    .map_err(|e| config_error(format!("{}: {e}", pem.describe("CA bundle"))))?;
            }
        }
        let server_name = match self.server_name {
            Some(name) => Some(ServerName::try_from(name.clone()).map_err(|_| {
                config_error(format!(
                    "the server name {name:?} is neither a DNS name nor an IP address"
                ))
            })?),
            None => None,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error(format!("TLS protocol versions: {e}")))?
            .with_root_certificates(roots);
        let client_cert = self.client.is_some();
        let mut config = match self.client {
            Some((cert, key)) => {
                let chain = cert.certificates("client certificate")?;
                let key = key.key()?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    config_error(format!(
                        "the {} and its key: {e}",
                        cert.describe("client certificate")
                    ))
                })?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(TlsConfig {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            client_cert,
        })
    }
}

/// The [`Error`] for an I/O error that carries a rustls error (a TLS failure), `None` for
/// any other.
pub(crate) fn classify(e: &std::io::Error) -> Option<TlsError> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(describe(tls))
}

fn describe(e: &rustls::Error) -> TlsError {
    use TlsErrorKind as K;
    let (kind, message) = match e {
        rustls::Error::InvalidCertificate(c) => {
            let kind = match c {
                CertificateError::UnknownIssuer => K::UnknownIssuer,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => K::NameMismatch,
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => K::Expired,
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    K::NotYetValid
                }
                _ => K::BadCertificate,
            };
            let what = match kind {
                K::UnknownIssuer => {
                    "the server's certificate is not signed by a trusted authority (check the CA bundle)"
                }
                K::NameMismatch => "the server's certificate is not valid for the server name",
                K::Expired => "the server's certificate has expired",
                K::NotYetValid => "the server's certificate is not valid yet",
                _ => "the server's certificate was rejected",
            };
            (kind, format!("{what}: {e}"))
        }
        rustls::Error::AlertReceived(alert) => match alert {
            AlertDescription::CertificateRequired => (
                K::ClientCertificateRequired,
                format!(
                    "the server requires a client certificate and none was sent (alert {alert:?})"
                ),
            ),
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied => (
                K::ClientCertificateRejected,
                format!("the server rejected the client certificate (alert {alert:?})"),
            ),
            AlertDescription::NoApplicationProtocol => (
                K::Handshake,
                "the server does not speak the ALPN protocol idgen/1 (alert NoApplicationProtocol)"
                    .to_owned(),
            ),
            _ => (
                K::Handshake,
                format!("the server ended the handshake with alert {alert:?}"),
            ),
        },
        rustls::Error::InvalidMessage(_) => (
            K::Handshake,
            format!("the server did not answer with TLS (is it a plaintext port?): {e}"),
        ),
        rustls::Error::InconsistentKeys(_) => (
            K::Config,
            format!("the client key does not match its certificate: {e}"),
        ),
        other => (K::Handshake, format!("TLS handshake failed: {other}")),
    };
    TlsError::new(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_parts() {
        assert_eq!(host_of("id-1.internal:7420"), "id-1.internal");
        assert_eq!(host_of("10.0.0.1:7420"), "10.0.0.1");
        assert_eq!(host_of("[::1]:7420"), "::1");
        assert_eq!(host_of("::1:7420"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
        assert_eq!(host_of(":7420"), "");
    }

    #[test]
    fn certificate_errors_name_their_cause() {
        let cases = [
            (CertificateError::UnknownIssuer, TlsErrorKind::UnknownIssuer),
            (
                CertificateError::NotValidForName,
                TlsErrorKind::NameMismatch,
            ),
            (CertificateError::Expired, TlsErrorKind::Expired),
            (CertificateError::NotValidYet, TlsErrorKind::NotYetValid),
            (CertificateError::BadSignature, TlsErrorKind::BadCertificate),
        ];
        for (error, kind) in cases {
            let e = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(error),
            );
            let got = classify(&e).expect("a TLS error");
            assert_eq!(got.kind(), kind);
            assert!(kind.is_server_certificate());
            assert!(
                got.message().starts_with("the server's certificate"),
                "{got}"
            );
        }
        let alert = |a| {
            classify(&std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::AlertReceived(a),
            ))
            .unwrap()
            .kind()
        };
        assert_eq!(
            alert(AlertDescription::CertificateRequired),
            TlsErrorKind::ClientCertificateRequired
        );
        assert_eq!(
            alert(AlertDescription::UnknownCA),
            TlsErrorKind::ClientCertificateRejected
        );
        assert_eq!(
            alert(AlertDescription::DecodeError),
            TlsErrorKind::Handshake
        );
        assert!(classify(&std::io::Error::other("plain")).is_none());
    }

    #[test]
    fn configuration_errors_are_clear() {
        let kind = |r: Result<TlsConfig, Error>| match r {
            Err(Error::Tls(e)) => (e.kind(), e.message().to_owned()),
            other => panic!("expected a TLS configuration error, got {other:?}"),
        };
        let (k, m) = kind(TlsConfig::builder().build());
        assert_eq!(k, TlsErrorKind::Config);
        assert!(m.contains("no CA bundle"), "{m}");
        let (_, m) = kind(TlsConfig::builder().ca_file("/nonexistent/ca.crt").build());
        assert!(m.contains("/nonexistent/ca.crt"), "{m}");
        let (_, m) = kind(TlsConfig::builder().ca_pem("not pem").build());
        assert!(m.contains("holds no certificate"), "{m}");
    }
}
