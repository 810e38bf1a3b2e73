//! A real PostgreSQL server on loopback, for integration tests.
//!
//! Uses the server binaries of Debian's `postgresql` package (`/usr/lib/postgresql/<n>/bin`,
//! the newest there; `scripts/deps test` installs it), or the directory named by
//! `IDGEN_PG_BIN`. Missing binaries fail the test loudly: these tests never skip.
//!
//! The cluster is made by `initdb` in a temporary directory (as the `postgres` user when the
//! tests run as root, since PostgreSQL refuses to run as root), with one role, `idgen`, that
//! logs in with [`PASSWORD`] over `scram-sha-256`; the server listens on 127.0.0.1 only, at a
//! port found free, with its socket in the same directory. [`PgServer::stop`] and
//! [`PgServer::start_again`] take it down (a fast shutdown) and up; dropping it stops it.
//!
//! [`PgServer::start_tls`] serves TLS only (`hostssl`; plain TCP connections are rejected),
//! with a server certificate of a [`TestCa`] for `localhost`, 127.0.0.1 and ::1, and, when
//! asked, requires a client certificate of that authority whose common name is the role
//! (`clientcert=verify-full`) as well as the password.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::certs::TestCa;
use crate::etcd::tail;

/// How long the server may take to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// The `idgen` role's password.
pub const PASSWORD: &str = "idgen-test-password";

/// A running (or stopped) PostgreSQL server.
pub struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    /// The user (and group) the server runs as, when the tests run as root.
    owner: Option<(u32, u32)>,
    /// Settings passed with `-c` at every start (TLS; durability), after the defaults.
    settings: Vec<String>,
    /// Whether the server takes TLS only.
    tls: bool,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

