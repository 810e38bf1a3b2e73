//! TLS and mutual TLS against fake nodes in TLS mode: the client, the pool, the prefetcher
//! and the blocking forms; every certificate failure as a clear error; failover away from a
//! node whose certificate does not verify.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use idgen_client::{
    blocking, Client, ClientOptions, Error, Pool, PoolOptions, PrefetchOptions, PrefetchPool,
    TlsConfig, TlsErrorKind,
};
use idgen_testkit::fake::{Config, FakeServer, ServerTls, ALPN};
use idgen_testkit::{CertFiles, TestCa, Validity};

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("test took longer than 10 s")
}

fn options() -> ClientOptions {
    ClientOptions {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
    }
}

fn pool_options() -> PoolOptions {
    PoolOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .request_timeout(Duration::from_millis(500))
        .call_deadline(Duration::from_secs(2))
        .backoff_min(Duration::from_millis(50))
        .backoff_max(Duration::from_millis(200))
}

async fn tls_server(tls: ServerTls, first_seq: u64) -> FakeServer {
    FakeServer::start(Config {
        tls: Some(tls),
        first_seq,
        ..Config::default()
    })
    .await
}

/// `localhost:PORT` of a fake server (its certificate names `localhost` and the loopback
/// addresses).
fn localhost(server: &FakeServer) -> String {
    format!("localhost:{}", server.addr.port())
}

fn trusting(ca: &TestCa) -> TlsConfig {
    TlsConfig::builder().ca_file(&ca.ca).build().unwrap()
}

fn with_client_cert(ca: &TestCa, client: &CertFiles) -> TlsConfig {
    TlsConfig::builder()
        .ca_file(&ca.ca)
        .client_cert_files(&client.cert, &client.key)
        .build()
        .unwrap()
}

/// The TLS failure of `r`, which must be one.
fn tls_kind<T: std::fmt::Debug>(r: Result<T, Error>) -> (TlsErrorKind, String) {
    match r {
        Err(Error::Tls(e)) => (e.kind(), e.to_string()),
        other => panic!("expected a TLS error, got {other:?}"),
    }
}

#[tokio::test]
async fn tls_serves_ids_and_sends_alpn() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let server = tls_server(ServerTls::new(&ca.server()), 0).await;
        let tls = trusting(&ca);
        assert!(!tls.has_client_cert());
        // By DNS name and by IP address (the certificate carries both).
        for addr in [localhost(&server), server.addr.to_string()] {
            let client = Client::connect_tls(&addr, options(), &tls).await.unwrap();
            let ids = client.next_ids(2500).await.unwrap(); // split into 3 requests
            assert_eq!(ids.len(), 2500);
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            client.ping().await.unwrap();
            assert!(!client.is_closed());
        }
        assert_eq!(
            *server.control.tls_alpn.lock().unwrap(),
            vec![Some(ALPN.to_vec()); 2]
        );
        assert_eq!(*server.control.tls_client_certs.lock().unwrap(), [false; 2]);
        assert!(server.control.tls_failures.lock().unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn ca_and_client_certificate_from_pem_text() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let server = tls_server(
            ServerTls::requiring_client_certs(&ca.server(), &ca.ca_pem),
            0,
        )
        .await;
        let client_cert = ca.client("billing");
        let tls = TlsConfig::builder()
            .ca_pem(&ca.ca_pem)
            .client_cert_pem(&client_cert.cert_pem, &client_cert.key_pem)
            .build()
            .unwrap();
        let client = Client::connect_tls(&localhost(&server), options(), &tls)
            .await
            .unwrap();
        client.next_id().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn mutual_tls_presents_the_client_certificate() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let server = tls_server(
            ServerTls::requiring_client_certs(&ca.server(), &ca.ca_pem),
            0,
        )
        .await;
        let tls = with_client_cert(&ca, &ca.client("spiffe://cluster.local/ns/a/sa/billing"));
        assert!(tls.has_client_cert());
        let client = Client::connect_tls(&localhost(&server), options(), &tls)
            .await
            .unwrap();
        assert_eq!(client.next_ids(10).await.unwrap().len(), 10);
        assert_eq!(*server.control.tls_client_certs.lock().unwrap(), [true]);
    })
    .await;
}

