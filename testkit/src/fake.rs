//! A scriptable in-test idgen server on 127.0.0.1:0, built on the protocol crate's
//! server-side decode/encode functions: the client's tests fail over between such servers,
//! the load tester's tests count the faults it injects.
//!
//! Each GET_IDS or PING takes the next step of the server's script ([`Control::push`],
//! [`Control::script_at`]); without one it is answered normally (or refused, in
//! [`Mode::Refuse`]). The server runs on the caller's Tokio runtime ([`FakeServer::start`])
//! or on its own ([`FakeServer::spawn`], for tests without a runtime).
//!
//! With [`Config::tls`] it speaks TLS from the first byte ([`ServerTls`]: a certificate from
//! a [`TestCa`](crate::TestCa), optionally requiring client certificates), offering the
//! ALPN protocol `idgen/1` as a node does.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use idgen_id::WorkerRange;
use idgen_protocol::{
    decode_request, encode_error, encode_hello_ok, encode_ids, encode_pong, Decoded, Limits,
    Request, ServerConnState, ServerHello, Status,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::CertFiles;

/// What the server does instead of answering the next GET_IDS or PING normally.
#[derive(Debug, Clone)]
pub enum Action {
    /// Answer GET_IDS with the last ID of this connection, `count` times (a duplicate,
    /// hence also out of order).
    Duplicate,
    /// Answer GET_IDS with fresh IDs lower than every ID handed out so far.
    OutOfOrder,
    /// Answer GET_IDS with one ID more than asked.
    WrongCount,
    /// Answer with this ERROR; close afterwards if the status says so.
    Error(Status, &'static str),
    /// Close the connection without answering this request or any later one.
    Drop,
    /// Answer normally (a no-op step in a script).
    Serve,
    /// Answer normally after this long (reading nothing meanwhile).
    Delay(Duration),
    /// Send these bytes instead of the answer.
    Raw(Vec<u8>),
    /// Stop answering; keep the socket open (forever with `None`, else for that long,
    /// then close).
    Hang(Option<Duration>),
}

#[derive(Debug, Clone)]
pub struct Config {
    pub max_batch: u32,
    /// Send these bytes instead of a HELLO_OK.
    pub hello_raw: Option<Vec<u8>>,
    /// Accept connections but never answer the HELLO.
    pub silent_handshake: bool,
    /// The first ID's sequence offset: give each fake node of one test its own range
    /// (e.g. `k << 40`) so that their IDs cannot coincide.
    pub first_seq: u64,
    /// Where the IDs come from.
    pub ids: Ids,
    /// Speak TLS (from the first byte) instead of plaintext.
    pub tls: Option<ServerTls>,
    /// The address to listen on instead of 127.0.0.1, e.g. `::1`.
    pub listen: Option<std::net::IpAddr>,
    /// The port to listen on (0, the default: any free one).
    pub port: u16,
    /// Whether a PING takes the script's next step too (else only GET_IDS does).
    pub script_pings: bool,
}

/// The ALPN protocol a node offers on its TLS listener for the ID protocol.
pub const ALPN: &[u8] = b"idgen/1";

/// A fake server's TLS: its certificate and key, and, for mutual TLS, the authority its
/// clients' certificates must chain to. Cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

impl ServerTls {
    /// TLS with `server`'s certificate; no client certificate asked for.
    pub fn new(server: &CertFiles) -> ServerTls {
        Self::build(server, None)
    }

    /// Mutual TLS: `server`'s certificate, and every client must present a certificate
    /// that chains to `client_ca_pem` (PEM).
    pub fn requiring_client_certs(server: &CertFiles, client_ca_pem: &str) -> ServerTls {
        Self::build(server, Some(client_ca_pem))
    }

    fn build(server: &CertFiles, client_ca_pem: Option<&str>) -> ServerTls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(server.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("server certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).expect("server key PEM");
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = match client_ca_pem {
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                    roots.add(cert.expect("client CA PEM")).expect("client CA");
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("client certificate verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .expect("server certificate and key");
        config.alpn_protocols = vec![ALPN.to_vec()];
        ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        }
    }
}

/// Where a fake server's IDs come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ids {
    /// One counter for the whole server: IDs unique and increasing everywhere.
    #[default]
    Shared,
    /// Every connection counts from the same start: connections duplicate each other.
    PerConnection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_batch: 1000,
            hello_raw: None,
            silent_handshake: false,
            first_seq: 0,
            ids: Ids::Shared,
            tls: None,
            listen: None,
            port: 0,
            script_pings: true,
        }
    }
}

pub const EPOCH_MS: u64 = 1_704_067_200_000;

pub fn hello(max_batch: u32) -> ServerHello {
    ServerHello {
        version: 1,
        epoch_ms: EPOCH_MS,
        timestamp_bits: 41,
        worker_bits: 10,
        sequence_bits: 12,
        region_bits: 0,
        max_batch,
        max_request_frame: 64,
        workers: WorkerRange::new(512, 512),
        shard: 1,
    }
}

/// How the server answers GET_IDS when no script step is queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Answer normally.
    #[default]
    Serve,
    /// Answer every GET_IDS with this ERROR (closing afterwards if the status says so).
    Refuse(Status),
}

