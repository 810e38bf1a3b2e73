"""Frame encoder and decoder for the idgen wire protocol, versions 1 to 4 (protocol/PROTOCOL.md).

The client offers versions 1..=4 and uses PING (version 1) on every connection, GET_RANGES
(version 2) for IDs on a connection that negotiated version 2 or later (GET_IDS on a version 1
one), GET_VALUES (version 3) for named sequences on a connection that negotiated version 3 or
later, GET_UUIDS (version 4) for version 7 UUIDs on a connection that negotiated version 4.

Pure functions, no I/O: the client feeds received bytes to :func:`decode_response` and
writes what the ``encode_*`` functions return. Framing faults raise
:class:`~idgen_client.errors.ProtocolError` with ``status`` 100 (BAD_FRAME) or 101
(FRAME_TOO_LARGE), exactly as the shared test vectors expect.
"""

import struct
import uuid
from typing import List, NamedTuple, Optional, Tuple, Union

from . import status as _status
from .errors import ProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "MIN_PROTOCOL_VERSION",
    "SEQUENCES_VERSION",
    "RANGES_VERSION",
    "UUIDS_VERSION",
    "MAGIC",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_RESPONSE_FRAME",
    "MAX_VALUES_PER_CALL",
    "MAX_SEQUENCE_NAME",
    "MODE_DENSE",
    "MODE_STRICT",
    "HelloOk",
    "Ids",
    "Ranges",
    "Pong",
    "Values",
    "Uuids",
    "ErrorFrame",
    "encode_hello",
    "encode_get_ids",
    "encode_get_ranges",
    "encode_ping",
    "encode_get_values",
    "encode_get_uuids",
    "check_sequence_name",
    "check_get_values",
    "response_frame_limit",
    "decode_response",
]

#: The highest protocol version this client speaks (and offers in HELLO).
PROTOCOL_VERSION = 5
#: The lowest version it offers (and accepts in HELLO_OK).
MIN_PROTOCOL_VERSION = 1
#: The first version with GET_VALUES/VALUES (named sequences).
SEQUENCES_VERSION = 3
#: The first version with GET_RANGES/RANGES (IDs as runs of consecutive integers).
RANGES_VERSION = 2
#: The first version with GET_UUIDS/UUIDS (version 7 UUIDs made from IDs).
UUIDS_VERSION = 4
MAGIC = b"IDGN"

OP_HELLO = 0x01
OP_GET_IDS = 0x02
OP_PING = 0x03
OP_GET_RANGES = 0x04
OP_GET_VALUES = 0x05
OP_GET_UUIDS = 0x06
OP_GET_IDS_WITH = 0x07
#: GET_IDS_WITH's options (PROTOCOL.md section 3.8).
OPT_AFTER = 0x01
OPT_KEY = 0x02
OPT_MASKED = 0x04
#: The longest idempotency key, in bytes (visible ASCII).
MAX_IDEMPOTENCY_KEY_LEN = 64
#: The protocol version that has GET_IDS_WITH and MASKED_IDS.
IDS_WITH_VERSION = 5
OP_HELLO_OK = 0x81
OP_IDS = 0x82
OP_PONG = 0x83
OP_RANGES = 0x84
OP_VALUES = 0x85
OP_UUIDS = 0x86
OP_MASKED_IDS = 0x87
OP_ERROR = 0xFF

#: VALUES' ``mode`` byte.
MODE_DENSE = 0
MODE_STRICT = 1
_MODE_NAMES = {MODE_DENSE: "dense", MODE_STRICT: "strict"}

#: GET_VALUES' ``count`` is at most this (2^20), whatever the node's max_batch.
MAX_VALUES_PER_CALL = 1 << 20
#: The longest sequence name, in bytes.
MAX_SEQUENCE_NAME = 64
MAX_VALUE = (1 << 63) - 1

HELLO_OK_LENGTH = 33
PONG_LENGTH = 9
ERROR_MIN_LENGTH = 3
ERROR_MAX_LENGTH = 258  # 3 + 255 bytes of message
MAX_U32 = 0xFFFF_FFFF
MAX_U64 = 0xFFFF_FFFF_FFFF_FFFF

