//! A real etcd cluster of 1 or 3 members on loopback, for integration tests.
//!
//! Uses the `etcd` binary (Debian package `etcd-server`; `scripts/test` installs it), or the one
//! named by `IDGEN_ETCD_BIN`. A missing binary fails the test loudly: these tests never skip.
//! Every member listens on 127.0.0.1 only, with ports found free by binding port 0, and keeps
//! its data and log in a temporary directory removed with the cluster. Dropping the cluster
//! kills the processes it started (through their own `Child` handles).
//!
//! [`EtcdCluster::start_tls`] serves the client URLs over TLS with a server certificate of a
//! [`TestCa`] (and, with [`EtcdTls::client_cert_auth`], asks every client for a certificate of
//! that authority: `--client-cert-auth`). Health is then read from a plaintext metrics URL of
//! each member (`--listen-metrics-urls`), so the harness needs no TLS client of its own.
//! Turning on etcd's authentication (`auth enable`) needs an etcd client; the server crate's
//! tests do it with etcd-client (`tests/common/etcd.rs`), which this kit does not depend on
//! (its build needs protoc).

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::certs::{CertFiles, TestCa};

/// How long a cluster (or a restarted member) may take to become healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(20);

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// Plaintext `/metrics` and `/health`, when the client URL is TLS.
    metrics_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// Run the member as this user (and group) ID instead of the test's own: packet filters
    /// can then tell its traffic apart (`nft … meta skuid`), for partition tests.
    uid: Option<u32>,
}

/// TLS on the members' client URLs.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The members' server certificate and key (for `localhost`, 127.0.0.1 and ::1).
    pub server: CertFiles,
    /// The authority of the server certificate, and of the client certificates etcd accepts.
    pub ca: PathBuf,
    /// Ask every client for a certificate of `ca` (`--client-cert-auth`).
    pub client_cert_auth: bool,
}

impl EtcdTls {
    /// A server certificate of `ca`, and `ca` as the clients' authority.
    pub fn from_ca(ca: &TestCa, client_cert_auth: bool) -> EtcdTls {
        EtcdTls {
            server: ca.server_for(
                &["localhost", "127.0.0.1", "::1"],
                crate::certs::Validity::Current,
                "etcd-server",
            ),
            ca: ca.ca.clone(),
            client_cert_auth,
        }
    }
}

/// A running (or partly stopped) etcd cluster.
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    bin: PathBuf,
    tls: Option<EtcdTls>,
    _dir: tempfile::TempDir,
}

/// The etcd binary, or a panic that says how to get one.
pub fn etcd_binary() -> PathBuf {
    if let Ok(p) = std::env::var("IDGEN_ETCD_BIN") {
        return PathBuf::from(p);
    }
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin", "/usr/local/bin"])
    {
        let p = Path::new(dir).join("etcd");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "the etcd binary was not found (PATH, /usr/bin): these tests need a real etcd. \
         Install Debian's etcd-server package (`apt-get install etcd-server`, as scripts/test \
         does), or set IDGEN_ETCD_BIN to an etcd 3.4+ binary"
    );
}

/// etcdctl (Debian's `etcd-client`), for snapshots: `IDGEN_ETCDCTL` or `/usr/bin/etcdctl`;
/// panics, saying what to install, if it is missing.
pub fn etcdctl_binary() -> PathBuf {
    let bin = std::env::var_os("IDGEN_ETCDCTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/etcdctl"));
    assert!(
        bin.exists(),
        "{} is missing: install Debian's etcd-client (`scripts/deps chaos` does) or set IDGEN_ETCDCTL",
        bin.display()
    );
    bin
}

/// The last `lines` lines of the file at `path` (empty when it cannot be read), for a failing
/// test's message.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Member {
    /// Where the member answers `/health` in plaintext: the client port, or with TLS the
    /// metrics port.
    fn health_port(&self, tls: bool) -> u16 {
        if tls {
            self.metrics_port
        } else {
            self.client_port
        }
    }
}

