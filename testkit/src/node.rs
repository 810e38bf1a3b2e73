//! A real `idgen serve` process for integration tests, and plain HTTP/1.1 requests to its
//! admin API.
//!
//! The node runs the `idgen` binary Cargo built next to the test (see [`idgen_binary`]),
//! listening on 127.0.0.1:0; the address comes from the `listening on …` line it prints (in
//! JSON log mode, where stdout stays empty, from its `node_started` event). Its
//! stderr (the logs) goes to a file whose tail is shown when a test fails. Drop kills the
//! process (only the one it started).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `node_started` event of a node logging JSON, once it is in the log (`<N>`-prefixed
/// under journald).
fn node_started(log: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter(|l| l.contains("\"event\":\"node_started\""))
        .find_map(|l| serde_json::from_str(&l[l.find('{')?..]).ok())
}

/// The `idgen` binary: `IDGEN_BIN` if set, else the one Cargo built into the target directory
/// of the running test (`target/<profile>/idgen`, next to the test's `deps/`). Cargo builds it
/// for every integration test of the `idgen` package.
pub fn idgen_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("IDGEN_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("the test's directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join(format!("idgen{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: build it (`cargo build --bin idgen`, done by `cargo test -p idgen`) or \
         set IDGEN_BIN",
        bin.display()
    );
    bin
}

pub struct NodeProc {
    child: Child,
    /// The ID protocol's address: the plaintext one, or the TLS one on a node without it.
    pub addr: SocketAddr,
    /// The ID protocol's TLS address, when the node runs it (`--tls-listen 127.0.0.1:0`).
    pub tls: Option<SocketAddr>,
    /// The admin HTTP address, when the node runs one (`--admin-listen 127.0.0.1:0`).
    pub admin: Option<SocketAddr>,
    /// The HTTP ID API's address, when the node runs it (`--http-listen 127.0.0.1:0`).
    pub http: Option<SocketAddr>,
    pub stdout: Vec<String>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Arguments every test node gets unless it overrides them.
pub const BASE_ARGS: &[&str] = &[
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "off",
    "--http-listen",
    "off",
];

impl NodeProc {
    /// Starts a node; panics with its log if it does not come up.
    pub fn start(args: &[&str]) -> NodeProc {
        Self::try_start(args, &[]).unwrap_or_else(|e| panic!("idgen did not start: {e}"))
    }

    /// Starts a node with extra environment; `Err` carries its exit status and log.
    pub fn try_start(args: &[&str], env: &[(&str, &str)]) -> Result<NodeProc, String> {
        Self::try_start_in(None, args, env)
    }

