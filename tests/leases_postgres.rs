//! Leases on a real PostgreSQL (`idgen_testkit::postgres`): a holder's liveness is judged by
//! the database server's clock (its clock key expires there), as on etcd.

mod common;

use std::sync::Arc;

use idgen_core::store::postgres::PgStore;
use idgen_core::store::{KvStore, PgUrl, Secret};
use idgen_testkit::postgres::{PgServer, PASSWORD};

#[tokio::test(flavor = "current_thread")]
async fn a_fast_clock_evicts_only_holders_whose_clock_key_expired() {
    let server = PgServer::start();
    let url: PgUrl = server.url("idgen-fast").parse().unwrap();
    let store: Arc<dyn KvStore> = Arc::new(
        PgStore::connect(&url, Some(&Secret::new(PASSWORD)), None)
            .await
            .expect("connect"),
    );
    common::lease_cases::a_fast_clock_evicts_only_holders_whose_clock_key_expired(store).await;
}