DEFAULT_MAX_BATCH = 65536
#: Response frame limit before HELLO_OK has arrived (section 7): 5 + 8 * 65536.
DEFAULT_MAX_RESPONSE_FRAME = 5 + 8 * DEFAULT_MAX_BATCH

_HELLO_OK = struct.Struct(">HQBBBBIIIIH")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_RUN = struct.Struct(">QI")


class HelloOk(NamedTuple):
    """HELLO_OK (0x81): negotiated version, ID layout and the connection's limits."""

    version: int
    epoch_ms: int
    timestamp_bits: int
    worker_bits: int
    sequence_bits: int
    region_bits: int
    max_batch: int
    max_request_frame: int
    worker_first: int
    worker_count: int
    shard: int


class Ids(NamedTuple):
    """IDS (0x82): the IDs of one GET_IDS, in increasing order."""

    ids: List[int]


class Ranges(NamedTuple):
    """RANGES (0x84, version 2): the IDs of one GET_RANGES, sent as runs of consecutive
    integers and expanded here, in increasing order."""

    ids: List[int]


class Pong(NamedTuple):
    """PONG (0x83): the token of the PING it answers."""

    token: int


class Values(NamedTuple):
    """VALUES (0x85, version 3): the values of one GET_VALUES, strictly increasing, each in
    ``1 ..= 2^63 - 1``, and the sequence's ``mode`` (:data:`MODE_DENSE` or
    :data:`MODE_STRICT`)."""

    mode: int
    values: List[int]

    @property
    def mode_name(self) -> str:
        """``"dense"`` or ``"strict"``."""
        return _MODE_NAMES[self.mode]


class Uuids(NamedTuple):
    """UUIDS (0x86, version 4): the UUIDs of one GET_UUIDS, each of version 7 and RFC 9562's
    variant, strictly increasing."""

    uuids: List[uuid.UUID]


class MaskedIds(NamedTuple):
    """MASKED_IDS (0x87, version 5): the IDs of one GET_IDS_WITH with the masked option,
    masked with the key ``key_id`` (0..=61), in the IDs' order (which is not theirs)."""

    key_id: int
    ids: List[int]


class ErrorFrame(NamedTuple):
    """ERROR (0xFF): a status and a human-readable message."""

    status: int
    message: str

    @property
    def name(self) -> Optional[str]:
        return _status.name(self.status)

    @property
    def closes(self) -> bool:
        return _status.closes_connection(self.status)

    @property
    def retry_elsewhere(self) -> bool:
        return _status.retry_elsewhere(self.status)


Response = Union[HelloOk, Ids, Ranges, Pong, Values, Uuids, MaskedIds, ErrorFrame]


# ---------------------------------------------------------------------------------------
# Requests


def encode_hello(
    min_version: int = MIN_PROTOCOL_VERSION, max_version: int = PROTOCOL_VERSION
) -> bytes:
    """HELLO (0x01): magic ``IDGN`` and the inclusive range of versions offered (by default
    what this client speaks, 1..=5)."""
    if not (0 <= min_version <= 0xFFFF and 0 <= max_version <= 0xFFFF):
        raise ValueError(f"HELLO versions {min_version}..={max_version} do not fit in a u16")
    return struct.pack(">IB4sHH", 9, OP_HELLO, MAGIC, min_version, max_version)


def encode_get_ids(count: int) -> bytes:
    """GET_IDS (0x02) for ``count`` IDs. The encoder accepts any u32 (the server rejects
    0 and counts above max_batch with an ERROR that keeps the connection open)."""
    if not 0 <= count <= MAX_U32:
        raise ValueError(f"GET_IDS count {count} does not fit in a u32")
    return struct.pack(">IBI", 5, OP_GET_IDS, count)


def encode_get_ranges(count: int) -> bytes:
    """GET_RANGES (0x04, version 2) for ``count`` IDs, answered with RANGES: the same count
    rules as GET_IDS."""
    if not 0 <= count <= MAX_U32:
        raise ValueError(f"GET_RANGES count {count} does not fit in a u32")
    return struct.pack(">IBI", 5, OP_GET_RANGES, count)


def encode_get_uuids(count: int) -> bytes:
    """GET_UUIDS (0x06, version 4) for ``count`` version 7 UUIDs, answered with UUIDS."""
    if not 0 <= count <= MAX_U32:
        raise ValueError(f"GET_UUIDS count {count} does not fit in a u32")
    return struct.pack(">IBI", 5, OP_GET_UUIDS, count)


