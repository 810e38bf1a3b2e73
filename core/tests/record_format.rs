//! Pins the lease records' format byte for byte (`docs/ARCHITECTURE.md`, "The lease records"):
//! the keys a cluster's members write, and each value, as a known grant, renewal, release and
//! clock key write them, and decodes known bytes back. A change to any of them fails here:
//! members of other versions, and generators in other languages, read and write these bytes.

use std::sync::Arc;
use std::time::Duration;

use idgen_core::clock::TestClock;
use idgen_core::drift::{ClockWatch, ClockWatcher};
use idgen_core::lease::{
    ClusterRecord, LayoutRecord, LeaseConfig, Leases, Owner, RegionScope, Released, WorkerRecord,
    WorkerState,
};
use idgen_core::store::memory::MemoryStore;
use idgen_core::store::{decode_versioned, encode_versioned, KvStore};
use idgen_id::{Layout, DEFAULT_EPOCH_MS};

fn owner() -> Owner {
    Owner {
        node_id: "node-a".into(),
        host: "host-1".into(),
        pid: 4242,
        started_unix_ms: 1_767_225_600_000,
        instance: "node-a/host-1/4242/1767225600000.000000007".into(),
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Every key under the namespace, with its value as text.
fn dump(store: &MemoryStore) -> Vec<(String, String)> {
    block_on(store.scan(b"idgen/fmt/"))
        .unwrap()
        .into_iter()
        .map(|e| {
            (
                String::from_utf8(e.key).unwrap(),
                String::from_utf8(e.value).unwrap(),
            )
        })
        .collect()
}

const OWNER_JSON: &str = r#"{"node_id":"node-a","host":"host-1","pid":4242,"started_unix_ms":1767225600000,"instance":"node-a/host-1/4242/1767225600000.000000007"}"#;

#[test]
fn a_grant_renewal_release_and_clock_key_write_these_bytes() {
    let store = MemoryStore::new();
    let layout = Layout::default();
    let mut config = LeaseConfig::new("fmt", 2);
    config.ttl = Duration::from_secs(10);
    config.safety = Duration::from_secs(20);
    let leases = Leases::new(&store, layout, config, owner());
    // ID time 1 000 000 ms after the layout's epoch (2026-01-01T00:00:00Z).
    let now = 1_767_226_600_000;
    assert_eq!(now, DEFAULT_EPOCH_MS + 1_000_000);
    let grant = block_on(leases.acquire(now)).unwrap();
    assert_eq!(
        (
            grant.workers.first,
            grant.workers.count,
            grant.generation,
            grant.floor,
            grant.lease_end
        ),
        (0, 2, 1, 0, 1_010_000)
    );
    let cluster = r#"{"layout":{"epoch_ms":1767225600000,"timestamp_bits":41,"worker_bits":10,"sequence_bits":12,"region_bits":0},"layout_version":2,"created_unix_ms":1767226600000,"created_by":"node-a/host-1/4242/1767225600000.000000007","region_scope":"global"}"#;
    let held = |lease_end: u64, written: u64| {
        format!(
            r#"{{"state":"held","owner":{OWNER_JSON},"generation":1,"lease_end":{lease_end},"count":2,"layout_version":2,"written_unix_ms":{written}}}"#
        )
    };
    assert_eq!(
        dump(&store),
        vec![
            ("idgen/fmt/cluster".to_string(), cluster.to_string()),
            ("idgen/fmt/generation".to_string(), "1".to_string()),
            ("idgen/fmt/workers/00000".to_string(), held(1_010_000, now)),
        ]
    );
    assert_eq!(leases.worker_key(7), b"idgen/fmt/workers/00007");
    assert_eq!(leases.worker_key(123_456), b"idgen/fmt/workers/123456");

    // A renewal moves lease_end to its clock + TTL and rewrites written_unix_ms, nothing else.
    let later = now + 3_000;
    assert_eq!(block_on(leases.renew(&grant, later)).unwrap(), 1_013_000);
    assert_eq!(dump(&store)[2].1, held(1_013_000, later));

    // A release writes the last timestamp issued as lease_end.
    let mut renewed = grant.clone();
    renewed.lease_end = 1_013_000;
    assert_eq!(
        block_on(leases.release(&renewed, Some(1_004_321), later + 1)).unwrap(),
        Released::Freed {
            lease_end: 1_004_321
        }
    );
    assert_eq!(
        dump(&store)[2].1,
        format!(
            r#"{{"state":"released","owner":{OWNER_JSON},"generation":1,"lease_end":1004321,"count":2,"layout_version":2,"written_unix_ms":{}}}"#,
            later + 1
        )
    );

    // The clock key: where the store expires keys, "expiring" is true (etcd); here it is not.
    let store: Arc<dyn KvStore> = Arc::new(store);
    let clock = TestClock::new(1_767_225_601_234);
    let watcher = ClockWatcher::new(
        Arc::clone(&store),
        "fmt",
        owner(),
        clock,
        ClockWatch::new(Duration::from_secs(1)),
    );
    block_on(watcher.publish());
    let key = b"idgen/fmt/clocks/node-a/host-1/4242/1767225600000.000000007";
    let value = block_on(store.get(key))
        .unwrap()
        .expect("the clock key")
        .value;
    assert_eq!(
        String::from_utf8(value).unwrap(),
        r#"{"unix_ms":1767225601234,"node_id":"node-a","expiring":false}"#
    );
}

#[test]
fn known_records_decode() {
    // A worker record of a one-worker version (no "count"): one worker ID.
    let old = format!(
        r#"{{"state":"held","owner":{OWNER_JSON},"generation":9,"lease_end":55,"layout_version":1,"written_unix_ms":77}}"#
    );
    let rec: WorkerRecord = serde_json::from_str(&old).unwrap();
    assert_eq!(
        rec,
        WorkerRecord {
            state: WorkerState::Held,
            owner: owner(),
            generation: 9,
            lease_end: 55,
            count: 1,
            layout_version: 1,
            written_unix_ms: 77,
        }
    );
    // Written back, it carries its count.
    assert_eq!(
        serde_json::to_string(&rec).unwrap(),
        format!(
            r#"{{"state":"held","owner":{OWNER_JSON},"generation":9,"lease_end":55,"count":1,"layout_version":1,"written_unix_ms":77}}"#
        )
    );
    // A cluster record of one region's store, and one from before region scopes.
    let regional = r#"{"layout":{"epoch_ms":1,"timestamp_bits":41,"worker_bits":10,"sequence_bits":12,"region_bits":2},"layout_version":2,"created_unix_ms":5,"created_by":"x","region_scope":{"region":3}}"#;
    let rec: ClusterRecord = serde_json::from_str(regional).unwrap();
    assert_eq!(
        rec,
        ClusterRecord {
            layout: LayoutRecord {
                epoch_ms: 1,
                timestamp_bits: 41,
                worker_bits: 10,
                sequence_bits: 12,
                region_bits: 2
            },
            layout_version: 2,
            created_unix_ms: 5,
            created_by: "x".into(),
            region_scope: Some(RegionScope::Region(3)),
            min_id: None,
            successors: Vec::new(),
        }
    );
    assert_eq!(serde_json::to_string(&rec).unwrap(), regional);
    // A cluster with a floor (record version 3): "min_id" after the scope.
    let floored = r#"{"layout":{"epoch_ms":1,"timestamp_bits":41,"worker_bits":10,"sequence_bits":12,"region_bits":0},"layout_version":3,"created_unix_ms":5,"created_by":"x","region_scope":"global","min_id":123456789012}"#;
    let rec: ClusterRecord = serde_json::from_str(floored).unwrap();
    assert_eq!((rec.layout_version, rec.min_id), (3, Some(123_456_789_012)));
    assert_eq!(serde_json::to_string(&rec).unwrap(), floored);
    // A cluster with a successor layout (record version 4): "successors" last.
    let succeeded = r#"{"layout":{"epoch_ms":1,"timestamp_bits":41,"worker_bits":10,"sequence_bits":12,"region_bits":0},"layout_version":4,"created_unix_ms":5,"created_by":"x","region_scope":"global","successors":[{"layout":{"epoch_ms":500000,"timestamp_bits":40,"worker_bits":11,"sequence_bits":12,"region_bits":0},"switch_unix_ms":1000000}]}"#;
    let rec: ClusterRecord = serde_json::from_str(succeeded).unwrap();
    assert_eq!(rec.successors[0].switch_unix_ms, 1_000_000);
    assert_eq!(serde_json::to_string(&rec).unwrap(), succeeded);
    let gens = rec.generations().unwrap();
    assert_eq!(gens.all()[1].first_id, 999_999 << 22);
    let unscoped = r#"{"layout":{"epoch_ms":1,"timestamp_bits":41,"worker_bits":10,"sequence_bits":12,"region_bits":0},"layout_version":1,"created_unix_ms":5,"created_by":"x"}"#;
    let rec: ClusterRecord = serde_json::from_str(unscoped).unwrap();
    assert_eq!(rec.region_scope, None);
    assert_eq!(serde_json::to_string(&rec).unwrap(), unscoped);
    // The stores that keep a key's version inside its value (embedded, FoundationDB, memory):
    // 8 bytes of version, big-endian, then the value.
    assert_eq!(
        encode_versioned(0x0102, b"{}"),
        [0, 0, 0, 0, 0, 0, 1, 2, b'{', b'}']
    );
    assert_eq!(
        decode_versioned(&[0, 0, 0, 0, 0, 0, 0, 9, b'7']).unwrap(),
        (9, &b"7"[..])
    );
}
