//! TLS and mutual TLS on a node's listeners, driven by a client of the test's own (rustls,
//! blocking) with certificates the tests generate: good, from the wrong authority, expired,
//! missing. Hostile clients (garbage, a stalled handshake, the wrong protocol on either port)
//! are closed while the node goes on serving others; a changed certificate is picked up
//! without a restart; the HTTP listeners close unfinished requests.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idgen_protocol::client::Handshake;
use idgen_protocol::{Request, Response};
use idgen_testkit::certs::client_config;
use idgen_testkit::node::{http, try_http, try_https};
use idgen_testkit::{closes_within, CertFiles, NodeProc, TestCa, TestConn, Timeouts, Validity};

const ALPN: &[u8] = b"idgen/1";

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// A node with the ID protocol over TLS beside plaintext, serving `server`'s certificate, with
/// `client_ca` required of clients when given, and `extra` flags.
fn tls_node(server: &CertFiles, client_ca: Option<&TestCa>, extra: &[&str]) -> NodeProc {
    let mut args = vec![
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        path(&server.cert),
        "--tls-key",
        path(&server.key),
        "--admin-listen",
        "127.0.0.1:0",
    ];
    if let Some(ca) = client_ca {
        args.extend(["--tls-client-ca", path(&ca.ca)]);
    }
    args.extend_from_slice(extra);
    NodeProc::start(&args)
}

fn open_tls(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<TestConn, String> {
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        io: Duration::from_secs(5),
    };
    TestConn::try_open_tls(
        addr,
        config,
        "localhost",
        Handshake::offering(1, 1),
        timeouts,
    )
}

/// IDs from a TLS connection, checking it is the protocol it should be.
fn tls_ids(addr: SocketAddr, config: Arc<rustls::ClientConfig>, n: u32) -> Vec<u64> {
    let mut c = open_tls(addr, config).unwrap_or_else(|e| panic!("TLS connection: {e}"));
    assert_eq!(
        c.tls.as_ref().and_then(|t| t.alpn_protocol()),
        Some(ALPN),
        "the ID protocol's TLS listener negotiates ALPN idgen/1"
    );
    c.get_ids(n).expect("IDs over TLS")
}

