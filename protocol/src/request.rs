//! Requests (client → server): server-side decoding, client-side encoding, and the
//! per-connection HELLO-first rule.

use bytes::BufMut;

use crate::{
    negotiate_version, FrameError, Limits, Status, MAGIC, MAX_IDEMPOTENCY_KEY_LEN,
    MAX_SUPPORTED_VERSION, MIN_SUPPORTED_VERSION, OPT_AFTER, OPT_KEY, OPT_MASKED, OP_GET_IDS,
    OP_GET_IDS_WITH, OP_GET_RANGES, OP_GET_UUIDS, OP_GET_VALUES, OP_GET_VALUES_HERE, OP_HELLO,
    OP_PING,
};

/// The longest sequence name GET_VALUES carries.
pub const MAX_SEQ_NAME_LEN: usize = 64;
/// The most values one GET_VALUES asks for, whatever the server's `max_batch`.
pub const MAX_VALUES_PER_CALL: u32 = 1 << 20;

/// The name of a sequence as GET_VALUES carries it: 1 to [`MAX_SEQ_NAME_LEN`] bytes of `a-z`,
/// `0-9`, `.`, `_` and `-`, the first a letter or a digit (`invoice.tenant-42`). Kept inline
/// (no allocation), so a decoded request stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeqName {
    len: u8,
    bytes: [u8; MAX_SEQ_NAME_LEN],
}

/// Why bytes are not a sequence name (the server answers `INVALID_SEQUENCE_NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SeqNameError {
    /// No bytes.
    #[error("a sequence name is 1 to 64 bytes, not empty")]
    Empty,
    /// More than [`MAX_SEQ_NAME_LEN`] bytes.
    #[error("a sequence name is at most 64 bytes")]
    TooLong,
    /// A byte outside `a-z 0-9 . _ -`, or a first byte that is not a letter or a digit.
    #[error("a sequence name is a-z, 0-9, '.', '_' and '-', starting with a letter or a digit")]
    BadByte,
}

impl SeqName {
    /// Checks `bytes` against the name rule.
    pub fn new(bytes: &[u8]) -> Result<SeqName, SeqNameError> {
        match bytes.len() {
            0 => return Err(SeqNameError::Empty),
            n if n > MAX_SEQ_NAME_LEN => return Err(SeqNameError::TooLong),
            _ => {}
        }
        let allowed = |b: &u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-');
        if !bytes.iter().all(allowed) || !bytes[0].is_ascii_alphanumeric() {
            return Err(SeqNameError::BadByte);
        }
        let mut name = SeqName {
            len: bytes.len() as u8,
            bytes: [0; MAX_SEQ_NAME_LEN],
        };
        name.bytes[..bytes.len()].copy_from_slice(bytes);
        Ok(name)
    }

    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The name (always ASCII).
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes pass `new`.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl std::str::FromStr for SeqName {
    type Err = SeqNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SeqName::new(s.as_bytes())
    }
}

impl std::fmt::Debug for SeqName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SeqName({:?})", self.as_str())
    }
}

impl std::fmt::Display for SeqName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An idempotency key as GET_IDS_WITH carries it: 1 to [`MAX_IDEMPOTENCY_KEY_LEN`] visible
/// ASCII bytes (`!` to `~`). Kept inline, so a decoded request stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdemKey {
    len: u8,
    bytes: [u8; MAX_IDEMPOTENCY_KEY_LEN],
}

/// Why bytes are not an idempotency key (the server answers `INVALID_OPTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdemKeyError {
    /// No bytes, or more than [`MAX_IDEMPOTENCY_KEY_LEN`].
    #[error("an idempotency key is 1 to 64 bytes")]
    Length,
    /// A byte that is not visible ASCII.
    #[error("an idempotency key is visible ASCII characters (no spaces)")]
    BadByte,
}

impl IdemKey {
    /// Checks `bytes` against the key rule.
    pub fn new(bytes: &[u8]) -> Result<IdemKey, IdemKeyError> {
        if bytes.is_empty() || bytes.len() > MAX_IDEMPOTENCY_KEY_LEN {
            return Err(IdemKeyError::Length);
        }
        if !bytes.iter().all(u8::is_ascii_graphic) {
            return Err(IdemKeyError::BadByte);
        }
        let mut key = IdemKey {
            len: bytes.len() as u8,
            bytes: [0; MAX_IDEMPOTENCY_KEY_LEN],
        };
        key.bytes[..bytes.len()].copy_from_slice(bytes);
        Ok(key)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The key (always ASCII).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl std::str::FromStr for IdemKey {
    type Err = IdemKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IdemKey::new(s.as_bytes())
    }
}

impl std::fmt::Debug for IdemKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdemKey({:?})", self.as_str())
    }
}

