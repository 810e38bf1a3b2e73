"""The idgen client: pipelined connections, failover across nodes, optional prefetch pool.

Design
======

Pipelining: **a per-connection FIFO of waiting slots plus one reader thread.** A caller
builds its request frames (a batch above the server's ``max_batch`` becomes several GET_IDS
frames), and, holding the connection's writer lock, appends one slot per frame to the FIFO
and writes all the frames with a single ``sendall``. Appending and writing under the same
lock keeps the FIFO in wire order. The reader thread decodes answers as they arrive and
hands each one to the slot at the head of the FIFO (the server answers strictly in request
order, PROTOCOL.md section 8), then wakes its caller. So any number of threads have requests
in flight on one connection at once, and one caller's split batch is in flight as a whole
rather than one round trip per part. A lock-step design (one request, wait, next) would
serialise every thread on the round-trip time; the reader thread costs one OS thread per
connection and removes that. A caller that stops waiting early (one part of its split batch
failed with a status that keeps the connection open) leaves its other slots in the FIFO;
their answers are matched by position and dropped, so the order is never lost. A caller
that gets no answer within ``timeout`` closes the connection instead: a node that stalls
is treated as down, and every request in flight on it fails over.

Ordering: IDs from one connection are strictly increasing, so while a client stays on one
node, the IDs each thread receives increase. After a failover they come from another node
and are unique but not ordered against the earlier ones.

Failover: a node that answers ``3xx`` (except ``304 EXHAUSTED``), does not answer within
``timeout``, refuses or drops the connection, or sends a bad frame is marked down for an
exponential backoff (``backoff_min``, doubling per consecutive failure, capped at
``backoff_max``), and the WHOLE call is retried on the next node, each node at most once
per call; nodes backing off are skipped. A ``3xx`` that keeps the connection open keeps
it for the next try. ``305 RANGE_CHANGED`` is not a node failure: the connection is
dropped and the call retried at once on a new connection to the same node (once per call;
then the next node). ``2xx`` and ``304`` are raised at once; the closing statuses
(``1xx``, ``5xx``) are node failures too. Retrying cannot duplicate an ID: a server never sends
an ID twice, so IDs of a failed or abandoned request are only ever lost (a gap).

Fork: a client inherited by a forked child (gunicorn ``--preload``, Celery prefork,
``multiprocessing`` with the fork start method) must not use what it inherited: the parent's
prefetch pool holds IDs the parent hands out too, and its sockets are the parent's (the
child has no reader thread, and its answers would reach the parent's FIFO). So the child
forgets every inherited pool, connection, lock and thread, from an ``os.register_at_fork``
hook and, as a fallback, from a pid check at the start of every public call, and starts
afresh: new connections on first use, its own refill thread started lazily. It never sends
on, nor ``shutdown()``s, an inherited socket; it only closes its own copy of the descriptor,
which leaves the parent's connection untouched.

TLS: with ``tls_ca`` (or ``ssl_context``) each connection runs TLS over its socket through
:class:`idgen_client.tls.TLSSocket`: an ``ssl.SSLObject`` on memory buffers, used under one
lock, because the reader thread and the writing threads share the connection and one
OpenSSL connection must not be used by two threads at once. The socket I/O stays outside
that lock, so a blocked read never holds up a write. A failed handshake is a
:class:`TLSError`, an ``UnavailableError``: the node is marked down and the call fails over.

Named sequences: ``next_value``/``next_values`` send one GET_VALUES (version 3) through the
same FIFO and failover as GET_IDS, after checking the name, ``n`` and the node's version
(``protocol.check_get_values``). ``sequence_prefetch=K`` keeps, per name, values of a dense
sequence only, under a per-name lock so that they leave the buffer in order, each to one
call; the refill runs in the calling thread (clients/vectors/SEQUENCES.md).

UUIDs: ``next_uuid``/``next_uuids`` send GET_UUIDS (version 4) through the same FIFO and
failover as GET_IDS (split above ``max_batch`` and re-joined), after checking ``n`` and the
node's version; each answer is checked (count, version 7, variant, strictly increasing on the
connection) and handed out as ``uuid.UUID``.

Errors: when a call tried exactly one node (the only one not backing off), that node's error
is raised as it is (``UnavailableError``, ``ProtocolError`` or ``ServerError``); when it tried
several, or none could be tried, it raises ``NoNodeAvailable`` listing each node's last error.
"""

import collections
import itertools
import logging
import os
import socket
import ssl
import threading
import time
import uuid
import weakref
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypedDict,
    TypeVar,
    Union,
)

from . import forms, protocol
from . import observe as _observe
from . import status as _status
from . import tls as _tls
from .config import Settings, parse_url
from .errors import (
    ClientClosedError,
    IdgenError,
    KeyNodeUnavailableError,
    NoNodeAvailable,
    OptionsUnsupportedError,
    ProtocolError,
    SequencesUnsupportedError,
    ServerError,
    UnavailableError,
    UuidsUnsupportedError,
)
from .protocol import ErrorFrame, HelloOk, Ids, MaskedIds, Pong, Ranges, Uuids, Values

__all__ = ["Client", "Layout", "IdParts", "UuidParts", "NodeState", "MaskedIdList", "key_node"]

#: The slot kind of a GET_IDS_WITH answered with MASKED_IDS (client-internal: the opcode with a
#: flag above the byte).
_MASKED_KIND = 0x100 | protocol.OP_GET_IDS_WITH


class MaskedIdList(NamedTuple):
    """IDs masked by the node (``next_masked_ids``): the key ID of the key that masked them,
    the masked integers in the order of the IDs, and their 12-character string forms."""

    key_id: int
    ids: List[int]
    strings: List[str]


def key_node(key: str, nodes: int) -> int:
    """The node an idempotency key goes to: FNV-1a 64 of the key's bytes, modulo the number of
    nodes (the same in every idgen client)."""
    h = 0xCBF29CE484222325
    for b in key.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % max(nodes, 1)

_T = TypeVar("_T")

# A request for :meth:`_Connection.submit`: (OP_GET_IDS, count), (OP_GET_UUIDS, count),
# (OP_PING, token) or (OP_GET_VALUES, (count, the encoded frame)).
_Request = Tuple[int, Union[int, Tuple[int, bytes]]]


class NodeState(TypedDict):
    """One node in :meth:`Client.nodes`."""

    node: str
    connected: bool
    down: bool  # backing off now
    retry_in: float  # seconds until it is tried again (0 when not backing off)
    failures: int  # consecutive
    last_error: Optional[BaseException]
    hello: Optional[HelloOk]  # of the open connection

_RECV_CHUNK = 256 * 1024
_MAX_IDS_PER_CALL = 1 << 24  # a guard against accidental huge requests (16 Mi IDs)
#: Sequence buffers kept at most (a namespace holds at most 1024 sequences).
MAX_PREFETCHED_SEQUENCES = 1024


class IdParts(NamedTuple):
    """An ID taken apart (PROTOCOL.md section 10)."""

    unix_ms: int  #: Unix time in milliseconds of the ID's timestamp
    timestamp: int  #: milliseconds since the layout's epoch
    worker: int  #: the full worker field (region bits included)
    region: int  #: the top ``region_bits`` of the worker field (0 without regions)
    sequence: int  #: the sequence within the millisecond


class UuidParts(NamedTuple):
    """A version 7 UUID of idgen taken apart (PROTOCOL.md section 10.1): the ID it was made
    from and that ID's fields."""

    id: int  #: the ID the UUID was made from
    unix_ms: int  #: Unix time in milliseconds (the UUID's 48-bit ``unix_ts_ms``)
    timestamp: int  #: milliseconds since the layout's epoch
    worker: int  #: the full worker field (region bits included)
    region: int  #: the top ``region_bits`` of the worker field (0 without regions)
    sequence: int  #: the sequence within the millisecond


class TimeBoundsError(ValueError):
    """A time or interval without IDs in a layout (``clients/vectors/BOUNDS.md``)."""

    #: ``before_epoch``, ``after_last`` or ``empty``, as the shared vectors name it.
    kind = ""


class BeforeEpoch(TimeBoundsError):
    """The time is before the layout's epoch: no ID has it."""

    kind = "before_epoch"


class AfterLastTimestamp(TimeBoundsError):
    """The time is after the layout's last millisecond: no ID has it."""

    kind = "after_last"


class EmptyInterval(TimeBoundsError):
    """The interval ``[from_ms, to_ms)`` holds no millisecond: ``to_ms <= from_ms``."""

    kind = "empty"


