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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};

use super::metrics::Scrape;
use super::telemetry::ShardStats;
use super::tls::{ServerTls, TlsListener};
use crate::config::ServeConfig;
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::drift::ClockWatch;
use idgen_core::lease::keeper::LeaseShared;
use idgen_id::{Id, Layout};

/// What the admin server reads.
pub struct AdminState {
    /// The node's configuration, shared (the admin server reports on every section).
    pub config: Arc<ServeConfig>,
    pub lease: Arc<LeaseShared>,
    pub shards: Vec<Arc<ShardStats>>,
    pub draining: Arc<AtomicBool>,
    pub clock_watch: Arc<ClockWatch>,
    /// The node's TLS, for its counters.
    pub tls: Option<Arc<ServerTls>>,
    registry: Registry,
}

impl AdminState {
    pub fn new(
        config: Arc<ServeConfig>,
        lease: Arc<LeaseShared>,
        shards: Vec<Arc<ShardStats>>,
        draining: Arc<AtomicBool>,
        clock_watch: Arc<ClockWatch>,
        tls: Option<Arc<ServerTls>>,
    ) -> Arc<AdminState> {
        Arc::new_cyclic(|weak: &std::sync::Weak<AdminState>| {
            let mut registry = Registry::default();
            registry.register_collector(Box::new(Metrics(weak.clone())));
            AdminState {
                config,
                lease,
                shards,
                draining,
                clock_watch,
                tls,
                registry,
            }
        })
    }

    /// Why the node is not ready, if it is not. Ready means: it holds a lease with more than
    /// half a TTL left (renewals are every third of one, so two have failed when this turns),
    /// no shard's clock is behind, it is not draining, and its clock agrees with its peers.
    pub fn not_ready_reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        let now = SystemClock::new().wall_ms();
        if self.draining.load(Ordering::Relaxed) {
            reasons.push("draining".to_string());
        }
        match self.lease.current() {
            None => reasons.push("no lease".to_string()),
            Some(_) => {
                let left = self.lease.time_left_ms(now);
                let want = idgen_core::lease::duration_ms(self.config.lease.lease_ttl) / 2;
                if left <= want {
                    reasons.push(format!(
                        "lease time left {left} ms is below {want} ms (renewals failing)"
                    ));
                }
            }
        }
        // Behind as a shard saw it on its last request, or as the clock reads now against the
        // last timestamp each shard used (so an idle node is taken out too).
        let now_id = now.saturating_sub(self.config.layout.epoch_ms());
        let wait = idgen_core::lease::duration_ms(self.config.clock.max_rollback_wait);
        let behind: Vec<usize> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.generator.clock_behind.load(Ordering::Relaxed)
                    || s.generator.last_timestamp.load(Ordering::Relaxed) > now_id + wait
            })
            .map(|(i, _)| i)
            .collect();
        if !behind.is_empty() {
            reasons.push(format!(
                "clock behind the last timestamp used (rolled back) on shard(s) {behind:?}"
            ));
        }
        if let Some(drift) = self.clock_watch.excessive_drift() {
            reasons.push(drift);
        }
        reasons
    }
}

/// Builds the router.
pub fn router(state: Arc<AdminState>) -> Router {
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
    state: Arc<AdminState>,
    tls: Option<Arc<ServerTls>>,
    request_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router(state);
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
                        .accept(TlsListener::Admin, stream, Some(peer), request_timeout)
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

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut body, &state.registry)
    {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}"),
        );
    }
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

async fn ready(State(state): State<Arc<AdminState>>) -> Response {
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
    use idgen_id::forms;
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
    State(state): State<Arc<AdminState>>,
    text: Result<Path<String>, PathRejection>,
) -> Response {
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

async fn layout(State(state): State<Arc<AdminState>>) -> Response {
    let l = state.config.layout;
    let now = SystemClock::new().wall_ms();
    let left = l.time_left(now);
    let range = state
        .lease
        .current()
        .map(|v| json!({"first": v.grant.workers.first, "count": v.grant.workers.count, "generation": v.grant.generation}));
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

/// Reads every family of the metrics catalogue at scrape time.
#[derive(Debug)]
struct Metrics(std::sync::Weak<AdminState>);

impl Collector for Metrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(state) = self.0.upgrade() else {
            return Ok(());
        };
        let scrape = Scrape {
            state: &state,
            now_ms: SystemClock::new().wall_ms(),
            process: super::process::read(),
        };
        super::metrics::encode(&mut enc, &scrape)
    }
}
