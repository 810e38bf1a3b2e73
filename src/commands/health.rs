//! `idgen health [--ready]`: a running node's health from its admin port, as an exit status, for
//! container health checks and scripts that have no HTTP client (the image needs no `curl`).
//!
//! Exit status 0: `GET /health/live` (or `/health/ready` with `--ready`) answered 200. Status 1:
//! any other answer (the body, with readiness's reasons, goes to stderr), or no answer within
//! the timeout. With `--tls-ca`, over HTTPS (the node's certificate verified).

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

use super::exit::Failure;
use super::tls::{ClientTls, Connector};

/// What the check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Health {
    /// 200: live (or ready).
    Ok,
    /// Another status, with the answer's body.
    Not(u16, String),
}

/// Asks the admin server at `addr` for `/health/live`, or `/health/ready` if `ready`, within
/// `timeout` in all, over TLS if `tls` says so. `Err`: TLS files that cannot be read
/// ([`Failure::Usage`]), or no answer ([`Failure::Runtime`]: refused, timed out, not HTTP, a
/// certificate that does not verify).
pub fn check(
    addr: &str,
    ready: bool,
    timeout: Duration,
    tls: &ClientTls,
) -> Result<Health, Failure> {
    let connector = tls.connector(addr, b"http/1.1").map_err(Failure::Usage)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Runtime(e.to_string()))?;
    let path = if ready {
        "/health/ready"
    } else {
        "/health/live"
    };
    rt.block_on(async {
        tokio::time::timeout(timeout, get(addr, path, connector))
            .await
            .map_err(|_| format!("{addr}: no answer within {timeout:?}"))?
    })
    .map_err(Failure::Runtime)
}

async fn get(addr: &str, path: &str, tls: Option<Connector>) -> Result<Health, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    match tls {
        None => request(stream, addr, path).await,
        Some(c) => {
            let stream = tokio_rustls::TlsConnector::from(c.config)
                .connect(c.name, stream)
                .await
                .map_err(|e| format!("{addr}: TLS: {e}"))?;
            request(stream, addr, path).await
        }
    }
}

async fn request<IO>(stream: IO, addr: &str, path: &str) -> Result<Health, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let conn = tokio::spawn(conn);
    let request = Request::get(path)
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{addr}{path}: {e}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{addr}{path}: {e}"))?
        .to_bytes();
    conn.abort();
    if status == StatusCode::OK {
        Ok(Health::Ok)
    } else {
        Ok(Health::Not(
            status.as_u16(),
            String::from_utf8_lossy(&body).into_owned(),
        ))
    }
}