#[tokio::test]
async fn a_server_certificate_from_another_authority_is_rejected() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let other = TestCa::new("another ca");
        let server = tls_server(ServerTls::new(&other.server()), 0).await;
        let (kind, message) =
            tls_kind(Client::connect_tls(&localhost(&server), options(), &trusting(&ca)).await);
        assert_eq!(kind, TlsErrorKind::UnknownIssuer);
        assert!(kind.is_server_certificate());
        assert!(
            message.contains("not signed by a trusted authority"),
            "{message}"
        );
        assert_eq!(server.control.get_ids_counts(), Vec::<u32>::new());
    })
    .await;
}

#[tokio::test]
async fn a_certificate_for_another_name_is_rejected_and_the_name_can_be_set() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let cert = ca.server_for(&["idgen.internal"], Validity::Current, "cluster");
        let server = tls_server(ServerTls::new(&cert), 0).await;
        // Dialed as localhost and as 127.0.0.1: the certificate names neither.
        for addr in [localhost(&server), server.addr.to_string()] {
            let (kind, message) =
                tls_kind(Client::connect_tls(&addr, options(), &trusting(&ca)).await);
            assert_eq!(kind, TlsErrorKind::NameMismatch, "{addr}");
            assert!(
                message.contains("not valid for the server name"),
                "{message}"
            );
        }
        // The certificate for localhost, verified against a name set explicitly.
        let localhost_server = tls_server(ServerTls::new(&ca.server()), 0).await;
        let wrong = TlsConfig::builder()
            .ca_file(&ca.ca)
            .server_name("idgen.internal")
            .build()
            .unwrap();
        let (kind, _) =
            tls_kind(Client::connect_tls(&localhost(&localhost_server), options(), &wrong).await);
        assert_eq!(kind, TlsErrorKind::NameMismatch);
        // The name the certificate carries, set explicitly, for an address it does not.
        let right = TlsConfig::builder()
            .ca_file(&ca.ca)
            .server_name("idgen.internal")
            .build()
            .unwrap();
        let client = Client::connect_tls(&server.addr.to_string(), options(), &right)
            .await
            .unwrap();
        client.next_id().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn expired_and_not_yet_valid_server_certificates_are_rejected() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let names = ["localhost", "127.0.0.1"];
        for (validity, want) in [
            (Validity::Expired, TlsErrorKind::Expired),
            (Validity::NotYet, TlsErrorKind::NotYetValid),
        ] {
            let cert = ca.server_for(&names, validity, &format!("server-{want:?}"));
            let server = tls_server(ServerTls::new(&cert), 0).await;
            let (kind, message) =
                tls_kind(Client::connect_tls(&localhost(&server), options(), &trusting(&ca)).await);
            assert_eq!(kind, want, "{message}");
            assert!(message.contains("the server's certificate"), "{message}");
        }
    })
    .await;
}

#[tokio::test]
async fn a_server_requiring_a_client_certificate_refuses_clients_without_a_good_one() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let other = TestCa::new("another ca");
        let server = tls_server(
            ServerTls::requiring_client_certs(&ca.server(), &ca.ca_pem),
            0,
        )
        .await;
        let addr = localhost(&server);

        let (kind, message) = tls_kind(Client::connect_tls(&addr, options(), &trusting(&ca)).await);
        assert_eq!(kind, TlsErrorKind::ClientCertificateRequired, "{message}");
        assert!(
            message.contains("requires a client certificate"),
            "{message}"
        );

        // A certificate from an authority the server does not trust, and an expired one.
        let foreign = TlsConfig::builder()
            .ca_file(&ca.ca)
            .client_cert_files(other.client("billing").cert, other.client("billing").key)
            .build()
            .unwrap();
        let expired = with_client_cert(&ca, &ca.client_with("billing", Validity::Expired));
        for tls in [foreign, expired] {
            let (kind, message) = tls_kind(Client::connect_tls(&addr, options(), &tls).await);
            assert_eq!(kind, TlsErrorKind::ClientCertificateRejected, "{message}");
            assert!(
                message.contains("rejected the client certificate"),
                "{message}"
            );
        }
        assert_eq!(server.control.tls_failures.lock().unwrap().len(), 3);
        assert!(server.control.tls_client_certs.lock().unwrap().is_empty());
        assert_eq!(server.control.get_ids_counts(), Vec::<u32>::new());
    })
    .await;
}