/// What a GET_IDS_WITH asks for (version 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdsOptions {
    /// Number of IDs (`1..=max_batch` once decoded).
    pub count: u32,
    /// Every ID answered is greater than this one ([`OPT_AFTER`]).
    pub after: Option<u64>,
    /// The idempotency key ([`OPT_KEY`]).
    pub key: Option<IdemKey>,
    /// Answer masked IDs (MASKED_IDS) instead of IDS ([`OPT_MASKED`]).
    pub masked: bool,
}

impl IdsOptions {
    /// `count` IDs, no option.
    pub const fn new(count: u32) -> Self {
        IdsOptions {
            count,
            after: None,
            key: None,
            masked: false,
        }
    }

    /// The options byte.
    pub const fn options_byte(&self) -> u8 {
        (if self.after.is_some() { OPT_AFTER } else { 0 })
            | (if self.key.is_some() { OPT_KEY } else { 0 })
            | (if self.masked { OPT_MASKED } else { 0 })
    }

    /// The frame length (opcode and payload) these options encode to.
    pub const fn frame_len(&self) -> u32 {
        GET_IDS_WITH_MIN_LEN
            + if self.after.is_some() { 8 } else { 0 }
            + match self.key {
                Some(k) => 1 + k.len as u32,
                None => 0,
            }
    }
}

/// A usable request, as decoded by [`decode_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// `0x01 HELLO`: opens the connection and offers a version range.
    Hello {
        /// Lowest protocol version the client speaks.
        min_version: u16,
        /// Highest protocol version the client speaks.
        max_version: u16,
    },
    /// `0x02 GET_IDS`: ask for `count` IDs (`1..=max_batch` once decoded).
    GetIds {
        /// Number of IDs requested.
        count: u32,
    },
    /// `0x03 PING`: liveness check; answered by PONG with the same token.
    Ping {
        /// Opaque token echoed back.
        token: u64,
    },
    /// `0x04 GET_RANGES` (version 2): ask for `count` IDs answered as runs of consecutive
    /// integers (RANGES) instead of one by one.
    GetRanges {
        /// Number of IDs requested.
        count: u32,
    },
    /// `0x05 GET_VALUES` (version 3): ask for `count` values of the named sequence.
    GetValues {
        /// Number of values requested.
        count: u32,
        /// The sequence.
        name: SeqName,
    },
    /// `0x06 GET_UUIDS` (version 4): ask for `count` version 7 UUIDs, each made from one ID
    /// the connection's shard issues (UUIDS).
    GetUuids {
        /// Number of UUIDs requested.
        count: u32,
    },
    /// `0x07 GET_IDS_WITH` (version 5): ask for IDs with options: greater than an ID seen,
    /// under an idempotency key, masked.
    GetIdsWith(IdsOptions),
    /// `0x08 GET_VALUES_HERE` (node to node, version 3+): GET_VALUES that the receiving node
    /// answers from its own reservations, never forwarding it (a node forwards a strict
    /// sequence's GET_VALUES to the node that commits them with this).
    GetValuesHere {
        /// Number of values requested.
        count: u32,
        /// The sequence.
        name: SeqName,
    },
}

/// What [`decode_request`] found in one well-formed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decoded {
    /// A request to serve.
    Request(Request),
    /// A well-formed frame the server refuses while keeping the connection open: unknown
    /// opcode (`UNKNOWN_OPCODE`; the frame is skipped), GET_IDS count 0 (`INVALID_COUNT`) or
    /// count above `max_batch` (`BATCH_TOO_LARGE`). The server answers it, in order, with
    /// an ERROR frame carrying `status` and `message`.
    Reject {
        /// Status for the ERROR frame (never closes the connection).
        status: Status,
        /// Message for the ERROR frame.
        message: &'static str,
    },
}

/// Fixed frame length (opcode + payload) of HELLO.
pub const HELLO_LEN: u32 = 9;
/// Fixed frame length of GET_IDS.
pub const GET_IDS_LEN: u32 = 5;
/// Fixed frame length of PING.
pub const PING_LEN: u32 = 9;
/// Fixed frame length of GET_RANGES.
pub const GET_RANGES_LEN: u32 = 5;
/// Fixed frame length of GET_UUIDS.
pub const GET_UUIDS_LEN: u32 = 5;
/// Shortest frame length of GET_IDS_WITH (no option): opcode, count, options byte.
pub const GET_IDS_WITH_MIN_LEN: u32 = 6;
/// Longest frame length of GET_IDS_WITH (every option, a 64-byte key).
pub const GET_IDS_WITH_MAX_LEN: u32 = 6 + 8 + 1 + MAX_IDEMPOTENCY_KEY_LEN as u32;
/// Shortest frame length of GET_VALUES (a one-byte name).
pub const GET_VALUES_MIN_LEN: u32 = 6;
/// Longest frame length of GET_VALUES (a 64-byte name).
pub const GET_VALUES_MAX_LEN: u32 = 5 + MAX_SEQ_NAME_LEN as u32;

