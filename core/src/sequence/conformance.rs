//! The sequence behaviours every store must give, as one async suite each store's tests run
//! against a real instance (`MemoryStore` and `EmbeddedStore` in unit tests, a real etcd in
//! `tests/leases_etcd.rs`), like the lease conformance suite beside it. Each behaviour runs in
//! a fresh namespace (`<prefix>-<behaviour>`); a failed check panics, naming the behaviour.
//!
//! For tests only: built for this crate's unit tests and, for the integration tests, with the
//! `conformance` cargo feature; it is not part of the supported API.

use std::collections::BTreeSet;

use super::{
    Alter, Block, Mode, SequenceError, SequenceName, SequenceSpec, SequenceState, Sequences,
    MAX_VALUE,
};
use crate::lease::conformance::join_all;
use crate::store::KvStore;

const NOW: u64 = 1_750_000_000_000;
/// Reservations racing in [`concurrent_reservations_never_share_a_value`].
const RACERS: usize = 8;

fn name(s: &str) -> SequenceName {
    s.parse().expect("a valid name")
}

/// Runs every behaviour against `store`, each in a fresh namespace under `namespace_prefix`.
pub async fn run(store: &dyn KvStore, namespace_prefix: &str) {
    let ns = |what: &str| format!("{namespace_prefix}-seq-{what}");
    created_sequences_read_back_and_list_in_name_order(store, &ns("create")).await;
    blocks_follow_each_other_without_sharing_a_value(store, &ns("blocks")).await;
    the_maximum_ends_a_block_early_then_refuses(store, &ns("max")).await;
    alter_never_goes_below_a_value_a_block_holds(store, &ns("alter")).await;
    a_name_created_again_after_a_drop_starts_above_the_old_values(store, &ns("drop")).await;
    concurrent_reservations_never_share_a_value(store, &ns("race")).await;
}

async fn created_sequences_read_back_and_list_in_name_order(store: &dyn KvStore, ns: &str) {
    let s = Sequences::new(store, ns);
    let b = s
        .create(&name("b.orders"), SequenceSpec::new(Mode::Strict), NOW)
        .await
        .expect("create b");
    let mut spec = SequenceSpec::new(Mode::Dense);
    spec.start = 1000;
    spec.increment = 5;
    let a = s
        .create(&name("a.invoices-42"), spec.clone(), NOW)
        .await
        .expect("create a");
    assert_eq!(a.next, 1000, "{ns}: a new sequence's next is its start");
    assert_eq!(a.spec, spec, "{ns}");
    assert_eq!(a.state, SequenceState::Live, "{ns}");
    assert_eq!(
        s.get(&name("a.invoices-42")).await.expect("get"),
        Some(a.clone()),
        "{ns}: a sequence reads back as created"
    );
    assert_eq!(s.get(&name("nope")).await.expect("get"), None, "{ns}");
    let listed = s.list().await.expect("list");
    assert_eq!(listed, vec![a, b], "{ns}: list is in name order");
    let again = s
        .create(&name("b.orders"), SequenceSpec::new(Mode::Dense), NOW)
        .await;
    assert!(
        matches!(again, Err(SequenceError::Exists(_))),
        "{ns}: creating a live name again is refused: {again:?}"
    );
}

async fn blocks_follow_each_other_without_sharing_a_value(store: &dyn KvStore, ns: &str) {
    let s = Sequences::new(store, ns);
    let n = name("counter");
    let mut spec = SequenceSpec::new(Mode::Dense);
    spec.start = 10;
    spec.increment = 3;
    s.create(&n, spec, NOW).await.expect("create");
    let b1 = s.reserve(&n, 4).await.expect("reserve");
    let b2 = s.reserve(&n, 2).await.expect("reserve");
    assert_eq!(
        (b1.first, b1.count, b1.step, b1.last()),
        (10, 4, 3, 19),
        "{ns}"
    );
    assert_eq!(
        (b2.first, b2.count),
        (22, 2),
        "{ns}: the next block starts where the last ended"
    );
    let rec = s.get(&n).await.expect("get").expect("present");
    assert_eq!((rec.next, rec.blocks), (28, 2), "{ns}");
    assert!(
        matches!(
            s.reserve(&name("missing"), 1).await,
            Err(SequenceError::NotFound(_))
        ),
        "{ns}: an unknown name is refused"
    );
    for bad in [0, super::MAX_BLOCK + 1] {
        assert!(
            matches!(s.reserve(&n, bad).await, Err(SequenceError::BadSpec(_))),
            "{ns}: a block of {bad} is refused"
        );
    }
}

