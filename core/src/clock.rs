//! Clocks: the wall clock that goes into IDs, and the monotonic clock that bounds waits.
//!
//! The generator is generic over [`Clock`] so tests can step time forward and back, freeze it,
//! or let it run, deterministically. [`SystemClock`] is the real one; [`TestClock`] is the
//! controllable one (cheap to clone: clones share one time).
//!
//! The wall clock decides the timestamp of an ID. The monotonic clock never decides an ID: it
//! measures how long the generator has been waiting, so a wall clock that is stuck or keeps
//! running backwards turns into an "unavailable" error after a bounded wait instead of a hang.
//! The boot clock is the monotonic clock that also counts time suspended: the lease keeper
//! measures with it how much time really passed, so a resume from suspend is not taken for a
//! wall clock that jumped ahead (`crate::lease::keeper`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall and monotonic time, and a way to wait.
pub trait Clock {
    /// Wall-clock milliseconds since the Unix epoch (0 if the clock reads before 1970).
    fn wall_ms(&self) -> u64;
    /// Monotonic nanoseconds since an arbitrary origin; never goes backwards.
    fn mono_ns(&self) -> u64;
    /// Nanoseconds since an arbitrary origin, like [`mono_ns`](Clock::mono_ns) but counting the
    /// time the machine was suspended too (`CLOCK_BOOTTIME`); never goes backwards. The
    /// default is the monotonic clock, for clocks that cannot tell.
    #[inline]
    fn boot_ns(&self) -> u64 {
        self.mono_ns()
    }
    /// Waits about `d`. Short waits (under a millisecond) should not give up the CPU for long:
    /// the generator uses them to wait for the next millisecond.
    fn sleep(&self, d: Duration);
    /// Until [`release`](Clock::release), [`wall_ms`](Clock::wall_ms) may answer one reading
    /// (the first after this call) to every call: for a unit of work short enough that one
    /// reading serves it (a read's worth of requests). The default does nothing.
    #[inline]
    fn hold(&self) {}
    /// Ends a [`hold`](Clock::hold).
    #[inline]
    fn release(&self) {}
}

/// The operating system's clocks: `CLOCK_REALTIME` for the wall, `CLOCK_MONOTONIC` (through
/// [`Instant`]) for waits, `CLOCK_BOOTTIME` for the time that passed, suspend included (on
/// Linux; elsewhere the monotonic clock).
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

    #[cfg(target_os = "linux")]
    fn boot_ns(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only through it.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
            // Kernels before 2.6.39: no boot clock. Never the case on a supported system.
            return self.mono_ns();
        }
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(nanos)
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

/// The system clock, read at most about once per millisecond of work: between two reads of
/// `CLOCK_REALTIME`, the CPU's time-stamp counter (one instruction, no system call) says whether
/// the millisecond of the last reading can have ended. Until it can, [`Clock::wall_ms`] answers
/// that reading again.
///
/// Every value it answers is a genuine reading of the system clock, taken at most about a
/// millisecond earlier (or, while [held](Clock::hold), at the start of the unit of work). While
/// the clock only moves forward, that reading is never ahead of the clock. After the clock
/// steps back, a cached or held reading *is* ahead of it, by up to about a millisecond (or by
/// the step, for the one held reading) until the next read sees the step. The lease fences do
/// not depend on either: a reading is only ever a time the clock showed, the generator checks
/// every new millisecond against its floor, its ceiling and the last millisecond it used
/// whatever the clock says, and a clock that steps back is seen at the next read, then waited
/// out or refused as with [`SystemClock`]. The counter only decides *when* to read again; if
/// its rate were misjudged, a reading would be answered a little past the end of its
/// millisecond (IDs lag the clock by that much), or read again early (costing a read), never a
/// time the clock did not show.
///
/// The counter is used only where it is invariant (x86-64 with the invariant-TSC CPUID bit, and
/// the kernel's own clock source is `tsc`): elsewhere every call reads the clock. The rate is
/// measured once per process against the monotonic clock (about 2 ms, on first use).
///
/// [`Clock::hold`] makes it answer one reading for a whole unit of work (a read's worth of
/// requests), without even the counter read; [`Clock::release`] ends that.
#[derive(Clone, Debug)]
pub struct CachedClock {
    sys: SystemClock,
    /// Counter ticks per nanosecond, if the counter can gate reads.
    rate: Option<f64>,
    /// The last reading, ms since the Unix epoch.
    ms: std::cell::Cell<u64>,
    /// The counter value until which `ms` is still the clock's millisecond (0: read next time).
    until: std::cell::Cell<u64>,
    /// The counter value at the last reading (a counter below it means another CPU's counter:
    /// read again).
    at: std::cell::Cell<u64>,
    /// [`NOT_HELD`], [`HELD_UNREAD`] or [`HELD_READ`].
    held: std::cell::Cell<u8>,
}

