//! `clients/vectors/connect.json`: a node listening on one loopback address only is reached
//! through a name that resolves to both (`::1` first, then `127.0.0.1`), in plaintext and over
//! TLS verified for that name. The fake nodes run in the test; the test binary then re-runs
//! the test (its probe half, `IDGEN_CONNECT_PROBE` set) in a mount namespace with a default
//! Debian `/etc/hosts` (`clients/with-debian-hosts.sh`), where it connects.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use idgen_client::{blocking, Client, ClientOptions, Error, TlsConfig};
use idgen_testkit::certs::TestCa;
use idgen_testkit::fake::{Config, FakeServer, ServerTls};
use serde_json::Value;

const NAME: &str = "a_name_that_resolves_to_several_addresses_reaches_the_node_on_any_of_them";

fn options() -> ClientOptions {
    ClientOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
    }
}

#[test]
fn a_name_that_resolves_to_several_addresses_reaches_the_node_on_any_of_them() {
    if let Ok(targets) = std::env::var("IDGEN_CONNECT_PROBE") {
        return probe(&targets);
    }
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let vectors: Value =
        serde_json::from_slice(&std::fs::read(clients.join("vectors/connect.json")).unwrap())
            .unwrap();
    let cases = vectors["cases"].as_array().expect("connect.json: cases");
    assert!(!cases.is_empty());
    let ca = TestCa::new("connect");
    let mut servers = Vec::new();
    let mut targets = vec![format!("ca={}", ca.ca.display())];
    for case in cases {
        let listen: IpAddr = case["listen"].as_str().unwrap().parse().unwrap();
        let dial = case["dial"].as_str().unwrap();
        for tls in [None, Some(ServerTls::new(&ca.server()))] {
            let kind = if tls.is_some() { "tls" } else { "plain" };
            let server = FakeServer::spawn(Config {
                listen: Some(listen),
                tls,
                ..Config::default()
            });
            assert_eq!(server.addr.ip(), listen);
            targets.push(format!("{kind}={dial}:{}", server.addr.port()));
            servers.push(server);
        }
    }
    let out = Command::new("bash")
        .arg(clients.join("with-debian-hosts.sh"))
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env("IDGEN_CONNECT_PROBE", targets.join(" "))
        .output()
        .expect("run the probe");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "probe failed:\n{text}");
    assert!(
        text.contains(&format!("connected: {}", servers.len())),
        "probe did not connect to every node:\n{text}"
    );
}

/// The half that runs in the namespace: IDs from each `plain=HOST:PORT` and `tls=HOST:PORT`
/// (verified against `ca=FILE`) through the blocking client, which resolves on the calling
/// thread, and through the async one, which resolves with tokio.
fn probe(targets: &str) {
    let mut tls = None;
    let mut connected = 0;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for target in targets.split_whitespace() {
        let (kind, addr) = target.split_once('=').unwrap();
        let ids = match kind {
            "ca" => {
                tls = Some(TlsConfig::builder().ca_file(addr).build().unwrap());
                continue;
            }
            "plain" => {
                let a = rt.block_on(async {
                    let c = Client::connect_with(addr, options()).await?;
                    c.next_ids(3).await
                });
                let b = blocking::Client::connect_with(addr, options()).and_then(|c| c.next_ids(3));
                (a, b)
            }
            "tls" => {
                let tls = tls.as_ref().expect("ca= comes first");
                let a = rt.block_on(async {
                    let c = Client::connect_tls(addr, options(), tls).await?;
                    c.next_ids(3).await
                });
                let b =
                    blocking::Client::connect_tls(addr, options(), tls).and_then(|c| c.next_ids(3));
                (a, b)
            }
            other => panic!("unknown probe target kind {other}"),
        };
        let (a, b) = (
            ids.0.unwrap_or_else(|e| panic!("{target} (async): {e}")),
            ids.1,
        );
        let b = b.unwrap_or_else(|e| panic!("{target} (blocking): {e}"));
        println!("{target}: ids {a:?} {b:?}");
        connected += 1;
    }
    println!("connected: {connected}");
}

/// A loopback address where a TCP connect gets no answer at all: a listener whose accept
/// queue (backlog 0) is full, so that the kernel drops further SYNs. Keep it (and its held
/// connections) alive while it is used.
async fn silent() -> (
    SocketAddr,
    tokio::net::TcpListener,
    Vec<tokio::net::TcpStream>,
) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..16 {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(s)) => held.push(s),
            Ok(Err(e)) => panic!("connect to the filling listener: {e}"),
            Err(_) => return (addr, listener, held),
        }
    }
    panic!("a listener with a full accept queue still accepted 16 connects");
}

fn within(connect_timeout: Duration) -> ClientOptions {
    ClientOptions {
        connect_timeout,
        request_timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn a_silent_first_address_leaves_time_for_the_next() {
    let (quiet, _l, _h) = silent().await;
    let live = FakeServer::start(Config::default()).await;
    let start = Instant::now();
    let client = Client::connect_with(&[quiet, live.addr][..], within(Duration::from_secs(1)))
        .await
        .expect("the second address is tried with time left");
    assert_eq!(client.next_ids(3).await.unwrap().len(), 3);
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn silent_addresses_fail_within_one_connect_timeout() {
    let (a, _la, _ha) = silent().await;
    let (b, _lb, _hb) = silent().await;
    let (c, _lc, _hc) = silent().await;
    let start = Instant::now();
    let r = Client::connect_with(&[a, b, c][..], within(Duration::from_millis(600))).await;
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    assert!(
        start.elapsed() < Duration::from_millis(1200),
        "{:?}",
        start.elapsed()
    );
}
