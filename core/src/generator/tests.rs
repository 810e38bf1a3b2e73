use idgen_id::{WorkerRange, DEFAULT_EPOCH_MS};
use proptest::prelude::*;

use super::*;
use crate::clock::TestClock;

const START: u64 = 1_000_000; // ID-time ms at which the test clock starts

fn layout(sequence_bits: u8) -> Layout {
    Layout::new(
        DEFAULT_EPOCH_MS,
        63 - 10 - sequence_bits,
        10,
        sequence_bits,
        0,
    )
    .unwrap()
}

struct Rig {
    g: Generator<TestClock>,
    clock: TestClock,
    ceiling: Arc<Ceiling>,
    layout: Layout,
}

fn rig(sequence_bits: u8, worker_first: u64, worker_count: u64, floor: u64) -> Rig {
    let layout = layout(sequence_bits);
    let clock = TestClock::new(DEFAULT_EPOCH_MS + START);
    let ceiling = Arc::new(Ceiling::new(u64::MAX));
    let config = GeneratorConfig {
        workers: WorkerRange::new(worker_first, worker_count),
        floor,
        max_rollback_wait: DEFAULT_MAX_ROLLBACK_WAIT,
    };
    let g = Generator::new(layout, config, Arc::clone(&ceiling), clock.clone()).unwrap();
    Rig {
        g,
        clock,
        ceiling,
        layout,
    }
}

impl Rig {
    fn next_ts(&mut self) -> u64 {
        let id = self.g.next_id().unwrap();
        self.layout.decompose(id).timestamp
    }
}

fn ts(r: &Rig, id: Id) -> u64 {
    r.layout.decompose(id).timestamp
}

