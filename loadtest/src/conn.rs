//! One load-generating connection: connect, handshake, the pipelined send/receive loop,
//! reconnects. The protocol (the handshake, which answer belongs to which request, what an
//! ERROR means for the connection) is `idgen_protocol::client`'s; the HTTP ID API's framing is
//! `crate::http`'s; this is the I/O and the measuring around it. Everything here is owned by the connection's task; the only things it shares
//! are the read-only [`Config`], the progress channel (one message per second) and the
//! once-only error notes (error paths only).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use hdrhistogram::Histogram;
use idgen_protocol::client::{Answer, Awaits, ClientConn, ClientError, Handshake, HandshakeError};
use idgen_protocol::{encode_request, FrameError, IdsOptions, Request, SeqName};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::{sleep, timeout, Instant};

use crate::cli::Target;
use crate::http;
use crate::redis::{self, Reply};
use crate::tls::{Stream, Tls};

/// Pause before reconnecting after a closed or broken connection.
pub const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// A connection gives up after this many consecutive failed connects (about 5 s).
const MAX_CONNECT_FAILURES: u32 = 50;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// With requests outstanding and nothing read for this long, the connection is dropped.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// After the last send, how long to wait for the outstanding answers.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// IDs per chunk of kept IDs (8 MiB).
pub const ID_CHUNK: usize = 1 << 20;
/// Least free space in the read buffer before each read.
const READ_CHUNK: usize = 64 * 1024;
/// Open loop: tokio's timers fire up to 1-2 ms late (1 ms ticks, rounded up), so a request is sent when it is due
/// within this margin (and timed from its real send time if that is before its due time).
const OPEN_LOOP_EARLY: Duration = Duration::from_millis(2);

/// Error-count keys for faults seen by the client (server statuses use their `Status` name).
pub const MALFORMED: &str = "MALFORMED_RESPONSE";
pub const CONNECTION_LOST: &str = "CONNECTION_LOST";
pub const CONNECT_FAILED: &str = "CONNECT_FAILED";
pub const TIMEOUT: &str = "TIMEOUT";

