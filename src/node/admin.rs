//! The admin HTTP server, on the control thread (never on a shard): Prometheus metrics, health
//! endpoints for load balancers, layout and decoding. It issues no IDs: the HTTP ID API
//! (`POST /ids`, `POST /ids/batch`) is served by the shards on its own address
//! (`--http-listen`, see `node/http.rs`). Both are served by the node's one HTTP stack
//! (`node/web.rs`).
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /health/live` | 200 while the process answers |
//! | `GET /health/ready` | 200 when the node should get traffic, else 503 with the reasons (JSON) |
//! | `GET /layout` | the cluster layout, this node's worker range, the timestamp range left |
//! | `GET /ids/{id}` | the ID decoded (decimal, or base62/base32 forms accepted); a version 7 UUID idgen issued is decoded too (the ID it was made from), and a masked ID's 12-character string form on a node with masking keys |
//!
//! Every endpoint answers `HEAD` as it does `GET`, without the body; another method on one of
//! these paths is 405 (`Allow: GET,HEAD`), any other path 404. IDs above 2^53 lose precision in
//! JavaScript's numbers, so a decoded ID carries its value as a string too (`id_str`).

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};

use super::metrics::Exposition;
use super::state::NodeState;
use super::tls::{ServerTls, TlsListener};
use super::web::{self, error, Reply};
use idgen_core::clock::{Clock, SystemClock};
use idgen_id::{Generations, Id, Layout, UuidParts};

/// What the admin server answers from, shared by its connections.
struct Admin {
    node: Arc<NodeState>,
    metrics: Exposition,
    request_timeout: Duration,
}

/// The admin endpoints, by path (each answers GET and HEAD).
enum Route<'a> {
    Metrics,
    Live,
    Ready,
    Layout,
    /// `/ids/{id}`: the ID is one path segment, not empty, still percent-encoded.
    Id(&'a str),
}

impl Route<'_> {
    fn of(path: &str) -> Option<Route<'_>> {
        Some(match path {
            "/metrics" => Route::Metrics,
            "/health/live" => Route::Live,
            "/health/ready" => Route::Ready,
            "/layout" => Route::Layout,
            _ => Route::Id(
                path.strip_prefix("/ids/")
                    .filter(|id| !id.is_empty() && !id.contains('/'))?,
            ),
        })
    }
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
    let admin = Arc::new(Admin {
        metrics: Exposition::new(Arc::clone(&node)),
        node,
        request_timeout,
    });
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
        let (admin, tls, stopped) = (Arc::clone(&admin), tls.clone(), stopped.clone());
        conns.spawn(async move {
            match tls {
                None => serve_conn(stream, admin, stopped).await,
                Some(tls) => {
                    let accepted = tls
                        .accept(TlsListener::Admin, stream, Some(peer), request_timeout)
                        .await;
                    if let Some((stream, _client)) = accepted {
                        serve_conn(stream, admin, stopped).await;
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

/// Serves one admin connection until it closes, idles past the request timeout, or the server
/// stops (the request in flight is answered first, within the request timeout).
async fn serve_conn<S>(stream: S, admin: Arc<Admin>, stopped: tokio::sync::watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let timeout = admin.request_timeout;
    let handle = move |req| {
        let admin = Arc::clone(&admin);
        async move { admin.answer(req).await }
    };
    web::serve(stream, handle, timeout, timeout, stopped).await;
}

impl Admin {
    /// Reads a request's body (within the timeout, up to [`MAX_BODY`]) and answers it.
    async fn answer(&self, req: Request<Incoming>) -> Reply {
        let (parts, body) = req.into_parts();
        let read = web::read_body(body, MAX_BODY, self.request_timeout, || {
            format!("the admin endpoints take no body (at most {MAX_BODY} bytes read)")
        })
        .await;
        if let Err(refused) = read {
            return web::closing(refused);
        }
        let Some(route) = Route::of(parts.uri.path()) else {
            return not_found();
        };
        if !matches!(parts.method, Method::GET | Method::HEAD) {
            return method_not_allowed();
        }
        let state = &self.node;
        match route {
            Route::Metrics => metrics(&self.metrics),
            Route::Live => live(),
            Route::Ready => ready(state),
            Route::Layout => layout(state),
            Route::Id(segment) => decode_id(state, segment),
        }
    }
}

fn not_found() -> Reply {
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint: see /metrics, /health/live, /health/ready, GET /ids/{id}, /layout (POST /ids and POST /ids/batch are on the HTTP ID API's address)",
    )
}

/// A known path with another method than GET or HEAD.
fn method_not_allowed() -> Reply {
    web::not_allowed("GET,HEAD", "GET or HEAD")
}

fn metrics(exposition: &Exposition) -> Reply {
    match exposition.render() {
        Ok(body) => web::reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            body,
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}"),
        ),
    }
}

fn live() -> Reply {
    web::json(StatusCode::OK, json!({"live": true}).to_string())
}

fn ready(state: &NodeState) -> Reply {
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
    web::json(status, body.to_string())
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

/// The fields of an ID as JSON, under the layout generation it belongs to (an ID the
/// generations' width does not hold is decoded as the first generation's bits would be: callers
/// check it first).
pub fn decoded_json(gens: &Generations, id: u64) -> Value {
    let (generation, p) = match gens.decompose(Id(id)) {
        Ok((g, p)) => (g.index, p),
        Err(_) => (0, gens.base().layout.decompose(Id(id))),
    };
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
        "layout_generation": generation,
    })
}

/// The layout generations as `GET /layout` lists them (`"layouts"`).
pub fn generations_json(gens: &Generations) -> Value {
    Value::Array(
        gens.all()
            .iter()
            .map(|g| {
                let l = g.layout;
                json!({
                    "layout_generation": g.index,
                    "first_id": g.first_id,
                    "first_id_str": g.first_id.to_string(),
                    "switch_unix_ms": g.switch_unix_ms,
                    "epoch_ms": l.epoch_ms(),
                    "timestamp_bits": l.timestamp_bits(),
                    "worker_bits": l.worker_bits(),
                    "sequence_bits": l.sequence_bits(),
                    "region_bits": l.region_bits(),
                })
            })
            .collect(),
    )
}

/// The layout generations a `GET /layout` body lists (its `"layouts"`), or that list alone:
/// generation 0 first, each successor checked to follow the one before (and its `first_id`,
/// where given, to be the one that follows).
pub fn generations_from_json(v: &Value) -> Result<Generations, String> {
    let list = v
        .get("layouts")
        .unwrap_or(v)
        .as_array()
        .ok_or("not a list of layouts (GET /layout's \"layouts\", or its whole body)")?;
    let field = |o: &Value, name: &str| -> Result<u64, String> {
        o.get(name)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("a layout without {name:?}"))
    };
    let mut gens: Option<Generations> = None;
    for (i, o) in list.iter().enumerate() {
        let bits = |name: &str| -> Result<u8, String> {
            u8::try_from(field(o, name)?).map_err(|_| format!("{name} is not a width"))
        };
        let layout = Layout::new(
            field(o, "epoch_ms")?,
            bits("timestamp_bits")?,
            bits("worker_bits")?,
            bits("sequence_bits")?,
            bits("region_bits")?,
        )
        .map_err(|e| format!("layout generation {i}: {e}"))?;
        if let Some(g) = o.get("layout_generation").and_then(Value::as_u64) {
            if g != i as u64 {
                return Err(format!("layout generation {g} listed as number {i}"));
            }
        }
        let next = match (gens.take(), o.get("switch_unix_ms").and_then(Value::as_u64)) {
            (None, _) => Generations::new(layout),
            (Some(before), Some(switch)) => before
                .with_successor(layout, switch)
                .map_err(|e| format!("layout generation {i}: {e}"))?,
            (Some(_), None) => return Err(format!("layout generation {i} has no switch_unix_ms")),
        };
        let first = next.newest().first_id;
        let listed = o
            .get("first_id_str")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<u64>().ok())
            .or_else(|| o.get("first_id").and_then(Value::as_u64));
        if listed.is_some_and(|f| f != first) {
            return Err(format!(
                "layout generation {i} lists first_id {listed:?}; its switch gives {first}"
            ));
        }
        gens = Some(next);
    }
    gens.ok_or_else(|| "an empty list of layouts".to_string())
}

/// Takes apart a UUID idgen issued under any of the layout generations: the one its ID belongs
/// to, checked as [`parse_uuid`] checks it.
pub fn parse_uuid_in(gens: &Generations, text: &str) -> Result<(uuid::Uuid, UuidParts), String> {
    let mut first_err = None;
    for g in gens.all().iter().rev() {
        match parse_uuid(&g.layout, text) {
            Ok((u, parts)) if gens.of_id(parts.id).is_ok_and(|of| of.index == g.index) => {
                return Ok((u, parts))
            }
            Ok((u, _)) => {
                first_err.get_or_insert_with(|| {
                    format!(
                        "{u}: its ID is not one layout generation {} issued",
                        g.index
                    )
                });
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or_else(|| format!("{text:?}: not a UUID of this cluster")))
}

/// Whether `text` is meant as a UUID rather than an ID: an ID's forms are at most 19
/// characters, a UUID's text forms at least 32 (simple hex; hyphenated, braced and URN longer).
pub fn looks_like_uuid(text: &str) -> bool {
    text.trim().len() >= 32
}

/// Takes apart a UUID idgen issued (`POST /uuids`, GET_UUIDS) with the cluster's layout: the
/// text parsed by the `uuid` crate (hyphenated, simple, braced or URN), then checked to be
/// version 7 of RFC 9562's variant with a time the layout covers.
pub fn parse_uuid(layout: &Layout, text: &str) -> Result<(uuid::Uuid, UuidParts), String> {
    let t = text.trim();
    let u = uuid::Uuid::try_parse(t).map_err(|e| format!("{t:?}: not a UUID: {e}"))?;
    let parts = layout
        .decode_uuid_v7(*u.as_bytes())
        .map_err(|e| format!("{u}: {e}"))?;
    Ok((u, parts))
}

/// The fields of a UUID idgen issued as JSON: the ID it was made from, decoded, and the UUID.
pub fn decoded_uuid_json(gens: &Generations, u: &uuid::Uuid, parts: &UuidParts) -> Value {
    let mut v = decoded_json(gens, parts.id.0);
    v["uuid"] = json!(u.hyphenated().to_string());
    v
}

fn decode_id(state: &NodeState, segment: &str) -> Reply {
    // Percent-decoded, as a path parameter is; a segment that is not UTF-8 once decoded is a
    // bad ID like any other.
    let Ok(text) = percent_encoding::percent_decode_str(segment).decode_utf8() else {
        return error(
            StatusCode::BAD_REQUEST,
            "the ID is not UTF-8 text: not a decimal, base62 (11 characters) or base32 (13 characters) ID",
        );
    };
    let gens = state.lease.generations();
    if looks_like_uuid(&text) {
        return match parse_uuid_in(&gens, &text) {
            Ok((u, parts)) => web::json(
                StatusCode::OK,
                decoded_uuid_json(&gens, &u, &parts).to_string(),
            ),
            Err(e) => error(StatusCode::BAD_REQUEST, e),
        };
    }
    if looks_masked(&text) {
        return match unmask(state, text.trim()) {
            Ok(id) => {
                let mut v = decoded_json(&gens, id);
                v["masked"] = json!(text.trim());
                web::json(StatusCode::OK, v.to_string())
            }
            Err(e) => error(StatusCode::BAD_REQUEST, e),
        };
    }
    match parse_id(&text).and_then(|id| {
        gens.of_id(id)
            .map(|_| id)
            .map_err(|e| format!("{:?}: {e}", text.trim()))
    }) {
        Ok(id) => web::json(StatusCode::OK, decoded_json(&gens, id).to_string()),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// Whether `text` has the shape of a masked ID's string form: 12 characters, not all digits
/// (12 digits are a decimal ID).
fn looks_masked(text: &str) -> bool {
    let t = text.trim();
    t.chars().count() == idgen_id::mask::MASKED_STR_LEN && !t.bytes().all(|c| c.is_ascii_digit())
}

/// The ID a masked string stands for, with the node's keyring over the layout's width.
fn unmask(state: &NodeState, text: &str) -> Result<u64, String> {
    let Some(keys) = &state.config.mask.keys else {
        return Err(format!(
            "{text:?}: a masked ID (12 characters), but masking is not configured on this node \
             (mask_keys_file or IDGEN_MASK_KEYS)"
        ));
    };
    keys.unmask_str(text, idgen_id::mask::layout_width(&state.config.layout))
        .map_err(|e| format!("{text:?}: {e}"))
}

fn layout(state: &NodeState) -> Reply {
    let now = SystemClock::new().wall_ms();
    let gens = state.lease.generations();
    let in_effect = *gens.at(now);
    let l = in_effect.layout;
    // The time left is the newest layout's: a scheduled successor is where the IDs go on.
    let left = gens.newest().layout.time_left(now);
    let range = state
        .lease
        .current()
        .map(|v| json!({"first": v.grant.workers.first, "count": v.grant.workers.count, "generation": v.grant.generation}));
    let body = json!({
        "epoch_ms": l.epoch_ms(),
        "epoch": humantime::format_rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(l.epoch_ms())).to_string(),
        "timestamp_bits": l.timestamp_bits(),
        "worker_bits": l.worker_bits(),
        "sequence_bits": l.sequence_bits(),
        "region_bits": l.region_bits(),
        "id_bits": l.id_bits(),
        "max_id": l.max_id().get(),
        "max_id_str": l.max_id().to_string(),
        "js_safe": l.is_js_safe(),
        "region": state.config.lease.region.region(),
        "ends_at": humantime::format_rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(gens.newest().layout.end_unix_ms())).to_string(),
        "layout_generation": in_effect.index,
        "layouts": generations_json(&gens),
        "years_left": left.as_secs_f64() / (365.25 * 86_400.0),
        "namespace": state.config.lease.namespace,
        "workers": range,
        "shards": state.config.listen.shards,
        "workers_per_shard": state.config.listen.workers_per_shard,
    });
    web::json(StatusCode::OK, body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_a_whole_path_and_an_id_one_segment_as_sent() {
        assert!(matches!(Route::of("/metrics"), Some(Route::Metrics)));
        assert!(matches!(Route::of("/health/live"), Some(Route::Live)));
        assert!(matches!(Route::of("/health/ready"), Some(Route::Ready)));
        assert!(matches!(Route::of("/layout"), Some(Route::Layout)));
        for (path, id) in [
            ("/ids/123", "123"),
            ("/ids/batch", "batch"),
            ("/ids/%31%2F", "%31%2F"),
        ] {
            assert!(
                matches!(Route::of(path), Some(Route::Id(got)) if got == id),
                "{path}"
            );
        }
        for path in [
            "/",
            "",
            "/ids",
            "/ids/",
            "/ids/1/2",
            "/ids//1",
            "/metrics/",
            "//metrics",
            "/Metrics",
            "/health",
            "/health%2Flive",
            "*",
        ] {
            assert!(Route::of(path).is_none(), "{path}");
        }
    }
}