#[derive(Debug, Default)]
pub struct Control {
    mode: Mutex<Mode>,
    /// Killed: every open connection is closed, and new ones are closed right after
    /// accept (before the handshake), until revived.
    down: std::sync::atomic::AtomicBool,
    kill: tokio::sync::Notify,
    /// GET_IDS answered with the `Refuse` mode's ERROR.
    pub refused: AtomicUsize,
    script: Mutex<VecDeque<Action>>,
    /// The count of every GET_IDS served normally, in order.
    pub get_ids: Mutex<Vec<u32>>,
    pub pings: AtomicUsize,
    /// Every GET_IDS received after the handshake, scripted or not.
    pub id_requests: AtomicUsize,
    pub connections: AtomicUsize,
    /// TLS mode: the ALPN protocol each completed handshake agreed on, in order.
    pub tls_alpn: Mutex<Vec<Option<Vec<u8>>>>,
    /// TLS mode: whether each completed handshake came with a client certificate.
    pub tls_client_certs: Mutex<Vec<bool>>,
    /// TLS mode: the error of every handshake that failed.
    pub tls_failures: Mutex<Vec<String>>,
    /// Next sequence number; IDs are `base | seq` with the default layout's worker 512.
    next: AtomicU64,
    /// Next ID of [`Action::OutOfOrder`], below every ID of the counter.
    next_low: AtomicU64,
}

impl Control {
    pub fn push(&self, action: Action) {
        self.script.lock().unwrap().push_back(action);
    }