/// Latency histograms record nanoseconds, 1 ns ..= 1 hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// The run's settings, shared read-only by all connections.
pub struct Config {
    pub target: Target,
    pub addrs: Vec<SocketAddr>,
    pub pipeline: usize,
    pub batch: u32,
    pub verify: bool,
    /// GET_RANGES instead of GET_IDS (protocol version 2).
    pub ranges: bool,
    /// GET_UUIDS instead of GET_IDS (protocol version 4).
    pub uuids: bool,
    pub start: Instant,
    /// Requests sent (closed loop) or scheduled (open loop) before this are not measured.
    pub warmup_end: Instant,
    /// No request is sent (scheduled, with --rate) at or after this; `None` with --requests.
    pub end: Option<Instant>,
    /// Open loop: time between two requests of one connection.
    pub interval: Option<Duration>,
    /// Closed loop, window writes: a connection writes its next --pipeline requests only once
    /// every answer of the last window is in.
    pub window: bool,
    /// The encoded request, per address (`addrs`' order): the same for every request of
    /// the run to that address (HTTP names the address in its Host header).
    pub requests: Vec<Vec<u8>>,
    /// What each idgen request awaits (`None` for Redis).
    awaits: Option<Awaits>,
    /// GET_IDS_WITH's options instead of GET_IDS (protocol version 5).
    pub with: Option<IdsOptions>,
    /// Each request gets a new idempotency key (the last 16 bytes of the frame, a counter).
    pub fresh_keys: bool,
    pub progress: Option<UnboundedSender<Interval>>,
    /// Error messages already printed (so that each kind is printed once).
    notes: Mutex<HashSet<String>>,
    /// TLS to every address, with the name to verify for each (`addrs`' order).
    pub tls: Option<(Tls, Vec<ServerName<'static>>)>,
}

/// The key template of `--idempotency-keys`: its last 16 characters are a counter, rewritten
/// in every request.
const KEY_TEMPLATE: &str = "lt-0000000000000000";
/// The counter of `--idempotency-keys`, shared by every connection: keys never repeat.
static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Config {
    /// GET_IDS_WITH with `after` (an ID every answer is above), a fresh idempotency key per
    /// request, or masked answers, instead of GET_IDS (idgen target only).
    pub fn with_options(mut self, after: Option<u64>, keys: bool, masked: bool) -> Config {
        let options = IdsOptions {
            count: self.batch,
            after,
            key: keys.then(|| KEY_TEMPLATE.parse().expect("a valid key")),
            masked,
        };
        let request = Request::GetIdsWith(options);
        for r in &mut self.requests {
            r.clear();
            encode_request(&request, r);
        }
        self.awaits = Awaits::of(&request);
        self.with = Some(options);
        self.fresh_keys = keys;
        self
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        target: Target,
        addrs: Vec<SocketAddr>,
        pipeline: usize,
        batch: u32,
        verify: bool,
        ranges: bool,
        uuids: bool,
        start: Instant,
        warmup_end: Instant,
        end: Option<Instant>,
        interval: Option<Duration>,
        redis_key: &str,
        hosts: &[String],
        sequence: Option<SeqName>,
        progress: Option<UnboundedSender<Interval>>,
        tls: Option<(Tls, Vec<ServerName<'static>>)>,
    ) -> Config {
        let idgen_request = match target {
            Target::Idgen if sequence.is_some() => {
                sequence.map(|name| Request::GetValues { count: batch, name })
            }
            Target::Idgen if ranges => Some(Request::GetRanges { count: batch }),
            Target::Idgen if uuids => Some(Request::GetUuids { count: batch }),
            Target::Idgen => Some(Request::GetIds { count: batch }),
            Target::Redis | Target::Http => None,
        };
        let requests = (0..addrs.len())
            .map(|i| {
                let mut request = Vec::new();
                match (&idgen_request, target) {
                    (Some(r), _) => encode_request(r, &mut request),
                    (None, Target::Http) => {
                        let host = hosts.get(i).map_or("localhost", String::as_str);
                        http::encode_request(host, batch, &mut request);
                    }
                    (None, _) => redis::encode_incrby(redis_key, batch, &mut request),
                }
                request
            })
            .collect();
        let awaits = idgen_request.as_ref().and_then(Awaits::of);
        Config {
            target,
            addrs,
            pipeline,
            batch,
            verify,
            ranges,
            uuids,
            start,
            warmup_end,
            end,
            interval,
            window: false,
            requests,
            awaits,
            with: None,
            fresh_keys: false,
            progress,
            notes: Mutex::new(HashSet::new()),
            tls,
        }
    }

    /// Print `message` on stderr the first time `key` is seen (error paths only).
    pub fn note(&self, key: &str, message: &str) {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if notes.len() < 1000 && notes.insert(key.to_owned()) {
            eprintln!("idgen-loadtest: {message}");
        }
    }
}

/// One second of progress from one connection (every answer, warmup included).
pub struct Interval {
    pub hist: Histogram<u64>,
    pub requests: u64,
    pub ids: u64,
    pub errors: u64,
}

impl Interval {
    pub fn new() -> Interval {
        Interval {
            hist: new_histogram(),
            requests: 0,
            ids: 0,
            errors: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.requests == 0 && self.errors == 0 && self.hist.is_empty()
    }

    pub fn merge(&mut self, other: &Interval) {
        // Same bounds on both sides, so `add` cannot fail.
        let _ = self.hist.add(&other.hist);
        self.requests += other.requests;
        self.ids += other.ids;
        self.errors += other.errors;
    }
}

/// What one connection measured; merged by the caller at the end.
pub struct ConnStats {
    /// Latency of the measured, successful requests (ns).
    pub hist: Histogram<u64>,
    /// Measured requests answered (IDs or an error status).
    pub requests: u64,
    /// IDs received by measured requests.
    pub ids: u64,
    /// Errors by status name (server statuses) or client fault key; whole run.
    pub errors: BTreeMap<String, u64>,
    pub reconnects: u64,
    /// Requests sent but never answered (connection lost, or still outstanding at the end).
    pub unanswered: u64,
    /// When the last measured answer arrived.
    pub last_answer: Option<Instant>,
    /// --verify: every ID received (warmup included), in arrival order, in chunks of
    /// [`ID_CHUNK`] so that keeping them never copies a large vector mid-run.
    pub id_chunks: Vec<Vec<u64>>,
    /// --verify: IDs not greater than the previous ID on the same connection.
    pub out_of_order: u64,
    /// IDs with the top bit set (rejected IDS frames count once each).
    pub sign_bit: u64,
    /// --verify: answers whose number of IDs differs from --batch.
    pub wrong_count: u64,
}

enum End {
    /// Nothing more to send and nothing outstanding.
    Finished,
    /// Drop this connection and open a new one.
    Reconnect,
}

enum ConnectError {
    /// Stops the whole run (e.g. the server's max_batch is below --batch).
    Fatal(String),
    /// Try again later (only the first connect of a connection is fatal).
    Retry(String),
}

struct Conn {
    stream: Stream,
    rbuf: BytesMut,
    /// The idgen connection after its handshake (`None` for Redis and HTTP).
    protocol: Option<ClientConn>,
}

struct State<'a> {
    cfg: &'a Config,
    addr: SocketAddr,
    /// What each request to this address is.
    request: &'a [u8],
    stats: ConnStats,
    /// Measured requests still to send (--requests).
    remaining: Option<u64>,
    /// Open loop: the intended send time of the next request.
    next_intended: Option<Instant>,
    /// Outstanding requests: (send time, or intended send time with --rate; measured?).
    inflight: VecDeque<(Instant, bool)>,
    /// Last ID on the current connection (--verify).
    prev_id: Option<u64>,
    interval: Interval,
    interval_index: u64,
}

/// Run one connection until its share of the work is done. `Err` is fatal for the run.
pub async fn run(
    cfg: &Config,
    index: usize,
    budget: Option<u64>,
    first_send: Option<Instant>,
) -> Result<ConnStats, String> {
    let which = index % cfg.addrs.len();
    let addr = cfg.addrs[which];
    let mut st = State {
        cfg,
        addr,
        request: &cfg.requests[which],
        stats: ConnStats {
            hist: new_histogram(),
            requests: 0,
            ids: 0,
            errors: BTreeMap::new(),
            reconnects: 0,
            unanswered: 0,
            last_answer: None,
            id_chunks: Vec::new(),
            out_of_order: 0,
            sign_bit: 0,
            wrong_count: 0,
        },
        remaining: budget,
        next_intended: first_send,
        inflight: VecDeque::with_capacity(cfg.pipeline),
        prev_id: None,
        interval: Interval::new(),
        interval_index: 0,
    };
    let mut first = true;
    let mut failures = 0u32;
    while !st.sending_done(Instant::now()) {
        let conn = match connect(cfg, which).await {
            Ok(conn) => conn,
            Err(ConnectError::Fatal(msg)) => return Err(msg),
            Err(ConnectError::Retry(msg)) if first => return Err(format!("{addr}: {msg}")),
            Err(ConnectError::Retry(msg)) => {
                st.error(CONNECT_FAILED);
                cfg.note(&format!("connect {addr}"), &format!("{addr}: {msg}"));
                failures += 1;
                if failures >= MAX_CONNECT_FAILURES {
                    cfg.note(
                        &format!("give up {addr}"),
                        &format!("{addr}: giving up a connection after {failures} failed connects"),
                    );
                    break;
                }
                sleep(RECONNECT_DELAY).await;
                continue;
            }
        };
        first = false;
        failures = 0;
        match st.session(conn).await {
            End::Finished => break,
            End::Reconnect => {
                st.stats.reconnects += 1;
                sleep(RECONNECT_DELAY).await;
            }
        }
    }
    // The last (partial) second, so the intervals add up to the whole run.
    st.send_interval();
    Ok(st.stats)
}

async fn connect(cfg: &Config, which: usize) -> Result<Conn, ConnectError> {
    let addr = cfg.addrs[which];
    let tcp = match timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Err(_) => return Err(ConnectError::Retry("connect timed out".into())),
        Ok(Err(e)) => return Err(ConnectError::Retry(format!("connect: {e}"))),
        Ok(Ok(s)) => s,
    };
    tcp.set_nodelay(true)
        .map_err(|e| ConnectError::Retry(format!("TCP_NODELAY: {e}")))?;
    let stream = match &cfg.tls {
        None => Stream::Plain(tcp),
        Some((tls, names)) => {
            let handshake = tls.connector.connect(names[which].clone(), tcp);
            match timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Err(_) => return Err(ConnectError::Retry("no TLS handshake within 5 s".into())),
                Ok(Err(e)) => return Err(ConnectError::Retry(format!("TLS handshake: {e}"))),
                Ok(Ok(s)) => Stream::Tls(Box::new(s)),
            }
        }
    };
    let mut conn = Conn {
        stream,
        rbuf: BytesMut::with_capacity(READ_CHUNK),
        protocol: None,
    };
    if cfg.target != Target::Idgen {
        return Ok(conn);
    }
    let handshake = Handshake::new();
    if let Err(e) = write_flush(&mut conn.stream, &handshake.hello()).await {
        // A TLS 1.3 server that refused the client certificate may have reset the
        // connection already; its alert, if it arrives, says why.
        let why = match pending_tls_alert(&mut conn).await {
            Some(alert) => alert,
            None => e.to_string(),
        };
        return Err(ConnectError::Retry(format!("sending HELLO: {why}")));
    }
    let mut protocol = match timeout(HANDSHAKE_TIMEOUT, read_hello(&mut conn, handshake)).await {
        Err(_) => return Err(ConnectError::Retry("no HELLO_OK within 5 s".into())),
        Ok(r) => r?,
    };
    let hello = *protocol.hello();
    if hello.max_batch < cfg.batch {
        return Err(ConnectError::Fatal(format!(
            "{addr}: the server's max_batch is {} but --batch is {}; use --batch {} or less",
            hello.max_batch, cfg.batch, hello.max_batch
        )));
    }
    if cfg.ranges && !protocol.ranges() {
        return Err(ConnectError::Fatal(format!(
            "{addr}: --ranges needs protocol version 2, the server speaks version {}",
            hello.version
        )));
    }
    if cfg.with.is_some() && !protocol.ids_with() {
        return Err(ConnectError::Fatal(format!(
            "{addr}: --after-id, --idempotency-keys and --masked need protocol version 5, the server speaks version {}",
            hello.version
        )));
    }
    if cfg.uuids && !protocol.uuids() {
        return Err(ConnectError::Fatal(format!(
            "{addr}: --uuids needs protocol version 4, the server speaks version {}",
            hello.version
        )));
    }
    // Answers with another count than --batch are counted (`wrong_count`), not refused.
    protocol.accept_any_count();
    conn.protocol = Some(protocol);
    Ok(conn)
}

