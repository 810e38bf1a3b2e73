//! The checks over a whole history, and the checker's own tests on synthetic histories.

use std::collections::HashMap;
use std::time::Instant;

use crate::faults::{Chaos, Expect, Outage, StopCheck};
use crate::history::{ErrRec, History};
use crate::scenario::Summary;
use crate::{ms, MAIN};

/// What the safety checks found over a whole history.
#[derive(Debug, Default)]
pub(crate) struct Safety {
    pub(crate) ids: u64,
    pub(crate) runs: usize,
    pub(crate) dups: u64,
    pub(crate) not_increasing: u64,
    pub(crate) outside: u64,
    pub(crate) violations: Vec<String>,
    pub(crate) stop_lines: Vec<String>,
    pub(crate) outage_lines: Vec<String>,
}

/// The safety checks, over everything every client received: no ID twice (as overlaps of
/// runs, sorted per first ID), strictly increasing per connection and inside the connection's
/// HELLO range (counted as the answers arrived), the paused nodes' ceiling bounds, and every
/// node's ceiling bound while the store was down.
pub(crate) fn check_safety(
    hist: &History,
    stop_checks: &[StopCheck],
    outages: &[Outage],
) -> Safety {
    let mut out = Safety::default();
    // 1. Duplicates: runs of every connection, sorted by first ID; a run that starts below
    //    the end of the runs before it overlaps them.
    let mut all: Vec<(u64, u32, u32)> = Vec::new();
    for (k, c) in hist.conns.iter().enumerate() {
        out.ids += c.ids;
        all.extend(c.runs.iter().map(|&(first, n)| (first, n, k as u32)));
    }
    out.runs = all.len();
    all.sort_unstable();
    let mut reach: Option<(u64, u32)> = None; // (end of the runs so far, the run reaching it)
    for &(first, n, k) in &all {
        let end = first + u64::from(n);
        if let Some((prev_end, pk)) = reach {
            if first < prev_end {
                let overlap = prev_end.min(end) - first;
                out.dups += overlap;
                if out.violations.len() < 5 {
                    let (a, b) = (&hist.conns[pk as usize], &hist.conns[k as usize]);
                    out.violations.push(format!(
                        "duplicate IDs {first}..{} ({overlap}) on node {} conn {} (workers {}+{}) and node {} conn {} (workers {}+{})",
                        first + overlap,
                        a.node, a.conn, a.hello.workers.first, a.hello.workers.count,
                        b.node, b.conn, b.hello.workers.first, b.hello.workers.count
                    ));
                }
            }
        }
        if reach.is_none_or(|(prev_end, _)| end > prev_end) {
            reach = Some((end, k));
        }
    }
    drop(all);

    // 2. Strictly increasing per connection; 3. worker inside the connection's HELLO range.
    for c in &hist.conns {
        out.not_increasing += c.not_increasing;
        out.outside += c.outside;
        out.violations.extend(c.examples.iter().take(5).cloned());
    }

    // 4. The paused node, after SIGCONT: nothing at or beyond its old ceiling bound until the
    //    successors released the space (only then can it hold a lease again). A run lies in
    //    one millisecond: its first ID's timestamp is every one's.
    for s in stop_checks {
        let (mut after, mut beyond) = (0u64, 0u64);
        for c in hist.conns.iter().filter(|c| c.node == s.node) {
            for (b, &(at, _)) in c.batches.iter().enumerate() {
                if at < s.cont || at >= s.released {
                    continue;
                }
                for &(first, n) in c.batch_runs(b) {
                    after += u64::from(n);
                    if c.hello.decompose(first).timestamp >= s.bound_ms {
                        beyond += u64::from(n);
                    }
                }
            }
        }
        let line = format!(
            "node {} after SIGCONT (old range {}..{}, taken by a successor: {}): {after} IDs received before the successors left, {beyond} at or beyond the old ceiling bound",
            s.node, s.old_range.0, s.old_range.0 + s.old_range.1, s.taken_by_successor
        );
        if s.taken_by_successor && beyond > 0 {
            out.violations.push(line.clone());
        }
        out.stop_lines.push(line);
    }

    // 5. The store down: whatever any node issued meanwhile lies below the stop time + TTL
    //    (until the store is being started again). Timestamps are compared in Unix ms (the
    //    connection's epoch added); a run's last ID carries its latest timestamp.
    for o in outages {
        let (mut during, mut beyond, mut latest) = (0u64, 0u64, None::<u64>);
        for c in &hist.conns {
            for (b, &(at, _)) in c.batches.iter().enumerate() {
                if at < o.down || at >= o.restarting {
                    continue;
                }
                for &(first, n) in c.batch_runs(b) {
                    during += u64::from(n);
                    let last = first + u64::from(n) - 1;
                    let at_ms = c.hello.epoch_ms + c.hello.decompose(last).timestamp;
                    if at_ms >= o.bound_unix_ms {
                        beyond += u64::from(n);
                    }
                    latest = latest.max(Some(at_ms));
                }
            }
        }
        let line = format!(
            "{}: {during} IDs received while the store was down ({} ms), {beyond} at or beyond the stop time + TTL{}",
            o.name,
            ms(o.restarting - o.down),
            latest.map_or(String::new(), |l| format!(
                " (the latest timestamped {} ms from it)",
                l as i64 - o.bound_unix_ms as i64
            ))
        );
        if beyond > 0 {
            out.violations.push(line.clone());
        }
        out.outage_lines.push(line);
    }
    out
}

