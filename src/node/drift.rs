//! Clock drift against the node's peers, and the clock key that tells acquirers the node is
//! alive: defined in `idgen_core::drift` (an embedded generator publishes the same key) and
//! re-exported here, where the node's modules and tests name it.

pub use idgen_core::drift::*;
