//! Responses (server → client): server-side encoding, client-side decoding, and the
//! HELLO_OK layout helpers for taking IDs apart.

use bytes::BufMut;
use idgen_id::{Layout, Parts, WorkerRange};

use crate::{
    FrameError, Status, WorkersBeyondWire, OP_ERROR, OP_HELLO_OK, OP_IDS, OP_MASKED_IDS, OP_PONG,
    OP_RANGES, OP_UUIDS, OP_VALUES,
};

/// The largest masking key ID (key IDs are `0..=61`, one base62 character).
pub const MAX_MASK_KEY_ID: u8 = 61;

/// The masked IDs of a MASKED_IDS frame (version 5), borrowed from the receive buffer and
/// validated (each below 2^63), with the key ID that masked them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaskedIdsRef<'a> {
    key_id: u8,
    ids: IdsRef<'a>,
}

impl<'a> MaskedIdsRef<'a> {
    /// The key ID (`0..=61`) of the key that masked them: the first character of their
    /// string forms.
    pub const fn key_id(&self) -> u8 {
        self.key_id
    }
    /// The masked IDs, in the order of the IDs they mask (which is not theirs).
    pub const fn ids(&self) -> IdsRef<'a> {
        self.ids
    }
}

impl std::fmt::Debug for MaskedIdsRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaskedIdsRef")
            .field("key_id", &self.key_id)
            .field("ids", &self.ids)
            .finish()
    }
}

/// Fixed frame length (opcode + payload) of HELLO_OK.
pub const HELLO_OK_LEN: u32 = 33;
/// Fixed frame length of PONG.
pub const PONG_LEN: u32 = 9;
/// Longest ERROR message in bytes.
pub const MAX_ERROR_MESSAGE: usize = 255;
/// Largest frame length of an ERROR frame (`3 + 255`).
pub const MAX_ERROR_LEN: u32 = 3 + MAX_ERROR_MESSAGE as u32;
/// Largest ID count that fits in one IDS frame (its length must fit a `u32`).
pub const MAX_IDS_PER_FRAME: u32 = (u32::MAX - 5) / 8;

/// Largest response frame length a client must accept from a server whose HELLO_OK
/// announced `max_batch`: `max(6 + 8 * max_batch, 258)` (saturating), so that an IDS frame
/// of `max_batch` IDs, a VALUES frame of `max_batch` values (one byte longer: its mode) and
/// any ERROR frame all fit. Before HELLO_OK arrives a client
/// may use `max_response_frame(0)` (= 258, enough for HELLO_OK and ERROR) or the
/// default `max_batch`.
pub const fn max_response_frame(max_batch: u32) -> u32 {
    let ids = 6u64 + 8 * max_batch as u64;
    let frame = if ids > MAX_ERROR_LEN as u64 {
        ids
    } else {
        MAX_ERROR_LEN as u64
    };
    if frame > u32::MAX as u64 {
        u32::MAX
    } else {
        frame as u32
    }
}

/// Largest response frame length a client must accept on a connection that negotiated
/// `version` with a server whose HELLO_OK announced `max_batch`: [`max_response_frame`], and
/// from version 4 at least `5 + 16 * max_batch` (a UUIDS frame of `max_batch` UUIDs),
/// saturating.
pub const fn max_response_frame_for(version: u16, max_batch: u32) -> u32 {
    let base = max_response_frame(max_batch);
    if version < 4 {
        return base;
    }
    let uuids = 5u64 + 16 * max_batch as u64;
    if uuids <= base as u64 {
        base
    } else if uuids > u32::MAX as u64 {
        u32::MAX
    } else {
        uuids as u32
    }
}

/// Largest UUID count that fits in one UUIDS frame (its length must fit a `u32`).
pub const MAX_UUIDS_PER_FRAME: u32 = (u32::MAX - 5) / 16;

/// The UUIDs of a UUIDS frame (version 4), borrowed from the receive buffer and validated:
/// each a version 7 UUID of RFC 9562's variant, strictly increasing. Each is 16 bytes in the
/// RFC's (big-endian) byte order.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UuidsRef<'a> {
    bytes: &'a [u8],
}

impl<'a> UuidsRef<'a> {
    /// Number of UUIDs (at least 1 in a decoded frame).
    pub const fn len(&self) -> usize {
        self.bytes.len() / 16
    }
    /// Always `false` for a decoded frame.
    pub const fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// The UUIDs in order.
    pub fn iter(&self) -> UuidsIter<'a> {
        UuidsIter {
            chunks: self.bytes.chunks_exact(16),
        }
    }
    /// The UUIDs as a new vector.
    pub fn to_vec(&self) -> Vec<[u8; 16]> {
        self.iter().collect()
    }
    /// The raw payload bytes (`16 * len()` bytes).
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl std::fmt::Debug for UuidsRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(u128::from_be_bytes))
            .finish()
    }
}

/// Iterator over the UUIDs of a [`UuidsRef`].
#[derive(Debug, Clone)]
pub struct UuidsIter<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for UuidsIter<'_> {
    type Item = [u8; 16];
    fn next(&mut self) -> Option<[u8; 16]> {
        self.chunks.next().map(|c| {
            let mut u = [0u8; 16];
            u.copy_from_slice(c);
            u
        })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for UuidsIter<'_> {}

/// The HELLO_OK payload: negotiated version, ID layout, and this connection's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerHello {
    /// Negotiated protocol version.
    pub version: u16,
    /// Unix time in milliseconds of the ID epoch (timestamp field 0).
    pub epoch_ms: u64,
    /// Width of the timestamp field.
    pub timestamp_bits: u8,
    /// Width of the worker field (region bits included).
    pub worker_bits: u8,
    /// Width of the sequence field.
    pub sequence_bits: u8,
    /// How many of the worker field's top bits are the region (0 = no regions).
    pub region_bits: u8,
    /// Largest `count` GET_IDS accepts on this connection.
    pub max_batch: u32,
    /// Largest request frame length accepted on this connection.
    pub max_request_frame: u32,
    /// The worker IDs of the shard serving this connection. The wire carries the first and the
    /// count as `u32`s (`worker_first`, `worker_count`): [`encode_hello_ok`] refuses a range
    /// beyond them.
    pub workers: WorkerRange,
    /// Index of that shard within the node.
    pub shard: u16,
}