/// Decode one request frame from the start of `buf` (server side).
///
/// * `Ok(None)`: `buf` holds an incomplete frame; read more bytes and call again.
/// * `Ok(Some((decoded, consumed)))`: one frame was read; drop `consumed` bytes
///   (`consumed <= buf.len()`, always the whole frame, including skipped unknown opcodes).
/// * `Err(_)`: the stream is broken; answer with an ERROR frame carrying `err.status()`
///   and close.
///
/// Faults are reported as early as they can be: a length prefix of 0 or above
/// `limits.max_request_frame` as soon as the four length bytes are present, and a wrong
/// length for a known opcode as soon as the opcode byte is present.
///
/// This function is stateless: the HELLO-first rule is enforced by [`ServerConnState`]
/// (and by `codec::ServerCodec`). It does not allocate. It decodes
/// version 1 (where 0x04 is an unknown opcode); see [`decode_request_for`] for a connection
/// that negotiated a later version.
pub fn decode_request(buf: &[u8], limits: &Limits) -> Result<Option<(Decoded, usize)>, FrameError> {
    decode_request_for(buf, limits, 1)
}

/// [`decode_request`] for a connection speaking protocol `version` (the one negotiated by
/// HELLO; 1 before the handshake). Version 2 adds GET_RANGES, version 3 GET_VALUES, version 4
/// GET_UUIDS.
pub fn decode_request_for(
    buf: &[u8],
    limits: &Limits,
    version: u16,
) -> Result<Option<(Decoded, usize)>, FrameError> {
    let ranges = version >= 2;
    let values = version >= 3;
    let uuids = version >= 4;
    let with = version >= 5;
    let Some(&[a, b, c, d]) = buf.get(..4) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([a, b, c, d]);
    if length == 0 {
        return Err(FrameError::EmptyFrame);
    }
    if length > limits.max_request_frame {
        return Err(FrameError::TooLarge {
            length,
            max: limits.max_request_frame,
        });
    }
    let Some(&opcode) = buf.get(4) else {
        return Ok(None);
    };
    let fixed = match opcode {
        OP_HELLO => Some((HELLO_LEN, "9")),
        OP_GET_IDS => Some((GET_IDS_LEN, "5")),
        OP_PING => Some((PING_LEN, "9")),
        OP_GET_RANGES if ranges => Some((GET_RANGES_LEN, "5")),
        OP_GET_UUIDS if uuids => Some((GET_UUIDS_LEN, "5")),
        _ => None,
    };
    if let Some((want, expected)) = fixed {
        if length != want {
            return Err(FrameError::WrongLength {
                opcode,
                length,
                expected,
            });
        }
    }
    if (opcode == OP_GET_VALUES || opcode == OP_GET_VALUES_HERE)
        && values
        && !(GET_VALUES_MIN_LEN..=GET_VALUES_MAX_LEN).contains(&length)
    {
        return Err(FrameError::WrongLength {
            opcode,
            length,
            expected: "5 + name length, name 1..=64 bytes",
        });
    }
    if opcode == OP_GET_IDS_WITH
        && with
        && !(GET_IDS_WITH_MIN_LEN..=GET_IDS_WITH_MAX_LEN).contains(&length)
    {
        return Err(FrameError::WrongLength {
            opcode,
            length,
            expected: "6 + 8 with after + 1 + key length with a key",
        });
    }
    // `length <= max_request_frame <= u32::MAX` fits in usize on every supported target.
    let total = 4 + length as usize;
    let Some(frame) = buf.get(..total) else {
        return Ok(None);
    };
    let payload = &frame[5..];
    let decoded = match opcode {
        OP_HELLO => {
            let magic = [payload[0], payload[1], payload[2], payload[3]];
            if magic != MAGIC {
                return Err(FrameError::BadMagic(magic));
            }
            Decoded::Request(Request::Hello {
                min_version: u16::from_be_bytes([payload[4], payload[5]]),
                max_version: u16::from_be_bytes([payload[6], payload[7]]),
            })
        }
        OP_GET_IDS => {
            let count = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
            if count == 0 {
                Decoded::Reject {
                    status: Status::INVALID_COUNT,
                    message: "GET_IDS count must be at least 1",
                }
            } else if count > limits.max_batch {
                Decoded::Reject {
                    status: Status::BATCH_TOO_LARGE,
                    message: "GET_IDS count exceeds max_batch",
                }
            } else {
                Decoded::Request(Request::GetIds { count })
            }
        }
        OP_GET_RANGES if ranges => {
            let count = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
            if count == 0 {
                Decoded::Reject {
                    status: Status::INVALID_COUNT,
                    message: "GET_RANGES count must be at least 1",
                }
            } else if count > limits.max_batch {
                Decoded::Reject {
                    status: Status::BATCH_TOO_LARGE,
                    message: "GET_RANGES count exceeds max_batch",
                }
            } else {
                Decoded::Request(Request::GetRanges { count })
            }
        }
        OP_GET_UUIDS if uuids => {
            let count = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
            if count == 0 {
                Decoded::Reject {
                    status: Status::INVALID_COUNT,
                    message: "GET_UUIDS count must be at least 1",
                }
            } else if count > limits.max_batch {
                Decoded::Reject {
                    status: Status::BATCH_TOO_LARGE,
                    message: "GET_UUIDS count exceeds max_batch",
                }
            } else {
                Decoded::Request(Request::GetUuids { count })
            }
        }
        OP_GET_VALUES | OP_GET_VALUES_HERE if values => {
            let count = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
            if count == 0 {
                Decoded::Reject {
                    status: Status::INVALID_COUNT,
                    message: "GET_VALUES count must be at least 1",
                }
            } else if count > limits.max_batch.min(MAX_VALUES_PER_CALL) {
                Decoded::Reject {
                    status: Status::BATCH_TOO_LARGE,
                    message: "GET_VALUES count exceeds max_batch (or 1048576)",
                }
            } else {
                match SeqName::new(&payload[4..]) {
                    Ok(name) if opcode == OP_GET_VALUES_HERE => {
                        Decoded::Request(Request::GetValuesHere { count, name })
                    }
                    Ok(name) => Decoded::Request(Request::GetValues { count, name }),
                    Err(_) => Decoded::Reject {
                        status: Status::INVALID_SEQUENCE_NAME,
                        message: "a sequence name is 1 to 64 bytes of a-z, 0-9, '.', '_' and '-', starting with a letter or a digit",
                    },
                }
            }
        }
        OP_GET_IDS_WITH if with => decode_ids_with(opcode, length, payload, limits)?,
        OP_PING => {
            let mut token = [0u8; 8];
            token.copy_from_slice(payload);
            Decoded::Request(Request::Ping {
                token: u64::from_be_bytes(token),
            })
        }
        _ => Decoded::Reject {
            status: Status::UNKNOWN_OPCODE,
            message: "unknown opcode",
        },
    };
    Ok(Some((decoded, total)))
}

