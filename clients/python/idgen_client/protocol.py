"""Frame encoder and decoder for the idgen wire protocol, version 1 (protocol/PROTOCOL.md).

Pure functions, no I/O: the client feeds received bytes to :func:`decode_response` and
writes what the ``encode_*`` functions return. Framing faults raise
:class:`~idgen_client.errors.ProtocolError` with ``status`` 100 (BAD_FRAME) or 101
(FRAME_TOO_LARGE), exactly as the shared test vectors expect.
"""

import struct
from typing import List, NamedTuple, Optional, Tuple, Union

from . import status as _status
from .errors import ProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "MAGIC",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_RESPONSE_FRAME",
    "HelloOk",
    "Ids",
    "Pong",
    "ErrorFrame",
    "encode_hello",
    "encode_get_ids",
    "encode_ping",
    "response_frame_limit",
    "decode_response",
]

PROTOCOL_VERSION = 1
MAGIC = b"IDGN"

OP_HELLO = 0x01
OP_GET_IDS = 0x02
OP_PING = 0x03
OP_HELLO_OK = 0x81
OP_IDS = 0x82
OP_PONG = 0x83
OP_ERROR = 0xFF

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


class Pong(NamedTuple):
    """PONG (0x83): the token of the PING it answers."""

    token: int


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


Response = Union[HelloOk, Ids, Pong, ErrorFrame]


# ---------------------------------------------------------------------------------------
# Requests


def encode_hello(min_version: int = PROTOCOL_VERSION, max_version: int = PROTOCOL_VERSION) -> bytes:
    """HELLO (0x01): magic ``IDGN`` and the inclusive range of versions offered."""
    return struct.pack(">IB4sHH", 9, OP_HELLO, MAGIC, min_version, max_version)


def encode_get_ids(count: int) -> bytes:
    """GET_IDS (0x02) for ``count`` IDs. The encoder accepts any u32 (the server rejects
    0 and counts above max_batch with an ERROR that keeps the connection open)."""
    if not 0 <= count <= MAX_U32:
        raise ValueError(f"GET_IDS count {count} does not fit in a u32")
    return struct.pack(">IBI", 5, OP_GET_IDS, count)


def encode_ping(token: int) -> bytes:
    """PING (0x03) with a u64 token."""
    if not 0 <= token <= MAX_U64:
        raise ValueError(f"PING token {token} does not fit in a u64")
    return struct.pack(">IBQ", 9, OP_PING, token)


# ---------------------------------------------------------------------------------------
# Responses


def response_frame_limit(max_batch: int) -> int:
    """The client's response frame limit once max_batch is known: max(5 + 8 * max_batch, 258)."""
    return max(5 + 8 * max_batch, ERROR_MAX_LENGTH)


def _bad(message: str) -> ProtocolError:
    return ProtocolError(message, status=_status.BAD_FRAME)


def _check_header(length: int, opcode: Optional[int], max_frame: int) -> None:
    """Reject a frame as early as its length prefix (and then its opcode) allows."""
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
    elif opcode == OP_ERROR:
        if not ERROR_MIN_LENGTH <= length <= ERROR_MAX_LENGTH:
            raise _bad(f"ERROR length {length} outside {ERROR_MIN_LENGTH}..={ERROR_MAX_LENGTH}")
    else:
        raise _bad(f"unknown response opcode 0x{opcode:02x}")


def _parse_body(opcode: int, body: bytes) -> Response:
    """Parse a complete frame body (everything after the opcode byte)."""
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
        if hello.timestamp_bits + hello.worker_bits + hello.sequence_bits != 63:
            raise _bad(
                "HELLO_OK layout bits "
                f"{hello.timestamp_bits}+{hello.worker_bits}+{hello.sequence_bits} != 63"
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
    _check_header(length, opcode, max_frame)
    end = 4 + length
    if len(buf) < end:
        return None
    return _parse_body(opcode, bytes(buf[5:end])), end
