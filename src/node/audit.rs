//! Audit events, from the control thread, for what the shards only count (clock rollbacks,
//! sequence exhaustion) and for the layout's timestamp range running out.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idgen_core::clock::Clock;
use idgen_id::Layout;
use tokio::sync::watch;

use super::telemetry::ShardStats;

/// Turns the shards' counters into audit events: clock rollback detected and recovered,
/// sequence exhaustion (at most one event per shard per 10 s), and the layout's timestamp
/// range ending within `range_warning`.
pub async fn observe(
    shards: Vec<Arc<ShardStats>>,
    layout: Layout,
    range_warning: Duration,
    clock: impl Clock,
    mut shutdown: watch::Receiver<bool>,
) {
    // Per shard: rollback events already reported, and whether a recovery is still owed.
    let mut reported: Vec<u64> = vec![0; shards.len()];
    let mut open_episode = vec![false; shards.len()];
    let mut waits: Vec<u64> = vec![0; shards.len()];
    let mut last_exhaustion_report = Instant::now();
    let mut last_range_check: Option<Instant> = None;
    loop {
        for (i, s) in shards.iter().enumerate() {
            let g = &s.generator;
            // Counting events (not sampling the flag) catches episodes shorter than a poll.
            let events = g.rollback_events.load(Ordering::Relaxed);
            if events > reported[i] {
                tracing::warn!(
                    event = "clock_rollback_detected",
                    shard = i,
                    episodes = events - reported[i],
                    largest_rollback_ms = g.largest_rollback_ms.load(Ordering::Relaxed),
                    "clock behind the last timestamp used: shard unavailable until it recovers"
                );
                reported[i] = events;
                open_episode[i] = true;
            }
            if open_episode[i] && !g.clock_behind.load(Ordering::Relaxed) {
                open_episode[i] = false;
                tracing::info!(
                    event = "clock_rollback_recovered",
                    shard = i,
                    "clock caught up: shard serving again"
                );
            }
        }
        if last_exhaustion_report.elapsed() >= Duration::from_secs(10) {
            last_exhaustion_report = Instant::now();
            for (i, s) in shards.iter().enumerate() {
                let now = s.generator.exhaustion_waits.load(Ordering::Relaxed);
                if now > waits[i] {
                    tracing::warn!(
                        event = "sequence_exhausted",
                        shard = i,
                        waits = now - waits[i],
                        "sequence space of a millisecond used up (add worker IDs per shard or sequence bits)"
                    );
                }
                waits[i] = now;
            }
        }
        if last_range_check.is_none_or(|t| t.elapsed() >= Duration::from_secs(86_400)) {
            last_range_check = Some(Instant::now());
            let left = layout.time_left(clock.wall_ms());
            if left < range_warning {
                tracing::warn!(
                    event = "layout_range_ending",
                    days_left = left.as_secs() / 86_400,
                    "the layout's timestamp range runs out soon: plan a new epoch or layout"
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}
