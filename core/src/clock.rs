//! Clocks: the wall clock that goes into IDs, and the monotonic clock that bounds waits.
//!
//! The generator is generic over [`Clock`] so tests can step time forward and back, freeze it,
//! or let it run, deterministically. [`SystemClock`] is the real one; [`TestClock`] is the
//! controllable one (cheap to clone: clones share one time).
//!
//! The wall clock decides the timestamp of an ID. The monotonic clock never decides an ID: it
//! measures how long the generator has been waiting, so a wall clock that is stuck or keeps
//! running backwards turns into an "unavailable" error after a bounded wait instead of a hang.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall and monotonic time, and a way to wait.
pub trait Clock {
    /// Wall-clock milliseconds since the Unix epoch (0 if the clock reads before 1970).
    fn wall_ms(&self) -> u64;
    /// Monotonic nanoseconds since an arbitrary origin; never goes backwards.
    fn mono_ns(&self) -> u64;
    /// Waits about `d`. Short waits (under a millisecond) should not give up the CPU for long:
    /// the generator uses them to wait for the next millisecond.
    fn sleep(&self, d: Duration);
}

/// The operating system's clocks: `CLOCK_REALTIME` for the wall, `CLOCK_MONOTONIC` (through
/// [`Instant`]) for waits.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn wall_ms(&self) -> u64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() * 1000 + u64::from(d.subsec_millis()),
            Err(_) => 0,
        }
    }

    #[inline]
    fn mono_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn sleep(&self, d: Duration) {
        if d >= Duration::from_millis(1) {
            std::thread::sleep(d);
        } else {
            // Under a millisecond the scheduler's granularity costs more than it saves: spin.
            let until = Instant::now() + d;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }
}

#[derive(Debug)]
struct TestTime {
    wall_ns: AtomicU64,
    mono_ns: AtomicU64,
    frozen: AtomicBool,
    tick_ns: AtomicU64,
}

/// A clock under a test's control. Clones share the same time.
///
/// - [`advance`](TestClock::advance) moves both clocks forward (time passes);
/// - [`step_wall`](TestClock::step_wall) moves only the wall clock, forward or back (an NTP step);
/// - [`freeze`](TestClock::freeze) stops the wall clock: sleeping still advances the monotonic
///   clock (a stuck wall clock), so a generator waiting on it gives up after its bounded wait;
/// - [`set_tick`](TestClock::set_tick) makes every wall-clock read advance time a little, like a
///   real clock that moves while the generator works.
///
/// While not frozen, [`Clock::sleep`] advances both clocks by the requested time.
#[derive(Clone, Debug)]
pub struct TestClock {
    t: Arc<TestTime>,
}

impl TestClock {
    /// A running clock that reads `wall_ms` now.
    pub fn new(wall_ms: u64) -> Self {
        TestClock {
            t: Arc::new(TestTime {
                wall_ns: AtomicU64::new(wall_ms.saturating_mul(1_000_000)),
                mono_ns: AtomicU64::new(0),
                frozen: AtomicBool::new(false),
                tick_ns: AtomicU64::new(0),
            }),
        }
    }

    /// Time passes: both clocks move forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ns = duration_ns(d);
        self.t.mono_ns.fetch_add(ns, Ordering::SeqCst);
        self.t.wall_ns.fetch_add(ns, Ordering::SeqCst);
    }

    /// The wall clock alone is stepped by `delta_ms` (negative: backwards), as NTP or an
    /// operator might. The monotonic clock is untouched.
    pub fn step_wall(&self, delta_ms: i64) {
        let delta_ns = delta_ms.unsigned_abs().saturating_mul(1_000_000);
        let _ = self
            .t
            .wall_ns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                Some(if delta_ms >= 0 {
                    w.saturating_add(delta_ns)
                } else {
                    w.saturating_sub(delta_ns)
                })
            });
    }

    /// Sets the wall clock to `wall_ms` exactly.
    pub fn set_wall_ms(&self, wall_ms: u64) {
        self.t
            .wall_ns
            .store(wall_ms.saturating_mul(1_000_000), Ordering::SeqCst);
    }

    /// Stops the wall clock (sleeps still advance the monotonic clock).
    pub fn freeze(&self) {
        self.t.frozen.store(true, Ordering::SeqCst);
    }

    /// Lets the wall clock run again.
    pub fn unfreeze(&self) {
        self.t.frozen.store(false, Ordering::SeqCst);
    }

    /// Every wall-clock read advances both clocks by `d` (ignored while frozen).
    pub fn set_tick(&self, d: Duration) {
        self.t.tick_ns.store(duration_ns(d), Ordering::SeqCst);
    }

    /// The wall clock in nanoseconds since the Unix epoch (for tests that need sub-ms detail).
    pub fn wall_ns(&self) -> u64 {
        self.t.wall_ns.load(Ordering::SeqCst)
    }
}

