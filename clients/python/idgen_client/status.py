"""Status codes of ERROR frames (PROTOCOL.md section 5) and their classes."""

from typing import Dict, NamedTuple, Optional

__all__ = ["StatusInfo", "STATUSES", "name", "closes_connection", "retry_elsewhere"]


class StatusInfo(NamedTuple):
    code: int
    name: str
    closes_connection: bool
    retry_elsewhere: bool


# The normative table of PROTOCOL.md section 5.
STATUSES: Dict[int, StatusInfo] = {
    s.code: s
    for s in (
        StatusInfo(100, "BAD_FRAME", True, False),
        StatusInfo(101, "FRAME_TOO_LARGE", True, False),
        StatusInfo(102, "HANDSHAKE_REQUIRED", True, False),
        StatusInfo(103, "UNSUPPORTED_VERSION", True, False),
        StatusInfo(200, "INVALID_COUNT", False, False),
        StatusInfo(201, "BATCH_TOO_LARGE", False, False),
        StatusInfo(202, "UNKNOWN_OPCODE", False, False),
        StatusInfo(203, "UNKNOWN_SEQUENCE", False, False),
        StatusInfo(204, "INVALID_SEQUENCE_NAME", False, False),
        StatusInfo(205, "INVALID_OPTION", False, False),
        StatusInfo(206, "IDEMPOTENCY_KEY_REUSED", False, False),
        StatusInfo(207, "IDEMPOTENCY_KEY_IN_FLIGHT", False, False),
        StatusInfo(300, "UNAVAILABLE_LEASE", False, True),
        StatusInfo(301, "UNAVAILABLE_CLOCK", False, True),
        StatusInfo(302, "SHUTTING_DOWN", True, True),
        StatusInfo(303, "OVERLOADED", True, True),
        StatusInfo(304, "EXHAUSTED", False, False),
        StatusInfo(305, "RANGE_CHANGED", True, True),
        StatusInfo(306, "BUSY", False, True),
        StatusInfo(307, "SEQUENCE_USED_UP", False, False),
        StatusInfo(308, "SEQUENCE_UNAVAILABLE", False, True),
        StatusInfo(500, "INTERNAL", True, False),
    )
}

BAD_FRAME = 100
FRAME_TOO_LARGE = 101
INVALID_COUNT = 200
BATCH_TOO_LARGE = 201
UNKNOWN_SEQUENCE = 203
INVALID_SEQUENCE_NAME = 204
INVALID_OPTION = 205
IDEMPOTENCY_KEY_REUSED = 206
IDEMPOTENCY_KEY_IN_FLIGHT = 207
EXHAUSTED = 304
RANGE_CHANGED = 305
BUSY = 306
SEQUENCE_USED_UP = 307
SEQUENCE_UNAVAILABLE = 308


def name(code: int) -> Optional[str]:
    """The status name, or ``None`` for a code not in the table."""
    info = STATUSES.get(code)
    return info.name if info else None


def closes_connection(code: int) -> bool:
    """Known codes per the table; unknown codes by class: 2xx and 3xx keep the connection
    open, every other code closes it."""
    info = STATUSES.get(code)
    if info is not None:
        return info.closes_connection
    return not (200 <= code <= 399)


def retry_elsewhere(code: int) -> bool:
    """Known codes per the table; unknown codes: 3xx means try another node (``304
    EXHAUSTED`` and ``307 SEQUENCE_USED_UP`` are 3xx codes where no node can help)."""
    info = STATUSES.get(code)
    if info is not None:
        return info.retry_elsewhere
    return 300 <= code <= 399
