//! The HTTP ID API (the seed document's `POST /ids` and `POST /ids/batch`), served by the
//! shards themselves: every shard accepts from the node's one HTTP listening socket, like the
//! ID protocol's, and answers from its own generator on its own thread. The control thread
//! (lease keeper, admin endpoints) never sees an ID request, so a stream of big batches cannot
//! delay a lease renewal, and HTTP issuance spreads over every shard. Its connections are
//! served by the node's one HTTP stack (`node/web.rs`), as the admin server's are.
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /ids` | `{"id": 123, "id_str": "123"}`; with `?format=string`: `{"id": "123"}` |
//! | `POST /ids/batch` with `{"count": N}` | `{"ids": [..], "ids_str": [..]}`; with `?format=string`: `{"ids": ["..", ..]}` |
//! | `POST /uuids` | `{"uuid": "019b71b4-4c7b-7800-8000-123456789abc"}`: a version 7 UUID made from the next ID (PROTOCOL.md §3.7) |
//! | `POST /uuids/batch` with `{"count": N}` | `{"uuids": [..]}`, increasing |
//! | `POST /seq/{name}` | `{"value": N, "value_str": "N"}`: the next value of a named sequence (`idgen seq create`) |
//! | `POST /seq/{name}/batch` with `{"count": K}` | `{"values": [..], "values_str": [..]}` |
//! | `GET /health/live` | `{"live": true}` while the shard answers (for load balancers in front of this address) |
//!
//! IDs above 2^53 lose precision in JavaScript's numbers, so every answer carries them as
//! strings too (`id_str`, `ids_str`), or only as strings with `?format=string`; a node with a
//! JavaScript-safe layout (at most 53 bits wide) issues only IDs up to `2^53 - 1`, exact as
//! numbers. Errors are
//! `{"error": "...", "status": N}`: 400 for a bad request, 404/405 for a wrong path or method,
//! 408 for a body that does not arrive in time, 413 for a body over 4 KiB, 503 with
//! `Retry-After: 1` when this node cannot issue now (no lease, clock trouble, its connection
//! limit: try another node). `docs/openapi.yaml` is the full description. The ops endpoints (`/metrics`, `/health/ready`, `/layout`,
//! `GET /ids/{id}`) are on the admin address.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, StatusCode};
use idgen_protocol::Status;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::idempotency::{self, Idempotency};
use super::issuer::{refusal, wait_until, InLine, IssueError, Issuer};
use super::telemetry::{bump, drop_one, Op, ShardStats};
use super::web::{self, error, Reply};
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::generator::Progress;
use idgen_core::sequence::holder::{HoldError, Holder};
use idgen_core::sequence::{SequenceError, SequenceName, MAX_BLOCK};
use idgen_id::mask::{self, Keyring};
use idgen_id::{Layout, UuidError};
use rand::RngExt;

/// Largest request body read (a batch request is `{"count": N}`).
const MAX_BODY: usize = 4096;

/// What an HTTP connection on a shard needs.
pub(crate) struct HttpCtx {
    /// The cluster's layout: what the UUIDs of `POST /uuids` are made with.
    pub layout: Layout,
    pub gen: Rc<RefCell<Issuer>>,
    /// The node's named sequences (their reservations run on the control thread).
    pub sequences: Arc<Holder>,
    pub stats: Arc<ShardStats>,
    pub max_batch: u32,
    /// The `[mask]` keyring, for `?format=masked` (`None`: masking is off on this node).
    pub mask: Option<Arc<Keyring>>,
    /// A connection idle, or sending a request's head or body, for longer than this is closed.
    pub request_timeout: Duration,
    /// Kept answers for `Idempotency-Key` (`None`: off).
    pub idempotency: Option<Arc<Idempotency>>,
    /// How long a request with `?after=` may wait for the clock (the cluster's `max_drift`).
    pub max_after_wait: Duration,
    /// How long a draining connection may take to finish the request in flight.
    pub shutdown_timeout: Duration,
    pub shutdown: watch::Receiver<bool>,
}

/// Serves one connection, plaintext or TLS (the caller set `TCP_NODELAY`), until the client
/// closes it, it idles past the timeout, or the node drains (see [`web::serve`]).
pub(crate) async fn serve<S>(stream: S, ctx: Rc<HttpCtx>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    bump(&ctx.stats.connections_open, 1);
    let handler = Rc::clone(&ctx);
    let handle = move |req| {
        let ctx = Rc::clone(&handler);
        async move { answer(&ctx, req).await }
    };
    web::serve(
        stream,
        handle,
        ctx.request_timeout,
        ctx.shutdown_timeout,
        ctx.shutdown.clone(),
    )
    .await;
    drop_one(&ctx.stats.connections_open);
}

/// Answers a connection over the node's connection limit with 503, then closes it.
pub(crate) async fn refuse_overloaded(mut stream: TcpStream, stats: Arc<ShardStats>) {
    stats.error(Status::OVERLOADED);
    let body = web::error_body(
        StatusCode::SERVICE_UNAVAILABLE,
        "connection limit reached; try another node",
    );
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&body).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Answers one request; the ID requests' durations are recorded by kind (refusals included).
async fn answer(ctx: &HttpCtx, req: Request<Incoming>) -> Reply {
    let started = Instant::now();
    let op = match (req.uri().path(), req.method()) {
        ("/ids", &Method::POST) => Some(Op::HttpIds),
        ("/ids/batch", &Method::POST) => Some(Op::HttpBatch),
        ("/uuids", &Method::POST) => Some(Op::HttpUuids),
        ("/uuids/batch", &Method::POST) => Some(Op::HttpUuidsBatch),
        _ => None,
    };
    let response = route(ctx, req).await;
    if let Some(op) = op {
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        ctx.stats.record_duration(op, us);
    }
    response
}

/// Reads a POST's body (at most [`MAX_BODY`]), then answers it, through the node's table of
/// kept answers when it carries an `Idempotency-Key` (see [`super::idempotency`]).
async fn route(ctx: &HttpCtx, req: Request<Incoming>) -> Reply {
    bump(&ctx.stats.http_requests, 1);
    let (parts, body) = req.into_parts();
    let body = if parts.method == Method::POST {
        match web::read_body(body, MAX_BODY, ctx.request_timeout, || {
            format!("the body must be at most {MAX_BODY} bytes: {{\"count\": N}}")
        })
        .await
        {
            Ok(b) => b,
            Err(reply) => return reply,
        }
    } else {
        Bytes::new()
    };
    match parts.headers.get(IDEMPOTENCY_KEY) {
        Some(key) => idempotent(ctx, &parts, body, key).await,
        None => route_read(ctx, &parts, body).await,
    }
}

/// The `Idempotency-Key` header.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Answers a request with an `Idempotency-Key`: the kept answer of an earlier request with
/// the key, or a fresh answer kept for the window (only IDs and UUIDs: a key on another
/// endpoint is refused).
async fn idempotent(
    ctx: &HttpCtx,
    parts: &hyper::http::request::Parts,
    body: Bytes,
    key: &HeaderValue,
) -> Reply {
    let Some(table) = &ctx.idempotency else {
        return error(
            StatusCode::BAD_REQUEST,
            "Idempotency-Key is not enabled on this node (idempotency_window is 0): retried requests would get new IDs",
        );
    };
    let key = match key.to_str().map_err(|e| e.to_string()).and_then(|k| {
        idempotency::check_key(k)?;
        Ok(k)
    }) {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let path = parts.uri.path();
    let many =
        match (path, &parts.method) {
            ("/ids" | "/uuids", &Method::POST) => false,
            ("/ids/batch" | "/uuids/batch", &Method::POST) => true,
            _ => return error(
                StatusCode::BAD_REQUEST,
                "Idempotency-Key applies to POST /ids, /ids/batch, /uuids and /uuids/batch only",
            ),
        };
    // Room for the largest answer the request can have (a batch's count is checked when it
    // is answered; until then the node's limit bounds it).
    let answer_bytes = if many {
        serde_json::from_slice::<BatchBody>(&body)
            .map_or(0, |b| b.count.min(u64::from(ctx.max_batch)) as usize)
            * 96
            + 64
    } else {
        160
    };
    let request = format!(
        "{} {}?{} {}",
        parts.method,
        path,
        parts.uri.query().unwrap_or(""),
        String::from_utf8_lossy(&body)
    );
    let ticket = match table.begin(key, &request, answer_bytes, Instant::now()) {
        idempotency::Begin::Fresh(t) => t,
        idempotency::Begin::Replay(kept) => {
            let mut reply = web::json(
                StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK),
                kept.body,
            );
            reply
                .headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            return reply;
        }
        idempotency::Begin::InFlight => {
            let mut reply = error(
                StatusCode::CONFLICT,
                "a request with this Idempotency-Key is still being answered: retry shortly",
            );
            reply
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return reply;
        }
        idempotency::Begin::Mismatch => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "this Idempotency-Key was used with another request (path, query or body): use a new key",
            )
        }
        idempotency::Begin::Full => {
            ctx.stats.error(Status::OVERLOADED);
            let mut reply = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the node's table of idempotency keys is full (idempotency_max_bytes): retry later",
            );
            reply
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return reply;
        }
    };
    let reply = route_read(ctx, parts, body).await;
    if !reply.status().is_success() {
        // Not kept: the ticket's drop frees the key, and a retry is answered afresh.
        return reply;
    }
    let (head, full) = reply.into_parts();
    let bytes = match full.collect().await {
        Ok(c) => c.to_bytes(),
        Err(never) => match never {},
    };
    ticket.keep(
        idempotency::Kept {
            status: head.status.as_u16(),
            body: bytes.to_vec(),
        },
        Instant::now(),
    );
    Reply::from_parts(head, Full::new(bytes))
}

async fn route_read(ctx: &HttpCtx, parts: &hyper::http::request::Parts, body: Bytes) -> Reply {
    // `?format=` is read by the ID and sequence endpoints only (the others take no
    // parameters).
    let format = || format_of(parts.uri.query());
    let after = || after_of(parts.uri.query());
    match (parts.uri.path(), &parts.method) {
        ("/ids", &Method::POST) => {
            let format = match format() {
                Ok(f) => f,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let masker = match masker(ctx, format) {
                Ok(m) => m,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let after = match after() {
                Ok(a) => a,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let mut ids = Vec::with_capacity(1);
            match issue_after(ctx, 1, after, &mut ids).await {
                Ok(()) => match masker {
                    Some(m) => match masked_single(&m, ids[0]) {
                        Ok(body) => web::json(StatusCode::OK, body),
                        Err(e) => mask_error(ctx, &e),
                    },
                    None => web::json(StatusCode::OK, single(ids[0], format == Format::String)),
                },
                Err(reply) => reply,
            }
        }
        ("/ids/batch", &Method::POST) => {
            let format = match format() {
                Ok(f) => f,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let masker = match masker(ctx, format) {
                Ok(m) => m,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let count = match batch_count(&body, ctx.max_batch) {
                Ok(n) => n,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let after = match after() {
                Ok(a) => a,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let mut ids = Vec::with_capacity(count as usize);
            match issue_after(ctx, count, after, &mut ids).await {
                Ok(()) => match masker {
                    Some(m) => match masked_batch(&m, &ids) {
                        Ok(body) => web::json(StatusCode::OK, body),
                        Err(e) => mask_error(ctx, &e),
                    },
                    None => web::json(StatusCode::OK, batch(&ids, format == Format::String)),
                },
                Err(reply) => reply,
            }
        }
        ("/uuids", &Method::POST) => {
            let mut out = Vec::with_capacity(48);
            out.extend_from_slice(br#"{"uuid":"#);
            match issue_uuids(ctx, 1, &mut out).await {
                Ok(()) => {
                    out.push(b'}');
                    web::json(StatusCode::OK, out)
                }
                Err(e) => e,
            }
        }
        ("/uuids/batch", &Method::POST) => {
            let count = match batch_count(&body, ctx.max_batch) {
                Ok(n) => n,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let mut out = Vec::with_capacity(12 + 39 * count as usize);
            out.extend_from_slice(br#"{"uuids":["#);
            match issue_uuids(ctx, count, &mut out).await {
                Ok(()) => {
                    out.extend_from_slice(b"]}");
                    web::json(StatusCode::OK, out)
                }
                Err(e) => e,
            }
        }
        (path, method) if path.starts_with("/seq/") => {
            let Some((name, many)) = seq_path(path) else {
                return error(
                    StatusCode::NOT_FOUND,
                    "no such endpoint: POST /seq/{name} or POST /seq/{name}/batch",
                );
            };
            if *method != Method::POST {
                return web::not_allowed("POST", "POST");
            }
            let strings = match format() {
                Ok(Format::Masked) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "format=masked is for IDs (POST /ids, POST /ids/batch), not sequence values",
                    )
                }
                Ok(f) => f == Format::String,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let name: SequenceName = match name.parse() {
                Ok(n) => n,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            };
            let count = if many {
                let limit = ctx.max_batch.min(MAX_BLOCK as u32);
                match batch_count(&body, limit) {
                    Ok(n) => u64::from(n),
                    Err(e) => return error(StatusCode::BAD_REQUEST, e),
                }
            } else {
                1
            };
            match ctx
                .sequences
                .next_values(&name, count, ctx.request_timeout)
                .await
            {
                Ok(v) if many => web::json(StatusCode::OK, batch_as(VALUES, &v, strings)),
                Ok(v) => web::json(StatusCode::OK, single_as(VALUES, v[0], strings)),
                Err(e) => hold_error(&e),
            }
        }
        ("/health/live", &Method::GET | &Method::HEAD) => {
            web::json(StatusCode::OK, &br#"{"live":true}"#[..])
        }
        ("/ids" | "/ids/batch" | "/uuids" | "/uuids/batch", _) => web::not_allowed("POST", "POST"),
        ("/health/live", _) => web::not_allowed("GET, HEAD", "GET, HEAD"),
        _ => error(
            StatusCode::NOT_FOUND,
            "no such endpoint on the HTTP ID API: POST /ids, POST /ids/batch, POST /uuids, \
             POST /uuids/batch, POST /seq/{name}, POST /seq/{name}/batch, GET /health/live (metrics, readiness, /layout and GET \
             /ids/{id} are on the admin address)",
        ),
    }
}

/// `count` IDs from this shard's generator as runs `emit(first, n)`, from whatever worker
/// range it holds when the request starts (an HTTP request announces none), and all from that
/// one grant, waiting on the shard's runtime when the generator asks for a later clock reading.
/// On error nothing emitted may be used.
async fn issue(
    ctx: &HttpCtx,
    count: u32,
    mut emit: impl FnMut(u64, u64),
) -> Result<(), IssueError> {
    // Leaves the shard's line if this future is dropped while it waits (the client went away).
    let mut request = InLine::new(&ctx.gen, u64::from(count));
    let mut started = None;
    loop {
        // The borrow ends before any wait: other requests on this shard issue meanwhile.
        let progress =
            ctx.gen
                .borrow_mut()
                .issue_current(&mut started, &mut request.fill, &mut emit)?;
        match progress {
            Progress::Done => break,
            Progress::RetryAt(at) => wait_until(&ctx.gen, at).await,
        }
    }
    ctx.stats.served(u64::from(count));
    Ok(())
}

/// An `after` further ahead of this node's clock than this is refused outright (400) rather
/// than with a retry status: no clock the cluster trusts issued it.
const AFTER_FUTURE_LIMIT_MS: u64 = 60_000;

/// `count` IDs into `ids`, all above `after` when it is given (the request's `?after=`: an ID
/// the caller has seen). The node waits, at most `max_after_wait` (the cluster's `max_drift`),
/// for its clock to pass the time of `after`, so an ID seen from a node whose clock runs ahead
/// is followed by greater ones here; further ahead it refuses with 503 and `Retry-After`.
/// What it answers is checked to be above `after`, and drawn again (the IDs drawn are left
/// unused) if not. `Err` is the answer to send.
async fn issue_after(
    ctx: &HttpCtx,
    count: u32,
    after: Option<u64>,
    ids: &mut Vec<u64>,
) -> Result<(), Reply> {
    let Some(after) = after else {
        return issue(ctx, count, |first, n| ids.extend(first..first + n))
            .await
            .map_err(|e| issue_error(ctx, &e));
    };
    let time_to_pass = ctx.gen.borrow().time_to_pass(after);
    let unix_ms = match time_to_pass {
        Ok(unix_ms) => unix_ms,
        Err(e) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("after={after}: not an ID of this cluster: {e}"),
            ))
        }
    };
    let bound = u64::try_from(ctx.max_after_wait.as_millis()).unwrap_or(u64::MAX);
    let deadline = Instant::now() + ctx.max_after_wait + Duration::from_millis(5);
    loop {
        let now = SystemClock::new().wall_ms();
        if now <= unix_ms {
            let ahead = unix_ms + 1 - now;
            if ahead > AFTER_FUTURE_LIMIT_MS {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    format!("after={after} lies {ahead} ms ahead of this node's clock: not an ID a trusted clock of this cluster issued"),
                ));
            }
            if ahead > bound || Instant::now() + Duration::from_millis(ahead) > deadline {
                ctx.stats.error(Status::UNAVAILABLE_CLOCK);
                let mut reply = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("after={after} lies {ahead} ms ahead of this node's clock, more than it waits ({bound} ms, max_drift): retry later, or on the node that issued it"),
                );
                let secs = ahead.div_ceil(1000).max(1).to_string();
                if let Ok(v) = HeaderValue::from_str(&secs) {
                    reply.headers_mut().insert(RETRY_AFTER, v);
                }
                return Err(reply);
            }
            tokio::time::sleep(Duration::from_millis(ahead)).await;
            continue;
        }
        ids.clear();
        issue(ctx, count, |first, n| ids.extend(first..first + n))
            .await
            .map_err(|e| issue_error(ctx, &e))?;
        // Increasing within one answer: the first is the smallest.
        if ids.first().is_some_and(|&first| first > after) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            ctx.stats.error(Status::UNAVAILABLE_CLOCK);
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot issue above after={after} yet: retry later, or on the node that issued it"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The `?after=` asked for: an ID in any of the forms `GET /ids/{id}` reads.
fn after_of(query: Option<&str>) -> Result<Option<u64>, String> {
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "after" {
            let id = super::admin::parse_id(value).map_err(|e| format!("after: {e}"))?;
            if id >= 1 << 63 {
                return Err(format!("after={value}: the sign bit is set; not an ID"));
            }
            after = Some(id);
        }
    }
    Ok(after)
}

/// `count` IDs as version 7 UUIDs (`idgen_id`'s mapping, random bits from the thread's
/// CSPRNG), appended to `out` as quoted, comma-separated text forms (`"019b…"`). `Err` is the
/// answer to send instead.
async fn issue_uuids(ctx: &HttpCtx, count: u32, out: &mut Vec<u8>) -> Result<(), Reply> {
    let mut rng = rand::rng();
    let mut beyond: Option<UuidError> = None;
    let mut first_one = true;
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    // The layout of the generation the IDs come from (one grant's: the same for all).
    let gens = ctx.gen.borrow().lease().generations();
    let issued = issue(ctx, count, |first, n| {
        let layout = gens.of_id(first).map_or(ctx.layout, |g| g.layout);
        for id in first..first + n {
            match layout.uuid_v7(id, rng.random::<u128>()) {
                Ok(bytes) => {
                    if !first_one {
                        out.push(b',');
                    }
                    first_one = false;
                    out.push(b'"');
                    let t = uuid::Uuid::from_bytes(bytes)
                        .hyphenated()
                        .encode_lower(&mut text);
                    out.extend_from_slice(t.as_bytes());
                    out.push(b'"');
                }
                Err(e) => beyond = Some(e),
            }
        }
    })
    .await;
    match (issued, beyond) {
        (Err(e), _) => Err(issue_error(ctx, &e)),
        // The layout's time is past a UUIDv7's 48 bits: no node of the cluster can help.
        (Ok(()), Some(e)) => {
            ctx.stats.error(Status::EXHAUSTED);
            Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
        }
        (Ok(()), None) => Ok(()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    count: u64,
}

/// The `count` of a batch request's body `{"count": N}`, checked against the node's limit; `Err` is the 400's message.
fn batch_count(bytes: &[u8], max_batch: u32) -> Result<u32, String> {
    let body: BatchBody = serde_json::from_slice(bytes)
        .map_err(|e| format!("expected a JSON body {{\"count\": N}}: {e}"))?;
    if body.count == 0 || body.count > u64::from(max_batch) {
        return Err(format!(
            "count must be between 1 and {max_batch}, got {}",
            body.count
        ));
    }
    // count ≤ max_batch, a u32.
    Ok(body.count as u32)
}

/// How an answer carries its IDs (`?format=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// `format=number`, the default: numbers and decimal strings.
    Number,
    /// `format=string`: decimal strings only.
    String,
    /// `format=masked`: the IDs masked (FF1, `clients/vectors/MASK.md`), as numbers, decimal
    /// strings and the 12-character masked string form.
    Masked,
}