async fn read_hello(conn: &mut Conn, handshake: Handshake) -> Result<ClientConn, ConnectError> {
    loop {
        match handshake.receive(&conn.rbuf) {
            Ok(Some((protocol, used))) => {
                conn.rbuf.advance(used);
                return Ok(protocol);
            }
            Ok(None) => {}
            Err(HandshakeError::Frame(e)) => {
                return Err(ConnectError::Retry(format!(
                    "malformed handshake answer: {e}; {}",
                    describe_bytes(&conn.rbuf)
                )))
            }
            Err(e) => return Err(ConnectError::Retry(e.to_string())),
        }
        match conn.stream.read_buf(&mut conn.rbuf).await {
            Ok(0) => {
                return Err(ConnectError::Retry(
                    "the server closed the connection during the handshake".into(),
                ))
            }
            Ok(_) => {}
            Err(e) => return Err(ConnectError::Retry(format!("reading HELLO_OK: {e}"))),
        }
    }
}

/// After a failed write on a TLS stream: the TLS error (a server's alert) that a read
/// reports within 200 ms, if any.
async fn pending_tls_alert(conn: &mut Conn) -> Option<String> {
    if !matches!(conn.stream, Stream::Tls(_)) {
        return None;
    }
    let read = timeout(
        Duration::from_millis(200),
        conn.stream.read_buf(&mut conn.rbuf),
    )
    .await;
    match read {
        Ok(Err(e)) if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) => {
            Some(e.to_string())
        }
        _ => None,
    }
}

