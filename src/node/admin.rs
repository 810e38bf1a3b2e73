//! The admin HTTP server, on the control thread (never on a shard): Prometheus metrics, health
//! endpoints for load balancers, layout and decoding. It issues no IDs: the HTTP ID API
//! (`POST /ids`, `POST /ids/batch`) is served by the shards on its own address
//! (`--http-listen`, see `node/http.rs`).
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /health/live` | 200 while the process answers |
//! | `GET /health/ready` | 200 when the node should get traffic, else 503 with the reasons (JSON) |
//! | `GET /layout` | the cluster layout, this node's worker range, the timestamp range left |
//! | `GET /ids/{id}` | the ID decoded (decimal, or base62/base32 forms accepted) |
//!
//! IDs above 2^53 lose precision in JavaScript's numbers, so a decoded ID carries its value
//! as a string too (`id_str`).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::metrics::Exposition;
use super::state::NodeState;
use super::tls::{ServerTls, TlsFront};
use crate::clock::{Clock, SystemClock};
use crate::layout::{Id, Layout};

/// What the admin server answers from, shared by its connections.
struct Admin {
    node: Arc<NodeState>,
    metrics: Exposition,
}

/// Builds the router.
fn router(node: Arc<NodeState>) -> Router {
    let state = Arc::new(Admin {
        metrics: Exposition::new(Arc::clone(&node)),
        node,
    });
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/ids/{id}", get(decode_id))
        .route("/layout", get(layout))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(state)
}

/// Most admin connections open at once; more are closed as they arrive (the admin port is for
/// probes, scrapers and operators, not for traffic).
pub const MAX_ADMIN_CONNECTIONS: usize = 1024;

/// Largest request body read on the admin port (its endpoints take none).
const MAX_BODY: usize = 4096;

/// Serves the admin API on `listener` (over TLS when `tls` is given) until `shutdown`
/// resolves. A connection that is idle, or sends a request's head or body, for longer than
/// `request_timeout` is closed (a TLS handshake has as long).
pub async fn serve(
    listener: tokio::net::TcpListener,
    node: Arc<NodeState>,
    tls: Option<Arc<ServerTls>>,
    request_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router(node);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(event = "accept_failed", error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        while conns.try_join_next().is_some() {}
        if conns.len() >= MAX_ADMIN_CONNECTIONS {
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (router, tls, stopped) = (router.clone(), tls.clone(), stopped.clone());
        conns.spawn(async move {
            match tls {
                None => serve_conn(stream, router, request_timeout, stopped).await,
                Some(tls) => {
                    let accepted = tls
                        .accept(TlsFront::Admin, stream, Some(peer), request_timeout)
                        .await;
                    if let Some((stream, _client)) = accepted {
                        serve_conn(stream, router, request_timeout, stopped).await;
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(request_timeout, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        conns.abort_all();
    }
    Ok(())
}

/// Serves one admin connection (HTTP/1.1, keep-alive) until it closes, idles past the request
/// timeout, or the server stops (the request in flight is answered first).
async fn serve_conn<S>(
    stream: S,
    router: Router,
    request_timeout: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let router = router.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(router, req, request_timeout).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(request_timeout);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = async {
            while !*stopped.borrow_and_update() {
                if stopped.changed().await.is_err() {
                    break;
                }
            }
        } => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(request_timeout, conn.as_mut()).await;
        }
    }
}

/// Reads a request's body (within the timeout, up to [`MAX_BODY`]) and routes it.
async fn handle(
    router: Router,
    req: axum::http::Request<hyper::body::Incoming>,
    timeout: Duration,
) -> Response {
    use http_body_util::{BodyExt, Limited};
    use tower::ServiceExt;
    let (parts, body) = req.into_parts();
    let body = match tokio::time::timeout(timeout, Limited::new(body, MAX_BODY).collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return closing(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the admin endpoints take no body (at most {MAX_BODY} bytes read)"),
            ))
        }
        Ok(Err(e)) => {
            return closing(error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {e}"),
            ))
        }
        // Fewer body bytes than the Content-Length promised.
        Err(_) => {
            return closing(error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {timeout:?}"),
            ))
        }
    };
    let req = axum::http::Request::from_parts(parts, axum::body::Body::from(body));
    match router.oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The response, and the connection closed after it (what is left of an unread body would
/// otherwise be read as the next request).
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    (
        status,
        Json(json!({"error": message, "status": status.as_u16()})),
    )
        .into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint: see /metrics, /health/live, /health/ready, GET /ids/{id}, /layout (POST /ids and POST /ids/batch are on the HTTP ID API's address)",
    )
}

/// A known path with another method than GET or HEAD (axum adds the `Allow` header).
async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed here; use GET or HEAD",
    )
}

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    let body = match admin.metrics.render() {
        Ok(body) => body,
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding metrics: {e}"),
            )
        }
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn live() -> Response {
    Json(json!({"live": true})).into_response()
}

async fn ready(State(admin): State<Arc<Admin>>) -> Response {
    let state = &admin.node;
    let reasons = state.not_ready_reasons();
    let now = SystemClock::new().wall_ms();
    let body = json!({
        "ready": reasons.is_empty(),
        "reasons": reasons,
        "lease_time_left_ms": state.lease.time_left_ms(now),
        "generation": state.lease.current().map(|v| v.grant.generation),
    });
    let status = if reasons.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Parses an ID written in decimal, base62 (11 characters) or Crockford base32 (13), the
/// forms of the ID model (`clients/vectors/FORMS.md`).
pub fn parse_id(text: &str) -> Result<u64, String> {
    use crate::layout::forms;
    let t = text.trim();
    let parsed = if !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit()) {
        forms::parse_decimal(t)
    } else if t.len() == forms::BASE62_LEN {
        forms::parse_base62(t)
    } else if t.len() == forms::BASE32_LEN {
        forms::parse_base32(t)
    } else {
        return Err(format!(
            "{t:?}: not a decimal, base62 (11 characters) or base32 (13 characters) ID"
        ));
    };
    parsed.map_err(|e| format!("{t:?}: {e}"))
}

/// The fields of an ID as JSON.
pub fn decoded_json(layout: &Layout, id: u64) -> Value {
    let p = layout.decompose(Id(id));
    let rfc3339 =
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(p.unix_ms))
            .to_string();
    json!({
        "id": id,
        "id_str": id.to_string(),
        "timestamp_ms": p.timestamp,
        "unix_ms": p.unix_ms,
        "time": rfc3339,
        "region": p.region,
        "worker": p.worker,
        "node": p.node,
        "sequence": p.sequence,
    })
}

async fn decode_id(
    State(admin): State<Arc<Admin>>,
    text: Result<Path<String>, PathRejection>,
) -> Response {
    let state = &admin.node;
    // A segment that is not UTF-8 once percent-decoded is a bad ID like any other.
    let Ok(Path(text)) = text else {
        return error(
            StatusCode::BAD_REQUEST,
            "the ID is not UTF-8 text: not a decimal, base62 (11 characters) or base32 (13 characters) ID",
        );
    };
    match parse_id(&text) {
        Ok(id) => Json(decoded_json(&state.config.layout, id)).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn layout(State(admin): State<Arc<Admin>>) -> Response {
    let state = &admin.node;
    let l = state.config.layout;
    let now = SystemClock::new().wall_ms();
    let left = l.time_left(now);
    let range = state
        .lease
        .current()
        .map(|v| json!({"first": v.grant.first, "count": v.grant.count, "generation": v.grant.generation}));
    Json(json!({
        "epoch_ms": l.epoch_ms(),
        "epoch": humantime::format_rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(l.epoch_ms())).to_string(),
        "timestamp_bits": l.timestamp_bits(),
        "worker_bits": l.worker_bits(),
        "sequence_bits": l.sequence_bits(),
        "region_bits": l.region_bits(),
        "region": state.config.lease.region.region(),
        "ends_at": humantime::format_rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(l.end_unix_ms())).to_string(),
        "years_left": left.as_secs_f64() / (365.25 * 86_400.0),
        "namespace": state.config.lease.namespace,
        "workers": range,
        "shards": state.config.listen.shards,
        "workers_per_shard": state.config.listen.workers_per_shard,
    }))
    .into_response()
}
