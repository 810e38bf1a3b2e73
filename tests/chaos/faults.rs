//! The faults, each with what clients must see while it lasts and after.

use std::time::{Duration, Instant};

use crate::cluster::{lease_range, Cluster};
use crate::common::node::http;
use crate::workload::connect;
use crate::{ms, unix_ms, Rng, RECOVER_WITHIN, SAFETY, TTL};

/// One injected fault, for the report.
pub(crate) struct Fault {
    pub(crate) name: String,
    /// Nodes whose clients are expected to notice (empty: all).
    pub(crate) nodes: Vec<usize>,
    pub(crate) injected: Instant,
    /// When the fault was removed (restart, SIGCONT, clock restored, the store back).
    pub(crate) cleared: Instant,
    /// End of its observation window (the next fault's start).
    pub(crate) until: Instant,
    pub(crate) notes: Vec<String>,
    pub(crate) expect: Expect,
}

/// What clients must see during a fault.
#[derive(Clone, Copy)]
pub(crate) enum Expect {
    Anything,
    /// No clock refusal (UNAVAILABLE_CLOCK): a step back of 5 ms is waited out. Other errors
    /// in the window come from the node's state after an earlier fault (for example a node
    /// just restarted with its clock behind fails closed on its new lease, with status 300)
    /// and are reported, not blamed on the step.
    NoClockErrors,
    /// Errors with this status text must appear (the clock step back of 10 s: 301).
    Status(&'static str),
    /// The whole store gone past the TTL: every main node's clients get an error with status
    /// text `status` within `within` of the injection, and IDs again within `recover_within`
    /// of the store's return (the fault's `cleared`).
    FailClosed {
        within: Duration,
        status: &'static str,
        recover_within: Duration,
    },
}

/// A store outage: from `down` (the store stopped) until `restarting` (the store being
/// started again) no node may issue an ID whose timestamp is at or beyond `bound_unix_ms`
/// (the stop time + TTL: a bound on every node's lease ceiling, since no renewal can succeed
/// meanwhile). Checked on every ID received in that window, on every node. The window ends
/// when the store's start begins, not when it is seen serving: nodes may renew (and rightly
/// issue beyond the bound) as soon as it answers them, before the harness's readiness probe
/// does.
pub(crate) struct Outage {
    pub(crate) name: String,
    pub(crate) down: Instant,
    pub(crate) restarting: Instant,
    pub(crate) bound_unix_ms: u64,
}

/// The SIGSTOP check: after `cont`, until `released`, node `node` must issue no ID whose
/// timestamp is at or beyond `bound` (ID ms).
pub(crate) struct StopCheck {
    pub(crate) node: usize,
    pub(crate) cont: Instant,
    pub(crate) released: Instant,
    pub(crate) bound_ms: u64,
    /// The node's worker range before the pause, and whether a successor was seen holding it.
    pub(crate) old_range: (u32, u32),
    pub(crate) taken_by_successor: bool,
}

pub(crate) struct Chaos {
    pub(crate) seed: u64,
    pub(crate) c: Cluster,
    pub(crate) faults: Vec<Fault>,
    pub(crate) stop_checks: Vec<StopCheck>,
    pub(crate) outages: Vec<Outage>,
    pub(crate) rng: Rng,
    pub(crate) last_kill: Instant,
    /// When etcd last got a member back (a restarted cluster, or a new leader, extends every
    /// etcd lease: a dead node's clock key lives on that long again). PostgreSQL's expiring
    /// keys keep their end through a restart: its return does not move this.
    pub(crate) last_store_back: Instant,
}

impl Chaos {
    pub(crate) fn fault(
        &mut self,
        name: &str,
        nodes: Vec<usize>,
        injected: Instant,
        notes: Vec<String>,
    ) {
        let cleared = Instant::now();
        println!(
            "chaos[{}]: {name} on {nodes:?} ({:.1} s) {}",
            self.seed,
            injected.elapsed().as_secs_f64(),
            notes.join("; ")
        );
        if let Some(prev) = self.faults.last_mut() {
            prev.until = injected;
        }
        self.faults.push(Fault {
            name: name.into(),
            nodes,
            injected,
            cleared,
            until: cleared,
            notes,
            expect: Expect::Anything,
        });
    }

    pub(crate) fn expect(&mut self, e: Expect) {
        self.faults.last_mut().unwrap().expect = e;
    }

