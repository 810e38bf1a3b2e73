//! `decode_request` never panics, never claims more than its input, round-trips what it
//! accepts, and never accepts what PROTOCOL.md forbids.
#![no_main]

use bytes::BytesMut;
use idgen_protocol::{decode_request, encode_request, Decoded, Limits, Request, Status};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first two bytes pick the limits, so small and large batch limits are both explored.
    let (limits, buf) = match data {
        [a, b, rest @ ..] => (
            Limits {
                max_request_frame: 9 + u32::from(*a % 64),
                max_batch: 1 + u32::from(*b) * 257,
            },
            rest,
        ),
        _ => (Limits::default(), data),
    };
    let Ok(Some((decoded, used))) = decode_request(buf, &limits) else {
        return;
    };
    assert!(used <= buf.len() && used >= 5, "consumed {used} of {}", buf.len());
    let length = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    assert_eq!(used, 4 + length as usize);
    assert!(length >= 1 && length <= limits.max_request_frame);
    match decoded {
        Decoded::Request(req) => {
            if let Request::GetIds { count } = req {
                assert!((1..=limits.max_batch).contains(&count), "accepted count {count}");
            }
            if let Request::Hello { .. } = req {
                assert_eq!(&buf[5..9], b"IDGN");
            }
            let mut out = BytesMut::new();
            encode_request(&req, &mut out);
            assert_eq!(&out[..], &buf[..used], "re-encoding differs");
            let again = decode_request(&out, &limits).unwrap().unwrap();
            assert_eq!(again, (Decoded::Request(req), used));
        }
        Decoded::Reject { status, .. } => {
            assert!(!status.closes_connection());
            assert!(
                [Status::INVALID_COUNT, Status::BATCH_TOO_LARGE, Status::UNKNOWN_OPCODE]
                    .contains(&status)
            );
        }
    }
});
