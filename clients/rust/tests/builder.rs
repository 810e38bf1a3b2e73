//! `Pool::builder()`: a pool that connects at its first call, nodes and settings from a URL or
//! the environment (`clients/vectors/CONFIG.md`), and hooks that see every failover.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idgen_client::{ClientConfig, Error, Event, Pool, Status};
use idgen_testkit::fake::{Action, Config, FakeServer};

async fn node(k: u64) -> FakeServer {
    FakeServer::start(Config {
        first_seq: k << 32,
        ..Config::default()
    })
    .await
}

#[tokio::test]
async fn a_built_pool_connects_at_its_first_call_not_before() {
    let a = node(0).await;
    let pool = Pool::builder().node(a.addr).build().unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(a.control.connections.load(Ordering::Relaxed), 0);
    assert_eq!(pool.known_layout(), None);
    let ids = pool.next_ids(3).await.unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(a.control.connections.load(Ordering::Relaxed), 1);
    assert!(pool.known_layout().is_some());
    assert_eq!(pool.fetch_layout().await.unwrap(), pool.layout());
}

#[tokio::test]
async fn a_built_pool_starts_with_no_node_reachable_and_fails_its_calls_until_one_is() {
    // A port nothing listens on: taken, then freed.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let pool = Pool::builder()
        .node(free)
        .connect_timeout(Duration::from_millis(200))
        .call_deadline(Duration::from_millis(500))
        .build()
        .unwrap();
    assert!(pool.next_id().await.is_err());
    assert!(pool.fetch_layout().await.is_err());
}

#[tokio::test]
async fn nodes_and_timeouts_from_a_url_or_the_environment_and_never_both() {
    let (a, b) = (node(0).await, node(1).await);
    a.control
        .script_at(&[(0, Action::Error(Status::BUSY, "busy"))]);
    let pool = Pool::builder()
        .url(&format!("idgen://{},{}?timeout_ms=500", a.addr, b.addr))
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(pool.options().request_timeout, Duration::from_millis(500));
    let nodes: Vec<String> = pool.nodes().into_iter().map(|n| n.addr).collect();
    assert_eq!(nodes, [a.addr.to_string(), b.addr.to_string()]);
    pool.next_id().await.unwrap();
    assert_eq!(b.control.get_ids_counts(), [1], "the call failed over to b");

    let env = [
        ("IDGEN_NODES", format!(" {} ", b.addr)),
        ("IDGEN_CLIENT_CONNECT_TIMEOUT_MS", "250".into()),
    ];
    let config =
        ClientConfig::from_lookup(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
            .unwrap();
    let pool = Pool::builder()
        .config(config.clone())
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(pool.options().connect_timeout, Duration::from_millis(250));
    pool.next_id().await.unwrap();

    // A setting given in code and in the URL: refused, not silently overridden.
    let both = Pool::builder()
        .request_timeout(Duration::from_secs(1))
        .url(&format!("idgen://{}?timeout_ms=500", a.addr))
        .unwrap()
        .build();
    assert!(matches!(both, Err(Error::InvalidArgument(m)) if m.contains("both")));
    let both = Pool::builder().node(a.addr).config(config).unwrap().build();
    assert!(matches!(both, Err(Error::InvalidArgument(m)) if m.contains("both")));
    // expand=true builds a pool that resolves at its first call.
    assert!(Pool::builder()
        .url("idgen://h:7420?expand=true")
        .unwrap()
        .build()
        .is_ok());
    assert!(Pool::builder().url("http://h:7420").is_err());
}

#[tokio::test]
async fn a_failover_reaches_the_hooks_and_a_panicking_hook_changes_nothing() {
    let (a, b) = (node(0).await, node(1).await);
    a.control
        .script_at(&[(0, Action::Error(Status::BUSY, "busy"))]);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&seen);
    let pool = Pool::builder()
        .nodes([a.addr, b.addr])
        .hook(move |e: &Event<'_>| {
            let line = match e {
                Event::Failover { from, to, .. } => format!("failover {from} -> {to}"),
                Event::Refused { status, node, .. } => format!("refused {} {node}", status.0),
                Event::NodeDown { node, .. } => format!("node_down {node}"),
                Event::Request {
                    op,
                    count,
                    node,
                    error,
                    ..
                } => {
                    format!(
                        "request {op} {count} {} {}",
                        node.unwrap_or("-"),
                        error.is_none()
                    )
                }
                other => other.name().to_string(),
            };
            log.lock().unwrap().push(line);
        })
        .hook(|_: &Event<'_>| panic!("a hook that panics"))
        .build()
        .unwrap();
    let ids = pool.next_ids(2).await.unwrap();
    assert_eq!(ids.len(), 2);
    let (a, b) = (a.addr.to_string(), b.addr.to_string());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "connect".to_string(),
            format!("refused 306 {a}"),
            format!("node_down {a}"),
            format!("failover {a} -> {b}"),
            "connect".to_string(),
            format!("request ids 2 {b} true"),
        ]
    );
    // The panicking hook is called for every event and never breaks a call.
    assert_eq!(pool.next_ids(1).await.unwrap().len(), 1);
}
