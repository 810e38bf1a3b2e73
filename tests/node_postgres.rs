//! Black-box tests of the real `idgen serve` binary on a real PostgreSQL
//! (`idgen_testkit::postgres`): two nodes with disjoint worker ranges and distinct IDs, the
//! password from the environment or a file, a wrong password that stops the start-up with a
//! clear error, and a node that fails closed when PostgreSQL stops and serves again when it
//! returns. Lease TTL 1.5 s throughout.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::node::NodeProc;
use common::wall_ms;
use idgen_protocol::Status;
use idgen_testkit::postgres::{PgServer, PASSWORD};
use idgen_testkit::TestConn;

const TTL_MS: u64 = 1500;
const TTL: &str = "1500ms";

fn start(server: &PgServer, prefix: &str, node_id: &str) -> NodeProc {
    let url = server.url(prefix);
    let args = [
        "--store",
        &url,
        "--node-id",
        node_id,
        "--lease-ttl",
        TTL,
        "--shards",
        "2",
    ];
    NodeProc::try_start(&args, &[("IDGEN_POSTGRES_PASSWORD", PASSWORD)])
        .unwrap_or_else(|e| panic!("idgen did not start on PostgreSQL: {e}"))
}

/// Two nodes on one database (one given the password in the environment, one in a file): the
/// worker ranges their connections announce never overlap, and all their IDs are distinct.
#[test]
fn two_nodes_on_one_database_have_disjoint_ranges_and_distinct_ids() {
    let server = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pw_file = dir.path().join("pg-password");
    std::fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
    let url = server.url("idgen-two");
    let a = start(&server, "idgen-two", "node-a");
    let b = NodeProc::start(&[
        "--store",
        &url,
        "--node-id",
        "node-b",
        "--lease-ttl",
        TTL,
        "--shards",
        "2",
        "--postgres-password-file",
        pw_file.to_str().unwrap(),
    ]);
    let mut ranges = Vec::new();
    let mut ids = HashSet::new();
    for node in [&a, &b] {
        for _ in 0..8 {
            let mut c = TestConn::open(node.addr);
            let h = c.hello.expect("HELLO_OK");
            ranges.push((node.addr, h.workers));
            for id in c.get_ids(256).unwrap_or_else(|e| panic!("GET_IDS: {e:?}")) {
                assert!(
                    h.workers.contains(h.decompose(id).worker),
                    "{id} outside {h:?}"
                );
                assert!(ids.insert(id), "ID {id} issued twice");
            }
        }
    }
    assert_eq!(ids.len(), 2 * 8 * 256);
    for (i, (na, ra)) in ranges.iter().enumerate() {
        for (nb, rb) in &ranges[i + 1..] {
            if na != nb {
                assert!(
                    ra.end() <= rb.first || rb.end() <= ra.first,
                    "overlapping worker ranges: {na} {ra} and {nb} {rb}"
                );
            }
        }
    }
}

/// A wrong password stops the start-up with PostgreSQL's reason, and the password is in no log.
#[test]
fn a_wrong_password_stops_the_start_with_a_clear_error() {
    let server = PgServer::start();
    let url = server.url("idgen-pw");
    let err = NodeProc::try_start(
        &["--store", &url, "--node-id", "n"],
        &[("IDGEN_POSTGRES_PASSWORD", "a-wrong-password")],
    )
    .err()
    .expect("a node with a wrong password does not start");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(
        !err.contains("a-wrong-password"),
        "the password leaked: {err}"
    );
}

/// A node whose PostgreSQL stops issues no ID at or above (stop time + TTL), answers
/// UNAVAILABLE_LEASE within TTL + 1 s and keeps doing so while the server is down, and serves
/// again within 10 s of its return.
#[test]
fn node_fails_closed_without_postgres_and_serves_again_when_it_returns() {
    let mut server = PgServer::start();
    let node = start(&server, "idgen-outage", "node");
    let mut c = TestConn::open(node.addr);
    let hello = c.hello.unwrap();
    c.get_ids(10).expect("serves with PostgreSQL up");
    std::thread::sleep(Duration::from_millis(700)); // a renewal or two

    server.stop();
    let stopped = Instant::now();
    let stop_id_time = wall_ms() - hello.epoch_ms;
    let ceiling_bound = stop_id_time + TTL_MS;
    let mut refused_at: Option<Instant> = None;
    while stopped.elapsed() < Duration::from_millis(TTL_MS) + Duration::from_secs(3) {
        match c.get_ids(1) {
            Ok(ids) => {
                let ts = hello.decompose(ids[0]).timestamp;
                assert!(
                    ts < ceiling_bound,
                    "issued timestamp {ts} ≥ stop time + TTL"
                );
                assert!(
                    refused_at.is_none(),
                    "served an ID after the first UNAVAILABLE_LEASE, with PostgreSQL down"
                );
            }
            Err((status, msg)) => {
                assert_eq!(status, Status::UNAVAILABLE_LEASE, "{msg}");
                refused_at.get_or_insert_with(Instant::now);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused_after = refused_at.unwrap_or_else(|| {
        panic!(
            "still serving {:?} after PostgreSQL stopped; log:\n{}",
            stopped.elapsed(),
            common::node::tail(node.log_path())
        )
    }) - stopped;
    assert!(
        refused_after <= Duration::from_millis(TTL_MS + 1000),
        "first UNAVAILABLE_LEASE {refused_after:?} after PostgreSQL stopped"
    );

    server.start_again();
    let back = Instant::now();
    loop {
        match c.get_ids(1) {
            Ok(ids) => {
                assert!(hello.decompose(ids[0]).timestamp > stop_id_time);
                break;
            }
            Err((status, msg)) => assert_eq!(status, Status::UNAVAILABLE_LEASE, "{msg}"),
        }
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "not serving 10 s after PostgreSQL returned; log:\n{}",
            common::node::tail(node.log_path())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "refused {refused_after:?} after PostgreSQL stopped; served again {:?} after it returned",
        back.elapsed()
    );
}

/// A node reaches a TLS-only PostgreSQL that asks for a client certificate: with the authority,
/// the certificate and the key from its flags it leases and serves; without the certificate it
/// stops before it listens, with the server's reason.
#[test]
fn a_node_leases_over_tls_with_a_client_certificate() {
    let ca = idgen_testkit::TestCa::new("postgres node ca");
    let server = PgServer::start_tls(&ca, true);
    let client = ca.client("idgen");
    let url = server.url("idgen-tls");
    let ca_path = ca.ca.to_str().unwrap();
    let env = [("IDGEN_POSTGRES_PASSWORD", PASSWORD)];
    let node = NodeProc::try_start(
        &[
            "--store",
            &url,
            "--node-id",
            "tls",
            "--postgres-ca",
            ca_path,
            "--postgres-cert",
            client.cert.to_str().unwrap(),
            "--postgres-key",
            client.key.to_str().unwrap(),
        ],
        &env,
    )
    .unwrap_or_else(|e| panic!("idgen did not start over TLS: {e}"));
    let mut c = TestConn::open(node.addr);
    assert_eq!(
        c.get_ids(100).expect("IDs over a TLS-leased range").len(),
        100
    );

    let err = NodeProc::try_start(
        &[
            "--store",
            &url,
            "--node-id",
            "no-cert",
            "--postgres-ca",
            ca_path,
        ],
        &env,
    )
    .err()
    .expect("a node without the client certificate does not start");
    assert!(err.contains("certificate"), "{err}");
}