    pub(crate) fn settle(&mut self) {
        match self.c.wait_serving(Duration::from_secs(20)) {
            Ok(_) => {}
            Err(e) => panic!("seed {}: {e}", self.seed),
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    /// Waits until killed nodes' leases have expired and passed the safety period, and their
    /// clock keys have expired in the store.
    pub(crate) fn wait_space_settled(&mut self) {
        // A killed node's worker IDs free up once its lease has passed the safety period
        // *and* its clock key has expired in the store (etcd counts lease TTLs in whole seconds
        // and checks them twice a second): until then it counts as alive.
        let key_gone = idgen_core::drift::CLOCK_KEY_TTL + Duration::from_millis(1500);
        let ready = (self.last_kill + (TTL + SAFETY).max(key_gone))
            .max(self.last_store_back + key_gone)
            + Duration::from_millis(700);
        if let Some(d) = ready.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }

    pub(crate) fn kill9_restart(&mut self, i: usize) {
        let t = Instant::now();
        self.c.kill9(i);
        self.last_kill = Instant::now();
        let r = self.c.start_node(i, &[]);
        r.unwrap_or_else(|e| panic!("seed {}: node {i} did not restart: {e}", self.seed));
        let up = t.elapsed();
        self.fault(
            "kill -9 + immediate restart",
            vec![i],
            t,
            vec![format!("restarted in {} ms", ms(up))],
        );
        self.settle();
    }

    pub(crate) fn restart_behind(&mut self, i: usize) {
        let t = Instant::now();
        self.c.kill9(i);
        self.last_kill = Instant::now();
        self.c.set_clock(i, "-5s");
        let r = self.c.start_node(i, &[]);
        r.unwrap_or_else(|e| panic!("seed {}: node {i} did not restart at -5 s: {e}", self.seed));
        let up = t.elapsed();
        self.fault(
            "kill -9 + restart with clock -5 s",
            vec![i],
            t,
            vec![format!("restarted in {} ms", ms(up))],
        );
        self.settle();
        std::thread::sleep(Duration::from_secs(1));
        // Back to true time: a step ahead of 5 s, which the node refuses IDs over until its
        // peers' clocks confirm it (about 2.7 s). Waited out here, so that the next fault is
        // not blamed for it.
        let believed = |c: &Cluster| c.node(i).log().matches("clock_step_believed").count();
        let before = believed(&self.c);
        self.c.set_clock(i, "+0");
        let back = Instant::now();
        while believed(&self.c) == before && back.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let note = if believed(&self.c) > before {
            format!(
                "clock back to true time: the step believed after {} ms",
                ms(back.elapsed())
            )
        } else {
            "clock back to true time: no step believed within 10 s".to_string()
        };
        let r = self.c.wait_serving(Duration::from_secs(20));
        r.unwrap_or_else(|e| panic!("seed {}: {e}", self.seed));
        let serving = ms(back.elapsed());
        if let Some(f) = self.faults.last_mut() {
            f.notes
                .push(format!("{note}, serving again after {serving} ms"));
        }
    }

    pub(crate) fn clock_back_5ms(&mut self, i: usize) {
        let t = Instant::now();
        self.c.set_clock(i, "-0.005");
        std::thread::sleep(Duration::from_millis(1500));
        self.fault("clock back 5 ms", vec![i], t, vec![]);
        self.expect(Expect::NoClockErrors);
        self.c.set_clock(i, "+0");
        std::thread::sleep(Duration::from_millis(300));
    }

    pub(crate) fn clock_back_10s(&mut self, i: usize) {
        let t = Instant::now();
        self.c.set_clock(i, "-10s");
        std::thread::sleep(Duration::from_millis(1500));
        let admin = self.c.node(i).admin.unwrap();
        let (s, b) = http(admin, "GET", "/health/ready", None);
        self.c.set_clock(i, "+0");
        let note = format!("/health/ready while back: {s} {}", b.trim());
        assert_eq!(s, 503, "seed {}: {note}", self.seed);
        self.fault("clock back 10 s", vec![i], t, vec![note]);
        self.expect(Expect::Status("UNAVAILABLE_CLOCK"));
        self.settle();
    }

    pub(crate) fn forward_1h(&mut self, i: usize) {
        let t = Instant::now();
        self.c.set_clock(i, "+1h");
        let admin = self.c.node(i).admin.unwrap();
        let mut seen = None;
        while t.elapsed() < Duration::from_secs(15) {
            let (s, b) = http(admin, "GET", "/health/ready", None);
            if s == 503 && (b.contains("clock differs") || b.contains("drift")) {
                seen = Some((t.elapsed(), b));
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (after, body) = seen.unwrap_or_else(|| {
            panic!(
                "seed {}: no drift alarm on /health/ready within 15 s of a +1 h step",
                self.seed
            )
        });
        std::thread::sleep(Duration::from_secs(1));
        // And back. The lease end moved at most one TTL per renewal beyond the time that
        // really passed (the monotonic clock), not an hour: the node serves again within
        // seconds instead of failing closed for the hour it jumped.
        self.c.set_clock(i, "+0");
        let back = Instant::now();
        let p = self.c.node(i);
        let recovered = loop {
            let ok = connect(p.addr)
                .and_then(|(mut c, _)| c.try_get_ids(1))
                .is_ok_and(|a| a.is_ok());
            if ok {
                break back.elapsed();
            }
            assert!(
                back.elapsed() < Duration::from_secs(15),
                "seed {}: node {i} not serving 15 s after its clock came back from +1 h (the range was burned)",
                self.seed
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        self.fault(
            "clock forward 1 h, then back",
            vec![i],
            t,
            vec![
                format!("drift alarm after {} ms: {}", ms(after), body.trim()),
                format!(
                    "serving again {} ms after the clock came back",
                    ms(recovered)
                ),
            ],
        );
    }

    pub(crate) fn etcd_member(&mut self) {
        let m = self.rng.below(3) as usize;
        let t = Instant::now();
        self.c.store.etcd().kill(m);
        std::thread::sleep(Duration::from_secs(3));
        self.fault(
            &format!("etcd member m{m} killed for 3 s"),
            vec![],
            t,
            vec![],
        );
        self.c.store.etcd().restart(m);
        self.last_store_back = Instant::now();
        self.settle();
    }

    /// Stops the whole store and returns `(stopped, stopped at in Unix ms)`: the start of an
    /// [`Outage`].
    fn stop_store(&mut self) -> (Instant, u64) {
        self.c.store.stop();
        (Instant::now(), unix_ms())
    }

    /// Starts the whole store again, records the outage since `down`, and returns when it
    /// serves again.
    fn start_store(&mut self, name: &str, (down, down_unix): (Instant, u64)) -> Instant {
        let restarting = Instant::now();
        self.c.store.start_again();
        let back = Instant::now();
        if self.c.store.return_extends_expiring_keys() {
            self.last_store_back = back;
        }
        self.outages.push(Outage {
            name: name.into(),
            down,
            restarting,
            bound_unix_ms: down_unix + ms(TTL),
        });
        back
    }

    /// Waits until every main node serves again after the store's return, and is ready (its
    /// lease renewed since: a node still serving on the lease it held before the outage would
    /// run into its ceiling during the next fault, which would be blamed for it), and notes
    /// how long each took.
    fn note_serving_again(&mut self, back: Instant) {
        let r = self.c.wait_serving(Duration::from_secs(20));
        r.unwrap_or_else(|e| panic!("seed {}: {e}", self.seed));
        let serving = back.elapsed();
        let r = self.c.wait_ready(Duration::from_secs(20));
        r.unwrap_or_else(|e| panic!("seed {}: {e}", self.seed));
        let ready = back.elapsed();
        if let Some(f) = self.faults.last_mut() {
            f.notes.push(format!(
                "all nodes serving {} ms and ready {} ms after the store came back",
                ms(serving),
                ms(ready)
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    /// The whole store stopped past the TTL, then started: every node must fail closed and,
    /// once the store is back, serve again on its own.
    pub(crate) fn store_down(&mut self) {
        let name = format!("{} stopped past the TTL", self.c.store.name());
        let t = Instant::now();
        let down = self.stop_store();
        // Past the TTL: every node must run into its ceiling.
        std::thread::sleep(TTL + Duration::from_millis(2000));
        let back = self.start_store(&name, down);
        self.fault(
            &name,
            vec![],
            t,
            vec![format!(
                "stopped in {} ms, serving again {} ms after the injection",
                ms(down.0 - t),
                ms(back - t)
            )],
        );
        self.expect(Expect::FailClosed {
            within: TTL + Duration::from_millis(1500),
            status: "UNAVAILABLE_LEASE",
            recover_within: RECOVER_WITHIN,
        });
        self.note_serving_again(back);
    }

    /// The whole store restarted under load: stopped, held down for up to a second (picked by
    /// the seed), started again. Shorter than the TTL, so nodes may ride it out; whatever they
    /// answer, nothing beyond their ceilings while it is down, and all serve afterwards.
    pub(crate) fn store_restart(&mut self) {
        let name = format!("{} restarted", self.c.store.name());
        let hold = Duration::from_millis(self.rng.below(1000));
        let t = Instant::now();
        let down = self.stop_store();
        std::thread::sleep(hold);
        let back = self.start_store(&name, down);
        self.fault(
            &name,
            vec![],
            t,
            vec![format!(
                "stopped in {} ms, held down {} ms, serving again {} ms after it stopped",
                ms(down.0 - t),
                ms(hold),
                ms(back - down.0)
            )],
        );
        self.note_serving_again(back);
    }

    /// SIGSTOP node `i` past its TTL while successors take the worker space (its range too),
    /// then SIGCONT: it must not issue at or beyond its old ceiling.
    pub(crate) fn stop_cont(&mut self, i: usize) {
        self.wait_space_settled();
        let old = lease_range(self.c.node(i)).unwrap_or((0, 0));
        let epoch = connect(self.c.node(i).addr)
            .map(|(_, h)| h.epoch_ms)
            .unwrap_or(0);
        let t = Instant::now();
        self.c.node(i).signal("STOP");
        let stop_unix = unix_ms();
        // Its ceiling is at most (its last renewal ≤ now) + TTL; its clock offset is +0.
        let bound_ms = stop_unix - epoch + ms(TTL);
        // Successor 1 takes the free worker IDs; successor 2 must wait for the paused node's
        // lease to expire and pass the safety period, and takes its range.
        let s1 = self.c.start_node(3, &[]);
        std::thread::sleep(TTL + Duration::from_millis(300));
        let s2 = self.c.start_node(4, &[]);
        let mut notes = vec![
            format!(
                "successor 1: {}",
                if s1.is_ok() { "started" } else { "refused" }
            ),
            format!(
                "successor 2: {}",
                match &s2 {
                    Ok(()) => "started".to_string(),
                    Err(e) => format!("refused: {}", e.lines().last().unwrap_or("")),
                }
            ),
        ];
        let mut taken = false;
        for s in [3, 4] {
            if let Some((f, n)) = self.c.nodes[s].as_ref().and_then(lease_range) {
                if f < old.0 + old.1 && old.0 < f + n {
                    taken = true;
                }
                notes.push(format!("successor n{s} holds workers {f}..{}", f + n));
            }
        }
        std::thread::sleep(Duration::from_millis(500));
        self.c.node(i).signal("CONT");
        let cont = Instant::now();
        // Let the woken node try (and fail) to serve for a while.
        std::thread::sleep(Duration::from_millis(2000));
        let released = Instant::now();
        self.c.term(3);
        self.c.term(4);
        notes.insert(
            0,
            format!(
                "stopped {} ms; old range {}..{}; bound ts < {bound_ms}; range taken by a successor: {taken}",
                ms(cont - t),
                old.0,
                old.0 + old.1
            ),
        );
        self.stop_checks.push(StopCheck {
            node: i,
            cont,
            released,
            bound_ms,
            old_range: old,
            taken_by_successor: taken,
        });
        self.fault("SIGSTOP past the TTL, then SIGCONT", vec![i], t, notes);
        self.settle();
    }

    pub(crate) fn exhaustion(&mut self) {
        self.wait_space_settled();
        let t = Instant::now();
        let r = self.c.try_start_node(5, &["--shards", "3"]);
        let took = t.elapsed();
        let msg = match r {
            Ok(_) => panic!(
                "seed {}: a node asking for 3 worker IDs with 2 free started",
                self.seed
            ),
            Err(e) => e,
        };
        assert!(
            msg.contains("no free range"),
            "seed {}: refusal without the clear message: {msg}",
            self.seed
        );
        assert!(
            took < Duration::from_secs(5),
            "seed {}: refusal took {took:?}: {msg}",
            self.seed
        );
        let line = msg
            .lines()
            .find(|l| l.contains("no free range"))
            .unwrap_or("")
            .trim()
            .to_string();
        self.fault(
            "worker-ID exhaustion (a 4th node asking for 3 of 8 worker IDs)",
            vec![5],
            t,
            vec![format!("refused in {} ms: {line}", ms(took))],
        );
    }
}
