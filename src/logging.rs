//! The log subscriber of every `idgen` command: where its lines go and what they look like.
//!
//! Logs go to stderr; stdout is a command's output (`serve` prints its addresses there in text
//! mode, and nothing in JSON mode: `node_started` carries them).
//!
//! | stderr is | text lines | JSON lines |
//! |---|---|---|
//! | a terminal | time, level, target, fields; ANSI colour (unless `NO_COLOR` is set) | one object per line |
//! | a file, a pipe, a container runtime | the same, without colour | the same |
//! | journald (`JOURNAL_STREAM` names stderr: systemd started us) | `<N>` syslog level prefix, no time (journald stamps each line), no colour | `<N>` prefix, then the object |
//!
//! The `<N>` prefix is what systemd's `SyslogLevelPrefix=` (on by default) reads: journald
//! strips it and files the line at that priority, so `journalctl -u idgen -p warning` shows
//! the warnings and errors. That needs no journald socket and no extra crate (which the unit's
//! sandbox would have to allow), and the line stays readable text.
//!
//! A JSON line's fields are typed: numbers are numbers, addresses and errors are their
//! `Display` text, and an absent option is left out (no Rust `Debug` text).

use std::io::IsTerminal;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{ConfigError, LogFormat, LogSection};

/// Whether stderr is the journal stream systemd connected us to: `JOURNAL_STREAM` is
/// `device:inode` of that stream, and is checked against stderr itself, since a child whose
/// stderr was redirected (`idgen … 2>file` from a unit's shell) inherits the variable.
pub fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// Whether text logs on stderr get ANSI colour: only on a terminal, and not with `NO_COLOR`
/// set (<https://no-color.org>).
pub fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The syslog priority of a level, as `SyslogLevelPrefix=` reads it (`<3>` error … `<7>`
/// debug).
pub fn syslog_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// A line for stderr outside the subscriber (a configuration error before it starts): with the
/// `<3>` prefix under journald, as an error.
pub fn error_line(message: &str) -> String {
    if stderr_is_journal() {
        format!("<3>{message}")
    } else {
        message.to_string()
    }
}

/// Puts the `<N>` syslog priority in front of each event `F` formats (under journald).
struct SyslogPrefix<F>(F);

impl<S, N, F> FormatEvent<S, N> for SyslogPrefix<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", syslog_priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// Installs the log subscriber (stderr) of the `[log]` section; a bad level (also in
/// `RUST_LOG`) is a configuration error.
pub fn init(log: &LogSection) -> Result<(), ConfigError> {
    let filter = log.filter()?;
    let journal = stderr_is_journal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(!journal && log.log_format == LogFormat::Text && colour());
    match (log.log_format, journal) {
        (LogFormat::Json, false) => builder.json().flatten_event(true).init(),
        (LogFormat::Json, true) => {
            let json = tracing_subscriber::fmt::format().json().flatten_event(true);
            builder
                .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                .event_format(SyslogPrefix(json))
                .init();
        }
        (LogFormat::Text, false) => builder.init(),
        (LogFormat::Text, true) => {
            let text = tracing_subscriber::fmt::format().without_time();
            builder.event_format(SyslogPrefix(text)).init();
        }
    }
    Ok(())
}