impl ServerHello {
    /// The announced layout, checked by the wire's rule: `timestamp_bits + worker_bits +
    /// sequence_bits <= 63` (the layout's ID width: the top bit of every ID is 0, and a narrower
    /// layout's IDs are below `2^width`) and `region_bits <= worker_bits`
    /// ([`Layout::announced`]). Every decoded HELLO_OK passes.
    pub const fn layout(&self) -> Result<Layout, FrameError> {
        match Layout::announced(
            self.epoch_ms,
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.region_bits,
        ) {
            Ok(layout) => Ok(layout),
            Err(_) => Err(FrameError::BadLayout {
                timestamp_bits: self.timestamp_bits,
                worker_bits: self.worker_bits,
                sequence_bits: self.sequence_bits,
                region_bits: self.region_bits,
            }),
        }
    }

    /// Check the layout (see [`ServerHello::layout`]).
    pub const fn validate_layout(&self) -> Result<(), FrameError> {
        match self.layout() {
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Split `id` into its fields with the announced layout. Meant for a decoded HELLO_OK
    /// (whose layout is valid); a hand-made one with an invalid layout decomposes with the
    /// default layout instead.
    pub fn decompose(&self, id: u64) -> Parts {
        self.layout().unwrap_or_default().decompose(id)
    }
}

/// A sequence's mode, as VALUES says it (`docs/ARCHITECTURE.md` §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SeqMode {
    /// `0`: values from blocks a node reserved ahead; a client may prefetch them.
    Dense,
    /// `1`: each value reserved by a store commit after its request arrived; a client MUST NOT
    /// keep values for later calls (that would break the real-time order).
    Strict,
}

impl SeqMode {
    /// The wire byte.
    pub const fn byte(self) -> u8 {
        match self {
            SeqMode::Dense => 0,
            SeqMode::Strict => 1,
        }
    }

    /// The mode of a wire byte (`None`: not a mode this version knows).
    pub const fn of_byte(b: u8) -> Option<SeqMode> {
        match b {
            0 => Some(SeqMode::Dense),
            1 => Some(SeqMode::Strict),
            _ => None,
        }
    }
}

/// The values of a VALUES frame (version 3), borrowed and validated: each in
/// `1 ..= 2^63 - 1`, strictly increasing; with the sequence's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValuesRef<'a> {
    mode: SeqMode,
    values: IdsRef<'a>,
}

impl<'a> ValuesRef<'a> {
    /// The sequence's mode.
    pub const fn mode(&self) -> SeqMode {
        self.mode
    }
    /// Number of values (at least 1).
    pub const fn len(&self) -> usize {
        self.values.len()
    }
    /// Always `false` for a decoded frame.
    pub const fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
    /// The values in order.
    pub fn iter(&self) -> IdsIter<'a> {
        self.values.iter()
    }
    /// The values as a new vector.
    pub fn to_vec(&self) -> Vec<u64> {
        self.values.to_vec()
    }
}

/// IDs of an IDS frame, borrowed from the receive buffer (big-endian `u64`s, validated).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdsRef<'a> {
    bytes: &'a [u8],
}

impl<'a> IdsRef<'a> {
    /// Number of IDs.
    pub const fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    /// Always `false` for a decoded frame (IDS carries at least one ID).
    pub const fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The `i`-th ID.
    pub fn get(&self, i: usize) -> Option<u64> {
        let chunk = self.bytes.get(i.checked_mul(8)?..i.checked_mul(8)? + 8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        Some(u64::from_be_bytes(b))
    }

    /// Iterate over the IDs in order.
    pub fn iter(&self) -> IdsIter<'a> {
        IdsIter {
            chunks: self.bytes.chunks_exact(8),
        }
    }

    /// Copy the first `min(self.len(), dst.len())` IDs into `dst`; returns how many.
    pub fn copy_into(&self, dst: &mut [u64]) -> usize {
        let n = self.len().min(dst.len());
        for (d, id) in dst[..n].iter_mut().zip(self.iter()) {
            *d = id;
        }
        n
    }

    /// The IDs as a new vector.
    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }

    /// The raw payload bytes (`8 * len()` bytes, big-endian IDs).
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl std::fmt::Debug for IdsRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for IdsRef<'a> {
    type Item = u64;
    type IntoIter = IdsIter<'a>;
    fn into_iter(self) -> IdsIter<'a> {
        self.iter()
    }
}

/// Iterator over the IDs of an [`IdsRef`].
#[derive(Debug, Clone)]
pub struct IdsIter<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

fn be_u64(chunk: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(chunk);
    u64::from_be_bytes(b)
}

impl Iterator for IdsIter<'_> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        self.chunks.next().map(be_u64)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl DoubleEndedIterator for IdsIter<'_> {
    fn next_back(&mut self) -> Option<u64> {
        self.chunks.next_back().map(be_u64)
    }
}

impl ExactSizeIterator for IdsIter<'_> {}