def _unix_ms(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int (ms since the Unix epoch), not {type(value).__name__}")
    return value


JS_SAFE_BITS = 53
"""The widest JavaScript-safe layout: every ID of a layout at most 53 bits wide is at most
``2 ** 53 - 1``, an exact JavaScript number."""


class Layout(NamedTuple):
    """The ID layout a cluster announces in HELLO_OK, and the node's ``max_batch``."""

    epoch_ms: int
    timestamp_bits: int
    worker_bits: int
    sequence_bits: int
    region_bits: int
    max_batch: int

    @classmethod
    def from_hello(cls, hello: HelloOk) -> "Layout":
        return cls(
            hello.epoch_ms,
            hello.timestamp_bits,
            hello.worker_bits,
            hello.sequence_bits,
            hello.region_bits,
            hello.max_batch,
        )

    def same_ids(self, other: "Layout") -> bool:
        """Whether both describe the same ID format (``max_batch`` may differ per node)."""
        return self[:5] == other[:5]

    @property
    def id_bits(self) -> int:
        """The layout's width, timestamp + worker + sequence bits (at most 63): every ID is
        below ``2 ** id_bits``."""
        return self.timestamp_bits + self.worker_bits + self.sequence_bits

    @property
    def max_id(self) -> int:
        """The layout's largest ID, ``2 ** id_bits - 1``."""
        return (1 << self.id_bits) - 1

    @property
    def js_safe(self) -> bool:
        """Whether every ID is an exact JavaScript number: the layout is at most 53 bits
        wide, so no ID exceeds ``2 ** 53 - 1`` (``Number.MAX_SAFE_INTEGER``)."""
        return self.id_bits <= JS_SAFE_BITS

    def decode(self, id_: int) -> IdParts:
        """Take an ID apart: timestamp, worker, region and sequence. Raises ``ValueError``
        for a value outside ``0 .. 2^63`` or at or above ``2 ** id_bits`` (not an ID of this
        layout)."""
        if isinstance(id_, bool) or not isinstance(id_, int):
            raise TypeError(f"an ID is an int, not {type(id_).__name__}")
        if not 0 <= id_ < (1 << 63):
            raise ValueError(f"ID {id_} is outside 0 .. 2^63")
        if id_ > self.max_id:
            raise ValueError(
                f"{id_} is not an ID of this layout: its IDs are {self.id_bits} bits wide, "
                f"below 2^{self.id_bits}"
            )
        s, w, r = self.sequence_bits, self.worker_bits, self.region_bits
        sequence = id_ & ((1 << s) - 1)
        worker = (id_ >> s) & ((1 << w) - 1)
        region = worker >> (w - r) if r else 0
        timestamp = id_ >> (w + s)
        return IdParts(self.epoch_ms + timestamp, timestamp, worker, region, sequence)

    def decode_uuid(self, value: uuid.UUID) -> UuidParts:
        """Take a version 7 UUID made by a node of this layout apart: the ID it was made
        from and its fields. ``ValueError`` says which check failed: not version 7, not
        RFC 9562's variant, or a time before the epoch or past the layout's range."""
        if not isinstance(value, uuid.UUID):
            raise TypeError(f"a UUID is a uuid.UUID, not {type(value).__name__}")
        u = value.int
        version = (u >> 76) & 0xF
        if version != 7:
            raise ValueError(f"{value} is a version {version} UUID, not version 7")
        if (u >> 62) & 0b11 != 0b10:
            raise ValueError(f"{value} is not of RFC 9562's variant (bits 10)")
        unix_ms = u >> 80
        if unix_ms < self.epoch_ms:
            raise ValueError(f"{value}: its time {unix_ms} is before the epoch {self.epoch_ms}")
        if unix_ms > self.last_unix_ms:
            raise ValueError(
                f"{value}: its time {unix_ms} is past the layout's last millisecond "
                f"{self.last_unix_ms}"
            )
        payload = (((u >> 64) & 0xFFF) << 62) | (u & ((1 << 62) - 1))
        low_bits = self.worker_bits + self.sequence_bits
        low = payload >> (74 - low_bits)
        id_ = ((unix_ms - self.epoch_ms) << low_bits) | low
        parts = self.decode(id_)
        return UuidParts(id_, *parts)

    @property
    def last_unix_ms(self) -> int:
        """The last Unix millisecond an ID of this layout can hold."""
        return self.epoch_ms + (1 << self.timestamp_bits) - 1

    def _timestamp_at(self, name: str, unix_ms: int) -> int:
        unix_ms = _unix_ms(name, unix_ms)
        if unix_ms < self.epoch_ms:
            raise BeforeEpoch(
                f"{name} {unix_ms} ms is before the layout's epoch {self.epoch_ms} ms: "
                "no ID has that time"
            )
        if unix_ms > self.last_unix_ms:
            raise AfterLastTimestamp(
                f"{name} {unix_ms} ms is after the layout's last timestamp "
                f"{self.last_unix_ms} ms: no ID has that time"
            )
        return unix_ms - self.epoch_ms

    def min_id_at(self, unix_ms: int) -> int:
        """The smallest ID at ``unix_ms`` (ms since the Unix epoch): worker 0, sequence 0.

        Raises :class:`BeforeEpoch` or :class:`AfterLastTimestamp` for a time the layout
        cannot hold."""
        shift = self.worker_bits + self.sequence_bits
        return self._timestamp_at("unix_ms", unix_ms) << shift

    def max_id_at(self, unix_ms: int) -> int:
        """The largest ID at ``unix_ms``: the last worker of the last region, the last
        sequence."""
        shift = self.worker_bits + self.sequence_bits
        return (self._timestamp_at("unix_ms", unix_ms) << shift) | ((1 << shift) - 1)

    def bounds(self, from_ms: int, to_ms: int) -> Tuple[int, int]:
        """``(lo, hi)`` for the interval ``[from_ms, to_ms)``: every ID whose time lies in it,
        and no other, satisfies ``lo <= id < hi`` (for SQL: ``WHERE id >= lo AND id < hi``;
        the interval's largest ID is ``hi - 1``).

        ``to_ms`` may be at most :attr:`last_unix_ms`, so ``hi`` fits a signed 64-bit
        column. Raises :class:`BeforeEpoch`, :class:`AfterLastTimestamp` or
        :class:`EmptyInterval` (all :class:`ValueError`)."""
        shift = self.worker_bits + self.sequence_bits
        lo = self._timestamp_at("from_ms", from_ms) << shift
        if _unix_ms("to_ms", to_ms) <= from_ms:
            raise EmptyInterval(
                f"the interval [{from_ms}, {to_ms}) ms is empty: the end must be after the start"
            )
        hi = self._timestamp_at("to_ms", to_ms) << shift
        return lo, hi


def _parse_node(node: str) -> Tuple[str, int]:
    if not isinstance(node, str):
        raise TypeError(f"a node is a 'host:port' string, not {type(node).__name__}")
    host, sep, port = node.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"node {node!r} is not 'host:port'")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _fresh(err: BaseException) -> BaseException:
    """A copy of an exception shared by several waiting threads, so that each raises its
    own object (tracebacks are per raise)."""
    new = type(err).__new__(type(err))
    new.__dict__.update(err.__dict__)
    new.args = err.args
    new.__cause__ = err.__cause__
    return new


class _Slot:
    """One request frame waiting for its answer."""

    __slots__ = ("event", "kind", "expect", "result", "error")

    def __init__(self, kind: int, expect: int):
        self.event = threading.Event()
        self.kind = kind  # protocol.OP_GET_IDS, OP_GET_RANGES, OP_GET_VALUES or OP_PING
        self.expect = expect  # the count asked for, or the PING token
        # What the reader set: the IDs (list of int), the VALUES frame, or True for a PONG.
        self.result: object = None
        self.error: Optional[BaseException] = None

    def set(self, result: object) -> None:
        self.result = result
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


class _Stats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._c: Dict[str, int] = collections.Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._c[key] += n

    def snapshot(self) -> Dict[str, int]:
        keys = (
            "connects", "requests", "ids", "pings", "node_failures", "failovers",
            "prefetch_refills", "prefetch_served",
            "value_requests", "values", "value_prefetch_served", "uuid_requests", "uuids",
        )  # fmt: skip
        with self._lock:
            return {k: self._c.get(k, 0) for k in keys}


def _connect_any(
    node: str, host: str, port: int, deadline: float, connect_timeout: float
) -> socket.socket:
    """A TCP connection to the first of ``host``'s addresses that accepts one, tried one at a
    time in getaddrinfo's order (``localhost`` may resolve to ::1 and 127.0.0.1, and the node
    listen on only one). A refused address moves on at once; each attempt may use at most an
    even share of the time left before ``deadline`` (time left / addresses left), so one
    address that does not answer cannot use up the others' time. Unlike
    ``socket.create_connection``, whose timeout applies to each attempt afresh, the whole
    loop stays within ``connect_timeout``. Fails with the last address's error."""
    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except OSError as e:
        raise UnavailableError(f"cannot connect: {e}", node) from e
    last: Optional[OSError] = None
    for i, (family, kind, proto, _, addr) in enumerate(infos):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left / (len(infos) - i))
            sock.connect(addr)
            return sock
        except OSError as e:  # socket.timeout included
            sock.close()
            last = e
    tried = f" ({len(infos)} addresses tried)" if len(infos) > 1 else ""
    if last is None or isinstance(last, socket.timeout):
        raise UnavailableError(f"connect timed out after {connect_timeout}s{tried}", node)
    raise UnavailableError(f"cannot connect: {last}{tried}", node) from last


