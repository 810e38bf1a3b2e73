//! The embedded generator's cost per ID (`idgen_core::embedded::Embedded`: a lease held in a
//! store, renewed in the background, one lock per call), beside the bare generator's of
//! `benches/generator.rs` under the same names: one ID (64 worker IDs, so the call is
//! measured, not sequence-exhaustion waits) and batches of 4096 with 1 and 1024 worker IDs.
//! The store is in memory: renewals (every TTL/3) cost nothing measurable here either way.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgen_core::embedded::{Embedded, EmbeddedConfig};
use idgen_core::store::memory::MemoryStore;
use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

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

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("embedded");

    group.throughput(Throughput::Elements(1));
    let g = embedded(&rt, 64);
    group.bench_function("next_id", |b| b.iter(|| black_box(g.next_id().unwrap())));
    drop(g);

    group.throughput(Throughput::Elements(4096));
    let mut buf = vec![0u64; 4096];
    for workers in [1, 1024] {
        let g = embedded(&rt, workers);
        group.bench_function(format!("batch_4096/workers_{workers}"), |b| {
            b.iter(|| {
                g.next_batch(&mut buf).unwrap();
                black_box(&buf);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