/// GET_IDS_WITH's payload (the frame's length already within bounds): a length that does not
/// match its options is a broken frame; the refusals keep the connection.
fn decode_ids_with(
    opcode: u8,
    length: u32,
    payload: &[u8],
    limits: &Limits,
) -> Result<Decoded, FrameError> {
    let wrong = || FrameError::WrongLength {
        opcode,
        length,
        expected: "6 + 8 with after + 1 + key length with a key",
    };
    let count = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let options = payload[4];
    let mut rest = &payload[5..];
    let mut after = None;
    if options & OPT_AFTER != 0 {
        let Some((bytes, tail)) = rest.split_first_chunk::<8>() else {
            return Err(wrong());
        };
        after = Some(u64::from_be_bytes(*bytes));
        rest = tail;
    }
    let mut key = None;
    if options & OPT_KEY != 0 {
        let Some((&len, tail)) = rest.split_first() else {
            return Err(wrong());
        };
        if tail.len() != usize::from(len) {
            return Err(wrong());
        }
        key = Some(IdemKey::new(tail));
        rest = &[];
    }
    if !rest.is_empty() {
        return Err(wrong());
    }
    let reject = |status, message| Ok(Decoded::Reject { status, message });
    if count == 0 {
        return reject(
            Status::INVALID_COUNT,
            "GET_IDS_WITH count must be at least 1",
        );
    }
    if count > limits.max_batch {
        return reject(
            Status::BATCH_TOO_LARGE,
            "GET_IDS_WITH count exceeds max_batch",
        );
    }
    if options & !(OPT_AFTER | OPT_KEY | OPT_MASKED) != 0 {
        return reject(
            Status::INVALID_OPTION,
            "GET_IDS_WITH with an unknown option bit (known: 0x01 after, 0x02 key, 0x04 masked)",
        );
    }
    if after.is_some_and(|a| a >= 1 << 63) {
        return reject(
            Status::INVALID_OPTION,
            "GET_IDS_WITH after with the sign bit set: not an ID",
        );
    }
    let key = match key {
        None => None,
        Some(Ok(k)) => Some(k),
        Some(Err(_)) => {
            return reject(
                Status::INVALID_OPTION,
                "an idempotency key is 1 to 64 visible ASCII bytes",
            )
        }
    };
    Ok(Decoded::Request(Request::GetIdsWith(IdsOptions {
        count,
        after,
        key,
        masked: options & OPT_MASKED != 0,
    })))
}

