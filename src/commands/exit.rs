//! The exit statuses of `idgen`, stated once: `idgen --help` shows [`TABLE`], the man page
//! has it as its EXIT STATUS section, and docs/OPERATIONS.md repeats it (checked by a test).

use std::process::ExitCode;

/// Success.
pub const OK: u8 = 0;
/// Runtime failure: the work could not be done, though every input was well-formed.
pub const FAILURE: u8 = 1;
/// Usage or configuration error: restarting or retrying cannot help.
pub const USAGE: u8 = 2;

/// The table, as `idgen --help` ends.
pub const TABLE: &str = "\
Exit status:
  0  Success. serve: stopped on SIGTERM or SIGINT, drained, its lease released;
     health: the node is live (ready, with --ready).
  1  Runtime failure: the store or a node cannot be reached or refuses (TLS,
     authentication, permission); serve cannot take a lease, bind a listener or
     shut down cleanly; inspect finds no cluster in the namespace; seq: the
     store refuses the change (a name that exists or is unknown, a value below
     one handed out); health: the node is not live (not ready) or gives no
     answer within --timeout; the output cannot be written (a reader that
     closes the pipe early, like `| head`, is no failure: status 0).
  2  Usage or configuration error: an unknown flag or a bad value; an invalid
     configuration file or setting (also with serve --check-config); a store
     this build cannot open (etcd:// without the etcd feature); a TLS, CA
     or password file that cannot be read; a bad --log-level, IDGEN_LOG or
     RUST_LOG; an ID that decode cannot read; needs that layout cannot fit;
     a sequence name or definition that seq refuses.
     Retrying cannot help: the systemd unit does not restart on it.
  Any other status is a crash: killed by a signal (a shell shows 128 + its
  number; SIGABRT, 134, after an internal error, which is a bug).";

/// Why an operator command failed; its exit status follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A bad flag value, setting or file: [`USAGE`].
    Usage(String),
    /// Well-formed, but it could not be done (a store or node unreachable or refusing):
    /// [`FAILURE`].
    Runtime(String),
}

impl Failure {
    /// The exit status.
    pub fn code(&self) -> u8 {
        match self {
            Failure::Usage(_) => USAGE,
            Failure::Runtime(_) => FAILURE,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            Failure::Usage(m) | Failure::Runtime(m) => m,
        }
    }

    /// Prints `idgen COMMAND: message` on stderr and returns the exit status.
    pub fn report(&self, command: &str) -> ExitCode {
        eprintln!("idgen {command}: {}", self.message());
        ExitCode::from(self.code())
    }
}

impl From<crate::config::ConfigError> for Failure {
    fn from(e: crate::config::ConfigError) -> Self {
        Failure::Usage(e.0)
    }
}

/// Writes `bytes` to stdout ([`written`] judges the outcome).
pub fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    written(out.write_all(bytes).and_then(|()| out.flush()))
}

/// The outcome of writing a command's output. A reader that stopped reading (a closed pipe:
/// `idgen get -n 100000 | head`) wanted no more: success, quietly, as `seq 100000 | head`
/// does (Rust ignores SIGPIPE, so the write sees EPIPE). Any other failure (a full disk) is a
/// runtime failure, never a panic.
pub fn written(result: std::io::Result<()>) -> Result<(), Failure> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::Runtime(format!("cannot write the output: {e}")))
        }
        _ => Ok(()),
    }
}
