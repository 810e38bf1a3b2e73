//! The cluster under test: the store (a three-member etcd cluster or one PostgreSQL server)
//! and the node processes, each under libfaketime.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idgen_testkit::postgres::{PgServer, PASSWORD};

use crate::common::etcd::EtcdCluster;
use crate::common::node::{self, NodeProc};
use crate::history::Shared;
use crate::workload::connect;
use crate::{FAKETIME_LIB, MAIN};

/// Which coordination store a run puts under the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Etcd,
    Postgres,
}

/// The coordination store under test. The nodes, the workload, the node faults and the
/// checker are the same for both; the store faults differ (etcd: one member killed, the whole
/// cluster stopped; PostgreSQL: the server restarted, or stopped past the TTL).
pub(crate) enum Store {
    /// Three members.
    Etcd(EtcdCluster),
    /// One server; the nodes and `idgen seq` read the `idgen` role's password from a file.
    Postgres {
        server: PgServer,
        password_file: PathBuf,
    },
}

impl Store {
    /// Starts the store; a PostgreSQL password file goes into `dir`.
    pub(crate) fn start(kind: StoreKind, dir: &tempfile::TempDir) -> Store {
        match kind {
            StoreKind::Etcd => Store::Etcd(EtcdCluster::start(3)),
            StoreKind::Postgres => {
                let password_file = dir.path().join("pg-password");
                std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
                Store::Postgres {
                    server: PgServer::start(),
                    password_file,
                }
            }
        }
    }

    /// What the reports call the whole store.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Store::Etcd(_) => "whole etcd cluster",
            Store::Postgres { .. } => "PostgreSQL",
        }
    }

    /// The `[lease]` flags that name the store under `prefix` (and its password): for `idgen
    /// serve` and `idgen seq` alike.
    pub(crate) fn args(&self, prefix: &str) -> Vec<String> {
        match self {
            Store::Etcd(etcd) => vec!["--store".into(), etcd.url(prefix)],
            Store::Postgres {
                server,
                password_file,
            } => vec![
                "--store".into(),
                server.url(prefix),
                "--postgres-password-file".into(),
                password_file.to_str().unwrap().into(),
            ],
        }
    }

    /// Whether the store's return extends the life of expiring keys (a dead node's clock key):
    /// etcd's leases are granted anew by a restarted cluster or a new leader; PostgreSQL's
    /// `expires_at` is a fixed time on the database's clock.
    pub(crate) fn return_extends_expiring_keys(&self) -> bool {
        matches!(self, Store::Etcd(_))
    }

    /// Stops the whole store (every etcd member killed; PostgreSQL's fast shutdown) and
    /// returns once it is down.
    pub(crate) fn stop(&mut self) {
        match self {
            Store::Etcd(etcd) => etcd.stop_all(),
            Store::Postgres { server, .. } => server.stop(),
        }
    }

    /// Starts the whole store again and returns once it serves (all etcd members healthy;
    /// PostgreSQL accepting connections).
    pub(crate) fn start_again(&mut self) {
        match self {
            Store::Etcd(etcd) => etcd.start_all(),
            Store::Postgres { server, .. } => server.start_again(),
        }
    }

    /// The etcd cluster (for the member faults).
    pub(crate) fn etcd(&mut self) -> &mut EtcdCluster {
        match self {
            Store::Etcd(etcd) => etcd,
            Store::Postgres { .. } => panic!("an etcd fault on a PostgreSQL run"),
        }
    }
}

pub(crate) struct Cluster {
    // Dropped in this order: the nodes first, then the store, then their directory.
    pub(crate) nodes: Vec<Option<NodeProc>>,
    pub(crate) store: Store,
    /// `--store URL` (and the password file): [`Store::args`] for this run's prefix.
    pub(crate) store_args: Vec<String>,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) shared: Arc<Shared>,
    pub(crate) base_args: Vec<String>,
}

pub(crate) fn offset_file(dir: &tempfile::TempDir, i: usize) -> PathBuf {
    dir.path().join(format!("faketime-{i}"))
}

impl Cluster {
    pub(crate) fn set_clock(&self, i: usize, offset: &str) {
        std::fs::write(offset_file(&self.dir, i), format!("{offset}\n")).unwrap();
    }

    pub(crate) fn try_start_node(&mut self, i: usize, extra: &[&str]) -> Result<NodeProc, String> {
        let data = self.dir.path().join(format!("data-{i}"));
        std::fs::create_dir_all(&data).unwrap();
        let node_id = format!("n{i}");
        let mut args: Vec<&str> = self.base_args.iter().map(String::as_str).collect();
        args.extend(self.store_args.iter().map(String::as_str));
        args.extend_from_slice(&["--node-id", &node_id]);
        args.extend_from_slice(extra);
        if !extra.contains(&"--shards") {
            args.extend_from_slice(&["--shards", "2"]);
        }
        // Every node may commit the strict sequences' calls (the others forward theirs to
        // it), as the docs deploy them: the faults then hit the committer too.
        if !extra.contains(&"--advertise") {
            args.extend_from_slice(&["--advertise", "127.0.0.1:0"]);
        }
        let offset = offset_file(&self.dir, i);
        if !offset.exists() {
            self.set_clock(i, "+0");
        }
        let offset = offset.to_str().unwrap().to_string();
        NodeProc::try_start_in(
            Some(&data),
            &args,
            &[
                ("LD_PRELOAD", FAKETIME_LIB),
                ("FAKETIME_TIMESTAMP_FILE", &offset),
                ("FAKETIME_NO_CACHE", "1"),
                ("DONT_FAKE_MONOTONIC", "1"),
            ],
        )
    }

