//! The node's one HTTP stack, under both of its HTTP listeners: the HTTP ID API, served by the
//! shards (`node/http.rs`), and the admin server on the control thread (`node/admin.rs`). Each
//! is hyper's HTTP/1.1 server with nothing between it and the listener's handler, which routes
//! with a `match` on the method and the path and answers with the builders here: so every
//! connection is served, timed out and drained the same way, and every error on either address
//! is the same JSON, `{"error": "...", "status": N}` (`Error` in `docs/openapi.yaml`).
//!
//! No web framework: the HTTP ID API's handlers hold their shard's `!Send` state (its issuer,
//! in an `Rc<RefCell<_>>`), which a router that wants `Send` handlers cannot take, and a
//! router's per-request boxing and cloning would be paid on the hot path; the admin server's
//! five routes need no more than a `match` either.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// A whole answer: every body is built before its head is written.
pub(crate) type Reply = Response<Full<Bytes>>;

/// Serves one HTTP/1.1 connection, plaintext or TLS (keep-alive, pipelining), answering each
/// request with `handle`'s reply, until the client closes it, it is idle or sends a request's
/// head for longer than `request_timeout`, or `shutdown` turns true: then the request in flight
/// is answered, for at most `drain_timeout`, and the connection closes.
pub(crate) async fn serve<S, H, F>(
    stream: S,
    handle: H,
    request_timeout: Duration,
    drain_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    H: Fn(Request<Incoming>) -> F,
    F: Future<Output = Reply>,
{
    let service = hyper::service::service_fn(move |req| {
        let reply = handle(req);
        async move { Ok::<_, Infallible>(reply.await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(request_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let draining = async {
        while !*shutdown.borrow_and_update() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = conn.as_mut() => {}
        () = draining => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(drain_timeout, conn.as_mut()).await;
        }
    }
}

/// A request's body, at most `limit` bytes, read within `timeout`. Otherwise the answer to
/// give: 413 saying `too_large`, 400, or 408 (a body shorter than its `Content-Length`), which
/// closes the connection.
pub(crate) async fn read_body(
    body: Incoming,
    limit: usize,
    timeout: Duration,
    too_large: impl FnOnce() -> String,
) -> Result<Bytes, Reply> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(error(StatusCode::PAYLOAD_TOO_LARGE, too_large()))
        }
        Ok(Err(e)) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("cannot read the body: {e}"),
        )),
        Err(_) => Err(closing(error(
            StatusCode::REQUEST_TIMEOUT,
            format!("the body did not arrive within {timeout:?}"),
        ))),
    }
}

/// An answer with this status, content type and body.
pub(crate) fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Reply {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON answer with this status.
pub(crate) fn json(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    reply(status, "application/json", body)
}

/// The error body every endpoint of both listeners answers with.
pub(crate) fn error_body(status: StatusCode, message: &str) -> Vec<u8> {
    serde_json::json!({"error": message, "status": status.as_u16()})
        .to_string()
        .into_bytes()
}

/// An error answer: [`error_body`] with its status.
pub(crate) fn error(status: StatusCode, message: impl AsRef<str>) -> Reply {
    json(status, error_body(status, message.as_ref()))
}

/// 405 on a known path: `allow` is the `Allow` header, `methods` the methods as the message
/// names them.
pub(crate) fn not_allowed(allow: &'static str, methods: &str) -> Reply {
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method not allowed here; use {methods}"),
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

/// The answer, and the connection closed after it (what is left of an unread body would
/// otherwise be read as the next request).
pub(crate) fn closing(mut response: Reply) -> Reply {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_is_the_documented_json() {
        let body = error_body(StatusCode::NOT_FOUND, "no \"such\" endpoint");
        assert_eq!(
            body,
            br#"{"error":"no \"such\" endpoint","status":404}"#.to_vec()
        );
        let reply = not_allowed("GET,HEAD", "GET or HEAD");
        assert_eq!(reply.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(reply.headers()[ALLOW], "GET,HEAD");
        assert_eq!(reply.headers()[CONTENT_TYPE], "application/json");
    }
}
