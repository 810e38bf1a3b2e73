//! `idgen health [--ready]`: a running node's health from its admin port, as an exit status, for
//! container health checks and scripts that have no HTTP client (the image needs no `curl`).
//!
//! Exit status 0: `GET /health/live` (or `/health/ready` with `--ready`) answered 200. Status 1:
//! any other answer (the body, with readiness's reasons, goes to stderr), or no answer within
//! the timeout. With `--tls-ca`, over HTTPS (the node's certificate verified).

use std::time::Duration;

use http_body_util::{BodyExt, Full};
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
    let (status, body) = rt
        .block_on(async {
            tokio::time::timeout(timeout, call(addr, "GET", path, None, connector))
                .await
                .map_err(|_| format!("{addr}: no answer within {timeout:?}"))?
        })
        .map_err(Failure::Runtime)?;
    Ok(if status == StatusCode::OK.as_u16() {
        Health::Ok
    } else {
        Health::Not(status, body)
    })
}

/// One HTTP/1.1 request to `addr` (over TLS with `tls`): the answer's status and body. For the
/// commands that ask a node's HTTP listeners (`health`, `seq next`).
pub(crate) async fn call(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<String>,
    tls: Option<Connector>,
) -> Result<(u16, String), String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    match tls {
        None => request(stream, addr, method, path, body).await,
        Some(c) => {
            let stream = tokio_rustls::TlsConnector::from(c.config)
                .connect(c.name, stream)
                .await
                .map_err(|e| format!("{addr}: TLS: {e}"))?;
            request(stream, addr, method, path, body).await
        }
    }
}

async fn request<IO>(
    stream: IO,
    addr: &str,
    method: &str,
    path: &str,
    body: Option<String>,
) -> Result<(u16, String), String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let conn = tokio::spawn(conn);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
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
    Ok((status.as_u16(), String::from_utf8_lossy(&body).into_owned()))
}
