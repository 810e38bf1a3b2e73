//! The PostgreSQL store against a real PostgreSQL 15 (`idgen_testkit::postgres`): the store,
//! lease and sequence conformance suites, expiry by the database's clock, a wrong password,
//! and behaviour when the server stops and comes back.

use std::time::{Duration, Instant};

use idgen_core::lease::conformance as lease_conformance;
use idgen_core::store::postgres::PgStore;
use idgen_core::store::{conformance, Commit, KvStore, PgUrl, Secret, StoreError, Txn};
use idgen_testkit::postgres::{PgServer, PASSWORD};

/// How long one failing call may take before we call it a hang.
const FAIL_WITHIN: Duration = Duration::from_secs(5);
/// How long the store may take to work again after the server comes back.
const RECOVER_WITHIN: Duration = Duration::from_secs(20);

async fn connect(server: &PgServer, prefix: &str) -> PgStore {
    let url: PgUrl = server.url(prefix).parse().unwrap();
    PgStore::connect(&url, Some(&Secret::new(PASSWORD)))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect to {}: {e}\nserver log:\n{}",
                server.url(prefix),
                server.log_tail(20)
            )
        })
}

async fn put(store: &dyn KvStore, key: &str, value: &str) -> Result<Commit, StoreError> {
    let mut t = Txn::new(store);
    t.get(key.as_bytes()).await?;
    t.put(key.as_bytes().to_vec(), value.as_bytes().to_vec());
    t.commit().await
}

#[tokio::test]
async fn postgres_store_conforms_in_independent_namespaces() {
    let server = PgServer::start();
    let a = connect(&server, "idgen-a").await;
    let b = connect(&server, "idgen-b").await;
    conformance::run(&a, "t/").await.unwrap();
    conformance::run(&b, "t/").await.unwrap();
    conformance::run(&a, "u/").await.unwrap();
    assert_eq!(a.scan(b"").await.unwrap().len(), 8);
    assert_eq!(b.scan(b"").await.unwrap().len(), 4);

    // Without a prefix the raw keys show the namespaces, in byte order.
    let raw = connect(&server, "").await;
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

    // A key's version changes only when the key is written.
    let before = a.get(b"t/a").await.unwrap().unwrap();
    put(&b, "t/other", "x").await.unwrap();
    assert_eq!(a.get(b"t/a").await.unwrap().unwrap(), before);
    assert_eq!(a.describe(), format!("postgres {}", server.url("idgen-a")));
}

