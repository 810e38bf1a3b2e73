//! Version 7 UUIDs (protocol version 4, GET_UUIDS) against a real node: the `idgen` binary
//! of `IDGEN_BIN` (or the one Cargo built, `cargo build -p idgen`); without one these tests
//! fail, they never skip.

use std::collections::HashSet;
use std::time::Duration;

use idgen_client::{blocking, Client, Error, Pool, PoolOptions};

mod support;
use idgen_testkit::node::NodeProc;

fn node(args: &[&str]) -> NodeProc {
    let mut all = vec!["--store", "memory", "--shards", "1"];
    all.extend_from_slice(args);
    NodeProc::try_start(&all, &[]).unwrap_or_else(|e| panic!("idgen serve did not start: {e}"))
}

fn run<F: std::future::Future<Output = ()>>(node: &NodeProc, f: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), f).await });
    assert!(outcome.is_ok(), "timed out; node log:\n{}", node.log());
}

#[test]
fn uuids_are_version_7_increasing_and_decode_to_the_connections_ids() {
    // A small max_batch: a call above it is split into several GET_UUIDS and joined.
    let node = node(&["--max-batch", "1000"]);
    run(&node, async {
        let client = Client::connect(node.addr).await.unwrap();
        assert_eq!(client.hello().version, idgen_protocol::PROTOCOL_VERSION);
        let layout = client.layout();
        let workers = client.hello().workers;
        let before = client.next_id().await.unwrap();
        let one = client.next_uuid().await.unwrap();
        let many = client.next_uuids(2_500).await.unwrap();
        let after = client.next_id().await.unwrap();
        assert_eq!(many.len(), 2_500);
        let all: Vec<uuid::Uuid> = std::iter::once(one).chain(many).collect();
        assert!(all.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        let mut last = before;
        let mut seen = HashSet::new();
        for u in &all {
            assert_eq!(u.get_version_num(), 7, "{u}");
            assert_eq!(u.get_variant(), uuid::Variant::RFC4122, "{u}");
            // The `uuid` crate reads the same millisecond the node wrote.
            let (secs, nanos) = u.get_timestamp().expect("a v7 timestamp").to_unix();
            let d = layout.decode_uuid_v7(*u.as_bytes()).unwrap();
            assert_eq!(secs * 1000 + u64::from(nanos / 1_000_000), d.parts.unix_ms);
            assert!(
                d.id.0 > last,
                "made from this connection's next IDs, in order"
            );
            last = d.id.0;
            assert!(workers.contains(d.parts.worker));
            assert!(seen.insert(d.id));
        }
        assert!(after > last);
    });
}

#[test]
fn a_count_of_0_is_refused_before_sending_and_counts_above_max_batch_are_split() {
    let node = node(&["--max-batch", "10"]);
    run(&node, async {
        let client = Client::connect(node.addr).await.unwrap();
        assert!(matches!(
            client.next_uuids(0).await,
            Err(Error::InvalidArgument(_))
        ));
        // Still usable afterwards.
        assert_eq!(client.next_uuids(25).await.unwrap().len(), 25);
    });
}

/// A node that negotiated version 3 (the fake node of `support`, announcing 3): no UUIDs,
/// refused before anything is sent, and the connection stays usable.
#[test]
fn a_version_3_node_gets_no_get_uuids() {
    let (rt, fake) = support::SeqNode::spawn(support::Config::default());
    rt.block_on(async {
        let client = Client::connect(fake.addr).await.unwrap();
        assert_eq!(client.hello().version, 3);
        let e = client.next_uuids(3).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::NodeVersion {
                    version: 3,
                    required: 4
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "the node speaks protocol version 3; UUIDs need version 4"
        );
        assert!(!e.closes_connection());
        assert!(
            client.next_id().await.is_ok(),
            "the connection stays usable"
        );
        assert!(
            fake.control
                .frames()
                .iter()
                .all(|f| f.get(4) != Some(&idgen_protocol::OP_GET_UUIDS)),
            "no GET_UUIDS was sent"
        );
    });
}

fn pool_options() -> PoolOptions {
    PoolOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .request_timeout(Duration::from_secs(5))
        .call_deadline(Duration::from_secs(10))
        .backoff_min(Duration::from_millis(100))
        .backoff_max(Duration::from_millis(400))
}

/// Checks what every UUID call promises: version 7, the RFC variant, strictly increasing,
/// and each made from an ID of `layout` (decodable, in the node's layout).
fn check_uuids(layout: idgen_client::Layout, uuids: &[uuid::Uuid]) {
    assert!(uuids.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
    for u in uuids {
        assert_eq!(u.get_version_num(), 7, "{u}");
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122, "{u}");
        layout
            .decode_uuid_v7(*u.as_bytes())
            .unwrap_or_else(|e| panic!("{u} does not decode: {e}"));
    }
}

#[test]
fn the_pool_hands_out_uuids_and_fails_over_to_the_next_node() {
    let mut first = node(&["--max-batch", "100"]);
    let second = node(&["--max-batch", "100"]);
    run(&second, async {
        let addrs = [first.addr.to_string(), second.addr.to_string()];
        let pool = Pool::connect(&addrs, pool_options()).await.unwrap();
        assert!(matches!(
            pool.next_uuids(0).await,
            Err(Error::InvalidArgument(_))
        ));
        let layout = pool.layout();
        let mut got = vec![pool.next_uuid().await.unwrap()];
        got.extend(pool.next_uuids(250).await.unwrap());
        assert_eq!(got.len(), 251);
        check_uuids(layout, &got);
        assert!(pool.nodes()[0].current, "served by the first node");
        // The current node dies: the whole batch is asked of the other one.
        first.kill();
        let after = pool.next_uuids(250).await.unwrap();
        assert_eq!(after.len(), 250);
        check_uuids(layout, &after);
        let nodes = pool.nodes();
        assert!(nodes[1].current, "the second node serves now: {nodes:?}");
        assert!(
            nodes[0].failures > 0,
            "the dead node is marked down: {nodes:?}"
        );
    });
}

#[test]
fn the_pool_returns_node_version_from_a_version_3_node_without_failing_over() {
    let (rt, fake) = support::SeqNode::spawn(support::Config::default());
    let real = node(&[]);
    rt.block_on(async {
        let addrs = [fake.addr.to_string(), real.addr.to_string()];
        let pool = Pool::connect(&addrs, pool_options()).await.unwrap();
        assert!(pool.nodes()[0].current);
        let e = pool.next_uuids(3).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::NodeVersion {
                    version: 3,
                    required: 4
                }
            ),
            "{e}"
        );
        let nodes = pool.nodes();
        assert!(
            nodes[0].current && nodes[0].failures == 0,
            "no failover for it: {nodes:?}"
        );
        assert!(
            fake.control
                .frames()
                .iter()
                .all(|f| f.get(4) != Some(&idgen_protocol::OP_GET_UUIDS)),
            "no GET_UUIDS was sent"
        );
    });
}

