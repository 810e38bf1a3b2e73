//! The test kit of idgen's own tests (never published): what the tests of the server, the
//! Rust client and the load tester share.
//!
//! | module | what |
//! |---|---|
//! | [`conn`] | [`TestConn`]: one blocking protocol connection, raw or after the handshake |
//! | [`fake`] | [`FakeServer`]: a scriptable in-process idgen server, plaintext or TLS ([`ServerTls`]) |
//! | [`node`] | [`NodeProc`]: a real `idgen serve` process, and plain HTTP requests |
//! | [`etcd`] | [`EtcdCluster`]: a real etcd of 1 or 3 members on loopback, plaintext or TLS ([`EtcdTls`]) |
//! | [`postgres`] | [`PgServer`]: a real PostgreSQL server on loopback |
//!
//! The handshake is the protocol crate's (`idgen_protocol::client::Handshake`), as in every
//! client; only the loopback interface is used.

pub mod certs;
pub mod conn;
pub mod etcd;
pub mod fake;
pub mod node;
pub mod postgres;
pub mod scenario;

pub use certs::{CertFiles, TestCa, Validity};
pub use conn::{closes_within, TestConn, Timeouts};
pub use etcd::{EtcdCluster, EtcdTls};
pub use fake::{FakeServer, ServerTls};
pub use node::NodeProc;
pub use postgres::PgServer;

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
