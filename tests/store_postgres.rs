//! The PostgreSQL store against a real PostgreSQL 15 (`idgen_testkit::postgres`): the store,
//! lease and sequence conformance suites, expiry by the database's clock, a wrong password,
//! batched commits, TLS, and behaviour when the server stops and comes back.

mod common;

use std::time::{Duration, Instant};

use idgen_core::lease::conformance as lease_conformance;
use idgen_core::store::access::Identity;
use idgen_core::store::postgres::PgStore;
use idgen_core::store::{
    conformance, Check, Commit, KvStore, PgTls, PgUrl, Secret, StoreError, Txn, Write,
};
use idgen_testkit::postgres::{PgServer, PASSWORD};
use idgen_testkit::TestCa;

/// How long one failing call may take before we call it a hang.
const FAIL_WITHIN: Duration = Duration::from_secs(5);
/// How long the store may take to work again after the server comes back.
const RECOVER_WITHIN: Duration = Duration::from_secs(20);

async fn connect(server: &PgServer, prefix: &str) -> PgStore {
    let url: PgUrl = server.url(prefix).parse().unwrap();
    PgStore::connect(&url, Some(&Secret::new(PASSWORD)), None)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect to {}: {e}\nserver log:\n{}",
                server.url(prefix),
                server.log_tail(20)
            )
        })
}

use common::store_cases::put;

#[tokio::test]
async fn postgres_store_conforms_in_independent_namespaces() {
    let server = PgServer::start();
    let a = connect(&server, "idgen-a").await;
    let b = connect(&server, "idgen-b").await;
    let raw = connect(&server, "").await;
    common::store_cases::conforms_in_independent_namespaces(&a, &b, &raw).await;
    assert_eq!(a.describe(), format!("postgres {}", server.url("idgen-a")));
}