/// A decoded response, borrowing from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseRef<'a> {
    /// `0x81 HELLO_OK`.
    HelloOk(ServerHello),
    /// `0x82 IDS`: exactly the requested number of IDs.
    Ids(IdsRef<'a>),
    /// `0x83 PONG` with the echoed token.
    Pong(u64),
    /// `0xFF ERROR`.
    Error {
        /// The status code.
        status: Status,
        /// Human-readable message (0..=255 bytes of UTF-8).
        message: &'a str,
    },
    /// `0x84 RANGES` (version 2): the requested IDs as runs of consecutive integers.
    Ranges(RangesRef<'a>),
    /// `0x85 VALUES` (version 3): the requested values of a named sequence.
    Values(ValuesRef<'a>),
    /// `0x86 UUIDS` (version 4): the requested version 7 UUIDs.
    Uuids(UuidsRef<'a>),
    /// `0x87 MASKED_IDS` (version 5): the requested IDs, masked.
    MaskedIds(MaskedIdsRef<'a>),
}

/// The runs of a RANGES frame, validated: each run non-empty, runs strictly increasing and
/// disjoint, no ID with the sign bit, counts summing to the total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RangesRef<'a> {
    total: u32,
    bytes: &'a [u8],
}

impl<'a> RangesRef<'a> {
    /// Total number of IDs across the runs.
    pub const fn total(&self) -> u32 {
        self.total
    }
    /// Number of runs.
    pub const fn runs(&self) -> usize {
        self.bytes.len() / 12
    }
    /// The runs as `(first ID, count)`.
    pub fn iter(&self) -> RangesIter<'a> {
        RangesIter {
            chunks: self.bytes.chunks_exact(12),
        }
    }
    /// Appends every ID of every run to `out`, in order.
    pub fn expand_into(&self, out: &mut Vec<u64>) {
        out.reserve(self.total as usize);
        for (first, count) in self.iter() {
            out.extend(first..first + u64::from(count));
        }
    }
}

/// Iterator over the `(first, count)` runs of a [`RangesRef`].
#[derive(Debug, Clone)]
pub struct RangesIter<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for RangesIter<'_> {
    type Item = (u64, u32);
    fn next(&mut self) -> Option<(u64, u32)> {
        self.chunks.next().map(|c| {
            (
                be_u64(&c[..8]),
                u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
            )
        })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for RangesIter<'_> {}

impl ResponseRef<'_> {
    /// Copy into an owned [`Response`].
    pub fn into_owned(self) -> Response {
        match self {
            ResponseRef::HelloOk(h) => Response::HelloOk(h),
            ResponseRef::Ids(ids) => Response::Ids(ids.to_vec()),
            ResponseRef::Pong(t) => Response::Pong(t),
            ResponseRef::Error { status, message } => Response::Error {
                status,
                message: message.to_owned(),
            },
            ResponseRef::Ranges(r) => Response::Ranges(r.iter().collect()),
            ResponseRef::Values(v) => Response::Values {
                mode: v.mode(),
                values: v.to_vec(),
            },
            ResponseRef::Uuids(u) => Response::Uuids(u.to_vec()),
            ResponseRef::MaskedIds(m) => Response::MaskedIds {
                key_id: m.key_id(),
                ids: m.ids().to_vec(),
            },
        }
    }
}

/// An owned response, as produced by `codec::ClientCodec` and
/// consumed by `codec::ServerCodec`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Response {
    /// `0x81 HELLO_OK`.
    HelloOk(ServerHello),
    /// `0x82 IDS` (must be non-empty when encoded).
    Ids(Vec<u64>),
    /// `0x83 PONG`.
    Pong(u64),
    /// `0xFF ERROR` (the message is truncated to 255 bytes when encoded).
    Error {
        /// The status code.
        status: Status,
        /// Human-readable message.
        message: String,
    },
    /// `0x84 RANGES` (version 2): `(first ID, count)` runs (non-empty when encoded).
    Ranges(Vec<(u64, u32)>),
    /// `0x85 VALUES` (version 3): a sequence's values (non-empty when encoded), and its mode.
    Values {
        /// The sequence's mode.
        mode: SeqMode,
        /// The values, strictly increasing.
        values: Vec<u64>,
    },
    /// `0x86 UUIDS` (version 4): version 7 UUIDs (non-empty when encoded).
    Uuids(Vec<[u8; 16]>),
    /// `0x87 MASKED_IDS` (version 5): masked IDs (non-empty when encoded) and their key ID.
    MaskedIds {
        /// The key ID (`0..=61`).
        key_id: u8,
        /// The masked IDs.
        ids: Vec<u64>,
    },
}

impl Response {
    /// Encode as one frame. Panics like [`encode_ids`] on an empty or oversized `Ids`; a
    /// `HelloOk` whose worker range the wire cannot carry is refused ([`encode_hello_ok`]).
    pub fn encode<B: BufMut + ?Sized>(&self, buf: &mut B) -> Result<(), WorkersBeyondWire> {
        match self {
            Response::HelloOk(h) => encode_hello_ok(h, buf)?,
            Response::Ids(ids) => encode_ids(ids, buf),
            Response::Pong(t) => encode_pong(*t, buf),
            Response::Error { status, message } => encode_error(*status, message, buf),
            Response::Ranges(runs) => encode_ranges(runs, buf),
            Response::Values { mode, values } => encode_values(*mode, values, buf),
            Response::Uuids(uuids) => encode_uuids(uuids, buf),
            Response::MaskedIds { key_id, ids } => encode_masked_ids(*key_id, ids, buf),
        }
        Ok(())
    }
}

/// Encode a RANGES frame (version 2): `u32 total`, `u32 run count`, then per run
/// `u64 first` and `u32 count`. Panics if `runs` is empty or a count is 0 (never sent).
pub fn encode_ranges<B: BufMut + ?Sized>(runs: &[(u64, u32)], buf: &mut B) {
    assert!(
        !runs.is_empty() && runs.iter().all(|(_, c)| *c > 0),
        "RANGES needs at least one non-empty run"
    );
    let total: u64 = runs.iter().map(|(_, c)| u64::from(*c)).sum();
    buf.put_u32(9 + 12 * runs.len() as u32);
    buf.put_u8(OP_RANGES);
    buf.put_u32(total as u32);
    buf.put_u32(runs.len() as u32);
    for (first, count) in runs {
        buf.put_u64(*first);
        buf.put_u32(*count);
    }
}

/// Encode a HELLO_OK frame (37 bytes). A worker range whose first ID or count does not fit
/// the wire's `u32`s is refused, and nothing is written.
pub fn encode_hello_ok<B: BufMut + ?Sized>(
    hello: &ServerHello,
    buf: &mut B,
) -> Result<(), WorkersBeyondWire> {
    let (Ok(worker_first), Ok(worker_count)) = (
        u32::try_from(hello.workers.first),
        u32::try_from(hello.workers.count),
    ) else {
        return Err(WorkersBeyondWire(hello.workers));
    };
    buf.put_u32(HELLO_OK_LEN);
    buf.put_u8(OP_HELLO_OK);
    buf.put_u16(hello.version);
    buf.put_u64(hello.epoch_ms);
    buf.put_u8(hello.timestamp_bits);
    buf.put_u8(hello.worker_bits);
    buf.put_u8(hello.sequence_bits);
    buf.put_u8(hello.region_bits);
    buf.put_u32(hello.max_batch);
    buf.put_u32(hello.max_request_frame);
    buf.put_u32(worker_first);
    buf.put_u32(worker_count);
    buf.put_u16(hello.shard);
    Ok(())
}

/// Encode the 9-byte head of an IDS frame (length, opcode, count). The caller must then
/// append exactly `count` IDs with `put_u64` — the server's allocation-free hot path.
///
/// # Panics
/// If `count` is 0 or above [`MAX_IDS_PER_FRAME`]: IDS is never sent empty.
pub fn encode_ids_header<B: BufMut + ?Sized>(count: u32, buf: &mut B) {
    assert!(
        (1..=MAX_IDS_PER_FRAME).contains(&count),
        "IDS count {count} out of range 1..={MAX_IDS_PER_FRAME}"
    );
    buf.put_u32(5 + 8 * count);
    buf.put_u8(OP_IDS);
    buf.put_u32(count);
}

/// Encode a complete IDS frame.
///
/// # Panics
/// Like [`encode_ids_header`], if `ids` is empty or too long.
pub fn encode_ids<B: BufMut + ?Sized>(ids: &[u64], buf: &mut B) {
    let count = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    encode_ids_header(count, buf);
    for &id in ids {
        debug_assert!(id >> 63 == 0, "id {id:#x} has the top bit set");
        buf.put_u64(id);
    }
}

/// Largest value count that fits in one VALUES frame.
pub const MAX_VALUES_PER_FRAME: u32 = (u32::MAX - 6) / 8;

/// Encode the 10-byte head of a VALUES frame (version 3: length, opcode, mode, count); the
/// caller appends exactly `count` values with `put_u64`.
///
/// # Panics
/// If `count` is 0 or above [`MAX_VALUES_PER_FRAME`]: VALUES is never sent empty.
pub fn encode_values_header<B: BufMut + ?Sized>(mode: SeqMode, count: u32, buf: &mut B) {
    assert!(
        (1..=MAX_VALUES_PER_FRAME).contains(&count),
        "VALUES count {count} out of range 1..={MAX_VALUES_PER_FRAME}"
    );
    buf.put_u32(6 + 8 * count);
    buf.put_u8(OP_VALUES);
    buf.put_u8(mode.byte());
    buf.put_u32(count);
}

/// Encode a complete VALUES frame (version 3).
///
/// # Panics
/// Like [`encode_values_header`], if `values` is empty or too long.
pub fn encode_values<B: BufMut + ?Sized>(mode: SeqMode, values: &[u64], buf: &mut B) {
    let count = u32::try_from(values.len()).unwrap_or(u32::MAX);
    encode_values_header(mode, count, buf);
    for &v in values {
        debug_assert!(v >= 1 && v >> 63 == 0, "value {v:#x} out of 1..2^63");
        buf.put_u64(v);
    }
}

/// Encode the 9-byte head of a UUIDS frame (version 4: length, opcode, count); the caller
/// appends exactly `count` UUIDs of 16 bytes.
///
/// # Panics
/// If `count` is 0 or above [`MAX_UUIDS_PER_FRAME`]: UUIDS is never sent empty.
pub fn encode_uuids_header<B: BufMut + ?Sized>(count: u32, buf: &mut B) {
    assert!(
        (1..=MAX_UUIDS_PER_FRAME).contains(&count),
        "UUIDS count {count} out of range 1..={MAX_UUIDS_PER_FRAME}"
    );
    buf.put_u32(5 + 16 * count);
    buf.put_u8(OP_UUIDS);
    buf.put_u32(count);
}

/// Encode a complete UUIDS frame (version 4).
///
/// # Panics
/// Like [`encode_uuids_header`], if `uuids` is empty or too long.
pub fn encode_uuids<B: BufMut + ?Sized>(uuids: &[[u8; 16]], buf: &mut B) {
    let count = u32::try_from(uuids.len()).unwrap_or(u32::MAX);
    encode_uuids_header(count, buf);
    for u in uuids {
        buf.put_slice(u);
    }
}

/// Encode the 10-byte head of a MASKED_IDS frame (version 5: length, opcode, key ID, count);
/// the caller appends exactly `count` masked IDs with `put_u64`.
///
/// # Panics
/// If `count` is 0 or above [`MAX_VALUES_PER_FRAME`], or `key_id` above [`MAX_MASK_KEY_ID`].
pub fn encode_masked_ids_header<B: BufMut + ?Sized>(key_id: u8, count: u32, buf: &mut B) {
    assert!(
        (1..=MAX_VALUES_PER_FRAME).contains(&count) && key_id <= MAX_MASK_KEY_ID,
        "MASKED_IDS count {count} or key ID {key_id} out of range"
    );
    buf.put_u32(6 + 8 * count);
    buf.put_u8(OP_MASKED_IDS);
    buf.put_u8(key_id);
    buf.put_u32(count);
}

/// Encode a complete MASKED_IDS frame (version 5).
///
/// # Panics
/// Like [`encode_masked_ids_header`].
pub fn encode_masked_ids<B: BufMut + ?Sized>(key_id: u8, ids: &[u64], buf: &mut B) {
    let count = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    encode_masked_ids_header(key_id, count, buf);
    for &id in ids {
        debug_assert!(id >> 63 == 0, "masked id {id:#x} has the top bit set");
        buf.put_u64(id);
    }
}

/// Encode a PONG frame echoing `token`.
pub fn encode_pong<B: BufMut + ?Sized>(token: u64, buf: &mut B) {
    buf.put_u32(PONG_LEN);
    buf.put_u8(OP_PONG);
    buf.put_u64(token);
}

/// `message` cut to at most 255 bytes, on a UTF-8 character boundary.
pub fn truncate_message(message: &str) -> &str {
    if message.len() <= MAX_ERROR_MESSAGE {
        return message;
    }
    let mut end = MAX_ERROR_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// Encode an ERROR frame. `message` is truncated to 255 bytes on a character boundary.
pub fn encode_error<B: BufMut + ?Sized>(status: Status, message: &str, buf: &mut B) {
    let message = truncate_message(message);
    buf.put_u32(3 + message.len() as u32);
    buf.put_u8(OP_ERROR);
    buf.put_u16(status.0);
    buf.put_slice(message.as_bytes());
}

/// Decode one response frame from the start of `buf` (client side).
///
/// `max_frame` is the largest frame length accepted, normally
/// [`max_response_frame`]`(max_batch)`. Returns `Ok(None)` while the frame is incomplete,
/// `Ok(Some((response, consumed)))` for one frame, and `Err` for a broken stream (drop the
/// connection). A length of 0 or above `max_frame`, an unknown opcode or a wrong length for
/// a fixed-size frame is reported as soon as the bytes that show it are present.
///
/// Does not allocate; the IDS payload is validated (count matches the length, count >= 1,
/// top bit clear on every ID) and borrowed.
pub fn decode_response(
    buf: &[u8],
    max_frame: u32,
) -> Result<Option<(ResponseRef<'_>, usize)>, FrameError> {
    let Some(&[a, b, c, d]) = buf.get(..4) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([a, b, c, d]);
    if length == 0 {
        return Err(FrameError::EmptyFrame);
    }
    if length > max_frame {
        return Err(FrameError::TooLarge {
            length,
            max: max_frame,
        });
    }
    let Some(&opcode) = buf.get(4) else {
        return Ok(None);
    };
    let wrong = |expected| FrameError::WrongLength {
        opcode,
        length,
        expected,
    };
    match opcode {
        OP_HELLO_OK if length != HELLO_OK_LEN => return Err(wrong("33")),
        OP_PONG if length != PONG_LEN => return Err(wrong("9")),
        OP_ERROR if !(3..=MAX_ERROR_LEN).contains(&length) => return Err(wrong("3..=258")),
        OP_IDS if length < 13 || (length - 5) % 8 != 0 => {
            return Err(wrong("5 + 8 * count with count >= 1"))
        }
        OP_RANGES if length < 21 || (length - 9) % 12 != 0 => {
            return Err(wrong("9 + 12 * runs with runs >= 1"))
        }
        OP_VALUES if length < 14 || (length - 6) % 8 != 0 => {
            return Err(wrong("6 + 8 * count with count >= 1"))
        }
        OP_UUIDS if length < 21 || (length - 5) % 16 != 0 => {
            return Err(wrong("5 + 16 * count with count >= 1"))
        }
        OP_MASKED_IDS if length < 14 || (length - 6) % 8 != 0 => {
            return Err(wrong("6 + 8 * count with count >= 1"))
        }
        OP_HELLO_OK | OP_PONG | OP_ERROR | OP_IDS | OP_RANGES | OP_VALUES | OP_UUIDS
        | OP_MASKED_IDS => {}
        _ => return Err(FrameError::UnknownResponseOpcode(opcode)),
    }
    if opcode == OP_IDS {
        // Check the count as soon as it is present, before the (possibly large) body.
        if let Some(&[a, b, c, d]) = buf.get(5..9) {
            let count = u32::from_be_bytes([a, b, c, d]);
            if count != (length - 5) / 8 {
                return Err(FrameError::IdsCountMismatch { count, length });
            }
        }
    }
    if opcode == OP_UUIDS {
        if let Some(&[a, b, c, d]) = buf.get(5..9) {
            let count = u32::from_be_bytes([a, b, c, d]);
            if count != (length - 5) / 16 {
                return Err(FrameError::BadUuids(
                    "count disagrees with the frame length",
                ));
            }
        }
    }
    if opcode == OP_MASKED_IDS {
        if let Some(&k) = buf.get(5) {
            if k > MAX_MASK_KEY_ID {
                return Err(FrameError::BadMaskedIds("key ID above 61"));
            }
        }
        if let Some(&[a, b, c, d]) = buf.get(6..10) {
            let count = u32::from_be_bytes([a, b, c, d]);
            if count != (length - 6) / 8 {
                return Err(FrameError::BadMaskedIds(
                    "count disagrees with the frame length",
                ));
            }
        }
    }
    if opcode == OP_VALUES {
        // The mode and the count as soon as they are present, before the body.
        if let Some(&m) = buf.get(5) {
            if SeqMode::of_byte(m).is_none() {
                return Err(FrameError::BadValues("unknown sequence mode"));
            }
        }
        if let Some(&[a, b, c, d]) = buf.get(6..10) {
            let count = u32::from_be_bytes([a, b, c, d]);
            if count != (length - 6) / 8 {
                return Err(FrameError::BadValues(
                    "count disagrees with the frame length",
                ));
            }
        }
    }
    let total = 4 + length as usize;
    let Some(frame) = buf.get(..total) else {
        return Ok(None);
    };
    let p = &frame[5..];
    let response = match opcode {
        OP_HELLO_OK => {
            let u16_at = |i: usize| u16::from_be_bytes([p[i], p[i + 1]]);
            let u32_at = |i: usize| u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
            let hello = ServerHello {
                version: u16_at(0),
                epoch_ms: be_u64(&p[2..10]),
                timestamp_bits: p[10],
                worker_bits: p[11],
                sequence_bits: p[12],
                region_bits: p[13],
                max_batch: u32_at(14),
                max_request_frame: u32_at(18),
                workers: WorkerRange::new(u32_at(22).into(), u32_at(26).into()),
                shard: u16_at(30),
            };
            hello.validate_layout()?;
            ResponseRef::HelloOk(hello)
        }
        OP_IDS => {
            let bytes = &p[4..];
            if let Some(index) = bytes.chunks_exact(8).position(|c| c[0] & 0x80 != 0) {
                return Err(FrameError::IdTopBitSet {
                    index: index as u32,
                });
            }
            ResponseRef::Ids(IdsRef { bytes })
        }
        OP_PONG => ResponseRef::Pong(be_u64(p)),
        OP_MASKED_IDS => {
            let bytes = &p[5..];
            if bytes.chunks_exact(8).any(|c| c[0] & 0x80 != 0) {
                return Err(FrameError::BadMaskedIds("a masked ID has the top bit set"));
            }
            ResponseRef::MaskedIds(MaskedIdsRef {
                key_id: p[0],
                ids: IdsRef { bytes },
            })
        }
        OP_UUIDS => {
            let bytes = &p[4..];
            let mut previous: Option<&[u8]> = None;
            for u in bytes.chunks_exact(16) {
                if u[6] >> 4 != 7 {
                    return Err(FrameError::BadUuids("a UUID's version is not 7"));
                }
                if u[8] >> 6 != 0b10 {
                    return Err(FrameError::BadUuids("a UUID's variant is not RFC 9562's"));
                }
                if previous.is_some_and(|prev| prev >= u) {
                    return Err(FrameError::BadUuids("UUIDs are not strictly increasing"));
                }
                previous = Some(u);
            }
            ResponseRef::Uuids(UuidsRef { bytes })
        }
        OP_VALUES => {
            let mode = SeqMode::of_byte(p[0]).unwrap_or(SeqMode::Dense);
            let bytes = &p[5..];
            let mut previous = 0u64;
            for v in bytes.chunks_exact(8).map(be_u64) {
                if v == 0 || v >> 63 != 0 {
                    return Err(FrameError::BadValues("a value is outside 1 ..= 2^63 - 1"));
                }
                if v <= previous {
                    return Err(FrameError::BadValues("values are not strictly increasing"));
                }
                previous = v;
            }
            ResponseRef::Values(ValuesRef {
                mode,
                values: IdsRef { bytes },
            })
        }
        OP_RANGES => {
            let total = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
            let runs = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
            let bytes = &p[8..];
            if runs as usize != bytes.len() / 12 {
                return Err(FrameError::BadRanges(
                    "run count disagrees with the frame length",
                ));
            }
            let r = RangesRef { total, bytes };
            let mut sum = 0u64;
            let mut next_free = 0u64; // the first ID a following run may start at
            for (first, count) in r.iter() {
                if count == 0 {
                    return Err(FrameError::BadRanges("a run is empty"));
                }
                if first < next_free {
                    return Err(FrameError::BadRanges("runs overlap or are not increasing"));
                }
                let last = first.checked_add(u64::from(count) - 1);
                match last {
                    Some(last) if last < 1 << 63 => next_free = last + 1,
                    _ => return Err(FrameError::BadRanges("a run reaches the sign bit")),
                }
                sum += u64::from(count);
            }
            if sum != u64::from(total) {
                return Err(FrameError::BadRanges("run counts do not sum to the total"));
            }
            ResponseRef::Ranges(r)
        }
        _ => {
            let status = Status(u16::from_be_bytes([p[0], p[1]]));
            let message = std::str::from_utf8(&p[2..]).map_err(|_| FrameError::InvalidUtf8)?;
            ResponseRef::Error { status, message }
        }
    };
    Ok(Some((response, total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u32 = 6 + 8 * 65536;

    fn hello() -> ServerHello {
        ServerHello {
            version: 1,
            epoch_ms: 1_704_067_200_000,
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            region_bits: 0,
            max_batch: 65536,
            max_request_frame: 64,
            workers: WorkerRange::new(512, 512),
            shard: 1,
        }
    }

    fn round_trip(r: Response) {
        let mut b = Vec::new();
        r.encode(&mut b).unwrap();
        for k in 0..b.len() {
            assert_eq!(decode_response(&b[..k], MAX), Ok(None), "prefix {k}");
        }
        let (got, n) = decode_response(&b, MAX).unwrap().unwrap();
        assert_eq!(n, b.len());
        assert_eq!(got.into_owned(), r);
    }

    #[test]
    fn every_response_round_trips() {
        round_trip(Response::HelloOk(hello()));
        round_trip(Response::Ids(vec![1]));
        round_trip(Response::Ids(vec![0, i64::MAX as u64, 42]));
        round_trip(Response::Pong(u64::MAX));
        round_trip(Response::Error {
            status: Status::BATCH_TOO_LARGE,
            message: "count exceeds max_batch".into(),
        });
        round_trip(Response::Error {
            status: Status(999),
            message: String::new(),
        });
    }

    #[test]
    fn hello_ok_is_37_bytes() {
        let mut b = Vec::new();
        encode_hello_ok(&hello(), &mut b).unwrap();
        assert_eq!(b.len(), 37);
        assert_eq!(&b[..5], &[0, 0, 0, 33, 0x81]);
    }

    #[test]
    fn hello_ok_refuses_a_worker_range_beyond_the_wire() {
        let widest = WorkerRange::new(u32::MAX.into(), u32::MAX.into());
        let mut b = Vec::new();
        encode_hello_ok(
            &ServerHello {
                workers: widest,
                ..hello()
            },
            &mut b,
        )
        .unwrap();
        let (got, _) = decode_response(&b, MAX).unwrap().unwrap();
        assert!(matches!(got, ResponseRef::HelloOk(h) if h.workers == widest));
        for workers in [
            WorkerRange::new(1 << 32, 1),
            WorkerRange::new(0, 1 << 32),
            WorkerRange::new(u64::MAX, u64::MAX),
        ] {
            let h = ServerHello { workers, ..hello() };
            let mut b = Vec::new();
            assert_eq!(encode_hello_ok(&h, &mut b), Err(WorkersBeyondWire(workers)));
            assert_eq!(
                Response::HelloOk(h).encode(&mut b),
                Err(WorkersBeyondWire(workers))
            );
            assert!(b.is_empty(), "nothing written for {workers}");
        }
    }

    #[test]
    fn ids_header_then_ids_equals_encode_ids() {
        let ids = [5u64, 6, 7];
        let mut a = Vec::new();
        encode_ids_header(3, &mut a);
        for id in ids {
            a.put_u64(id);
        }
        let mut b = Vec::new();
        encode_ids(&ids, &mut b);
        assert_eq!(a, b);
        assert_eq!(&a[..9], &[0, 0, 0, 29, 0x82, 0, 0, 0, 3]);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn empty_ids_are_never_encoded() {
        encode_ids(&[], &mut Vec::new());
    }

    #[test]
    fn ids_ref_accessors() {
        let mut b = Vec::new();
        encode_ids(&[10, 20, 30], &mut b);
        let Some((ResponseRef::Ids(ids), _)) = decode_response(&b, MAX).unwrap() else {
            panic!("not IDS");
        };
        assert_eq!(ids.len(), 3);
        assert!(!ids.is_empty());
        assert_eq!(ids.get(0), Some(10));
        assert_eq!(ids.get(2), Some(30));
        assert_eq!(ids.get(3), None);
        assert_eq!(ids.get(usize::MAX), None);
        assert_eq!(ids.iter().rev().collect::<Vec<_>>(), [30, 20, 10]);
        assert_eq!(ids.iter().len(), 3);
        let mut dst = [0u64; 2];
        assert_eq!(ids.copy_into(&mut dst), 2);
        assert_eq!(dst, [10, 20]);
        let mut dst = [0u64; 4];
        assert_eq!(ids.copy_into(&mut dst), 3);
        assert_eq!(dst, [10, 20, 30, 0]);
        assert_eq!(ids.into_iter().sum::<u64>(), 60);
        assert_eq!(ids.as_bytes().len(), 24);
        assert_eq!(format!("{ids:?}"), "[10, 20, 30]");
    }

    #[test]
    fn error_message_truncated_on_char_boundary() {
        let msg = "é".repeat(200); // 400 bytes, 2 per char
        let mut b = Vec::new();
        encode_error(Status::INTERNAL, &msg, &mut b);
        let (r, _) = decode_response(&b, MAX).unwrap().unwrap();
        let ResponseRef::Error { status, message } = r else {
            panic!()
        };
        assert_eq!(status, Status::INTERNAL);
        assert_eq!(message.len(), 254);
        assert_eq!(truncate_message(&"a".repeat(300)).len(), 255);
        assert_eq!(truncate_message("short"), "short");
    }

    #[test]
    fn length_faults() {
        assert_eq!(
            decode_response(&[0, 0, 0, 0], MAX),
            Err(FrameError::EmptyFrame)
        );
        assert_eq!(
            decode_response(&[0xFF; 4], MAX).unwrap_err().status(),
            Status::FRAME_TOO_LARGE
        );
        let mut b = Vec::new();
        encode_ids(&[1, 2, 3], &mut b);
        // 29 bytes: rejected at a limit of 28, accepted at 29.
        assert_eq!(
            decode_response(&b, 28).unwrap_err(),
            FrameError::TooLarge {
                length: 29,
                max: 28
            }
        );
        assert!(decode_response(&b, 29).unwrap().is_some());
        for (len, op) in [
            (32u32, 0x81u8),
            (34, 0x81),
            (8, 0x83),
            (10, 0x83),
            (2, 0xFF),
            (259, 0xFF),
            (5, 0x82),
            (12, 0x82),
            (14, 0x82),
        ] {
            let mut f = len.to_be_bytes().to_vec();
            f.push(op);
            let e = decode_response(&f, u32::MAX).unwrap_err();
            assert!(
                matches!(e, FrameError::WrongLength { .. }),
                "{len} {op:#x}: {e}"
            );
            assert_eq!(e.status(), Status::BAD_FRAME);
        }
    }

    #[test]
    fn ranges_round_trip_and_every_rule_is_enforced() {
        let runs = vec![(100u64, 3u32), (4096, 2), (1 << 40, 1)];
        let mut buf = Vec::new();
        encode_ranges(&runs, &mut buf);
        assert_eq!(buf.len(), 4 + 9 + 12 * 3);
        let (r, used) = decode_response(&buf, MAX).unwrap().unwrap();
        assert_eq!(used, buf.len());
        let ResponseRef::Ranges(r) = r else {
            panic!("{r:?}")
        };
        assert_eq!((r.total(), r.runs()), (6, 3));
        assert_eq!(r.iter().collect::<Vec<_>>(), runs);
        let mut ids = Vec::new();
        r.expand_into(&mut ids);
        assert_eq!(ids, vec![100, 101, 102, 4096, 4097, 1 << 40]);
        assert_eq!(
            ResponseRef::Ranges(r).into_owned(),
            Response::Ranges(runs.clone()),
            "owned form keeps the runs"
        );
        // Every prefix is incomplete, never an error.
        for cut in 0..buf.len() {
            assert_eq!(decode_response(&buf[..cut], MAX), Ok(None), "cut {cut}");
        }
        let frame = |total: u32, runs: &[(u64, u32)], declared: u32| {
            let mut b = Vec::new();
            b.extend_from_slice(&(9 + 12 * runs.len() as u32).to_be_bytes());
            b.push(0x84);
            b.extend_from_slice(&total.to_be_bytes());
            b.extend_from_slice(&declared.to_be_bytes());
            for (f, c) in runs {
                b.extend_from_slice(&f.to_be_bytes());
                b.extend_from_slice(&c.to_be_bytes());
            }
            b
        };
        let bad = |b: Vec<u8>| match decode_response(&b, MAX) {
            Err(e) => {
                assert_eq!(e.status(), Status::BAD_FRAME);
                e
            }
            other => panic!("accepted {other:?}"),
        };
        assert!(matches!(
            bad(frame(3, &[(1, 2)], 1)),
            FrameError::BadRanges(_)
        ));
        assert!(matches!(
            bad(frame(2, &[(1, 2)], 2)),
            FrameError::BadRanges(_)
        ));
        assert!(matches!(
            bad(frame(0, &[(1, 0)], 1)),
            FrameError::BadRanges(_)
        ));
        assert!(matches!(
            bad(frame(4, &[(10, 2), (11, 2)], 2)),
            FrameError::BadRanges(_)
        ));
        assert!(matches!(
            bad(frame(4, &[(10, 2), (5, 2)], 2)),
            FrameError::BadRanges(_)
        ));
        assert!(matches!(
            bad(frame(2, &[((1 << 63) - 1, 2)], 1)),
            FrameError::BadRanges(_)
        ));
        assert!(matches!(
            bad(frame(1, &[(u64::MAX, 1)], 1)),
            FrameError::BadRanges(_)
        ));
        assert!(matches!(
            bad(vec![0, 0, 0, 9, 0x84, 0, 0, 0, 0, 0, 0, 0, 0]),
            FrameError::WrongLength { .. }
        ));
        // Adjacent runs are fine; the last ID may be 2^63 - 1.
        let ok = frame(3, &[(10, 2), (12, 1)], 2);
        assert!(decode_response(&ok, MAX).unwrap().is_some());
        let ok = frame(1, &[((1 << 63) - 1, 1)], 1);
        assert!(decode_response(&ok, MAX).unwrap().is_some());
    }

    #[test]
    fn values_frames_are_checked() {
        let mut ok = Vec::new();
        encode_values(SeqMode::Strict, &[1, 2, 10, (1 << 63) - 1], &mut ok);
        assert_eq!(&ok[..10], [0, 0, 0, 38, 0x85, 1, 0, 0, 0, 4]);
        let (r, n) = decode_response(&ok, MAX).unwrap().unwrap();
        assert_eq!(n, ok.len());
        assert_eq!(
            r.into_owned(),
            Response::Values {
                mode: SeqMode::Strict,
                values: vec![1, 2, 10, (1 << 63) - 1]
            }
        );
        // Incomplete until whole.
        assert_eq!(decode_response(&ok[..ok.len() - 1], MAX), Ok(None));
        let raw = |count: u32, values: &[u64]| {
            let mut b = (6 + 8 * values.len() as u32).to_be_bytes().to_vec();
            b.push(0x85);
            b.push(0);
            b.extend_from_slice(&count.to_be_bytes());
            for v in values {
                b.extend_from_slice(&v.to_be_bytes());
            }
            b
        };
        for (bytes, why) in [
            (raw(2, &[1]), "count disagrees with the frame length"),
            (raw(1, &[0]), "a value is outside 1 ..= 2^63 - 1"),
            (raw(1, &[1 << 63]), "a value is outside 1 ..= 2^63 - 1"),
            (raw(2, &[5, 5]), "values are not strictly increasing"),
            (raw(2, &[6, 5]), "values are not strictly increasing"),
        ] {
            assert_eq!(
                decode_response(&bytes, MAX),
                Err(FrameError::BadValues(why)),
                "{bytes:02x?}"
            );
        }
        // An empty VALUES is a bad length, like an empty IDS.
        assert!(matches!(
            decode_response(&raw(0, &[]), MAX),
            Err(FrameError::WrongLength { opcode: 0x85, .. })
        ));
        // The mode and the count are checked before the body arrives.
        let early = raw(3, &[1, 2]);
        assert_eq!(
            decode_response(&early[..10], MAX),
            Err(FrameError::BadValues(
                "count disagrees with the frame length"
            ))
        );
        let mut mode2 = raw(1, &[1]);
        mode2[5] = 2;
        assert_eq!(
            decode_response(&mode2[..6], MAX),
            Err(FrameError::BadValues("unknown sequence mode"))
        );
    }

    #[test]
    fn uuids_frames_are_checked() {
        let layout = Layout::default();
        let u = |id: u64| layout.uuid_v7(id, 0xABCD).unwrap();
        round_trip(Response::Uuids(vec![u(1)]));
        round_trip(Response::Uuids(vec![u(1), u(2), u(1 << 40)]));
        let mut b = Vec::new();
        encode_uuids(&[u(1), u(2)], &mut b);
        assert_eq!(&b[..9], [0, 0, 0, 37, 0x86, 0, 0, 0, 2]);
        let limit = max_response_frame_for(4, 65536);
        assert_eq!(limit, 5 + 16 * 65536);
        assert_eq!(max_response_frame_for(3, 65536), max_response_frame(65536));
        assert_eq!(max_response_frame_for(4, 0), 258);
        assert_eq!(max_response_frame_for(4, u32::MAX), u32::MAX);
        let bad = |bytes: &[u8], why: &str| {
            assert_eq!(
                decode_response(bytes, limit),
                Err(FrameError::BadUuids(match why {
                    "version" => "a UUID's version is not 7",
                    "variant" => "a UUID's variant is not RFC 9562's",
                    "order" => "UUIDs are not strictly increasing",
                    _ => "count disagrees with the frame length",
                }))
            )
        };
        // A version 4 UUID, a wrong variant, out of order, equal, a count that disagrees.
        let mut v4 = b.clone();
        v4[9 + 6] = 0x40 | (v4[9 + 6] & 0x0F);
        bad(&v4, "version");
        let mut variant = b.clone();
        variant[9 + 16 + 8] &= 0x3F;
        bad(&variant, "variant");
        let mut back = Vec::new();
        encode_uuids(&[u(2), u(1)], &mut back);
        bad(&back, "order");
        let mut same = Vec::new();
        encode_uuids(&[u(2), u(2)], &mut same);
        bad(&same, "order");
        let mut count = b.clone();
        count[8] = 3;
        bad(&count[..9], "count");
        // Lengths that are not 5 + 16 * count with count >= 1, from the opcode alone.
        for length in [5u32, 20, 22, 36] {
            let mut w = length.to_be_bytes().to_vec();
            w.push(0x86);
            assert!(matches!(
                decode_response(&w, limit),
                Err(FrameError::WrongLength { opcode: 0x86, .. })
            ));
        }
    }

    #[test]
    fn unknown_response_opcode() {
        for op in [0x00u8, 0x01, 0x80, 0x88, 0xFE] {
            assert_eq!(
                decode_response(&[0, 0, 0, 1, op], MAX),
                Err(FrameError::UnknownResponseOpcode(op))
            );
        }
    }

    #[test]
    fn ids_count_mismatch_detected_early() {
        // length 21 (two IDs) but count 3: rejected once the count is readable.
        let f = [0, 0, 0, 21, 0x82, 0, 0, 0, 3];
        assert_eq!(decode_response(&f[..8], MAX), Ok(None));
        let e = decode_response(&f, MAX).unwrap_err();
        assert_eq!(
            e,
            FrameError::IdsCountMismatch {
                count: 3,
                length: 21
            }
        );
        assert_eq!(e.status(), Status::BAD_FRAME);
    }

    #[test]
    fn ids_top_bit() {
        let mut b = Vec::new();
        encode_ids_header(2, &mut b);
        b.put_u64(1);
        b.put_u64(1 << 63);
        assert_eq!(
            decode_response(&b, MAX),
            Err(FrameError::IdTopBitSet { index: 1 })
        );
    }

    #[test]
    fn error_invalid_utf8() {
        let f = [0, 0, 0, 5, 0xFF, 0, 100, 0xC3, 0x28];
        assert_eq!(decode_response(&f, MAX), Err(FrameError::InvalidUtf8));
    }

    #[test]
    fn hello_ok_bad_layout() {
        for (t, w, s, r) in [
            (41u8, 10u8, 13u8, 0u8),
            (41, 10, 12, 11),
            (64, 0, 0, 0),
            (41, 2, 10, 3),
        ] {
            let h = ServerHello {
                timestamp_bits: t,
                worker_bits: w,
                sequence_bits: s,
                region_bits: r,
                ..hello()
            };
            let mut b = Vec::new();
            encode_hello_ok(&h, &mut b).unwrap();
            let e = decode_response(&b, MAX).unwrap_err();
            assert!(matches!(e, FrameError::BadLayout { .. }));
            assert_eq!(e.status(), Status::BAD_FRAME);
        }
    }

    #[test]
    fn hello_ok_narrower_layouts() {
        // Any width up to 63 is the wire's: 62 bits, a JavaScript-safe 53, a 20-bit one.
        for (t, w, s) in [(41u8, 10u8, 11u8), (41, 2, 10), (10, 5, 5)] {
            let h = ServerHello {
                timestamp_bits: t,
                worker_bits: w,
                sequence_bits: s,
                ..hello()
            };
            let mut b = Vec::new();
            encode_hello_ok(&h, &mut b).unwrap();
            let (got, _) = decode_response(&b, MAX).unwrap().unwrap();
            assert_eq!(got.into_owned(), Response::HelloOk(h));
            assert_eq!(h.layout().unwrap().id_bits(), t + w + s);
            // Bits above the width are not the timestamp's.
            let top = 1u64 << (t + w + s);
            assert_eq!(h.decompose(top | 7), h.decompose(7));
        }
    }

    #[test]
    fn max_response_frame_values() {
        assert_eq!(max_response_frame(65536), 524_294);
        assert_eq!(max_response_frame(0), 258);
        assert_eq!(max_response_frame(1), 258);
        assert_eq!(max_response_frame(32), 262);
        assert_eq!(max_response_frame(u32::MAX), u32::MAX);
    }

    #[test]
    fn decompose_default_layout() {
        let h = hello();
        let (ms, worker, seq) = (123_456_789u64, 700u64, 4095u64);
        let id = (ms << 22) | (worker << 12) | seq;
        let p = h.decompose(id);
        assert_eq!(p.timestamp, ms);
        assert_eq!(p.unix_ms, h.epoch_ms + ms);
        assert_eq!(p.worker, worker);
        assert_eq!(p.region, 0);
        assert_eq!(p.sequence, seq);
        let r = ServerHello {
            region_bits: 3,
            ..h
        };
        assert_eq!(r.decompose(id).region, 700 >> 7);
        assert_eq!(r.decompose(id).worker, 700);
        assert_eq!(r.decompose(id).node, 700 & 127);
        assert_eq!(r.layout().unwrap().region_bits(), 3);
        // A layout the wire allows although no node runs it: a zero-width field.
        let zero = ServerHello {
            timestamp_bits: 63,
            worker_bits: 0,
            sequence_bits: 0,
            ..h
        };
        assert_eq!(zero.validate_layout(), Ok(()));
        assert_eq!(zero.decompose(5).timestamp, 5);
        assert_eq!(h.workers, WorkerRange::new(512, 512));
    }
}
