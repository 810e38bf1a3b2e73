//! Connection-closing decode faults, and the one encoding fault.

use idgen_id::WorkerRange;

use crate::Status;

/// A fault that breaks the frame stream. The receiver answers (server side) with an ERROR
/// frame carrying [`FrameError::status`] and closes the connection; a client that sees one
/// while decoding responses drops the connection.
///
/// Request-level refusals that keep the connection open are not errors: the server-side
/// decoder reports them as [`Decoded::Reject`](crate::Decoded::Reject).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A length prefix of 0 (a frame must hold at least the opcode byte).
    #[error("frame length 0")]
    EmptyFrame,
    /// The length prefix exceeds the receiver's limit. Reported as soon as the four length
    /// bytes are present, without waiting for the body.
    #[error("frame length {length} exceeds limit {max}")]
    TooLarge {
        /// The length prefix received.
        length: u32,
        /// The receiver's limit.
        max: u32,
    },
    /// A known opcode with a length its layout does not allow.
    #[error("opcode {opcode:#04x}: frame length {length} is invalid (expected {expected})")]
    WrongLength {
        /// The opcode.
        opcode: u8,
        /// The length prefix received.
        length: u32,
        /// Human-readable expectation, e.g. `"9"` or `"3..=258"`.
        expected: &'static str,
    },
    /// HELLO whose magic is not `IDGN`.
    #[error("bad magic {0:02x?} (expected \"IDGN\")")]
    BadMagic([u8; 4]),
    /// The first frame on a connection was not HELLO.
    #[error("the first frame must be HELLO")]
    HandshakeRequired,
    /// A second HELLO on a connection that already completed its handshake.
    #[error("HELLO sent twice")]
    DuplicateHello,
    /// HELLO offered no version this server supports (or `min_version > max_version`).
    #[error("no common protocol version: client offers {min}..={max}, server supports {server_min}..={server_max}")]
    UnsupportedVersion {
        /// Client's `min_version`.
        min: u16,
        /// Client's `max_version`.
        max: u16,
        /// Lowest version this implementation supports.
        server_min: u16,
        /// Highest version this implementation supports.
        server_max: u16,
    },
    /// A response opcode unknown to this client.
    #[error("unknown response opcode {0:#04x}")]
    UnknownResponseOpcode(u8),
    /// An IDS frame whose count is 0 or disagrees with its length.
    #[error("IDS frame: count {count} does not match frame length {length}")]
    IdsCountMismatch {
        /// The count field.
        count: u32,
        /// The length prefix.
        length: u32,
    },
    /// An IDS frame carrying an ID with the top (sign) bit set.
    #[error("IDS frame: id #{index} has the top bit set")]
    IdTopBitSet {
        /// Zero-based index of the offending ID in the frame.
        index: u32,
    },
    /// An ERROR frame whose message is not UTF-8.
    #[error("ERROR frame message is not valid UTF-8")]
    InvalidUtf8,
    /// A RANGES frame that breaks its rules (runs empty, not increasing, overlapping,
    /// reaching the sign bit, or not summing to the total).
    #[error("RANGES frame: {0}")]
    BadRanges(&'static str),
    /// A VALUES frame that breaks its rules (count 0 or disagreeing with the length, a value
    /// of 0 or with the top bit set, values not strictly increasing).
    #[error("VALUES frame: {0}")]
    BadValues(&'static str),
    /// A UUIDS frame that breaks its rules (count 0 or disagreeing with the length, a UUID
    /// whose version is not 7 or whose variant is not RFC 9562's, UUIDs not strictly
    /// increasing).
    #[error("UUIDS frame: {0}")]
    BadUuids(&'static str),
    /// A MASKED_IDS frame that breaks its rules (count 0 or disagreeing with the length, a key
    /// ID above 61, a masked ID with the top bit set).
    #[error("MASKED_IDS frame: {0}")]
    BadMaskedIds(&'static str),
    /// A HELLO_OK whose layout is impossible (bits sum to more than 63, or region bits exceed
    /// worker bits).
    #[error("HELLO_OK layout is invalid: timestamp {timestamp_bits} + worker {worker_bits} + sequence {sequence_bits} bits (region {region_bits})")]
    BadLayout {
        /// `timestamp_bits` field.
        timestamp_bits: u8,
        /// `worker_bits` field.
        worker_bits: u8,
        /// `sequence_bits` field.
        sequence_bits: u8,
        /// `region_bits` field.
        region_bits: u8,
    },
}

impl FrameError {
    /// The wire status for this fault (all of them close the connection).
    pub const fn status(&self) -> Status {
        match self {
            FrameError::TooLarge { .. } => Status::FRAME_TOO_LARGE,
            FrameError::HandshakeRequired | FrameError::DuplicateHello => {
                Status::HANDSHAKE_REQUIRED
            }
            FrameError::UnsupportedVersion { .. } => Status::UNSUPPORTED_VERSION,
            FrameError::EmptyFrame
            | FrameError::WrongLength { .. }
            | FrameError::BadMagic(_)
            | FrameError::UnknownResponseOpcode(_)
            | FrameError::IdsCountMismatch { .. }
            | FrameError::IdTopBitSet { .. }
            | FrameError::InvalidUtf8
            | FrameError::BadRanges(_)
            | FrameError::BadValues(_)
            | FrameError::BadUuids(_)
            | FrameError::BadMaskedIds(_)
            | FrameError::BadLayout { .. } => Status::BAD_FRAME,
        }
    }
}

/// A HELLO_OK that cannot be encoded: the wire carries the worker range as two `u32`s
/// (`worker_first`, `worker_count`), and this range's first worker ID or count is beyond them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "worker range {0} cannot be announced: HELLO_OK carries its first worker ID and count as u32s"
)]
pub struct WorkersBeyondWire(pub WorkerRange);