/// Whether the member whose plaintext `/health` is at `port` answers it with a leader.
fn healthy(port: u16) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.starts_with("HTTP/1.") && resp.contains(" 200 ") && resp.contains("\"true\"")
}

impl EtcdCluster {
    /// Starts `members` (1 or 3) members and waits until every one is healthy.
    pub fn start(members: usize) -> EtcdCluster {
        Self::start_as(members, &[])
    }

    /// As [`start`](Self::start), with members `(index, uid)` run as another user ID (root
    /// only).
    pub fn start_as(members: usize, uids: &[(usize, u32)]) -> EtcdCluster {
        Self::start_with(members, uids, None)
    }

    /// As [`start`](Self::start), with the client URLs over TLS (`https://`; the store URL is
    /// `etcds://`).
    pub fn start_tls(members: usize, tls: EtcdTls) -> EtcdCluster {
        Self::start_with(members, &[], Some(tls))
    }

    fn start_with(members: usize, uids: &[(usize, u32)], tls: Option<EtcdTls>) -> EtcdCluster {
        assert!(members == 1 || members == 3, "1 or 3 members");
        let bin = etcd_binary();
        // Ports picked by binding port 0 can be taken by someone else before etcd binds them:
        // retry a couple of times with new ports.
        let mut last_err = String::new();
        for _ in 0..3 {
            match Self::try_start(&bin, members, uids, tls.clone()) {
                Ok(c) => return c,
                Err(e) if e.contains("address already in use") => last_err = e,
                Err(e) => panic!("etcd cluster did not start: {e}"),
            }
        }
        panic!("etcd cluster did not start: {last_err}");
    }

