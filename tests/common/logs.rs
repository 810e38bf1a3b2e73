//! A node run with its stdout and stderr in files, for the tests of what lands there: colour,
//! JSON lines, journald's level prefixes.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use idgen_testkit::node::idgen_binary;

/// What a node wrote, start to stop.
pub struct Written {
    pub stdout: String,
    pub stderr: String,
    pub status: ExitStatus,
}

/// Runs `idgen serve` (memory store, one shard, loopback ports, HTTP off) with `args` and `env`,
/// stderr into the file `stderr` (created by the caller, so a test can name its inode), until it
/// has started (its `node_started` event is in the log), then stops it with SIGTERM.
pub fn serve_to_files(args: &[&str], env: &[(&str, &str)], stderr: &Path) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdout");
    let mut cmd = Command::new(idgen_binary());
    cmd.args([
        "serve",
        "--store",
        "memory",
        "--shards",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--http-listen",
        "off",
    ])
    .args(args)
    .env_remove("IDGEN_LOG")
    .env_remove("JOURNAL_STREAM")
    .env("RUST_LOG", "info")
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(&out).unwrap())
    .stderr(
        std::fs::OpenOptions::new()
            .append(true)
            .open(stderr)
            .unwrap(),
    );
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(stderr)
        .unwrap_or_default()
        .contains("node_started")
    {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "idgen exited with {status}: {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "idgen did not start in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the banner (text mode) be written, then stop this node only.
    std::thread::sleep(Duration::from_millis(200));
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("idgen did not stop within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Written {
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(stderr).unwrap(),
        status,
    }
}
