//! Property tests: round trips, robustness on arbitrary bytes, and split-anywhere streams.

#[cfg(feature = "codec")]
use bytes::BytesMut;
use idgen_id::WorkerRange;
#[cfg(feature = "codec")]
use idgen_protocol::codec::{ClientCodec, ServerCodec};
use idgen_protocol::{
    decode_request, decode_response, encode_request, max_response_frame, truncate_message, Decoded,
    Limits, Request, Response, ServerHello, Status,
};
use proptest::prelude::*;
#[cfg(feature = "codec")]
use tokio_util::codec::Decoder;

const LIMITS: Limits = Limits {
    max_request_frame: 64,
    max_batch: 65536,
};
const MAX_FRAME: u32 = 5 + 8 * 65536;

fn arb_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u16>(), any::<u16>()).prop_map(|(min_version, max_version)| Request::Hello {
            min_version,
            max_version
        }),
        (1..=LIMITS.max_batch).prop_map(|count| Request::GetIds { count }),
        any::<u64>().prop_map(|token| Request::Ping { token }),
    ]
}

fn arb_hello() -> impl Strategy<Value = ServerHello> {
    (0u8..=63, 0u8..=63, prop_oneof![Just(63u8), 0u8..=63])
        .prop_filter("bits fit", |(t, w, width)| t + w <= *width)
        .prop_flat_map(|(t, w, width)| {
            (
                Just((t, w, width - t - w)),
                0..=w,
                any::<(u16, u64, u32, u32, u32, u32, u16)>(),
            )
        })
        .prop_map(
            |((t, w, s), r, (version, epoch_ms, mb, mrf, wf, wc, shard))| ServerHello {
                version,
                epoch_ms,
                timestamp_bits: t,
                worker_bits: w,
                sequence_bits: s,
                region_bits: r,
                max_batch: mb,
                max_request_frame: mrf,
                workers: WorkerRange::new(wf.into(), wc.into()),
                shard,
            },
        )
}

fn arb_response() -> impl Strategy<Value = Response> {
    prop_oneof![
        arb_hello().prop_map(Response::HelloOk),
        prop::collection::vec(0..=i64::MAX as u64, 1..64).prop_map(Response::Ids),
        any::<u64>().prop_map(Response::Pong),
        (any::<u16>(), ".{0,300}").prop_map(|(s, m)| Response::Error {
            status: Status(s),
            message: m
        }),
    ]
}

/// What a response decodes back to (ERROR messages are truncated by the encoder).
fn normalized(r: &Response) -> Response {
    match r {
        Response::Error { status, message } => Response::Error {
            status: *status,
            message: truncate_message(message).to_owned(),
        },
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn request_round_trip(r in arb_request()) {
        let mut b = Vec::new();
        encode_request(&r, &mut b);
        prop_assert_eq!(b.len(), r.encoded_len());
        for k in 0..b.len() {
            prop_assert_eq!(decode_request(&b[..k], &LIMITS), Ok(None));
        }
        prop_assert_eq!(decode_request(&b, &LIMITS), Ok(Some((Decoded::Request(r), b.len()))));
    }

    #[test]
    fn response_round_trip(r in arb_response()) {
        let mut b = Vec::new();
        r.encode(&mut b).unwrap();
        for k in 0..b.len() {
            prop_assert_eq!(decode_response(&b[..k], MAX_FRAME), Ok(None));
        }
        let (got, n) = decode_response(&b, MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(n, b.len());
        prop_assert_eq!(got.into_owned(), normalized(&r));
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..128),
        max_request_frame in any::<u32>(),
        max_batch in any::<u32>(),
        max_frame in any::<u32>(),
    ) {
        let limits = Limits { max_request_frame, max_batch };
        for l in [&limits, &LIMITS] {
            if let Ok(Some((_, n))) = decode_request(&bytes, l) {
                prop_assert!(n <= bytes.len() && n >= 5);
            }
        }
        for m in [max_frame, MAX_FRAME] {
            if let Ok(Some((_, n))) = decode_response(&bytes, m) {
                prop_assert!(n <= bytes.len() && n >= 5);
            }
        }
    }

    /// Frames that start well (valid length and opcode) but carry random bodies.
    #[test]
    fn plausible_frames_never_panic(
        op in prop::sample::select(vec![0x01u8, 0x02, 0x03, 0x04, 0x81, 0x82, 0x83, 0xFF]),
        body in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut b = ((body.len() + 1) as u32).to_be_bytes().to_vec();
        b.push(op);
        b.extend_from_slice(&body);
        if let Ok(Some((_, n))) = decode_request(&b, &LIMITS) {
            prop_assert_eq!(n, b.len());
        }
        if let Ok(Some((_, n))) = decode_response(&b, MAX_FRAME) {
            prop_assert_eq!(n, b.len());
        }
    }

    /// A pipelined stream cut into arbitrary chunks decodes to the same frames.
    #[test]
    #[cfg(feature = "codec")]
    fn split_request_stream(
        reqs in prop::collection::vec(arb_request(), 1..8),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut stream = Vec::new();
        Request::Hello { min_version: 1, max_version: 1 }.encode(&mut stream);
        let reqs: Vec<Request> = reqs.into_iter().filter(|r| !matches!(r, Request::Hello { .. })).collect();
        for r in &reqs {
            r.encode(&mut stream);
        }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(stream.len());
        points.sort_unstable();
        let mut codec = ServerCodec::new(LIMITS);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        for p in points {
            buf.extend_from_slice(&stream[at..p]);
            at = p;
            while let Some(d) = codec.decode(&mut buf).unwrap() {
                got.push(d);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got.len(), reqs.len() + 1);
        for (d, r) in got[1..].iter().zip(&reqs) {
            prop_assert_eq!(d, &Decoded::Request(*r));
        }
    }

    #[test]
    #[cfg(feature = "codec")]
    fn split_response_stream(
        resps in prop::collection::vec(arb_response(), 1..8),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut stream = Vec::new();
        for r in &resps {
            r.encode(&mut stream).unwrap();
        }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(stream.len());
        points.sort_unstable();
        // A fixed limit: HELLO_OK must not shrink it below the generated IDS frames.
        let mut codec = ClientCodec::with_max_frame(u32::MAX);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        for p in points {
            buf.extend_from_slice(&stream[at..p]);
            at = p;
            while let Some(r) = codec.decode(&mut buf).unwrap() {
                if let Response::HelloOk(_) = r {
                    codec = ClientCodec::with_max_frame(u32::MAX);
                }
                got.push(r);
            }
        }
        prop_assert!(buf.is_empty());
        let want: Vec<Response> = resps.iter().map(normalized).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn response_limit_boundary(max_batch in 0u32..100_000) {
        let m = max_response_frame(max_batch);
        prop_assert!(m >= 258);
        prop_assert!(u64::from(m) >= 5 + 8 * u64::from(max_batch));
    }
}
