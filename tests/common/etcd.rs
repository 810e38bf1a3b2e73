//! The kit's etcd cluster (`idgen_testkit::etcd`), plus what needs the server crate itself.

#[allow(unused_imports)] // each test binary uses a different part
pub use idgen_testkit::etcd::*;

/// Writes, straight into etcd, the worker record of a rival grant over `first..first + count`
/// in namespace `default` under `prefix`: held or released by an owner of another instance,
/// with a new generation and `lease_end` (ID ms). A holder of that range finds its lease lost
/// at its next renewal; a released record gives the range back above `lease_end`.
#[cfg(feature = "etcd")]
pub fn write_rival_record(
    cluster: &EtcdCluster,
    prefix: &str,
    first: u64,
    count: u64,
    state: idgen::lease::WorkerState,
    lease_end: u64,
) {
    use idgen::store::{KvStore, Write};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = idgen::store::etcd::EtcdStore::connect(cluster.endpoints(), prefix.to_string())
            .await
            .expect("connect to etcd");
        let now = idgen_testkit::wall_ms();
        let record = idgen::lease::WorkerRecord {
            state,
            owner: idgen::lease::Owner::this_process(Some("rival".into()), now),
            generation: 1_000_000 + first,
            lease_end,
            count,
            layout_version: idgen::lease::LAYOUT_VERSION,
            written_unix_ms: now,
        };
        let writes = [Write::Put {
            key: format!("idgen/default/workers/{first:05}").into_bytes(),
            value: serde_json::to_vec(&record).expect("record"),
        }];
        store
            .commit(&[], &writes)
            .await
            .expect("write the rival record");
    })
}
