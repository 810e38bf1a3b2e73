//! The ID domain: the layout of an ID, the clocks it is made from, the generator that makes
//! unique IDs from a worker range and an interval of ID time, the leases that hand out both,
//! and the stores the leases live in. Nothing here serves a network; the node (`crate::node`)
//! and the commands build on it.

pub mod clock;
pub mod generator;
pub mod layout;
pub mod lease;
pub mod store;
