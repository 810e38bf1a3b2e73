//! # idgen
//!
//! A distributed service that hands out 64-bit, time-ordered, unique IDs at millions per second
//! per node, with no central database on the request path.
//!
//! - [`layout`]: the bit layout `0 | timestamp | worker | sequence` and the [`layout::Id`] type;
//! - [`clock`]: the wall and monotonic clocks behind a trait, with a controllable test clock;
//! - [`generator`]: one shard's generator, fenced by a floor and a lease ceiling;
//! - [`store`]: the transactional key-value trait and its stores (embedded, etcd, FoundationDB);
//! - [`lease`]: timestamp-fenced worker-ID leases, written once over any store;
//! - [`config`] and [`server`]: `idgen serve`, thread-per-core;
//! - [`admin`] and [`watch`]: metrics, health, the HTTP API, clock drift and audit events;
//! - [`cli`]: `idgen decode` and `idgen inspect`;
//! - [`calc`]: `idgen layout`, the layout calculator;
//! - [`build_info`]: version, git revision and features, for `idgen --version`.
//!
//! Uniqueness never depends on clocks agreeing: a worker range is leased together with an
//! interval of ID time, and a generator issues only timestamps inside it (see
//! `docs/ARCHITECTURE.md`).

pub mod admin;
pub mod build_info;
pub mod calc;
pub mod cli;
pub mod clock;
pub mod config;
pub mod generator;
pub mod layout;
pub mod lease;
pub mod server;
pub mod store;
pub mod watch;

/// The examples of `README.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