/// A commit reads all its checked versions in one statement and writes in one upsert and one
/// delete: one stale check among many writes nothing, and within a commit the last write of a
/// key wins, as if the writes ran one after the other.
#[tokio::test]
async fn a_batched_commit_keeps_every_check_and_the_order_of_writes() {
    let server = PgServer::start();
    let store = connect(&server, "batch").await;
    let put = |k: &str, v: &str| Write::Put {
        key: k.as_bytes().to_vec(),
        value: v.as_bytes().to_vec(),
    };
    let del = |k: &str| Write::Delete {
        key: k.as_bytes().to_vec(),
    };
    let writes: Vec<Write> = (0..100).map(|i| put(&format!("k{i:03}"), "1")).collect();
    assert_eq!(store.commit(&[], &writes).await.unwrap(), Commit::Applied);
    let entries = store.scan(b"k").await.unwrap();
    assert_eq!(entries.len(), 100);
    let mut checks: Vec<Check> = entries
        .iter()
        .map(|e| Check {
            key: e.key.clone(),
            version: e.version,
        })
        .collect();
    checks.push(Check {
        key: b"absent".to_vec(),
        version: 0,
    });
    // One stale version among 101 checks: nothing is written.
    let mut stale = checks.clone();
    stale[57].version += 1_000;
    let rewrite: Vec<Write> = (0..100).map(|i| put(&format!("k{i:03}"), "2")).collect();
    assert_eq!(
        store.commit(&stale, &rewrite).await.unwrap(),
        Commit::Conflict
    );
    assert!(store
        .scan(b"k")
        .await
        .unwrap()
        .iter()
        .all(|e| e.value == b"1"));
    // An absent key checked as present: nothing is written either.
    let mut present = checks.clone();
    present[100].version = 1;
    assert_eq!(
        store.commit(&present, &rewrite).await.unwrap(),
        Commit::Conflict
    );
    // All current: applied, with the last write of each key winning.
    let mixed = vec![
        put("k000", "put then deleted"),
        del("k000"),
        del("k001"),
        put("k001", "deleted then put"),
        put("k002", "first"),
        put("k002", "second"),
        put("absent", "now present"),
    ];
    assert_eq!(
        store.commit(&checks, &mixed).await.unwrap(),
        Commit::Applied
    );
    assert_eq!(store.get(b"k000").await.unwrap(), None);
    let value = |e: Option<idgen_core::store::Entry>| e.map(|e| e.value);
    assert_eq!(
        value(store.get(b"k001").await.unwrap()),
        Some(b"deleted then put".to_vec())
    );
    assert_eq!(
        value(store.get(b"k002").await.unwrap()),
        Some(b"second".to_vec())
    );
    assert_eq!(
        value(store.get(b"absent").await.unwrap()),
        Some(b"now present".to_vec())
    );
    assert_eq!(store.scan(b"k").await.unwrap().len(), 99);
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
            tokio::spawn(async move { PgStore::connect(&url, Some(&pw), None).await.map(|_| ()) })
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
    let err = PgStore::connect(&url, Some(&Secret::new("not-the-password")), None)
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
    let err = PgStore::connect(&url, Some(&Secret::new(PASSWORD)), None)
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

fn tls(ca: &TestCa, client: Option<&str>) -> PgTls {
    PgTls {
        ca_pem: ca.ca_pem.clone(),
        identity: client.map(|name| {
            let c = ca.client(name);
            Identity {
                cert_pem: c.cert_pem,
                key_pem: Secret::new(c.key_pem),
            }
        }),
    }
}

async fn try_tls(url: &str, tls: Option<&PgTls>) -> Result<PgStore, StoreError> {
    let url: PgUrl = url.parse().unwrap();
    PgStore::connect(&url, Some(&Secret::new(PASSWORD)), tls).await
}

/// A server that takes TLS only: the store conforms over TLS with its authority; a plain
/// connection, another authority, or TLS towards a server without it are refused as
/// configuration errors (`Invalid`: a starting node stops and says why), never retried into
/// a plain connection.
#[tokio::test]
async fn over_tls_the_store_conforms_and_nothing_unverified_gets_through() {
    let ca = TestCa::new("postgres test ca");
    let server = PgServer::start_tls(&ca, false);
    let url = server.url("idgen-tls");
    assert!(url.contains("sslmode=verify-full"), "{url}");
    let store = try_tls(&url, Some(&tls(&ca, None)))
        .await
        .unwrap_or_else(|e| panic!("TLS connect: {e}\n{}", server.log_tail(20)));
    conformance::run(&store, "t/").await.unwrap();

    let plain = url.replace("sslmode=verify-full", "sslmode=disable");
    let err = try_tls(&plain, None)
        .await
        .err()
        .expect("plain is rejected");
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("no encryption"), "{err}");

    let other = TestCa::new("another authority");
    let err = try_tls(&url, Some(&tls(&other, None)))
        .await
        .err()
        .expect("a certificate of another authority is refused");
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("certificate"), "{err}");

    // TLS asked of a server without it: refused, not continued in the clear.
    let bare = PgServer::start();
    let err = try_tls(
        &format!("{}?sslmode=verify-full", bare.url("")),
        Some(&tls(&ca, None)),
    )
    .await
    .err()
    .expect("a server without TLS is refused");
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("does not support TLS"), "{err}");
}

/// A server that asks for a client certificate naming the role: none, or one naming another
/// role, is refused; the role's own is taken.
#[tokio::test]
async fn a_client_certificate_is_presented_when_the_server_asks() {
    let ca = TestCa::new("postgres client ca");
    let server = PgServer::start_tls(&ca, true);
    let url = server.url("idgen-mtls");
    let err = try_tls(&url, Some(&tls(&ca, None)))
        .await
        .err()
        .expect("no client certificate is refused");
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    let err = try_tls(&url, Some(&tls(&ca, Some("someone-else"))))
        .await
        .err()
        .expect("a certificate for another role is refused");
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    let store = try_tls(&url, Some(&tls(&ca, Some("idgen"))))
        .await
        .unwrap_or_else(|e| panic!("mutual TLS: {e}\n{}", server.log_tail(20)));
    assert_eq!(put(&store, "k", "v").await.unwrap(), Commit::Applied);
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
    let as_owner = || PgStore::connect(&owner_url, Some(&owner_pw), None);

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
    let as_node = || PgStore::connect(&node_url, Some(&node_secret), None);
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
