//! Criterion benchmarks for idgen's hot paths; run them with `cargo bench -p idgen-benches`.
//!
//! - `generator`: one ID with the system clock, batches of 4096 (one worker ID and an ample
//!   worker range), decompose, and a bare shift-and-or loop as the memory-bandwidth reference.
