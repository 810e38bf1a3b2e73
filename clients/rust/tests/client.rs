//! The async and blocking clients against the in-test fake server.

use std::collections::HashSet;
use std::future::Future;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use idgen_client::{Client, ClientOptions, Error, Parts, Status};
use idgen_testkit::fake::{Action, Config, FakeServer, EPOCH_MS};

/// Every test body is bounded in time.
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test took longer than 20 s")
}

async fn start() -> (FakeServer, Client) {
    let server = FakeServer::start(Config::default()).await;
    let client = Client::connect(server.addr).await.expect("connect");
    (server, client)
}

fn strictly_increasing(ids: &[u64]) -> bool {
    ids.windows(2).all(|w| w[0] < w[1])
}

#[tokio::test]
async fn handshake_fields_and_layout_are_exposed() {
    bounded(async {
        let (_server, client) = start().await;
        assert_eq!(*client.hello(), idgen_testkit::fake::hello(1000));
        let layout = client.layout();
        assert_eq!(
            (
                layout.epoch_ms(),
                layout.timestamp_bits(),
                layout.worker_bits(),
                layout.sequence_bits(),
                layout.region_bits()
            ),
            (EPOCH_MS, 41, 10, 12, 0)
        );
        let id = client.next_id().await.unwrap();
        let parts: Parts = layout.decompose(id);
        assert_eq!(parts.worker, 512);
        assert_eq!(parts.timestamp, 63_072_000_123);
        assert_eq!(parts.unix_ms, EPOCH_MS + 63_072_000_123);
        assert_eq!(parts.sequence, 0);
        assert!(client.ping().await.unwrap() < Duration::from_secs(5));
        assert!(!client.is_closed());
    })
    .await
}

#[tokio::test]
async fn many_concurrent_callers_are_pipelined_and_ordered() {
    bounded(async {
        let (server, client) = start().await;
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::with_capacity(20);
                    for _ in 0..20 {
                        mine.push(c.next_id().await.expect("next_id"));
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        for t in tasks {
            let mine = t.await.unwrap();
            assert_eq!(mine.len(), 20);
            assert!(strictly_increasing(&mine), "per-caller order: {mine:?}");
            all.extend(mine);
        }
        assert_eq!(all.len(), 1000, "all distinct");
        let counts = server.control.get_ids_counts();
        assert_eq!(counts.len(), 1000, "one wire request per call");
        assert!(counts.iter().all(|&c| c == 1));
    })
    .await
}

#[tokio::test]
async fn large_batches_are_split_and_rejoined() {
    bounded(async {
        let (server, client) = start().await;
        let ids = client.next_ids(2500).await.unwrap();
        assert_eq!(ids.len(), 2500);
        assert!(strictly_increasing(&ids));
        assert_eq!(server.control.get_ids_counts(), [1000, 1000, 500]);
        // Exactly max_batch is one request.
        assert_eq!(client.next_ids(1000).await.unwrap().len(), 1000);
        assert_eq!(server.control.get_ids_counts().len(), 4);
    })
    .await
}

#[tokio::test]
async fn a_count_of_0_is_refused_before_sending() {
    bounded(async {
        let (server, client) = start().await;
        let e = client.next_ids(0).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains("at least 1 ID, not 0"), "{e}");
        assert!(!e.closes_connection());
        assert!(server.control.get_ids_counts().is_empty(), "nothing sent");
        // The connection still serves.
        assert_eq!(client.next_ids(3).await.unwrap().len(), 3);
        assert_eq!(server.control.get_ids_counts(), [3]);
    })
    .await
}

#[tokio::test]
async fn a_failed_part_fails_the_whole_batch() {
    bounded(async {
        let (server, client) = start().await;
        let ok = client.next_id().await.unwrap();
        // Part 1 of 3 served, part 2 refused, part 3 served.
        server.control.push(Action::Serve);
        server
            .control
            .push(Action::Error(Status::UNAVAILABLE_LEASE, "no lease"));
        let e = client.next_ids(2500).await.unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        assert_eq!(e.status(), Some(Status::UNAVAILABLE_LEASE));
        // The other parts were still read off the stream: the next call is in step.
        let after = client.next_ids(3).await.unwrap();
        assert!(after[0] > ok && strictly_increasing(&after));
        assert_eq!(server.control.get_ids_counts(), [1, 1000, 500, 3]);
    })
    .await
}