async fn the_maximum_ends_a_block_early_then_refuses(store: &dyn KvStore, ns: &str) {
    let s = Sequences::new(store, ns);
    let n = name("small");
    let mut spec = SequenceSpec::new(Mode::Dense);
    spec.start = 1;
    spec.increment = 2;
    spec.max = 8;
    s.create(&n, spec, NOW).await.expect("create");
    let b = s.reserve(&n, 100).await.expect("reserve");
    assert_eq!(
        (b.first, b.count, b.last()),
        (1, 4, 7),
        "{ns}: 1, 3, 5, 7 fit under 8"
    );
    let rec = s.get(&n).await.expect("get").expect("present");
    assert_eq!(rec.remaining(), 0, "{ns}");
    let r = s.reserve(&n, 1).await;
    assert!(
        matches!(r, Err(SequenceError::Exhausted { max: 8, .. })),
        "{ns}: a used-up sequence refuses: {r:?}"
    );
    // Raising the maximum lets it go on above every value handed out.
    s.alter(
        &n,
        Alter {
            max: Some(12),
            ..Alter::default()
        },
        NOW,
    )
    .await
    .expect("raise max");
    let b = s.reserve(&n, 100).await.expect("reserve after raise");
    assert_eq!((b.first, b.count), (9, 2), "{ns}: 9 and 11");
    let mut spec = SequenceSpec::new(Mode::Dense);
    spec.start = MAX_VALUE;
    let top = name("top");
    s.create(&top, spec, NOW).await.expect("create at the top");
    let b = s.reserve(&top, 10).await.expect("reserve at the top");
    assert_eq!((b.first, b.count), (MAX_VALUE, 1), "{ns}");
    assert!(
        matches!(
            s.reserve(&top, 1).await,
            Err(SequenceError::Exhausted { .. })
        ),
        "{ns}"
    );
}

async fn alter_never_goes_below_a_value_a_block_holds(store: &dyn KvStore, ns: &str) {
    let s = Sequences::new(store, ns);
    let n = name("alter");
    s.create(&n, SequenceSpec::new(Mode::Dense), NOW)
        .await
        .expect("create");
    let b = s.reserve(&n, 10).await.expect("reserve"); // 1..=10
    assert_eq!(b.last(), 10);
    for (what, change) in [
        (
            "restart below next",
            Alter {
                restart: Some(10),
                ..Alter::default()
            },
        ),
        (
            "max below a held value",
            Alter {
                max: Some(9),
                ..Alter::default()
            },
        ),
        (
            "increment 0",
            Alter {
                increment: Some(0),
                ..Alter::default()
            },
        ),
        (
            "restart above max",
            Alter {
                restart: Some(100),
                max: Some(50),
                ..Alter::default()
            },
        ),
    ] {
        let r = s.alter(&n, change, NOW).await;
        assert!(r.is_err(), "{ns}: {what} is refused: {r:?}");
    }
    let before = s.get(&n).await.expect("get").expect("present");
    assert_eq!(before.next, 11, "{ns}: a refused change changes nothing");
    let after = s
        .alter(
            &n,
            Alter {
                restart: Some(1000),
                increment: Some(10),
                max: Some(10),
                max_block: None,
            },
            NOW + 1,
        )
        .await;
    assert!(after.is_err(), "{ns}: restart above the new max: {after:?}");
    let after = s
        .alter(
            &n,
            Alter {
                restart: Some(1000),
                increment: Some(10),
                ..Alter::default()
            },
            NOW + 1,
        )
        .await
        .expect("restart higher, new increment");
    assert!(
        after.revision > before.revision,
        "{ns}: a change bumps the revision"
    );
    let b = s.reserve(&n, 3).await.expect("reserve");
    assert_eq!((b.first, b.step, b.last()), (1000, 10, 1020), "{ns}");
    // Lowering the maximum to the last value held is allowed; one below is not.
    s.alter(
        &n,
        Alter {
            max: Some(1029),
            ..Alter::default()
        },
        NOW,
    )
    .await
    .expect("max at the last value a block may hold");
    assert!(
        matches!(s.reserve(&n, 1).await, Err(SequenceError::Exhausted { .. })),
        "{ns}: nothing is left under the lowered max"
    );
}

