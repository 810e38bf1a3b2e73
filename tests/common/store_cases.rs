//! Store cases every replicated store passes the same way (etcd, PostgreSQL), run by each
//! store's test binary on a real server.

use idgen_core::store::{conformance, Commit, KvStore, StoreError, Txn};

/// Reads `key`, then writes `value` to it if it is unchanged.
pub async fn put(store: &dyn KvStore, key: &str, value: &str) -> Result<Commit, StoreError> {
    let mut t = Txn::new(store);
    t.get(key.as_bytes()).await?;
    t.put(key.as_bytes().to_vec(), value.as_bytes().to_vec());
    t.commit().await
}

/// The conformance suite in namespaces `a` (prefix `idgen-a`) and `b` (`idgen-b`) of one store,
/// each run starting from an empty namespace; `raw` (no prefix) sees both prefixes, its scans
/// in key order; a key's version changes only when that key is written.
pub async fn conforms_in_independent_namespaces(
    a: &dyn KvStore,
    b: &dyn KvStore,
    raw: &dyn KvStore,
) {
    conformance::run(a, "t/").await.unwrap();
    conformance::run(b, "t/").await.unwrap();
    conformance::run(a, "u/").await.unwrap();
    assert_eq!(a.scan(b"").await.unwrap().len(), 8);
    assert_eq!(b.scan(b"").await.unwrap().len(), 4);

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

    let before = a.get(b"t/a").await.unwrap().unwrap();
    put(b, "t/other", "x").await.unwrap();
    assert_eq!(a.get(b"t/a").await.unwrap().unwrap(), before);
}
