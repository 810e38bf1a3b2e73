//! The behaviour every [`KvStore`] must have, as one async test suite that each adapter's tests
//! run against a real instance of that store (the memory and embedded stores in their unit
//! tests, a real etcd in `tests/store_etcd.rs`).
//!
//! For tests only: built for this crate's unit tests and, for the integration tests, with the
//! `conformance` cargo feature; it is not part of the supported API.

use super::{Check, Commit, CommitOrGet, KvStore, StoreError, Txn, Write};

fn k(prefix: &str, s: &str) -> Vec<u8> {
    format!("{prefix}{s}").into_bytes()
}

/// Runs the whole suite under `prefix` (which must be empty in the store).
pub async fn run(store: &dyn KvStore, prefix: &str) -> Result<(), StoreError> {
    // Absent keys read as None; scans of an empty prefix are empty.
    assert_eq!(store.get(&k(prefix, "a")).await?, None);
    assert!(store.scan(prefix.as_bytes()).await?.is_empty());

    // Create-if-absent succeeds once.
    let mut t = Txn::new(store);
    assert_eq!(t.get(&k(prefix, "a")).await?, None);
    t.put(k(prefix, "a"), b"1".to_vec());
    assert_eq!(t.commit().await?, Commit::Applied);
    let mut t = Txn::new(store);
    assert_eq!(t.get(&k(prefix, "x")).await?, None);
    let mut stale = Txn::new(store);
    assert_eq!(stale.get(&k(prefix, "a")).await?, Some(b"1".to_vec()));
    // A second create-if-absent of "a" conflicts.
    let mut again = Txn::new(store);
    again.put(k(prefix, "a"), b"other".to_vec());
    let absent = [Check {
        key: k(prefix, "a"),
        version: 0,
    }];
    assert_eq!(
        store
            .commit(
                &absent,
                &[Write::Put {
                    key: k(prefix, "a"),
                    value: b"other".to_vec()
                }]
            )
            .await?,
        Commit::Conflict
    );
    drop(again);

    // Read-modify-write: the first of two commits on the same read wins.
    let e1 = store.get(&k(prefix, "a")).await?.expect("present");
    assert_ne!(e1.version, 0);
    t.put(k(prefix, "x"), b"x".to_vec());
    assert_eq!(t.commit().await?, Commit::Applied);
    stale.put(k(prefix, "a"), b"2".to_vec());
    assert_eq!(stale.commit().await?, Commit::Applied);
    let e2 = store.get(&k(prefix, "a")).await?.expect("present");
    assert_eq!(e2.value, b"2");
    assert_ne!(e2.version, e1.version, "a write changes the version");
    let mut late = Txn::new(store);
    late.put(k(prefix, "a"), b"3".to_vec());
    let old = [Check {
        key: k(prefix, "a"),
        version: e1.version,
    }];
    assert_eq!(
        store
            .commit(
                &old,
                &[Write::Put {
                    key: k(prefix, "a"),
                    value: b"3".to_vec()
                }]
            )
            .await?,
        Commit::Conflict,
        "a commit checked against an old version must conflict"
    );
    drop(late);
    assert_eq!(store.get(&k(prefix, "a")).await?.unwrap().value, b"2");

    // commit_or_get: a conflict comes with the key as it is now; a commit that applies says
    // the version the key has now, if it says one at all (and then it is the real one).
    let put = |v: &[u8]| {
        [Write::Put {
            key: k(prefix, "a"),
            value: v.to_vec(),
        }]
    };
    match store
        .commit_or_get(&old, &put(b"4"), &k(prefix, "a"))
        .await?
    {
        CommitOrGet::Conflict(Some(now)) => assert_eq!(now, e2),
        other => panic!("commit_or_get on an old version: {other:?}"),
    }
    let fresh = [Check {
        key: k(prefix, "a"),
        version: e2.version,
    }];
    match store
        .commit_or_get(&fresh, &put(b"5"), &k(prefix, "a"))
        .await?
    {
        CommitOrGet::Applied(version) => {
            let now = store.get(&k(prefix, "a")).await?.expect("present");
            assert_eq!(now.value, b"5");
            if let Some(v) = version {
                assert_eq!(v, now.version, "the version commit_or_get says");
            }
            // Restore what the rest of the suite expects, checked against that version.
            let back = [Check {
                key: k(prefix, "a"),
                version: now.version,
            }];
            assert_eq!(store.commit(&back, &put(b"2")).await?, Commit::Applied);
        }
        other => panic!("commit_or_get on the current version: {other:?}"),
    }
    let gone = [Check {
        key: k(prefix, "nothing"),
        version: 7,
    }];
    assert_eq!(
        store
            .commit_or_get(&gone, &put(b"6"), &k(prefix, "nothing"))
            .await?,
        CommitOrGet::Conflict(None)
    );
    let e2 = store.get(&k(prefix, "a")).await?.expect("present");
    assert_eq!(e2.value, b"2");

    // A failed check writes nothing, not even the writes to other keys.
    let checks = [Check {
        key: k(prefix, "a"),
        version: e1.version,
    }];
    let writes = [
        Write::Put {
            key: k(prefix, "b"),
            value: b"b".to_vec(),
        },
        Write::Put {
            key: k(prefix, "a"),
            value: b"4".to_vec(),
        },
    ];
    assert_eq!(store.commit(&checks, &writes).await?, Commit::Conflict);
    assert_eq!(store.get(&k(prefix, "b")).await?, None);

    // Several writes commit together; deletes work; scans are ordered and bounded.
    let mut t = Txn::new(store);
    t.get(&k(prefix, "a")).await?;
    t.put(k(prefix, "b"), b"b".to_vec());
    t.put(k(prefix, "c"), b"c".to_vec());
    t.delete(k(prefix, "x"));
    assert_eq!(t.commit().await?, Commit::Applied);
    let keys: Vec<Vec<u8>> = store
        .scan(prefix.as_bytes())
        .await?
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        keys,
        vec![k(prefix, "a"), k(prefix, "b"), k(prefix, "c")],
        "scan in key order, delete applied"
    );
    // A scan of a longer prefix does not see its siblings.
    let only_b = store.scan(&k(prefix, "b")).await?;
    assert_eq!(only_b.len(), 1);
    // A check that the deleted key is absent holds.
    let mut t = Txn::new(store);
    assert_eq!(t.get(&k(prefix, "x")).await?, None);
    t.put(k(prefix, "x"), b"back".to_vec());
    assert_eq!(t.commit().await?, Commit::Applied);
    Ok(())
}