const NOT_HELD: u8 = 0;
/// Held, and the reading to hold is the next one.
const HELD_UNREAD: u8 = 1;
/// Held: `ms` is the reading.
const HELD_READ: u8 = 2;

impl CachedClock {
    pub fn new() -> Self {
        CachedClock {
            sys: SystemClock::new(),
            rate: tsc::rate(),
            ms: std::cell::Cell::new(0),
            until: std::cell::Cell::new(0),
            at: std::cell::Cell::new(0),
            held: std::cell::Cell::new(NOT_HELD),
        }
    }

    /// A clock that reads the system clock on every call (what [`CachedClock::new`] falls back
    /// to without an invariant counter), for comparison.
    pub fn uncached() -> Self {
        CachedClock {
            rate: None,
            ..CachedClock::new()
        }
    }

    /// Whether the time-stamp counter gates the reads (else every call reads the clock).
    pub fn gated(&self) -> bool {
        self.rate.is_some()
    }

    /// Reads the system clock, and (gated) until when the reading holds.
    #[inline(never)]
    fn read(&self, now_tick: u64) -> u64 {
        let ns = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() * 1_000_000_000 + u64::from(d.subsec_nanos()),
            Err(_) => 0,
        };
        let ms = ns / 1_000_000;
        self.ms.set(ms);
        self.at.set(now_tick);
        if let Some(rate) = self.rate {
            // The counter ticks left in this millisecond, a little short of it (1/512), so
            // that a rate measured slightly high still reads again before the millisecond ends.
            let left_ns = (1_000_000 - ns % 1_000_000) as f64;
            let until = now_tick.saturating_add((left_ns * rate * (1.0 - 1.0 / 512.0)) as u64);
            self.until.set(until);
        }
        ms
    }
}

impl Default for CachedClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CachedClock {
    #[inline]
    fn wall_ms(&self) -> u64 {
        let held = self.held.get();
        if held == HELD_READ {
            return self.ms.get();
        }
        let ms = match self.rate {
            Some(_) => {
                let t = tsc::read();
                if t < self.until.get() && t >= self.at.get() {
                    self.ms.get()
                } else {
                    self.read(t)
                }
            }
            None => self.read(0),
        };
        if held == HELD_UNREAD {
            self.held.set(HELD_READ);
        }
        ms
    }

    #[inline]
    fn mono_ns(&self) -> u64 {
        self.sys.mono_ns()
    }

    fn boot_ns(&self) -> u64 {
        self.sys.boot_ns()
    }

    fn sleep(&self, d: Duration) {
        self.sys.sleep(d)
    }

    /// Every [`Clock::wall_ms`] answers the first reading after this call (taken through the
    /// counter gate as usual) until [`release`](Clock::release).
    #[inline]
    fn hold(&self) {
        self.held.set(HELD_UNREAD);
    }

    #[inline]
    fn release(&self) {
        self.held.set(NOT_HELD);
    }
}