/// `d` in nanoseconds, saturating.
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Clock for TestClock {
    fn wall_ms(&self) -> u64 {
        let tick = self.t.tick_ns.load(Ordering::Relaxed);
        let w = if tick > 0 && !self.t.frozen.load(Ordering::SeqCst) {
            self.t.mono_ns.fetch_add(tick, Ordering::SeqCst);
            self.t.wall_ns.fetch_add(tick, Ordering::SeqCst)
        } else {
            self.t.wall_ns.load(Ordering::SeqCst)
        };
        w / 1_000_000
    }

    fn mono_ns(&self) -> u64 {
        self.t.mono_ns.load(Ordering::SeqCst)
    }

    fn sleep(&self, d: Duration) {
        // A zero-length sleep still lets a little time pass, so no wait loop can spin forever.
        let ns = duration_ns(d).max(1_000);
        self.t.mono_ns.fetch_add(ns, Ordering::SeqCst);
        if !self.t.frozen.load(Ordering::SeqCst) {
            self.t.wall_ns.fetch_add(ns, Ordering::SeqCst);
        }
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn wall_ms(&self) -> u64 {
        (**self).wall_ms()
    }
    fn mono_ns(&self) -> u64 {
        (**self).mono_ns()
    }
    fn sleep(&self, d: Duration) {
        (**self).sleep(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_sane() {
        let c = SystemClock::new();
        let w = c.wall_ms();
        // After 2026-01-01 and before 2100.
        assert!(w > 1_767_225_600_000 && w < 4_102_444_800_000, "{w}");
        let m0 = c.mono_ns();
        c.sleep(Duration::from_micros(200));
        let m1 = c.mono_ns();
        assert!(m1 - m0 >= 200_000, "short sleep spun for {} ns", m1 - m0);
        c.sleep(Duration::from_millis(2));
        assert!(c.mono_ns() - m1 >= 2_000_000);
    }

    #[test]
    fn test_clock_steps_freezes_and_sleeps() {
        let c = TestClock::new(1_000);
        let shared = c.clone();
        assert_eq!(c.wall_ms(), 1_000);
        c.advance(Duration::from_millis(5));
        assert_eq!((shared.wall_ms(), shared.mono_ns()), (1_005, 5_000_000));
        c.step_wall(-10);
        assert_eq!((c.wall_ms(), c.mono_ns()), (995, 5_000_000));
        c.step_wall(3);
        assert_eq!(c.wall_ms(), 998);
        c.freeze();
        c.sleep(Duration::from_millis(4));
        assert_eq!((c.wall_ms(), c.mono_ns()), (998, 9_000_000));
        c.unfreeze();
        c.sleep(Duration::from_millis(2));
        assert_eq!((c.wall_ms(), c.mono_ns()), (1_000, 11_000_000));
        c.set_wall_ms(7);
        assert_eq!(c.wall_ms(), 7);
        c.step_wall(-100);
        assert_eq!(c.wall_ms(), 0, "saturates at the Unix epoch");
    }

    #[test]
    fn test_clock_tick_moves_time_on_read() {
        let c = TestClock::new(0);
        c.set_tick(Duration::from_micros(400));
        let reads: Vec<u64> = (0..6).map(|_| c.wall_ms()).collect();
        assert_eq!(reads, vec![0, 0, 0, 1, 1, 2]);
        c.freeze();
        assert_eq!(c.wall_ms(), c.wall_ms());
    }
}