/// Encode `request` as one frame (client side). Any `count` is encoded as given, so a
/// client can also be used to exercise the server's refusals.
pub fn encode_request<B: BufMut + ?Sized>(request: &Request, buf: &mut B) {
    match *request {
        Request::Hello {
            min_version,
            max_version,
        } => {
            buf.put_u32(HELLO_LEN);
            buf.put_u8(OP_HELLO);
            buf.put_slice(&MAGIC);
            buf.put_u16(min_version);
            buf.put_u16(max_version);
        }
        Request::GetIds { count } => {
            buf.put_u32(GET_IDS_LEN);
            buf.put_u8(OP_GET_IDS);
            buf.put_u32(count);
        }
        Request::Ping { token } => {
            buf.put_u32(PING_LEN);
            buf.put_u8(OP_PING);
            buf.put_u64(token);
        }
        Request::GetRanges { count } => {
            buf.put_u32(GET_RANGES_LEN);
            buf.put_u8(OP_GET_RANGES);
            buf.put_u32(count);
        }
        Request::GetUuids { count } => {
            buf.put_u32(GET_UUIDS_LEN);
            buf.put_u8(OP_GET_UUIDS);
            buf.put_u32(count);
        }
        Request::GetValues { count, name } | Request::GetValuesHere { count, name } => {
            let here = matches!(request, Request::GetValuesHere { .. });
            let name = name.as_bytes();
            // At most 64 bytes: fits.
            buf.put_u32(5 + name.len() as u32);
            buf.put_u8(if here {
                OP_GET_VALUES_HERE
            } else {
                OP_GET_VALUES
            });
            buf.put_u32(count);
            buf.put_slice(name);
        }
        Request::GetIdsWith(o) => {
            buf.put_u32(o.frame_len());
            buf.put_u8(OP_GET_IDS_WITH);
            buf.put_u32(o.count);
            buf.put_u8(o.options_byte());
            if let Some(after) = o.after {
                buf.put_u64(after);
            }
            if let Some(key) = o.key {
                buf.put_u8(key.len);
                buf.put_slice(key.as_bytes());
            }
        }
    }
}

impl Request {
    /// Shorthand for [`encode_request`].
    pub fn encode<B: BufMut + ?Sized>(&self, buf: &mut B) {
        encode_request(self, buf)
    }

    /// Encoded size of this request in bytes, length prefix included.
    pub const fn encoded_len(&self) -> usize {
        4 + match self {
            Request::Hello { .. } => HELLO_LEN as usize,
            Request::GetIds { .. } => GET_IDS_LEN as usize,
            Request::Ping { .. } => PING_LEN as usize,
            Request::GetRanges { .. } => GET_RANGES_LEN as usize,
            Request::GetUuids { .. } => GET_UUIDS_LEN as usize,
            Request::GetValues { name, .. } | Request::GetValuesHere { name, .. } => {
                5 + name.len as usize
            }
            Request::GetIdsWith(o) => o.frame_len() as usize,
        }
    }
}

/// The HELLO-first rule of one server connection.
///
/// Feed every [`Decoded`] frame to [`check`](Self::check) before acting on it. Before the
/// handshake only a HELLO with a common version is accepted (anything else, including a
/// frame that would otherwise be a `Reject`, is `HANDSHAKE_REQUIRED`); after it, a second
/// HELLO is `HANDSHAKE_REQUIRED`. Frame faults from [`decode_request`] take precedence:
/// garbage as the first frame is `BAD_FRAME`/`FRAME_TOO_LARGE`, not `HANDSHAKE_REQUIRED`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerConnState {
    version: Option<u16>,
}

impl ServerConnState {
    /// A fresh connection awaiting HELLO.
    pub const fn new() -> Self {
        ServerConnState { version: None }
    }

    /// The negotiated version, once HELLO was accepted.
    pub const fn version(&self) -> Option<u16> {
        self.version
    }