def check_idempotency_key(key: Union[str, bytes]) -> bytes:
    """The key's bytes if it is 1 to 64 visible ASCII characters, else ValueError."""
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not 1 <= len(raw) <= MAX_IDEMPOTENCY_KEY_LEN:
        raise ValueError(f"an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes, not {len(raw)}")
    if any(b < 0x21 or b > 0x7E for b in raw):
        raise ValueError("an idempotency key is visible ASCII characters (no spaces)")
    return raw


def encode_get_ids_with(
    count: int,
    after: Optional[int] = None,
    key: Optional[Union[str, bytes]] = None,
    masked: bool = False,
) -> bytes:
    """GET_IDS_WITH (0x07, version 5): ``count`` IDs, each greater than ``after`` (an ID
    seen), under an idempotency ``key``, masked (answered by MASKED_IDS)."""
    if not 0 <= count <= MAX_U32:
        raise ValueError(f"GET_IDS_WITH count {count} does not fit in a u32")
    options = (OPT_AFTER if after is not None else 0) | (OPT_KEY if key is not None else 0)
    options |= OPT_MASKED if masked else 0
    body = struct.pack(">BIB", OP_GET_IDS_WITH, count, options)
    if after is not None:
        if not 0 <= after <= MAX_U64:
            raise ValueError(f"after {after} does not fit in a u64")
        body += struct.pack(">Q", after)
    if key is not None:
        raw = check_idempotency_key(key)
        body += bytes([len(raw)]) + raw
    return struct.pack(">I", len(body)) + body


def encode_ping(token: int) -> bytes:
    """PING (0x03) with a u64 token."""
    if not 0 <= token <= MAX_U64:
        raise ValueError(f"PING token {token} does not fit in a u64")
    return struct.pack(">IBQ", 9, OP_PING, token)


_NAME_FIRST = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")
_NAME_REST = _NAME_FIRST | frozenset(b"._-")


def check_sequence_name(name: Union[str, bytes]) -> bytes:
    """A sequence name as the bytes GET_VALUES carries, after checking it: 1 to 64 bytes of
    ``a-z``, ``0-9``, ``.``, ``_`` and ``-``, the first a letter or a digit. Raises
    ``TypeError`` for something that is not a ``str`` (or ``bytes``), ``ValueError`` for a
    name the server would refuse with ``204 INVALID_SEQUENCE_NAME``."""
    if isinstance(name, str):
        try:
            raw = name.encode("ascii")
        except UnicodeEncodeError:
            raise ValueError(
                f"sequence name {name!r} has a character outside a-z, 0-9, '.', '_', '-'"
            ) from None
    elif isinstance(name, (bytes, bytearray)):
        raw = bytes(name)
    else:
        raise TypeError(f"a sequence name is a str, not {type(name).__name__}")
    if not 1 <= len(raw) <= MAX_SEQUENCE_NAME:
        raise ValueError(
            f"sequence name {name!r} is {len(raw)} bytes long, not 1 to {MAX_SEQUENCE_NAME}"
        )
    if raw[0] not in _NAME_FIRST:
        raise ValueError(f"sequence name {name!r} must start with a-z or 0-9")
    bad = [chr(b) if b < 0x80 else f"\\x{b:02x}" for b in raw if b not in _NAME_REST]
    if bad:
        raise ValueError(
            f"sequence name {name!r} has {bad[0]!r}: only a-z, 0-9, '.', '_' and '-' are allowed"
        )
    return raw


def encode_get_values(name: Union[str, bytes], count: int) -> bytes:
    """GET_VALUES (0x05, version 3) for ``count`` values of sequence ``name``.

    Like :func:`encode_get_ids`, the encoder checks only what the frame can carry (a u32
    count, a name of 1 to 64 bytes); :func:`check_sequence_name` and
    :func:`check_get_values` check what the server would refuse."""
    if not 0 <= count <= MAX_U32:
        raise ValueError(f"GET_VALUES count {count} does not fit in a u32")
    if isinstance(name, str):
        raw = name.encode("utf-8")
    elif isinstance(name, (bytes, bytearray)):
        raw = bytes(name)
    else:
        raise TypeError(f"a sequence name is a str, not {type(name).__name__}")
    if not 1 <= len(raw) <= MAX_SEQUENCE_NAME:
        raise ValueError(
            f"a GET_VALUES name is 1 to {MAX_SEQUENCE_NAME} bytes, not {len(raw)}"
        )
    return struct.pack(">IBI", 5 + len(raw), OP_GET_VALUES, count) + raw