#[tokio::test]
async fn error_statuses_are_mapped_and_open_ones_keep_the_connection() {
    bounded(async {
        let (server, client) = start().await;
        for (status, unavailable) in [
            (Status::INVALID_COUNT, false),
            (Status::BATCH_TOO_LARGE, false),
            (Status::UNKNOWN_OPCODE, false),
            (Status::UNAVAILABLE_LEASE, true),
            (Status::UNAVAILABLE_CLOCK, true),
            (Status::EXHAUSTED, false),
            (Status(399), true),
        ] {
            server.control.push(Action::Error(status, "scripted"));
            match client.next_id().await {
                Err(Error::Server { status: s, message }) => {
                    assert_eq!(s, status);
                    assert_eq!(message, "scripted");
                }
                other => panic!("{status}: expected a server error, got {other:?}"),
            }
            let e = Error::Server {
                status,
                message: String::new(),
            };
            assert_eq!(e.is_unavailable(), unavailable, "{status}");
            assert!(!e.closes_connection(), "{status}");
            // Still usable: a PING and an ID go through.
            client.ping().await.unwrap();
            client.next_id().await.unwrap();
        }
        // An ERROR answering a PING is reported the same way.
        server
            .control
            .push(Action::Error(Status::UNAVAILABLE_CLOCK, "clock"));
        assert!(client.ping().await.unwrap_err().is_unavailable());
        assert!(!client.is_closed());
    })
    .await
}

#[tokio::test]
async fn closing_statuses_end_the_connection() {
    bounded(async {
        for status in [
            Status::BAD_FRAME,
            Status::SHUTTING_DOWN,
            Status::OVERLOADED,
            Status::INTERNAL,
            Status(499),
        ] {
            let (server, client) = start().await;
            server.control.push(Action::Error(status, "bye"));
            let e = client.next_id().await.unwrap_err();
            assert_eq!(e.status(), Some(status));
            assert!(e.closes_connection());
            assert_eq!(e.is_unavailable(), status.retry_elsewhere());
            assert!(client.is_closed());
            assert!(matches!(client.next_id().await, Err(Error::Closed)));
        }
    })
    .await
}

#[tokio::test]
async fn shutting_down_fails_the_requests_behind_it_as_unavailable() {
    bounded(async {
        let (server, client) = start().await;
        server
            .control
            .push(Action::Error(Status::SHUTTING_DOWN, "bye"));
        let calls: Vec<_> = (0..10)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move { c.next_id().await })
            })
            .collect();
        for call in calls {
            let e = call.await.unwrap().unwrap_err();
            // The first gets the ERROR; the rest were unanswered and get either the same
            // status or, if they were queued after the failure, Closed.
            assert!(e.is_unavailable() || matches!(e, Error::Closed), "{e:?}");
        }
    })
    .await
}

#[tokio::test]
async fn connection_drop_fails_in_flight_callers_promptly_and_later_calls_fast() {
    bounded(async {
        let server = FakeServer::start(Config::default()).await;
        let options = ClientOptions {
            request_timeout: Duration::from_secs(30),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(server.addr, options).await.unwrap();
        client.next_id().await.unwrap();
        server
            .control
            .push(Action::Hang(Some(Duration::from_millis(200))));
        let start = Instant::now();
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let c = client.clone();
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        c.next_id().await.map(|_| ())
                    } else {
                        c.next_ids(2500).await.map(|_| ())
                    }
                })
            })
            .collect();
        for call in calls {
            match call.await.unwrap() {
                Err(Error::Io(e)) => assert_eq!(e.kind(), ErrorKind::UnexpectedEof),
                other => panic!("expected an I/O error, got {other:?}"),
            }
        }
        assert!(start.elapsed() < Duration::from_secs(5), "not prompt");
        assert!(client.is_closed());
        let t = Instant::now();
        assert!(matches!(client.next_id().await, Err(Error::Closed)));
        assert!(matches!(client.ping().await, Err(Error::Closed)));
        assert!(t.elapsed() < Duration::from_millis(100));
    })
    .await
}

#[tokio::test]
async fn abrupt_drop_and_bad_frames_fail_the_connection() {
    bounded(async {
        let (server, client) = start().await;
        server.control.push(Action::Drop);
        assert!(matches!(client.next_id().await, Err(Error::Io(_))));
        assert!(matches!(client.next_id().await, Err(Error::Closed)));

        // An unknown response opcode is a broken stream.
        let (server, client) = start().await;
        server.control.push(Action::Raw(vec![0, 0, 0, 1, 0x84]));
        let e = client.next_id().await.unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e:?}");
        assert_eq!(e.status(), Some(Status::BAD_FRAME));
        assert!(client.is_closed());

        // A well-formed answer of the wrong kind or size, too.
        let (server, client) = start().await;
        let mut pong = Vec::new();
        idgen_protocol::encode_pong(7, &mut pong);
        server.control.push(Action::Raw(pong));
        let e = client.next_id().await.unwrap_err();
        assert!(matches!(e, Error::UnexpectedResponse(_)), "{e:?}");
        let (server, client) = start().await;
        let mut two = Vec::new();
        idgen_protocol::encode_ids(&[1, 2], &mut two);
        server.control.push(Action::Raw(two));
        let e = client.next_id().await.unwrap_err();
        assert!(matches!(e, Error::UnexpectedResponse(_)), "{e:?}");
    })
    .await
}