/// The directory of PostgreSQL's server binaries, or a panic that says how to get them.
pub fn pg_bin_dir() -> PathBuf {
    if let Ok(p) = std::env::var("IDGEN_PG_BIN") {
        return PathBuf::from(p);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((major, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL's server binaries were not found (/usr/lib/postgresql/<n>/bin): these \
             tests need a real PostgreSQL. Install Debian's postgresql package (`apt-get \
             install postgresql`, as scripts/deps test does), or set IDGEN_PG_BIN to the \
             directory of initdb and postgres"
        ),
    }
}

/// The `postgres` user's uid and gid, read from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == "postgres")
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

impl PgServer {
    /// Makes a cluster and starts it; returns once it accepts connections.
    pub fn start() -> PgServer {
        Self::start_with(None, false)
    }

    /// As [`start`](Self::start), durable as a production server is: `fsync`,
    /// `synchronous_commit` and `full_page_writes` on (the test servers turn them off), so
    /// that a commit waits for the disk, for measurements beside etcd, which syncs its log.
    pub fn start_durable() -> PgServer {
        Self::start_with(None, true)
    }

    /// As [`start`](Self::start), serving TLS only, with a server certificate of `ca`; with
    /// `client_cert`, a client must also present a certificate of `ca` naming the role
    /// (`idgen`).
    pub fn start_tls(ca: &TestCa, client_cert: bool) -> PgServer {
        Self::start_with(Some((ca, client_cert)), false)
    }

    fn start_with(tls: Option<(&TestCa, bool)>, durable: bool) -> PgServer {
        let bin = pg_bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("idgen-pg-")
            .tempdir()
            .expect("temp dir");
        // SAFETY: geteuid has no preconditions.
        let owner = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user().expect(
                "running as root, and /etc/passwd has no postgres user to run PostgreSQL as \
                 (Debian's postgresql package makes it)",
            ))
        } else {
            None
        };
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        if let Some((uid, gid)) = owner {
            for p in [dir.path(), pwfile.as_path()] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown (root?)");
            }
        }
        let mut init = Command::new(bin.join("initdb"));
        init.arg("-D")
            .arg(&data)
            .args(["-U", "idgen", "--auth=scram-sha-256", "--no-sync"])
            .args(["--encoding=UTF8", "--locale=C"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .stdin(Stdio::null());
        if let Some((uid, gid)) = owner {
            init.uid(uid).gid(gid);
        }
        let out = init
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.join("initdb").display()));
        assert!(
            out.status.success(),
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut settings = Vec::new();
        if durable {
            for on in ["fsync=on", "synchronous_commit=on", "full_page_writes=on"] {
                settings.push(on.to_string());
            }
        }
        if let Some((ca, client_cert)) = tls {
            let server = ca.server();
            let own = |name: &str, text: &str, mode: u32| -> String {
                use std::os::unix::fs::PermissionsExt;
                let path = data.join(name);
                std::fs::write(&path, text).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown (root?)");
                }
                path.display().to_string()
            };
            settings.push("ssl=on".to_string());
            settings.push(format!(
                "ssl_cert_file={}",
                own("server.crt", &server.cert_pem, 0o644)
            ));
            settings.push(format!(
                "ssl_key_file={}",
                own("server.key", &server.key_pem, 0o600)
            ));
            let client = if client_cert {
                settings.push(format!(
                    "ssl_ca_file={}",
                    own("root.crt", &ca.ca_pem, 0o644)
                ));
                " clientcert=verify-full"
            } else {
                ""
            };
            own(
                "pg_hba.conf",
                &format!(
                    "local all all scram-sha-256\n\
                     hostssl all all 127.0.0.1/32 scram-sha-256{client}\n\
                     hostnossl all all 127.0.0.1/32 reject\n"
                ),
                0o600,
            );
        }
        let log = dir.path().join("postgres.log");
        let mut server = PgServer {
            bin,
            data,
            log,
            port: 0,
            owner,
            settings,
            tls: tls.is_some(),
            child: None,
            _dir: dir,
        };
        // A port picked by binding port 0 can be taken before the server binds it: retry.
        for _ in 0..3 {
            server.port = crate::free_port();
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(e) if e.contains("already in use") => continue,
                Err(e) => panic!("PostgreSQL did not start: {e}"),
            }
        }
        panic!("PostgreSQL did not start: no free port in 3 tries");
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the server is already running");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        if let Some((uid, gid)) = self.owner {
            std::os::unix::fs::chown(&self.log, Some(uid), Some(gid)).expect("chown (root?)");
        }
        let sockets = self.data.parent().unwrap().to_path_buf();
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", sockets.display()))
            // A test server: durability of the machine's disk is not what is tested.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=100"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log);
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        self.child =
            Some(cmd.spawn().unwrap_or_else(|e| {
                panic!("cannot run {}: {e}", self.bin.join("postgres").display())
            }));
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "postgres exited ({status}); its log:\n{}",
                    tail(&self.log, 30)
                ));
            }
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "postgres not ready after {READY_WITHIN:?}; its log:\n{}",
                    tail(&self.log, 30)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The store URL for the `idgen` role and the `postgres` database, keys under `prefix`
    /// (none when empty); with `sslmode=verify-full` for a TLS server.
    pub fn url(&self, prefix: &str) -> String {
        let mut params = Vec::new();
        if !prefix.is_empty() {
            params.push(format!("prefix={prefix}"));
        }
        if self.tls {
            params.push("sslmode=verify-full".to_string());
        }
        let mut u = format!("postgres://idgen@127.0.0.1:{}/postgres", self.port);
        if !params.is_empty() {
            u.push('?');
            u.push_str(&params.join("&"));
        }
        u
    }

    /// Runs `sql` (statements separated by `;`, one transaction) with `psql` as the `idgen`
    /// role, a superuser, in the `postgres` database; panics with psql's message when it fails.
    pub fn sql(&self, sql: &str) {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "idgen",
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .env("PGPASSWORD", PASSWORD)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.join("psql").display()));
        assert!(
            out.status.success(),
            "psql -c {sql:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Whether the server is running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the server (a fast shutdown: open transactions are rolled back, connections
    /// closed) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: a signal to a child this value started and has not reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts the stopped server again, on the same port and data.
    pub fn start_again(&mut self) {
        if let Err(e) = self.spawn_and_wait() {
            panic!("PostgreSQL did not start again: {e}");
        }
    }

    /// The server's log so far (its last lines), for a failing test's message.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}
