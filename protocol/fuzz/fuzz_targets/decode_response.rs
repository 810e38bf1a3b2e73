//! `decode_response` never panics, never claims more than its input, round-trips what it
//! accepts, and never accepts what PROTOCOL.md forbids.
#![no_main]

use bytes::BytesMut;
use idgen_protocol::{decode_response, max_response_frame, ResponseRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (max_frame, buf) = match data {
        [a, rest @ ..] => (max_response_frame(u32::from(*a) * 64), rest),
        _ => (max_response_frame(0), data),
    };
    let Ok(Some((resp, used))) = decode_response(buf, max_frame) else {
        return;
    };
    assert!(used <= buf.len() && used >= 5, "consumed {used} of {}", buf.len());
    let length = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    assert_eq!(used, 4 + length as usize);
    assert!(length <= max_frame);
    match &resp {
        ResponseRef::Ids(ids) => {
            assert!(!ids.is_empty());
            assert!(ids.iter().all(|id| id >> 63 == 0), "IDS with the top bit set");
            assert_eq!(5 + 8 * ids.len(), length as usize);
        }
        ResponseRef::HelloOk(h) => {
            assert_eq!(
                u32::from(h.timestamp_bits) + u32::from(h.worker_bits) + u32::from(h.sequence_bits),
                63
            );
            assert!(h.region_bits <= h.worker_bits);
        }
        ResponseRef::Error { message, .. } => assert!(message.len() <= 255),
        ResponseRef::Pong(_) => {}
    }
    let owned = resp.into_owned();
    let mut out = BytesMut::new();
    owned.encode(&mut out).expect("a decoded HELLO_OK's worker range fits the wire");
    assert_eq!(&out[..], &buf[..used], "re-encoding differs");
    let (again, n) = decode_response(&out, max_frame).unwrap().unwrap();
    assert_eq!(n, used);
    assert_eq!(again.into_owned(), owned);
});