    /// Replaces the script: request number `n` (from 0, over all connections) gets the
    /// action given for `n`, every other one is served.
    pub fn script_at(&self, steps: &[(u64, Action)]) {
        let len = steps.iter().map(|(n, _)| n + 1).max().unwrap_or(0);
        let mut script: VecDeque<Action> = (0..len).map(|_| Action::Serve).collect();
        for (n, action) in steps {
            script[*n as usize] = action.clone();
        }
        *self.script.lock().unwrap() = script;
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Close every connection and refuse new ones (as a crashed node would, minus
    /// the refused connect: a new connection is accepted and closed at once).
    pub fn kill(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.kill.notify_waiters();
    }

    /// Serve connections again after [`Control::kill`].
    pub fn revive(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// IDs served normally, summed.
    pub fn ids_served(&self) -> u64 {
        self.get_ids
            .lock()
            .unwrap()
            .iter()
            .map(|&c| u64::from(c))
            .sum()
    }

    pub fn get_ids_counts(&self) -> Vec<u32> {
        self.get_ids.lock().unwrap().clone()
    }

    /// `count` strictly increasing IDs (worker 512, a fixed timestamp, then a counter
    /// that spills into the timestamp: still 63-bit and increasing), from the server's
    /// counter or from `own` (the connection's, with [`Ids::PerConnection`]).
    fn ids(&self, count: u32, own: Option<&mut u64>) -> Vec<u64> {
        let start = match own {
            Some(next) => {
                let start = *next;
                *next += u64::from(count);
                start
            }
            None => self.next.fetch_add(u64::from(count), Ordering::Relaxed),
        };
        (start..start + u64::from(count))
            .map(|i| ID_BASE + i)
            .collect()
    }
}

/// The first ID of a fake server's counter (sequence 0).
pub const ID_BASE: u64 = (63_072_000_123u64 << 22) | (512 << 12);

pub struct FakeServer {
    pub addr: SocketAddr,
    pub control: Arc<Control>,
    task: tokio::task::JoinHandle<()>,
    /// The server's own runtime ([`FakeServer::spawn`]).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl FakeServer {
    /// Starts the server on a runtime of its own, for a test without one; it stops when
    /// dropped.
    pub fn spawn(config: Config) -> FakeServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let mut server = rt.block_on(Self::start(config));
        server.runtime = Some(rt);
        server
    }

    /// Starts the server on the current Tokio runtime.
    pub async fn start(config: Config) -> FakeServer {
        let ip = config
            .listen
            .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
        let listener = TcpListener::bind((ip, config.port)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let control = Arc::new(Control::default());
        control.next.store(config.first_seq, Ordering::Relaxed);
        control.next_low.store(1, Ordering::Relaxed);
        let ctl = control.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                ctl.connections.fetch_add(1, Ordering::Relaxed);
                if ctl.is_down() {
                    drop(sock);
                    continue;
                }
                match &config.tls {
                    None => {
                        tokio::spawn(serve(sock, ctl.clone(), config.clone()));
                    }
                    Some(tls) => {
                        let acceptor = tls.acceptor.clone();
                        let (ctl, config) = (ctl.clone(), config.clone());
                        tokio::spawn(async move {
                            let accepted = tokio::time::timeout(
                                Duration::from_secs(10),
                                acceptor.accept(sock),
                            )
                            .await;
                            match accepted {
                                Ok(Ok(stream)) => {
                                    let session = stream.get_ref().1;
                                    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
                                    let cert = session.peer_certificates().is_some();
                                    ctl.tls_alpn.lock().unwrap().push(alpn);
                                    ctl.tls_client_certs.lock().unwrap().push(cert);
                                    serve(stream, ctl, config).await;
                                }
                                Ok(Err(e)) => ctl.tls_failures.lock().unwrap().push(e.to_string()),
                                Err(_) => ctl
                                    .tls_failures
                                    .lock()
                                    .unwrap()
                                    .push("handshake timed out".into()),
                            }
                        });
                    }
                }
            }
        });
        FakeServer {
            addr,
            control,
            task,
            runtime: None,
        }
    }
}

