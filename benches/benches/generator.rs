//! Generator hot path: one ID (and uuid v7 for comparison), batches of 4096, decompose.
//!
//! Targets on the 2-core reference machine: one ID ≤ 30 ns with the system clock (read through
//! `CachedClock`: at most once per millisecond of work), batch filling
//! ≥ 1 G IDs/s per core when the worker range does not bind.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgen_core::clock::{CachedClock, Clock, SystemClock};
use idgen_core::generator::{Ceiling, Generator, GeneratorConfig};
use idgen_id::{Id, Layout, WorkerRange};
use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn generator(worker_count: u64) -> Generator<CachedClock> {
    generator_on(worker_count, CachedClock::new())
}

fn generator_on<C: Clock>(worker_count: u64, clock: C) -> Generator<C> {
    let config = GeneratorConfig {
        workers: WorkerRange::new(0, worker_count),
        ..GeneratorConfig::default()
    };
    Generator::new(
        Layout::default(),
        config,
        Arc::new(Ceiling::new(u64::MAX)),
        clock,
    )
    .expect("valid shard")
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("generator");

    group.throughput(Throughput::Elements(1));
    let clock = SystemClock::new();
    group.bench_function("wall_clock_read", |b| b.iter(|| black_box(clock.wall_ms())));
    // The clock the generators use: the system clock, read again only when the time-stamp
    // counter says the millisecond of the last reading can have ended.
    let cached = CachedClock::new();
    group.bench_function("cached_clock_read", |b| {
        b.iter(|| black_box(cached.wall_ms()))
    });
    // 64 worker IDs: 262 M IDs/s of capacity, far above what one ID per call can use, so this
    // measures the call, not sequence-exhaustion waits.
    let mut g = generator(64);
    group.bench_function("next_id", |b| b.iter(|| black_box(g.next_id().unwrap())));
    // The same on the system clock read at every call (the cost before the cached clock).
    let mut g = generator_on(64, SystemClock::new());
    group.bench_function("next_id_system_clock", |b| {
        b.iter(|| black_box(g.next_id().unwrap()))
    });
    // The decentralised alternative: a time-ordered 128-bit UUID from the system clock.
    group.bench_function("uuid_v7", |b| b.iter(|| black_box(uuid::Uuid::now_v7())));

    group.throughput(Throughput::Elements(4096));
    let mut buf = vec![0u64; 4096];
    let mut g = generator(1);
    group.bench_function("batch_4096/workers_1", |b| {
        b.iter(|| {
            g.next_batch(&mut buf).unwrap();
            black_box(&buf);
        })
    });
    let mut g = generator(1024);
    group.bench_function("batch_4096/workers_1024", |b| {
        b.iter(|| {
            g.next_batch(&mut buf).unwrap();
            black_box(&buf);
        })
    });
    // Reference: the bare shift-and-or loop the batch path competes with.
    let mut t = 0u64;
    group.bench_function("batch_4096/bare_shift_or_loop", |b| {
        b.iter(|| {
            t += 1;
            let base = black_box(t) << 22;
            for (i, slot) in buf.iter_mut().enumerate() {
                *slot = base | i as u64;
            }
            black_box(&buf);
        })
    });

    group.throughput(Throughput::Elements(1));
    let layout = Layout::default();
    let id = layout.compose(123_456_789, 513, 77).unwrap();
    group.bench_function("decompose", |b| {
        b.iter(|| black_box(layout.decompose(black_box(Id(id.0)))))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
