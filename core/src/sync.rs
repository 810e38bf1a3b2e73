//! The kernel's own view of whether the clock is synchronised (`adjtimex(2)`, read-only: a
//! call with no modes set changes nothing and needs no privilege). Beside the peers' clocks
//! (`crate::drift`), this is the node's view of trusted time: NTP (chrony, ntpd,
//! systemd-timesyncd) tells the kernel when it disciplines the clock, and the kernel keeps an
//! error bound that grows while nobody does.
//!
//! Uniqueness never rests on it (the leases fence every timestamp); it tells an operator that a
//! node's timestamps, and so the order of IDs across nodes, may be off by more than the peers'
//! comparison shows (all nodes can drift together).

use std::time::Duration;

/// One reading of the kernel's synchronisation state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSync {
    /// False when the kernel says the clock is not synchronised: the `STA_UNSYNC` status bit,
    /// or the clock state `TIME_ERROR`.
    pub synchronized: bool,
    /// The kernel's bound on the clock's error (`maxerror`), in microseconds: set by the
    /// synchronisation daemon, growing by 500 ppm while nobody updates it.
    pub max_error_us: u64,
    /// The estimated error (`esterror`), in microseconds.
    pub est_error_us: u64,
}

impl KernelSync {
    /// Reads the kernel's state now. Linux only; elsewhere an `Unsupported` error.
    pub fn read() -> std::io::Result<KernelSync> {
        read_adjtimex()
    }

    /// Why this reading does not count as synchronised within `max_error`, if it does not:
    /// the kernel's flag, or an error bound above `max_error`.
    pub fn problem(&self, max_error: Duration) -> Option<String> {
        let bound = Duration::from_micros(self.max_error_us);
        if !self.synchronized {
            Some(format!(
                "the kernel says the clock is not synchronised (adjtimex: unsynchronised, maximum error {} ms): is an NTP client (chrony, ntpd, systemd-timesyncd) running?",
                bound.as_millis()
            ))
        } else if bound > max_error {
            Some(format!(
                "the kernel's bound on the clock's error is {} ms, above {} ms",
                bound.as_millis(),
                max_error.as_millis()
            ))
        } else {
            None
        }
    }
}

#[cfg(target_os = "linux")]
fn read_adjtimex() -> std::io::Result<KernelSync> {
    // SAFETY: `timex` is plain old data, zeroed is a valid value (modes = 0: read only), and
    // adjtimex writes only into the struct it is given.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, exclusively borrowed timex.
    let state = unsafe { libc::adjtimex(&mut tx) };
    if state < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(KernelSync {
        synchronized: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        max_error_us: u64::try_from(tx.maxerror).unwrap_or(0),
        est_error_us: u64::try_from(tx.esterror).unwrap_or(0),
    })
}

#[cfg(not(target_os = "linux"))]
fn read_adjtimex() -> std::io::Result<KernelSync> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "the kernel's clock synchronisation state is read on Linux only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_judged_by_the_flag_then_the_bound() {
        let synced = KernelSync {
            synchronized: true,
            max_error_us: 40_000,
            est_error_us: 1_000,
        };
        assert_eq!(synced.problem(Duration::from_secs(1)), None);
        let loose = synced.problem(Duration::from_millis(10)).unwrap();
        assert!(loose.contains("40 ms, above 10 ms"), "{loose}");
        let unsynced = KernelSync {
            synchronized: false,
            ..synced
        };
        let why = unsynced.problem(Duration::from_secs(1)).unwrap();
        assert!(why.contains("not synchronised"), "{why}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_answers_a_read_only_call() {
        // Whatever the machine's state, the call works unprivileged and the bound is a bound.
        let r = KernelSync::read().unwrap();
        assert!(r.max_error_us >= r.est_error_us || !r.synchronized, "{r:?}");
    }
}