#[tokio::test]
async fn tls_against_a_plaintext_port_and_plaintext_against_a_tls_port_fail_cleanly() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let plain = FakeServer::start(Config::default()).await;
        let (kind, message) =
            tls_kind(Client::connect_tls(&localhost(&plain), options(), &trusting(&ca)).await);
        assert_eq!(kind, TlsErrorKind::Handshake);
        assert!(message.contains("did not answer with TLS"), "{message}");

        let tls = tls_server(ServerTls::new(&ca.server()), 0).await;
        match Client::connect_with(tls.addr, options()).await {
            Ok(_) => panic!("a plaintext HELLO completed on a TLS port"),
            Err(e) => assert!(
                matches!(
                    e,
                    Error::Protocol(_) | Error::Io(_) | Error::UnexpectedResponse(_)
                ),
                "{e:?}"
            ),
        }
    })
    .await;
}

#[tokio::test]
async fn bad_configurations_are_errors_that_name_the_problem() {
    let ca = TestCa::new("idgen test ca");
    let a = ca.client("a");
    let b = ca.client("b");
    let config_error = |r: Result<TlsConfig, Error>| match r {
        Err(Error::Tls(e)) if e.kind() == TlsErrorKind::Config => e.to_string(),
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let m = config_error(
        TlsConfig::builder()
            .ca_file(&ca.ca)
            .client_cert_pem(&a.cert_pem, &b.key_pem)
            .build(),
    );
    assert!(m.contains("key"), "{m}");
    assert!(
        !m.contains("PRIVATE KEY"),
        "the key leaked into the message: {m}"
    );
    let m = config_error(
        TlsConfig::builder()
            .ca_file(&ca.ca)
            .client_cert_files(&a.cert, ca.dir().join("missing.key"))
            .build(),
    );
    assert!(m.contains("missing.key"), "{m}");
    let m = config_error(TlsConfig::builder().ca_file(&a.key).build());
    assert!(m.contains("holds no certificate"), "{m}");
    let m = config_error(
        TlsConfig::builder()
            .ca_file(&ca.ca)
            .server_name("not a name")
            .build(),
    );
    assert!(m.contains("neither a DNS name nor an IP address"), "{m}");
    // An address without a host to verify.
    let tls = trusting(&ca);
    let (kind, message) = tls_kind(Client::connect_tls(":7420", options(), &tls).await);
    assert_eq!(kind, TlsErrorKind::Config);
    assert!(message.contains("no host"), "{message}");
}

#[tokio::test]
async fn the_pool_fails_over_from_a_node_whose_certificate_does_not_verify() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let other = TestCa::new("another ca");
        let expired = ca.server_for(&["localhost"], Validity::Expired, "expired");
        let foreign = tls_server(ServerTls::new(&other.server()), 0).await;
        let stale = tls_server(ServerTls::new(&expired), 1 << 40).await;
        let good = tls_server(ServerTls::new(&ca.server()), 2 << 40).await;
        let addrs = [localhost(&foreign), localhost(&stale), localhost(&good)];
        let pool = Pool::connect_tls(&addrs, pool_options(), &trusting(&ca))
            .await
            .unwrap();
        for _ in 0..20 {
            assert_eq!(pool.next_ids(100).await.unwrap().len(), 100);
        }
        assert_eq!(good.control.ids_served(), 2000);
        let nodes = pool.nodes();
        for (node, want) in nodes[..2]
            .iter()
            .zip([TlsErrorKind::UnknownIssuer, TlsErrorKind::Expired])
        {
            assert!(!node.connected && node.failures >= 1, "{node:?}");
            let e = node.last_error.as_ref().expect("the node's failure");
            assert_eq!(e.tls().map(|t| t.kind()), Some(want), "{e:?}");
        }
        assert!(nodes[2].current && nodes[2].connected);

        // When the good node goes away, the bad ones are tried again and still refused:
        // the call fails with a TLS error, and never with an ID from a node not verified.
        good.control.kill();
        let e = pool.next_id().await.unwrap_err();
        assert!(
            e.tls().is_some_and(|t| t.kind().is_server_certificate()),
            "{e:?}"
        );
        assert_eq!(foreign.control.ids_served() + stale.control.ids_served(), 0);

        // A pool whose every node fails verification cannot be made.
        let e = Pool::connect_tls(&addrs[..2], pool_options(), &trusting(&ca))
            .await
            .unwrap_err();
        assert_eq!(e.tls().map(|t| t.kind()), Some(TlsErrorKind::UnknownIssuer));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_over_tls_never_hands_out_an_id_twice() {
    bounded(async {
        let ca = TestCa::new("idgen test ca");
        let server_cert = ca.server();
        let a = tls_server(
            ServerTls::requiring_client_certs(&server_cert, &ca.ca_pem),
            0,
        )
        .await;
        let b = tls_server(
            ServerTls::requiring_client_certs(&server_cert, &ca.ca_pem),
            1 << 40,
        )
        .await;
        let tls = with_client_cert(&ca, &ca.client("billing"));
        let sizes = PrefetchOptions {
            low_water: 50,
            high_water: 200,
        };
        let p =
            PrefetchPool::connect_tls(&[localhost(&a), localhost(&b)], pool_options(), sizes, &tls)
                .await
                .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|k| {
                let p = p.clone();
                let a = a.control.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::with_capacity(1500);
                    for i in 0..1500 {
                        if k == 0 && i == 500 {
                            // Fail over mid-run, across TLS connections.
                            a.kill();
                        }
                        mine.push(p.next_id().await.expect("next_id"));
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        for t in tasks {
            for id in t.await.unwrap() {
                assert!(all.insert(id), "ID {id} handed out twice");
            }
        }
        assert_eq!(all.len(), 8 * 1500);
        assert!(a.control.ids_served() > 0 && b.control.ids_served() > 0);
        assert!(p.stats().refills >= 2);
    })
    .await;
}

#[test]
fn blocking_client_pool_and_prefetch_over_tls() {
    let ca = TestCa::new("idgen test ca");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server_tls = ServerTls::requiring_client_certs(&ca.server(), &ca.ca_pem);
    let good = rt.block_on(tls_server(server_tls, 0));
    let foreign = rt.block_on(tls_server(
        ServerTls::new(&TestCa::new("another ca").server()),
        1 << 40,
    ));
    let tls = with_client_cert(&ca, &ca.client("billing"));

    let client = blocking::Client::connect_tls(&localhost(&good), options(), &tls).unwrap();
    let ids = client.next_ids(100).unwrap();
    assert_eq!(ids.len(), 100);
    assert!(client.ping().is_ok());
    let (kind, _) = tls_kind(blocking::Client::connect_tls(
        &localhost(&foreign),
        options(),
        &tls,
    ));
    assert_eq!(kind, TlsErrorKind::UnknownIssuer);

    let addrs = [localhost(&foreign), localhost(&good)];
    let pool = blocking::Pool::connect_tls(&addrs, pool_options(), &tls).unwrap();
    assert_eq!(pool.next_ids(1000).unwrap().len(), 1000);
    assert!(pool.nodes()[0]
        .last_error
        .as_ref()
        .is_some_and(|e| e.tls().is_some()));
    let prefetch = blocking::PrefetchPool::connect_tls(
        &addrs,
        pool_options(),
        PrefetchOptions::default(),
        &tls,
    )
    .unwrap();
    let mut seen: HashSet<u64> = ids.into_iter().collect();
    for _ in 0..2000 {
        assert!(seen.insert(prefetch.next_id().unwrap()));
    }
}
