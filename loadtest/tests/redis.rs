//! idgen-loadtest `--target redis` against a real `redis-server` that the test starts on a
//! free loopback port (and kills on drop).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::run_loadtest;

struct Redis {
    child: Child,
    addr: String,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_server() -> &'static str {
    for path in ["/usr/bin/redis-server", "/usr/local/bin/redis-server"] {
        if Path::new(path).exists() {
            return path;
        }
    }
    panic!(
        "redis-server not found: install it (Debian: `apt-get install redis-server`); \
         this test compares idgen-loadtest's Redis target against a real server and is never skipped"
    );
}

fn start_redis() -> Redis {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let child = Command::new(redis_server())
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let redis = Redis {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while !answers_ping(&redis.addr) {
        assert!(
            Instant::now() < deadline,
            "redis-server on {} did not answer PING within 3 s",
            redis.addr
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    redis
}

fn answers_ping(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

#[test]
fn redis_incrby_with_verify() {
    let redis = start_redis();
    let r = run_loadtest(
        &[
            "--addr",
            &redis.addr,
            "--target",
            "redis",
            "--requests",
            "2000",
            "--pipeline",
            "8",
            "--batch",
            "10",
            "--verify",
            "--json",
            "--quiet",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["target"], "redis");
    assert_eq!(v["requests"], 2000);
    assert_eq!(v["ids"], 20_000);
    assert_eq!(v["verified_ids"], 20_000);
    assert_eq!(v["duplicates"], 0);
    assert_eq!(v["out_of_order"], 0);
    assert_eq!(v["errors"], serde_json::json!({}));

    // A second run on two connections continues the same key: still unique, still ordered
    // per connection.
    let r = run_loadtest(
        &[
            "--addr",
            &redis.addr,
            "--target",
            "redis",
            "--connections",
            "2",
            "--requests",
            "500",
            "--pipeline",
            "4",
            "--batch",
            "3",
            "--verify",
            "--json",
            "--quiet",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["ids"], 1500);
    assert_eq!(v["duplicates"], 0);
    assert_eq!(v["out_of_order"], 0);
}

#[test]
fn redis_error_replies_are_counted() {
    let redis = start_redis();
    // Make the key a non-integer: every INCRBY answers -ERR.
    let mut s = TcpStream::connect(&redis.addr).expect("connect");
    s.write_all(b"*3\r\n$3\r\nSET\r\n$3\r\nbad\r\n$3\r\nabc\r\n")
        .expect("SET");
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).expect("+OK");
    let r = run_loadtest(
        &[
            "--addr",
            &redis.addr,
            "--target",
            "redis",
            "--redis-key",
            "bad",
            "--requests",
            "10",
            "--json",
            "--quiet",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let v = r.json();
    assert_eq!(v["requests"], 10);
    assert_eq!(v["ids"], 0);
    assert_eq!(v["errors"], serde_json::json!({"REDIS_ERR": 10}));
    assert!(r.stderr.contains("not an integer"), "stderr: {}", r.stderr);
}
