//! Every decodable response vector of `protocol/tests/vectors.json`, replayed by the fake
//! server through the real client: the IDs, HELLO_OK fields and statuses the client
//! reports must be the vector's.

use std::time::Duration;

use idgen_client::{Client, Error, Status};
use idgen_testkit::fake::{Action, Config, FakeServer};
use serde_json::Value;

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
    let text = include_str!("../../../protocol/tests/vectors.json");
    let vectors: Vec<Value> = serde_json::from_str(text).unwrap();
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
                    server.control.push(Action::Raw(bytes));
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
