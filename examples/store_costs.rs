//! What leases cost on etcd and on PostgreSQL, measured in one run (docs/PERFORMANCE.md,
//! "Lease costs per store"):
//!
//! ```sh
//! cargo run --release --example store_costs --features etcd,postgres
//! ```
//!
//! Starts a one-member etcd and a PostgreSQL on loopback (the test kit's, as the tests do: the
//! Debian packages `etcd-server` and `postgresql`; PostgreSQL durable, with `fsync` and
//! `synchronous_commit` on, since etcd syncs its log too), then on each store:
//!
//! - `CYCLES` lease lives one after the other: acquire 8 worker IDs, renew 3 times, release;
//!   each step timed (median, 99th percentile, worst);
//! - the whole default worker space: one grant of 1,024 worker IDs, a renewal, a release;
//! - a fully recorded 16-bit worker space: 512 grants of 128 worker IDs (one record each),
//!   then, with those leases lapsed, one grant of all 65,536 over the 512 records;
//!
//! and 16 acquirers at once on each (how many get a grant within their transaction attempts),
//! with the connections the PostgreSQL store holds afterwards (from `pg_stat_activity`). Figures are printed, never judged: timings on a shared
//! machine are noisy; compare the two stores within one run.

use std::time::{Duration, Instant};

use idgen_core::clock::{Clock, SystemClock};
use idgen_core::lease::{LeaseConfig, Leases, Owner};
use idgen_core::store::etcd::EtcdStore;
use idgen_core::store::postgres::PgStore;
use idgen_core::store::{KvStore, PgUrl, Secret};
use idgen_id::{Layout, DEFAULT_EPOCH_MS};
use idgen_testkit::postgres::{pg_bin_dir, PgServer, PASSWORD};
use idgen_testkit::EtcdCluster;

const CYCLES: usize = 200;

fn owner(name: &str) -> Owner {
    Owner {
        node_id: name.into(),
        host: "store-costs".into(),
        pid: std::process::id(),
        started_unix_ms: 0,
        instance: format!("{name}-{}", std::process::id()),
    }
}