/// Two nodes creating the schema at once: both connect, one schema.
#[tokio::test]
async fn nodes_connecting_together_create_one_schema() {
    let server = PgServer::start();
    let url: PgUrl = server.url("x").parse().unwrap();
    let pw = Secret::new(PASSWORD);
    let tries: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            let pw = pw.clone();
            tokio::spawn(async move { PgStore::connect(&url, Some(&pw)).await.map(|_| ()) })
        })
        .collect();
    for t in tries {
        t.await.unwrap().expect("every node connects");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_passes_the_lease_and_sequence_conformance_suites() {
    let server = PgServer::start();
    let store = lease_conformance::Recording::new(connect(&server, "idgen-conformance").await);
    assert!(store.expires_keys());
    lease_conformance::run(&store, "lease").await;
    assert!(
        store.conflicts() > 0,
        "the concurrent acquisitions never conflicted on PostgreSQL: the suite did not race them"
    );
    lease_conformance::run(&store, "again").await;
    idgen_core::sequence::conformance::run(&store, "seq").await;
}

/// A key written with `put_expiring` reads as absent about its TTL after its writer stops
/// writing it (by the database's clock), while a key written again within the TTL stays.
#[tokio::test(flavor = "current_thread")]
async fn an_expiring_key_vanishes_after_its_writer_stops() {
    let server = PgServer::start();
    let store = connect(&server, "idgen-expiry").await;
    let ttl = Duration::from_secs(2);
    store.put_expiring(b"c/stops", b"1", ttl).await.unwrap();
    let started = Instant::now();
    let mut gone_after = None;
    while started.elapsed() < ttl + Duration::from_secs(5) {
        store.put_expiring(b"c/keeps", b"2", ttl).await.unwrap();
        let stops = store.get(b"c/stops").await.unwrap();
        if stops.is_none() && gone_after.is_none() {
            gone_after = Some(started.elapsed());
            // Gone from scans too, and a create-if-absent over it applies.
            assert!(store
                .scan(b"c/")
                .await
                .unwrap()
                .iter()
                .all(|e| e.key != b"c/stops"));
            assert_eq!(
                put(&store, "c/stops", "new").await.unwrap(),
                Commit::Applied
            );
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
}

#[tokio::test]
async fn a_wrong_password_or_no_server_is_a_clear_error_quickly() {
    let server = PgServer::start();
    let url: PgUrl = server.url("x").parse().unwrap();
    let start = Instant::now();
    let err = PgStore::connect(&url, Some(&Secret::new("not-the-password")))
        .await
        .err()
        .expect("a wrong password is refused");
    // A refusal waiting will not cure: Invalid, so a starting node stops and says why.
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(
        err.to_string().contains("password authentication failed"),
        "{err}"
    );
    assert!(!err.to_string().contains("not-the-password"), "{err}");
    assert!(start.elapsed() < FAIL_WITHIN, "took {:?}", start.elapsed());

    let port = idgen_testkit::free_port();
    let url: PgUrl = format!("postgres://idgen@127.0.0.1:{port}/postgres")
        .parse()
        .unwrap();
    let start = Instant::now();
    let err = PgStore::connect(&url, Some(&Secret::new(PASSWORD)))
        .await
        .err()
        .expect("nothing listens there");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(start.elapsed() < FAIL_WITHIN, "took {:?}", start.elapsed());
}

#[tokio::test]
async fn postgres_down_fails_fast_and_recovers_by_itself() {
    let mut server = PgServer::start();
    let store = connect(&server, "idgen").await;
    assert_eq!(put(&store, "k", "1").await.unwrap(), Commit::Applied);
    let seen = store.get(b"k").await.unwrap().unwrap();

    server.stop();
    let start = Instant::now();
    let r = store.get(b"k").await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "get: {r:?}");
    let r = store.scan(b"").await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "scan: {r:?}");
    let r = put(&store, "k", "2").await;
    assert!(
        matches!(r, Err(StoreError::Unavailable(_) | StoreError::Unknown(_))),
        "commit: {r:?}"
    );
    assert!(
        start.elapsed() < 3 * FAIL_WITHIN,
        "three calls took {:?}",
        start.elapsed()
    );

    // Back on the same data: the same store works again, with new connections.
    server.start_again();
    let start = Instant::now();
    loop {
        match put(&store, "k2", "after").await {
            Ok(Commit::Applied) => break,
            other if start.elapsed() > RECOVER_WITHIN => {
                panic!("no commit within {RECOVER_WITHIN:?} of the restart; last: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let k = store.get(b"k").await.unwrap().unwrap();
    assert_eq!(k.value, b"1", "the failed commit did not apply");
    assert_eq!(k.version, seen.version);
    assert_eq!(store.scan(b"").await.unwrap().len(), 2);
}

/// The privileges docs/OPERATIONS.md ("PostgreSQL", "The role and its privileges") gives a
/// node's role: `CREATE` on the schema for the first start only; then, on tables another role
/// owns, `SELECT`, `INSERT`, `UPDATE`, `DELETE` on idgen_kv, `USAGE` on the sequence
/// idgen_kv_version and `SELECT` on idgen_schema are enough for every call, and each of them
/// is needed.
#[tokio::test(flavor = "current_thread")]
async fn after_the_first_start_the_documented_privileges_are_enough() {
    let server = PgServer::start();
    let node_pw = "node-password";
    server.sql(&format!(
        "CREATE SCHEMA ids; \
         CREATE ROLE idgen_owner LOGIN PASSWORD '{PASSWORD}'; \
         CREATE ROLE idgen_node LOGIN PASSWORD '{node_pw}'; \
         ALTER ROLE idgen_owner SET search_path = ids; \
         ALTER ROLE idgen_node SET search_path = ids; \
         GRANT USAGE ON SCHEMA ids TO idgen_owner, idgen_node"
    ));
    let url = |user: &str| -> PgUrl {
        format!(
            "postgres://{user}@127.0.0.1:{}/postgres?prefix=priv",
            server.port()
        )
        .parse()
        .unwrap()
    };
    let (owner_url, owner_pw) = (url("idgen_owner"), Secret::new(PASSWORD));
    let as_owner = || PgStore::connect(&owner_url, Some(&owner_pw));

    // Without CREATE on the schema the first start is refused, and says why.
    let err = as_owner().await.err().expect("no CREATE, no tables");
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(
        err.to_string().contains("permission denied for schema ids"),
        "{err}"
    );

    // With it the first start creates the tables; without it again, the owner still starts.
    server.sql("GRANT CREATE ON SCHEMA ids TO idgen_owner");
    let owner = as_owner().await.expect("the first start, with CREATE");
    assert_eq!(
        put(&owner, "k", "by the owner").await.unwrap(),
        Commit::Applied
    );
    drop(owner);
    server.sql("REVOKE CREATE ON SCHEMA ids FROM idgen_owner");
    let owner = as_owner().await.expect("a later start, without CREATE");
    assert!(owner.get(b"k").await.unwrap().is_some());
    drop(owner);

    // A node role that owns nothing, with the listed grants only: every call works.
    const GRANTS: [(&str, &str); 6] = [
        ("SELECT", "TABLE ids.idgen_kv"),
        ("INSERT", "TABLE ids.idgen_kv"),
        ("UPDATE", "TABLE ids.idgen_kv"),
        ("DELETE", "TABLE ids.idgen_kv"),
        ("USAGE", "SEQUENCE ids.idgen_kv_version"),
        ("SELECT", "TABLE ids.idgen_schema"),
    ];
    for (what, on) in GRANTS {
        server.sql(&format!("GRANT {what} ON {on} TO idgen_node"));
    }
    let (node_url, node_secret) = (url("idgen_node"), Secret::new(node_pw));
    let as_node = || PgStore::connect(&node_url, Some(&node_secret));
    let node = as_node().await.expect("the node role");
    lease_conformance::run(&node, "lease").await;
    idgen_core::sequence::conformance::run(&node, "seq").await;
    drop(node);

    // Each grant is needed: without it, connecting or one of the calls is refused.
    async fn every_call(store: &PgStore) -> Result<(), StoreError> {
        let mut t = Txn::new(store);
        t.get(b"each").await?;
        t.put(b"each".to_vec(), b"1".to_vec());
        t.commit().await?;
        put(store, "each", "2").await?; // an update of the key
        store
            .put_expiring(b"each-expiring", b"1", Duration::from_secs(10))
            .await?;
        store.scan(b"").await?;
        let mut t = Txn::new(store);
        t.delete(b"each".to_vec());
        t.commit().await?;
        Ok(())
    }
    every_call(&as_node().await.unwrap())
        .await
        .expect("every call, with every grant");
    for (what, on) in GRANTS {
        server.sql(&format!("REVOKE {what} ON {on} FROM idgen_node"));
        let r = match as_node().await {
            Ok(store) => every_call(&store).await,
            Err(e) => Err(e),
        };
        let err = r
            .err()
            .unwrap_or_else(|| panic!("without {what} on {on}, nothing failed"));
        assert!(
            err.to_string().contains("permission denied"),
            "without {what} on {on}: {err}"
        );
        server.sql(&format!("GRANT {what} ON {on} TO idgen_node"));
    }
}
