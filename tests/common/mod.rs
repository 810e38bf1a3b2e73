//! Helpers shared by the integration tests (`mod common;`).

pub mod docs;
pub mod etcd;
pub mod node;