class SequencesUnsupported(ValueError):
    """Raised by :func:`check_get_values` for a connection below version 3 (the client turns
    it into :class:`~idgen_client.errors.SequencesUnsupportedError`)."""

    def __init__(self, version: int):
        self.version = version
        super().__init__(
            f"the node speaks protocol version {version}; named sequences need version "
            f"{SEQUENCES_VERSION}"
        )


def check_get_values(
    name: Union[str, bytes],
    count: int,
    *,
    version: int,
    max_batch: int,
    max_request_frame: int,
) -> bytes:
    """Everything a client checks before it sends GET_VALUES on a connection that negotiated
    ``version`` and announced ``max_batch`` and ``max_request_frame``; returns the frame.

    Raises :class:`SequencesUnsupported` below version 3 (the node would answer
    ``202 UNKNOWN_OPCODE``); ``ValueError`` for a count outside ``1 ..= min(max_batch,
    2^20)`` (``200``/``201``), a bad name (``204``), or a frame longer than the node's
    ``max_request_frame`` (``101 FRAME_TOO_LARGE``, which would close the connection);
    ``TypeError`` for arguments of the wrong type. Nothing that fails here is sent."""
    # In the server's order (PROTOCOL.md 3.5): the count, then the name.
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"n must be an int, not {type(count).__name__}")
    limit = min(max_batch, MAX_VALUES_PER_CALL)
    if not 1 <= count <= limit:
        raise ValueError(
            f"n must be 1 to {limit} (the node's max_batch {max_batch}, at most "
            f"{MAX_VALUES_PER_CALL}), not {count}"
        )
    raw = check_sequence_name(name)
    if version < SEQUENCES_VERSION:
        raise SequencesUnsupported(version)
    frame = encode_get_values(raw, count)
    if len(frame) - 4 > max_request_frame:
        raise ValueError(
            f"GET_VALUES for {name!r} is a {len(frame) - 4}-byte frame; the node accepts "
            f"request frames of at most {max_request_frame} bytes"
        )
    return frame


# ---------------------------------------------------------------------------------------
# Responses


def response_frame_limit(max_batch: int, version: int = 1) -> int:
    """The client's response frame limit once max_batch is known: max(5 + 8 * max_batch, 258)
    (PROTOCOL.md section 7). From version 3 one byte more, ``6 + 8 * max_batch``: a VALUES
    frame of ``max_batch`` values (its ``mode`` byte) must fit too; from version 4
    ``5 + 16 * max_batch``, a UUIDS frame of ``max_batch`` UUIDs."""
    if version >= UUIDS_VERSION:
        return max(5 + 16 * max_batch, ERROR_MAX_LENGTH)
    if version >= SEQUENCES_VERSION:
        return max(6 + 8 * min(max_batch, MAX_VALUES_PER_CALL), 5 + 8 * max_batch, ERROR_MAX_LENGTH)
    return max(5 + 8 * max_batch, ERROR_MAX_LENGTH)


def _bad(message: str) -> ProtocolError:
    return ProtocolError(message, status=_status.BAD_FRAME)