    /// Apply the handshake rule to a decoded frame. On `Ok`, the frame is to be answered
    /// (for an accepted HELLO, with HELLO_OK carrying [`version`](Self::version)); on `Err`,
    /// send an ERROR frame with `err.status()` and close.
    pub fn check(&mut self, decoded: &Decoded) -> Result<(), FrameError> {
        match (self.version, decoded) {
            (
                None,
                Decoded::Request(Request::Hello {
                    min_version,
                    max_version,
                }),
            ) => match negotiate_version(*min_version, *max_version) {
                Some(v) => {
                    self.version = Some(v);
                    Ok(())
                }
                None => Err(FrameError::UnsupportedVersion {
                    min: *min_version,
                    max: *max_version,
                    server_min: MIN_SUPPORTED_VERSION,
                    server_max: MAX_SUPPORTED_VERSION,
                }),
            },
            (None, _) => Err(FrameError::HandshakeRequired),
            (Some(_), Decoded::Request(Request::Hello { .. })) => Err(FrameError::DuplicateHello),
            (Some(_), _) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        max_request_frame: 64,
        max_batch: 65536,
    };

    fn enc(r: Request) -> Vec<u8> {
        let mut v = Vec::new();
        encode_request(&r, &mut v);
        assert_eq!(v.len(), r.encoded_len());
        v
    }

    #[test]
    fn hello_round_trip_and_bytes() {
        let r = Request::Hello {
            min_version: 1,
            max_version: 2,
        };
        let b = enc(r);
        assert_eq!(b, b"\x00\x00\x00\x09\x01IDGN\x00\x01\x00\x02");
        assert_eq!(decode_request(&b, &L), Ok(Some((Decoded::Request(r), 13))));
    }

    #[test]
    fn get_ids_and_ping_round_trip() {
        for r in [
            Request::GetIds { count: 1 },
            Request::GetIds { count: 65536 },
            Request::Ping { token: u64::MAX },
            Request::Ping { token: 0 },
        ] {
            let b = enc(r);
            assert_eq!(
                decode_request(&b, &L),
                Ok(Some((Decoded::Request(r), b.len())))
            );
        }
    }

    #[test]
    fn incomplete_is_none_for_every_prefix() {
        let b = enc(Request::Ping { token: 7 });
        for k in 0..b.len() {
            assert_eq!(decode_request(&b[..k], &L), Ok(None), "prefix {k}");
        }
    }

    #[test]
    fn trailing_bytes_are_left_alone() {
        let mut b = enc(Request::GetIds { count: 3 });
        b.extend_from_slice(&[0, 0]);
        assert_eq!(
            decode_request(&b, &L),
            Ok(Some((Decoded::Request(Request::GetIds { count: 3 }), 9)))
        );
    }

    #[test]
    fn count_refusals_keep_connection() {
        let zero = enc(Request::GetIds { count: 0 });
        let big = enc(Request::GetIds { count: 65537 });
        let (d, n) = decode_request(&zero, &L).unwrap().unwrap();
        assert_eq!(n, 9);
        assert!(matches!(d, Decoded::Reject { status, .. } if status == Status::INVALID_COUNT));
        let (d, _) = decode_request(&big, &L).unwrap().unwrap();
        assert!(matches!(d, Decoded::Reject { status, .. } if status == Status::BATCH_TOO_LARGE));
        let small = Limits { max_batch: 10, ..L };
        let ten = enc(Request::GetIds { count: 10 });
        assert!(matches!(
            decode_request(&ten, &small),
            Ok(Some((Decoded::Request(_), 9)))
        ));
    }

    #[test]
    fn unknown_opcode_is_skipped_whole() {
        // 0x04 (reserved GET_RANGES) with a 12-byte payload.
        let mut b = vec![0, 0, 0, 13, 0x04];
        b.extend_from_slice(&[0xAA; 12]);
        assert_eq!(decode_request(&b[..16], &L), Ok(None));
        let (d, n) = decode_request(&b, &L).unwrap().unwrap();
        assert_eq!(n, 17);
        assert_eq!(
            d,
            Decoded::Reject {
                status: Status::UNKNOWN_OPCODE,
                message: "unknown opcode"
            }
        );
        // Opcode only, and an unknown opcode of exactly the maximum length.
        assert!(matches!(
            decode_request(&[0, 0, 0, 1, 0x7F], &L),
            Ok(Some((Decoded::Reject { .. }, 5)))
        ));
        let mut max = vec![0, 0, 0, 64, 0x42];
        max.resize(68, 0);
        assert!(matches!(
            decode_request(&max, &L),
            Ok(Some((Decoded::Reject { .. }, 68)))
        ));
    }

    #[test]
    fn length_faults_fail_on_the_prefix_alone() {
        assert_eq!(
            decode_request(&[0, 0, 0, 0], &L),
            Err(FrameError::EmptyFrame)
        );
        let e = decode_request(&[0xFF, 0xFF, 0xFF, 0xFF], &L).unwrap_err();
        assert_eq!(
            e,
            FrameError::TooLarge {
                length: u32::MAX,
                max: 64
            }
        );
        assert_eq!(e.status(), Status::FRAME_TOO_LARGE);
        assert_eq!(
            decode_request(&[0, 0, 0, 65], &L).unwrap_err().status(),
            Status::FRAME_TOO_LARGE
        );
        // An HTTP request is a huge length prefix.
        assert_eq!(
            decode_request(b"GET / HTTP/1.1\r\n", &L)
                .unwrap_err()
                .status(),
            Status::FRAME_TOO_LARGE
        );
    }

    #[test]
    fn wrong_fixed_lengths_fail_on_the_opcode() {
        for (len, op) in [
            (8u8, OP_HELLO),
            (10, OP_HELLO),
            (6, OP_GET_IDS),
            (4, OP_GET_IDS),
            (5, OP_PING),
            (1, OP_PING),
        ] {
            let e = decode_request(&[0, 0, 0, len, op], &L).unwrap_err();
            assert!(matches!(e, FrameError::WrongLength { .. }), "{e}");
            assert_eq!(e.status(), Status::BAD_FRAME);
        }
    }

    #[test]
    fn get_ranges_exists_only_from_version_2() {
        let mut wire = Vec::new();
        encode_request(&Request::GetRanges { count: 7 }, &mut wire);
        assert_eq!(wire, [0, 0, 0, 5, 0x04, 0, 0, 0, 7]);
        assert_eq!(
            decode_request_for(&wire, &L, 2),
            Ok(Some((Decoded::Request(Request::GetRanges { count: 7 }), 9)))
        );
        // Version 1: an unknown opcode, skipped, connection kept.
        assert!(matches!(
            decode_request(&wire, &L),
            Ok(Some((
                Decoded::Reject {
                    status: Status::UNKNOWN_OPCODE,
                    ..
                },
                9
            )))
        ));
        // Version 2 enforces its length and its count rules like GET_IDS.
        let long = [0, 0, 0, 6, 0x04, 0, 0, 0, 7, 0];
        assert!(matches!(
            decode_request_for(&long, &L, 2),
            Err(FrameError::WrongLength { .. })
        ));
        for (count, status) in [
            (0u32, Status::INVALID_COUNT),
            (65_537, Status::BATCH_TOO_LARGE),
        ] {
            let mut w = Vec::new();
            encode_request(&Request::GetRanges { count }, &mut w);
            assert!(matches!(
                decode_request_for(&w, &L, 2),
                Ok(Some((Decoded::Reject { status: s, .. }, 9))) if s == status
            ));
        }
    }

    #[test]
    fn get_values_exists_only_from_version_3() {
        let limits = Limits {
            max_request_frame: 128,
            max_batch: 65536,
        };
        let name: SeqName = "invoice.tenant-42".parse().unwrap();
        let mut wire = Vec::new();
        encode_request(&Request::GetValues { count: 3, name }, &mut wire);
        assert_eq!(&wire[..9], [0, 0, 0, 22, 0x05, 0, 0, 0, 3]);
        assert_eq!(&wire[9..], b"invoice.tenant-42");
        assert_eq!(
            wire.len(),
            Request::GetValues { count: 3, name }.encoded_len()
        );
        assert_eq!(
            decode_request_for(&wire, &limits, 3),
            Ok(Some((
                Decoded::Request(Request::GetValues { count: 3, name }),
                26
            )))
        );
        // Versions 1 and 2: an unknown opcode, skipped whole.
        for v in [1, 2] {
            assert!(matches!(
                decode_request_for(&wire, &limits, v),
                Ok(Some((
                    Decoded::Reject {
                        status: Status::UNKNOWN_OPCODE,
                        ..
                    },
                    26
                )))
            ));
        }
        // The longest name fits the default frame limit; one byte more is a bad length.
        let longest = SeqName::new(&[b'a'; 64]).unwrap();
        let mut w = Vec::new();
        encode_request(
            &Request::GetValues {
                count: 1,
                name: longest,
            },
            &mut w,
        );
        assert_eq!(w.len(), 4 + GET_VALUES_MAX_LEN as usize);
        assert!(matches!(
            decode_request_for(&w, &Limits::default(), 3),
            Ok(Some((Decoded::Request(Request::GetValues { .. }), 73)))
        ));
        for length in [5u32, 70] {
            let mut w = length.to_be_bytes().to_vec();
            w.push(0x05);
            assert!(matches!(
                decode_request_for(&w, &limits, 3),
                Err(FrameError::WrongLength { opcode: 0x05, .. })
            ));
        }
        // Counts as GET_IDS; then the name.
        let frame = |count: u32, name: &[u8]| {
            let mut w = (5 + name.len() as u32).to_be_bytes().to_vec();
            w.push(0x05);
            w.extend_from_slice(&count.to_be_bytes());
            w.extend_from_slice(name);
            w
        };
        for (count, name, status) in [
            (0u32, &b"a"[..], Status::INVALID_COUNT),
            (65_537, b"a", Status::BATCH_TOO_LARGE),
            (0, b"A", Status::INVALID_COUNT),
            (1, b"Orders", Status::INVALID_SEQUENCE_NAME),
            (1, b"-orders", Status::INVALID_SEQUENCE_NAME),
            (1, b"a b", Status::INVALID_SEQUENCE_NAME),
            (1, b"caf\xc3\xa9", Status::INVALID_SEQUENCE_NAME),
            (1, b"a\0", Status::INVALID_SEQUENCE_NAME),
        ] {
            let w = frame(count, name);
            assert!(
                matches!(
                    decode_request_for(&w, &limits, 3),
                    Ok(Some((Decoded::Reject { status: s, .. }, n))) if s == status && n == w.len()
                ),
                "{count} {name:?}"
            );
        }
        // Above 2^20 even where max_batch allows more.
        let big = Limits {
            max_request_frame: 128,
            max_batch: u32::MAX,
        };
        let w = frame(MAX_VALUES_PER_CALL + 1, b"a");
        assert!(matches!(
            decode_request_for(&w, &big, 3),
            Ok(Some((
                Decoded::Reject {
                    status: Status::BATCH_TOO_LARGE,
                    ..
                },
                _
            )))
        ));
        let w = frame(MAX_VALUES_PER_CALL, b"a");
        assert!(matches!(
            decode_request_for(&w, &big, 3),
            Ok(Some((Decoded::Request(Request::GetValues { .. }), _)))
        ));
    }

    #[test]
    fn get_uuids_exists_only_from_version_4() {
        let mut wire = Vec::new();
        encode_request(&Request::GetUuids { count: 7 }, &mut wire);
        assert_eq!(wire, [0, 0, 0, 5, 0x06, 0, 0, 0, 7]);
        assert_eq!(wire.len(), Request::GetUuids { count: 7 }.encoded_len());
        assert_eq!(
            decode_request_for(&wire, &L, 4),
            Ok(Some((Decoded::Request(Request::GetUuids { count: 7 }), 9)))
        );
        // Versions 1 to 3: an unknown opcode, skipped, connection kept.
        for v in 1..=3 {
            assert!(matches!(
                decode_request_for(&wire, &L, v),
                Ok(Some((
                    Decoded::Reject {
                        status: Status::UNKNOWN_OPCODE,
                        ..
                    },
                    9
                )))
            ));
        }
        // Version 4 enforces its length as soon as the opcode arrives, and GET_IDS's count rules.
        for long in [&[0u8, 0, 0, 6, 0x06][..], &[0, 0, 0, 4, 0x06]] {
            assert!(matches!(
                decode_request_for(long, &L, 4),
                Err(FrameError::WrongLength { opcode: 0x06, .. })
            ));
        }
        for (count, status) in [
            (0u32, Status::INVALID_COUNT),
            (65_537, Status::BATCH_TOO_LARGE),
        ] {
            let mut w = Vec::new();
            encode_request(&Request::GetUuids { count }, &mut w);
            assert!(matches!(
                decode_request_for(&w, &L, 4),
                Ok(Some((Decoded::Reject { status: s, .. }, 9))) if s == status
            ));
        }
    }

    #[test]
    fn sequence_names_follow_the_rule() {
        for good in ["a", "0", "invoice.tenant-42", "a_b", &"z".repeat(64)] {
            let n: SeqName = good.parse().unwrap();
            assert_eq!(n.as_str(), good);
            assert_eq!(n.to_string(), good);
        }
        assert_eq!("".parse::<SeqName>(), Err(SeqNameError::Empty));
        assert_eq!(
            "a".repeat(65).parse::<SeqName>(),
            Err(SeqNameError::TooLong)
        );
        for bad in [".a", "_a", "-a", "A", "a/b", "a b", "é"] {
            assert_eq!(bad.parse::<SeqName>(), Err(SeqNameError::BadByte), "{bad}");
        }
    }

    #[test]
    fn bad_magic() {
        let b = b"\x00\x00\x00\x09\x01IDGX\x00\x01\x00\x01";
        assert_eq!(decode_request(b, &L), Err(FrameError::BadMagic(*b"IDGX")));
        assert_eq!(FrameError::BadMagic(*b"IDGX").status(), Status::BAD_FRAME);
    }

    #[test]
    fn conn_state_hello_first() {
        let hello = Decoded::Request(Request::Hello {
            min_version: 1,
            max_version: 9,
        });
        let get = Decoded::Request(Request::GetIds { count: 1 });
        let reject = Decoded::Reject {
            status: Status::UNKNOWN_OPCODE,
            message: "",
        };

        let mut s = ServerConnState::new();
        assert_eq!(s.check(&get), Err(FrameError::HandshakeRequired));
        let mut s = ServerConnState::new();
        assert_eq!(s.check(&reject), Err(FrameError::HandshakeRequired));

        let mut s = ServerConnState::new();
        assert_eq!(s.check(&hello), Ok(()));
        assert_eq!(
            s.version(),
            Some(5),
            "1..=9 picks the highest common version"
        );
        assert_eq!(s.check(&get), Ok(()));
        assert_eq!(s.check(&reject), Ok(()));
        let e = s.check(&hello).unwrap_err();
        assert_eq!(e, FrameError::DuplicateHello);
        assert_eq!(e.status(), Status::HANDSHAKE_REQUIRED);
    }

    #[test]
    fn conn_state_version_mismatch() {
        for (min, max) in [(6, 7), (0, 0), (3, 1), (1, 0)] {
            let mut s = ServerConnState::new();
            let e = s
                .check(&Decoded::Request(Request::Hello {
                    min_version: min,
                    max_version: max,
                }))
                .unwrap_err();
            assert_eq!(e.status(), Status::UNSUPPORTED_VERSION, "{min}..{max}");
            assert_eq!(s.version(), None);
        }
    }
}