async fn serve<S>(mut sock: S, ctl: Arc<Control>, config: Config)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let limits = Limits {
        max_request_frame: 64,
        max_batch: config.max_batch,
    };
    let mut state = ServerConnState::new();
    let mut buf = BytesMut::with_capacity(4096);
    let mut out: Vec<u8> = Vec::new();
    // This connection's counter (Ids::PerConnection) and last ID sent.
    let mut own_next = config.first_seq;
    let mut last: u64 = 0;
    loop {
        let killed = ctl.kill.notified();
        tokio::pin!(killed);
        killed.as_mut().enable();
        if ctl.is_down() {
            return;
        }
        let read = tokio::select! {
            r = sock.read_buf(&mut buf) => r,
            () = killed => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        out.clear();
        loop {
            let (decoded, used) = match decode_request(&buf, &limits) {
                Ok(None) => break,
                Ok(Some(frame)) => frame,
                Err(e) => {
                    encode_error(e.status(), &e.to_string(), &mut out);
                    let _ = send(&mut sock, &out).await;
                    return;
                }
            };
            buf.advance(used);
            if let Err(e) = state.check(&decoded) {
                encode_error(e.status(), &e.to_string(), &mut out);
                let _ = send(&mut sock, &out).await;
                return;
            }
            let request = match decoded {
                Decoded::Reject { status, message } => {
                    encode_error(status, message, &mut out);
                    continue;
                }
                Decoded::Request(Request::Hello { .. }) => {
                    if config.silent_handshake {
                        hang(sock, None).await;
                        return;
                    }
                    match &config.hello_raw {
                        Some(raw) => out.extend_from_slice(raw),
                        None => encode_hello_ok(&hello(config.max_batch), &mut out)
                            .expect("512..1024 fits HELLO_OK"),
                    }
                    continue;
                }
                Decoded::Request(r) => r,
            };
            let ids = matches!(request, Request::GetIds { .. });
            if ids {
                ctl.id_requests.fetch_add(1, Ordering::Relaxed);
            }
            let mut action = if ids || config.script_pings {
                ctl.script.lock().unwrap().pop_front()
            } else {
                None
            };
            if action.is_none() && matches!(request, Request::GetIds { .. }) {
                if let Mode::Refuse(status) = *ctl.mode.lock().unwrap() {
                    ctl.refused.fetch_add(1, Ordering::Relaxed);
                    action = Some(Action::Error(status, "refused (test mode)"));
                }
            }
            if let Some(Action::Delay(d)) = action {
                tokio::time::sleep(d).await;
            }
            let own = (config.ids == Ids::PerConnection).then_some(&mut own_next);
            match (action, request) {
                (Some(Action::Duplicate), Request::GetIds { count }) => {
                    encode_ids(&vec![last; count as usize], &mut out);
                }
                (Some(Action::OutOfOrder), Request::GetIds { count }) => {
                    let first = ctl.next_low.fetch_add(u64::from(count), Ordering::Relaxed);
                    let ids: Vec<u64> = (first..first + u64::from(count)).collect();
                    last = *ids.last().unwrap_or(&last);
                    encode_ids(&ids, &mut out);
                }
                (Some(Action::WrongCount), Request::GetIds { count }) => {
                    let ids = ctl.ids(count + 1, own);
                    last = *ids.last().unwrap_or(&last);
                    encode_ids(&ids, &mut out);
                }
                (
                    None
                    | Some(
                        Action::Serve
                        | Action::Delay(_)
                        | Action::Duplicate
                        | Action::OutOfOrder
                        | Action::WrongCount,
                    ),
                    request,
                ) => match request {
                    Request::GetIds { count } => {
                        ctl.get_ids.lock().unwrap().push(count);
                        let ids = ctl.ids(count, own);
                        last = *ids.last().unwrap_or(&last);
                        encode_ids(&ids, &mut out);
                    }
                    Request::Ping { token } => {
                        ctl.pings.fetch_add(1, Ordering::Relaxed);
                        encode_pong(token, &mut out);
                    }
                    // The fake speaks version 1 (its HELLO_OK says so): version-1 decoding
                    // never yields GET_RANGES, GET_VALUES, GET_UUIDS or GET_IDS_WITH, and
                    // HELLO was answered above.
                    Request::Hello { .. }
                    | Request::GetRanges { .. }
                    | Request::GetValues { .. }
                    | Request::GetValuesHere { .. }
                    | Request::GetUuids { .. }
                    | Request::GetIdsWith(_) => unreachable!(),
                },
                (Some(Action::Error(status, message)), _) => {
                    encode_error(status, message, &mut out);
                    if status.closes_connection() {
                        let _ = send(&mut sock, &out).await;
                        return;
                    }
                }
                (Some(Action::Raw(bytes)), _) => out.extend_from_slice(&bytes),
                (Some(Action::Drop), _) => {
                    let _ = send(&mut sock, &out).await;
                    return;
                }
                (Some(Action::Hang(limit)), _) => {
                    let _ = send(&mut sock, &out).await;
                    hang(sock, limit).await;
                    return;
                }
            }
        }
        if send(&mut sock, &out).await.is_err() {
            return;
        }
    }
}

/// Write `out` and flush it (a TLS stream may hold the last record until flushed).
async fn send<S: AsyncWrite + Unpin>(sock: &mut S, out: &[u8]) -> std::io::Result<()> {
    sock.write_all(out).await?;
    sock.flush().await
}

/// Read and discard until EOF (or until `limit` has passed), answering nothing.
async fn hang<S: AsyncRead + Unpin>(mut sock: S, limit: Option<Duration>) {
    let drain = async {
        let mut sink = [0u8; 4096];
        while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    match limit {
        Some(d) => {
            let _ = tokio::time::timeout(d, drain).await;
        }
        None => drain.await,
    }
}
