use proptest::prelude::*;

use super::check::{self, Call};
use super::dense::{Blocks, FIRST_BLOCK, TARGET_BLOCK_MS};
use super::strict::Batches;
use super::*;
use crate::store::memory::MemoryStore;

const NOW: u64 = 1_750_000_000_000;

fn name(s: &str) -> SequenceName {
    s.parse().unwrap()
}

fn block(first: u64, count: u64) -> Block {
    Block {
        first,
        count,
        step: 1,
        revision: 1,
        mode: Mode::Dense,
        max_block: DEFAULT_MAX_BLOCK,
        max: MAX_VALUE,
        remaining: MAX_VALUE,
    }
}

#[test]
fn names_are_short_lowercase_words_that_start_with_a_letter_or_digit() {
    for good in [
        "a",
        "invoice.tenant-42",
        "orders_2026",
        "9lives",
        &"x".repeat(64),
    ] {
        assert!(good.parse::<SequenceName>().is_ok(), "{good}");
    }
    for bad in [
        "",
        "Orders",
        "a b",
        "a/b",
        ".hidden",
        "-dash",
        "_under",
        "ünï",
        "a%2Fb",
        &"x".repeat(65),
    ] {
        let e = bad.parse::<SequenceName>().unwrap_err();
        assert!(
            matches!(e, SequenceError::BadName { .. }) && !e.to_string().is_empty(),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn a_definition_outside_positive_signed_64_bit_values_is_refused() {
    let ok = SequenceSpec::new(Mode::Dense);
    assert!(ok.validate().is_ok());
    type Change = fn(&mut SequenceSpec);
    let cases: [(&str, Change); 6] = [
        ("start 0", |s| s.start = 0),
        ("increment 0", |s| s.increment = 0),
        ("max above i64", |s| s.max = MAX_VALUE + 1),
        ("start above max", |s| {
            s.start = 10;
            s.max = 9
        }),
        ("block 0", |s| s.max_block = 0),
        ("block too big", |s| s.max_block = MAX_BLOCK + 1),
    ];
    for (what, change) in cases {
        let mut s = ok.clone();
        change(&mut s);
        assert!(
            matches!(s.validate(), Err(SequenceError::BadSpec(_))),
            "{what}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn memory_store_passes_the_sequence_conformance_suite() {
    conformance::run(&MemoryStore::new(), "conf").await;
}

#[tokio::test(flavor = "current_thread")]
async fn embedded_store_passes_the_sequence_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::embedded::EmbeddedStore::open(dir.path()).unwrap();
    conformance::run(&store, "conf").await;
    conformance::run(&store, "conf2").await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_namespace_holds_a_bounded_number_of_sequences_dropped_ones_included() {
    let store = MemoryStore::new();
    let s = Sequences::new(&store, "limit");
    for i in 0..MAX_SEQUENCES {
        s.create(&name(&format!("s{i}")), SequenceSpec::new(Mode::Dense), NOW)
            .await
            .unwrap();
    }
    let over = s
        .create(&name("one-more"), SequenceSpec::new(Mode::Dense), NOW)
        .await;
    assert!(matches!(over, Err(SequenceError::TooMany)), "{over:?}");
    // A dropped one keeps its place; forgotten, it frees it.
    s.drop(&name("s0"), false, NOW).await.unwrap();
    assert!(matches!(
        s.create(&name("one-more"), SequenceSpec::new(Mode::Dense), NOW)
            .await,
        Err(SequenceError::TooMany)
    ));
    s.drop(&name("s0"), true, NOW).await.unwrap();
    s.create(&name("one-more"), SequenceSpec::new(Mode::Dense), NOW)
        .await
        .unwrap();
    // Other namespaces count apart.
    Sequences::new(&store, "other")
        .create(&name("s0"), SequenceSpec::new(Mode::Dense), NOW)
        .await
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_record_from_a_newer_format_or_garbage_is_an_error_not_a_panic() {
    let store = MemoryStore::new();
    let s = Sequences::new(&store, "bad");
    let n = name("x");
    let rec = s
        .create(&n, SequenceSpec::new(Mode::Dense), NOW)
        .await
        .unwrap();
    let put = |value: Vec<u8>| {
        let key = s.key(&n);
        let store = &store;
        async move {
            store
                .commit(&[], &[crate::store::Write::Put { key, value }])
                .await
                .unwrap();
        }
    };
    let mut newer = serde_json::to_value(&rec).unwrap();
    newer["format"] = 2.into();
    put(serde_json::to_vec(&newer).unwrap()).await;
    let e = s.reserve(&n, 1).await.unwrap_err();
    assert!(matches!(e, SequenceError::Format { found: 2, .. }), "{e}");
    for garbage in [
        b"not json".to_vec(),
        // next below start
        serde_json::to_vec(&SequenceRecord {
            next: 0,
            ..rec.clone()
        })
        .unwrap(),
        // a record filed under another name
        serde_json::to_vec(&SequenceRecord {
            name: name("y"),
            ..rec.clone()
        })
        .unwrap(),
    ] {
        put(garbage).await;
        let e = s.reserve(&n, 1).await.unwrap_err();
        assert!(matches!(e, SequenceError::Corrupt { .. }), "{e}");
    }
}

#[test]
fn a_holder_hands_out_increasing_values_and_asks_ahead_before_running_out() {
    let mut b = Blocks::new(DEFAULT_MAX_BLOCK);
    let mut out = Vec::new();
    assert_eq!(b.take(1, 0, &mut out), 0, "nothing held yet");
    assert_eq!(b.start_fetch(), Some(FIRST_BLOCK));
    assert_eq!(b.start_fetch(), None, "one reservation in flight");
    b.fetched(block(1, FIRST_BLOCK), DEFAULT_MAX_BLOCK, 0)
        .unwrap();
    assert_eq!(b.take(1, 0, &mut out), 1);
    assert_eq!(out, [1]);
    assert_eq!(b.start_fetch(), None, "most of the block left");
    assert_eq!(b.take(8, 0, &mut out), 8);
    // 7 of 16 left: below half, so the next block is asked for now.
    assert_eq!(b.start_fetch(), Some(FIRST_BLOCK));
    b.fetched(block(100, FIRST_BLOCK), DEFAULT_MAX_BLOCK, 10)
        .unwrap();
    assert_eq!(b.take(10, 20, &mut out), 10, "across the two blocks");
    assert_eq!(&out[9..], [10, 11, 12, 13, 14, 15, 16, 100, 101, 102]);
    assert!(out.windows(2).all(|w| w[0] < w[1]));
    // The first block lasted 20 ms: the next reservation doubles.
    assert_eq!(b.block_size(), FIRST_BLOCK * 2);
}

#[test]
fn block_sizes_follow_demand_within_the_sequences_bound() {
    let mut b = Blocks::new(256);
    let mut out = Vec::new();
    let mut next = 1;
    let mut now = 0;
    let mut fill = |b: &mut Blocks, now: u64| {
        if let Some(n) = b.start_fetch() {
            b.fetched(block(next, n), 256, now).unwrap();
            next += n;
        }
    };
    // Heavy demand: blocks last 1 ms each, sizes grow to the bound.
    for _ in 0..64 {
        fill(&mut b, now);
        b.take(64, now, &mut out);
        now += 1;
    }
    assert_eq!(b.block_size(), 256);
    // Light demand: one value every 2 s, blocks last longer than the shrink bound.
    for _ in 0..2000 {
        fill(&mut b, now);
        b.take(1, now, &mut out);
        now += 2 * TARGET_BLOCK_MS;
    }
    assert!(b.block_size() < 256, "shrunk to {}", b.block_size());
    // An operator lowers the bound: the next reservation follows.
    b.take(b.remaining(), now, &mut out);
    let n = b.start_fetch().unwrap();
    b.fetched(block(next, n), 8, now).unwrap();
    assert!(b.block_size() <= 8);
    assert!(out.windows(2).all(|w| w[0] < w[1]));
    // A batch above what is held sizes the next block for it.
    let mut b = Blocks::new(1024);
    b.take(500, 0, &mut out);
    assert_eq!(b.start_fetch(), Some(512));
}

#[test]
fn a_call_for_more_than_is_held_asks_for_a_block_at_once_and_then_takes_it_whole() {
    let mut b = Blocks::new(4096);
    let mut out = Vec::new();
    assert_eq!(b.start_fetch(), Some(16));
    b.fetched(block(1, 300), 4096, 0).unwrap();
    assert_eq!(b.take(150, 0, &mut out), 150);
    // 150 held, far above half a block of 16: no reservation yet.
    assert_eq!(b.start_fetch(), None);
    // A call for 200 takes nothing, and the next block (sized for it, 256) is asked for at
    // once, though 150 held is more than half of it.
    out.clear();
    assert_eq!(b.take_whole(200, 0, &mut out), 0);
    assert!(out.is_empty());
    assert_eq!(b.start_fetch(), Some(256));
    b.fetched(block(301, 256), 4096, 0).unwrap();
    assert_eq!(b.take_whole(200, 0, &mut out), 200);
    assert_eq!(out, (151..351).collect::<Vec<_>>());
    // With a block ahead that is still too short, what is held is taken.
    let mut b = Blocks::new(4096);
    b.start_fetch();
    b.fetched(block(1, 16), 4096, 0).unwrap();
    out.clear();
    b.take(10, 0, &mut out);
    assert_eq!(b.start_fetch(), Some(16));
    b.fetched(block(17, 16), 4096, 0).unwrap();
    out.clear();
    assert_eq!(b.take_whole(100, 0, &mut out), 22);
    assert_eq!(out, (11..33).collect::<Vec<_>>());
}

#[test]
fn a_block_below_what_a_holder_had_is_refused_and_never_handed_out() {
    let mut b = Blocks::new(16);
    let mut out = Vec::new();
    b.start_fetch();
    b.fetched(block(50, 16), 16, 0).unwrap();
    b.take(10, 0, &mut out);
    b.start_fetch().unwrap();
    let e = b.fetched(block(60, 16), 16, 0).unwrap_err();
    assert_eq!((e.first, e.above), (60, 65));
    b.take(100, 0, &mut out);
    assert_eq!(*out.last().unwrap(), 65, "only the first block's values");
    // After a drop nothing held is handed out.
    b.start_fetch().unwrap();
    b.fetched(block(70, 16), 16, 0).unwrap();
    b.discard();
    assert_eq!(b.take(1, 0, &mut out), 0);
}

#[test]
fn strict_calls_share_a_commit_and_later_calls_wait_for_the_next() {
    let mut q: Batches<&str> = Batches::new();
    assert_eq!(q.start_commit(), None);
    q.push("a", 1);
    q.push("b", 3);
    assert_eq!(q.start_commit(), Some(4));
    q.push("c", 1); // arrives during the commit
    assert_eq!(q.start_commit(), None, "one commit in flight");
    let answered = q.committed(Block {
        first: 10,
        step: 2,
        ..block(10, 4)
    });
    let got: Vec<_> = answered
        .iter()
        .map(|(c, v)| (*c, v.map(|v| v.iter().collect::<Vec<_>>())))
        .collect();
    assert_eq!(
        got,
        vec![("a", Some(vec![10])), ("b", Some(vec![12, 14, 16]))]
    );
    assert_eq!(q.start_commit(), Some(1), "c gets a commit of its own");
    // At the maximum: a short block answers the calls it holds whole.
    q.push("d", 2);
    assert_eq!(q.failed(), vec!["c"]);
    assert_eq!(q.start_commit(), Some(2));
    q.push("e", 1);
    let short = q.committed(block(99, 1));
    assert_eq!(short, vec![("d", None)]);
    assert_eq!(q.drain_all(), vec!["e"]);
}

#[test]
fn a_commit_tried_again_takes_the_calls_that_arrived_meanwhile() {
    let mut q: Batches<&str> = Batches::new();
    assert_eq!(q.retry_commit(), None, "no commit in flight");
    q.push("a", 2);
    assert_eq!(q.start_commit(), Some(2));
    // The attempt lost the record; b and c arrived while it was out.
    q.push("b", 1);
    q.push("c", 3);
    assert_eq!(q.retry_commit(), Some(6));
    assert_eq!(q.waiting(), 0);
    q.push("d", 1); // during the second attempt: the next commit's
    let got: Vec<_> = q
        .committed(block(10, 6))
        .into_iter()
        .map(|(c, v)| (c, v.map(|v| v.first)))
        .collect();
    assert_eq!(got, [("a", Some(10)), ("b", Some(12)), ("c", Some(13))]);
    assert_eq!(q.start_commit(), Some(1));
    // A retry stays within one block.
    q.push("e", MAX_BLOCK);
    assert_eq!(q.retry_commit(), Some(1));
    assert_eq!(q.waiting(), 1);
}

#[test]
fn near_the_maximum_a_commit_reserves_only_what_whole_calls_take() {
    use super::strict::fitting;
    assert_eq!(fitting(&[3, 2, 1], 10), 6);
    assert_eq!(fitting(&[3, 2, 1], 4), 4, "3 and 1; 2 does not fit after 3");
    assert_eq!(fitting(&[5], 4), 0);
    let mut q: Batches<&str> = Batches::new();
    for (c, n) in [("a", 3), ("b", 2), ("c", 1)] {
        q.push(c, n);
    }
    q.start_commit();
    assert_eq!(q.in_flight_sizes(), [3, 2, 1]);
    let got: Vec<_> = q
        .committed(block(7, fitting(&[3, 2, 1], 4)))
        .into_iter()
        .map(|(c, v)| (c, v.map(|v| v.iter().collect::<Vec<_>>())))
        .collect();
    // b is refused and takes nothing: c gets the value after a's.
    assert_eq!(
        got,
        [
            ("a", Some(vec![7, 8, 9])),
            ("b", None),
            ("c", Some(vec![10]))
        ]
    );
}

#[test]
fn a_commit_covers_at_most_one_block_of_values() {
    let mut q: Batches<u32> = Batches::new();
    q.push(0, MAX_BLOCK - 1);
    q.push(1, 2);
    assert_eq!(q.start_commit(), Some(MAX_BLOCK - 1));
    q.committed(block(1, MAX_BLOCK - 1));
    assert_eq!(q.start_commit(), Some(2));
}

/// One holder of a strict sequence in the simulation: its queue and where its commit stands.
struct Holder {
    q: Batches<usize>,
    /// Values asked for by the commit started and not yet run against the store.
    pending: Option<u64>,
    /// A reservation that ran and whose answer has not reached the holder yet.
    landed: Option<Result<Block, ()>>,
}

/// Runs strict calls on three holders over one store, interleaved as `steps` say: calls start,
/// commits start, run against the store and answer, each at its own step, so calls arrive
/// while commits are in flight on every holder. Returns the history.
async fn run_strict(steps: &[(u8, u8)]) -> Vec<Call> {
    let store = MemoryStore::new();
    let s = Sequences::new(&store, "sim");
    let n = name("strict");
    s.create(&n, SequenceSpec::new(Mode::Strict), NOW)
        .await
        .unwrap();
    let mut holders: Vec<Holder> = (0..3)
        .map(|_| Holder {
            q: Batches::new(),
            pending: None,
            landed: None,
        })
        .collect();
    let mut calls: Vec<Call> = Vec::new();
    for (t, &(who, what)) in steps.iter().enumerate() {
        let t = t as u64;
        let h = &mut holders[usize::from(who) % 3];
        match what % 4 {
            0 => {
                calls.push(Call {
                    start: t,
                    end: u64::MAX,
                    values: Vec::new(),
                });
                h.q.push(calls.len() - 1, 1 + u64::from(what / 4 % 3));
            }
            1 => {
                if h.pending.is_none() && h.landed.is_none() {
                    h.pending = h.q.start_commit();
                }
            }
            2 => {
                if let Some(want) = h.pending.take() {
                    h.landed = Some(s.reserve(&n, want).await.map_err(|_| ()));
                }
            }
            _ => match h.landed.take() {
                Some(Ok(b)) => {
                    for (c, v) in h.q.committed(b) {
                        calls[c].end = t;
                        calls[c].values = v.unwrap().iter().collect();
                    }
                }
                Some(Err(())) => {
                    for c in h.q.failed() {
                        calls[c].end = t;
                    }
                }
                None => {}
            },
        }
    }
    calls.retain(|c| c.end != u64::MAX);
    calls
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn strict_values_follow_real_time_across_holders(
        steps in proptest::collection::vec((0u8..3, any::<u8>()), 1..400)
    ) {
        let calls = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(run_strict(&steps));
        prop_assert!(check::duplicates(&calls).is_empty());
        let v = check::real_time_order(&calls);
        prop_assert!(v.is_empty(), "{:?} in {:?}", v, calls);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn values_kept_from_an_earlier_commit_break_real_time_order_and_the_check_sees_it() {
    // Why the strict mode keeps nothing for later: holder A keeps its block's second value
    // for its next call, holder B's call commits in between, and A's next call is answered
    // with the older value.
    let store = MemoryStore::new();
    let s = Sequences::new(&store, "ahead");
    let n = name("s");
    s.create(&n, SequenceSpec::new(Mode::Strict), NOW)
        .await
        .unwrap();
    let mut a = Blocks::new(2);
    let mut out = Vec::new();
    let want = a.start_fetch().unwrap();
    a.fetched(s.reserve(&n, want).await.unwrap(), 2, 0).unwrap();
    a.take(1, 0, &mut out);
    let a1 = Call {
        start: 0,
        end: 1,
        values: out.clone(),
    };
    let b1 = Call {
        start: 2,
        end: 3,
        values: vec![s.reserve(&n, 1).await.unwrap().first],
    };
    out.clear();
    a.take(1, 4, &mut out);
    let a2 = Call {
        start: 4,
        end: 5,
        values: out,
    };
    let v = check::real_time_order(&[a1, b1, a2]);
    assert_eq!(
        v,
        vec![check::OrderViolation {
            earlier: 1,
            later: 2
        }]
    );
}

mod holder {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::super::holder::{HoldError, Holder};
    use super::*;

    pub(super) const DEADLINE: Duration = Duration::from_secs(10);

    use crate::test_support::runtime;

    pub(super) async fn setup(mode: Mode, max_block: u64) -> (Arc<MemoryStore>, Arc<Holder>) {
        let store = Arc::new(MemoryStore::new());
        let mut spec = SequenceSpec::new(mode);
        spec.max_block = max_block;
        Sequences::new(store.as_ref(), "h")
            .create(&name("s"), spec, NOW)
            .await
            .unwrap();
        let holder = Holder::new(store.clone(), "h", tokio::runtime::Handle::current());
        (store, holder)
    }

    /// `tasks` tasks, each `calls` calls of 1 to 3 values, timed on one clock.
    async fn history(holder: &Arc<Holder>, tasks: usize, calls: usize) -> Vec<Vec<Call>> {
        let origin = Instant::now();
        let ns = |o: Instant| u64::try_from(o.elapsed().as_nanos()).unwrap();
        let mut joins = Vec::new();
        for t in 0..tasks {
            let holder = Arc::clone(holder);
            joins.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                for c in 0..calls {
                    let n = 1 + ((t + c) % 3) as u64;
                    let start = ns(origin);
                    let values = holder.next_values(&name("s"), n, DEADLINE).await.unwrap();
                    let end = ns(origin);
                    assert_eq!(values.len() as u64, n);
                    mine.push(Call { start, end, values });
                }
                mine
            }));
        }
        let mut out = Vec::new();
        for j in joins {
            out.push(j.await.unwrap());
        }
        out
    }

    #[test]
    fn dense_values_are_unique_increase_per_caller_and_cost_few_commits() {
        runtime().block_on(async {
            let (store, holder) = setup(Mode::Dense, 64).await;
            let before = store.commits();
            let per_task = history(&holder, 8, 200).await;
            for mine in &per_task {
                let flat: Vec<u64> = mine.iter().flat_map(|c| c.values.clone()).collect();
                assert!(
                    flat.windows(2).all(|w| w[0] < w[1]),
                    "a caller's values increase"
                );
            }
            let all: Vec<Call> = per_task.into_iter().flatten().collect();
            assert!(check::duplicates(&all).is_empty());
            let values: u64 = all.iter().map(|c| c.values.len() as u64).sum();
            let commits = store.commits() - before;
            assert!(
                commits * 16 <= values,
                "{commits} store commits for {values} values: blocks are not reused"
            );
            // Every value up to the largest is handed out or still held: no gap while running.
            let held = 2 * 64;
            assert_eq!(check::gaps_beyond(&all, 1, 1, held), None);
        });
    }

    #[test]
    fn strict_values_follow_real_time_and_calls_share_commits() {
        runtime().block_on(async {
            let (store, holder) = setup(Mode::Strict, 64).await;
            let before = store.commits();
            let all: Vec<Call> = history(&holder, 16, 50)
                .await
                .into_iter()
                .flatten()
                .collect();
            assert!(check::duplicates(&all).is_empty());
            let v = check::real_time_order(&all);
            assert!(v.is_empty(), "{:?}", &v[..v.len().min(5)]);
            let commits = store.commits() - before;
            assert!(
                commits < all.len() as u64,
                "{commits} commits for {} calls: no call shared a commit",
                all.len()
            );
        });
    }

    #[test]
    fn a_store_that_fails_is_answered_and_the_holder_heals_when_it_returns() {
        runtime().block_on(async {
            for mode in [Mode::Dense, Mode::Strict] {
                let (store, holder) = setup(mode, 4).await;
                let s = name("s");
                assert_eq!(holder.next_values(&s, 1, DEADLINE).await.unwrap(), [1]);
                store.set_down(true);
                // Dense: what is held is still handed out; then the failure is answered.
                let mut got = Vec::new();
                let err = loop {
                    match holder.next_values(&s, 1, DEADLINE).await {
                        Ok(v) => got.extend(v),
                        Err(e) => break e,
                    }
                    assert!(got.len() < 16, "{mode}: values without a store: {got:?}");
                };
                assert!(
                    matches!(err, HoldError::Sequence(SequenceError::Store(_))),
                    "{mode}: {err}"
                );
                if mode == Mode::Strict {
                    assert!(got.is_empty(), "strict values need a commit: {got:?}");
                }
                store.set_down(false);
                let after = holder.next_values(&s, 2, DEADLINE).await.unwrap();
                assert!(
                    after[0] > got.last().copied().unwrap_or(1),
                    "{mode}: healed, above what came before"
                );
            }
        });
    }

    #[test]
    fn a_call_refused_at_the_maximum_takes_no_value_from_smaller_calls() {
        runtime().block_on(async {
            let store = Arc::new(MemoryStore::new());
            let seqs = Sequences::new(store.as_ref(), "h");
            for (n, mode) in [("d", Mode::Dense), ("s", Mode::Strict)] {
                let mut spec = SequenceSpec::new(mode);
                spec.max = 5;
                seqs.create(&name(n), spec, NOW).await.unwrap();
            }
            let holder = Holder::new(store.clone(), "h", tokio::runtime::Handle::current());
            for n in ["d", "s"] {
                assert_eq!(holder.next_values(&name(n), 1, DEADLINE).await, Ok(vec![1]));
                let e = holder.next_values(&name(n), 100, DEADLINE).await;
                assert!(
                    matches!(e, Err(HoldError::Sequence(SequenceError::Exhausted { .. }))),
                    "{n}: {e:?}"
                );
                // The four values left are still there for calls that fit.
                assert_eq!(
                    holder.next_values(&name(n), 3, DEADLINE).await,
                    Ok(vec![2, 3, 4]),
                    "{n}"
                );
                assert_eq!(holder.next_values(&name(n), 1, DEADLINE).await, Ok(vec![5]));
                let e = holder.next_values(&name(n), 1, DEADLINE).await;
                assert!(
                    matches!(e, Err(HoldError::Sequence(SequenceError::Exhausted { .. }))),
                    "{n}: {e:?}"
                );
            }
        });
    }

    #[test]
    fn unknown_dropped_and_used_up_sequences_are_refused() {
        runtime().block_on(async {
            let store = Arc::new(MemoryStore::new());
            let seqs = Sequences::new(store.as_ref(), "h");
            let mut spec = SequenceSpec::new(Mode::Dense);
            spec.max = 3;
            seqs.create(&name("small"), spec.clone(), NOW)
                .await
                .unwrap();
            spec.mode = Mode::Strict;
            seqs.create(&name("strict"), spec, NOW).await.unwrap();
            let holder = Holder::new(store.clone(), "h", tokio::runtime::Handle::current());
            let e = holder.next_values(&name("nope"), 1, DEADLINE).await;
            assert!(
                matches!(e, Err(HoldError::Sequence(SequenceError::NotFound(_)))),
                "{e:?}"
            );
            // Made-up names leave nothing behind: no place in the holder, no metrics series.
            for i in 0..2000 {
                let _ = holder
                    .next_values(&name(&format!("made-up-{i}")), 1, DEADLINE)
                    .await;
            }
            let mut held = Vec::new();
            holder.each_stats(|n, _| held.push(n.to_string()));
            assert!(
                held.is_empty(),
                "{} made-up names held, e.g. {:?}",
                held.len(),
                &held[..held.len().min(3)]
            );
            for bad in [0, MAX_BLOCK + 1] {
                let e = holder.next_values(&name("small"), bad, DEADLINE).await;
                assert!(
                    matches!(e, Err(HoldError::Sequence(SequenceError::BadSpec(_)))),
                    "{e:?}"
                );
            }
            for n in ["small", "strict"] {
                assert_eq!(
                    holder.next_values(&name(n), 3, DEADLINE).await.unwrap(),
                    [1, 2, 3]
                );
                let e = holder.next_values(&name(n), 1, DEADLINE).await;
                assert!(
                    matches!(
                        e,
                        Err(HoldError::Sequence(SequenceError::Exhausted { max: 3, .. }))
                    ),
                    "{n}: {e:?}"
                );
            }
            // Dropped while held: refused from the next reservation on, never from old blocks
            // once it is known.
            let mut spec = SequenceSpec::new(Mode::Dense);
            spec.max_block = 2;
            seqs.create(&name("d"), spec, NOW).await.unwrap();
            holder.next_values(&name("d"), 1, DEADLINE).await.unwrap();
            seqs.drop(&name("d"), false, NOW).await.unwrap();
            let mut refused = false;
            for _ in 0..8 {
                if holder.next_values(&name("d"), 1, DEADLINE).await.is_err() {
                    refused = true;
                    break;
                }
            }
            assert!(refused, "a dropped sequence kept answering");
            let e = holder.next_values(&name("d"), 1, DEADLINE).await;
            assert!(
                matches!(e, Err(HoldError::Sequence(SequenceError::NotFound(_)))),
                "{e:?}"
            );
        });
    }
}

mod contention {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::holder::Holder;
    use super::*;
    use crate::store::{BoxFuture, Check, Commit, CommitOrGet, Entry, KvStore, StoreError, Write};
    use crate::test_support::runtime;

    /// A store whose next `left` commits that touch a sequence record lose to a rival: they
    /// answer `Conflict` and write nothing, as when other nodes commit first each time.
    struct Contended {
        inner: MemoryStore,
        left: AtomicU32,
    }

    impl KvStore for Contended {
        fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
            self.inner.get(key)
        }
        fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
            self.inner.scan(prefix)
        }
        fn commit<'a>(
            &'a self,
            checks: &'a [Check],
            writes: &'a [Write],
        ) -> BoxFuture<'a, Result<Commit, StoreError>> {
            let seq = writes
                .iter()
                .any(|w| w.key().windows(10).any(|k| k == b"sequences/"));
            let lose = seq
                && self
                    .left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            if lose {
                Box::pin(async { Ok(Commit::Conflict) })
            } else {
                self.inner.commit(checks, writes)
            }
        }
        fn describe(&self) -> String {
            "contended memory".into()
        }
    }

    /// More conflicts in a row than one reservation tries (`MAX_ATTEMPTS`): the holder tries
    /// again within the calls' deadlines instead of answering the contention, for both modes.
    #[test]
    fn calls_outlast_more_conflicts_than_one_reservation_tries() {
        runtime().block_on(async {
            for mode in [Mode::Dense, Mode::Strict] {
                let store = Arc::new(Contended {
                    inner: MemoryStore::new(),
                    left: AtomicU32::new(0),
                });
                let name = name("hot");
                Sequences::new(store.as_ref(), "c")
                    .create(&name, SequenceSpec::new(mode), NOW)
                    .await
                    .unwrap();
                store.left.store(MAX_ATTEMPTS + 4, Ordering::SeqCst);
                let direct = Sequences::new(store.as_ref(), "c").reserve(&name, 1).await;
                assert!(
                    matches!(direct, Err(SequenceError::Contention { .. })),
                    "{mode}: one reservation gives up: {direct:?}"
                );
                store.left.store(MAX_ATTEMPTS + 4, Ordering::SeqCst);
                let holder = Holder::new(store.clone(), "c", tokio::runtime::Handle::current());
                let got = holder.next_values(&name, 2, Duration::from_secs(20)).await;
                assert_eq!(got, Ok(vec![1, 2]), "{mode}");
            }
        });
    }

    /// A store one round trip away, like etcd: each operation waits a random 0.25 to 1.25 ms
    /// (a seeded generator) before it applies and as long again before it answers, and a
    /// commit that conflicts returns the record in the same round trip.
    struct Distant {
        inner: MemoryStore,
        rng: std::sync::Mutex<u64>,
    }

    impl Distant {
        fn new(seed: u64) -> Self {
            Distant {
                inner: MemoryStore::new(),
                rng: std::sync::Mutex::new(seed | 1),
            }
        }
        /// Half a round trip: 250 to 1,250 µs of the runtime's (paused) clock.
        async fn half_trip(&self) {
            let us = {
                let mut x = self.rng.lock().unwrap();
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                250 + *x % 1_000
            };
            tokio::time::sleep(Duration::from_micros(us)).await;
        }
    }

    impl KvStore for Distant {
        fn get<'a>(&'a self, key: &'a [u8]) -> BoxFuture<'a, Result<Option<Entry>, StoreError>> {
            Box::pin(async move {
                self.half_trip().await;
                let got = self.inner.get(key).await;
                self.half_trip().await;
                got
            })
        }
        fn scan<'a>(&'a self, prefix: &'a [u8]) -> BoxFuture<'a, Result<Vec<Entry>, StoreError>> {
            Box::pin(async move {
                self.half_trip().await;
                let got = self.inner.scan(prefix).await;
                self.half_trip().await;
                got
            })
        }
        fn commit<'a>(
            &'a self,
            checks: &'a [Check],
            writes: &'a [Write],
        ) -> BoxFuture<'a, Result<Commit, StoreError>> {
            Box::pin(async move {
                self.half_trip().await;
                let got = self.inner.commit(checks, writes).await;
                self.half_trip().await;
                got
            })
        }
        fn commit_or_get<'a>(
            &'a self,
            checks: &'a [Check],
            writes: &'a [Write],
            read: &'a [u8],
        ) -> BoxFuture<'a, Result<CommitOrGet, StoreError>> {
            Box::pin(async move {
                self.half_trip().await;
                let got = match self.inner.commit(checks, writes).await? {
                    Commit::Applied => {
                        CommitOrGet::Applied(self.inner.get(read).await?.map(|e| e.version))
                    }
                    Commit::Conflict => CommitOrGet::Conflict(self.inner.get(read).await?),
                };
                self.half_trip().await;
                Ok(got)
            })
        }
        fn describe(&self) -> String {
            "distant memory".into()
        }
    }

    /// Two nodes' holders share a strict sequence: one busy (16 callers, a commit always
    /// ready), one quiet (one caller). The quiet one loses the record whenever the busy one
    /// commits first, and must still win it soon: each of its attempts races the busy one's
    /// next commit. A holder that backed off longer after each loss (as it once did, up to
    /// 64 ms) left the busy one committing alone: here the quiet one's first call timed out
    /// after 20 s, and on a real etcd a busy node's neighbours answered a handful of calls a
    /// second.
    #[test]
    fn a_holder_that_loses_the_record_to_a_busy_one_still_commits_within_a_few_round_trips() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let store = Arc::new(Distant::new(0x1d9e_5eed));
            let name = name("ledger");
            Sequences::new(store.as_ref(), "f")
                .create(&name, SequenceSpec::new(Mode::Strict), NOW)
                .await
                .unwrap();
            let busy = Holder::new(store.clone(), "f", tokio::runtime::Handle::current());
            let quiet = Holder::new(store.clone(), "f", tokio::runtime::Handle::current());
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mut callers = Vec::new();
            for _ in 0..16 {
                let (busy, stop, name) = (Arc::clone(&busy), Arc::clone(&stop), name.clone());
                callers.push(tokio::spawn(async move {
                    let mut calls = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        busy.next_values(&name, 1, Duration::from_secs(20))
                            .await
                            .unwrap();
                        calls += 1;
                    }
                    calls
                }));
            }
            let mut slowest = Duration::ZERO;
            for _ in 0..50 {
                let began = tokio::time::Instant::now();
                quiet
                    .next_values(&name, 1, Duration::from_secs(20))
                    .await
                    .unwrap();
                slowest = slowest.max(began.elapsed());
            }
            stop.store(true, Ordering::Relaxed);
            let mut busy_calls = 0;
            for c in callers {
                busy_calls += c.await.unwrap();
            }
            assert!(
                busy_calls > 50,
                "the busy holder kept committing: {busy_calls} calls"
            );
            // A round trip is 0.5 to 2.5 ms here, and a retry wins the race about as often as
            // the busy holder's next commit: over twelve seeds the slowest of 50 calls took 39
            // to 75 ms (a few dozen losses in a row). Starved, it never finishes.
            assert!(
                slowest < Duration::from_millis(250),
                "the quiet holder's slowest call took {slowest:?} of simulated time"
            );
        });
    }
}