def _check_header(
    length: int, opcode: Optional[int], max_frame: int, buf: Union[bytes, bytearray, memoryview] = b""
) -> None:
    """Reject a frame as early as its length prefix (and then its opcode, and a VALUES
    frame's mode and count) allows."""
    if length == 0:
        raise _bad("frame length 0")
    if length > max_frame:
        raise ProtocolError(
            f"frame length {length} exceeds limit {max_frame}", status=_status.FRAME_TOO_LARGE
        )
    if opcode is None:
        return
    if opcode == OP_HELLO_OK:
        if length != HELLO_OK_LENGTH:
            raise _bad(f"HELLO_OK length {length}, expected {HELLO_OK_LENGTH}")
    elif opcode == OP_PONG:
        if length != PONG_LENGTH:
            raise _bad(f"PONG length {length}, expected {PONG_LENGTH}")
    elif opcode == OP_IDS:
        if length < 5 + 8 or (length - 5) % 8 != 0:
            raise _bad(f"IDS length {length} is not 5 + 8 * count with count >= 1")
    elif opcode == OP_RANGES:
        if length < 9 + 12 or (length - 9) % 12 != 0:
            raise _bad(f"RANGES length {length} is not 9 + 12 * runs with runs >= 1")
    elif opcode == OP_VALUES:
        if length < 6 + 8 or (length - 6) % 8 != 0:
            raise _bad(f"VALUES length {length} is not 6 + 8 * count with count >= 1")
        # The mode and the count as soon as they have arrived, before the body.
        if len(buf) > 5 and buf[5] not in _MODE_NAMES:
            raise _bad(f"VALUES with unknown sequence mode {buf[5]}")
        if len(buf) >= 10:
            (count,) = _U32.unpack_from(buf, 6)
            if count != (length - 6) // 8:
                raise _bad(f"VALUES count {count} disagrees with frame length {length}")
    elif opcode == OP_UUIDS:
        if length < 5 + 16 or (length - 5) % 16 != 0:
            raise _bad(f"UUIDS length {length} is not 5 + 16 * count with count >= 1")
        # The count as soon as it has arrived, before the body.
        if len(buf) >= 9:
            (count,) = _U32.unpack_from(buf, 5)
            if count != (length - 5) // 16:
                raise _bad(f"UUIDS count {count} disagrees with frame length {length}")
    elif opcode == OP_MASKED_IDS:
        if length < 6 + 8 or (length - 6) % 8 != 0:
            raise _bad(f"MASKED_IDS length {length} is not 6 + 8 * count with count >= 1")
        if len(buf) > 5 and buf[5] > 61:
            raise _bad(f"MASKED_IDS with key ID {buf[5]} above 61")
        if len(buf) >= 10:
            (count,) = _U32.unpack_from(buf, 6)
            if count != (length - 6) // 8:
                raise _bad(f"MASKED_IDS count {count} disagrees with frame length {length}")
    elif opcode == OP_ERROR:
        if not ERROR_MIN_LENGTH <= length <= ERROR_MAX_LENGTH:
            raise _bad(f"ERROR length {length} outside {ERROR_MIN_LENGTH}..={ERROR_MAX_LENGTH}")
    else:
        raise _bad(f"unknown response opcode 0x{opcode:02x}")


