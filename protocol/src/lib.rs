//! The idgen wire protocol, sans-IO.
//!
//! This crate turns bytes into frames and frames into bytes for both ends of an idgen
//! connection. It contains no networking code, reads no clock and starts no runtime:
//! decoders take a `&[u8]` and return `Ok(None)` when the frame is not complete yet,
//! encoders write into any [`bytes::BufMut`]. The decode hot path does not allocate.
//! The normative specification, byte by byte, is `PROTOCOL.md` next to this crate's
//! `Cargo.toml`; the shared test vectors are `tests/vectors.json`.
//!
//! Every frame is `u32 length` (big-endian) followed by `length` bytes: a one-byte opcode
//! and its payload.
//!
//! | side | decode | encode |
//! |---|---|---|
//! | server | [`decode_request`] → [`Decoded`], plus [`ServerConnState`] for HELLO-first | [`encode_hello_ok`], [`encode_ids_header`], [`encode_ids`], [`encode_pong`], [`encode_error`] |
//! | client | [`decode_response`] → [`ResponseRef`] | [`encode_request`] |
//! | client, with the conversation | [`client::Handshake`] → [`client::ClientConn::decode`] → [`client::Answer`] | [`client::Handshake::hello`], [`client::ClientConn::get_ids`] |
//!
//! [`client`] is the client side of a whole connection, still sans-IO: the handshake, the
//! requests outstanding, each answer matched to its request, and every ERROR read once from
//! [`Status::TABLE`] as what to do next ([`client::After`]).
//!
//! With the `codec` feature, `codec` wraps these as `tokio-util` codecs. Wire status codes
//! are [`Status`].
//!
//! # Example
//!
//! ```
//! use idgen_protocol::{
//!     decode_request, decode_response, encode_ids_header, encode_request, Decoded, Limits,
//!     Request, ResponseRef,
//! };
//! use bytes::BufMut;
//!
//! // Client: ask for three IDs.
//! let mut wire = Vec::new();
//! encode_request(&Request::GetIds { count: 3 }, &mut wire);
//! assert_eq!(wire, [0, 0, 0, 5, 0x02, 0, 0, 0, 3]);
//!
//! // Server: an incomplete frame is Ok(None), never an error.
//! let limits = Limits::default();
//! assert_eq!(decode_request(&wire[..6], &limits), Ok(None));
//! let (decoded, consumed) = decode_request(&wire, &limits).unwrap().unwrap();
//! assert_eq!(consumed, 9);
//! let Decoded::Request(Request::GetIds { count }) = decoded else { unreachable!() };
//!
//! // Server: answer with the IDS head, then the IDs themselves.
//! let mut answer = Vec::new();
//! encode_ids_header(count, &mut answer);
//! for id in [100u64, 101, 102] {
//!     answer.put_u64(id);
//! }
//!
//! // Client: decode the answer without copying the IDs.
//! let max_frame = idgen_protocol::max_response_frame(limits.max_batch);
//! let (response, used) = decode_response(&answer, max_frame).unwrap().unwrap();
//! assert_eq!(used, answer.len());
//! let ResponseRef::Ids(ids) = response else { unreachable!() };
//! assert_eq!(ids.iter().collect::<Vec<u64>>(), [100, 101, 102]);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
#[cfg(feature = "codec")]
pub mod codec;
mod error;
mod request;
mod response;
mod status;

pub use error::{FrameError, WorkersBeyondWire};
pub use request::{
    decode_request, decode_request_for, encode_request, Decoded, IdemKey, IdemKeyError, IdsOptions,
    Request, SeqName, SeqNameError, ServerConnState, GET_IDS_LEN, GET_IDS_WITH_MIN_LEN,
    GET_RANGES_LEN, GET_UUIDS_LEN, GET_VALUES_MAX_LEN, GET_VALUES_MIN_LEN, HELLO_LEN,
    MAX_SEQ_NAME_LEN, MAX_VALUES_PER_CALL, PING_LEN,
};
pub use response::{
    decode_response, encode_error, encode_hello_ok, encode_ids, encode_ids_header,
    encode_masked_ids, encode_masked_ids_header, encode_pong, encode_ranges, encode_uuids,
    encode_uuids_header, encode_values, encode_values_header, max_response_frame,
    max_response_frame_for, truncate_message, IdsIter, IdsRef, MaskedIdsRef, RangesIter, RangesRef,
    Response, ResponseRef, SeqMode, ServerHello, UuidsIter, UuidsRef, ValuesRef, HELLO_OK_LEN,
    MAX_ERROR_LEN, MAX_ERROR_MESSAGE, MAX_IDS_PER_FRAME, MAX_MASK_KEY_ID, MAX_UUIDS_PER_FRAME,
    MAX_VALUES_PER_FRAME, PONG_LEN,
};
pub use status::{Status, StatusInfo};

