//! Protocol version 5 (GET_IDS_WITH) through the client against a real node: IDs after one
//! seen, idempotency keys, masked IDs; the `idgen` binary of `IDGEN_BIN` (or the one Cargo
//! built); without one these tests fail, they never skip.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idgen_client::{Client, Error, IdOptions, Layout, Status};

mod support;
use idgen_testkit::node::NodeProc;

fn node(args: &[&str], env: &[(&str, &str)]) -> NodeProc {
    let mut all = vec!["--store", "memory", "--shards", "1"];
    all.extend_from_slice(args);
    NodeProc::try_start(&all, env).unwrap_or_else(|e| panic!("idgen serve did not start: {e}"))
}

fn run<F: std::future::Future<Output = ()>>(node: &NodeProc, f: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), f).await });
    assert!(outcome.is_ok(), "timed out; node log:\n{}", node.log());
}

fn status(e: Error) -> Status {
    match e {
        Error::Server { status, .. } => status,
        other => panic!("not a refusal: {other:?}"),
    }
}

#[test]
fn ids_after_one_seen_are_greater_even_from_a_clock_ahead() {
    let node = node(&["--max-drift", "1s"], &[]);
    run(&node, async {
        let c = Client::connect(node.addr).await.unwrap();
        let seen = *c.next_ids(3).await.unwrap().last().unwrap();
        let after = |a| IdOptions {
            after: Some(a),
            ..IdOptions::default()
        };
        let ids = c.next_ids_with(10, &after(seen)).await.unwrap();
        assert!(ids.iter().all(|&id| id > seen));
        // An ID from a node 300 ms ahead.
        let l = Layout::default();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let ahead = l
            .compose(now + 300 - l.epoch_ms(), l.max_worker(), l.max_sequence())
            .unwrap()
            .0;
        let ids = c.next_ids_with(5, &after(ahead)).await.unwrap();
        assert!(ids.iter().all(|&id| id > ahead));
        // Client-side checks: nothing sent.
        assert!(matches!(
            c.next_ids_with(0, &IdOptions::default()).await,
            Err(Error::InvalidArgument(_))
        ));
        let bad_key = IdOptions {
            idempotency_key: Some("with space".into()),
            ..IdOptions::default()
        };
        assert!(matches!(
            c.next_ids_with(1, &bad_key).await,
            Err(Error::InvalidArgument(_))
        ));
        // The node's refusals: keys and masking not enabled here.
        let keyed = IdOptions {
            idempotency_key: Some("k".into()),
            ..IdOptions::default()
        };
        assert_eq!(
            status(c.next_ids_with(1, &keyed).await.unwrap_err()),
            Status::INVALID_OPTION
        );
        assert_eq!(
            status(
                c.next_masked_ids(1, &IdOptions::default())
                    .await
                    .unwrap_err()
            ),
            Status::INVALID_OPTION
        );
        // The connection stays usable.
        assert_eq!(c.next_ids(1).await.unwrap().len(), 1);
    });
}

#[test]
fn a_key_gets_the_same_ids_again_and_masked_ids_unmask_to_increasing_ones() {
    let keys = "5:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    let node = node(
        &["--idempotency-window", "30s"],
        &[("IDGEN_MASK_KEYS", keys)],
    );
    run(&node, async {
        let c = Client::connect(node.addr).await.unwrap();
        let keyed = IdOptions {
            idempotency_key: Some("order-7".into()),
            ..IdOptions::default()
        };
        let first = c.next_ids_with(4, &keyed).await.unwrap();
        let other = Client::connect(node.addr).await.unwrap();
        assert_eq!(other.next_ids_with(4, &keyed).await.unwrap(), first);
        assert_eq!(
            status(other.next_ids_with(5, &keyed).await.unwrap_err()),
            Status::IDEMPOTENCY_KEY_REUSED
        );
        let masked = c.next_masked_ids(20, &IdOptions::default()).await.unwrap();
        assert_eq!(masked.key_id, 5);
        let ring = idgen_id::mask::Keyring::parse(keys).unwrap();
        let ids: Vec<u64> = masked
            .ids
            .iter()
            .map(|&m| ring.unmask(m, 63).unwrap())
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let strings = masked.strings();
        assert_eq!(strings.len(), 20);
        for (s, id) in strings.iter().zip(&ids) {
            assert!(s.starts_with('5') && s.len() == 12, "{s}");
            assert_eq!(ring.unmask_str(s, 63).unwrap(), *id);
        }
    });
}

/// FNV-1a 64 of a key: how every idgen client picks the node of an idempotency key.
fn fnv1a(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn a_pool_sends_a_key_to_its_node_only_and_says_so_when_that_node_fails() {
    use idgen_client::{Pool, PoolOptions};
    let node = node(&["--idempotency-window", "30s"], &[]);
    run(&node, async {
        // The second address refuses connections.
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let addrs = [node.addr.to_string(), dead_addr.to_string()];
        let pool = Pool::connect(
            &addrs,
            PoolOptions::default().call_deadline(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        let key_for = |want: u64| {
            (0..)
                .map(|i| format!("key-{i}"))
                .find(|k| fnv1a(k) % 2 == want)
                .unwrap()
        };
        let live = IdOptions {
            idempotency_key: Some(key_for(0)),
            ..IdOptions::default()
        };
        let once = pool.next_ids_with(3, &live).await.unwrap();
        assert_eq!(pool.next_ids_with(3, &live).await.unwrap(), once);
        let gone = IdOptions {
            idempotency_key: Some(key_for(1)),
            ..IdOptions::default()
        };
        match pool.next_ids_with(3, &gone).await {
            Err(Error::KeyNodeFailed { node, .. }) => assert_eq!(node, dead_addr.to_string()),
            other => panic!("a keyed call failed over or succeeded: {other:?}"),
        }
        // Without a key the same call fails over to the live node.
        assert_eq!(
            pool.next_ids_with(3, &IdOptions::default())
                .await
                .unwrap()
                .len(),
            3
        );
    });
}