def _parse_body(opcode: int, body: bytes, max_frame: int = DEFAULT_MAX_RESPONSE_FRAME) -> Response:
    """Parse a complete frame body (everything after the opcode byte). ``max_frame`` bounds
    the IDs a RANGES frame may expand to: no more than an IDS frame within it could hold."""
    if opcode == OP_IDS:
        (count,) = _U32.unpack_from(body, 0)
        if count == 0:
            raise _bad("IDS with count 0")
        if 4 + 8 * count != len(body):
            raise _bad(f"IDS count {count} disagrees with frame length {len(body) + 1}")
        # The top bit of an ID is the top bit of its first byte: check them all at once.
        if max(body[4::8]) >= 0x80:
            raise _bad("IDS holds an ID with the top bit set")
        return Ids(list(struct.unpack_from(f">{count}Q", body, 4)))
    if opcode == OP_RANGES:
        total, runs = struct.unpack_from(">II", body, 0)
        if 8 + 12 * runs != len(body):
            raise _bad(f"RANGES runs {runs} disagrees with frame length {len(body) + 1}")
        # Checked before anything is expanded: a frame of a few bytes cannot claim 2^32 IDs.
        if total > (max_frame - 5) // 8:
            raise _bad(f"RANGES total {total} is more than a response may carry")
        ids: List[int] = []
        next_free = 0  # the smallest ID the next run may start at
        for first, count in _RUN.iter_unpack(body[8:]):
            if count == 0:
                raise _bad("RANGES holds a run of count 0")
            if len(ids) + count > total:
                raise _bad(f"RANGES runs hold more than its total {total}")
            if first < next_free:
                raise _bad("RANGES runs are not strictly increasing and disjoint")
            next_free = first + count
            if next_free - 1 > MAX_VALUE:
                raise _bad("RANGES holds an ID with the top bit set")
            ids.extend(range(first, next_free))
        if len(ids) != total:
            raise _bad(f"RANGES total {total} disagrees with its runs ({len(ids)} IDs)")
        return Ranges(ids)
    if opcode == OP_VALUES:
        mode = body[0]
        (count,) = _U32.unpack_from(body, 1)
        if count == 0:  # unreachable after _check_header (length >= 14), kept as a guard
            raise _bad("VALUES with count 0")
        if 5 + 8 * count != len(body):
            raise _bad(f"VALUES count {count} disagrees with frame length {len(body) + 1}")
        values = list(struct.unpack_from(f">{count}Q", body, 5))
        previous = 0
        for v in values:
            if v == 0 or v > MAX_VALUE:
                raise _bad(f"VALUES holds {v}, outside 1 ..= 2^63 - 1")
            if v <= previous:
                raise _bad(f"VALUES not strictly increasing ({previous} then {v})")
            previous = v
        return Values(mode, values)
    if opcode == OP_UUIDS:
        (count,) = _U32.unpack_from(body, 0)
        if count == 0 or 4 + 16 * count != len(body):  # unreachable after _check_header
            raise _bad(f"UUIDS count {count} disagrees with frame length {len(body) + 1}")
        uuids = []
        previous = -1
        for k in range(count):
            raw = body[4 + 16 * k : 20 + 16 * k]
            if raw[6] >> 4 != 7:
                raise _bad(f"UUIDS holds a UUID of version {raw[6] >> 4}, not 7")
            if raw[8] >> 6 != 0b10:
                raise _bad(f"UUIDS holds a UUID whose variant bits are {raw[8] >> 6:02b}, not 10")
            value = int.from_bytes(raw, "big")
            if value <= previous:
                raise _bad("UUIDS not strictly increasing")
            previous = value
            uuids.append(uuid.UUID(bytes=raw))
        return Uuids(uuids)
    if opcode == OP_MASKED_IDS:
        key_id = body[0]
        (count,) = _U32.unpack_from(body, 1)
        if count == 0 or 5 + 8 * count != len(body):  # unreachable after _check_header
            raise _bad(f"MASKED_IDS count {count} disagrees with frame length {len(body) + 1}")
        if max(body[5::8]) >= 0x80:
            raise _bad("MASKED_IDS holds a value with the top bit set")
        return MaskedIds(key_id, list(struct.unpack_from(f">{count}Q", body, 5)))
    if opcode == OP_PONG:
        return Pong(_U64.unpack(body)[0])
    if opcode == OP_ERROR:
        code = (body[0] << 8) | body[1]
        try:
            message = body[2:].decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad(f"ERROR message is not UTF-8: {e}") from None
        return ErrorFrame(code, message)
    if opcode == OP_HELLO_OK:
        hello = HelloOk(*_HELLO_OK.unpack(body))
        if hello.timestamp_bits + hello.worker_bits + hello.sequence_bits > 63:
            raise _bad(
                "HELLO_OK layout bits "
                f"{hello.timestamp_bits}+{hello.worker_bits}+{hello.sequence_bits} > 63"
            )
        if hello.region_bits > hello.worker_bits:
            raise _bad(
                f"HELLO_OK region_bits {hello.region_bits} > worker_bits {hello.worker_bits}"
            )
        return hello
    raise _bad(f"unknown response opcode 0x{opcode:02x}")  # unreachable after _check_header


def decode_response(
    buf: Union[bytes, bytearray, memoryview], max_frame: int = DEFAULT_MAX_RESPONSE_FRAME
) -> Optional[Tuple[Response, int]]:
    """Decode the first response frame of ``buf``.

    Returns ``(frame, consumed)``, or ``None`` if more bytes are needed. Raises
    ProtocolError (status 100 or 101) for a malformed frame, as early as possible: an
    oversized length after its 4 bytes, a wrong length for a known opcode after the
    opcode byte, without waiting for the body.
    """
    if len(buf) < 4:
        return None
    (length,) = _U32.unpack_from(buf, 0)
    if len(buf) < 5:
        _check_header(length, None, max_frame)
        return None
    opcode = buf[4]
    _check_header(length, opcode, max_frame, buf)
    end = 4 + length
    if len(buf) < end:
        return None
    return _parse_body(opcode, bytes(buf[5:end]), max_frame), end
