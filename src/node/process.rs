//! The process metrics (`process_*`, named as Prometheus' client libraries name them), read
//! from `/proc/self` when the metrics are scraped. Linux only: elsewhere [`read`] finds nothing
//! and the families are left out.

/// What `/proc/self` says about this process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time spent, seconds.
    pub cpu_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (`+Inf`: unlimited).
    pub max_fds: f64,
    /// Resident memory, bytes.
    pub resident_bytes: u64,
    /// Virtual memory, bytes.
    pub virtual_bytes: u64,
    /// When the process started, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Threads in the process.
    pub threads: u64,
}

/// The fields of `/proc/<pid>/stat` used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    /// utime + stime, clock ticks.
    cpu_ticks: u64,
    threads: u64,
    /// Since boot, clock ticks.
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

/// Parses `/proc/<pid>/stat`: the command name, in parentheses, may hold spaces and
/// parentheses itself, so the fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; fields are numbered from 1 in proc(5).
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The boot time (`btime`, seconds since the Unix epoch) from `/proc/stat`.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" from `/proc/<pid>/limits` (`+Inf` for unlimited).
fn parse_max_fds(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        return Some(f64::INFINITY);
    }
    soft.parse::<u64>().ok().map(|v| v as f64)
}

/// Combines the files' contents into the metrics, given the clock tick rate and page size.
fn combine(
    stat: &str,
    proc_stat: &str,
    limits: &str,
    open_fds: u64,
    ticks_per_second: u64,
    page_size: u64,
) -> Option<ProcessStats> {
    let s = parse_stat(stat)?;
    if ticks_per_second == 0 {
        return None;
    }
    let tps = ticks_per_second as f64;
    Some(ProcessStats {
        cpu_seconds: s.cpu_ticks as f64 / tps,
        open_fds,
        max_fds: parse_max_fds(limits)?,
        resident_bytes: s.resident_pages.saturating_mul(page_size),
        virtual_bytes: s.virtual_bytes,
        start_time_seconds: parse_boot_time(proc_stat)? as f64 + s.start_ticks as f64 / tps,
        threads: s.threads,
    })
}

/// This process's figures, read now (`None` where there is no `/proc`, or it cannot be read).
#[cfg(target_os = "linux")]
pub fn read() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let proc_stat = std::fs::read_to_string("/proc/stat").ok()?;
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    // The directory's own descriptor, open while it is listed, is not counted.
    let open_fds = (std::fs::read_dir("/proc/self/fd").ok()?.count() as u64).saturating_sub(1);
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    combine(
        &stat,
        &proc_stat,
        &limits,
        open_fds,
        u64::try_from(ticks).ok()?,
        u64::try_from(page).ok()?,
    )
}

/// This process's figures: none off Linux.
#[cfg(not(target_os = "linux"))]
pub fn read() -> Option<ProcessStats> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (idgen (a) b) S 1 4242 4242 0 -1 4194560 2017 0 0 0 \
        250 125 0 0 20 0 7 0 12345 1073741824 2560 18446744073709551615 1 1 0 0 0 0 0 \
        4096 0 0 0 0 17 1 0 0 0 0 0\n";
    const PROC_STAT: &str = "cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5\nbtime 1700000000\nprocesses 9\n";
    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max cpu time              unlimited            unlimited            seconds   \n\
        Max open files            20480                524288               files     \n";

    #[test]
    fn the_stat_fields_are_counted_from_the_last_parenthesis() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(
            s,
            Stat {
                cpu_ticks: 375,
                threads: 7,
                start_ticks: 12345,
                virtual_bytes: 1 << 30,
                resident_pages: 2560,
            }
        );
        assert_eq!(parse_stat("4242 (no closing"), None);
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
    }

    #[test]
    fn the_files_combine_into_the_process_metrics() {
        let p = combine(STAT, PROC_STAT, LIMITS, 12, 100, 4096).unwrap();
        assert!(
            (p.start_time_seconds - 1_700_000_123.45).abs() < 1e-6,
            "{p:?}"
        );
        assert_eq!(
            p,
            ProcessStats {
                cpu_seconds: 3.75,
                open_fds: 12,
                max_fds: 20480.0,
                resident_bytes: 2560 * 4096,
                virtual_bytes: 1 << 30,
                start_time_seconds: p.start_time_seconds,
                threads: 7,
            }
        );
        let unlimited = LIMITS.replace("20480 ", "unlimited ");
        assert_eq!(
            combine(STAT, PROC_STAT, &unlimited, 12, 100, 4096)
                .unwrap()
                .max_fds,
            f64::INFINITY
        );
        assert_eq!(combine(STAT, "cpu 1\n", LIMITS, 12, 100, 4096), None);
        assert_eq!(combine(STAT, PROC_STAT, "", 12, 100, 4096), None);
        assert_eq!(combine(STAT, PROC_STAT, LIMITS, 12, 0, 4096), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_itself() {
        let p = read().expect("/proc/self is readable on Linux");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            p.start_time_seconds <= now + 1.0 && p.start_time_seconds > now - 3600.0,
            "{p:?}"
        );
        let _open = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(read().unwrap().open_fds >= 1, "{p:?}");
        assert!(p.threads >= 1 && p.resident_bytes > 0 && p.virtual_bytes >= p.resident_bytes);
        assert!(p.max_fds >= p.open_fds as f64 && p.cpu_seconds >= 0.0);
    }
}