// Re-exported because `ServerHello` hands these out: its users need no `idgen-id` of their own.
/// The ID model HELLO_OK announces ([`ServerHello::layout`], [`ServerHello::workers`]).
pub use idgen_id::{Layout, LayoutError, Parts, UuidError, UuidParts, WorkerRange};

/// Magic bytes at the start of the HELLO payload.
pub const MAGIC: [u8; 4] = *b"IDGN";
/// The newest protocol version this crate implements (version 2 adds GET_RANGES/RANGES,
/// version 3 GET_VALUES/VALUES: named sequences, version 4 GET_UUIDS/UUIDS: version 7 UUIDs,
/// version 5 GET_IDS_WITH/MASKED_IDS: IDs after a given one, idempotency keys, masked IDs).
pub const PROTOCOL_VERSION: u16 = 5;
/// Lowest version this implementation can speak.
pub const MIN_SUPPORTED_VERSION: u16 = 1;
/// Highest version this implementation can speak.
pub const MAX_SUPPORTED_VERSION: u16 = PROTOCOL_VERSION;

/// Request opcode `HELLO`.
pub const OP_HELLO: u8 = 0x01;
/// Request opcode `GET_IDS`.
pub const OP_GET_IDS: u8 = 0x02;
/// Request opcode `PING`.
pub const OP_PING: u8 = 0x03;
/// Request opcode `GET_RANGES` (version 2; version 1 decodes it as an unknown opcode).
pub const OP_GET_RANGES: u8 = 0x04;
/// Request opcode `GET_VALUES` (version 3; earlier versions decode it as an unknown opcode).
pub const OP_GET_VALUES: u8 = 0x05;
/// Request opcode `GET_UUIDS` (version 4; earlier versions decode it as an unknown opcode).
pub const OP_GET_UUIDS: u8 = 0x06;
/// Request opcode `GET_IDS_WITH` (version 5; earlier versions decode it as an unknown
/// opcode): GET_IDS with options ([`OPT_AFTER`], [`OPT_KEY`], [`OPT_MASKED`]).
pub const OP_GET_IDS_WITH: u8 = 0x07;
/// Request opcode `GET_VALUES_HERE` (node to node, on a version 3+ connection; a node that
/// does not know it answers `UNKNOWN_OPCODE`): GET_VALUES answered from the receiving node's
/// own reservations, never forwarded to another node.
pub const OP_GET_VALUES_HERE: u8 = 0x08;
/// GET_IDS_WITH option: an 8-byte ID follows the options byte; every ID answered is greater.
pub const OPT_AFTER: u8 = 0x01;
/// GET_IDS_WITH option: an idempotency key follows (a length byte, then 1 to
/// [`MAX_IDEMPOTENCY_KEY_LEN`] visible ASCII bytes).
pub const OPT_KEY: u8 = 0x02;
/// GET_IDS_WITH option: answer the IDs masked (MASKED_IDS) with the node's current key.
pub const OPT_MASKED: u8 = 0x04;
/// The longest idempotency key (bytes), on the protocol and the HTTP API alike.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 64;
/// The former name of [`OP_GET_RANGES`], from when version 1 only reserved it.
pub const OP_GET_RANGES_RESERVED: u8 = OP_GET_RANGES;
/// Response opcode `HELLO_OK`.
pub const OP_HELLO_OK: u8 = 0x81;
/// Response opcode `IDS`.
pub const OP_IDS: u8 = 0x82;
/// Response opcode `PONG`.
pub const OP_PONG: u8 = 0x83;
/// Response opcode `RANGES` (version 2).
pub const OP_RANGES: u8 = 0x84;
/// Response opcode `VALUES` (version 3).
pub const OP_VALUES: u8 = 0x85;
/// Response opcode `UUIDS` (version 4).
pub const OP_UUIDS: u8 = 0x86;
/// Response opcode `MASKED_IDS` (version 5): masked IDs and the key ID that masked them.
pub const OP_MASKED_IDS: u8 = 0x87;
/// Response opcode `ERROR`.
pub const OP_ERROR: u8 = 0xFF;