/// Peak resident memory of this process (the clients and the checker), MiB.
pub(crate) fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

pub(crate) fn check(ch: &Chaos, hist: &History, started: Instant) -> Summary {
    let seed = ch.seed;
    let checking = Instant::now();
    let mut safety = check_safety(hist, &ch.stop_checks, &ch.outages);
    let check_time = checking.elapsed();
    let mut violations = std::mem::take(&mut safety.violations);
    let (stop_lines, outage_lines) = (&safety.stop_lines, &safety.outage_lines);
    let total = safety.ids;
    let (dups, not_increasing, outside) = (safety.dups, safety.not_increasing, safety.outside);

    // Per fault: how long clients saw errors.
    println!("\nchaos[{seed}]: per fault (times from injection; recovery from the last error)");
    println!(
        "{:<70} {:>8} {:>7} {:>10} {:>10} {:>11}",
        "fault", "clear(ms)", "errors", "fail(ms)", "err-span", "recover(ms)"
    );
    for f in &ch.faults {
        let hit = |n: usize| f.nodes.is_empty() || f.nodes.contains(&n);
        let errs: Vec<&ErrRec> = hist
            .errors
            .iter()
            .filter(|e| hit(e.node) && e.at >= f.injected && e.at < f.until)
            .collect();
        let first = errs.iter().map(|e| e.at).min();
        let last = errs.iter().map(|e| e.at).max();
        let recover = last.and_then(|l| {
            hist.conns
                .iter()
                .filter(|c| hit(c.node))
                .flat_map(|c| c.batches.iter().map(|b| b.0))
                .filter(|&t| t > l && t < f.until)
                .min()
                .map(|t| t - l)
        });
        println!(
            "{:<70} {:>8} {:>7} {:>10} {:>10} {:>11}",
            f.name,
            ms(f.cleared - f.injected),
            errs.len(),
            first.map_or("-".into(), |t| ms(t - f.injected).to_string()),
            match (first, last) {
                (Some(a), Some(b)) => ms(b - a).to_string(),
                _ => "-".into(),
            },
            recover.map_or("-".into(), |d| ms(d).to_string()),
        );
        for n in &f.notes {
            println!("    {n}");
        }
        if !errs.is_empty() {
            // Which nodes' clients saw them (a fault may find a node still recovering from the
            // one before).
            let mut by_node: Vec<(usize, usize)> = Vec::new();
            for e in &errs {
                match by_node.iter_mut().find(|(n, _)| *n == e.node) {
                    Some((_, k)) => *k += 1,
                    None => by_node.push((e.node, 1)),
                }
            }
            by_node.sort_unstable();
            let by_node: Vec<String> = by_node
                .iter()
                .map(|(n, k)| format!("node {n}: {k}"))
                .collect();
            println!("    errors by node: {}", by_node.join(", "));
        }
        match f.expect {
            Expect::Anything => {}
            Expect::NoClockErrors => {
                let refused = errs
                    .iter()
                    .filter(|e| e.what.contains("UNAVAILABLE_CLOCK"))
                    .count();
                if refused > 0 {
                    violations.push(format!(
                        "{}: {refused} UNAVAILABLE_CLOCK answers, expected the step to be waited out",
                        f.name
                    ));
                }
            }
            Expect::Status(s) => {
                if !errs.iter().any(|e| e.what.contains(s)) {
                    violations.push(format!("{}: no {s} error seen", f.name));
                }
            }
            Expect::FailClosed {
                within,
                status,
                recover_within,
            } => {
                for n in 0..MAIN {
                    let first = errs
                        .iter()
                        .filter(|e| e.node == n && e.what.contains(status))
                        .map(|e| e.at)
                        .min();
                    match first {
                        Some(t) if t - f.injected <= within => {}
                        Some(t) => violations.push(format!(
                            "{}: node {n} failed closed ({status}) only after {} ms (allowed {} ms)",
                            f.name,
                            ms(t - f.injected),
                            ms(within)
                        )),
                        None => violations.push(format!(
                            "{}: node {n} never failed closed with {status}",
                            f.name
                        )),
                    }
                    let served = hist
                        .conns
                        .iter()
                        .filter(|c| c.node == n)
                        .flat_map(|c| c.batches.iter().map(|b| b.0))
                        .filter(|&t| t >= f.cleared && t < f.until)
                        .min();
                    match served {
                        Some(t) if t - f.cleared <= recover_within => println!(
                            "    node {n}: first {status} {} ms after the injection, IDs again {} ms after the store's return",
                            first.map_or("-".into(), |t| ms(t - f.injected).to_string()),
                            ms(t - f.cleared)
                        ),
                        Some(t) => violations.push(format!(
                            "{}: node {n} served again only {} ms after the store's return (allowed {} ms)",
                            f.name,
                            ms(t - f.cleared),
                            ms(recover_within)
                        )),
                        None => violations.push(format!(
                            "{}: node {n} did not serve again after the store's return",
                            f.name
                        )),
                    }
                }
            }
        }
        let kinds: HashMap<String, usize> = errs.iter().fold(HashMap::new(), |mut m, e| {
            let k: String = e.what.chars().take(40).collect();
            *m.entry(k).or_default() += 1;
            m
        });
        let mut kinds: Vec<_> = kinds.into_iter().collect();
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
        for (k, n) in kinds.iter().take(3) {
            println!("    {n} × {k}");
        }
    }
    for l in stop_lines.iter().chain(outage_lines) {
        println!("{l}");
    }
    println!(
        "\nchaos[{seed}]: {} faults, {} connections, {total} IDs checked in {} runs, {dups} duplicates, {not_increasing} not increasing, {outside} outside their HELLO range, {} client errors, {:.1} s; check {:.2} s, peak memory {:.0} MiB",
        ch.faults.len() - 1,
        hist.conns.len(),
        safety.runs,
        hist.errors.len(),
        started.elapsed().as_secs_f64(),
        check_time.as_secs_f64(),
        peak_rss_mib()
    );
    assert!(
        violations.is_empty(),
        "chaos seed {seed} (IDGEN_CHAOS_SEED={seed} reproduces): {} violation(s):\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert!(total > 10_000, "seed {seed}: only {total} IDs issued");
    Summary {
        ids: total as usize,
        faults: ch.faults.len() - 1,
    }
}

mod tests {
    use std::time::{Duration, Instant};

    use idgen_id::WorkerRange;
    use idgen_protocol::ServerHello;

    use super::check_safety;
    use crate::faults::{Outage, StopCheck};
    use crate::history::{ConnLog, History};
    use crate::Rng;

    /// A recorded history the checker must pass, built like the clients build theirs: `conns`
    /// connections, each on its own two worker IDs, answering random batches of consecutive IDs
    /// (one shard walking its workers within a millisecond), timestamps increasing.
    pub(crate) fn synthetic_history(seed: u64, conns: usize) -> History {
        let mut rng = Rng(seed);
        let mut h = History::default();
        let t0 = Instant::now();
        for k in 0..conns {
            let hello = ServerHello {
                version: 1,
                epoch_ms: 1_767_225_600_000,
                timestamp_bits: 41,
                worker_bits: 3,
                sequence_bits: 19,
                region_bits: 0,
                max_batch: 65_536,
                max_request_frame: 64,
                workers: WorkerRange::new(2 * (k as u64 % 4), 2),
                shard: 0,
            };
            let mut log = ConnLog::new(k % 3, k as u64, hello);
            // Connections on the same workers use disjoint timestamps (successive holders).
            let mut ts = 1_000_000 + (k as u64 / 4) * 10_000_000;
            for b in 0..200 {
                ts += 1 + rng.below(3);
                let n = 1 + rng.below(400);
                let base = (ts << 22) | (hello.workers.first << 19);
                log.push(t0 + Duration::from_micros(b), base..base + n);
            }
            h.conns.push(log);
        }
        h
    }

    #[test]
    pub(crate) fn the_checker_passes_a_clean_history_and_counts_it_in_runs() {
        let h = synthetic_history(7, 12);
        let s = check_safety(&h, &[], &[]);
        assert!(s.violations.is_empty(), "{:?}", s.violations);
        assert_eq!((s.dups, s.not_increasing, s.outside), (0, 0, 0));
        assert_eq!(s.runs, 12 * 200, "one run per batch: {s:?}");
        assert!(s.ids > 12 * 200 * 100);
    }

    #[test]
    pub(crate) fn the_checker_finds_a_planted_duplicate() {
        for seed in 1..=20u64 {
            let mut h = synthetic_history(seed, 8);
            let mut rng = Rng(seed);
            // An ID some connection received, received again by another connection (later).
            let from = rng.below(8) as usize;
            let mut to = rng.below(8) as usize;
            if to == from {
                to = (to + 1) % 8;
            }
            let (first, n) = h.conns[from].runs[rng.below(200) as usize];
            let dup = first + rng.below(u64::from(n));
            // Keep the receiving connection's own order and range plausible: give it a copy of
            // the source's HELLO, as if it were the same shard after a reconnect.
            h.conns[to].hello = h.conns[from].hello;
            h.conns[to].last = None;
            h.conns[to].push(Instant::now(), [dup]);
            let s = check_safety(&h, &[], &[]);
            assert_eq!(s.dups, 1, "seed {seed}: {s:?}");
            assert!(
                s.violations.iter().any(|v| v.contains("duplicate")),
                "seed {seed}"
            );
        }
    }

    #[test]
    pub(crate) fn the_checker_finds_an_overlap_of_whole_runs() {
        let mut h = synthetic_history(3, 4);
        let (first, n) = h.conns[0].runs[50];
        let hello = h.conns[0].hello;
        h.conns[1].hello = hello;
        h.conns[1].last = None;
        // Half the run again, shifted: an overlap of n / 2 IDs.
        let half = u64::from(n / 2).max(1);
        h.conns[1].push(
            Instant::now(),
            first + u64::from(n) - half..first + u64::from(n) + 10,
        );
        let s = check_safety(&h, &[], &[]);
        assert_eq!(s.dups, half, "{s:?}");
    }

    #[test]
    pub(crate) fn the_checker_finds_an_id_out_of_order_and_one_outside_its_range() {
        for seed in 1..=20u64 {
            let mut h = synthetic_history(seed, 6);
            let mut rng = Rng(seed);
            let k = rng.below(6) as usize;
            let last = h.conns[k].last.unwrap();
            // Below the connection's last ID, but no duplicate: a fresh timestamp far below.
            let back = last - (50_000 << 22);
            h.conns[k].push(Instant::now(), [back]);
            let s = check_safety(&h, &[], &[]);
            assert_eq!(s.not_increasing, 1, "seed {seed}: {s:?}");
            assert_eq!(s.dups, 0, "seed {seed}");
            assert!(s.violations.iter().any(|v| v.contains("not increasing")));

            let mut h = synthetic_history(seed, 6);
            let c = &mut h.conns[k];
            let last = c.last.unwrap();
            // The next millisecond, on a worker outside the connection's two.
            let ts = (last >> 22) + 1;
            let w = (c.hello.workers.first + 2) % 8;
            c.push(Instant::now(), [(ts << 22) | (w << 19)]);
            let s = check_safety(&h, &[], &[]);
            assert_eq!(s.outside, 1, "seed {seed}: {s:?}");
            assert!(s
                .violations
                .iter()
                .any(|v| v.contains("outside its HELLO range")));
        }
    }

    #[test]
    pub(crate) fn the_checker_finds_a_paused_node_issuing_beyond_its_old_ceiling() {
        let mut h = synthetic_history(5, 3);
        let cont = Instant::now();
        let node = h.conns[0].node;
        let last = h.conns[0].last.unwrap();
        let bound_ms = (last >> 22) + 5;
        let w = h.conns[0].hello.workers.first;
        h.conns[0].push(
            cont + Duration::from_millis(1),
            [(bound_ms << 22) | (w << 19)],
        );
        let check = StopCheck {
            node,
            cont,
            released: cont + Duration::from_secs(1),
            bound_ms,
            old_range: (0, 2),
            taken_by_successor: true,
        };
        let s = check_safety(&h, &[check], &[]);
        assert!(
            s.violations.iter().any(|v| v.contains("1 at or beyond")),
            "{s:?}"
        );
    }

    #[test]
    pub(crate) fn the_checker_finds_an_id_beyond_the_ceiling_while_the_store_was_down() {
        let mut h = synthetic_history(9, 3);
        let down = Instant::now();
        let c = &mut h.conns[1];
        let last = c.last.unwrap();
        let bound_ts = (last >> 22) + 5;
        let w = c.hello.workers.first;
        // Below the bound while the store is down: allowed; at the bound: a violation; beyond
        // it once the store is being started again: allowed.
        c.push(
            down + Duration::from_millis(1),
            [((bound_ts - 1) << 22) | (w << 19)],
        );
        c.push(
            down + Duration::from_millis(2),
            [(bound_ts << 22) | (w << 19)],
        );
        c.push(
            down + Duration::from_secs(2),
            [((bound_ts + 1) << 22) | (w << 19)],
        );
        let outage = Outage {
            name: "the store stopped".into(),
            down,
            restarting: down + Duration::from_secs(1),
            bound_unix_ms: c.hello.epoch_ms + bound_ts,
        };
        let s = check_safety(&h, &[], &[outage]);
        assert_eq!(s.violations.len(), 1, "{s:?}");
        assert!(
            s.violations[0]
                .contains("2 IDs received while the store was down (1000 ms), 1 at or beyond"),
            "{s:?}"
        );
    }
}
