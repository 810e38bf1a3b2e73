//! Every decodable response vector of `protocol/tests/vectors.json`, replayed by the fake
//! server through the real client: the IDs, values, HELLO_OK fields and statuses the client
//! reports must be the vector's. Every VALUES vector a client must refuse is refused, and
//! every GET_VALUES request vector on an established connection is what the client sends
//! (or, for the refused ones, what it refuses to send).

mod support;

use std::time::Duration;

use idgen_client::{Client, ClientOptions, Error, Status};
use idgen_protocol::SeqMode;
use idgen_testkit::fake::{Action, Config, FakeServer};
use serde_json::Value;
use support::SeqNode;

const MAX: u64 = (1 << 63) - 1;

fn vectors() -> Vec<Value> {
    let text = include_str!("../../../protocol/tests/vectors.json");
    serde_json::from_str(text).unwrap()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn dec(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn response_vectors_agree_with_the_client() {
    let vectors = vectors();
    let mut checked = 0;
    for v in vectors.iter().filter(|v| v["direction"] == "response") {
        let Some(d) = v.get("decoded") else { continue };
        let name = v["name"].as_str().unwrap();
        let mut bytes = unhex(v["hex"].as_str().unwrap());
        if let Some(n) = v.get("consumed").and_then(Value::as_u64) {
            bytes.truncate(n as usize);
        }
        let run = async {
            match d["op"].as_str().unwrap() {
                "HELLO_OK" => {
                    let server = FakeServer::start(Config {
                        hello_raw: Some(bytes),
                        ..Config::default()
                    })
                    .await;
                    let client = Client::connect(server.addr).await.unwrap();
                    let h = client.hello();
                    let l = client.layout();
                    assert_eq!(h.version as u64, d["version"].as_u64().unwrap());
                    assert_eq!(l.epoch_ms(), dec(&d["epoch_ms"]));
                    assert_eq!(h.max_batch as u64, d["max_batch"].as_u64().unwrap());
                    assert_eq!(h.workers.first, d["worker_first"].as_u64().unwrap());
                    assert_eq!(h.shard as u64, d["shard"].as_u64().unwrap());
                    for (got, key) in [
                        (l.timestamp_bits(), "timestamp_bits"),
                        (l.worker_bits(), "worker_bits"),
                        (l.sequence_bits(), "sequence_bits"),
                        (l.region_bits(), "region_bits"),
                    ] {
                        assert_eq!(got as u64, d[key].as_u64().unwrap(), "{key}");
                    }
                }
                "IDS" => {
                    let want: Vec<u64> = d["ids"].as_array().unwrap().iter().map(dec).collect();
                    let server = FakeServer::start(Config::default()).await;
                    server.control.push(Action::Raw(bytes));
                    let client = Client::connect(server.addr).await.unwrap();
                    assert_eq!(client.next_ids(want.len() as u32).await.unwrap(), want);
                }
                "PONG" => {
                    // The client picks its own tokens, so check the decoder it uses.
                    let (r, _) = idgen_protocol::decode_response(&bytes, u32::MAX)
                        .unwrap()
                        .unwrap();
                    assert_eq!(r, idgen_protocol::ResponseRef::Pong(dec(&d["token"])));
                }
                "ERROR" => {
                    let server = FakeServer::start(Config::default()).await;
                    server.control.push(Action::Raw(bytes.clone()));
                    let client = Client::connect(server.addr).await.unwrap();
                    let e = client.next_id().await.unwrap_err();
                    let Error::Server { status, message } = &e else {
                        panic!("expected a server error, got {e:?}");
                    };
                    assert_eq!(*status, Status(d["status"].as_u64().unwrap() as u16));
                    assert_eq!(message, d["message"].as_str().unwrap());
                    let closes = d["closes"].as_bool().unwrap();
                    assert_eq!(e.closes_connection(), closes);
                    assert_eq!(e.is_unavailable(), d["retry_elsewhere"].as_bool().unwrap());
                    // The client honours the status even though this server stays open.
                    assert_eq!(client.is_closed(), closes);

                    // The same ERROR answering a GET_VALUES.
                    let node = SeqNode::start(support::Config::default()).await;
                    node.control.push(support::Step::Raw(bytes));
                    let client = Client::connect(node.addr).await.unwrap();
                    let e = client.next_value("x").await.unwrap_err();
                    assert_eq!(e.status(), Some(*status), "{name}");
                    assert_eq!(e.closes_connection(), closes);
                    assert_eq!(e.is_unavailable(), d["retry_elsewhere"].as_bool().unwrap());
                    assert_eq!(client.is_closed(), closes);
                }
                "VALUES" => {
                    let want: Vec<u64> = d["values"].as_array().unwrap().iter().map(dec).collect();
                    let node = SeqNode::start(support::Config::default()).await;
                    node.control.create("x", SeqMode::Dense, 1, MAX);
                    node.control.push(support::Step::Raw(bytes));
                    // The mode shows in what the next call asks for: a buffer of 8 for a
                    // dense sequence, exactly 1 for a strict one.
                    let client = Client::connect(node.addr)
                        .await
                        .unwrap()
                        .with_sequence_prefetch(8);
                    let got = client.next_values("x", want.len() as u32).await.unwrap();
                    assert_eq!(got, want, "{name}");
                    client.next_value("x").await.unwrap();
                    let next = match d["mode"].as_str().unwrap() {
                        "dense" => 8,
                        "strict" => 1,
                        mode => panic!("{name}: mode {mode}"),
                    };
                    assert_eq!(
                        node.control.counts("x"),
                        [want.len() as u32, next],
                        "{name}"
                    );
                }
                op => panic!("unknown op {op}"),
            }
        };
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap_or_else(|_| panic!("{name}: timed out"));
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} vectors checked");
}

#[tokio::test]
async fn values_vectors_a_client_must_refuse_are_refused() {
    let mut checked = 0;
    for v in vectors().iter().filter(|v| v["direction"] == "response") {
        let name = v["name"].as_str().unwrap();
        let bytes = unhex(v["hex"].as_str().unwrap());
        if bytes.get(4) != Some(&0x85) || v.get("error").is_none() {
            continue;
        }
        let status = Status(v["error"]["status"].as_u64().unwrap() as u16);
        let run = async {
            let node = SeqNode::start(support::Config::default()).await;
            node.control.create("x", SeqMode::Dense, 1, MAX);
            node.control.push(support::Step::Raw(bytes));
            let options = ClientOptions {
                request_timeout: Duration::from_secs(2),
                ..ClientOptions::default()
            };
            let client = Client::connect_with(node.addr, options).await.unwrap();
            // Refused as soon as the fault has arrived, not after a timeout.
            let e = client.next_value("x").await.unwrap_err();
            assert!(matches!(e, Error::Protocol(_)), "{name}: {e:?}");
            assert_eq!(e.status(), Some(status), "{name}");
            assert!(client.is_closed(), "{name}");
        };
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap_or_else(|_| panic!("{name}: timed out"));
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} vectors checked");
}

/// The GET_VALUES request vectors on an established connection: the client sends exactly
/// the vector's bytes for the vector's name and count, and refuses, sending nothing, what a
/// node would refuse for its arguments (INVALID_COUNT, BATCH_TOO_LARGE,
/// INVALID_SEQUENCE_NAME, a frame above the node's limit, a name of 0 or 65 bytes) or its
/// version (UNKNOWN_OPCODE below version 3).
#[tokio::test]
async fn get_values_request_vectors_agree_with_the_client() {
    let mut checked = 0;
    for v in vectors().iter().filter(|v| v["direction"] == "request") {
        let name = v["name"].as_str().unwrap();
        let bytes = unhex(v["hex"].as_str().unwrap());
        if v["connection"] != "established" || bytes.get(4) != Some(&0x05) {
            continue;
        }
        if v.get("incomplete").is_some() || bytes.len() < 9 {
            // No call makes a frame cut short, or one without a count.
            continue;
        }
        let version = v.get("version").and_then(Value::as_u64).unwrap_or(1) as u16;
        let limits = &v["limits"];
        let length = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let count = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        let seq = String::from_utf8_lossy(&bytes[9..(4 + length).min(bytes.len())]).into_owned();
        let run = async {
            let node = SeqNode::start(support::Config {
                version,
                max_batch: limits["max_batch"].as_u64().unwrap() as u32,
                max_request_frame: limits["max_request_frame"].as_u64().unwrap() as u32,
            })
            .await;
            node.control.create(&seq, SeqMode::Dense, 1, MAX);
            let client = Client::connect(node.addr).await.unwrap();
            let result = client.next_values(&seq, count).await;
            if v.get("decoded").is_some() {
                assert_eq!(v["decoded"]["name"].as_str().unwrap(), seq, "{name}");
                let values = result.unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(values.len(), count as usize, "{name}");
                let consumed = v.get("consumed").and_then(Value::as_u64);
                let sent = &bytes[..consumed.map_or(bytes.len(), |c| c as usize)];
                assert_eq!(node.control.frames(), [sent.to_vec()], "{name}");
            } else {
                let e = result.unwrap_err();
                if version < 3 {
                    assert!(
                        matches!(e, Error::NodeVersion { version: got, required: 3 } if got == version),
                        "{name}: {e:?}"
                    );
                } else {
                    assert!(matches!(e, Error::InvalidArgument(_)), "{name}: {e:?}");
                }
                assert!(node.control.frames().is_empty(), "{name}: sent");
            }
        };
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .unwrap_or_else(|_| panic!("{name}: timed out"));
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} vectors checked");
}