fn summary(name: &str, mut t: Vec<Duration>) -> String {
    t.sort();
    let at = |q: f64| t[((t.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "{name} p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        t[t.len() - 1].as_secs_f64() * 1e3
    )
}

async fn lives(store: &dyn KvStore) {
    let layout = Layout::default();
    let clock = SystemClock::new();
    let (mut acq, mut ren, mut rel) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..CYCLES {
        let l = Leases::new(
            store,
            layout,
            LeaseConfig::new("lives", 8),
            owner(&format!("n{i}")),
        );
        let t = Instant::now();
        let g = l.acquire(clock.wall_ms()).await.expect("acquire");
        acq.push(t.elapsed());
        for _ in 0..3 {
            let t = Instant::now();
            l.renew(&g, clock.wall_ms()).await.expect("renew");
            ren.push(t.elapsed());
        }
        let t = Instant::now();
        l.release(&g, Some(g.floor), clock.wall_ms())
            .await
            .expect("release");
        rel.push(t.elapsed());
    }
    println!("  {CYCLES} lease lives of 8 worker IDs:");
    println!("    {}", summary("acquire", acq));
    println!("    {}", summary("renew  ", ren));
    println!("    {}", summary("release", rel));
}

async fn whole_default_space(store: &dyn KvStore) {
    let clock = SystemClock::new();
    let l = Leases::new(
        store,
        Layout::default(),
        LeaseConfig::new("whole", 1024),
        owner("whole"),
    );
    let t = Instant::now();
    let g = l.acquire(clock.wall_ms()).await.expect("1,024");
    let acquire = t.elapsed();
    let t = Instant::now();
    l.renew(&g, clock.wall_ms()).await.expect("renew");
    let renew = t.elapsed();
    let t = Instant::now();
    l.release(&g, Some(g.floor), clock.wall_ms())
        .await
        .expect("release");
    println!(
        "  the whole default space (1,024 worker IDs, one record): acquire {:.2} ms, renew \
         {:.2} ms, release {:.2} ms",
        acquire.as_secs_f64() * 1e3,
        renew.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );
}

async fn sixteen_bit_space(store: &dyn KvStore) {
    let layout = Layout::new(DEFAULT_EPOCH_MS, 41, 16, 6, 0).unwrap();
    let now = SystemClock::new().wall_ms();
    let t = Instant::now();
    for i in 0..512u64 {
        let l = Leases::new(
            store,
            layout,
            LeaseConfig::new("sixteen", 128),
            owner(&format!("s{i}")),
        );
        l.acquire(now + i).await.expect("a grant of 128");
    }
    let filled = t.elapsed();
    // Long after: the 512 holders published no clock key, and their leases lapsed.
    let all = Leases::new(
        store,
        layout,
        LeaseConfig::new("sixteen", 65_536),
        owner("all"),
    );
    let t = Instant::now();
    let g = all.acquire(now + 60_000).await.expect("the whole space");
    assert_eq!(g.workers.count, 65_536);
    println!(
        "  a 16-bit space: 512 grants of 128 in {:.0} ms ({:.2} ms each); then all 65,536 over \
         the 512 records in {:.0} ms",
        filled.as_secs_f64() * 1e3,
        filled.as_secs_f64() * 1e3 / 512.0,
        t.elapsed().as_secs_f64() * 1e3
    );
}

async fn costs(name: &str, store: &dyn KvStore) {
    println!("{name}:");
    lives(store).await;
    whole_default_space(store).await;
    sixteen_bit_space(store).await;
}

/// The connections role `idgen` holds from this process's stores, by `psql`.
fn pg_connections(server: &PgServer) -> String {
    let out = std::process::Command::new(pg_bin_dir().join("psql"))
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-U", "idgen", "-d", "postgres", "-At", "-c"])
        .arg("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idgen'")
        .env("PGPASSWORD", PASSWORD)
        .output()
        .expect("psql");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let etcd = EtcdCluster::start(1);
    // Durable, as etcd is (it syncs its log on every commit): the test servers are not.
    let pg = PgServer::start_durable();
    let e = EtcdStore::connect(etcd.endpoints(), "costs".into())
        .await
        .expect("etcd");
    let url: PgUrl = pg.url("costs").parse().unwrap();
    let p = PgStore::connect(&url, Some(&Secret::new(PASSWORD)), None)
        .await
        .expect("PostgreSQL");
    costs("etcd 3.4 (one member, loopback)", &e).await;
    costs(
        "PostgreSQL (loopback, SERIALIZABLE, fsync and synchronous_commit on)",
        &p,
    )
    .await;

    let p = std::sync::Arc::new(p);
    let e = std::sync::Arc::new(e);
    let on_etcd = race(e).await;
    let on_pg = race(p).await;
    println!(
        "16 acquirers at once (8 worker IDs each, {} transaction attempts each): {on_etcd} \
         granted on etcd, {on_pg} on PostgreSQL; PostgreSQL connections held afterwards: {} \
         (pool bound {})",
        idgen_core::lease::DEFAULT_MAX_ATTEMPTS,
        pg_connections(&pg),
        idgen_core::store::postgres::POOL_SIZE
    );
}

/// 16 acquirers at once in one namespace of `store`: how many get a
/// grant within their transaction attempts (the others give up on contention, as a node's
/// patient acquisition then retries).
async fn race<S: KvStore + 'static>(store: std::sync::Arc<S>) -> usize {
    let now = SystemClock::new().wall_ms();
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..16 {
        let store = store.clone();
        racers.spawn(async move {
            let l = Leases::new(
                &*store,
                Layout::default(),
                LeaseConfig::new("racers", 8),
                owner(&format!("r{i}")),
            );
            l.acquire(now).await.is_ok()
        });
    }
    racers.join_all().await.into_iter().filter(|ok| *ok).count()
}
