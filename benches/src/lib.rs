//! Criterion benchmarks for idgen's hot paths; run them with `cargo bench -p idgen-benches`.
//!
//! - `generator`: one ID with the system clock, batches of 4096 (one worker ID and an ample
//!   worker range), decompose, and a bare shift-and-or loop as the memory-bandwidth reference.
//! - `in_process`: in one run, one ID and batches of 4096 from idgen's bare generator and its
//!   embedded generator (a lease held in a store and renewed in the background, IDs through a
//!   thread's own handle), beside ferroid's Snowflake generators and thread-local ULID, `uuid`
//!   v7, and the clock reads beneath them.
