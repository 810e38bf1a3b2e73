//! TLS for the operator commands (`idgen get`, `idgen decode --addr`, `idgen health`): the
//! node's certificate verified against the given authorities and for the name dialed (never
//! optional), and a client certificate for nodes that require one.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// How an operator command reaches a node over TLS. No environment variables: a container's
/// health check runs with the node's own TLS settings (`IDGEN_TLS_CERT` and the rest) in its
/// environment.
#[derive(Args, Debug, Clone, Default)]
pub struct ClientTls {
    /// Connect over TLS, verifying the node's certificate against these authorities (PEM).
    #[arg(long = "tls-ca")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for a node that requires one (mutual TLS).
    #[arg(long = "tls-cert", requires = "tls_ca", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long = "tls-key", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name the node's certificate must carry [default: the host of the address dialed].
    #[arg(long = "tls-server-name", requires = "tls_ca")]
    pub tls_server_name: Option<String>,
}

/// A client configuration and the name to verify, for one address.
pub struct Connector {
    pub config: Arc<ClientConfig>,
    pub name: ServerName<'static>,
}

impl ClientTls {
    /// `None` without `--tls-ca`: plaintext. `alpn`: the protocol to offer.
    pub fn connector(&self, addr: &str, alpn: &[u8]) -> Result<Option<Connector>, String> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let mut roots = RootCertStore::empty();
        let certs =
            CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
        for der in certs {
            let der = der.map_err(|e| format!("{}: {e}", ca.display()))?;
            roots
                .add(der)
                .map_err(|e| format!("{}: not a usable authority: {e}", ca.display()))?;
        }
        if roots.is_empty() {
            return Err(format!("{}: no certificate in the file", ca.display()));
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots);
        let mut config = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("{}: {e}", cert.display()))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("{}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
            _ => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        let host = match &self.tls_server_name {
            Some(name) => name.clone(),
            None => host_of(addr).to_string(),
        };
        let name = ServerName::try_from(host.clone())
            .map_err(|e| format!("{host:?} is not a server name: {e}"))?;
        Ok(Some(Connector {
            config: Arc::new(config),
            name,
        }))
    }
}

/// The host part of `host:port` (an IPv6 address without its brackets).
fn host_of(addr: &str) -> &str {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => addr,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_of_an_address() {
        assert_eq!(host_of("localhost:7430"), "localhost");
        assert_eq!(host_of("10.0.0.1:7430"), "10.0.0.1");
        assert_eq!(host_of("[::1]:7430"), "::1");
        assert_eq!(host_of("idgen.example"), "idgen.example");
    }
}
