//! The ID domain: the layout of an ID, the clocks it is made from, the generator that makes
//! unique IDs from a worker range and an interval of ID time, the leases that hand out both,
//! and the stores the leases live in. Defined in the `idgen-core` crate (which applications
//! that want IDs in-process use on its own, see `idgen_core::embedded`) and re-exported here
//! at the paths the server's modules, benchmarks, tests and documentation use. Nothing here
//! serves a network; the node (`crate::node`) and the commands build on it.

pub use idgen_core::{clock, generator, layout, lease, member, store};