/// Write `buf` whole; then flush, which a TLS stream needs to send its last record (a no-op
/// on TCP).
async fn write_flush(stream: &mut Stream, buf: &[u8]) -> std::io::Result<()> {
    stream.write_all(buf).await?;
    stream.flush().await
}

/// Up to 32 bytes of `buf` in hex, for error messages.
pub fn describe_bytes(buf: &[u8]) -> String {
    let shown: Vec<String> = buf.iter().take(32).map(|b| format!("{b:02x}")).collect();
    let more = if buf.len() > 32 { " …" } else { "" };
    format!(
        "{} byte(s) buffered, starting with [{}{more}]",
        buf.len(),
        shown.join(" ")
    )
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn earliest(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl State<'_> {
    fn sending_done(&self, now: Instant) -> bool {
        if self.remaining == Some(0) {
            return true;
        }
        match (self.cfg.end, self.next_intended) {
            (Some(end), Some(next)) => next >= end,
            (Some(end), None) => now >= end,
            (None, _) => false,
        }
    }

    fn error(&mut self, key: &str) {
        *self.stats.errors.entry(key.to_owned()).or_insert(0) += 1;
        self.interval.errors += 1;
    }

    /// The connection is gone: its outstanding requests will never be answered.
    fn lost(&mut self, key: &str, why: &str) -> End {
        self.error(key);
        self.abandon(key, why)
    }

    /// Give up the outstanding requests of this connection and reconnect.
    fn abandon(&mut self, key: &str, why: &str) -> End {
        self.stats.unanswered += self.inflight.len() as u64;
        self.inflight.clear();
        self.cfg.note(
            &format!("{key} {}", self.addr),
            &format!("{}: {why}; reconnecting", self.addr),
        );
        End::Reconnect
    }

    fn malformed(&mut self, what: &str, buf: &[u8]) -> End {
        self.cfg.note(
            &format!("malformed {what}"),
            &format!(
                "malformed response from {}: {what}; {}",
                self.addr,
                describe_bytes(buf)
            ),
        );
        self.lost(MALFORMED, "malformed response")
    }

    /// Queue every request that may be sent now.
    fn fill(&mut self, now: Instant, wbuf: &mut Vec<u8>, protocol: &mut Option<ClientConn>) {
        if self.cfg.window && !self.inflight.is_empty() {
            return;
        }
        while self.inflight.len() < self.cfg.pipeline {
            let (t, due) = match self.next_intended {
                Some(next) if next > now + OPEN_LOOP_EARLY => break,
                Some(next) if self.cfg.end.is_some_and(|end| next >= end) => break,
                // Early (by less than the timer granularity): time it from the real send.
                // Late: from when it should have been sent (coordinated omission).
                Some(next) => (next.min(now), next),
                None => (now, now),
            };
            let measured = due >= self.cfg.warmup_end;
            if measured {
                match &mut self.remaining {
                    Some(0) => break,
                    Some(r) => *r -= 1,
                    None => {}
                }
            }
            if let (Some(next), Some(step)) = (&mut self.next_intended, self.cfg.interval) {
                *next += step;
            }
            self.inflight.push_back((t, measured));
            wbuf.extend_from_slice(self.request);
            if self.cfg.fresh_keys {
                let n = NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let end = wbuf.len();
                let hex = format!("{n:016x}");
                wbuf[end - 16..].copy_from_slice(hex.as_bytes());
            }
            if let (Some(p), Some(awaits)) = (protocol.as_mut(), self.cfg.awaits) {
                p.sent(awaits);
            }
        }
    }

    async fn session(&mut self, mut conn: Conn) -> End {
        let mut wbuf = Vec::with_capacity(self.cfg.pipeline * self.request.len());
        self.prev_id = None; // order is promised per connection only
        let mut last_read = Instant::now();
        let mut drain_deadline = None;
        loop {
            let now = Instant::now();
            let sending = !self.sending_done(now);
            if sending {
                self.fill(now, &mut wbuf, &mut conn.protocol);
            }
            if !wbuf.is_empty() {
                if self.inflight.len() == wbuf.len() / self.request.len() {
                    last_read = now; // the idle clock starts with the first outstanding request
                }
                let written = write_flush(&mut conn.stream, &wbuf).await;
                wbuf.clear();
                if let Err(e) = written {
                    return self.lost(CONNECTION_LOST, &format!("write: {e}"));
                }
            }
            if !sending && self.inflight.is_empty() {
                return End::Finished;
            }
            let mut deadline = None;
            if sending {
                if let Some(next) = self.next_intended {
                    if self.inflight.len() < self.cfg.pipeline {
                        deadline =
                            earliest(deadline, next.checked_sub(OPEN_LOOP_EARLY).unwrap_or(next));
                    }
                }
                if let Some(end) = self.cfg.end {
                    deadline = earliest(deadline, end);
                }
            } else {
                deadline = earliest(deadline, *drain_deadline.get_or_insert(now + DRAIN_TIMEOUT));
            }
            if !self.inflight.is_empty() {
                deadline = earliest(deadline, last_read + IDLE_TIMEOUT);
            }
            // Keep a large read window (the space of answers already handled is reused).
            conn.rbuf.reserve(READ_CHUNK);
            let read = tokio::select! {
                r = conn.stream.read_buf(&mut conn.rbuf) => Some(r),
                () = sleep_until_opt(deadline) => None,
            };
            let now = Instant::now();
            match read {
                None => {
                    if drain_deadline.is_some_and(|d| now >= d) {
                        let n = self.inflight.len();
                        self.stats.unanswered += n as u64;
                        self.cfg.note(
                            "drain",
                            &format!(
                                "{}: {n} request(s) still unanswered {} s after the last send",
                                self.addr,
                                DRAIN_TIMEOUT.as_secs()
                            ),
                        );
                        return End::Finished;
                    }
                    if !self.inflight.is_empty() && now >= last_read + IDLE_TIMEOUT {
                        return self.lost(TIMEOUT, "no answer for 10 s");
                    }
                    continue;
                }
                Some(Ok(0)) => {
                    return self.lost(CONNECTION_LOST, "the server closed the connection")
                }
                Some(Err(e)) => return self.lost(CONNECTION_LOST, &format!("read: {e}")),
                Some(Ok(_)) => last_read = now,
            }
            let end = match self.cfg.target {
                Target::Idgen => self.parse_idgen(&mut conn, now),
                Target::Redis => self.parse_redis(&mut conn, now),
                Target::Http => self.parse_http(&mut conn, now),
            };
            if let Some(end) = end {
                return end;
            }
            self.flush_interval(now);
        }
    }

    /// Send this connection's progress for the past second(s) to the progress line.
    fn flush_interval(&mut self, now: Instant) {
        let index = now.saturating_duration_since(self.cfg.start).as_secs();
        if index != self.interval_index {
            self.interval_index = index;
            self.send_interval();
        }
    }

    /// Hand what this connection measured since the last time to the progress task.
    fn send_interval(&mut self) {
        if self.interval.is_empty() {
            return;
        }
        let done = std::mem::replace(&mut self.interval, Interval::new());
        if let Some(tx) = &self.cfg.progress {
            let _ = tx.send(done);
        }
    }

    fn parse_idgen(&mut self, conn: &mut Conn, now: Instant) -> Option<End> {
        let Some(protocol) = conn.protocol.as_mut() else {
            return Some(self.malformed("an idgen answer before the handshake", &conn.rbuf));
        };
        // Every HELLO_OK the handshake accepted has a valid layout.
        let layout = protocol.hello().layout().unwrap_or_default();
        loop {
            let (answer, used) = match protocol.decode(&conn.rbuf) {
                Ok(Some(r)) => r,
                Ok(None) => return None,
                Err(ClientError::Frame(e)) => {
                    if matches!(e, FrameError::IdTopBitSet { .. }) {
                        self.stats.sign_bit += 1;
                    }
                    return Some(self.malformed(&e.to_string(), &conn.rbuf));
                }
                Err(e) => return Some(self.malformed(&e.to_string(), &conn.rbuf)),
            };
            // The protocol matched the answer to the oldest request; this is its timing.
            let Some((sent, measured)) = self.inflight.pop_front() else {
                return Some(self.malformed("an answer with no request outstanding", &conn.rbuf));
            };
            match answer {
                Answer::Ids(ids) => self.answer_ids(sent, measured, now, ids.len(), ids.iter()),
                Answer::Values(values) => {
                    self.answer_ids(sent, measured, now, values.len(), values.iter())
                }
                Answer::Ranges(runs) => self.answer_ids(
                    sent,
                    measured,
                    now,
                    runs.total() as usize,
                    runs.iter()
                        .flat_map(|(first, n)| first..first + u64::from(n)),
                ),
                Answer::Refused(refusal) => {
                    let status = refusal.status;
                    let name = status
                        .name()
                        .map_or_else(|| status.to_string(), str::to_owned);
                    self.error(&name);
                    self.cfg.note(
                        &format!("status {}", status.code()),
                        &format!(
                            "{}: server answered {status}: {}",
                            self.addr, refusal.message
                        ),
                    );
                    self.answered(measured, now);
                    if refusal.after.closes() {
                        conn.rbuf.advance(used);
                        return Some(
                            self.abandon(&name, &format!("{status} closes the connection")),
                        );
                    }
                }
                Answer::Pong(token) => {
                    // Never asked for: no PING is sent.
                    self.inflight.push_front((sent, measured));
                    return Some(self.malformed(&format!("unexpected PONG {token}"), &conn.rbuf));
                }
                Answer::Uuids(uuids) if self.cfg.verify => {
                    // The protocol checked version, variant and order; the IDs the UUIDs were
                    // made from are what --verify keeps (unique, increasing per connection).
                    let ids: Result<Vec<u64>, _> = uuids
                        .iter()
                        .map(|u| layout.decode_uuid_v7(u).map(|d| d.id.0))
                        .collect();
                    match ids {
                        Ok(ids) => self.answer_ids(sent, measured, now, ids.len(), ids.into_iter()),
                        Err(e) => {
                            self.inflight.push_front((sent, measured));
                            return Some(self.malformed(
                                &format!("a UUID not of the node's layout: {e}"),
                                &conn.rbuf,
                            ));
                        }
                    }
                }
                Answer::Uuids(uuids) => {
                    self.answer_ids(sent, measured, now, uuids.len(), std::iter::empty())
                }
                // Masked IDs are unique but in no order: counted, not verified.
                Answer::MaskedIds(m) => {
                    self.answer_ids(sent, measured, now, m.ids().len(), std::iter::empty())
                }
            }
            conn.rbuf.advance(used);
        }
    }

    fn parse_redis(&mut self, conn: &mut Conn, now: Instant) -> Option<End> {
        loop {
            let (reply, used) = match redis::parse_reply(&conn.rbuf) {
                Ok(Some(r)) => r,
                Ok(None) => return None,
                Err(e) => return Some(self.malformed(&e, &conn.rbuf)),
            };
            let Some((sent, measured)) = self.inflight.pop_front() else {
                return Some(self.malformed("an answer with no request outstanding", &conn.rbuf));
            };
            match reply {
                Reply::Integer(n) => {
                    let batch = self.cfg.batch;
                    let first = n as i128 - batch as i128 + 1;
                    // Negative values wrap into the sign bit, which --verify reports.
                    let ids = (0..batch as i128).map(|k| (first + k) as u64);
                    self.answer_ids(sent, measured, now, batch as usize, ids);
                }
                Reply::Error(message) => {
                    let kind = message.split_whitespace().next().unwrap_or("ERR");
                    let name = format!("REDIS_{kind}");
                    self.error(&name);
                    self.cfg
                        .note(&name, &format!("{}: redis answered -{message}", self.addr));
                    self.answered(measured, now);
                }
            }
            conn.rbuf.advance(used);
        }
    }

    fn parse_http(&mut self, conn: &mut Conn, now: Instant) -> Option<End> {
        loop {
            let (response, used) = match http::parse_response(&conn.rbuf) {
                Ok(Some(r)) => r,
                Ok(None) => return None,
                Err(e) => return Some(self.malformed(&e, &conn.rbuf)),
            };
            let Some((sent, measured)) = self.inflight.pop_front() else {
                return Some(self.malformed("an answer with no request outstanding", &conn.rbuf));
            };
            let close = response.close;
            if response.status == 200 {
                match http::parse_ids(response.body, self.cfg.batch) {
                    Ok(ids) => self.answer_ids(sent, measured, now, ids.len(), ids.into_iter()),
                    Err(e) => {
                        self.inflight.push_front((sent, measured));
                        return Some(self.malformed(&e, &conn.rbuf));
                    }
                }
            } else {
                let status = response.status;
                let name = format!("HTTP_{status}");
                self.error(&name);
                let text = String::from_utf8_lossy(&response.body[..response.body.len().min(300)]);
                self.cfg.note(
                    &name,
                    &format!("{}: server answered HTTP {status}: {text}", self.addr),
                );
                self.answered(measured, now);
            }
            conn.rbuf.advance(used);
            if close {
                return Some(self.abandon(
                    CONNECTION_LOST,
                    "the server closes the connection (Connection: close)",
                ));
            }
        }
    }

    fn answered(&mut self, measured: bool, now: Instant) {
        self.interval.requests += 1;
        if measured {
            self.stats.requests += 1;
            self.stats.last_answer = Some(now);
        }
    }

    fn answer_ids(
        &mut self,
        sent: Instant,
        measured: bool,
        now: Instant,
        count: usize,
        ids: impl Iterator<Item = u64>,
    ) {
        let ns = now.saturating_duration_since(sent).as_nanos();
        let ns = u64::try_from(ns).unwrap_or(u64::MAX).max(1);
        self.interval.hist.saturating_record(ns);
        self.interval.ids += count as u64;
        self.answered(measured, now);
        if measured {
            self.stats.hist.saturating_record(ns);
            self.stats.ids += count as u64;
        }
        if count != self.cfg.batch as usize {
            self.stats.wrong_count += 1;
        }
        if self.cfg.verify {
            for id in ids {
                let chunk = match self.stats.id_chunks.last_mut() {
                    Some(c) if c.len() < c.capacity() => c,
                    _ => {
                        self.stats.id_chunks.push(Vec::with_capacity(ID_CHUNK));
                        self.stats.id_chunks.last_mut().expect("just pushed")
                    }
                };
                chunk.push(id);
                if id >> 63 != 0 {
                    self.stats.sign_bit += 1;
                }
                if self.prev_id.is_some_and(|prev| id <= prev) {
                    self.stats.out_of_order += 1;
                }
                self.prev_id = Some(id);
            }
        }
    }
}
