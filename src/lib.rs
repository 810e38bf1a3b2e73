//! # idgen
//!
//! A distributed service that hands out 64-bit, time-ordered, unique IDs at millions per second
//! per node, with no central database on the request path.
//!
//! What an ID is lives in the `idgen-id` crate (the bit layout, `Id`, `WorkerRange`, the text
//! forms) and how it is made unique in `idgen-core` (clocks, the fenced generator, the
//! timestamp-fenced worker-ID leases over any store, the member that holds one, the clock key):
//! the server names both where they are defined (`idgen_id::Layout`,
//! `idgen_core::generator::Generator`). This crate is the server, grouped by role:
//!
//! - [`node`]: `idgen serve`, thread-per-core: the shards, their fronts (the ID protocol's
//!   connections and the HTTP ID API), the issuer they share, telemetry, the admin server and
//!   audit events;
//! - [`config`]: the node's configuration, one section per component;
//! - [`commands`]: the operator commands (`idgen decode`, `idgen inspect`, `idgen layout`);
//! - [`logging`]: the log subscriber: colour only on a terminal, typed JSON, syslog levels
//!   under journald;
//! - [`build_info`]: version, git revision and features, for `idgen --version`.
//!
//! Uniqueness never depends on clocks agreeing: a worker range is leased together with an
//! interval of ID time, and a generator issues only timestamps inside it (see
//! `docs/ARCHITECTURE.md`).

pub mod build_info;
pub mod commands;
pub mod config;
pub mod logging;
pub mod node;

/// The examples of `README.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