    fn try_start(
        bin: &Path,
        n: usize,
        uids: &[(usize, u32)],
        tls: Option<EtcdTls>,
    ) -> Result<EtcdCluster, String> {
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let dir = tempfile::Builder::new()
            .prefix("idgen-etcd-")
            .tempdir()
            .expect("temp dir");
        let token = format!(
            "idgen-test-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        );
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: crate::free_port(),
                peer_port: crate::free_port(),
                metrics_port: crate::free_port(),
                data_dir: dir.path().join(format!("m{i}.etcd")),
                log: dir.path().join(format!("m{i}.log")),
                child: None,
                uid: uids.iter().find(|(m, _)| *m == i).map(|(_, u)| *u),
            })
            .collect();
        for m in members.iter().filter(|m| m.uid.is_some()) {
            // The member writes its own data directory.
            std::fs::create_dir_all(&m.data_dir).expect("member data dir");
            let uid = m.uid.unwrap();
            std::os::unix::fs::chown(&m.data_dir, Some(uid), Some(uid)).expect("chown (root?)");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&m.data_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            initial_cluster,
            token,
            bin: bin.to_path_buf(),
            tls,
            _dir: dir,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        match cluster.wait_healthy(&(0..n).collect::<Vec<_>>()) {
            Ok(()) => Ok(cluster),
            Err(e) => Err(e), // dropping `cluster` kills what started
        }
    }

    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        assert!(m.child.is_none(), "member {i} is already running");
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&m.log)
            .expect("etcd log file");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log);
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.server.cert)
                .arg("--key-file")
                .arg(&tls.server.key)
                .arg("--listen-metrics-urls")
                .arg(format!("http://127.0.0.1:{}", m.metrics_port));
            if tls.client_cert_auth {
                // etcd verifies client certificates whenever it has a trusted CA file.
                cmd.arg("--client-cert-auth")
                    .arg("--trusted-ca-file")
                    .arg(&tls.ca);
            }
        }
        if std::env::consts::ARCH != "x86_64" {
            // etcd 3.4 refuses other architectures unless told otherwise.
            cmd.env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH);
        }
        if let Some(uid) = m.uid {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(uid);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        self.members[i].child = Some(child);
    }

    fn wait_healthy(&mut self, which: &[usize]) -> Result<(), String> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        loop {
            let mut all = true;
            for &i in which {
                let m = &mut self.members[i];
                if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                    return Err(format!(
                        "etcd member {} exited ({status}); its log:\n{}",
                        m.name,
                        tail(&m.log, 30)
                    ));
                }
                all &= healthy(m.health_port(self.tls.is_some()));
            }
            if all {
                return Ok(());
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = which
                    .iter()
                    .map(|&i| {
                        let m = &self.members[i];
                        format!("--- {} ---\n{}", m.name, tail(&m.log, 20))
                    })
                    .collect();
                return Err(format!(
                    "etcd not healthy after {HEALTHY_WITHIN:?}:\n{}",
                    logs.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Each member's client and peer port.
    pub fn ports(&self) -> Vec<(u16, u16)> {
        self.members
            .iter()
            .map(|m| (m.client_port, m.peer_port))
            .collect()
    }

    /// Whether member `i` answers `/health` with a leader.
    pub fn member_healthy(&self, i: usize) -> bool {
        healthy(self.members[i].health_port(self.tls.is_some()))
    }

    /// The cluster's TLS, if its client URLs use it.
    pub fn tls(&self) -> Option<&EtcdTls> {
        self.tls.as_ref()
    }

    /// Client endpoints, `127.0.0.1:port`, one per member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The `--store` URL for this cluster under `prefix` (`etcds://` with TLS).
    pub fn url(&self, prefix: &str) -> String {
        let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
        format!("{scheme}://{}/{}", self.endpoints().join(","), prefix)
    }

    /// Kills member `i` with SIGKILL (its data stays for [`restart`](Self::restart)).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data directory and ports, and waits until it is healthy
    /// (which, in a 3-member cluster, needs a quorum up).
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
        if let Err(e) = self.wait_healthy(&[i]) {
            panic!("restarted etcd member {i}: {e}");
        }
    }

    /// Kills every member.
    pub fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }

    /// Starts every stopped member and waits until all are healthy.
    pub fn start_all(&mut self) {
        let stopped: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_none())
            .collect();
        for &i in &stopped {
            self.spawn(i);
        }
        let all: Vec<usize> = (0..self.members.len()).collect();
        if let Err(e) = self.wait_healthy(&all) {
            panic!("etcd start_all: {e}");
        }
    }

    /// Saves a snapshot of the keyspace to `file` (`etcdctl snapshot save`, from member 0).
    pub fn snapshot(&self, file: &Path) {
        let mut cmd = Command::new(etcdctl_binary());
        cmd.env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(&self.endpoints()[0]);
        if let Some(tls) = &self.tls {
            assert!(
                !tls.client_cert_auth,
                "snapshots of a cluster that asks for client certificates are not supported here"
            );
            cmd.arg("--cacert").arg(&tls.ca);
        }
        let out = cmd
            .args(["snapshot", "save"])
            .arg(file)
            .output()
            .expect("run etcdctl");
        assert!(
            out.status.success(),
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops every member and restores the snapshot `file` into each one's data directory
    /// (`etcdctl snapshot restore`, as etcd's disaster recovery does: a new cluster of the same
    /// members, with the snapshot's keys and revisions), then starts them and waits until every
    /// one is healthy.
    pub fn restore(&mut self, file: &Path) {
        self.stop_all();
        for i in 0..self.members.len() {
            let m = &self.members[i];
            std::fs::remove_dir_all(&m.data_dir).expect("remove the member's data");
            let out = Command::new(etcdctl_binary())
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(file)
                .arg("--name")
                .arg(&m.name)
                .arg("--data-dir")
                .arg(&m.data_dir)
                .args(["--initial-cluster", &self.initial_cluster])
                .args(["--initial-cluster-token", &self.token])
                .arg("--initial-advertise-peer-urls")
                .arg(format!("http://127.0.0.1:{}", m.peer_port))
                .output()
                .expect("run etcdctl");
            assert!(
                out.status.success(),
                "etcdctl snapshot restore: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.start_all();
    }

    /// Whether member `i` is running (as far as this harness knows).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