    /// Starts a node whose embedded store lives in `data_dir` (so a restart finds it again);
    /// `None`: a fresh temporary directory.
    pub fn try_start_in(
        data_dir: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<NodeProc, String> {
        Self::try_start_as(None, data_dir, args, env)
    }

    /// As [`try_start_in`](Self::try_start_in), as user (and group) `uid` when set (root only):
    /// packet filters can then tell the node's traffic apart, for partition tests.
    pub fn try_start_as(
        uid: Option<u32>,
        data_dir: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<NodeProc, String> {
        Self::try_start_binary(&idgen_binary(), uid, data_dir, args, env)
    }

    /// As [`try_start_as`](Self::try_start_as), running the `idgen` binary at `bin` (another
    /// release's, for mixed-version tests).
    pub fn try_start_binary(
        bin: &Path,
        uid: Option<u32>,
        data_dir: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<NodeProc, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("idgen.log");
        let data = data_dir.map_or_else(|| dir.path().join("data"), Path::to_path_buf);
        let mut cmd = Command::new(bin);
        cmd.arg("serve");
        // Base flags the caller does not set itself.
        for pair in BASE_ARGS.chunks(2) {
            if !args.contains(&pair[0]) {
                cmd.args(pair);
            }
        }
        cmd.arg("--data-dir")
            .arg(data)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(uid) = uid {
            use std::os::unix::process::CommandExt;
            let data = data_dir.map_or_else(|| dir.path().join("data"), Path::to_path_buf);
            std::fs::create_dir_all(&data).expect("data dir");
            std::os::unix::fs::chown(&data, Some(uid), Some(uid)).expect("chown (root?)");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
            cmd.uid(uid).gid(uid).current_dir(&data);
        }
        let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut lines = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    if line.starts_with("listening on ")
                        || line.starts_with("listening with TLS on ")
                    {
                        lines.push(line);
                        // Keep reading the rest of the banner without blocking.
                        while let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
                            lines.push(l);
                        }
                        let after = |prefixes: &[&str]| {
                            lines.iter().find_map(|l| {
                                prefixes
                                    .iter()
                                    .find_map(|p| l.strip_prefix(p))
                                    .and_then(|a| a.trim().parse::<SocketAddr>().ok())
                            })
                        };
                        let tls = after(&["listening with TLS on "]);
                        let addr = after(&["listening on "]).or(tls).expect("address");
                        let admin = after(&["admin on http://", "admin on https://"]);
                        let http = after(&["HTTP ID API on http://", "HTTP ID API on https://"]);
                        return Ok(NodeProc {
                            child,
                            addr,
                            tls,
                            admin,
                            http,
                            stdout: lines,
                            log,
                            _dir: dir,
                        });
                    }
                    lines.push(line);
                }
                Err(_) => {
                    // JSON logs: no banner; the addresses are in the node_started event.
                    if let Some(started) = node_started(&log) {
                        let addr = |key: &str| started[key].as_str()?.parse::<SocketAddr>().ok();
                        let tls = addr("tls_listen");
                        return Ok(NodeProc {
                            child,
                            addr: addr("listen").or(tls).expect("address"),
                            tls,
                            admin: addr("admin_listen"),
                            http: addr("http_listen"),
                            stdout: lines,
                            log,
                            _dir: dir,
                        });
                    }
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!(
                            "exited with {status}; stdout {lines:?}; log:\n{}",
                            tail(&log)
                        ));
                    }
                    if Instant::now() > deadline {
                        let _ = child.kill();
                        return Err(format!(
                            "no `listening on` line in 30 s; log:\n{}",
                            tail(&log)
                        ));
                    }
                }
            }
        }
    }

    /// At least `n` IDs from the node, in requests of 500 on one connection; panics on an
    /// error answer.
    pub fn take_ids(&self, n: usize) -> Vec<u64> {
        let mut c = crate::conn::TestConn::open(self.addr);
        let mut ids = Vec::new();
        while ids.len() < n {
            ids.extend(c.get_ids(500).expect("IDs"));
        }
        ids
    }

    /// Resident memory of the process, KiB (from /proc).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Sends a signal by name (`TERM`, `KILL`, `STOP`, `CONT`, `INT`) to this node only.
    pub fn signal(&self, sig: &str) {
        let signo = match sig {
            "TERM" => libc::SIGTERM,
            "KILL" => libc::SIGKILL,
            "STOP" => libc::SIGSTOP,
            "CONT" => libc::SIGCONT,
            "INT" => libc::SIGINT,
            other => panic!("no signal {other:?}"),
        };
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) with our own child's pid and a valid signal number.
        let rc = unsafe { libc::kill(pid, signo) };
        assert_eq!(
            rc,
            0,
            "kill -{sig} {pid}: {}",
            std::io::Error::last_os_error()
        );
    }

    /// SIGTERM and wait (bounded) for the exit status.
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        self.signal("TERM");
        self.wait(within)
    }

    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "idgen did not exit within {within:?}; log:\n{}",
                    tail(&self.log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A plain HTTP/1.1 request (the admin API); returns (status, body).
pub fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    try_http(addr, method, path, body, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

/// Runs `idgen ARGS…` (an operator command: `store upgrade`, `layout schedule`, `inspect`…);
/// returns its exit code, stdout and stderr.
pub fn idgen(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(idgen_binary())
        .args(args)
        .output()
        .expect("run idgen");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `idgen seq ARGS…` (`create NAME --mode strict --store URL`, `create NAME --data-dir
/// DIR`, …) against the store it names, before or beside the nodes; panics with its stderr if
/// it fails. What the tests of named sequences create them with.
pub fn seq(args: &[&str]) {
    let out = Command::new(idgen_binary())
        .arg("seq")
        .args(args)
        .output()
        .expect("run idgen seq");
    assert!(
        out.status.success(),
        "idgen seq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One HTTP/1.1 request; `Err` on a refused connection, a timeout or a garbled answer.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    request_on(&mut s, addr, method, path, body)
}

/// One HTTPS request (HTTP/1.1 over TLS, verifying the server as `server_name` under
/// `config`); `Err` on a refused connection, a TLS failure, a timeout or a garbled answer.
pub fn try_https(
    addr: SocketAddr,
    config: std::sync::Arc<rustls::ClientConfig>,
    server_name: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(server_name.to_owned())
        .map_err(|e| format!("server name: {e}"))?;
    let tls = rustls::ClientConnection::new(config, name).map_err(|e| format!("TLS: {e}"))?;
    let mut stream = rustls::StreamOwned::new(tls, s);
    request_on(&mut stream, addr, method, path, body)
}

fn request_on<S: Read + Write>(
    s: &mut S,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), String> {
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    s.flush().map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        // TLS: a close without close_notify after a whole answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").ok_or("no HTTP head")?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status code")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
