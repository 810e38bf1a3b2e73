//! Public-ID masking (`idgen_id::mask`, FF1 over AES from the `fpe` and `aes` crates): one
//! ID masked and unmasked at the default layout's 63 bits and at 53 bits, the string form,
//! and the keyring's parse (once per node start). What `POST /ids?format=masked` adds per ID.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idgen_id::mask::Keyring;
use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

const KEYS: &str = "1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn bench(c: &mut Criterion) {
    let ring = Keyring::parse(KEYS).expect("valid keyring");
    let id = 721_864_159_923_240_960u64;
    let mut group = c.benchmark_group("mask");
    group.throughput(Throughput::Elements(1));
    for width in [63u32, 53] {
        let id = id >> (63 - width);
        let masked = ring.mask(id, width).expect("in range");
        let text = ring.mask_str(id, width).expect("in range");
        group.bench_function(format!("mask_w{width}"), |b| {
            b.iter(|| ring.mask(black_box(id), width))
        });
        group.bench_function(format!("unmask_w{width}"), |b| {
            b.iter(|| ring.unmask(black_box(masked), width))
        });
        group.bench_function(format!("mask_str_w{width}"), |b| {
            b.iter(|| ring.mask_str(black_box(id), width))
        });
        group.bench_function(format!("unmask_str_w{width}"), |b| {
            b.iter(|| ring.unmask_str(black_box(&text), width))
        });
    }
    group.bench_function("keyring_parse", |b| {
        b.iter(|| Keyring::parse(black_box(KEYS)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
