//! What the node's observers read of it: the admin endpoints (`node/admin.rs`) and the metrics
//! scrape (`node/metrics.rs`) both read a [`NodeState`], on the control thread, and neither
//! knows of the other. Everything in it is shared read-only or written by its one owner (the
//! shards' counters by each shard, the lease by the keeper, `draining` by the shutdown).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::telemetry::ShardStats;
use super::tls::ServerTls;
use crate::config::ServeConfig;
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::drift::ClockWatch;
use idgen_core::lease::keeper::LeaseShared;
use idgen_core::sequence::holder::Holder;

/// The running node, as its observers read it.
pub struct NodeState {
    /// The node's configuration, shared (the admin server reports on every section).
    pub config: Arc<ServeConfig>,
    pub lease: Arc<LeaseShared>,
    pub shards: Vec<Arc<ShardStats>>,
    pub draining: Arc<AtomicBool>,
    pub clock_watch: Arc<ClockWatch>,
    /// The node's TLS, for its counters.
    pub tls: Option<Arc<ServerTls>>,
    /// The node's named sequences, for their counters.
    pub sequences: Arc<Holder>,
}

impl NodeState {
    /// Why the node is not ready, if it is not. Ready means: it holds a lease with more than
    /// half a TTL left (renewals are every third of one, so two have failed when this turns),
    /// no shard's clock is behind, it is not draining, its clock agrees with its peers, and
    /// (with `require_sync`) the kernel says its clock is synchronised.
    pub fn not_ready_reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        let now = SystemClock::new().wall_ms();
        if self.draining.load(Ordering::Relaxed) {
            reasons.push("draining".to_string());
        }
        match self.lease.current() {
            None => reasons.push("no lease".to_string()),
            Some(_) => {
                let left = self.lease.time_left_ms(now);
                let want = idgen_core::lease::duration_ms(self.config.lease.lease_ttl) / 2;
                if left <= want {
                    reasons.push(format!(
                        "lease time left {left} ms is below {want} ms (renewals failing)"
                    ));
                }
            }
        }
        // Behind as a shard saw it on its last request, or as the clock reads now against the
        // last timestamp each shard used (so an idle node is taken out too).
        let epoch = self
            .lease
            .current()
            .map_or(self.config.layout.epoch_ms(), |v| v.layout.epoch_ms());
        let now_id = now.saturating_sub(epoch);
        let wait = idgen_core::lease::duration_ms(self.config.clock.max_rollback_wait);
        let behind: Vec<usize> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.generator.clock_behind.load(Ordering::Relaxed)
                    || s.generator.last_timestamp.load(Ordering::Relaxed) > now_id + wait
            })
            .map(|(i, _)| i)
            .collect();
        if !behind.is_empty() {
            reasons.push(format!(
                "clock behind the last timestamp used (rolled back) on shard(s) {behind:?}"
            ));
        }
        if let Some(drift) = self.clock_watch.excessive_drift() {
            reasons.push(drift);
        }
        if self.config.clock.require_sync {
            if let Some(why) = kernel_sync_problem(self.config.clock.max_drift) {
                reasons.push(why);
            }
        }
        reasons
    }
}

/// Why the kernel's clock does not count as synchronised within `max_error` (its flag, its
/// error bound), or that it cannot be read; `None` when it does.
pub fn kernel_sync_problem(max_error: std::time::Duration) -> Option<String> {
    match idgen_core::sync::KernelSync::read() {
        Ok(k) => k.problem(max_error),
        Err(e) => Some(format!(
            "cannot read the kernel's clock synchronisation state: {e}"
        )),
    }
}
