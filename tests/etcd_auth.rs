//! The real `idgen serve` binary on an authenticated etcd (see `common/etcd.rs`): etcd over TLS
//! with client certificates (`--client-cert-auth`), and etcd with `auth enable` and a user whose
//! password comes from a file or from IDGEN_ETCD_PASSWORD. A node with the right credentials
//! leases and serves IDs; one with a wrong or missing certificate, a wrong password or no
//! permission exits at start-up (exit status 1) with an error that names the cause, before it
//! listens; the password never shows in the node's log or in `--check-config`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::etcd::{enable_auth, ClientAuth, EtcdCluster, TestUser};
use common::node::{idgen_binary, NodeProc};
use idgen_testkit::{EtcdTls, TestCa, TestConn};

const TTL: &str = "1500ms";

/// Fetches IDs from a node: it holds a lease and serves.
fn serves(node: &NodeProc) {
    let mut c = TestConn::open(node.addr);
    let ids = c.get_ids(100).unwrap_or_else(|e| panic!("GET_IDS: {e:?}"));
    assert_eq!(ids.len(), 100);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

/// Starts a node that must fail at start-up; returns its exit status and log.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    match NodeProc::try_start(args, env) {
        Ok(node) => panic!(
            "the node started on {} although it should not; log:\n{}",
            node.addr,
            node.log()
        ),
        Err(e) => {
            // Exit status 1: the store refused us (2 would be a configuration error).
            assert!(e.starts_with("exited with exit status: 1;"), "{e}");
            e
        }
    }
}

/// Arguments as `&str`s.
fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("UTF-8 temporary path")
}

/// etcd over TLS with `--client-cert-auth`: a node with a client certificate of etcd's
/// authority leases over `etcds://` and serves; a certificate of another authority, no
/// certificate, the wrong authority for etcd's own certificate or a plaintext `etcd://` URL
/// all fail closed at start-up with a clear error. Then authentication is turned on: etcd takes
/// the client certificate's common name as the user, the running node (whose certificate names
/// a user with a role on its prefix) keeps renewing and serving, and a node whose certificate
/// names a user without a role is refused for want of permission.
#[test]
fn client_certificates_let_a_node_lease_and_the_wrong_ones_fail_closed() {
    let ca = TestCa::new("etcd test ca");
    let cluster = EtcdCluster::start_tls(1, EtcdTls::from_ca(&ca, true));
    let good = ca.client("idgen-node");
    let url = cluster.url("idgen-certs");
    assert!(url.starts_with("etcds://"), "{url}");
    let base = |cert: Option<&idgen_testkit::CertFiles>, ca_path: &std::path::Path| {
        let mut args = vec![
            "--store".to_string(),
            url.clone(),
            "--lease-ttl".into(),
            TTL.into(),
            "--shards".into(),
            "1".into(),
            "--etcd-ca".into(),
            path(ca_path).into(),
        ];
        if let Some(c) = cert {
            args.extend([
                "--etcd-cert".into(),
                path(&c.cert).into(),
                "--etcd-key".into(),
                path(&c.key).into(),
            ]);
        }
        args
    };
    let args = base(Some(&good), &ca.ca);
    let node = NodeProc::start(&refs(&args));
    serves(&node);
    assert!(
        node.stdout.iter().any(|l| l.contains("store etcds://")),
        "{:?}",
        node.stdout
    );

    // A client certificate of another authority: etcd refuses the handshake.
    let stranger = TestCa::new("not etcd's ca");
    let foreign = stranger.client("idgen-node");
    let e = refused(&refs(&base(Some(&foreign), &ca.ca)), &[]);
    assert!(e.contains("TLS handshake with etcd failed"), "{e}");
    // No client certificate at all.
    let e = refused(&refs(&base(None, &ca.ca)), &[]);
    assert!(e.contains("TLS handshake with etcd failed"), "{e}");
    assert!(e.contains("none is set"), "{e}");
    // The wrong authority for etcd's own certificate: the node does not trust etcd.
    let e = refused(&refs(&base(Some(&good), &stranger.ca)), &[]);
    assert!(e.contains("TLS handshake with etcd failed"), "{e}");
    assert!(
        e.to_ascii_lowercase().contains("certificate"),
        "the cause is not named: {e}"
    );
    // Plaintext to a TLS port.
    let plain = url.replacen("etcds://", "etcd://", 1);
    let e = refused(&["--store", &plain, "--lease-ttl", TTL], &[]);
    assert!(e.contains("cannot open the store etcd://"), "{e}");
    assert!(e.contains("write the store as etcds://"), "{e}");

    // Authentication on: the certificate's common name is the etcd user.
    enable_auth(
        &cluster,
        &ClientAuth {
            ca: Some(&ca.ca),
            cert: Some(&good),
            user: None,
        },
        "root-secret",
        &[
            TestUser {
                name: "idgen-node",
                password: "unused-with-certificates",
                readwrite_prefix: Some("idgen-certs/"),
            },
            TestUser {
                name: "intruder",
                password: "unused-with-certificates",
                readwrite_prefix: None,
            },
        ],
    );
    // Several renewals (every TTL/3) later, the running node still holds its lease.
    std::thread::sleep(Duration::from_millis(3000));
    serves(&node);
    assert!(
        !node.log().contains("lease_lost"),
        "the node lost its lease once authentication was on:\n{}",
        node.log()
    );
    let intruder = ca.client("intruder");
    let e = refused(&refs(&base(Some(&intruder), &ca.ca)), &[]);
    assert!(e.contains("permission denied"), "{e}");
    assert!(
        e.contains("readwrite on the prefix \"idgen-certs/\""),
        "{e}"
    );
}

