//! TLS to the server (`--tls-ca`, `--tls-cert`, `--tls-key`, `--tls-server-name`): rustls on
//! the ring provider, the server's certificate and name always verified, ALPN `idgen/1`
//! offered for the idgen target.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The ALPN protocol of idgen's binary protocol over TLS.
pub const ALPN: &[u8] = b"idgen/1";

/// The run's TLS settings.
pub struct Tls {
    pub connector: TlsConnector,
    /// `--tls-server-name`, verified for every address instead of its host.
    pub server_name: Option<ServerName<'static>>,
    /// Whether a client certificate is presented (mutual TLS).
    pub client_cert: bool,
}

impl Tls {
    /// The configuration from the command line's files. Errors name the file, never a key's
    /// content.
    pub fn new(
        ca: &Path,
        client: Option<(&Path, &Path)>,
        server_name: Option<&str>,
        alpn: bool,
    ) -> Result<Tls, String> {
        let mut roots = rustls::RootCertStore::empty();
        let certs = read_certs(ca, "--tls-ca")?;
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS protocol versions: {e}"))?
            .with_root_certificates(roots);
        let mut config = match client {
            Some((cert, key)) => {
                let chain = read_certs(cert, "--tls-cert")?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("--tls-cert {} with its --tls-key: {e}", cert.display()))?
            }
            None => builder.with_no_client_auth(),
        };
        if alpn {
            config.alpn_protocols = vec![ALPN.to_vec()];
        }
        let server_name = server_name
            .map(|n| {
                ServerName::try_from(n.to_owned()).map_err(|_| {
                    format!("--tls-server-name {n:?}: neither a DNS name nor an IP address")
                })
            })
            .transpose()?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            client_cert: client.is_some(),
        })
    }

    /// The name to verify for `addr` as given on the command line (`host:port`).
    pub fn name_for(&self, addr: &str) -> Result<ServerName<'static>, String> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        let host = match addr.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(""),
            None => addr.rsplit_once(':').map_or(addr, |(h, _)| h),
        };
        ServerName::try_from(host.to_owned()).map_err(|_| {
            format!(
                "--addr {addr}: the host {host:?} is neither a DNS name nor an IP address to \
                 verify the certificate against; give --tls-server-name"
            )
        })
    }
}

fn read_certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<_, _>>())
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no certificate in the file",
            path.display()
        ));
    }
    Ok(certs)
}

/// A connection's byte stream: plain TCP or TLS over TCP.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
