//! Checks the Rust decoders and encoders against the shared vectors in `vectors.json`
//! (the same file every client implementation is tested against).

use std::collections::BTreeSet;

use idgen_id::WorkerRange;
use idgen_protocol::{
    decode_request_for, decode_response, encode_request, Decoded, IdsOptions, Limits, Request,
    Response, SeqMode, ServerConnState, ServerHello, Status,
};
use serde_json::Value;

fn vectors() -> Vec<Value> {
    // The shared vectors of versions 1 to 3, then version 4's (GET_UUIDS/UUIDS), kept apart
    // so that clients of version 3 check the file they implement.
    [
        include_str!("vectors.json"),
        include_str!("vectors_v4.json"),
        include_str!("vectors_v5.json"),
        // GET_VALUES_HERE: node to node, no client sends it (PROTOCOL.md §3.9).
        include_str!("vectors_peer.json"),
    ]
    .iter()
    .flat_map(|text| {
        serde_json::from_str::<Value>(text)
            .expect("the vectors parse")
            .as_array()
            .expect("the vectors are a list")
            .clone()
    })
    .collect()
}

fn uuid_hex(v: &Value) -> [u8; 16] {
    let bytes = unhex(v.as_str().expect("a UUID as 32 hex digits"));
    bytes.try_into().expect("16 bytes")
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn num<T: TryFrom<u64>>(v: &Value, key: &str) -> T {
    let n = v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is a number in {v}"));
    T::try_from(n)
        .ok()
        .unwrap_or_else(|| panic!("{key} out of range"))
}

fn dec_u64(v: &Value) -> u64 {
    v.as_str()
        .expect("u64 as decimal string")
        .parse()
        .expect("decimal u64")
}

fn request_from_json(d: &Value) -> Request {
    match d["op"].as_str().unwrap() {
        "HELLO" => Request::Hello {
            min_version: num(d, "min_version"),
            max_version: num(d, "max_version"),
        },
        "GET_IDS" => Request::GetIds {
            count: num(d, "count"),
        },
        "PING" => Request::Ping {
            token: dec_u64(&d["token"]),
        },
        "GET_UUIDS" => Request::GetUuids {
            count: num(d, "count"),
        },
        "GET_IDS_WITH" => Request::GetIdsWith(IdsOptions {
            count: num(d, "count"),
            after: d.get("after").map(dec_u64),
            key: d
                .get("key")
                .map(|k| k.as_str().unwrap().parse().expect("a key")),
            masked: d["masked"].as_bool().expect("masked"),
        }),
        "GET_VALUES" => Request::GetValues {
            count: num(d, "count"),
            name: d["name"]
                .as_str()
                .unwrap()
                .parse()
                .expect("a sequence name"),
        },
        "GET_VALUES_HERE" => Request::GetValuesHere {
            count: num(d, "count"),
            name: d["name"]
                .as_str()
                .unwrap()
                .parse()
                .expect("a sequence name"),
        },
        op => panic!("unknown request op {op}"),
    }
}

fn response_from_json(d: &Value) -> Response {
    match d["op"].as_str().unwrap() {
        "HELLO_OK" => Response::HelloOk(ServerHello {
            version: num(d, "version"),
            epoch_ms: dec_u64(&d["epoch_ms"]),
            timestamp_bits: num(d, "timestamp_bits"),
            worker_bits: num(d, "worker_bits"),
            sequence_bits: num(d, "sequence_bits"),
            region_bits: num(d, "region_bits"),
            max_batch: num(d, "max_batch"),
            max_request_frame: num(d, "max_request_frame"),
            workers: WorkerRange::new(
                num::<u32>(d, "worker_first").into(),
                num::<u32>(d, "worker_count").into(),
            ),
            shard: num(d, "shard"),
        }),
        "IDS" => Response::Ids(d["ids"].as_array().unwrap().iter().map(dec_u64).collect()),
        "PONG" => Response::Pong(dec_u64(&d["token"])),
        "MASKED_IDS" => Response::MaskedIds {
            key_id: num(d, "key_id"),
            ids: d["ids"].as_array().unwrap().iter().map(dec_u64).collect(),
        },
        "UUIDS" => Response::Uuids(
            d["uuids"]
                .as_array()
                .unwrap()
                .iter()
                .map(uuid_hex)
                .collect(),
        ),
        "VALUES" => Response::Values {
            mode: match d["mode"].as_str().unwrap() {
                "dense" => SeqMode::Dense,
                "strict" => SeqMode::Strict,
                m => panic!("mode {m}"),
            },
            values: d["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(dec_u64)
                .collect(),
        },
        "ERROR" => {
            let status = Status(num(d, "status"));
            assert_eq!(status.name(), d["name"].as_str(), "name of {status}");
            assert_eq!(Some(status.closes_connection()), d["closes"].as_bool());
            assert_eq!(
                Some(status.retry_elsewhere()),
                d["retry_elsewhere"].as_bool()
            );
            Response::Error {
                status,
                message: d["message"].as_str().unwrap().to_owned(),
            }
        }
        op => panic!("unknown response op {op}"),
    }
}

/// The expected error's status, after checking its name and `closes` flag agree with the
/// Rust status table.
fn expected_error(e: &Value) -> Status {
    let status = Status(num(e, "status"));
    assert_eq!(status.name(), e["name"].as_str(), "name of {status}");
    assert_eq!(
        Some(status.closes_connection()),
        e["closes"].as_bool(),
        "closes for {status}"
    );
    status
}

fn check_request(case: &Value, bytes: &[u8]) {
    let l = &case["limits"];
    let limits = Limits {
        max_request_frame: num(l, "max_request_frame"),
        max_batch: num(l, "max_batch"),
    };
    let mut state = ServerConnState::new();
    // The version an established connection negotiated (1 when the case names none).
    let version = case
        .get("version")
        .map_or(1, |_| num::<u16>(case, "version"));
    match case["connection"].as_str().unwrap() {
        "new" => assert!(
            case.get("version").is_none(),
            "a new connection has no version"
        ),
        "established" => state
            .check(&Decoded::Request(Request::Hello {
                min_version: version,
                max_version: version,
            }))
            .unwrap(),
        other => panic!("connection {other}"),
    }
    let result = decode_request_for(bytes, &limits, state.version().unwrap_or(1));
    if case["incomplete"] == Value::Bool(true) {
        assert_eq!(result, Ok(None));
        return;
    }
    let consumed = case["consumed"]
        .as_u64()
        .map_or(bytes.len(), |n| n as usize);
    if let Some(e) = case.get("error") {
        let want = expected_error(e);
        let got = match result {
            Err(err) => err.status(),
            Ok(Some((decoded, n))) => {
                assert_eq!(n, consumed);
                match (state.check(&decoded), decoded) {
                    (Err(err), _) => err.status(),
                    (Ok(()), Decoded::Reject { status, .. }) => status,
                    (Ok(()), d) => panic!("accepted {d:?}"),
                }
            }
            Ok(None) => panic!("incomplete, expected {want}"),
        };
        assert_eq!(got, want);
        return;
    }
    let want = request_from_json(&case["decoded"]);
    let (decoded, n) = result.expect("decodes").expect("complete");
    assert_eq!(decoded, Decoded::Request(want));
    assert_eq!(n, consumed);
    state.check(&decoded).expect("accepted by the connection");
    if let Some(v) = case.get("negotiated_version") {
        assert_eq!(state.version().map(u64::from), v.as_u64());
    }
    let mut encoded = Vec::new();
    encode_request(&want, &mut encoded);
    assert_eq!(encoded, &bytes[..n], "byte-exact encode");
}

fn check_response(case: &Value, bytes: &[u8]) {
    let max_frame: u32 = num(case, "max_frame");
    let result = decode_response(bytes, max_frame);
    if case["incomplete"] == Value::Bool(true) {
        assert_eq!(result, Ok(None));
        return;
    }
    if let Some(e) = case.get("error") {
        let want = expected_error(e);
        assert!(
            e["closes"].as_bool().unwrap(),
            "response faults always close"
        );
        assert_eq!(result.map(|_| ()).unwrap_err().status(), want);
        return;
    }
    let consumed = case["consumed"]
        .as_u64()
        .map_or(bytes.len(), |n| n as usize);
    let want = response_from_json(&case["decoded"]);
    let (got, n) = result.expect("decodes").expect("complete");
    assert_eq!(n, consumed);
    assert_eq!(got.into_owned(), want);
    let mut encoded = Vec::new();
    want.encode(&mut encoded).unwrap();
    assert_eq!(encoded, &bytes[..n], "byte-exact encode");
}

#[test]
fn every_vector() {
    let cases = vectors();
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let bytes = unhex(case["hex"].as_str().expect("hex"));
        let outcomes = ["decoded", "error", "incomplete"]
            .iter()
            .filter(|k| case.get(**k).is_some())
            .count();
        assert_eq!(
            outcomes, 1,
            "{name}: exactly one of decoded/error/incomplete"
        );
        let run = std::panic::catch_unwind(|| match case["direction"].as_str() {
            Some("request") => check_request(case, &bytes),
            Some("response") => check_response(case, &bytes),
            other => panic!("direction {other:?}"),
        });
        if run.is_err() {
            panic!("vector {name} failed");
        }
    }
}

#[test]
fn vectors_cover_the_protocol() {
    let cases = vectors();
    assert!(cases.len() >= 25);
    let names: BTreeSet<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), cases.len(), "names are unique");

    let mut ops = BTreeSet::new();
    let mut statuses = BTreeSet::new();
    for c in &cases {
        if let Some(d) = c.get("decoded") {
            ops.insert(d["op"].as_str().unwrap().to_owned());
            if let Some(s) = d.get("status") {
                statuses.insert(s.as_u64().unwrap() as u16);
            }
        }
        if let Some(e) = c.get("error") {
            statuses.insert(e["status"].as_u64().unwrap() as u16);
        }
    }
    for op in [
        "HELLO",
        "GET_IDS",
        "PING",
        "GET_VALUES",
        "GET_VALUES_HERE",
        "HELLO_OK",
        "IDS",
        "PONG",
        "VALUES",
        "GET_UUIDS",
        "UUIDS",
        "GET_IDS_WITH",
        "MASKED_IDS",
        "ERROR",
    ] {
        assert!(ops.contains(op), "no vector decodes {op}");
    }
    for info in Status::TABLE {
        assert!(
            statuses.contains(&info.status.0),
            "no vector for {}",
            info.status
        );
    }
    // Both directions have incomplete cases and 4 GiB prefixes.
    for dir in ["request", "response"] {
        assert!(cases
            .iter()
            .any(|c| c["direction"] == dir && c["incomplete"] == Value::Bool(true)));
        assert!(cases
            .iter()
            .any(|c| c["direction"] == dir && c["hex"] == "ffffffff"));
    }
}

/// The width of an announced layout: a 53-bit (JavaScript-safe) layout is one HELLO_OK may
/// carry, a sum over 63 is not.
#[test]
fn hello_ok_layouts_of_every_width_up_to_63() {
    let cases = vectors();
    let case = |name: &str| {
        let c = cases
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no vector {name}"));
        decode_response(&unhex(c["hex"].as_str().unwrap()), num(c, "max_frame"))
            .map(|r| r.map(|(r, _)| r.into_owned()))
    };
    let Ok(Some(Response::HelloOk(hello))) = case("hello_ok_53_bit_layout") else {
        panic!("the 53-bit layout decodes");
    };
    let layout = hello.layout().unwrap();
    assert_eq!(layout.id_bits(), 53);
    assert!(layout.is_js_safe());
    assert_eq!(layout.max_id().get(), (1 << 53) - 1);
    let Err(e) = case("hello_ok_bits_over_63") else {
        panic!("a sum of 64 is refused");
    };
    assert_eq!(e.status(), Status::BAD_FRAME);
    assert!(
        e.to_string().contains("41 + worker 10 + sequence 13"),
        "{e}"
    );
}
