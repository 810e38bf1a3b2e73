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