mod forwarding {
    use std::sync::Arc;
    use std::time::Instant;

    use super::super::holder::Holder;
    use super::holder::{setup, DEADLINE};
    use super::*;
    use crate::test_support::runtime;

    /// Forwards to another holder in the process, as `idgen serve` forwards to the committing
    /// node, answering the calls `pattern` picks (the rest: no answer): 0 every call, 1 the
    /// first of each batch, 2 all but the first, 3 none.
    struct ToHolder {
        committer: Arc<Holder>,
        pattern: std::sync::atomic::AtomicUsize,
    }

    impl super::super::holder::Forward for ToHolder {
        fn forward<'a>(
            &'a self,
            name: &'a SequenceName,
            counts: &'a [u64],
            until: tokio::time::Instant,
        ) -> crate::store::BoxFuture<'a, super::super::holder::Forwarded> {
            Box::pin(async move {
                let pattern = self.pattern.load(std::sync::atomic::Ordering::Relaxed);
                let picked = |i: usize| match pattern {
                    0 => true,
                    1 => i == 0,
                    2 => i > 0,
                    _ => false,
                };
                let asked: Vec<u64> = (0..counts.len())
                    .filter(|&i| picked(i))
                    .map(|i| counts[i])
                    .collect();
                let deadline = until.saturating_duration_since(tokio::time::Instant::now());
                let mut got = self
                    .committer
                    .next_values_each_here(name, &asked, deadline)
                    .await
                    .into_iter();
                (0..counts.len())
                    .map(|i| picked(i).then(|| got.next().and_then(Result::ok)).flatten())
                    .collect()
            })
        }
    }

    #[test]
    fn forwarded_strict_calls_keep_real_time_order_and_the_rest_are_committed_here() {
        runtime().block_on(async {
            let (store, committer) = setup(Mode::Strict, 64).await;
            let forwarder = Holder::new(store.clone(), "h", tokio::runtime::Handle::current());
            let fwd = Arc::new(ToHolder {
                committer: Arc::clone(&committer),
                pattern: 0.into(),
            });
            forwarder.set_forward(fwd.clone());
            let origin = Instant::now();
            let ns = |o: Instant| u64::try_from(o.elapsed().as_nanos()).unwrap();
            let mut joins = Vec::new();
            for t in 0..12usize {
                let (holder, fwd) = if t % 3 == 0 {
                    (Arc::clone(&committer), None)
                } else {
                    (Arc::clone(&forwarder), Some(Arc::clone(&fwd)))
                };
                joins.push(tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for c in 0..60usize {
                        if let Some(f) = &fwd {
                            // Phases of 15 calls, one per pattern.
                            f.pattern
                                .store(c / 15, std::sync::atomic::Ordering::Relaxed);
                        }
                        // Batches of 1 to 3 pipelined calls, as a connection hands them over.
                        let counts: Vec<u64> = (0..1 + (t + c) % 3).map(|i| 1 + i as u64).collect();
                        let start = ns(origin);
                        let got = holder.next_values_each(&name("s"), &counts, DEADLINE).await;
                        let end = ns(origin);
                        let mut last = 0;
                        for (r, &n) in got.into_iter().zip(&counts) {
                            let (_, values) = r.unwrap();
                            assert_eq!(values.len() as u64, n);
                            assert!(values[0] > last, "a batch's calls are answered in order");
                            last = *values.last().unwrap();
                            mine.push(Call { start, end, values });
                        }
                    }
                    mine
                }));
            }
            let mut all = Vec::new();
            for j in joins {
                all.extend(j.await.unwrap());
            }
            assert!(check::duplicates(&all).is_empty());
            let v = check::real_time_order(&all);
            assert!(v.is_empty(), "{:?}", &v[..v.len().min(5)]);
            let stat = |h: &Holder, f: fn(&super::super::holder::SeqStats) -> u64| {
                let mut x = 0;
                h.each_stats(|_, st| x += f(st));
                x
            };
            let forwarded = stat(&forwarder, |st| {
                st.forwarded.load(std::sync::atomic::Ordering::Relaxed)
            });
            let answered = stat(&forwarder, |st| {
                st.values.load(std::sync::atomic::Ordering::Relaxed)
            });
            let own_commits = stat(&forwarder, |st| {
                st.commits.load(std::sync::atomic::Ordering::Relaxed)
            });
            assert!(forwarded > 0, "no call was forwarded");
            assert!(
                forwarded < answered,
                "every call was forwarded: none fell back"
            );
            assert!(
                own_commits > 0,
                "calls the committer did not answer were not committed here"
            );
        });
    }
}