fn stat(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

#[test]
fn frozen_millisecond_holds_exactly_capacity_in_walk_order() {
    let mut r = rig(3, 5, 3, 0); // 3 workers × 8 sequences = 24 per ms
    r.clock.freeze();
    let ids: Vec<Id> = (0..24).map(|_| r.g.next_id().unwrap()).collect();
    for (i, id) in ids.iter().enumerate() {
        let p = r.layout.decompose(*id);
        assert_eq!(p.timestamp, START);
        assert_eq!(p.worker, 5 + i as u64 / 8, "worker walk at {i}");
        assert_eq!(p.sequence, i as u64 % 8, "sequence walk at {i}");
    }
    assert!(ids.windows(2).all(|w| w[1].0 == w[0].0 + 1));
    // The 25th cannot come from this millisecond: with the wall clock stuck, the bounded
    // wait gives up instead of spinning forever.
    let mono_before = r.clock.mono_ns();
    assert!(matches!(r.g.next_id(), Err(GenError::ClockStalled { .. })));
    let waited = r.clock.mono_ns() - mono_before;
    // The bound is 10 ms + 2 ms of slack; the wait gives up at the first check past it
    // (the test clock advances 20 µs per sleep).
    assert!(
        waited > 12_000_000 && waited <= 12_020_000,
        "waited {waited} ns"
    );
    assert_eq!(stat(&r.g.stats().exhaustion_waits), 1);
    assert_eq!(stat(&r.g.stats().issued), 24);
    // Once the clock moves, it continues in the next millisecond with slot 0.
    r.clock.unfreeze();
    let id = r.g.next_id().unwrap();
    let p = r.layout.decompose(id);
    assert!(p.timestamp > START);
    assert_eq!((p.worker, p.sequence), (5, 0));
}

#[test]
fn batch_spans_milliseconds_without_gaps_inside_one() {
    let mut r = rig(4, 0, 2, 0); // 32 per ms
    let mut out = vec![0u64; 32 * 3 + 5];
    r.g.next_batch(&mut out).unwrap();
    assert!(out.windows(2).all(|w| w[0] < w[1]));
    let stamps: Vec<u64> = out.iter().map(|&v| ts(&r, Id(v))).collect();
    assert_eq!(stamps[0], START);
    assert_eq!(stamps[31], START);
    assert_eq!(stamps[32], START + 1);
    assert_eq!(stamps[95], START + 2);
    assert_eq!(stamps[96], START + 3);
    assert_eq!(stat(&r.g.stats().exhaustion_waits), 3);
    assert_eq!(stat(&r.g.stats().issued), 101);
    assert_eq!(r.g.last_issued_timestamp(), Some(START + 3));
}

#[test]
fn batch_reads_the_clock_once_per_millisecond_of_work() {
    let mut r = rig(12, 0, 4, 0); // 16384 per ms
    r.clock.set_tick(Duration::from_micros(1)); // every read costs 1 µs of time
    let mono0 = r.clock.mono_ns();
    let mut out = vec![0u64; 16384];
    r.g.next_batch(&mut out).unwrap();
    assert_eq!(
        r.clock.mono_ns() - mono0,
        1_000,
        "one read for one millisecond of work"
    );
}

#[test]
fn small_rollback_is_waited_out() {
    let mut r = rig(12, 0, 1, 0);
    let a = r.g.next_id().unwrap();
    r.clock.step_wall(-5);
    let mono0 = r.clock.mono_ns();
    let b = r.g.next_id().unwrap();
    assert!(b > a);
    assert_eq!(
        ts(&r, b),
        START,
        "continues in the same millisecond once caught up"
    );
    assert!(r.clock.mono_ns() - mono0 >= 5_000_000, "it waited");
    assert_eq!(stat(&r.g.stats().rollback_events), 1);
    assert_eq!(stat(&r.g.stats().largest_rollback_ms), 5);
    assert!(!r.g.stats().clock_behind.load(Ordering::Relaxed));
}

#[test]
fn rollback_at_the_bound_waits_beyond_it_fails_then_recovers() {
    let mut r = rig(12, 0, 1, 0);
    let stats = r.g.stats();
    let a = r.g.next_id().unwrap();
    // Exactly the bound (10 ms): waited out.
    r.clock.step_wall(-10);
    let b = r.g.next_id().unwrap();
    assert!(b > a);
    assert_eq!(stat(&stats.rollback_events), 1);

    r.clock.advance(Duration::from_millis(3));
    let c = r.g.next_id().unwrap();
    assert_eq!(ts(&r, c), START + 3);
    // One past the bound: refused at once, without waiting.
    r.clock.step_wall(-11);
    let mono0 = r.clock.mono_ns();
    assert_eq!(r.g.next_id(), Err(GenError::ClockMovedBack { by_ms: 11 }));
    assert_eq!(r.clock.mono_ns(), mono0, "refused at once, no wait");
    assert!(stats.clock_behind.load(Ordering::Relaxed));
    assert_eq!(stat(&stats.rollback_events), 2);
    let mut out = [0u64; 3];
    assert_eq!(
        r.g.next_batch(&mut out),
        Err(GenError::ClockMovedBack { by_ms: 11 }),
        "batches are refused too"
    );
    assert_eq!(stat(&stats.rollback_events), 2, "one event per episode");
    // The clock creeps back within the bound: the batch waits and continues in START + 3.
    r.clock.advance(Duration::from_millis(1));
    r.g.next_batch(&mut out).unwrap();
    assert!(out[0] > c.0 && out.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(ts(&r, Id(out[2])), START + 3);
    assert!(!stats.clock_behind.load(Ordering::Relaxed));

    // A large step back: refused until the clock recovers, then serving by itself.
    r.clock.step_wall(-1000);
    assert_eq!(r.g.next_id(), Err(GenError::ClockMovedBack { by_ms: 1000 }));
    r.clock.advance(Duration::from_millis(500));
    assert_eq!(r.g.next_id(), Err(GenError::ClockMovedBack { by_ms: 500 }));
    assert_eq!(stat(&stats.rollback_events), 3);
    assert_eq!(stat(&stats.largest_rollback_ms), 1000);
    r.clock.step_wall(600);
    let d = r.g.next_id().unwrap();
    assert!(d.0 > out[2]);
    assert_eq!(ts(&r, d), START + 103);
    assert!(!stats.clock_behind.load(Ordering::Relaxed));
}

#[test]
fn floor_is_exclusive_and_waited_for_when_close() {
    // Floor in the past: the first ID is at the clock.
    let mut r = rig(12, 0, 1, START - 100);
    assert_eq!(r.next_ts(), START);

    // Floor equal to the clock: the first ID is one millisecond later.
    let mut r = rig(12, 0, 1, START);
    assert_eq!(r.next_ts(), START + 1);

    // Floor a little ahead: wait for it, and it is not a rollback.
    let mut r = rig(12, 0, 1, START + 5);
    assert_eq!(r.next_ts(), START + 6);
    assert_eq!(stat(&r.g.stats().rollback_events), 0);

    // Floor far ahead: unavailable, saying by how much, until the clock passes it.
    let mut r = rig(12, 0, 1, START + 50);
    assert_eq!(r.g.next_id(), Err(GenError::ClockBehindFloor { by_ms: 51 }));
    assert!(r.g.stats().clock_behind.load(Ordering::Relaxed));
    assert_eq!(r.g.last_issued_timestamp(), None);
    r.clock.advance(Duration::from_millis(45));
    assert_eq!(r.next_ts(), START + 51);
    assert_eq!(stat(&r.g.stats().rollback_events), 0);
}

#[test]
fn ceiling_is_exclusive_and_can_be_raised() {
    let mut r = rig(12, 0, 1, 0);
    r.ceiling.lower_to(START);
    assert_eq!(
        r.g.next_id(),
        Err(GenError::LeaseCeiling {
            timestamp: START,
            ceiling: START
        })
    );
    r.ceiling.raise_to(START + 1);
    assert_eq!(r.next_ts(), START);
    // A batch that would cross into the ceiling fails as a whole.
    let mut out = vec![0u64; 4097];
    assert!(matches!(
        r.g.next_batch(&mut out),
        Err(GenError::LeaseCeiling { .. })
    ));
    // That batch waited into START + 1, where the ceiling stopped it.
    assert_eq!(r.clock.wall_ms() - DEFAULT_EPOCH_MS, START + 1);
    assert!(matches!(r.g.next_id(), Err(GenError::LeaseCeiling { .. })));
    r.ceiling.raise_to(START + 10);
    assert_eq!(r.next_ts(), START + 1);
    // raise_to never lowers, lower_to never raises.
    r.ceiling.raise_to(3);
    assert_eq!(r.ceiling.get(), START + 10);
    r.ceiling.lower_to(u64::MAX);
    assert_eq!(r.ceiling.get(), START + 10);
}

#[test]
fn layout_range_end_is_exhausted() {
    let layout = Layout::default();
    let last = DEFAULT_EPOCH_MS + layout.max_timestamp();
    let clock = TestClock::new(last);
    let mut g = Generator::new(
        layout,
        GeneratorConfig::default(),
        Arc::new(Ceiling::new(u64::MAX)),
        clock.clone(),
    )
    .unwrap();
    let id = g.next_id().unwrap();
    assert_eq!(layout.decompose(id).timestamp, layout.max_timestamp());
    assert!(id.0 < 1 << 63);
    clock.advance(Duration::from_millis(1));
    assert_eq!(g.next_id(), Err(GenError::Exhausted));
    assert!(!GenError::Exhausted.is_clock());
}

#[test]
fn a_clock_past_the_layout_end_is_a_clock_fault_while_timestamps_are_left() {
    // This node's clock jumped past the end, but the range has never issued near it: another
    // node (with a sane clock) can serve, so this is "unavailable: clock", not "exhausted".
    let layout = Layout::default();
    let clock = TestClock::new(DEFAULT_EPOCH_MS + START);
    let mut g = Generator::new(
        layout,
        GeneratorConfig::default(),
        Arc::new(Ceiling::new(u64::MAX)),
        clock.clone(),
    )
    .unwrap();
    assert!(g.next_id().is_ok());
    clock.set_wall_ms(DEFAULT_EPOCH_MS + layout.max_timestamp() + 5);
    let e = g.next_id().unwrap_err();
    assert_eq!(
        e,
        GenError::ClockPastEnd {
            max_timestamp: layout.max_timestamp()
        }
    );
    assert!(e.is_clock());
    // And back: served again.
    clock.set_wall_ms(DEFAULT_EPOCH_MS + START + 10);
    assert!(g.next_id().is_ok());
}

#[test]
fn clock_before_epoch_is_unavailable() {
    let clock = TestClock::new(DEFAULT_EPOCH_MS - 1);
    let mut g = Generator::new(
        Layout::default(),
        GeneratorConfig::default(),
        Arc::new(Ceiling::new(u64::MAX)),
        clock.clone(),
    )
    .unwrap();
    assert_eq!(g.next_id(), Err(GenError::BeforeEpoch));
    assert!(GenError::BeforeEpoch.is_clock());
    clock.advance(Duration::from_millis(2));
    assert_eq!(
        Layout::default().decompose(g.next_id().unwrap()).timestamp,
        1
    );
}

#[test]
fn config_errors() {
    let l = layout(12);
    let mk = |c: GeneratorConfig| {
        Generator::new(l, c, Arc::new(Ceiling::new(0)), TestClock::new(0))
            .err()
            .unwrap()
    };
    let base = GeneratorConfig::default();
    assert_eq!(
        mk(GeneratorConfig {
            workers: WorkerRange::new(0, 0),
            ..base
        }),
        ConfigError::NoWorkers
    );
    assert!(matches!(
        mk(GeneratorConfig {
            workers: WorkerRange::new(1020, 5),
            ..base
        }),
        ConfigError::WorkerRange { end: 1025, .. }
    ));
    assert!(matches!(
        mk(GeneratorConfig {
            workers: WorkerRange::new(u64::MAX, 2),
            ..base
        }),
        ConfigError::WorkerRange { .. }
    ));
    assert!(matches!(
        mk(GeneratorConfig {
            floor: 1 << 41,
            ..base
        }),
        ConfigError::FloorBeyondRange { .. }
    ));
    // A floor at the last timestamp is valid (nothing can be issued above it, which the
    // generator reports as exhausted, not as a configuration error).
    assert!(Generator::new(
        l,
        GeneratorConfig {
            floor: (1 << 41) - 1,
            ..base
        },
        Arc::new(Ceiling::new(0)),
        TestClock::new(0)
    )
    .is_ok());
    // The last worker range that fits is accepted.
    assert!(Generator::new(
        l,
        GeneratorConfig {
            workers: WorkerRange::new(1020, 4),
            ..base
        },
        Arc::new(Ceiling::new(0)),
        TestClock::new(0)
    )
    .is_ok());
}

// ---------------------------------------------------------------------------------------------
// Property tests: random clock scripts against the invariants.

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),   // µs of real time passing
    StepBack(u64),  // ms, wall only
    StepAhead(u64), // ms, wall only
    Freeze,
    Unfreeze,
    One,
    Batch(u64),
    RaiseCeiling(u64), // ms beyond the clock
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(Op::Advance),
        1 => (1u64..=12).prop_map(Op::StepBack),
        1 => (11u64..2_000).prop_map(Op::StepBack),
        1 => (1u64..50).prop_map(Op::StepAhead),
        1 => Just(Op::Freeze),
        2 => Just(Op::Unfreeze),
        6 => Just(Op::One),
        4 => (1u64..200).prop_map(Op::Batch),
        1 => (0u64..20).prop_map(Op::RaiseCeiling),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn clock_scripts_never_break_the_invariants(
        sequence_bits in prop::sample::select(vec![1u8, 2, 3, 5, 12]),
        worker_first in 0u64..1000,
        worker_count in 1u64..=4,
        floor_offset in -30i64..30,
        initial_ceiling in 0u64..40,
        tick_us in 0u64..300,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let floor = START.saturating_add_signed(floor_offset);
        let mut r = rig(sequence_bits, worker_first, worker_count, floor);
        r.ceiling.lower_to(START + initial_ceiling);
        r.clock.set_tick(Duration::from_micros(tick_us));
        let capacity = worker_count << sequence_bits;
        let mut last: Option<u64> = None;
        let mut issued = 0u64;
        let mut buf = Vec::new();
        let mut frozen = false;
        for op in ops {
            let ceiling_before = r.ceiling.get();
            let result: Result<Vec<u64>, GenError> = match op {
                Op::Advance(us) => { r.clock.advance(Duration::from_micros(us)); continue }
                Op::StepBack(ms) => { r.clock.step_wall(-(ms as i64)); continue }
                Op::StepAhead(ms) => { r.clock.step_wall(ms as i64); continue }
                Op::Freeze => { r.clock.freeze(); frozen = true; continue }
                Op::Unfreeze => { r.clock.unfreeze(); frozen = false; continue }
                Op::RaiseCeiling(ms) => {
                    let now = r.clock.wall_ms() - DEFAULT_EPOCH_MS;
                    r.ceiling.raise_to(now + ms);
                    continue
                }
                Op::One => r.g.next_id().map(|id| vec![id.0]),
                Op::Batch(n) => {
                    buf.resize(n as usize, 0);
                    r.g.next_batch(&mut buf).map(|()| buf.clone())
                }
            };
            let now_after = r.clock.wall_ms() - DEFAULT_EPOCH_MS;
            match result {
                Ok(ids) => {
                    for id in ids {
                        prop_assert!(id < 1 << 63, "sign bit set");
                        if let Some(prev) = last {
                            prop_assert!(id > prev, "not increasing: {} after {}", id, prev);
                        }
                        last = Some(id);
                        let p = r.layout.decompose(Id(id));
                        prop_assert!(p.timestamp > floor, "ts {} at or below floor {}", p.timestamp, floor);
                        prop_assert!(p.timestamp < ceiling_before, "ts {} at or above ceiling {}", p.timestamp, ceiling_before);
                        prop_assert!(p.timestamp <= now_after, "ts {} from the future ({})", p.timestamp, now_after);
                        prop_assert!(p.worker >= worker_first && p.worker < worker_first + worker_count);
                        issued += 1;
                    }
                }
                Err(GenError::ClockMovedBack { by_ms }) | Err(GenError::ClockBehindFloor { by_ms }) => {
                    // Within the bound it must have waited, which only fails if the wall clock
                    // could not catch up (frozen).
                    prop_assert!(by_ms > 10 || frozen, "refused a wait-able {} ms", by_ms);
                }
                Err(GenError::LeaseCeiling { timestamp, ceiling }) => {
                    prop_assert!(timestamp >= ceiling);
                }
                Err(GenError::ClockStalled { waited_ms }) => {
                    prop_assert!(frozen, "stalled with a running clock");
                    prop_assert!(waited_ms >= 12);
                }
                Err(e @ (GenError::Exhausted | GenError::BeforeEpoch | GenError::ClockPastEnd { .. } | GenError::Overloaded { .. })) => prop_assert!(false, "unexpected {e}"),
            }
        }
        prop_assert_eq!(stat(&r.g.stats().issued), issued);
        let per_ms = r.g.capacity_per_ms();
        prop_assert_eq!(per_ms, capacity);
    }

    #[test]
    fn a_frozen_millisecond_holds_exactly_k_times_2_pow_s(
        sequence_bits in 1u8..=12,
        worker_count in 1u64..=8,
        split in 1u64..64,
    ) {
        let mut r = rig(sequence_bits, 100, worker_count, 0);
        r.clock.freeze();
        let capacity = worker_count << sequence_bits;
        // Fill the millisecond in two batches of random split.
        let first = split.min(capacity);
        let mut a = vec![0u64; first as usize];
        let mut b = vec![0u64; (capacity - first) as usize];
        r.g.next_batch(&mut a).unwrap();
        r.g.next_batch(&mut b).unwrap();
        let all: Vec<u64> = a.into_iter().chain(b).collect();
        prop_assert_eq!(all.len() as u64, capacity);
        prop_assert!(all.iter().all(|&id| r.layout.decompose(Id(id)).timestamp == START));
        prop_assert!(all.windows(2).all(|w| w[1] == w[0] + 1));
        prop_assert!(r.g.next_id().is_err(), "one more does not fit the frozen millisecond");
    }
}