#[tokio::test]
async fn request_timeout_fires_and_connect_timeout_too() {
    bounded(async {
        let server = FakeServer::start(Config::default()).await;
        let options = ClientOptions {
            request_timeout: Duration::from_millis(200),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(server.addr, options).await.unwrap();
        server.control.push(Action::Hang(None));
        let t = Instant::now();
        assert!(matches!(client.next_id().await, Err(Error::Timeout)));
        assert!(matches!(client.ping().await, Err(Error::Timeout)));
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(3));
        assert!(!Error::Timeout.closes_connection());

        let silent = FakeServer::start(Config {
            silent_handshake: true,
            ..Config::default()
        })
        .await;
        let options = ClientOptions {
            connect_timeout: Duration::from_millis(200),
            ..ClientOptions::default()
        };
        let t = Instant::now();
        let e = Client::connect_with(silent.addr, options)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Timeout), "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(3));
    })
    .await
}

#[tokio::test]
async fn a_late_answer_after_a_timeout_is_discarded_in_order() {
    bounded(async {
        let server = FakeServer::start(Config::default()).await;
        let options = ClientOptions {
            request_timeout: Duration::from_millis(100),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(server.addr, options).await.unwrap();
        let first = client.next_id().await.unwrap();
        server
            .control
            .push(Action::Delay(Duration::from_millis(300)));
        assert!(matches!(client.next_ids(5).await, Err(Error::Timeout)));
        tokio::time::sleep(Duration::from_millis(400)).await;
        // The late IDS frame (5 IDs) was matched to the timed-out call and dropped; the
        // next call gets its own answer.
        let ids = client.next_ids(3).await.unwrap();
        assert!(ids[0] > first + 5 && strictly_increasing(&ids));
        assert_eq!(server.control.get_ids_counts(), [1, 5, 3]);
        assert!(!client.is_closed());
    })
    .await
}

#[tokio::test]
async fn connect_errors() {
    bounded(async {
        // Nothing listens on a port we just released.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert!(matches!(Client::connect(port).await, Err(Error::Io(_))));

        // A server that refuses the handshake.
        let mut overloaded = Vec::new();
        idgen_protocol::encode_error(Status::OVERLOADED, "too many connections", &mut overloaded);
        let server = FakeServer::start(Config {
            hello_raw: Some(overloaded),
            ..Config::default()
        })
        .await;
        let e = Client::connect(server.addr).await.unwrap_err();
        assert_eq!(e.status(), Some(Status::OVERLOADED));
        assert!(e.is_unavailable());
    })
    .await
}

#[test]
fn blocking_client_works_from_plain_threads() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The fake server runs on its own runtime thread; the test threads have none.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_thread = std::thread::spawn(move || {
        rt.block_on(async move {
            let server = FakeServer::start(Config::default()).await;
            addr_tx.send(server.addr).unwrap();
            let _ = tokio::time::timeout(Duration::from_secs(20), stop_rx).await;
        })
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(5)).unwrap();

    let client = idgen_client::blocking::Client::connect(addr).unwrap();
    assert_eq!(client.hello().max_batch, 1000);
    assert_eq!(client.layout().sequence_bits(), 12);
    client.ping().unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let c = client.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for _ in 0..50 {
                    mine.push(c.next_id().unwrap());
                }
                mine.extend(c.next_ids(1500).unwrap());
                mine
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in threads {
        let mine = t.join().unwrap();
        assert!(strictly_increasing(&mine));
        all.extend(mine);
    }
    assert_eq!(all.len(), 4 * 1550);
    drop(client);

    // Connect failures come back as errors, not panics.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    assert!(matches!(
        idgen_client::blocking::Client::connect(port),
        Err(Error::Io(_))
    ));
    stop_tx.send(()).unwrap();
    server_thread.join().unwrap();
}

#[test]
fn clients_are_send_sync_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Client>();
    check::<idgen_client::blocking::Client>();
    check::<Error>();
}
