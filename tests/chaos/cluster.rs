//! The cluster under test: the etcd cluster and the node processes, each under libfaketime.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::etcd::EtcdCluster;
use crate::common::node::{self, NodeProc};
use crate::history::Shared;
use crate::workload::connect;
use crate::{FAKETIME_LIB, MAIN};

pub(crate) struct Cluster {
    // Dropped in this order: the nodes first, then etcd, then their directory.
    pub(crate) nodes: Vec<Option<NodeProc>>,
    pub(crate) etcd: EtcdCluster,
    pub(crate) url: String,
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
        args.extend_from_slice(&["--store", &self.url, "--node-id", &node_id]);
        args.extend_from_slice(extra);
        if !extra.contains(&"--shards") {
            args.extend_from_slice(&["--shards", "2"]);
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