/// The connection is refused: the TLS handshake or the first exchange after it fails, and
/// no ID comes back.
fn refused(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> String {
    match open_tls(addr, config) {
        Err(e) => e,
        Ok(mut c) => match c.try_get_ids(1) {
            Err(e) => e,
            Ok(answer) => panic!("a refused client got an answer: {answer:?}"),
        },
    }
}

fn metric(admin: SocketAddr, line_prefix: &str) -> Option<f64> {
    let (status, body) = http(admin, "GET", "/metrics", None);
    assert_eq!(status, 200);
    body.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn plaintext_and_tls_on_two_addresses_issue_from_one_space() {
    let ca = TestCa::new("idgen test ca");
    let node = tls_node(&ca.server(), None, &[]);
    let tls_addr = node.tls.expect("a TLS address in the banner");
    assert_ne!(tls_addr, node.addr, "plaintext and TLS listen apart");
    let config = client_config(&ca.ca_pem, None, ALPN);
    let mut seen = HashSet::new();
    for _ in 0..5 {
        for id in tls_ids(tls_addr, Arc::clone(&config), 1000) {
            assert!(seen.insert(id), "duplicate {id} over TLS");
        }
        let mut plain = TestConn::open(node.addr);
        for id in plain.get_ids(1000).expect("plaintext IDs") {
            assert!(seen.insert(id), "duplicate {id} over plaintext");
        }
    }
    assert_eq!(seen.len(), 10_000);
    let admin = node.admin.expect("admin");
    assert_eq!(
        metric(
            admin,
            "idgen_tls_handshakes_total{listener=\"protocol\",result=\"ok\"}"
        ),
        Some(5.0)
    );
    assert_eq!(
        metric(
            admin,
            "idgen_tls_client_connections_total{identity=\"anonymous\"}"
        ),
        Some(5.0)
    );
    assert!(metric(admin, "idgen_tls_certificate_expiry_timestamp_seconds").unwrap_or(0.0) > 1.7e9);
}

#[test]
fn tls_only_node_serves_without_a_plaintext_port() {
    let ca = TestCa::new("idgen test ca");
    let node = tls_node(&ca.server(), None, &["--listen", "off"]);
    assert_eq!(Some(node.addr), node.tls);
    assert!(
        !node.stdout.iter().any(|l| l.starts_with("listening on ")),
        "no plaintext listener: {:?}",
        node.stdout
    );
    let ids = tls_ids(node.addr, client_config(&ca.ca_pem, None, ALPN), 10);
    assert_eq!(ids.len(), 10);
}

#[test]
fn server_certificate_is_verified_by_the_client() {
    let ca = TestCa::new("idgen test ca");
    let other = TestCa::new("unrelated ca");
    let node = tls_node(&ca.server(), None, &[]);
    let tls_addr = node.tls.unwrap();
    // A client that trusts another authority refuses the node.
    let e = refused(tls_addr, client_config(&other.ca_pem, None, ALPN));
    assert!(
        e.contains("UnknownIssuer") || e.contains("certificate"),
        "{e}"
    );
    // A client that dials a name the certificate does not carry refuses it.
    let timeouts = Timeouts::default();
    let e = TestConn::try_open_tls(
        tls_addr,
        client_config(&ca.ca_pem, None, ALPN),
        "db.example",
        Handshake::offering(1, 1),
        timeouts,
    )
    .err()
    .expect("the wrong name is refused");
    assert!(e.contains("NotValidForName") || e.contains("name"), "{e}");
    // A node serving an expired certificate is refused.
    let expired = ca.server_for(&["localhost"], Validity::Expired, "expired-server");
    let stale = tls_node(&expired, None, &[]);
    let e = refused(stale.tls.unwrap(), client_config(&ca.ca_pem, None, ALPN));
    assert!(e.contains("Expired") || e.contains("expired"), "{e}");
    assert!(
        stale.log().contains("tls_certificate_expired"),
        "the node says its certificate has expired"
    );
}

#[test]
fn mutual_tls_admits_only_certificates_of_the_client_authority() {
    let ca = TestCa::new("idgen test ca");
    let clients = TestCa::new("idgen client ca");
    let rogue = TestCa::new("rogue ca");
    let node = tls_node(&ca.server(), Some(&clients), &[]);
    let tls_addr = node.tls.unwrap();
    let good = clients.client("spiffe://cluster.local/ns/billing/sa/api");
    let good_config = client_config(&ca.ca_pem, Some(&good), ALPN);
    assert_eq!(tls_ids(tls_addr, Arc::clone(&good_config), 100).len(), 100);

    // No certificate, one from another authority, an expired one, one not yet valid.
    refused(tls_addr, client_config(&ca.ca_pem, None, ALPN));
    let wrong = rogue.client("spiffe://cluster.local/ns/billing/sa/api");
    refused(tls_addr, client_config(&ca.ca_pem, Some(&wrong), ALPN));
    let expired = clients.client_with("billing", Validity::Expired);
    refused(tls_addr, client_config(&ca.ca_pem, Some(&expired), ALPN));
    let early = clients.client_with("billing", Validity::NotYet);
    refused(tls_addr, client_config(&ca.ca_pem, Some(&early), ALPN));

    // The node still serves the good client, and the plaintext port.
    assert_eq!(tls_ids(tls_addr, Arc::clone(&good_config), 100).len(), 100);
    TestConn::open(node.addr).get_ids(10).expect("plaintext");
    let admin = node.admin.unwrap();
    assert_eq!(
        metric(
            admin,
            "idgen_tls_handshakes_total{listener=\"protocol\",result=\"failed\"}"
        ),
        Some(4.0)
    );
    assert_eq!(
        metric(
            admin,
            "idgen_tls_client_connections_total{identity=\"spiffe://cluster.local/ns/billing/sa/api\"}"
        ),
        Some(2.0),
        "the client's identity (its URI SAN) labels its connections"
    );
    assert!(node.log().contains("tls_handshake_failed"));
}

#[test]
fn hostile_clients_are_closed_and_others_served() {
    let ca = TestCa::new("idgen test ca");
    let node = tls_node(&ca.server(), None, &["--handshake-timeout", "1s"]);
    let tls_addr = node.tls.unwrap();
    let config = client_config(&ca.ca_pem, None, ALPN);

    // Garbage instead of a ClientHello: closed at once.
    let mut garbage = TcpStream::connect(tls_addr).unwrap();
    garbage
        .write_all(b"\x00\x01garbage that is not a TLS record\r\n\r\n")
        .unwrap();
    assert!(closes_within(&mut garbage, Duration::from_secs(2)));

    // The plaintext protocol's HELLO on the TLS port: not TLS, closed, and no protocol answer.
    let mut plain_on_tls = TestConn::try_raw(tls_addr, Timeouts::default()).unwrap();
    plain_on_tls
        .send_raw(&Handshake::offering(1, 1).hello())
        .unwrap();
    let mut first = [0u8; 1];
    let answered = plain_on_tls.stream.read(&mut first).unwrap_or(0);
    // What comes back, if anything, is a TLS alert record (content type 21), never a frame.
    assert!(answered == 0 || first[0] == 21, "answered {first:?}");
    assert!(closes_within(
        &mut plain_on_tls.stream,
        Duration::from_secs(2)
    ));

    // A handshake that stalls: half a ClientHello, then nothing. Closed at the timeout.
    let mut stall = TcpStream::connect(tls_addr).unwrap();
    stall
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    let started = Instant::now();
    assert!(
        closes_within(&mut stall, Duration::from_secs(4)),
        "a stalled handshake is closed"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "not before the timeout"
    );
    // A connection that sends nothing at all, likewise.
    let mut silent = TcpStream::connect(tls_addr).unwrap();
    assert!(closes_within(&mut silent, Duration::from_secs(4)));

    // A TLS client on the plaintext port: its ClientHello is not a protocol frame; refused.
    let e = refused(node.addr, Arc::clone(&config));
    assert!(!e.is_empty());

    // Throughout, a good client is served on both ports.
    assert_eq!(tls_ids(tls_addr, Arc::clone(&config), 10).len(), 10);
    TestConn::open(node.addr).get_ids(10).expect("plaintext");
    let admin = node.admin.unwrap();
    assert!(
        metric(
            admin,
            "idgen_tls_handshakes_total{listener=\"protocol\",result=\"timeout\"}"
        )
        .unwrap_or(0.0)
            >= 2.0
    );
}

#[test]
fn a_changed_certificate_is_served_without_a_restart() {
    let first = TestCa::new("first ca");
    let second = TestCa::new("second ca");
    let files = first.server();
    let node = tls_node(&files, None, &["--tls-reload-interval", "200ms"]);
    let tls_addr = node.tls.unwrap();
    let trusts_first = client_config(&first.ca_pem, None, ALPN);
    let trusts_second = client_config(&second.ca_pem, None, ALPN);
    let mut open = open_tls(tls_addr, Arc::clone(&trusts_first)).expect("first certificate");
    open.get_ids(1).expect("IDs");

    // A broken file (the key half written): the node keeps serving the certificate it has.
    std::fs::write(&files.key, "-----BEGIN PRIVATE KEY-----\nAAAA").unwrap();
    let admin = node.admin.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(admin, "idgen_tls_reloads_total{result=\"failed\"}") != Some(1.0) {
        assert!(Instant::now() < deadline, "the failed reload is counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    tls_ids(tls_addr, Arc::clone(&trusts_first), 1);

    // The renewed certificate and key, from another authority, replace the files.
    let renewed = second.server();
    std::fs::write(&files.cert, &renewed.cert_pem).unwrap();
    std::fs::write(&files.key, &renewed.key_pem).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_tls(tls_addr, Arc::clone(&trusts_second)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate is served"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    refused(tls_addr, trusts_first);
    // The connection opened before the change goes on.
    open.get_ids(1)
        .expect("an open connection outlives the reload");
    assert!(metric(admin, "idgen_tls_reloads_total{result=\"applied\"}").unwrap_or(0.0) >= 1.0);
}

#[test]
fn https_id_api_and_admin_port() {
    let ca = TestCa::new("idgen test ca");
    let clients = TestCa::new("idgen client ca");
    let server = ca.server();
    let node = NodeProc::start(&[
        "--tls-cert",
        path(&server.cert),
        "--tls-key",
        path(&server.key),
        "--tls-client-ca",
        path(&clients.ca),
        "--tls-http",
        "true",
        "--tls-admin",
        "tls",
        "--http-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    assert!(node
        .stdout
        .iter()
        .any(|l| l.starts_with("HTTP ID API on https://")));
    assert!(node
        .stdout
        .iter()
        .any(|l| l.starts_with("admin on https://")));
    let http_addr = node.http.unwrap();
    let admin = node.admin.unwrap();
    let t = Duration::from_secs(5);
    let me = clients.client("billing.svc");
    let with_cert = client_config(&ca.ca_pem, Some(&me), b"http/1.1");
    let (status, body) = try_https(
        http_addr,
        Arc::clone(&with_cert),
        "localhost",
        "POST",
        "/ids",
        None,
        t,
    )
    .expect("POST /ids over HTTPS");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"id\""), "{body}");
    // The HTTPS ID API asks for client certificates like the ID protocol's TLS listener.
    let anonymous = client_config(&ca.ca_pem, None, b"http/1.1");
    assert!(try_https(
        http_addr,
        Arc::clone(&anonymous),
        "localhost",
        "POST",
        "/ids",
        None,
        t
    )
    .is_err());
    // Plain HTTP on the HTTPS port gets no answer.
    assert!(try_http(http_addr, "POST", "/ids", None, t).is_err());
    // The admin port: TLS without client certificates (probes and scrapers reach it).
    let (status, metrics) =
        try_https(admin, anonymous, "localhost", "GET", "/metrics", None, t).expect("metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("idgen_tls_client_connections_total{identity=\"billing.svc\"} 1"));
    assert!(try_http(admin, "GET", "/health/live", None, t).is_err());
}

/// Connects and sends `bytes`: a request that never finishes.
fn unfinished(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(bytes).unwrap();
    s
}

#[test]
fn http_listeners_close_unfinished_requests() {
    let node = NodeProc::start(&[
        "--http-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--http-request-timeout",
        "1s",
        "--admin-request-timeout",
        "1s",
    ]);
    for (name, addr) in [
        ("the HTTP ID API", node.http.unwrap()),
        ("the admin port", node.admin.unwrap()),
    ] {
        let path = if name == "the admin port" {
            "/health/live"
        } else {
            "/ids/batch"
        };
        let head = unfinished(
            addr,
            format!("POST {path} HTTP/1.1\r\nHost: x\r\n").as_bytes(),
        );
        let short_body = unfinished(
            addr,
            format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{\"co")
                .as_bytes(),
        );
        let idle = TcpStream::connect(addr).unwrap();
        for (what, mut s) in [
            ("unfinished head", head),
            ("short body", short_body),
            ("idle", idle),
        ] {
            assert!(
                closes_within(&mut s, Duration::from_secs(4)),
                "{name}: a connection with an {what} is closed"
            );
        }
        // A whole request is still answered.
        let (status, _) = http(addr, "GET", "/health/live", None);
        assert_eq!(status, 200, "{name}");
    }
}

#[test]
fn tls_settings_are_checked_before_the_node_starts() {
    let ca = TestCa::new("idgen test ca");
    let server = ca.server();
    let other = ca.server_for(&["localhost"], Validity::Current, "other");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--tls-listen", "127.0.0.1:0"],
            "needs tls_cert and tls_key",
        ),
        (
            vec![
                "--tls-listen",
                "127.0.0.1:0",
                "--tls-cert",
                path(&server.cert),
            ],
            // Named as the user wrote it: the flag.
            "--tls-cert is set but tls_key is not",
        ),
        (
            vec![
                "--tls-cert",
                path(&server.cert),
                "--tls-key",
                path(&server.key),
            ],
            "no listener uses TLS",
        ),
        (
            vec![
                "--tls-listen",
                "127.0.0.1:0",
                "--tls-cert",
                path(&server.cert),
                "--tls-key",
                path(&other.key),
            ],
            "cannot set up TLS",
        ),
        (
            vec![
                "--tls-listen",
                "127.0.0.1:0",
                "--tls-cert",
                path(&server.key),
                "--tls-key",
                path(&server.key),
            ],
            "no certificate in the file",
        ),
        (
            vec![
                "--tls-listen",
                "127.0.0.1:0",
                "--tls-cert",
                "/nonexistent/cert.pem",
                "--tls-key",
                path(&server.key),
            ],
            "/nonexistent/cert.pem",
        ),
        (
            vec![
                "--tls-admin",
                "mtls",
                "--tls-cert",
                path(&server.cert),
                "--tls-key",
                path(&server.key),
            ],
            "needs tls_client_ca",
        ),
        (vec!["--listen", "off"], "the ID protocol needs an address"),
    ];
    for (args, expect) in cases {
        let e = match NodeProc::try_start(&args, &[]) {
            Err(e) => e,
            Ok(_) => panic!("{args:?} started"),
        };
        assert!(e.contains(expect), "{args:?}: expected {expect:?} in {e}");
        // A configuration error: exit status 2, and --check-config finds it too.
        assert!(e.contains("exit status: 2"), "{args:?}: {e}");
        let checked = std::process::Command::new(idgen_testkit::node::idgen_binary())
            .args(["serve", "--check-config"])
            .args(&args)
            .output()
            .expect("run idgen");
        assert_eq!(checked.status.code(), Some(2), "{args:?} --check-config");
        assert!(String::from_utf8_lossy(&checked.stderr).contains(expect));
    }
}

#[test]
fn ten_thousand_idle_tls_connections() {
    // The test and the node each hold 10,000 sockets (the node inherits the limit).
    raise_fd_limit(12_000);
    let ca = TestCa::new("idgen test ca");
    let node = tls_node(&ca.server(), None, &["--max-connections", "20000"]);
    let tls_addr = node.tls.unwrap();
    let config = client_config(&ca.ca_pem, None, ALPN);
    let before_kib = node.rss_kib();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let conns = rt.block_on(async {
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&config));
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let sem = Arc::new(tokio::sync::Semaphore::new(64));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..10_000 {
            let (connector, name, sem) = (connector.clone(), name.clone(), Arc::clone(&sem));
            tasks.spawn(async move {
                let _permit = sem.acquire().await.unwrap();
                let tcp = tokio::net::TcpStream::connect(tls_addr).await?;
                connector.connect(name, tcp).await
            });
        }
        let mut conns = Vec::with_capacity(10_000);
        while let Some(done) = tasks.join_next().await {
            conns.push(done.unwrap().expect("TLS connection"));
        }
        conns
    });
    let elapsed = started.elapsed();
    assert_eq!(conns.len(), 10_000);
    std::thread::sleep(Duration::from_millis(500));
    let after_kib = node.rss_kib();
    let per_conn = (after_kib.saturating_sub(before_kib)) as f64 * 1024.0 / 10_000.0;
    eprintln!(
        "10,000 idle TLS connections: {elapsed:?} to open ({:.0} handshakes/s), node RSS {before_kib} KiB -> {after_kib} KiB ({per_conn:.0} bytes per connection)",
        10_000.0 / elapsed.as_secs_f64()
    );
    assert!(
        after_kib < 200 * 1024,
        "10,000 idle TLS connections hold {after_kib} KiB (limit 200 MiB)"
    );
    // The node still serves a new client meanwhile.
    assert_eq!(tls_ids(tls_addr, Arc::clone(&config), 10).len(), 10);
    let mut plain = TestConn::open(node.addr);
    plain.send(&Request::Ping { token: 5 });
    assert!(matches!(plain.recv(), Some(Response::Pong(5))));
    drop(conns);
}

fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            assert!(
                lim.rlim_max >= want,
                "this test needs {want} open files; the hard limit is {} (raise it: ulimit -Hn)",
                lim.rlim_max
            );
            lim.rlim_cur = want;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

#[test]
fn operator_commands_speak_tls() {
    let ca = TestCa::new("idgen test ca");
    let clients = TestCa::new("idgen client ca");
    let server = ca.server();
    let node = NodeProc::start(&[
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        path(&server.cert),
        "--tls-key",
        path(&server.key),
        "--tls-client-ca",
        path(&clients.ca),
        "--tls-admin",
        "tls",
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    let me = clients.client("operator");
    let idgen = |args: &[&str]| {
        let out = std::process::Command::new(idgen_testkit::node::idgen_binary())
            .args(args)
            .output()
            .expect("run idgen");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Dialed by address: the certificate names 127.0.0.1 too (and the tests need no resolver).
    let tls_addr = node.tls.unwrap().to_string();
    let (code, stdout, stderr) = idgen(&[
        "get",
        "--addr",
        &tls_addr,
        "-n",
        "5",
        "--tls-ca",
        path(&ca.ca),
        "--tls-cert",
        path(&me.cert),
        "--tls-key",
        path(&me.key),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    // Without a client certificate, or trusting another authority: refused.
    let (code, _, stderr) = idgen(&["get", "--addr", &tls_addr, "--tls-ca", path(&ca.ca)]);
    assert_eq!(code, Some(1), "{stderr}");
    let (code, _, stderr) = idgen(&[
        "get",
        "--addr",
        &tls_addr,
        "--tls-ca",
        path(&clients.ca),
        "--tls-cert",
        path(&me.cert),
        "--tls-key",
        path(&me.key),
    ]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("certificate"), "{stderr}");
    // Health over HTTPS, and not over plain HTTP.
    let admin = node.admin.unwrap().to_string();
    let (code, _, stderr) = idgen(&["health", "--addr", &admin, "--tls-ca", path(&ca.ca)]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, _) = idgen(&["health", "--addr", &admin]);
    assert_eq!(code, Some(1));
    // The name to verify can be given apart from the address dialed.
    let (code, _, stderr) = idgen(&[
        "health",
        "--addr",
        &admin,
        "--tls-ca",
        path(&ca.ca),
        "--tls-server-name",
        "localhost",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = idgen(&[
        "health",
        "--addr",
        &admin,
        "--tls-ca",
        path(&ca.ca),
        "--tls-server-name",
        "db.example",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
}

#[test]
fn the_rust_client_pool_over_mutual_tls_against_real_nodes() {
    use idgen_client::blocking::Pool;
    use idgen_client::{PoolOptions, TlsConfig};
    let ca = TestCa::new("idgen test ca");
    let clients = TestCa::new("idgen client ca");
    let server = ca.server();
    let unrelated = TestCa::new("unrelated ca");
    let wrong = unrelated.server();
    // One node whose certificate the client does not trust, one it does (a memory store each:
    // their IDs are checked per node).
    let untrusted = tls_node(&wrong, Some(&clients), &[]);
    let good = tls_node(&server, Some(&clients), &[]);
    let me = clients.client("orders.svc");
    let tls = TlsConfig::builder()
        .ca_file(&ca.ca)
        .client_cert_files(&me.cert, &me.key)
        .server_name("localhost")
        .build()
        .expect("TLS configuration");
    let addrs = [
        untrusted.tls.unwrap().to_string(),
        good.tls.unwrap().to_string(),
    ];
    let pool = Pool::connect_tls(&addrs, PoolOptions::default(), &tls).expect("pool");
    let mut seen = HashSet::new();
    for _ in 0..200 {
        for id in pool.next_ids(50).expect("IDs from the node it trusts") {
            assert!(seen.insert(id), "duplicate {id}");
        }
    }
    assert_eq!(seen.len(), 10_000);
    // Every ID came from the trusted node: its handshakes succeeded, the other's failed.
    let ok = |node: &NodeProc, result: &str| {
        metric(
            node.admin.unwrap(),
            &format!("idgen_tls_handshakes_total{{listener=\"protocol\",result=\"{result}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(ok(&good, "ok") >= 1.0);
    assert_eq!(
        ok(&untrusted, "ok"),
        0.0,
        "no session with the untrusted node"
    );
    assert_eq!(
        metric(
            good.admin.unwrap(),
            "idgen_tls_client_connections_total{identity=\"orders.svc\"}"
        )
        .map(|n| n >= 1.0),
        Some(true)
    );
}
