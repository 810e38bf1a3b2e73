//! The etcd store against a real etcd (see `common/etcd.rs`): conformance, namespaces, and
//! behaviour when members die and come back.

mod common;

use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use idgen::store::etcd::EtcdStore;
use idgen::store::memory::conformance;
use idgen::store::{Check, Commit, KvStore, StoreError, StoreUrl, Txn, Write};

/// How long one failing call may take before we call it a hang.
const FAIL_WITHIN: Duration = Duration::from_secs(5);
/// How long the store may take to work again after etcd comes back.
const RECOVER_WITHIN: Duration = Duration::from_secs(20);

async fn connect(cluster: &EtcdCluster, prefix: &str) -> EtcdStore {
    EtcdStore::connect(cluster.endpoints(), prefix.to_string())
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", cluster.url(prefix)))
}

async fn put(store: &dyn KvStore, key: &str, value: &str) -> Result<Commit, StoreError> {
    let mut t = Txn::new(store);
    t.get(key.as_bytes()).await?;
    t.put(key.as_bytes().to_vec(), value.as_bytes().to_vec());
    t.commit().await
}

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
    // The same keys in two namespaces: each run starts from an empty namespace.
    conformance::run(&a, "t/").await.unwrap();
    conformance::run(&b, "t/").await.unwrap();
    conformance::run(&a, "u/").await.unwrap();
    assert_eq!(a.scan(b"").await.unwrap().len(), 8);
    assert_eq!(b.scan(b"").await.unwrap().len(), 4);

    // Without a namespace, the raw keys show the prefixes, and scans are in key order.
    let raw = connect(&cluster, "").await;
    let keys: Vec<String> = raw
        .scan(b"")
        .await
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.key).unwrap())
        .collect();
    assert_eq!(keys.len(), 12);
    assert_eq!(keys[0], "idgen-a/t/a");
    assert_eq!(keys[11], "idgen-b/t/x");
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);

    // The version is the mod_revision: a write elsewhere does not change it.
    let before = a.get(b"t/a").await.unwrap().unwrap();
    put(&b, "t/other", "x").await.unwrap();
    assert_eq!(a.get(b"t/a").await.unwrap().unwrap(), before);

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
            prefix: "idgen-a".into()
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
