//! systemd readiness (`Type=notify`): the real binary against a notification socket. READY=1
//! comes only once the node serves (lease held, listeners up), STOPPING=1 when it starts
//! draining, and a configuration error exits with status 2 (the unit's
//! `RestartPreventExitStatus=`) without saying READY.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::node::NodeProc;
use idgen_testkit::TestConn;

/// The next notification datagram, as text.
fn next(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn ready_once_serving_stopping_when_draining_and_config_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let path_str = path.to_str().unwrap().to_string();
    let mut node = NodeProc::try_start(
        &["--store", "memory", "--shards", "1"],
        &[("NOTIFY_SOCKET", &path_str)],
    )
    .unwrap();
    let ready = next(&socket);
    assert!(
        ready.lines().any(|l| l == "READY=1"),
        "first notification: {ready:?}"
    );
    assert!(
        ready.lines().any(|l| l.starts_with("STATUS=serving on ")),
        "{ready:?}"
    );
    // Ready means serving.
    assert_eq!(TestConn::open(node.addr).get_ids(3).unwrap().len(), 3);

    node.signal("TERM");
    let stopping = next(&socket);
    assert!(
        stopping.lines().any(|l| l == "STOPPING=1"),
        "after SIGTERM: {stopping:?}"
    );
    assert!(node.wait(Duration::from_secs(30)).success());

    // A configuration error: exit status 2, and never READY.
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let err = NodeProc::try_start(
        &["--store", "memory", "--max-batch", "0"],
        &[("NOTIFY_SOCKET", &path_str)],
    )
    .err()
    .expect("a bad configuration must not start");
    assert!(err.contains("exit status: 2"), "{err}");
    let mut buf = [0u8; 64];
    assert!(
        socket.recv(&mut buf).is_err(),
        "a node that did not start said something to systemd"
    );
}

/// Under systemd (`JOURNAL_STREAM` names stderr), every log line starts with its syslog level
/// (`<6>` info … `<3>` error), which journald's `SyslogLevelPrefix=` files it under and strips;
/// journald stamps the time, so the line has none of its own, and no colour. A configuration
/// error is an error (`<3>`). A `JOURNAL_STREAM` that names another stream (inherited by a
/// process whose stderr went elsewhere) changes nothing.
#[test]
fn under_journald_log_lines_carry_their_syslog_level() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("journal-stream");
    let file = std::fs::File::create(&log).unwrap();
    let meta = file.metadata().unwrap();
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let w =
        common::logs::serve_to_files(&[], &[("JOURNAL_STREAM", &stream), ("NO_COLOR", "")], &log);
    assert!(w.status.success(), "{}", w.stderr);
    assert!(!w.stderr.contains('\x1b'), "{}", w.stderr);
    for line in w.stderr.lines() {
        let level = line
            .strip_prefix('<')
            .and_then(|l| l.split_once('>'))
            .and_then(|(n, _)| n.parse::<u8>().ok());
        assert!(matches!(level, Some(3..=7)), "no syslog level: {line}");
    }
    let started = w
        .stderr
        .lines()
        .find(|l| l.contains("idgen node started"))
        .unwrap();
    assert!(started.starts_with("<6> INFO idgen::node: "), "{started}");
    // JSON: the prefix, then the object.
    let log_json = dir.path().join("journal-stream-json");
    let file = std::fs::File::create(&log_json).unwrap();
    let meta = file.metadata().unwrap();
    let stream_json = format!("{}:{}", meta.dev(), meta.ino());
    let w = common::logs::serve_to_files(
        &["--log-format", "json"],
        &[("JOURNAL_STREAM", &stream_json)],
        &log_json,
    );
    assert!(w.status.success(), "{}", w.stderr);
    for line in w.stderr.lines() {
        let (n, json) = line
            .strip_prefix('<')
            .and_then(|l| l.split_once('>'))
            .unwrap_or_else(|| panic!("no syslog level: {line}"));
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let want = match v["level"].as_str() {
            Some("ERROR") => "3",
            Some("WARN") => "4",
            Some("INFO") => "6",
            _ => "7",
        };
        assert_eq!(n, want, "{line}");
    }
    // A configuration error: an error.
    let out = std::process::Command::new(common::node::idgen_binary())
        .args(["serve", "--store", "memory", "--max-batch", "0"])
        .env("JOURNAL_STREAM", &stream)
        .stderr(std::fs::OpenOptions::new().append(true).open(&log).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = std::fs::read_to_string(&log).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("<3>idgen: configuration error: --max-batch"),
        "{last}"
    );
    // Another stream's JOURNAL_STREAM: plain lines.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::File::create(&elsewhere).unwrap();
    let w = common::logs::serve_to_files(&[], &[("JOURNAL_STREAM", &stream)], &elsewhere);
    assert!(w.status.success(), "{}", w.stderr);
    assert!(
        w.stderr.lines().all(|l| !l.starts_with('<')),
        "{}",
        w.stderr
    );
}