class _Connection:
    """One TCP (or TLS) connection to one node: writer lock, FIFO of slots, reader thread.

    With ``tls`` (a context and an optional server name) the socket is a
    :class:`idgen_client.tls.TLSSocket`, which has the methods used here."""

    def __init__(
        self,
        node: str,
        connect_timeout: float,
        timeout: float,
        stats: _Stats,
        tls: Optional[Tuple[ssl.SSLContext, Optional[str]]] = None,
    ):
        self.node = node
        self._timeout = timeout
        self._stats = stats
        self._lock = threading.Lock()  # guards _pending and _error
        self._write_lock = threading.Lock()
        self._pending: Deque[_Slot] = collections.deque()
        self._error: Optional[BaseException] = None
        self._last_id = -1
        self._last_uuid = -1
        host, port = _parse_node(node)
        deadline = time.monotonic() + connect_timeout
        sock = _connect_any(node, host, port, deadline, connect_timeout)
        try:
            peer = sock.getpeername()
            ip = str(peer[0])
            #: The address that accepted the connection (``ip:port``, IPv6 in brackets).
            self.address = f"[{ip}]:{peer[1]}" if ":" in ip else f"{ip}:{peer[1]}"
        except OSError:
            self.address = node
        # The TCP socket, or TLS over it (TLSSocket has the socket methods used here).
        self._sock: Union[socket.socket, _tls.TLSSocket] = sock
        self.tls_version: Optional[str] = None
        self.alpn: Optional[str] = None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                ctx, name = tls
                self._sock = self._tls_handshake(sock, ctx, name or host, deadline)
            self.hello, buf = self._handshake(deadline)
        except BaseException:
            sock.close()
            raise
        self.max_frame = protocol.response_frame_limit(self.hello.max_batch, self.hello.version)
        # Sends wait at most `timeout`; the reader wakes up that often to notice a close.
        self._sock.settimeout(max(timeout, 0.05))
        stats.add("connects")
        self._reader = threading.Thread(
            target=self._read_loop, args=(buf,), name=f"idgen-reader-{node}", daemon=True
        )
        self._reader.start()

    # -- handshake ------------------------------------------------------------------------

    def _tls_handshake(
        self, raw: socket.socket, ctx: ssl.SSLContext, name: str, deadline: float
    ) -> "_tls.TLSSocket":
        try:
            tls = _tls.TLSSocket(raw, ctx, name)
            tls.handshake(max(deadline - time.monotonic(), 0.001))
        except socket.timeout:
            raise UnavailableError("no TLS handshake within connect_timeout", self.node) from None
        except ssl.SSLError as e:
            raise _tls.tls_error(e, self.node) from e
        except ValueError as e:  # e.g. a server_hostname that is not a host name
            raise UnavailableError(f"TLS: {e}", self.node) from e
        except OSError as e:
            raise UnavailableError(f"TLS handshake failed: {e}", self.node) from e
        self.tls_version = tls.version()
        self.alpn = tls.selected_alpn_protocol()
        return tls

    def _handshake(self, deadline: float) -> Tuple[HelloOk, bytearray]:
        sock = self._sock
        try:
            try:
                sock.sendall(protocol.encode_hello())
            except OSError as e:
                if isinstance(sock, _tls.TLSSocket):
                    # A server that refused the client certificate after the TLS 1.3
                    # handshake may have reset the connection already; its alert says why.
                    sock.raise_pending_alert()
                raise
            buf = bytearray()
            while True:
                decoded = protocol.decode_response(buf, protocol.DEFAULT_MAX_RESPONSE_FRAME)
                if decoded is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise socket.timeout()
                sock.settimeout(remaining)
                data = sock.recv(_RECV_CHUNK)
                if not data:
                    raise UnavailableError("connection closed during the handshake", self.node)
                buf += data
        except socket.timeout:
            raise UnavailableError("no HELLO_OK within connect_timeout", self.node) from None
        except ProtocolError as e:
            e.node = self.node
            raise
        except ssl.SSLError as e:
            # TLS 1.3: a server that refuses the client certificate says so after the
            # handshake, which the client then reads here.
            raise _tls.tls_error(e, self.node) from e
        except OSError as e:
            raise UnavailableError(f"handshake failed: {e}", self.node) from e
        frame, used = decoded
        del buf[:used]
        if isinstance(frame, ErrorFrame):
            raise ServerError(frame.status, frame.name, frame.message, self.node)
        if not isinstance(frame, HelloOk):
            raise ProtocolError(
                f"expected HELLO_OK, got {type(frame).__name__}", node=self.node
            )
        if not protocol.MIN_PROTOCOL_VERSION <= frame.version <= protocol.PROTOCOL_VERSION:
            raise ProtocolError(
                f"server picked version {frame.version}, only versions "
                f"{protocol.MIN_PROTOCOL_VERSION}..={protocol.PROTOCOL_VERSION} were offered",
                node=self.node,
            )
        return frame, buf

    # -- state ----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._error is None

    def fail(self, error: BaseException) -> None:
        """Mark the connection broken with ``error``: every waiting slot fails with it, later
        submits fail at once, and the socket is closed (which also stops the reader)."""
        with self._lock:
            if self._error is not None:
                return
            self._error = error
            pending, self._pending = self._pending, collections.deque()
        for slot in pending:
            slot.fail(error)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def close(self, join_timeout: float = 1.0) -> None:
        self.fail(ClientClosedError(f"{self.node}: connection closed by the client"))
        if threading.current_thread() is not self._reader:
            self._reader.join(join_timeout)

    def forget(self) -> None:
        """In a forked child: stop using this inherited connection without touching what it
        shares with the parent. Nothing is sent and there is no ``shutdown()`` (that would
        cut the parent's connection too); only this process's copy of the descriptor is
        closed. Its locks may have been held by threads that do not exist here: replaced."""
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending = collections.deque()
        self._error = ClientClosedError(f"{self.node}: connection inherited across fork()")
        try:
            self._sock.close()
        except OSError:
            pass

    # -- requests -------------------------------------------------------------------------

    def submit(self, requests: Sequence[_Request]) -> List[_Slot]:
        """Send request frames ``(opcode, count-or-token)`` pipelined, in order, as one
        write; GET_VALUES as ``(OP_GET_VALUES, (count, frame))`` with the frame already
        checked and encoded (:func:`protocol.check_get_values`). Returns their slots;
        answers are collected with :meth:`wait`."""
        slots = []
        frames = []
        for op, arg in requests:
            if op in (protocol.OP_GET_VALUES, protocol.OP_GET_IDS_WITH, _MASKED_KIND) and isinstance(
                arg, tuple
            ):
                expect, frame = arg
            elif op == protocol.OP_GET_IDS and isinstance(arg, int):
                expect, frame = arg, protocol.encode_get_ids(arg)
            elif op == protocol.OP_GET_RANGES and isinstance(arg, int):
                expect, frame = arg, protocol.encode_get_ranges(arg)
            elif op == protocol.OP_GET_UUIDS and isinstance(arg, int):
                expect, frame = arg, protocol.encode_get_uuids(arg)
            elif op == protocol.OP_PING and isinstance(arg, int):
                expect, frame = arg, protocol.encode_ping(arg)
            else:
                raise TypeError(f"not a request: opcode {op} with {type(arg).__name__}")
            frames.append(frame)
            slots.append(_Slot(op, expect))
        data = b"".join(frames)
        with self._write_lock:
            with self._lock:
                if self._error is not None:
                    raise _fresh(self._error)
                self._pending.extend(slots)
            try:
                self._sock.sendall(data)
            except socket.timeout:
                err = UnavailableError(f"send blocked longer than {self._timeout}s", self.node)
                self.fail(err)
                raise _fresh(self._error or err) from None
            except OSError as e:
                # The peer closed or reset the connection. If it closed it after a closing
                # ERROR (a 305, say), that frame is in the socket or already read: let the
                # reader report it (it stops once the connection fails, at most `timeout`),
                # since it, not the send's error, says what happened.
                self._reader.join(self._timeout)
                err = UnavailableError(f"send failed: {e}", self.node)
                self.fail(err)
                raise _fresh(self._error or err) from e
        return slots

    def wait(self, slot: _Slot, timeout: float) -> object:
        """The answer of one slot (IDs, a VALUES frame, or the PONG's arrival), or raise its
        error. No
        answer within ``timeout`` breaks the connection (the node is stuck or gone)."""
        if not slot.event.wait(timeout):
            err = UnavailableError(f"no answer within {timeout}s", self.node)
            self.fail(err)
            raise _fresh(err)
        if slot.error is not None:
            raise _fresh(slot.error)
        return slot.result

    def wait_ids(self, slot: _Slot, timeout: float) -> List[int]:
        """:meth:`wait` for a GET_IDS slot: its IDs."""
        ids = self.wait(slot, timeout)
        # The reader sets a GET_IDS slot only to the IDs it checked (``_dispatch``).
        assert slot.kind in (protocol.OP_GET_IDS, protocol.OP_GET_RANGES, protocol.OP_GET_IDS_WITH), slot.kind
        assert isinstance(ids, list)
        return ids

    def wait_uuids(self, slot: _Slot, timeout: float) -> List[uuid.UUID]:
        """:meth:`wait` for a GET_UUIDS slot: its UUIDs."""
        uuids = self.wait(slot, timeout)
        # The reader sets a GET_UUIDS slot only to the UUIDs it checked (``_dispatch``).
        assert slot.kind == protocol.OP_GET_UUIDS and isinstance(uuids, list), slot.kind
        return uuids

    def wait_values(self, slot: _Slot, timeout: float) -> Values:
        """:meth:`wait` for a GET_VALUES slot: the VALUES frame."""
        frame = self.wait(slot, timeout)
        # The reader sets a GET_VALUES slot only to a VALUES frame it checked (``_dispatch``).
        assert slot.kind == protocol.OP_GET_VALUES and isinstance(frame, Values), slot.kind
        return frame

    # -- reader thread --------------------------------------------------------------------

    def _read_loop(self, buf: bytearray) -> None:
        sock = self._sock
        try:
            while self._error is None:
                while True:
                    decoded = protocol.decode_response(buf, self.max_frame)
                    if decoded is None:
                        break
                    frame, used = decoded
                    del buf[:used]
                    self._dispatch(frame)
                try:
                    data = sock.recv(_RECV_CHUNK)
                except socket.timeout:
                    continue
                if not data:
                    with self._lock:
                        idle = not self._pending and not buf
                    if idle:
                        # The server closed an idle connection (its idle timeout): not a
                        # node failure, the next call simply reconnects.
                        self.fail(UnavailableError("connection closed by the server (idle)", self.node))
                    else:
                        self.fail(
                            UnavailableError(
                                "connection closed by the server with requests unanswered",
                                self.node,
                            )
                        )
                    return
                buf += data
        except ProtocolError as e:
            e.node = self.node
            self.fail(e)
        except ssl.SSLError as e:
            self.fail(_tls.tls_error(e, self.node))
        except OSError as e:
            self.fail(UnavailableError(f"receive failed: {e}", self.node))
        except Exception as e:  # a bug: never leave callers waiting
            self.fail(ProtocolError(f"reader failed: {e!r}", node=self.node))

    def _dispatch(self, frame: protocol.Response) -> None:
        with self._lock:
            slot = self._pending.popleft() if self._pending else None
        if slot is None:
            raise ProtocolError(f"{type(frame).__name__} with no request outstanding")
        if isinstance(frame, ErrorFrame):
            refused, broken = _refusal(frame, self.node)
            slot.fail(refused)
            if broken is not None:
                # 305: every request still in flight (and every later submit) gets the 305
                # too: this connection is dead, the node is not, so they reconnect rather
                # than count the node as down. Another closing status: the node closed it.
                self.fail(broken)
            return
        try:
            result, self._last_id, self._last_uuid = _check_answer(
                slot.kind, slot.expect, frame, self._last_id, self._last_uuid
            )
        except ProtocolError as err:
            err.node = self.node
            slot.fail(err)
            raise
        slot.set(result)


# Fork safety: every live Client, so that the at-fork hook can reset them in a child.
_CLIENTS: "weakref.WeakSet[Client]" = weakref.WeakSet()
_FORK_LOCK = threading.Lock()  # serialises the pid-check reset (re-created in a child)


def _after_fork_in_child() -> None:
    global _FORK_LOCK
    _FORK_LOCK = threading.Lock()
    for client in list(_CLIENTS):
        try:
            client._forget_parent()
        except Exception:  # pragma: no cover - the pid check on its next call retries
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _system_roots_context(
    cert: Optional[_tls.PathLike], key: Optional[_tls.PathLike]
) -> ssl.SSLContext:
    """A client context that verifies nodes against the system's trusted roots (``tls=True``
    without ``tls_ca``, as ``idgens://`` without ``ca``), with the client certificate
    ``cert``/``key`` when given."""
    if (cert is None) != (key is None):
        raise ValueError("tls_cert and tls_key go together: give both or neither")
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # CERT_REQUIRED, check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None and key is not None:
        try:
            ctx.load_cert_chain(os.fspath(cert), os.fspath(key), password=_tls._no_password)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise ValueError(
                f"tls_cert {os.fspath(cert)} / tls_key {os.fspath(key)}: cannot load the "
                f"client certificate and key (an encrypted key needs ssl_context=): {e}"
            ) from None
    ctx.set_alpn_protocols([_tls.ALPN])
    return ctx