    /// Starts node `i` (shards 2 unless `extra` says otherwise) and points its clients at it.
    pub(crate) fn start_node(&mut self, i: usize, extra: &[&str]) -> Result<(), String> {
        let p = self.try_start_node(i, extra)?;
        *self.shared.addrs[i].lock().unwrap() = Some(p.addr);
        self.nodes[i] = Some(p);
        Ok(())
    }

    pub(crate) fn kill9(&mut self, i: usize) {
        *self.shared.addrs[i].lock().unwrap() = None;
        if let Some(mut p) = self.nodes[i].take() {
            p.signal("KILL");
            p.kill();
        }
    }

    pub(crate) fn term(&mut self, i: usize) {
        *self.shared.addrs[i].lock().unwrap() = None;
        if let Some(mut p) = self.nodes[i].take() {
            p.terminate(Duration::from_secs(15));
        }
    }

    pub(crate) fn node(&self, i: usize) -> &NodeProc {
        self.nodes[i].as_ref().expect("node running")
    }

    /// Waits until a fresh connection to every running main node is served.
    pub(crate) fn wait_serving(&self, within: Duration) -> Result<Duration, String> {
        let t = Instant::now();
        for i in 0..MAIN {
            let Some(p) = &self.nodes[i] else { continue };
            loop {
                let ok = connect(p.addr)
                    .and_then(|(mut c, _)| c.try_get_ids(1))
                    .is_ok_and(|a| a.is_ok());
                if ok {
                    break;
                }
                if t.elapsed() > within {
                    return Err(format!(
                        "node {i} not serving after {within:?}; log:\n{}",
                        node::tail(p.log_path())
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(t.elapsed())
    }

    /// Waits until every running main node says it is ready (`/health/ready` 200: among
    /// others, a lease with at least 1 s left, so renewed since the store came back).
    pub(crate) fn wait_ready(&self, within: Duration) -> Result<Duration, String> {
        let t = Instant::now();
        for i in 0..MAIN {
            let Some(p) = &self.nodes[i] else { continue };
            let admin = p.admin.expect("the nodes run an admin listener");
            loop {
                let r = node::try_http(admin, "GET", "/health/ready", None, Duration::from_secs(1));
                let last = match r {
                    Ok((200, _)) => break,
                    Ok((s, b)) => format!("{s} {}", b.trim()),
                    Err(e) => e,
                };
                if t.elapsed() > within {
                    return Err(format!(
                        "node {i} not ready after {within:?} (/health/ready: {last}); log:\n{}",
                        node::tail(p.log_path())
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(t.elapsed())
    }
}

/// The node's lease renewals since it last started, from its `/metrics`: how many succeeded
/// and failed, the successful ones' mean duration and how many took over 250 ms (what a
/// store's latency costs: a lease is renewed every third of the TTL from the last start).
pub(crate) fn renewal_summary(p: &NodeProc) -> String {
    let Some(admin) = p.admin else {
        return "no admin listener".into();
    };
    let text = match node::try_http(admin, "GET", "/metrics", None, Duration::from_secs(5)) {
        Ok((200, body)) => body,
        Ok((s, _)) => return format!("/metrics answered {s}"),
        Err(e) => return format!("/metrics: {e}"),
    };
    let value = |series: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.starts_with(series))?;
        line.rsplit(' ').next()?.parse().ok()
    };
    let h = "idgen_lease_renewal_duration_seconds";
    let ok = value(&format!("{h}_count{{result=\"ok\""));
    let sum = value(&format!("{h}_sum{{result=\"ok\""));
    let fast = value(&format!("{h}_bucket{{result=\"ok\",le=\"0.25\""));
    let failed = value(&format!("{h}_count{{result=\"failed\""));
    match (ok, sum) {
        (Some(n), Some(sum)) if n > 0.0 => format!(
            "{n} renewals ok (mean {:.0} ms, {} over 250 ms), {} failed",
            sum / n * 1000.0,
            fast.map_or("?".into(), |f| (n - f).to_string()),
            failed.unwrap_or(0.0)
        ),
        _ => "no renewal yet".into(),
    }
}

/// The node's current lease range `(first, count)`, from its last `lease acquired` log line.
pub(crate) fn lease_range(p: &NodeProc) -> Option<(u32, u32)> {
    // The text log may carry ANSI colours: drop `ESC [ … m`.
    let mut log = String::new();
    let mut in_esc = false;
    for ch in p.log().chars() {
        match ch {
            '\u{1b}' => in_esc = true,
            'm' if in_esc => in_esc = false,
            _ if in_esc => {}
            _ => log.push(ch),
        }
    }
    let line = log.lines().rev().find(|l| l.contains("lease acquired"))?;
    let field = |name: &str| -> Option<u32> {
        let rest = &line[line.find(name)? + name.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("worker_first=")?, field("worker_count=")?))
}
