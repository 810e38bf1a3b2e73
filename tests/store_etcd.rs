//! The etcd store against a real etcd (see `common/etcd.rs`): conformance, namespaces, and
//! behaviour when members die and come back.

mod common;

use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use idgen_core::store::conformance;
use idgen_core::store::etcd::EtcdStore;
use idgen_core::store::{Check, Commit, KvStore, StoreError, StoreUrl, Txn, Write};

/// How long one failing call may take before we call it a hang.
const FAIL_WITHIN: Duration = Duration::from_secs(5);
/// How long the store may take to work again after etcd comes back.
const RECOVER_WITHIN: Duration = Duration::from_secs(20);

async fn connect(cluster: &EtcdCluster, prefix: &str) -> EtcdStore {
    EtcdStore::connect(cluster.endpoints(), prefix.to_string())
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", cluster.url(prefix)))
}

use common::store_cases::put;

/// Retries `put` until it applies, for up to [`RECOVER_WITHIN`].
async fn put_eventually(store: &dyn KvStore, key: &str, value: &str) {
    let start = Instant::now();
    loop {
        match put(store, key, value).await {
            Ok(Commit::Applied) => return,
            other if start.elapsed() > RECOVER_WITHIN => {
                panic!("no successful commit within {RECOVER_WITHIN:?}; last: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[tokio::test]
async fn etcd_store_conforms_in_independent_namespaces() {
    let cluster = EtcdCluster::start(1);
    let a = connect(&cluster, "idgen-a").await;
    let b = connect(&cluster, "idgen-b").await;
    // The same keys in two namespaces; without a namespace the raw keys show the prefixes;
    // the version is the mod_revision, which a write elsewhere does not change.
    let raw = connect(&cluster, "").await;
    common::store_cases::conforms_in_independent_namespaces(&a, &b, &raw).await;

    assert_eq!(
        a.describe(),
        format!("etcd {}/idgen-a", cluster.endpoints().join(","))
    );
    // The URL the harness prints parses to the same endpoints and prefix.
    let url: StoreUrl = cluster.url("idgen-a").parse().unwrap();
    assert_eq!(
        url,
        StoreUrl::Etcd {
            endpoints: cluster.endpoints(),
            prefix: "idgen-a".into(),
            tls: false,
        }
    );
}

#[tokio::test]
async fn connecting_to_nothing_is_unavailable_quickly() {
    // A port nobody listens on (bound and released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let err = EtcdStore::connect(vec![format!("127.0.0.1:{port}")], "x".into())
        .await
        .err()
        .expect("nothing listens there");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(start.elapsed() < FAIL_WITHIN, "took {:?}", start.elapsed());
}

#[tokio::test]
async fn etcd_down_fails_fast_and_recovers_without_reconnecting() {
    let mut cluster = EtcdCluster::start(1);
    let store = connect(&cluster, "idgen").await;
    assert_eq!(put(&store, "k", "1").await.unwrap(), Commit::Applied);
    let seen = store.get(b"k").await.unwrap().unwrap();

    cluster.kill(0);
    let start = Instant::now();
    let r = store.get(b"k").await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "get: {r:?}");
    assert!(
        start.elapsed() < FAIL_WITHIN,
        "get took {:?}",
        start.elapsed()
    );

    let start = Instant::now();
    let r = store.scan(b"").await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "scan: {r:?}");
    assert!(
        start.elapsed() < FAIL_WITHIN,
        "scan took {:?}",
        start.elapsed()
    );

    let start = Instant::now();
    let checks = [Check {
        key: b"k".to_vec(),
        version: seen.version,
    }];
    let writes = [Write::Put {
        key: b"k".to_vec(),
        value: b"2".to_vec(),
    }];
    let r = store.commit(&checks, &writes).await;
    assert!(
        matches!(r, Err(StoreError::Unavailable(_) | StoreError::Unknown(_))),
        "commit: {r:?}"
    );
    assert!(
        start.elapsed() < FAIL_WITHIN,
        "commit took {:?}",
        start.elapsed()
    );
    eprintln!("with etcd down, commit gave: {r:?}");

    // Back on the same data dir and ports: the same store works again by itself.
    cluster.restart(0);
    put_eventually(&store, "k2", "after").await;
    let k = store.get(b"k").await.unwrap().unwrap();
    assert_eq!(
        k.value, b"1",
        "the data survived, and the failed commit did not apply"
    );
    assert_eq!(k.version, seen.version);
    assert_eq!(store.scan(b"").await.unwrap().len(), 2);
}

#[tokio::test]
async fn three_members_survive_one_failure_but_not_two() {
    let mut cluster = EtcdCluster::start(3);
    let store = connect(&cluster, "idgen").await;
    assert_eq!(put(&store, "k", "0").await.unwrap(), Commit::Applied);

    // One member down: a quorum of two still commits (after an election if it was the leader).
    cluster.kill(0);
    put_eventually(&store, "k", "1").await;
    // ... and from then on every call succeeds: calls that hit the dead member's endpoint are
    // retried on another one.
    for i in 0..10 {
        let r = put(&store, "k", &format!("1.{i}")).await;
        assert_eq!(r, Ok(Commit::Applied), "commit {i} with one member down");
        assert_eq!(store.scan(b"").await.unwrap().len(), 1);
    }

    // Two down: no quorum; every commit fails, each in bounded time.
    let seen = store.get(b"k").await.unwrap().unwrap();
    cluster.kill(1);
    let checks = [Check {
        key: b"k".to_vec(),
        version: seen.version,
    }];
    let writes = [Write::Put {
        key: b"k".to_vec(),
        value: b"2".to_vec(),
    }];
    for attempt in 0..3 {
        let start = Instant::now();
        let r = store.commit(&checks, &writes).await;
        assert!(
            matches!(r, Err(StoreError::Unavailable(_) | StoreError::Unknown(_))),
            "attempt {attempt}: {r:?}"
        );
        assert!(
            start.elapsed() < 2 * FAIL_WITHIN,
            "attempt {attempt} took {:?}",
            start.elapsed()
        );
        eprintln!("without quorum, attempt {attempt}: {r:?}");
    }

    // Both back: works again, with the same store.
    cluster.restart(0);
    cluster.restart(1);
    put_eventually(&store, "k", "3").await;
    assert_eq!(store.get(b"k").await.unwrap().unwrap().value, b"3");
}

/// Writes `n` keys `<prefix><i:06>` with values of `size` bytes, 100 to a commit.
async fn fill(store: &dyn KvStore, prefix: &str, n: usize, size: usize) {
    let writes: Vec<Write> = (0..n)
        .map(|i| Write::Put {
            key: format!("{prefix}{i:06}").into_bytes(),
            value: vec![b'a' + (i % 26) as u8; size],
        })
        .collect();
    for batch in writes.chunks(100) {
        assert_eq!(store.commit(&[], batch).await.unwrap(), Commit::Applied);
    }
}

/// A scan is read in pages, every page at the revision of the first: a write between two
/// pages (a new key, a changed key, a deleted key, all in the later page's range) is not seen,
/// and a scan in small pages returns every key once, in order.
#[tokio::test(flavor = "current_thread")]
async fn scans_read_pages_at_one_revision() {
    let cluster = EtcdCluster::start(1);
    let store = connect(&cluster, "idgen-pages").await.with_scan_page(7);
    fill(&store, "p/", 100, 10).await;
    put(&store, "q/outside", "x").await.unwrap();
    let all = store.scan(b"p/").await.unwrap();
    assert_eq!(all.len(), 100);
    let keys: Vec<String> = all
        .iter()
        .map(|e| String::from_utf8(e.key.clone()).unwrap())
        .collect();
    assert_eq!(
        keys,
        (0..100).map(|i| format!("p/{i:06}")).collect::<Vec<_>>()
    );

    // Page by page, with writes in between.
    let first = store.scan_page(b"p/", None, None, 10).await.unwrap();
    assert_eq!(first.entries.len(), 10);
    assert!(first.more);
    let after = first.entries.last().unwrap().key.clone();
    put(&store, "p/000050", "changed").await.unwrap();
    put(&store, "p/000050a", "new").await.unwrap();
    let mut txn = Txn::new(&store);
    txn.delete(b"p/000060".to_vec());
    txn.commit().await.unwrap();
    let mut seen = first.entries.clone();
    let mut last = after;
    loop {
        let page = store
            .scan_page(b"p/", Some(&last), Some(first.revision), 10)
            .await
            .unwrap();
        assert_eq!(page.revision, first.revision);
        seen.extend(page.entries.iter().cloned());
        if !page.more {
            break;
        }
        last = page.entries.last().unwrap().key.clone();
    }
    assert_eq!(
        seen, all,
        "the pages at the first page's revision: the writes are not seen"
    );
    // A new scan sees them.
    let now = store.scan(b"p/").await.unwrap();
    assert_eq!(now.len(), 100);
    assert!(now.iter().any(|e| e.key == b"p/000050a"));
    assert!(!now.iter().any(|e| e.key == b"p/000060"));
    let changed = now.iter().find(|e| e.key == b"p/000050").unwrap();
    assert_eq!(changed.value, b"changed");
}

/// A scan bigger than a gRPC message (4 MiB): 20,000 values of 300 bytes (6 MB, about what
/// 20,000 worker records weigh), read in pages of the default size.
#[tokio::test(flavor = "current_thread")]
async fn a_scan_bigger_than_a_grpc_message_returns_every_key() {
    let cluster = EtcdCluster::start(1);
    let store = connect(&cluster, "idgen-big").await;
    fill(&store, "w/", 20_000, 300).await;
    let started = Instant::now();
    let all = store.scan(b"w/").await.expect("scan of 6 MB");
    let took = started.elapsed();
    assert_eq!(all.len(), 20_000);
    assert!(all.windows(2).all(|w| w[0].key < w[1].key));
    assert!(all.iter().all(|e| e.value.len() == 300));
    eprintln!(
        "scan of 20,000 keys (6 MB) in pages of {}: {took:?}",
        idgen_core::store::etcd::SCAN_PAGE
    );
}

/// A key written with `put_expiring` vanishes about its TTL after its writer stops writing it
/// (by etcd's clock), while a key written again within the TTL stays.
#[tokio::test(flavor = "current_thread")]
async fn an_expiring_key_vanishes_after_its_writer_stops() {
    let cluster = EtcdCluster::start(1);
    let store = connect(&cluster, "idgen-expiry").await;
    assert!(store.expires_keys());
    let ttl = Duration::from_secs(2);
    store.put_expiring(b"c/stops", b"1", ttl).await.unwrap();
    let started = Instant::now();
    let mut gone_after = None;
    while started.elapsed() < ttl + Duration::from_secs(5) {
        store.put_expiring(b"c/keeps", b"2", ttl).await.unwrap();
        let stops = store.get(b"c/stops").await.unwrap();
        if stops.is_none() && gone_after.is_none() {
            gone_after = Some(started.elapsed());
        }
        if gone_after.is_some_and(|t| started.elapsed() > t + Duration::from_secs(1)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone_after = gone_after.expect("the key of a stopped writer expired");
    assert!(
        gone_after >= ttl - Duration::from_millis(200),
        "gone after {gone_after:?}"
    );
    assert!(
        store.get(b"c/keeps").await.unwrap().is_some(),
        "the key written every 200 ms stays"
    );
    eprintln!("an expiring key (TTL {ttl:?}) was gone {gone_after:?} after its last write");
}

/// The store and lease conformance suites over TLS with a client certificate
/// (`--client-cert-auth`) and as an etcd user with a role on the namespace only (`auth
/// enable`): what the lease logic needs (reads, conditional commits, expiring keys, acquiring
/// and renewing ranges) works the same through an authenticated connection; outside its
/// prefix the user is refused.
#[tokio::test(flavor = "current_thread")]
async fn etcd_store_conforms_over_tls_as_an_authenticated_user() {
    use common::etcd::{enable_auth, ClientAuth, TestUser};
    use idgen_core::store::access::{self, EtcdAccess, EtcdTls, EtcdUser};
    use idgen_core::store::Secret;
    use idgen_testkit::{EtcdTls as ClusterTls, TestCa};

    let ca = TestCa::new("etcd test ca");
    let cluster = EtcdCluster::start_tls(1, ClusterTls::from_ca(&ca, true));
    let client = ca.client("idgen-store");
    let setup = ClientAuth {
        ca: Some(&ca.ca),
        cert: Some(&client),
        user: None,
    };
    // etcd's admin calls block the runtime briefly: on a thread of their own.
    let users = [TestUser {
        name: "idgen",
        password: "store-secret",
        readwrite_prefix: Some("idgen-tls/"),
    }];
    std::thread::scope(|s| {
        s.spawn(|| enable_auth(&cluster, &setup, "root-secret", &users))
            .join()
            .unwrap()
    });
    let access = EtcdAccess {
        tls: Some(EtcdTls {
            ca_pem: access::read_ca_bundle("etcd_ca", &ca.ca).unwrap(),
            identity: Some(
                access::read_identity(("etcd_cert", &client.cert), ("etcd_key", &client.key))
                    .unwrap(),
            ),
            server_name: None,
        }),
        user: Some(EtcdUser {
            name: "idgen".into(),
            password: Secret::new("store-secret"),
        }),
    };
    let store = EtcdStore::connect_with(cluster.endpoints(), "idgen-tls".into(), true, &access)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", cluster.url("idgen-tls")));
    assert_eq!(
        store.describe(),
        format!("etcds {}/idgen-tls", cluster.endpoints().join(","))
    );
    conformance::run(&store, "t/").await.unwrap();
    idgen_core::lease::conformance::run(&store, "lease").await;
    // The same user outside its prefix: refused, as etcd's permission error.
    let outside = EtcdStore::connect_with(cluster.endpoints(), "other".into(), true, &access)
        .await
        .err()
        .expect("no permission outside idgen-tls/");
    assert!(
        matches!(outside, StoreError::Invalid(ref m) if m.contains("permission denied")),
        "{outside:?}"
    );
}
