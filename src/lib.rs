//! # idgen
//!
//! A distributed service that hands out 64-bit, time-ordered, unique IDs at millions per second
//! per node, with no central database on the request path.
//!
//! The crate is grouped by role:
//!
//! - [`domain`]: what an ID is and how it is made unique, with no network in it:
//!   [`layout`] (the bit layout and [`layout::Id`]), [`clock`] (wall and monotonic clocks behind
//!   a trait, with a controllable test clock), [`generator`] (one shard's generator, fenced by a
//!   floor and a lease ceiling; sans-IO: it says when to retry instead of sleeping), [`lease`]
//!   (timestamp-fenced worker-ID leases, written once over any store) and [`store`] (the
//!   transactional key-value trait and its stores: embedded, etcd, FoundationDB);
//! - [`node`]: `idgen serve`, thread-per-core: the shards, their fronts (the ID protocol's
//!   connections and the HTTP ID API), the issuer they share, telemetry, the admin server,
//!   clock drift against peers and audit events;
//! - [`config`]: the node's configuration, one section per component;
//! - [`commands`]: the operator commands (`idgen decode`, `idgen inspect`, `idgen layout`);
//! - [`logging`]: the log subscriber: colour only on a terminal, typed JSON, syslog levels
//!   under journald;
//! - [`build_info`]: version, git revision and features, for `idgen --version`.
//!
//! The domain modules are re-exported at the crate root (`idgen::layout`, `idgen::generator`,
//! …): those are the paths the benchmarks, tests and documentation use.
//!
//! Uniqueness never depends on clocks agreeing: a worker range is leased together with an
//! interval of ID time, and a generator issues only timestamps inside it (see
//! `docs/ARCHITECTURE.md`).

pub mod build_info;
pub mod commands;
pub mod config;
pub mod domain;
pub mod logging;
pub mod node;

pub use domain::{clock, generator, layout, lease, member, store};

/// The examples of `README.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