/// etcd over TLS (server certificate only) with `auth enable`: a node authenticates as a user
/// whose password it reads from a file, another with the password in IDGEN_ETCD_PASSWORD; both
/// lease disjoint worker IDs and serve, and serve again after etcd restarted (and forgot their
/// tokens). A wrong password, no user, or a user without a role
/// fail at start-up, naming the cause. The password is never a flag, and shows neither in a
/// node's log nor in `--check-config`.
#[test]
fn passwords_from_a_file_or_the_environment_and_never_in_the_logs() {
    const PASSWORD: &str = "pw-7f3a9c1e-never-logged";
    let ca = TestCa::new("etcd test ca");
    let mut cluster = EtcdCluster::start_tls(1, EtcdTls::from_ca(&ca, false));
    enable_auth(
        &cluster,
        &ClientAuth {
            ca: Some(&ca.ca),
            ..ClientAuth::default()
        },
        "root-secret",
        &[
            TestUser {
                name: "idgen",
                password: PASSWORD,
                readwrite_prefix: Some("pw/"),
            },
            TestUser {
                name: "nobody",
                password: PASSWORD,
                readwrite_prefix: None,
            },
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("etcd-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let wrong_file = dir.path().join("wrong-password");
    std::fs::write(&wrong_file, "pw-wrong-0d9e\n").unwrap();
    let url = cluster.url("pw");
    let ca_path = path(&ca.ca);
    let args = |user: &str, file: Option<&std::path::Path>| {
        let mut a = vec![
            "--store".to_string(),
            url.clone(),
            "--lease-ttl".into(),
            TTL.into(),
            "--shards".into(),
            "1".into(),
            "--etcd-ca".into(),
            ca_path.into(),
            "--etcd-user".into(),
            user.into(),
        ];
        if let Some(f) = file {
            a.extend(["--etcd-password-file".into(), path(f).into()]);
        }
        a
    };

    let a = NodeProc::start(&refs(&args("idgen", Some(&password_file))));
    serves(&a);
    let b = NodeProc::try_start(
        &refs(&args("idgen", None)),
        &[("IDGEN_ETCD_PASSWORD", PASSWORD)],
    )
    .unwrap_or_else(|e| panic!("the node with IDGEN_ETCD_PASSWORD did not start: {e}"));
    serves(&b);
    // Two holders in one namespace: disjoint worker IDs.
    let worker = |n: &NodeProc| {
        let line = n
            .stdout
            .iter()
            .find(|l| l.starts_with("worker IDs "))
            .unwrap_or_else(|| panic!("no worker IDs line: {:?}", n.stdout))
            .clone();
        line.split_whitespace().nth(2).unwrap().to_string()
    };
    assert_ne!(worker(&a), worker(&b));

    // A wrong password, no user at all, a user without a role.
    let e = refused(&refs(&args("idgen", Some(&wrong_file))), &[]);
    assert!(e.contains("authentication failed"), "{e}");
    assert!(e.contains("etcd refused user \"idgen\""), "{e}");
    assert!(
        !e.contains("pw-wrong-0d9e"),
        "the wrong password is in the log: {e}"
    );
    let e = refused(
        &["--store", &url, "--lease-ttl", TTL, "--etcd-ca", ca_path],
        &[],
    );
    assert!(e.contains("etcd has authentication on"), "{e}");
    let e = refused(&refs(&args("nobody", Some(&password_file))), &[]);
    assert!(e.contains("permission denied"), "{e}");

    // Never a flag: clap refuses it (a configuration error, exit 2).
    let out = Command::new(idgen_binary())
        .args(["serve", "--store", &url, "--etcd-ca", ca_path])
        .args(["--etcd-user", "idgen", "--etcd-password", PASSWORD])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--etcd-password"),
        "{out:?}"
    );

    // --check-config names the file, or where the password comes from, never the password.
    let check = |extra_env: &[(&str, &str)], file: Option<&std::path::Path>| {
        let mut cmd = Command::new(idgen_binary());
        cmd.arg("serve")
            .args(args("idgen", file))
            .arg("--check-config")
            .env_remove("IDGEN_ETCD_PASSWORD");
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let printed = String::from_utf8(out.stdout).unwrap();
        assert!(!printed.contains(PASSWORD), "{printed}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains(PASSWORD));
        printed
    };
    let printed = check(&[], Some(&password_file));
    assert!(
        printed.contains(&format!(
            "etcd_password_file = \"{}\"",
            password_file.display()
        )),
        "{printed}"
    );
    assert!(printed.contains("etcd_user = \"idgen\""), "{printed}");
    let printed = check(&[("IDGEN_ETCD_PASSWORD", PASSWORD)], None);
    assert!(printed.contains("IDGEN_ETCD_PASSWORD"), "{printed}");

    // etcd restarts and forgets its tokens: the nodes authenticate again and serve again.
    cluster.kill(0);
    cluster.restart(0);
    // Past a TTL, so what the nodes serve then needs renewals on the restarted etcd.
    std::thread::sleep(Duration::from_millis(3000));
    for node in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match TestConn::open(node.addr).get_ids(1) {
                Ok(ids) if ids.len() == 1 => break,
                other => assert!(
                    Instant::now() < deadline,
                    "no IDs 20 s after etcd restarted: {other:?}; log:\n{}",
                    node.log()
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // Nothing the running nodes logged holds the password.
    for (name, node) in [("file", &a), ("environment", &b)] {
        serves(node);
        let log = node.log();
        assert!(
            !log.is_empty(),
            "no log from the node with the password from its {name}"
        );
        assert!(
            !log.contains(PASSWORD),
            "the password is in the log of the node with it from its {name}:\n{log}"
        );
        assert!(!node.stdout.iter().any(|l| l.contains(PASSWORD)));
    }
}

/// `idgen inspect --config FILE` reaches an authenticated etcd over TLS as the node does: the
/// node's own file names the store (etcds://), the authority, the client certificate and the
/// user with a password file; inspect given that file (or the file without the password file,
/// and IDGEN_ETCD_PASSWORD, or the same settings as flags) shows the node's lease. A wrong
/// password is refused by etcd (exit 1); a user without a password, a missing authority, or
/// two passwords are configuration errors (exit 2).
#[test]
fn inspect_reaches_the_store_with_the_nodes_tls_and_credentials() {
    const PASSWORD: &str = "pw-inspect-5b21e0";
    let ca = TestCa::new("etcd test ca");
    let cluster = EtcdCluster::start_tls(1, EtcdTls::from_ca(&ca, true));
    let me = ca.client("idgen");
    enable_auth(
        &cluster,
        &ClientAuth {
            ca: Some(&ca.ca),
            cert: Some(&me),
            user: None,
        },
        "root-secret",
        &[TestUser {
            name: "inspector",
            password: PASSWORD,
            readwrite_prefix: Some("insp/"),
        }],
    );
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("etcd-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let url = cluster.url("insp");
    let lease = format!(
        "[lease]\nstore = \"{url}\"\nnamespace = \"payments\"\nlease_ttl = \"{TTL}\"\n\
         etcd_ca = \"{}\"\netcd_cert = \"{}\"\netcd_key = \"{}\"\netcd_server_name = \"localhost\"\n\
         etcd_user = \"inspector\"\n",
        ca.ca.display(),
        me.cert.display(),
        me.key.display()
    );
    let with_file = dir.path().join("node.toml");
    std::fs::write(
        &with_file,
        format!(
            "{lease}etcd_password_file = \"{}\"\n",
            password_file.display()
        ),
    )
    .unwrap();
    let without_password = dir.path().join("node-env.toml");
    std::fs::write(&without_password, &lease).unwrap();

    let node = NodeProc::start(&[
        "--config",
        path(&with_file),
        "--shards",
        "2",
        "--node-id",
        "pay-1",
    ]);
    serves(&node);
    let inspect = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(idgen_binary());
        cmd.arg("inspect")
            .args(args)
            .env_remove("IDGEN_ETCD_PASSWORD")
            .env_remove("IDGEN_CONFIG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let holds = |out: &std::process::Output| {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["namespace"], "payments", "{v}");
        assert!(
            v["leases"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["node_id"] == "pay-1" && l["count"] == 2 && l["state"] == "held"),
            "{v}"
        );
        let all = format!("{out:?}");
        assert!(
            !all.contains(PASSWORD),
            "the password is in inspect's output"
        );
    };
    holds(&inspect(&["--config", path(&with_file), "--json"], &[]));
    holds(&inspect(
        &["--config", path(&without_password), "--json"],
        &[("IDGEN_ETCD_PASSWORD", PASSWORD)],
    ));
    // The flags alone, as the file has them, reach it too.
    holds(&inspect(
        &[
            "--store",
            &url,
            "--namespace",
            "payments",
            "--etcd-ca",
            path(&ca.ca),
            "--etcd-cert",
            path(&me.cert),
            "--etcd-key",
            path(&me.key),
            "--etcd-user",
            "inspector",
            "--etcd-password-file",
            path(&password_file),
            "--json",
        ],
        &[],
    ));
    // A user without a password is a configuration error, as for serve.
    let out = inspect(&["--config", path(&without_password)], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("without a password"),
        "{out:?}"
    );
    // A wrong password (a flag over the file's): etcd refuses, a runtime failure that names
    // the cause.
    let wrong = dir.path().join("wrong-password");
    std::fs::write(&wrong, "pw-wrong-77c4\n").unwrap();
    let out = inspect(
        &[
            "--config",
            path(&with_file),
            "--etcd-password-file",
            path(&wrong),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot open the store etcds://") && err.contains("authentication failed"),
        "{out:?}"
    );
    assert!(!err.contains("pw-wrong-77c4"), "{err}");
    // Without the file: the default embedded store, where no node ran.
    let out = Command::new(idgen_binary())
        .args(["inspect", "--namespace", "payments"])
        .current_dir(dir.path())
        .env_remove("IDGEN_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // A flag beats the file: another CA path, missing, is a configuration error.
    let out = inspect(
        &[
            "--config",
            path(&with_file),
            "--etcd-ca",
            "/nonexistent/ca.pem",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ca.pem"),
        "{out:?}"
    );
    // Both a password file and IDGEN_ETCD_PASSWORD: refused as serve refuses it.
    let out = inspect(
        &["--config", path(&with_file)],
        &[("IDGEN_ETCD_PASSWORD", PASSWORD)],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    drop(node);
}