async fn a_name_created_again_after_a_drop_starts_above_the_old_values(
    store: &dyn KvStore,
    ns: &str,
) {
    let s = Sequences::new(store, ns);
    let n = name("dropped");
    s.create(&n, SequenceSpec::new(Mode::Dense), NOW)
        .await
        .expect("create");
    let old = s.reserve(&n, 50).await.expect("reserve"); // 1..=50
    let dropped = s.drop(&n, false, NOW).await.expect("drop");
    assert_eq!(dropped.state, SequenceState::Dropped, "{ns}");
    assert!(
        matches!(s.reserve(&n, 1).await, Err(SequenceError::NotFound(_))),
        "{ns}: a dropped sequence refuses"
    );
    assert!(
        matches!(
            s.drop(&n, false, NOW).await,
            Err(SequenceError::NotFound(_))
        ),
        "{ns}: dropping twice is refused"
    );
    assert!(
        s.alter(&n, Alter::default(), NOW).await.is_err(),
        "{ns}: a dropped sequence cannot be altered"
    );
    let again = s
        .create(&n, SequenceSpec::new(Mode::Strict), NOW)
        .await
        .expect("create again");
    assert_eq!(again.state, SequenceState::Live);
    let b = s.reserve(&n, 1).await.expect("reserve");
    assert!(
        b.first > old.last(),
        "{ns}: the new sequence starts above the dropped one's values: {} after {}",
        b.first,
        old.last()
    );
    assert!(again.revision > dropped.revision, "{ns}");
    // Forgotten, the name starts over.
    s.drop(&n, true, NOW).await.expect("drop and forget");
    assert_eq!(s.get(&n).await.expect("get"), None, "{ns}: forgotten");
    s.create(&n, SequenceSpec::new(Mode::Dense), NOW)
        .await
        .expect("create after forget");
    assert_eq!(s.reserve(&n, 1).await.expect("reserve").first, 1, "{ns}");
}

async fn concurrent_reservations_never_share_a_value(store: &dyn KvStore, ns: &str) {
    let s = Sequences::new(store, ns);
    let n = name("race");
    s.create(&n, SequenceSpec::new(Mode::Dense), NOW)
        .await
        .expect("create");
    let mut blocks: Vec<Block> = Vec::new();
    for _round in 0..3 {
        let racers = (0..RACERS).map(|i| s.reserve(&n, 1 + i as u64)).collect();
        for r in join_all(racers).await {
            match r {
                Ok(b) => blocks.push(b),
                Err(SequenceError::Contention { .. }) => {}
                Err(e) => panic!("{ns}: reserve: {e}"),
            }
        }
    }
    assert!(!blocks.is_empty(), "{ns}: some reservations commit");
    let mut seen = BTreeSet::new();
    for b in &blocks {
        for i in 0..b.count {
            assert!(
                seen.insert(b.value(i)),
                "{ns}: value {} in two blocks",
                b.value(i)
            );
        }
    }
    let rec = s.get(&n).await.expect("get").expect("present");
    assert_eq!(
        rec.blocks,
        blocks.len() as u64,
        "{ns}: one record update per block"
    );
    assert_eq!(
        *seen.last().expect("values") + 1,
        rec.next,
        "{ns}: blocks are contiguous"
    );
    assert_eq!(
        seen.len() as u64,
        rec.next - 1,
        "{ns}: no gap between committed blocks"
    );
}
