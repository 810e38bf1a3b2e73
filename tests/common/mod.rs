//! Helpers shared by the integration tests (`mod common;`).

#![allow(dead_code)] // each test binary uses a different part

pub mod docs;
pub mod etcd;
pub mod node;

/// The wall clock, ms since the Unix epoch.
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// A loopback port free a moment ago (bound to port 0, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}