/// The whole frame of `GET_IDS` for one ID: the commonest pipelined request, which a server's
/// fast path may recognise by comparing bytes (a test checks it is what [`encode_request`]
/// writes).
pub const SINGLE_ID_REQUEST: [u8; 9] = [0, 0, 0, 5, OP_GET_IDS, 0, 0, 0, 1];
/// The header of `IDS` answering one ID: the 8-byte ID follows (a test checks it is what
/// [`encode_ids_header`] writes).
pub const SINGLE_ID_HEADER: [u8; 9] = [0, 0, 0, 13, OP_IDS, 0, 0, 0, 1];

/// Default largest request frame length the server accepts: room for the longest GET_VALUES
/// (69 bytes: a 64-byte name), with some to spare.
pub const DEFAULT_MAX_REQUEST_FRAME: u32 = 128;
/// Default largest GET_IDS count the server accepts.
pub const DEFAULT_MAX_BATCH: u32 = 65536;

/// Server-side decode limits (announced to the client in HELLO_OK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Largest request frame `length` accepted; larger prefixes are `FRAME_TOO_LARGE`.
    pub max_request_frame: u32,
    /// Largest GET_IDS `count` accepted; larger counts are `BATCH_TOO_LARGE`.
    pub max_batch: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_frame: DEFAULT_MAX_REQUEST_FRAME,
            max_batch: DEFAULT_MAX_BATCH,
        }
    }
}

impl Limits {
    /// The response frame limit a client should use against these limits.
    pub const fn max_response_frame(&self) -> u32 {
        max_response_frame(self.max_batch)
    }
}

/// The version a server speaking `MIN_SUPPORTED_VERSION..=MAX_SUPPORTED_VERSION` picks for
/// a HELLO offering `min..=max`: the highest common one, or `None`.
pub const fn negotiate_version(min: u16, max: u16) -> Option<u16> {
    let hi = if max < MAX_SUPPORTED_VERSION {
        max
    } else {
        MAX_SUPPORTED_VERSION
    };
    let lo = if min > MIN_SUPPORTED_VERSION {
        min
    } else {
        MIN_SUPPORTED_VERSION
    };
    if lo <= hi {
        Some(hi)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_id_frames_are_what_the_encoders_write() {
        let mut request = Vec::new();
        encode_request(&Request::GetIds { count: 1 }, &mut request);
        assert_eq!(request, SINGLE_ID_REQUEST);
        let mut header = Vec::new();
        encode_ids_header(1, &mut header);
        assert_eq!(header, SINGLE_ID_HEADER);
        let mut answer = Vec::new();
        encode_ids(&[0x0102_0304_0506_0708], &mut answer);
        assert_eq!(answer[..SINGLE_ID_HEADER.len()], SINGLE_ID_HEADER);
        assert_eq!(answer.len(), SINGLE_ID_HEADER.len() + 8);
    }

    #[test]
    fn negotiation() {
        assert_eq!(negotiate_version(1, 1), Some(1));
        assert_eq!(negotiate_version(0, 7), Some(5));
        assert_eq!(negotiate_version(1, u16::MAX), Some(5));
        assert_eq!(negotiate_version(2, 7), Some(5));
        assert_eq!(negotiate_version(5, 5), Some(5));
        assert_eq!(negotiate_version(1, 3), Some(3));
        assert_eq!(negotiate_version(4, 4), Some(4));
        assert_eq!(negotiate_version(1, 2), Some(2));
        assert_eq!(negotiate_version(3, 3), Some(3));
        assert_eq!(negotiate_version(6, 7), None);
        assert_eq!(negotiate_version(0, 0), None);
        assert_eq!(negotiate_version(1, 0), None);
    }

    #[test]
    fn default_limits() {
        let l = Limits::default();
        assert_eq!(l.max_request_frame, 128);
        assert!(l.max_request_frame >= GET_VALUES_MAX_LEN);
        assert_eq!(l.max_batch, 65536);
        assert_eq!(l.max_response_frame(), 6 + 8 * 65536);
    }
}

/// The examples of `README.md`, compiled (and, where they need no server, run) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