def _tls_settings(
    ssl_context: Optional[ssl.SSLContext],
    tls_ca: Optional[_tls.PathLike],
    tls_cert: Optional[_tls.PathLike],
    tls_key: Optional[_tls.PathLike],
    server_hostname: Optional[str],
    tls: bool = False,
) -> Optional[Tuple[ssl.SSLContext, Optional[str]]]:
    """The client's TLS (a context and the server name override), or ``None`` for TCP."""
    if not isinstance(tls, bool):
        raise TypeError(f"tls must be a bool, not {type(tls).__name__}")
    if ssl_context is not None:
        if not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError(f"ssl_context must be an ssl.SSLContext, not {type(ssl_context).__name__}")
        if tls_ca is not None or tls_cert is not None or tls_key is not None:
            raise ValueError("give ssl_context or tls_ca/tls_cert/tls_key, not both")
        ctx = ssl_context
    elif tls_ca is not None:
        ctx = _tls.make_context(tls_ca, tls_cert, tls_key)
    elif tls:
        ctx = _system_roots_context(tls_cert, tls_key)
    elif tls_cert is not None or tls_key is not None:
        raise ValueError(
            "tls_cert and tls_key need tls_ca (the CA bundle to verify nodes with) or tls=True "
            "(the system's trusted roots)"
        )
    else:
        if server_hostname is not None:
            raise ValueError("server_hostname needs TLS (ssl_context, tls_ca or tls=True)")
        return None
    if server_hostname is not None and (not isinstance(server_hostname, str) or not server_hostname):
        raise ValueError("server_hostname must be a non-empty string")
    return ctx, server_hostname


class _Node:
    def __init__(self, addr: str, tls_name: Optional[str] = None, entry: int = 0, placeholder: bool = False):
        _parse_node(addr)
        self.addr = addr
        # With expand=True: the name TLS verifies (the configured host, not this address),
        # the configured entry it came from, and whether it stands for a name that resolved
        # to nothing (a node that is down until the name resolves).
        self.tls_name = tls_name
        self.entry = entry
        self.placeholder = placeholder
        self.gone = False  # no longer among its name's addresses: dropped when it fails
        self.lock = threading.Lock()  # serialises connecting
        self.conn: Optional[_Connection] = None
        self.failures = 0
        self.down_until = 0.0
        self.last_error: Optional[BaseException] = None


class _CallInfo:
    """The public call in progress in a thread: its op, and the node that answered."""

    __slots__ = ("op", "node")

    def __init__(self, op: str) -> None:
        self.op = op
        self.node: Optional[str] = None