#[test]
fn the_blocking_client_and_pool_hand_out_uuids_from_plain_threads() {
    let node = node(&["--max-batch", "100"]);
    let client = blocking::Client::connect(node.addr).unwrap();
    let layout = client.layout();
    let mut got = vec![client.next_uuid().unwrap()];
    got.extend(client.next_uuids(150).unwrap());
    assert_eq!(got.len(), 151);
    check_uuids(layout, &got);
    assert!(matches!(
        client.next_uuids(0),
        Err(Error::InvalidArgument(_))
    ));

    let pool = blocking::Pool::connect(&[node.addr.to_string()], pool_options()).unwrap();
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut mine = vec![pool.next_uuid().unwrap()];
                mine.extend(pool.next_uuids(120).unwrap());
                mine
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in threads {
        let mine = t.join().unwrap();
        assert_eq!(mine.len(), 121);
        check_uuids(layout, &mine);
        all.extend(mine);
    }
    assert_eq!(all.len(), 363, "no UUID twice across threads");
    assert!(matches!(pool.next_uuids(0), Err(Error::InvalidArgument(_))));
}

/// A node with a JavaScript-safe layout (41/2/10, 53 bits): the client takes the layout from
/// HELLO_OK, its IDs are at most 2^53 - 1, and its UUIDs decode to them.
#[test]
fn a_53_bit_nodes_ids_and_uuids() {
    let node = node(&[
        "--timestamp-bits",
        "41",
        "--worker-bits",
        "2",
        "--sequence-bits",
        "10",
    ]);
    run(&node, async {
        let client = Client::connect(node.addr).await.unwrap();
        let layout = client.layout();
        assert_eq!((layout.id_bits(), layout.is_js_safe()), (53, true));
        let ids = client.next_ids(5_000).await.unwrap();
        assert!(ids.iter().all(|&id| id < 1 << 53));
        assert!(ids.iter().all(|&id| layout.check_id(id).is_ok()));
        let uuids = client.next_uuids(100).await.unwrap();
        for u in &uuids {
            let d = layout.decode_uuid_v7(*u.as_bytes()).unwrap();
            assert!(d.id.0 > *ids.last().unwrap() && d.id <= layout.max_id());
            assert_eq!(d.random_bits, 74 - 12);
        }
    });
}