/// The time-stamp counter: whether it can gate clock reads, and its rate.
mod tsc {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// Counter ticks per nanosecond, measured once per process; `None` where the counter is not
    /// invariant or the kernel does not keep time with it.
    pub(super) fn rate() -> Option<f64> {
        static RATE: OnceLock<Option<f64>> = OnceLock::new();
        *RATE.get_or_init(|| {
            if std::env::var_os("IDGEN_NO_TSC").is_some() || !invariant() {
                return None;
            }
            measure()
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(super) fn read() -> u64 {
        // SAFETY: RDTSC exists on every x86-64 CPU and has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    pub(super) fn read() -> u64 {
        0
    }

    #[cfg(target_arch = "x86_64")]
    fn invariant() -> bool {
        // CPUID 0x8000_0007, EDX bit 8: the counter runs at a constant rate in every P-, C- and
        // T-state (the "invariant TSC").
        let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
        if max < 0x8000_0007 {
            return false;
        }
        let invariant = core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0;
        // And the kernel keeps time with it (it demotes an unstable counter to another source).
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_default();
        invariant && source.trim() == "tsc"
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn invariant() -> bool {
        false
    }

    /// Counter ticks per nanosecond against the monotonic clock: two measurements over 2 ms
    /// each, from counter/clock pairs read back to back (the pair whose two counter reads are
    /// closest, of a few tries, so a preemption between them cannot skew it). `None` unless
    /// both agree within 0.1%: a counter that cannot be measured does not gate.
    fn measure() -> Option<f64> {
        let first = measure_once()?;
        let second = measure_once()?;
        ((first - second).abs() <= first * 1e-3).then_some((first + second) / 2.0)
    }

    fn measure_once() -> Option<f64> {
        let (t0, i0) = pair();
        while i0.elapsed() < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let (t1, i1) = pair();
        let ns = i1.duration_since(i0).as_nanos() as f64;
        let rate = t1.checked_sub(t0)? as f64 / ns;
        // A counter of 100 MHz to 20 GHz; anything else is not a counter to trust.
        (0.1..=20.0).contains(&rate).then_some(rate)
    }

    /// A counter value and the monotonic clock read between two counter reads, of the tightest
    /// of 16 tries: the counter value is the midpoint of the two.
    fn pair() -> (u64, Instant) {
        let once = || {
            let a = read();
            let i = Instant::now();
            let b = read();
            let width = b.wrapping_sub(a);
            (width, a.wrapping_add(width / 2), i)
        };
        let mut best = once();
        for _ in 1..16 {
            let p = once();
            if p.0 < best.0 {
                best = p;
            }
        }
        (best.1, best.2)
    }
}

#[derive(Debug)]
struct TestTime {
    wall_ns: AtomicU64,
    mono_ns: AtomicU64,
    /// Ahead of `mono_ns` by the time suspended.
    suspended_ns: AtomicU64,
    frozen: AtomicBool,
    tick_ns: AtomicU64,
}

/// A clock under a test's control. Clones share the same time.
///
/// - [`advance`](TestClock::advance) moves both clocks forward (time passes);
/// - [`step_wall`](TestClock::step_wall) moves only the wall clock, forward or back (an NTP step);
/// - [`suspend`](TestClock::suspend) moves the wall and boot clocks, not the monotonic one (the
///   machine slept);
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
                suspended_ns: AtomicU64::new(0),
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

    /// The machine is suspended for `d`: the wall clock and the boot clock move forward by `d`,
    /// the monotonic clock does not (`CLOCK_MONOTONIC` does not count suspend).
    pub fn suspend(&self, d: Duration) {
        let ns = duration_ns(d);
        self.t.suspended_ns.fetch_add(ns, Ordering::SeqCst);
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

    fn boot_ns(&self) -> u64 {
        let suspended = self.t.suspended_ns.load(Ordering::SeqCst);
        self.t
            .mono_ns
            .load(Ordering::SeqCst)
            .saturating_add(suspended)
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
    fn boot_ns(&self) -> u64 {
        (**self).boot_ns()
    }
    fn sleep(&self, d: Duration) {
        (**self).sleep(d)
    }
    fn hold(&self) {
        (**self).hold()
    }
    fn release(&self) {
        (**self).release()
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
        let (m0, b0) = (c.mono_ns(), c.boot_ns());
        c.sleep(Duration::from_micros(200));
        let m1 = c.mono_ns();
        assert!(m1 - m0 >= 200_000, "short sleep spun for {} ns", m1 - m0);
        c.sleep(Duration::from_millis(2));
        assert!(c.mono_ns() - m1 >= 2_000_000);
        // The boot clock runs with the monotonic one (no suspend here).
        let (m2, b2) = (c.mono_ns(), c.boot_ns());
        let drift = (b2 - b0).abs_diff(m2 - m0);
        assert!(
            drift < 1_000_000,
            "boot and monotonic clocks differ by {drift} ns"
        );
    }

    /// Every answer is a reading the system clock gave at most about a millisecond earlier:
    /// never ahead of a reading taken after it.
    fn cached_within(c: &CachedClock) {
        let sys = SystemClock::new();
        let start = sys.wall_ms();
        let give_up = Instant::now() + Duration::from_secs(10);
        // Until the wall clock has moved 30 ms, however few calls the scheduler lets in (a
        // loaded machine may let in three): every answer lies within the bounds below, so the
        // answers follow the clock over those 30 ms, and a cache that stopped following fails
        // the lower bound as soon as the clock is 3 ms past its reading.
        loop {
            let before = sys.wall_ms();
            let got = c.wall_ms();
            let after = sys.wall_ms();
            assert!(
                got <= after,
                "answered {got}, the clock read {after} after it"
            );
            // A millisecond of staleness, plus one for the counter's measured rate.
            assert!(
                got + 2 >= before,
                "answered {got}, the clock read {before} before it"
            );
            if before >= start + 30 {
                break;
            }
            assert!(
                Instant::now() < give_up,
                "the wall clock did not move 30 ms in 10 s"
            );
        }
    }

    #[test]
    fn cached_clock_answers_recent_readings_and_follows_the_clock() {
        cached_within(&CachedClock::new());
        cached_within(&CachedClock::uncached());
    }

    #[test]
    fn cached_clock_holds_one_reading_until_released() {
        for c in [CachedClock::new(), CachedClock::uncached()] {
            // An old reading is not what a hold answers: the first reading after it is.
            let _ = c.wall_ms();
            std::thread::sleep(Duration::from_millis(3));
            c.hold();
            let sys_before = SystemClock::new().wall_ms();
            let held = c.wall_ms();
            assert!(
                held + 2 >= sys_before,
                "held {held}, the clock read {sys_before}"
            );
            std::thread::sleep(Duration::from_millis(3));
            assert_eq!(c.wall_ms(), held, "a held reading stays");
            c.release();
            let next = c.wall_ms();
            assert!(next >= held + 2, "after the release {next}, held {held}");
        }
    }

    #[test]
    fn cached_clock_gates_where_the_counter_is_invariant() {
        // The gate is on exactly where the CPU says its counter is invariant (Linux shows it
        // as the nonstop_tsc flag) and the kernel keeps time with it.
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let nonstop = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|f| f == "nonstop_tsc"));
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_default();
        let expected = cfg!(target_arch = "x86_64")
            && nonstop
            && source.trim() == "tsc"
            && std::env::var_os("IDGEN_NO_TSC").is_none();
        assert_eq!(CachedClock::new().gated(), expected);
        assert!(!CachedClock::uncached().gated());
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
        assert_eq!(c.boot_ns(), c.mono_ns(), "never suspended");
        c.suspend(Duration::from_millis(50));
        assert_eq!((c.wall_ms(), c.mono_ns()), (1_050, 11_000_000));
        assert_eq!(c.boot_ns(), 61_000_000, "the boot clock counts the suspend");
        c.advance(Duration::from_millis(1));
        assert_eq!(c.boot_ns(), 62_000_000);
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