def _outcome(err: BaseException) -> str:
    """A request event's ``outcome`` for a failed call: the status name, else the class."""
    if isinstance(err, ServerError):
        return err.name or str(err.status)
    return type(err).__name__


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _format_addr(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


# -- shared, I/O-free rules (used by Client and by aio.AsyncClient) ---------------------------


def _refusal(frame: ErrorFrame, node: str) -> Tuple[ServerError, Optional[BaseException]]:
    """An ERROR frame answering a request: the error for its slot, and the error that breaks
    the connection (``305 RANGE_CHANGED``: the 305 itself, so that every request in flight
    reconnects to the same node; another closing status: the node closed it), else ``None``."""
    refused = ServerError(frame.status, frame.name, frame.message, node)
    if refused.status == _status.RANGE_CHANGED:
        return refused, refused
    if refused.closes_connection:
        return refused, UnavailableError(
            f"server closed the connection after ERROR {frame.status} {frame.name or 'UNKNOWN'}",
            node,
        )
    return refused, None


def _check_answer(
    kind: int, expect: int, frame: protocol.Response, last_id: int, last_uuid: int
) -> Tuple[object, int, int]:
    """Check an answer (not an ERROR) against its request: a slot of ``kind`` that asked for
    ``expect`` (a count, or the PING token), on a connection whose last ID and UUID were
    ``last_id`` and ``last_uuid``. Returns the slot's result (the IDs, the UUIDs, the VALUES
    or MASKED_IDS frame, ``True`` for a PONG) and the connection's new last ID and UUID, or
    raises :class:`ProtocolError` (without a node)."""
    if kind in (protocol.OP_GET_IDS, protocol.OP_GET_RANGES, protocol.OP_GET_IDS_WITH):
        # GET_IDS (and GET_IDS_WITH unmasked) is answered with IDS, GET_RANGES with RANGES:
        # never the other.
        wanted = Ranges if kind == protocol.OP_GET_RANGES else Ids
        if not isinstance(frame, wanted):
            raise ProtocolError(f"{wanted.__name__.upper()} expected, got {type(frame).__name__}")
        if len(frame.ids) != expect:
            raise ProtocolError(f"asked for {expect} IDs, got {len(frame.ids)}")
        if frame.ids[0] <= last_id:
            raise ProtocolError("IDs on one connection are not increasing")
        return frame.ids, frame.ids[-1], last_uuid
    if kind == _MASKED_KIND:
        # Masked IDs are in no order: only their count is checked.
        if not isinstance(frame, MaskedIds):
            raise ProtocolError(f"GET_IDS_WITH (masked) answered with {type(frame).__name__}")
        if len(frame.ids) != expect:
            raise ProtocolError(f"asked for {expect} masked IDs, got {len(frame.ids)}")
        return frame, last_id, last_uuid
    if kind == protocol.OP_GET_UUIDS:
        if not isinstance(frame, Uuids):
            raise ProtocolError(f"GET_UUIDS answered with {type(frame).__name__}")
        if len(frame.uuids) != expect:
            raise ProtocolError(f"asked for {expect} UUIDs, got {len(frame.uuids)}")
        if frame.uuids[0].int <= last_uuid:
            raise ProtocolError("UUIDs on one connection are not increasing")
        return frame.uuids, last_id, frame.uuids[-1].int
    if kind == protocol.OP_GET_VALUES:
        if not isinstance(frame, Values):
            raise ProtocolError(f"GET_VALUES answered with {type(frame).__name__}")
        if len(frame.values) != expect:
            raise ProtocolError(f"asked for {expect} values, got {len(frame.values)}")
        return frame, last_id, last_uuid
    if isinstance(frame, Pong) and frame.token == expect:
        return True, last_id, last_uuid
    raise ProtocolError(f"PING {expect} answered with {frame!r}")


def _with_frame(n: int, after: Optional[int], key: Optional[str], masked: bool) -> bytes:
    """The GET_IDS_WITH frame of a call with options, its arguments checked."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int of at least 1, not {n!r}")
    if after is not None and (
        isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 1 << 63
    ):
        raise ValueError(f"after must be an ID (an int in 0 .. 2^63), not {after!r}")
    return protocol.encode_get_ids_with(n, after=after, key=key, masked=masked)


def _split(n: int, max_batch: int) -> List[int]:
    """The counts of the frames of an ``n``-item call on a node of ``max_batch``."""
    counts = [max_batch] * (n // max_batch)
    if n % max_batch:
        counts.append(n % max_batch)
    return counts


def _ids_op(hello: HelloOk) -> int:
    """GET_RANGES from version 2 on (the same IDs as runs), else GET_IDS."""
    return protocol.OP_GET_RANGES if hello.version >= protocol.RANGES_VERSION else protocol.OP_GET_IDS


#: What a call does about a node's refusal (:func:`_on_refusal`).
_RECONNECT, _RAISE, _BACK_OFF = "reconnect", "raise", "back_off"


def _on_refusal(err: ServerError, may_reconnect: bool) -> str:
    """The failover rule for a node's error status: ``_RECONNECT`` (305, the first time in
    this call: drop the connection, retry on the same node at once), ``_RAISE`` (2xx, 304,
    307: every node would say the same; raised at once), or ``_BACK_OFF`` (a node failure: a
    retry-elsewhere 3xx or a status that closes the connection, 1xx and 5xx, as
    clients/vectors/SCENARIOS.md says; mark the node down, keeping the connection when the
    status leaves it open, and move on)."""
    if err.status == _status.RANGE_CHANGED and may_reconnect:
        return _RECONNECT
    if not err.retry_elsewhere and not err.closes_connection:
        return _RAISE
    return _BACK_OFF


def _checked_settings(
    nodes: Sequence[str],
    timeout: float,
    connect_timeout: float,
    backoff_min: float,
    backoff_max: float,
    prefetch: int,
    low_water: Optional[int],
    sequence_prefetch: int,
    expand: bool,
) -> Tuple[Sequence[str], int]:
    """The constructor checks ``Client`` and ``AsyncClient`` share: the node list (a single
    string is one node) and ``low_water`` (default ``prefetch // 4``), or the error."""
    if isinstance(nodes, str):
        nodes = [nodes]
    if not nodes:
        raise ValueError("at least one node is required")
    if len(set(nodes)) != len(nodes):
        raise ValueError("nodes must be distinct")
    if timeout <= 0 or connect_timeout <= 0:
        raise ValueError("timeouts must be positive")
    if not 0 < backoff_min <= backoff_max:
        raise ValueError("need 0 < backoff_min <= backoff_max")
    if prefetch < 0:
        raise ValueError("prefetch must be >= 0")
    if low_water is None:
        low_water = prefetch // 4
    if prefetch and not 0 <= low_water < prefetch:
        raise ValueError("low_water must be in 0 .. prefetch - 1")
    if isinstance(sequence_prefetch, bool) or not isinstance(sequence_prefetch, int):
        raise TypeError(
            f"sequence_prefetch must be an int, not {type(sequence_prefetch).__name__}"
        )
    if not 0 <= sequence_prefetch <= protocol.MAX_VALUES_PER_CALL:
        raise ValueError(
            f"sequence_prefetch must be in 0 ..= {protocol.MAX_VALUES_PER_CALL}"
        )
    if not isinstance(expand, bool):
        raise TypeError(f"expand must be a bool, not {type(expand).__name__}")
    return nodes, low_water


def _backoff(failures: int, low: float, high: float) -> float:
    """The back-off after ``failures`` consecutive failures: ``low`` doubling, at most ``high``."""
    return min(high, low * 2.0 ** (failures - 1))


def _pool_guard(prefetch: int, connect_timeout: float, timeout: float, nodes: int) -> float:
    """How long a caller waits for an empty prefetch pool: a refill tries each node at most
    once, each within its timeouts."""
    parts = 1 + prefetch // protocol.DEFAULT_MAX_BATCH + 1
    return (connect_timeout + timeout * parts) * nodes + 1.0


def _values_count(n: int, want: int, hello: HelloOk) -> int:
    """How many values a GET_VALUES asks for: ``n``, or up to ``want`` as the node allows."""
    return max(n, min(want, min(hello.max_batch, protocol.MAX_VALUES_PER_CALL)))


def _take_values(buf: Deque[int], fresh: List[int], n: int) -> Tuple[List[int], int]:
    """A dense sequence's prefetch: the call's ``n`` values from what ``buf`` kept and the
    ``fresh`` answer (which ``buf`` keeps the rest of), and how many came from ``buf``. Kept
    values above the fresh ones (another node answered lower) are dropped: a gap, never a
    repeat, never going backwards."""
    old = list(buf)
    buf.clear()
    if old and fresh[0] <= old[-1]:
        old = []
    take = n - len(old)
    buf.extend(fresh[take:])
    return old + fresh[:take], len(old)


class _ExpandNode(Protocol):
    """What :func:`_expanded` needs of a node (client.py's and aio.py's ``_Node``)."""

    addr: str
    entry: int
    placeholder: bool
    gone: bool


_N = TypeVar("_N", bound=_ExpandNode)


def _expanded(
    entries: Sequence[Tuple[str, int]],
    answers: Sequence[Optional[Sequence[Tuple[str, int]]]],
    current: List[_N],
    make: Callable[[str, Optional[str], int, bool], _N],
) -> List[_N]:
    """``expand=True``: the node list for the configured ``entries`` given each one's
    resolved ``(ip, port)`` addresses (``answers``, ``None`` when resolving failed), in the
    resolver's order, duplicates removed. Nodes of ``current`` are kept (same objects) where
    their address is still there; an entry that resolves to nothing keeps its current nodes,
    or is a placeholder node (down until it resolves). Addresses that are gone stay at the
    end, marked ``gone``, until their connection fails. ``make(addr, tls_name, entry,
    placeholder)`` makes a node."""
    by_addr = {n.addr: n for n in current}
    out: List[_N] = []
    seen: "set[str]" = set()
    for i, ((host, port), infos) in enumerate(zip(entries, answers)):
        addrs = []
        for ip, p in infos or ():
            addr = _format_addr(ip, p)
            if addr not in seen:
                seen.add(addr)
                addrs.append(addr)
        if not addrs:
            kept = [n for n in current if n.entry == i and n.addr not in seen]
            if not kept:
                entry = _format_addr(host, port)
                found = by_addr.get(entry)
                kept = [found if found is not None else make(entry, None, i, True)]
            for n in kept:
                seen.add(n.addr)
            out.extend(kept)
            continue
        for addr in addrs:
            node = by_addr.get(addr)
            if node is None or node.placeholder:
                node = make(addr, host, i, False)
            node.gone = False
            out.append(node)
    for node in current:
        if node.addr not in seen and not node.placeholder:
            node.gone = True
            out.append(node)
    return out


def _without_gone(new: List[_N], failed: _N, idle: Callable[[_N], bool]) -> List[_N]:
    """``expand=True``, after ``failed`` failed: ``new`` without its gone nodes that failed or
    have no connection (``idle``), unless that would leave no node."""
    dropped = [n for n in new if n.gone and (n is failed or idle(n))]
    if dropped and len(dropped) < len(new):
        return [n for n in new if n not in dropped]
    return new


def _addresses(infos: Sequence[Tuple[Any, ...]]) -> List[Tuple[str, int]]:
    """getaddrinfo's answer as ``(ip, port)`` pairs."""
    return [(str(info[4][0]), int(info[4][1])) for info in infos]


class _SeqState:
    """What the client knows of one named sequence with ``sequence_prefetch`` on: its mode
    as the last VALUES said (``None`` before the first), and, for a dense one, the values
    kept for later calls. ``lock`` serialises taking from and refilling the buffer, so that
    values leave it in increasing order, each to exactly one call."""

    __slots__ = ("mode", "buffer", "lock")

    def __init__(self) -> None:
        self.mode: Optional[int] = None
        self.buffer: Deque[int] = collections.deque()
        self.lock = threading.Lock()


class Client:
    """A thread-safe client for a cluster of idgen nodes.

    ``nodes`` are ``"host:port"`` strings, tried in that order (the client sticks to the node
    that last answered). ``timeout`` bounds the wait for each answer frame (and each send),
    ``connect_timeout`` the TCP connect plus handshake. ``backoff_min``/``backoff_max`` bound
    how long a failed node is skipped. ``prefetch=N`` keeps a local pool of up to ``N`` IDs
    that :meth:`next_id` serves from, refilled by a background thread when it falls below
    ``low_water`` (default ``N // 4``).

    TLS: ``tls_ca`` (a PEM CA bundle) makes every connection TLS, verifying the node's
    certificate and its host name (``check_hostname``), or ``server_hostname`` when given;
    ``tls_cert`` and ``tls_key`` add a client certificate (mutual TLS); ALPN ``idgen/1`` is
    offered. ``ssl_context`` takes an ``ssl.SSLContext`` of one's own instead, used as it
    is. A failed handshake raises :class:`TLSError` (an :class:`UnavailableError`: the call
    fails over to the next node).

    Prefetching costs: IDs wait in the pool, so an ID's timestamp may be older than the
    moment :meth:`next_id` returns it (time order across processes gets looser), and IDs
    still in the pool when the process ends or :meth:`close` is called are never used (a
    gap). It can never produce a duplicate: the server hands every ID out once.

    Named sequences (protocol version 3): :meth:`next_value` and :meth:`next_values`.
    ``sequence_prefetch=K`` (default 0, off) keeps up to about ``K`` values per **dense**
    sequence to answer later calls from; a strict sequence's values are never kept (see
    :meth:`next_values`).

    Configuration from a URL or the environment (clients/vectors/CONFIG.md):
    :meth:`from_url` and :meth:`from_env`. ``tls=True`` turns TLS on without ``tls_ca``,
    verifying nodes against the system's trusted roots. ``expand=True`` makes each address a
    node's name resolves to a node of its own (re-resolved when a node fails, at most once a
    second); TLS still verifies the name given.

    Observability: events are logged to ``logging.getLogger("idgen_client")`` (quiet unless
    the program configures logging) and passed to ``hooks`` (a callable
    ``hook(event, fields)`` or a list of them), see :mod:`idgen_client.observe`.

    See the module docstring for the pipelining and failover design.
    """

    def __init__(
        self,
        nodes: Sequence[str],
        *,
        timeout: float = 1.0,
        connect_timeout: float = 1.0,
        backoff_min: float = 0.2,
        backoff_max: float = 10.0,
        prefetch: int = 0,
        low_water: Optional[int] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        tls_ca: Optional[_tls.PathLike] = None,
        tls_cert: Optional[_tls.PathLike] = None,
        tls_key: Optional[_tls.PathLike] = None,
        server_hostname: Optional[str] = None,
        sequence_prefetch: int = 0,
        tls: bool = False,
        expand: bool = False,
        hooks: _observe.Hooks = None,
    ):
        nodes, low_water = _checked_settings(
            nodes, timeout, connect_timeout, backoff_min, backoff_max,
            prefetch, low_water, sequence_prefetch, expand,
        )  # fmt: skip
        self._obs = _observe.Observer(hooks)
        self._local = threading.local()  # the call in progress in this thread (_CallInfo)
        self._tls = _tls_settings(ssl_context, tls_ca, tls_cert, tls_key, server_hostname, tls)
        self._pid = os.getpid()  # a different pid at a public call: we are a forked child
        self._expand = expand
        self._entries = [_parse_node(n) for n in nodes]
        self._resolve_lock = threading.Lock()
        self._resolved_at = time.monotonic()
        self._nodes: List[_Node] = (
            self._resolve([]) if expand else [_Node(n) for n in nodes]
        )
        self._timeout = float(timeout)
        self._connect_timeout = float(connect_timeout)
        self._backoff_min = float(backoff_min)
        self._backoff_max = float(backoff_max)
        self._preferred = 0
        self._layout: Optional[Layout] = None
        self._layout_lock = threading.Lock()
        self._stats = _Stats()
        self._tokens = itertools.count(1)
        self._closed = False
        # Prefetch pool.
        self._prefetch = int(prefetch)
        self._low_water = int(low_water)
        self._pool: Deque[int] = collections.deque()
        self._pool_cond = threading.Condition()
        self._refill_wanted = False
        self._refill_gen = 0
        self._refill_error: Optional[BaseException] = None
        self._refiller: Optional[threading.Thread] = None
        # Named sequences: per-name mode and buffer (dense only), least recently used first.
        self._seq_prefetch = sequence_prefetch
        self._seqs: "collections.OrderedDict[str, _SeqState]" = collections.OrderedDict()
        self._seqs_lock = threading.Lock()
        if self._prefetch:
            self._refill_wanted = True
            self._start_refiller()
        _CLIENTS.add(self)

    # -- configuration ----------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **code_settings: Any) -> "Client":
        """A client configured by an ``idgen://`` / ``idgens://`` URL
        (:func:`idgen_client.parse_url`), with further settings given in code
        (``prefetch=1000``, ``hooks=...``). A setting given both in the URL and in code is a
        :class:`idgen_client.ConfigError`, as are TLS options in code for an ``idgen://``
        URL."""
        return cls.from_settings(parse_url(url), **code_settings)

    @classmethod
    def from_env(cls, **code_settings: Any) -> "Client":
        """A client configured by ``IDGEN_NODES`` (a URL, or a plain ``host:port,...`` list
        with the ``IDGEN_CLIENT_*`` variables), see :meth:`idgen_client.Settings.from_env`;
        code settings as for :meth:`from_url`."""
        return cls.from_settings(Settings.from_env(), **code_settings)

    @classmethod
    def from_settings(cls, settings: Settings, **code_settings: Any) -> "Client":
        """A client from parsed :class:`idgen_client.Settings` and settings given in code
        (each setting from one source only: :meth:`Settings.merge`)."""
        kwargs: Dict[str, Any] = dict(settings.merge(code_settings))
        nodes = kwargs.pop("nodes")
        return cls(nodes, **kwargs)

    # -- public API -------------------------------------------------------------------------

    def next_id(self) -> int:
        """One ID: from the prefetch pool when ``prefetch`` is set, else one GET_IDS."""
        self._check_fork()
        if self._prefetch:
            return self._pool_pop()
        return self.next_ids(1)[0]

    def next_ids(
        self, n: int, *, after: Optional[int] = None, idempotency_key: Optional[str] = None
    ) -> List[int]:
        """``n`` IDs, increasing, from one node (all or nothing). Above the node's
        ``max_batch`` the request is split into pipelined GET_IDS frames and re-joined.
        ``n`` is 1 to 16777216: 0, a negative count or one above that raises ``ValueError``
        before anything is sent (clients/vectors/CONFIG.md, "Count 0").

        With ``after`` (an ID seen, from any node) every ID is greater than it: the node waits,
        at most its ``max_drift``, for its clock to pass that ID's time (read-your-writes order
        for a caller that passes on what it saw). With ``idempotency_key`` (1 to 64 visible
        ASCII characters) the same call with the same key, within the node's
        ``idempotency_window``, gets the same IDs again; the key picks its node (FNV-1a,
        :func:`key_node`) and the call is never failed over, since another node would issue
        new IDs: a retry-elsewhere failure of that node raises :class:`KeyNodeUnavailableError`. Either option makes the call one GET_IDS_WITH (protocol version 5, else
        :class:`OptionsUnsupportedError`), so ``n`` is at most the node's ``max_batch``."""
        self._check_fork()
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        if not 1 <= n <= _MAX_IDS_PER_CALL:
            raise ValueError(f"n must be 1 to {_MAX_IDS_PER_CALL} per call, not {n}")
        if after is None and idempotency_key is None:
            return self._observed(
                "ids", n, lambda: self._with_failover(lambda conn: self._fetch(conn, n))
            )
        frame = _with_frame(n, after, idempotency_key, masked=False)

        def run(conn: _Connection) -> List[int]:
            slot = self._submit_with(conn, n, frame, protocol.OP_GET_IDS_WITH)
            return conn.wait_ids(slot, self._timeout)

        return self._observed("ids_with", n, lambda: self._routed(idempotency_key, run))

    def next_masked_ids(
        self, n: int, *, after: Optional[int] = None, idempotency_key: Optional[str] = None
    ) -> MaskedIdList:
        """``n`` IDs masked by the node with its current masking key (GET_IDS_WITH's masked
        option; the node needs masking keys, else ``205 INVALID_OPTION``): the key ID, the
        masked integers and their string forms. ``after`` and ``idempotency_key`` as for
        :meth:`next_ids`."""
        self._check_fork()
        frame = _with_frame(n, after, idempotency_key, masked=True)

        def run(conn: _Connection) -> MaskedIdList:
            slot = self._submit_with(conn, n, frame, _MASKED_KIND)
            got = conn.wait(slot, self._timeout)
            assert isinstance(got, MaskedIds)
            key = forms.BASE62_ALPHABET[got.key_id]
            return MaskedIdList(got.key_id, got.ids, [key + forms.to_base62(m) for m in got.ids])

        return self._observed("masked_ids", n, lambda: self._routed(idempotency_key, run))

    def _submit_with(self, conn: _Connection, n: int, frame: bytes, kind: int) -> _Slot:
        if conn.hello.version < protocol.IDS_WITH_VERSION:
            raise OptionsUnsupportedError(conn.hello.version, conn.node)
        if n > conn.hello.max_batch:
            raise ValueError(
                f"a call with options is one request: at most the node's max_batch "
                f"({conn.hello.max_batch}) IDs, not {n}"
            )
        (slot,) = conn.submit([(kind, (n, frame))])
        self._stats.add("requests")
        return slot

    def _routed(self, key: Optional[str], run: Callable[[_Connection], _T]) -> _T:
        """``run`` with failover, or, with an idempotency key, on the key's node only."""
        if key is None:
            return self._with_failover(run)
        if self._closed:
            raise ClientClosedError("the client is closed")
        nodes = self._nodes  # the list as it is when the request is made
        node = nodes[key_node(key, len(nodes))]
        info: Optional[_CallInfo] = getattr(self._local, "call", None)
        for attempt in (0, 1):
            conn: Optional[_Connection] = None
            try:
                conn = self._connection(node)
                result = run(conn)
                if info is not None:
                    info.node = node.addr
                return result
            except ServerError as e:
                if info is not None:
                    info.node = node.addr
                self._refused(node, e, info)
                action = _on_refusal(e, may_reconnect=attempt == 0)
                if action == _RECONNECT:
                    # The node is fine; a new connection learns its new range. Once.
                    self._drop(node, conn)
                    continue
                if action == _RAISE:
                    if e.closes_connection:
                        self._drop(node, conn)
                    raise
                # Retry-elsewhere: back the node off as failover would, but do not go to
                # another node with this key (it would issue new IDs); say so.
                self._mark_down(node, conn, e, keep_connection=not e.closes_connection)
                raise KeyNodeUnavailableError(key, node.addr, e) from e
            except UnavailableError as e:
                if self._closed:
                    raise ClientClosedError("the client is closed") from e
                if isinstance(e, KeyNodeUnavailableError):
                    raise
                self._mark_down(node, conn, e)
                raise KeyNodeUnavailableError(key, node.addr, e) from e
        raise UnavailableError("the key's node changed its range twice", node.addr)

    def next_uuid(self) -> uuid.UUID:
        """One version 7 UUID (see :meth:`next_uuids`)."""
        return self.next_uuids(1)[0]

    def next_uuids(self, n: int) -> List[uuid.UUID]:
        """``n`` RFC 9562 version 7 UUIDs as ``uuid.UUID``, strictly increasing, from one node
        (all or nothing; protocol version 4, GET_UUIDS). Each is made by the node from one ID
        it issues (its millisecond, worker and sequence, then random bits), so they are unique
        across the cluster as its IDs are; :meth:`decode_uuid` takes one apart.

        Checked before anything is sent: ``n`` an int in ``1 ..`` (``TypeError``,
        ``ValueError``), and the node must have negotiated version 4 (else
        :class:`UuidsUnsupportedError`, no other node tried). Above the node's ``max_batch``
        the request is split into pipelined GET_UUIDS frames and re-joined; failover as for
        :meth:`next_ids`. The prefetch pool serves IDs only."""
        self._check_fork()
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        if not 1 <= n <= _MAX_IDS_PER_CALL:
            raise ValueError(f"n must be 1 to {_MAX_IDS_PER_CALL}, not {n}")
        return self._observed(
            "uuids", n, lambda: self._with_failover(lambda conn: self._fetch_uuids(conn, n))
        )

    def decode_uuid(self, value: uuid.UUID) -> UuidParts:
        """Take a version 7 UUID apart with :attr:`layout` (see :meth:`Layout.decode_uuid`)."""
        return self.layout.decode_uuid(value)

    def ping(self) -> float:
        """PING a node (with failover); returns the round-trip time in seconds."""
        self._check_fork()

        def run(conn: _Connection) -> float:
            start = time.monotonic()
            (slot,) = conn.submit([(protocol.OP_PING, next(self._tokens) & protocol.MAX_U64)])
            self._stats.add("pings")
            conn.wait(slot, self._timeout)
            return time.monotonic() - start

        return self._observed("ping", 1, lambda: self._with_failover(run))

    def next_value(self, name: str) -> int:
        """One value of the named sequence ``name`` (see :meth:`next_values`)."""
        return self.next_values(name, 1)[0]

    def next_values(self, name: str, n: int) -> List[int]:
        """``n`` values of the named sequence ``name``, strictly increasing, each in
        ``1 ..= 2^63 - 1`` (protocol version 3, GET_VALUES).

        Checked before anything is sent: ``name`` must be 1 to 64 bytes of ``a-z``,
        ``0-9``, ``.``, ``_``, ``-`` starting with a letter or a digit, and ``n`` an int in
        ``1 ..= min(max_batch, 1048576)`` (``ValueError``, ``TypeError``), and the node must
        have negotiated version 3 (else :class:`SequencesUnsupportedError`, no other node
        tried). The server's ``203 UNKNOWN_SEQUENCE``, ``204 INVALID_SEQUENCE_NAME``, ``307
        SEQUENCE_USED_UP`` (and ``200``/``201``) raise :class:`ServerError` at once; ``308
        SEQUENCE_UNAVAILABLE``, ``306 BUSY``, the other retry-elsewhere statuses, closed
        connections and timeouts fail over like :meth:`next_ids`. A retry asks again: a
        value is never handed out twice (a lost answer is a gap).

        With ``sequence_prefetch=K`` a **dense** sequence's call is answered from a
        per-name buffer while it holds ``n`` values; otherwise the client asks for
        ``max(K, n)`` (at most the node's ``max_batch``), answers with what the buffer held
        and the first new values, and keeps the rest. The mode is learned from the first
        answer for a name, which asks for exactly ``n``; a strict sequence's calls always
        ask for exactly ``n`` and nothing is kept. ``UNKNOWN_SEQUENCE`` empties the name's
        buffer and forgets its mode.
        """
        self._check_fork()
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        if not 1 <= n <= protocol.MAX_VALUES_PER_CALL:
            raise ValueError(f"n must be 1 to {protocol.MAX_VALUES_PER_CALL}, not {n}")
        raw = protocol.check_sequence_name(name)
        layout = self._layout
        if layout is not None and n > layout.max_batch:
            raise ValueError(f"n must be 1 to {layout.max_batch} (the node's max_batch), not {n}")
        if not self._seq_prefetch:
            return self._observed("values", n, lambda: self._get_values(raw, n, n).values)
        return self._observed(
            "values", n, lambda: self._prefetched_values(raw.decode("ascii"), raw, n)
        )

    @property
    def layout(self) -> Layout:
        """The cluster's ID layout (from the first HELLO_OK; connects if needed)."""
        self._check_fork()
        if self._layout is None:
            self._with_failover(lambda conn: conn.hello)
        assert self._layout is not None
        return self._layout

    def decode(self, id_: int) -> IdParts:
        """Take an ID apart with :attr:`layout`."""
        return self.layout.decode(id_)

    def stats(self) -> Dict[str, int]:
        """Counters: ``connects``, ``requests`` (GET_IDS frames sent), ``ids`` (IDs
        received), ``pings``, ``node_failures`` (a node marked down), ``failovers`` (a call
        moved on to another node), ``prefetch_refills``, ``prefetch_served``,
        ``value_requests`` (GET_VALUES frames sent), ``values`` (values received),
        ``value_prefetch_served`` (values handed out from sequence buffers),
        ``uuid_requests`` (GET_UUIDS frames sent), ``uuids`` (UUIDs received). A forked child
        starts from zero."""
        self._check_fork()
        return self._stats.snapshot()

    def nodes(self) -> List[NodeState]:
        """Each node's state: ``node``, ``connected``, ``down`` (backing off now),
        ``retry_in`` (seconds), ``failures`` (consecutive), ``last_error``, ``hello``."""
        self._check_fork()
        now = time.monotonic()
        out: List[NodeState] = []
        for node in self._nodes:
            with node.lock:
                conn = node.conn
                out.append(
                    {
                        "node": node.addr,
                        "connected": conn is not None and conn.alive,
                        "down": node.down_until > now,
                        "retry_in": max(0.0, node.down_until - now),
                        "failures": node.failures,
                        "last_error": node.last_error,
                        "hello": conn.hello if conn is not None else None,
                    }
                )
        return out

    def close(self) -> None:
        """Close every connection and stop the prefetch thread. IDs still in the pool are
        dropped (a gap, never a duplicate). Waiting calls fail with ClientClosedError.
        In a forked child it closes only the child's own connections."""
        self._check_fork()
        if self._closed:
            return
        self._closed = True
        with self._pool_cond:
            self._pool.clear()
            self._pool_cond.notify_all()
        with self._seqs_lock:
            self._seqs.clear()
        for node in self._nodes:
            with node.lock:
                conn, node.conn = node.conn, None
            if conn is not None:
                conn.close()
        if self._refiller is not None and self._refiller is not threading.current_thread():
            self._refiller.join(self._timeout + self._connect_timeout + 1.0)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({[n.addr for n in self._nodes]!r})"

    # -- fork -------------------------------------------------------------------------------

    def _check_fork(self) -> None:
        """The fallback (and belt-and-braces) for the at-fork hook: a public call in a
        process other than the one that created (or last reset) the client resets it."""
        if self._pid != os.getpid():
            with _FORK_LOCK:
                if self._pid != os.getpid():
                    self._forget_parent()

    def _forget_parent(self) -> None:
        """In a forked child: drop everything inherited from the parent and start afresh.

        The pool's IDs are the parent's too (handing them out here would duplicate them);
        the connections are the parent's sockets (forgotten without sending anything or
        shutting them down, see :meth:`_Connection.forget`); locks may have been held by
        threads that did not survive the fork, and the refill thread did not survive it
        either (the first :meth:`next_id` starts a new one). Node backoff and the layout
        are kept: they describe the cluster, not this process."""
        for node in self._nodes:
            conn, node.conn = node.conn, None
            node.lock = threading.Lock()
            if conn is not None:
                conn.forget()
        self._layout_lock = threading.Lock()
        self._resolve_lock = threading.Lock()
        self._obs.after_fork()
        self._local = threading.local()
        self._stats = _Stats()
        self._pool = collections.deque()
        self._pool_cond = threading.Condition()
        self._refill_wanted = bool(self._prefetch)
        self._refill_gen = 0
        self._refill_error = None
        self._refiller = None
        # The sequence buffers hold the parent's values too: never hand them out here.
        self._seqs = collections.OrderedDict()
        self._seqs_lock = threading.Lock()
        self._pid = os.getpid()  # last: a reset cut short is redone by the pid check

    # -- requests ---------------------------------------------------------------------------

    def _fetch(self, conn: _Connection, n: int) -> List[int]:
        # Version 2 and later: RANGES, the same IDs as runs (a few bytes for thousands, and
        # expanded by range() rather than unpacked one by one).
        op = _ids_op(conn.hello)
        slots = conn.submit([(op, c) for c in _split(n, conn.hello.max_batch)])
        self._stats.add("requests", len(slots))
        if len(slots) == 1:
            ids = conn.wait_ids(slots[0], self._timeout)
        else:
            ids = []
            for slot in slots:  # answers arrive in order; a failed part fails the whole call
                ids.extend(conn.wait_ids(slot, self._timeout))
        self._stats.add("ids", len(ids))
        return ids

    def _fetch_uuids(self, conn: _Connection, n: int) -> List[uuid.UUID]:
        if conn.hello.version < protocol.UUIDS_VERSION:
            raise UuidsUnsupportedError(conn.hello.version, conn.node)
        slots = conn.submit([(protocol.OP_GET_UUIDS, c) for c in _split(n, conn.hello.max_batch)])
        self._stats.add("uuid_requests", len(slots))
        uuids: List[uuid.UUID] = []
        for slot in slots:  # answers arrive in order; a failed part fails the whole call
            uuids.extend(conn.wait_uuids(slot, self._timeout))
        self._stats.add("uuids", len(uuids))
        return uuids

    # -- named sequences ----------------------------------------------------------------------

    def _get_values(self, raw: bytes, n: int, want: int) -> Values:
        """One GET_VALUES (with failover) for ``n`` values, or up to ``want`` (>= ``n``) when
        the node's limits allow: the VALUES frame, its count checked."""

        def run(conn: _Connection) -> Values:
            hello = conn.hello
            count = _values_count(n, want, hello)
            try:
                frame = protocol.check_get_values(
                    raw,
                    count,
                    version=hello.version,
                    max_batch=hello.max_batch,
                    max_request_frame=hello.max_request_frame,
                )
            except protocol.SequencesUnsupported as e:
                raise SequencesUnsupportedError(e.version, conn.node) from None
            (slot,) = conn.submit([(protocol.OP_GET_VALUES, (count, frame))])
            self._stats.add("value_requests")
            answer = conn.wait_values(slot, self._timeout)
            self._stats.add("values", len(answer.values))
            return answer

        return self._with_failover(run)

    def _seq_state(self, key: str) -> _SeqState:
        """The name's state, made if new; the least recently used beyond 1024 is forgotten
        (its buffered values are a gap)."""
        with self._seqs_lock:
            state = self._seqs.get(key)
            if state is None:
                state = self._seqs[key] = _SeqState()
                while len(self._seqs) > MAX_PREFETCHED_SEQUENCES:
                    self._seqs.popitem(last=False)
            else:
                self._seqs.move_to_end(key)
            return state

    def _forget_seq(self, key: str, state: _SeqState) -> None:
        """After UNKNOWN_SEQUENCE: empty the name's buffer and forget its mode."""
        with self._seqs_lock:
            if self._seqs.get(key) is state:
                del self._seqs[key]
        state.mode = None
        state.buffer.clear()

    def _ask(self, key: str, state: _SeqState, raw: bytes, n: int, want: int) -> Values:
        try:
            answer = self._get_values(raw, n, want)
        except ServerError as e:
            if e.status == _status.UNKNOWN_SEQUENCE:
                self._forget_seq(key, state)
            raise
        state.mode = answer.mode
        return answer

    def _prefetched_values(self, key: str, raw: bytes, n: int) -> List[int]:
        state = self._seq_state(key)
        if state.mode == protocol.MODE_STRICT:
            # Strict: exactly n, nothing kept, calls not serialized (pipelined calls share a
            # commit on the node); the answer says the mode.
            answer = self._ask(key, state, raw, n, n)
            if answer.mode == protocol.MODE_STRICT and state.buffer:
                with state.lock:  # the sequence was dense once: its old values go
                    state.buffer.clear()
            return answer.values
        with state.lock:
            if state.mode != protocol.MODE_DENSE:
                # Not known yet (the first call for the name): exactly n, nothing kept, under
                # the name's lock, so that no call takes buffered values meanwhile that lie
                # below this call's (a thread's values would then go down).
                answer = self._ask(key, state, raw, n, n)
                if answer.mode == protocol.MODE_STRICT:
                    state.buffer.clear()
                return answer.values
            buf = state.buffer
            if len(buf) >= n:
                out = [buf.popleft() for _ in range(n)]
                self._stats.add("value_prefetch_served", n)
                return out
            want = max(self._seq_prefetch, n)
            try:
                answer = self._ask(key, state, raw, n, want)
            except ServerError as e:
                if e.status != _status.SEQUENCE_USED_UP or want == n:
                    raise
                # Fewer than `want` may be left below the maximum, but `n` may: ask for
                # exactly what this call needs (clients/vectors/SEQUENCES.md).
                answer = self._ask(key, state, raw, n, n)
            fresh = answer.values
            if answer.mode != protocol.MODE_DENSE:
                # Strict now (dropped and created again): these values answer this call only.
                buf.clear()
                return fresh[:n]
            # Kept values above another node's fresh ones are dropped (a gap, never a repeat).
            out, kept = _take_values(buf, fresh, n)
            if kept:
                self._stats.add("value_prefetch_served", kept)
            return out

    # -- failover -----------------------------------------------------------------------------

    def _with_failover(self, run: Callable[[_Connection], _T]) -> _T:
        if self._closed:
            raise ClientClosedError("the client is closed")
        nodes = self._nodes  # this call's list (expand=True may replace it meanwhile)
        count = len(nodes)
        start = self._preferred % count
        tried: List[BaseException] = []
        order = collections.deque((start + k) % count for k in range(count))
        reconnected: "set[int]" = set()  # nodes already reconnected to after a 305
        info: Optional[_CallInfo] = getattr(self._local, "call", None)
        moving: Optional[Tuple[str, BaseException]] = None  # the node left, and why
        while order or (self._expand and self._nodes is not nodes):
            if not order:
                # expand=True: the names were resolved again meanwhile; their new addresses
                # are tried too.
                new = [n for n in self._nodes if n not in nodes]
                if not new:
                    break
                order.extend(range(len(nodes), len(nodes) + len(new)))
                nodes = nodes + new
            index = order.popleft()
            node = nodes[index]
            if node.down_until > time.monotonic():
                continue
            if tried and index not in reconnected:
                self._stats.add("failovers")
            if moving is not None and moving[0] != node.addr:
                self._obs.emit(
                    _observe.FAILOVER,
                    {"from_node": moving[0], "to_node": node.addr, "reason": _reason(moving[1])},
                )
                moving = None
            conn: Optional[_Connection] = None
            try:
                conn = self._connection(node)
                result = run(conn)
            except ServerError as e:
                if info is not None:
                    info.node = node.addr
                self._refused(node, e, info)
                action = _on_refusal(e, may_reconnect=index not in reconnected)
                if action == _RECONNECT:
                    # The node took another worker range and closed this connection. The
                    # node is fine: reconnect at once (the new HELLO_OK announces the new
                    # range) and retry the whole call there, once; then the next node.
                    reconnected.add(index)
                    self._drop(node, conn)
                    order.appendleft(index)
                    continue
                if action == _RAISE:
                    if e.closes_connection:
                        self._drop(node, conn)
                    raise
                # A 3xx that keeps the connection open (300, 301, an unknown 3xx): back
                # the node off but keep the connection for when it is tried again.
                self._mark_down(node, conn, e, keep_connection=not e.closes_connection)
                tried.append(e)
                moving = (node.addr, e)
            except (UnavailableError, ProtocolError) as e:
                if self._closed:
                    raise ClientClosedError("the client is closed") from e
                self._mark_down(node, conn, e)
                tried.append(e)
                moving = (node.addr, e)
            else:
                if info is not None:
                    info.node = node.addr
                if node.failures:
                    with node.lock:
                        was_down, node.failures = node.failures, 0
                    if was_down:
                        self._obs.emit(
                            _observe.NODE_UP, {"node": node.addr, "reason": "answered again"}
                        )
                if nodes is self._nodes:
                    self._preferred = index
                else:
                    current = self._nodes
                    self._preferred = current.index(node) if node in current else 0
                return result
        if len(tried) == 1:
            raise _fresh(tried[0])
        now = time.monotonic()
        errors = {n.addr: n.last_error for n in nodes}
        retry_in = {n.addr: n.down_until - now for n in nodes if n.down_until > now}
        raise NoNodeAvailable(errors, retry_in) from (tried[-1] if tried else None)

    def _connection(self, node: _Node) -> _Connection:
        conn = node.conn
        if conn is not None and conn.alive:
            return conn
        with node.lock:
            if self._closed:
                raise ClientClosedError("the client is closed")
            conn = node.conn
            if conn is not None and conn.alive:
                return conn
            if node.down_until > time.monotonic() and node.last_error is not None:
                # Another thread's connect just failed while this one waited for the lock.
                raise UnavailableError(f"node is down: {node.last_error}", node.addr)
            tls = self._tls
            if tls is not None and tls[1] is None and node.tls_name is not None:
                tls = (tls[0], node.tls_name)  # expand=True: verify the name, not the address
            started = time.monotonic()
            try:
                if node.placeholder:
                    # expand=True: the name resolved to nothing. Down until it resolves
                    # (this failure makes the client resolve it again).
                    raise UnavailableError("the name resolves to no address", node.addr)
                conn = _Connection(
                    node.addr, self._connect_timeout, self._timeout, self._stats, tls
                )
                try:
                    self._check_layout(conn)
                except ProtocolError:
                    conn.close()
                    raise
            except IdgenError as e:
                failed: Optional[IdgenError] = e
            else:
                failed = None
                node.conn = conn
        # Events after the lock is released: a hook may call the client.
        took = time.monotonic() - started
        if failed is not None:
            self._obs.emit(
                _observe.CONNECT_FAILED,
                {"node": node.addr, "error": _reason(failed), "duration": took},
            )
            raise failed
        assert conn is not None
        self._obs.emit(
            _observe.CONNECT,
            {
                "node": node.addr,
                "address": conn.address,
                "version": conn.hello.version,
                "duration": took,
            },
        )
        return conn

    def _check_layout(self, conn: _Connection) -> None:
        layout = Layout.from_hello(conn.hello)
        with self._layout_lock:
            if self._layout is None:
                self._layout = layout
            elif not self._layout.same_ids(layout):
                raise ProtocolError(
                    f"node's ID layout {layout} differs from the cluster's {self._layout}",
                    node=conn.node,
                )

    def _drop(self, node: _Node, conn: Optional[_Connection]) -> None:
        with node.lock:
            if conn is not None and node.conn is conn:
                node.conn = None
        if conn is not None:
            conn.fail(UnavailableError("connection dropped", node.addr))

    def _mark_down(
        self,
        node: _Node,
        conn: Optional[_Connection],
        err: BaseException,
        keep_connection: bool = False,
    ) -> None:
        """Back a node off. Only the first report of one failure counts: reports about an
        older connection, or while the node is already backing off, do not extend it.
        ``keep_connection``: the node answered with a status that leaves ``conn`` usable."""
        now = time.monotonic()
        marked: Optional[Tuple[float, int]] = None
        with node.lock:
            stale = conn is not None and node.conn is not conn and node.conn is not None
            if conn is not None and node.conn is conn and not keep_connection:
                node.conn = None
            if stale or node.down_until > now:
                node.last_error = node.last_error or err
            else:
                node.failures += 1
                delay = _backoff(node.failures, self._backoff_min, self._backoff_max)
                node.down_until = now + delay
                node.last_error = err
                self._stats.add("node_failures")
                marked = (delay, node.failures)
        if conn is not None and not keep_connection:
            conn.fail(err if isinstance(err, IdgenError) else UnavailableError(str(err)))
        if marked is not None:
            self._obs.emit(
                _observe.NODE_DOWN,
                {
                    "node": node.addr,
                    "reason": _reason(err),
                    "retry_in": marked[0],
                    "failures": marked[1],
                },
            )
        if self._expand:
            self._node_failed(node)

    def _refused(self, node: _Node, err: ServerError, info: Optional[_CallInfo]) -> None:
        self._obs.emit(
            _observe.REFUSED,
            {
                "node": node.addr,
                "op": info.op if info is not None else None,
                "status": err.status,
                "status_name": err.name,
                "message": err.message,
            },
        )

    # -- events -------------------------------------------------------------------------------

    def _observed(self, op: str, count: int, call: Callable[[], _T]) -> _T:
        """Run one public call and emit its ``request`` event (op, count, the node that
        answered, duration, outcome) when it finishes."""
        local = self._local
        outer = getattr(local, "call", None)
        info = local.call = _CallInfo(op)
        started = time.monotonic()
        outcome = "ok"
        try:
            return call()
        except BaseException as e:
            outcome = _outcome(e)
            raise
        finally:
            local.call = outer
            self._obs.emit(
                _observe.REQUEST,
                {
                    "op": op,
                    "count": count,
                    "node": info.node,
                    "duration": time.monotonic() - started,
                    "outcome": outcome,
                },
            )

    # -- expand=True: each address of a name is a node ---------------------------------------

    def _resolve(self, current: List[_Node]) -> List[_Node]:
        """The node list for the configured entries: each replaced by its addresses in the
        resolver's order, duplicates removed. Nodes of ``current`` are kept (same objects)
        where their address is still there; an entry that does not resolve keeps its current
        nodes, or is a placeholder node (down until it resolves). Addresses that are gone stay
        at the end, marked ``gone``, until their connection fails."""
        answers: List[Optional[List[Tuple[str, int]]]] = []
        for host, port in self._entries:
            try:
                answers.append(_addresses(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)))
            except OSError as e:
                answers.append(None)
                _observe.LOGGER.debug("resolving %s:%s failed: %s", host, port, e)
        return _expanded(self._entries, answers, current, _Node)

    def _node_failed(self, node: _Node) -> None:
        """expand=True: a node failed. Resolve the names again (at most once a second), and
        drop the node if its address is gone."""
        now = time.monotonic()
        if not self._resolve_lock.acquire(blocking=False):
            return
        try:
            current = self._nodes
            if now - self._resolved_at >= 1.0:
                self._resolved_at = now
                new = self._resolve(current)
            else:
                new = list(current)
            new = _without_gone(new, node, lambda n: n.conn is None)
            removed = [n for n in current if n not in new]
            if [n.addr for n in new] != [n.addr for n in current]:
                preferred = current[self._preferred % len(current)]
                self._nodes = new
                self._preferred = new.index(preferred) if preferred in new else 0
                _observe.LOGGER.log(
                    logging.INFO,
                    "nodes now %s (names resolved again)",
                    ", ".join(n.addr for n in new),
                )
        finally:
            self._resolve_lock.release()
        for n in removed:
            with n.lock:
                conn, n.conn = n.conn, None
            if conn is not None:
                conn.close()

    # -- prefetch pool ------------------------------------------------------------------------

    def _pool_pop(self) -> int:
        # Bound the wait: a refill tries each node at most once, each within its timeouts.
        guard = _pool_guard(self._prefetch, self._connect_timeout, self._timeout, len(self._nodes))
        deadline = time.monotonic() + guard
        with self._pool_cond:
            if self._refiller is None and not self._closed:
                self._start_refiller()  # in a forked child: the parent's did not survive
            seen_gen = self._refill_gen
            while True:
                if self._closed:
                    raise ClientClosedError("the client is closed")
                if self._pool:
                    id_ = self._pool.popleft()
                    if len(self._pool) < self._low_water and not self._refill_wanted:
                        self._refill_wanted = True
                        self._pool_cond.notify_all()
                    self._stats.add("prefetch_served")
                    return id_
                if self._refill_gen != seen_gen and self._refill_error is not None:
                    raise _fresh(self._refill_error)
                if not self._refill_wanted:
                    self._refill_wanted = True
                    self._pool_cond.notify_all()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise UnavailableError(f"prefetch pool stayed empty for {guard:.1f}s")
                self._pool_cond.wait(remaining)

    def _start_refiller(self) -> None:
        self._refiller = threading.Thread(
            target=self._refill_loop, name="idgen-prefetch", daemon=True
        )
        self._refiller.start()

    def _refill_loop(self) -> None:
        while True:
            with self._pool_cond:
                while not self._refill_wanted and not self._closed:
                    self._pool_cond.wait(1.0)
                if self._closed:
                    return
                want = self._prefetch - len(self._pool)
            error: Optional[BaseException] = None
            ids: List[int] = []
            if want > 0:
                try:
                    ids = self.next_ids(want)
                except BaseException as e:  # handed to the waiting callers
                    error = e
            with self._pool_cond:
                if self._closed:
                    return
                self._pool.extend(ids)
                self._refill_gen += 1
                self._refill_error = error
                self._refill_wanted = False
                if ids:
                    self._stats.add("prefetch_refills")
                self._pool_cond.notify_all()
            if error is not None and not self._closed:
                # Do not spin on a cluster that is down: callers retrigger a refill.
                time.sleep(min(self._backoff_min, 0.2))