#[test]
fn poll_fill_never_sleeps_says_when_to_retry_and_resumes_the_same_request() {
    let mut r = rig(3, 0, 1, 0); // 8 per ms
    r.clock.freeze();
    let mut fill = Fill::new(20);
    let mut got: Vec<u64> = Vec::new();
    let mono0 = r.clock.mono_ns();
    let first =
        r.g.poll_fill(&mut fill, |f, n| got.extend(f..f + n))
            .unwrap();
    // It issued the millisecond's 8 slots and asks for a later reading, without sleeping.
    let Progress::RetryAt(at) = first else {
        panic!("a frozen clock cannot fill 20 IDs: {first:?}")
    };
    assert_eq!(r.clock.mono_ns(), mono0, "poll_fill slept");
    assert!(at > mono0, "retry at {at}, now {mono0}");
    assert_eq!((got.len(), fill.emitted()), (8, 8));
    assert_eq!(stat(&r.g.stats().issued), 0, "counted before delivery");
    // Another request in between is refused nothing it can have, and takes nothing from this one.
    let mut other = Fill::new(1);
    assert!(matches!(
        r.g.poll_fill(&mut other, |_, _| panic!("no slot is free")),
        Ok(Progress::RetryAt(_))
    ));
    // The clock moves on: the same request continues where it stopped.
    r.clock.unfreeze();
    let mut progress = Progress::RetryAt(at);
    while let Progress::RetryAt(_) = progress {
        r.clock.advance(Duration::from_millis(1));
        progress =
            r.g.poll_fill(&mut fill, |f, n| got.extend(f..f + n))
                .unwrap();
    }
    assert_eq!(got.len(), 20);
    assert!(got.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(stat(&r.g.stats().issued), 20);
    // A request that is done stays done.
    assert_eq!(
        r.g.poll_fill(&mut fill, |_, _| panic!()),
        Ok(Progress::Done)
    );
}

#[test]
fn the_wait_bound_spans_every_call_of_one_request() {
    let mut r = rig(3, 0, 1, 0);
    r.clock.freeze();
    let mut fill = Fill::new(9); // one more than the millisecond holds
    let mut calls = 0;
    let err = loop {
        calls += 1;
        assert!(calls < 10_000, "the wait never gave up");
        match r.g.poll_fill(&mut fill, |_, _| {}) {
            Ok(Progress::RetryAt(at)) => {
                // The caller waits as told (on the monotonic clock only: the wall is stuck).
                let now = r.clock.mono_ns();
                r.clock.sleep(Duration::from_nanos(at - now));
            }
            Ok(Progress::Done) => panic!("a stuck clock filled the request"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, GenError::ClockStalled { waited_ms: 12 }),
        "{err:?}"
    );
}

/// A clock whose wall readings follow a script (the last one repeats) and whose monotonic time
/// is set by the test.
struct ScriptedClock {
    wall: std::cell::RefCell<std::collections::VecDeque<u64>>,
    mono: std::cell::Cell<u64>,
}

impl Clock for ScriptedClock {
    fn wall_ms(&self) -> u64 {
        let mut w = self.wall.borrow_mut();
        if w.len() > 1 {
            w.pop_front().unwrap_or(0)
        } else {
            w.front().copied().unwrap_or(0)
        }
    }
    fn mono_ns(&self) -> u64 {
        self.mono.get()
    }
    fn sleep(&self, d: Duration) {
        self.mono.set(self.mono.get() + d.as_nanos() as u64);
    }
}

#[test]
fn a_pause_between_the_clock_reads_is_not_a_stalled_clock() {
    // One worker, 4 slots per millisecond. The millisecond M fills up; the next request waits.
    // Then the thread is paused for 20 ms (past the 12 ms a sequence wait may take) right after
    // reading the wall clock: that reading still says M, the monotonic clock says 20 ms have
    // passed. The clock did advance: a reading after the deadline shows it, and the request is
    // served, not refused as "wall clock did not advance".
    let m = DEFAULT_EPOCH_MS + START;
    let clock = ScriptedClock {
        // Reads: the first fill, the wait, the paused retry (M); after the deadline, M + 20.
        wall: std::cell::RefCell::new([m, m, m, m + 20].into_iter().collect()),
        mono: std::cell::Cell::new(0),
    };
    let config = GeneratorConfig {
        workers: WorkerRange::new(0, 1),
        floor: 0,
        max_rollback_wait: DEFAULT_MAX_ROLLBACK_WAIT,
    };
    let mut g = Generator::new(layout(2), config, Arc::new(Ceiling::new(u64::MAX)), clock).unwrap();
    let ids = std::cell::RefCell::new(Vec::new());
    let emit = |first: u64, n: u64| ids.borrow_mut().extend(first..first + n);
    let mut full = Fill::new(4);
    assert_eq!(g.poll_fill(&mut full, emit), Ok(Progress::Done));
    let mut next = Fill::new(1);
    assert!(matches!(
        g.poll_fill(&mut next, emit),
        Ok(Progress::RetryAt(_))
    ));
    // Paused: 20 ms pass between the wall reading (still M, from the script) and the
    // monotonic one.
    g.clock().mono.set(20_000_000);
    assert_eq!(g.poll_fill(&mut next, emit), Ok(Progress::Done));
    assert_eq!(ids.borrow().len(), 5);
    assert!(ids.borrow().windows(2).all(|w| w[0] < w[1]));
    // A clock that really stands still (at M + 20 from now on) is still refused.
    let mut stuck = Fill::new(3);
    assert_eq!(g.poll_fill(&mut stuck, emit), Ok(Progress::Done));
    let mut more = Fill::new(1);
    assert!(matches!(
        g.poll_fill(&mut more, emit),
        Ok(Progress::RetryAt(_))
    ));
    g.clock().mono.set(40_000_000);
    assert!(matches!(
        g.poll_fill(&mut more, emit),
        Err(GenError::ClockStalled { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Demand above capacity: many requests competing for each millisecond's slots.

/// Polls every unfinished request once per round, in `order` (indexes into `fills`), the clock
/// moving `step` per round, for at most `rounds` rounds. Returns each request's outcome:
/// `None` while unfinished, `Some(Ok(ids))` or `Some(Err(e))`.
#[allow(clippy::type_complexity)]
fn compete(
    r: &mut Rig,
    fills: &mut [Fill],
    order: impl Fn(usize) -> Vec<usize>,
    step: Duration,
    rounds: usize,
) -> Vec<Option<Result<Vec<u64>, GenError>>> {
    let mut got: Vec<Vec<u64>> = vec![Vec::new(); fills.len()];
    let mut outcome: Vec<Option<Result<Vec<u64>, GenError>>> = vec![None; fills.len()];
    for round in 0..rounds {
        if outcome.iter().all(Option::is_some) {
            break;
        }
        for i in order(round) {
            if outcome[i].is_some() {
                continue;
            }
            let ids = &mut got[i];
            match r.g.poll_fill(&mut fills[i], |f, n| ids.extend(f..f + n)) {
                Ok(Progress::Done) => outcome[i] = Some(Ok(std::mem::take(ids))),
                Ok(Progress::RetryAt(_)) => {}
                Err(e) => outcome[i] = Some(Err(e)),
            }
        }
        // Time passes (the wall clock too, unless frozen).
        r.clock.sleep(step);
    }
    outcome
}

#[test]
fn requests_competing_for_each_millisecond_never_see_a_stalled_clock() {
    // One worker, 8 slots per millisecond; 16 requests of 20 IDs (40 ms of the shard's
    // capacity) all want IDs at once, and the one polled first each round would take every new
    // millisecond if it could. The clock is healthy (a quarter millisecond per round): no
    // request is ever told the clock stalled, and every one is served, in full.
    let mut r = rig(3, 0, 1, 0);
    let mut fills = vec![Fill::new(20); 16];
    let outcome = compete(
        &mut r,
        &mut fills,
        |_| (0..16).collect(),
        Duration::from_micros(250),
        10_000,
    );
    let mut all = Vec::new();
    for (i, o) in outcome.into_iter().enumerate() {
        match o {
            Some(Ok(ids)) => {
                assert_eq!(ids.len(), 20, "request {i}");
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "request {i}");
                all.extend(ids);
            }
            Some(Err(e)) => panic!("request {i} failed with a healthy clock: {e}"),
            None => panic!("request {i} never finished"),
        }
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 16 * 20, "every ID unique");
    assert_eq!(stat(&r.g.stats().issued), 16 * 20);

    // A clock that truly stands still is still a stalled clock, for every request waiting on
    // it, within the bound.
    r.clock.freeze();
    let mut fills = vec![Fill::new(20); 4];
    let mono0 = r.clock.mono_ns();
    let outcome = compete(
        &mut r,
        &mut fills,
        |_| (0..4).collect(),
        Duration::from_micros(250),
        10_000,
    );
    for (i, o) in outcome.into_iter().enumerate() {
        assert!(
            matches!(o, Some(Err(GenError::ClockStalled { .. }))),
            "request {i}: {o:?}"
        );
    }
    let waited = r.clock.mono_ns() - mono0;
    assert!(waited <= 20_000_000, "gave up after {waited} ns");
}

#[test]
fn a_request_that_waits_its_turn_too_long_is_overloaded_not_a_clock_fault() {
    // 8 slots per millisecond, 40 requests of 30 IDs: 150 ms of capacity, more than the turn
    // bound. The requests are served in the order they first waited (whatever the order they
    // are polled in); those still waiting after MAX_TURN_WAIT are refused as overloaded.
    let mut r = rig(3, 0, 1, 0);
    let mut fills = vec![Fill::new(30); 40];
    // Polled newest first, and the order turns every round.
    let outcome = compete(
        &mut r,
        &mut fills,
        |round| (0..40).rev().cycle().skip(round % 40).take(40).collect(),
        Duration::from_micros(250),
        100_000,
    );
    let served = outcome
        .iter()
        .filter(|o| matches!(o, Some(Ok(ids)) if ids.len() == 30))
        .count();
    let overloaded = outcome
        .iter()
        .filter(|o| matches!(o, Some(Err(GenError::Overloaded { waited_ms })) if *waited_ms >= 100))
        .count();
    assert_eq!(served + overloaded, 40, "{outcome:?}");
    // About MAX_TURN_WAIT of capacity (8 per ms, 30 per request) is served.
    assert!((20..=40).contains(&served), "{served} served");
    assert!(overloaded > 0, "the line never ran past its bound");
    // The line is empty again: a request now is served at once.
    r.clock.advance(Duration::from_millis(1));
    let mut one = Fill::new(1);
    assert_eq!(r.g.poll_fill(&mut one, |_, _| {}), Ok(Progress::Done));
}

#[test]
fn a_request_abandoned_or_gone_from_the_front_never_stalls_the_line() {
    let mut r = rig(3, 0, 1, 0); // 8 per ms
    r.clock.freeze();
    let mut a = Fill::new(9);
    let mut b = Fill::new(2);
    let mut c = Fill::new(2);
    // a takes the millisecond and waits at the front; b and c wait behind it.
    assert!(matches!(
        r.g.poll_fill(&mut a, |_, _| {}),
        Ok(Progress::RetryAt(_))
    ));
    for f in [&mut b, &mut c] {
        assert!(matches!(
            r.g.poll_fill(f, |_, _| {}),
            Ok(Progress::RetryAt(_))
        ));
    }
    // a's caller gives it up: b is at the front and draws the next millisecond first, even
    // though c asks first.
    r.g.abandon(&mut a);
    r.clock.unfreeze();
    r.clock.advance(Duration::from_millis(1));
    let mut order = Vec::new();
    assert!(matches!(
        r.g.poll_fill(&mut c, |f, _| order.push(('c', f))),
        Ok(Progress::RetryAt(_))
    ));
    assert_eq!(
        r.g.poll_fill(&mut b, |f, _| order.push(('b', f))),
        Ok(Progress::Done)
    );
    assert_eq!(
        r.g.poll_fill(&mut c, |f, _| order.push(('c', f))),
        Ok(Progress::Done)
    );
    assert_eq!(order.iter().map(|(who, _)| *who).collect::<String>(), "bc");
    // A front whose caller vanished without abandoning it: the others are let past it once it
    // has not asked for MAX_TURN_WAIT, and nobody is refused for it.
    r.clock.freeze();
    let mut gone = Fill::new(100);
    assert!(matches!(
        r.g.poll_fill(&mut gone, |_, _| {}),
        Ok(Progress::RetryAt(_))
    ));
    r.clock.unfreeze();
    let mut d = Fill::new(50);
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 10_000, "the line stalled");
        match r.g.poll_fill(&mut d, |_, _| {}) {
            Ok(Progress::Done) => break,
            Ok(Progress::RetryAt(_)) => r.clock.advance(Duration::from_micros(250)),
            Err(e) => panic!("refused behind a vanished front: {e}"),
        }
    }
    let waited = u64::try_from(rounds).unwrap() * 250_000;
    assert!(
        waited > duration_ns(MAX_TURN_WAIT) && waited < duration_ns(MAX_TURN_WAIT) + 20_000_000,
        "waited {waited} ns"
    );
}
