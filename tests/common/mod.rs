//! Helpers shared by the integration tests (`mod common;`): the test kit's
//! (`idgen_testkit`: test connection, node and etcd processes), plus what needs this crate.

#![allow(dead_code)] // each test binary uses a different part

pub mod docs;
pub mod etcd;
pub mod lease_cases;
pub mod logs;
pub mod store_cases;

#[allow(unused_imports)] // each test binary uses a different part
pub use idgen_testkit::{free_port, node, wall_ms};