/// The `?format=` asked for (`number` when none). Other query parameters are ignored.
fn format_of(query: Option<&str>) -> Result<Format, String> {
    let mut format = Format::Number;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "format" {
            format = match value {
                "number" => Format::Number,
                "string" => Format::String,
                "masked" => Format::Masked,
                other => {
                    return Err(format!(
                        "format={other:?}: use format=string, format=number or format=masked"
                    ))
                }
            };
        }
    }
    Ok(format)
}

/// What masks a request's IDs: the keyring and the layout's width. `None` for an answer in
/// plain IDs; `Err` (the 400's message) for `format=masked` on a node without keys.
struct Masker<'a> {
    keys: &'a Keyring,
    width: u32,
}

fn masker(ctx: &HttpCtx, format: Format) -> Result<Option<Masker<'_>>, &'static str> {
    if format != Format::Masked {
        return Ok(None);
    }
    match &ctx.mask {
        Some(keys) => Ok(Some(Masker {
            keys,
            width: mask::layout_width(&ctx.layout),
        })),
        None => Err(
            "masking is not configured on this node (mask_keys_file or IDGEN_MASK_KEYS): \
             format=masked is unavailable",
        ),
    }
}

/// `{"id": M, "id_str": "M", "masked": "1…"}`: `id`'s masked integer form, as a number and
/// a decimal string, and its masked string form.
fn masked_single(m: &Masker<'_>, id: u64) -> Result<Vec<u8>, mask::MaskError> {
    let (masked, text) = m.keys.mask_both(id, m.width)?;
    let mut out = single(masked, false);
    out.pop();
    // The masked string form is base62: no escaping to do.
    out.extend_from_slice(br#","masked":""#);
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(br#""}"#);
    Ok(out)
}

/// `{"ids": [M..], "ids_str": ["M"..], "masked": ["1…"..]}`.
fn masked_batch(m: &Masker<'_>, ids: &[u64]) -> Result<Vec<u8>, mask::MaskError> {
    let mut masked = Vec::with_capacity(ids.len());
    let mut texts = Vec::with_capacity(ids.len());
    for &id in ids {
        let (n, text) = m.keys.mask_both(id, m.width)?;
        masked.push(n);
        texts.push(text);
    }
    let mut out = batch(&masked, false);
    out.pop();
    out.extend_from_slice(br#","masked":["#);
    for (i, t) in texts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(t.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// An ID the layout issued that masking refuses (wider than the layout says): a bug, 500.
fn mask_error(ctx: &HttpCtx, e: &mask::MaskError) -> Reply {
    ctx.stats.error(Status::INTERNAL);
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("cannot mask an issued ID: {e}"),
    )
}

/// The names an answer gives its numbers: IDs, or a sequence's values.
#[derive(Clone, Copy)]
struct Field {
    one: &'static str,
    many: &'static str,
}

const IDS: Field = Field {
    one: "id",
    many: "ids",
};
const VALUES: Field = Field {
    one: "value",
    many: "values",
};

/// `{"id": N, "id_str": "N"}`, or `{"id": "N"}` for strings only (`value` for a sequence's).
/// Numbers are digits: written directly, with no escaping to do.
fn single(id: u64, strings: bool) -> Vec<u8> {
    single_as(IDS, id, strings)
}

fn single_as(field: Field, id: u64, strings: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    let mut digits = itoa::Buffer::new();
    let text = digits.format(id).as_bytes();
    let key = field.one.as_bytes();
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(key);
    if strings {
        out.extend_from_slice(br#"":""#);
        out.extend_from_slice(text);
        out.extend_from_slice(br#""}"#);
    } else {
        out.extend_from_slice(br#"":"#);
        out.extend_from_slice(text);
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key);
        out.extend_from_slice(br#"_str":""#);
        out.extend_from_slice(text);
        out.extend_from_slice(br#""}"#);
    }
    out
}

/// `{"ids": [..], "ids_str": [..]}`, or `{"ids": ["..", ..]}` for strings only (`values` for
/// a sequence's).
fn batch(ids: &[u64], strings: bool) -> Vec<u8> {
    batch_as(IDS, ids, strings)
}

fn batch_as(field: Field, ids: &[u64], strings: bool) -> Vec<u8> {
    // At most 20 digits, 2 quotes and a comma per ID and form.
    let mut out = Vec::with_capacity(24 + ids.len() * if strings { 23 } else { 44 });
    let mut digits = itoa::Buffer::new();
    let mut list = |out: &mut Vec<u8>, quoted: bool| {
        out.push(b'[');
        for (i, &id) in ids.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if quoted {
                out.push(b'"');
            }
            out.extend_from_slice(digits.format(id).as_bytes());
            if quoted {
                out.push(b'"');
            }
        }
        out.push(b']');
    };
    let key = field.many.as_bytes();
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
    list(&mut out, strings);
    if !strings {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key);
        out.extend_from_slice(b"_str\":");
        list(&mut out, true);
    }
    out.push(b'}');
    out
}

/// `/seq/{name}` → `(name, false)`, `/seq/{name}/batch` → `(name, true)`.
fn seq_path(path: &str) -> Option<(&str, bool)> {
    let rest = path.strip_prefix("/seq/")?;
    match rest.split_once('/') {
        None if !rest.is_empty() => Some((rest, false)),
        Some((name, "batch")) if !name.is_empty() => Some((name, true)),
        _ => None,
    }
}

/// A sequence call that got no values: 404 for a sequence this namespace does not have, 409
/// for one used up to its maximum, 400 for a bad count, 503 with `Retry-After` when the store
/// did not answer in time (try again, here or on another node), 500 for a record this node
/// cannot read.
fn hold_error(e: &HoldError) -> Reply {
    let status = match e {
        HoldError::Sequence(SequenceError::NotFound(_)) => StatusCode::NOT_FOUND,
        HoldError::Sequence(SequenceError::Exhausted { .. }) => StatusCode::CONFLICT,
        HoldError::Sequence(SequenceError::BadName { .. } | SequenceError::BadSpec(_)) => {
            StatusCode::BAD_REQUEST
        }
        HoldError::Sequence(SequenceError::Corrupt { .. } | SequenceError::Format { .. }) => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut response = error(status, e.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
    }
    response
}

/// A request that got no IDs: 503 (this node cannot issue now: try another), counted under its
/// wire status like the ID protocol's refusals.
fn issue_error(ctx: &HttpCtx, e: &IssueError) -> Reply {
    let (_, message) = refusal(e, &ctx.stats);
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, message);
    response
        .headers_mut()
        .insert("retry-after", HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_the_json_the_api_documents() {
        for id in [0u64, 7, u64::MAX, 1 << 60] {
            let v: serde_json::Value = serde_json::from_slice(&single(id, false)).unwrap();
            assert_eq!(v, serde_json::json!({"id": id, "id_str": id.to_string()}));
            let v: serde_json::Value = serde_json::from_slice(&single(id, true)).unwrap();
            assert_eq!(v, serde_json::json!({"id": id.to_string()}));
        }
        for ids in [vec![], vec![5u64], vec![1, 2, u64::MAX]] {
            let strs: Vec<String> = ids.iter().map(u64::to_string).collect();
            let v: serde_json::Value = serde_json::from_slice(&batch(&ids, false)).unwrap();
            assert_eq!(v, serde_json::json!({"ids": ids, "ids_str": strs}));
            let v: serde_json::Value = serde_json::from_slice(&batch(&ids, true)).unwrap();
            assert_eq!(v, serde_json::json!({"ids": strs}));
        }
    }

    #[test]
    fn sequence_answers_name_their_numbers_values() {
        let v: serde_json::Value = serde_json::from_slice(&single_as(VALUES, 42, false)).unwrap();
        assert_eq!(v, serde_json::json!({"value": 42, "value_str": "42"}));
        let v: serde_json::Value = serde_json::from_slice(&single_as(VALUES, 42, true)).unwrap();
        assert_eq!(v, serde_json::json!({"value": "42"}));
        let v: serde_json::Value =
            serde_json::from_slice(&batch_as(VALUES, &[1, 2], false)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"values": [1, 2], "values_str": ["1", "2"]})
        );
    }

    #[test]
    fn sequence_paths_name_one_sequence() {
        assert_eq!(seq_path("/seq/orders"), Some(("orders", false)));
        assert_eq!(
            seq_path("/seq/invoice.tenant-42/batch"),
            Some(("invoice.tenant-42", true))
        );
        for bad in ["/seq/", "/seq//batch", "/seq/a/b", "/seq/a/batch/x"] {
            assert_eq!(seq_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_format_parameter_is_checked() {
        assert_eq!(format_of(None), Ok(Format::Number));
        assert_eq!(format_of(Some("")), Ok(Format::Number));
        assert_eq!(format_of(Some("format=string")), Ok(Format::String));
        assert_eq!(format_of(Some("x=1&format=number")), Ok(Format::Number));
        assert_eq!(format_of(Some("format=masked")), Ok(Format::Masked));
        assert!(format_of(Some("format=xml")).is_err());
        assert!(format_of(Some("format")).is_err());
    }

    #[test]
    fn masked_answers_carry_both_forms_and_unmask() {
        let keys = Keyring::parse("7:00112233445566778899aabbccddeeff").unwrap();
        for width in [63, 53] {
            let m = Masker { keys: &keys, width };
            let v: serde_json::Value =
                serde_json::from_slice(&masked_single(&m, 12_345).unwrap()).unwrap();
            let masked = keys.mask(12_345, width).unwrap();
            assert_eq!(
                v,
                serde_json::json!({"id": masked, "id_str": masked.to_string(),
                    "masked": keys.mask_str(12_345, width).unwrap()})
            );
            let ids = [1u64, 2, 3];
            let v: serde_json::Value =
                serde_json::from_slice(&masked_batch(&m, &ids).unwrap()).unwrap();
            let texts = v["masked"].as_array().unwrap();
            for (i, id) in ids.iter().enumerate() {
                let n = v["ids"][i].as_u64().unwrap();
                assert_eq!(v["ids_str"][i].as_str(), Some(n.to_string().as_str()));
                assert_eq!(keys.unmask(n, width), Ok(*id));
                assert_eq!(keys.unmask_str(texts[i].as_str().unwrap(), width), Ok(*id));
            }
            let v: serde_json::Value =
                serde_json::from_slice(&masked_batch(&m, &[]).unwrap()).unwrap();
            assert_eq!(
                v,
                serde_json::json!({"ids": [], "ids_str": [], "masked": []})
            );
            // An ID wider than the width is an error, not a wrong answer.
            assert!(masked_single(&m, 1 << width).is_err());
        }
    }
}
