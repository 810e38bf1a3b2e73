//! In-process IDs side by side, in one run: idgen's bare generator, its embedded generator
//! (a lease held in a store and renewed in the background; IDs through a thread's own handle,
//! kept or looked up per call), the in-process libraries users compare it with (ferroid's
//! single-threaded and lock-free Snowflake generators, on ferroid's own clock and on idgen's,
//! its thread-local monotonic ULID, and `uuid` v7), and the clock reads beneath them.
//!
//! One ID per call, then batches of 4096. Every Snowflake row has 2^18 IDs per millisecond
//! (idgen: 64 worker IDs of 2^12; ferroid: a layout of 18 sequence bits), so the call is
//! measured, not waits for the next millisecond; idgen's batch rows have 1024 worker IDs. The
//! store is in memory: renewals (every TTL/3) cost nothing measurable here either way.
//!
//! The clocks differ, and the rows say which each reads: idgen reads the system's wall clock
//! through `CachedClock` (a time-stamp counter read per call decides whether the millisecond
//! can have ended), because a lease's fences are wall-clock times; ferroid's `MonotonicClock`
//! is an atomic a background thread of its own advances every millisecond, counted from
//! process start.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroid::define_snowflake_id;
use ferroid::generator::thread_local::Ulid;
use ferroid::generator::{AtomicSnowflakeGenerator, BasicSnowflakeGenerator};
use ferroid::time::{MonotonicClock, TimeSource, TWITTER_EPOCH};
use idgen_core::clock::{CachedClock, Clock, SystemClock};
use idgen_core::embedded::{Embedded, EmbeddedConfig};
use idgen_core::generator::{Ceiling, Generator, GeneratorConfig};
use idgen_core::store::memory::MemoryStore;
use idgen_id::{Layout, WorkerRange};
use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

define_snowflake_id!(
    /// ferroid's layout for the comparison: 2^18 IDs per millisecond, as idgen's rows have.
    BenchId, u64,
    reserved: 1,
    timestamp: 41,
    machine_id: 4,
    sequence: 18
);

/// idgen's clock as a ferroid time source: milliseconds since ferroid's Twitter epoch.
struct IdgenClock(CachedClock);

impl TimeSource<u64> for IdgenClock {
    fn current_millis(&self) -> u64 {
        self.0.wall_ms() - TWITTER_EPOCH.as_millis() as u64
    }
}

fn bare(workers: u64) -> Generator<CachedClock> {
    let config = GeneratorConfig {
        workers: WorkerRange::new(0, workers),
        ..GeneratorConfig::default()
    };
    Generator::new(
        Layout::default(),
        config,
        Arc::new(Ceiling::new(u64::MAX)),
        CachedClock::new(),
    )
    .expect("valid generator")
}

fn embedded(rt: &tokio::runtime::Runtime, workers: u64) -> Embedded {
    let config = EmbeddedConfig {
        workers,
        ..EmbeddedConfig::default()
    };
    rt.block_on(Embedded::start(
        Arc::new(MemoryStore::new()),
        "bench",
        config,
    ))
    .expect("an embedded generator")
}

fn spin(_: u64) {
    std::hint::spin_loop();
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("in_process");

    group.throughput(Throughput::Elements(1));
    let cached = CachedClock::new();
    group.bench_function("clock/idgen_cached", |b| {
        b.iter(|| black_box(cached.wall_ms()))
    });
    let system = SystemClock::new();
    group.bench_function("clock/system", |b| b.iter(|| black_box(system.wall_ms())));
    let ticker = MonotonicClock::<1>::with_epoch(TWITTER_EPOCH);
    group.bench_function("clock/ferroid_ticker", |b| {
        b.iter(|| black_box(TimeSource::<u64>::current_millis(&ticker)))
    });

    let mut g = bare(64);
    group.bench_function("next_id/idgen_generator", |b| {
        b.iter(|| black_box(g.next_id().unwrap()))
    });
    let ids = embedded(&rt, 64);
    let mut handle = ids.handle();
    group.bench_function("next_id/idgen_embedded_handle", |b| {
        b.iter(|| black_box(handle.next_id().unwrap()))
    });
    group.bench_function("next_id/idgen_embedded", |b| {
        b.iter(|| black_box(ids.next_id().unwrap()))
    });
    drop(handle);
    drop(ids);
    let basic = BasicSnowflakeGenerator::<BenchId, _>::new(0, ticker.clone());
    group.bench_function("next_id/ferroid_basic", |b| {
        b.iter(|| black_box(basic.next_id(spin)))
    });
    let basic_idgen_clock =
        BasicSnowflakeGenerator::<BenchId, _>::new(0, IdgenClock(CachedClock::new()));
    group.bench_function("next_id/ferroid_basic_on_idgen_clock", |b| {
        b.iter(|| black_box(basic_idgen_clock.next_id(spin)))
    });
    let atomic = AtomicSnowflakeGenerator::<BenchId, _>::new(0, ticker.clone());
    group.bench_function("next_id/ferroid_atomic", |b| {
        b.iter(|| black_box(atomic.next_id(spin)))
    });
    group.bench_function("next_id/ferroid_thread_local_ulid", |b| {
        b.iter(|| black_box(Ulid::new_ulid_mono(|_| std::hint::spin_loop())))
    });
    group.bench_function("next_id/uuid_v7", |b| {
        b.iter(|| black_box(uuid::Uuid::now_v7()))
    });

    group.throughput(Throughput::Elements(4096));
    let mut buf = vec![0u64; 4096];
    let mut g = bare(1024);
    group.bench_function("batch_4096/idgen_generator", |b| {
        b.iter(|| {
            g.next_batch(&mut buf).unwrap();
            black_box(&buf);
        })
    });
    let ids = embedded(&rt, 1024);
    let mut handle = ids.handle();
    group.bench_function("batch_4096/idgen_embedded_handle", |b| {
        b.iter(|| {
            handle.next_batch(&mut buf).unwrap();
            black_box(&buf);
        })
    });
    drop(handle);
    drop(ids);
    group.bench_function("batch_4096/ferroid_basic", |b| {
        b.iter(|| {
            for slot in buf.iter_mut() {
                *slot = basic.next_id(spin).to_raw();
            }
            black_box(&buf);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
