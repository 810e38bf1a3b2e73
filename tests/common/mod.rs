//! Helpers shared by the integration tests (`mod common;`).

pub mod etcd;
pub mod node;
