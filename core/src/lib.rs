//! # idgen-core
//!
//! The ID domain of idgen, without the server: how an ID is made unique, with no network of
//! its own beyond the coordination store. What an ID is (the bit layout, [`idgen_id::Id`],
//! [`idgen_id::WorkerRange`]) is the `idgen-id` crate's, named from there. The `idgen` server
//! builds on this crate, and so can an application that wants IDs in-process: [`embedded`]
//! joins a cluster's worker space the way a server node does.
//!
//! - [`clock`]: wall and monotonic clocks behind a trait, with a controllable test clock;
//! - [`generator`]: one generator over a worker range, fenced by a floor and a lease ceiling
//!   (sans-IO: it says when to retry instead of sleeping);
//! - [`lease`]: timestamp-fenced worker-ID leases, written once over any store, and their
//!   keeper (acquire, renew, release);
//! - [`store`]: the transactional key-value trait and its stores: embedded (redb), etcd
//!   (feature `etcd`), FoundationDB (feature `fdb`), memory;
//! - [`drift`]: the clock key every member of a cluster publishes (how an acquirer tells a
//!   live holder from a gone one) and the drift between members' clocks;
//! - [`member`]: one member of a worker space (join, issuers, renewal and clock watch, leave),
//!   the one lease holder both `idgen serve` and the embedded generator are made of;
//! - [`embedded`]: [`Embedded`](embedded::Embedded), a lease-backed generator for one process;
//! - [`sequence`]: named sequences (dense blocks, or strictly ordered shared commits), kept in
//!   the same store beside the leases;
//! - [`histogram`]: fixed-bucket histograms (durations, batch sizes) that a metrics scrape reads.
//!
//! Uniqueness never depends on clocks agreeing: a worker range is leased together with an
//! interval of ID time, and a generator issues only timestamps inside it (see the repository's
//! `docs/ARCHITECTURE.md`).

pub mod clock;
pub mod drift;
pub mod embedded;
pub mod generator;
pub mod histogram;
pub mod lease;
pub mod member;
pub mod sequence;
pub mod store;
pub mod sync;

/// What this crate's unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    /// A multi-threaded runtime of two workers, as applications run the embedded generator.
    pub fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }
}
