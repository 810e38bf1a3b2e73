//! Criterion benchmarks for idgen's hot paths; run them with `cargo bench -p idgen-benches`.
//!
//! - `generator`: one ID with the system clock, batches of 4096 (one worker ID and an ample
//!   worker range), decompose, and a bare shift-and-or loop as the memory-bandwidth reference.
//! - `embedded`: the same ID and batch cases through `idgen_core::embedded::Embedded` (a lease
//!   held in a store and renewed in the background, one lock per call).
