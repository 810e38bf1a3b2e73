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
    Sequence,
    Tuple,
    TypedDict,
    TypeVar,
    Union,
    cast,
)

from . import forms, protocol
from . import observe as _observe
from . import tls as _tls
from .config import Settings, parse_url
from .errors import (
    ClientClosedError,
    IdgenError,
    ProtocolError,
    ServerError,
    UnavailableError,
)
from .protocol import HelloOk, MaskedIds, Values
from ._shared import (  # noqa: F401 - client.py's names of old, kept for its users
    _BACK_OFF,
    _MASKED_KIND,
    _MAX_IDS_PER_CALL,
    _RAISE,
    _RECONNECT,
    MAX_PREFETCHED_SEQUENCES,
    _addresses,
    _ask_exactly,
    _backoff,
    _CallInfo,
    _check_answer,
    _ConnBase,
    _encode_request,
    _forget_in_child,
    _handshake_error,
    _hello_from,
    _checked_settings,
    _cluster_layout,
    _Core,
    _count,
    _expanded,
    _ExpandNode,
    _Failover,
    _KeyRoute,
    _Plan,
    _format_addr,
    _fresh,
    _get_values_frame,
    _id_requests,
    _ids_op,
    _NodeBase,
    _on_refusal,
    _outcome,
    _parse_node,
    _pool_guard,
    _reason,
    _refusal,
    _SeqBase,
    _split,
    _Stats,
    _take_values,
    _uuid_requests,
    _values_call,
    _values_count,
    _with_frame,
    _with_request,
    _without_gone,
)

__all__ = ["Client", "Layout", "IdParts", "UuidParts", "NodeState", "MaskedIdList", "key_node"]



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


class _Connection(_ConnBase):
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
            hello = _hello_from(buf, self.node)
            while hello is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise socket.timeout()
                sock.settimeout(remaining)
                data = sock.recv(_RECV_CHUNK)
                if not data:
                    raise UnavailableError("connection closed during the handshake", self.node)
                buf += data
                hello = _hello_from(buf, self.node)
        except socket.timeout:
            raise UnavailableError("no HELLO_OK within connect_timeout", self.node) from None
        except (ProtocolError, OSError) as e:
            err = _handshake_error(e, self.node)
            if err is e:
                raise
            raise err from e
        return hello, buf

    # -- state ----------------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        """Mark the connection broken with ``error``: every waiting slot fails with it, later
        submits fail at once, and the socket is closed (which also stops the reader)."""
        if not self._fail_slots(error):
            return
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
        shares with the parent (:meth:`_ConnBase._forget_socket`). Its locks may have been
        held by threads that do not exist here: replaced."""
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._forget_socket()

    # -- requests -------------------------------------------------------------------------

    def submit(self, requests: Sequence[_Request]) -> List[_Slot]:
        """Send request frames ``(opcode, count-or-token)`` pipelined, in order, as one
        write; GET_VALUES as ``(OP_GET_VALUES, (count, frame))`` with the frame already
        checked and encoded (:func:`protocol.check_get_values`). Returns their slots;
        answers are collected with :meth:`wait`."""
        slots = []
        frames = []
        for op, arg in requests:
            expect, frame = _encode_request(op, arg)
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
                self._dispatch_all(buf)
                try:
                    data = sock.recv(_RECV_CHUNK)
                except socket.timeout:
                    continue
                if not data:
                    with self._lock:
                        idle = not self._pending and not buf
                    self._server_closed(idle)
                    return
                buf += data
        except Exception as e:
            self._reader_failed(e)
# Fork safety: every live Client, so that the at-fork hook can reset them in a child.
_CLIENTS: "weakref.WeakSet[Client]" = weakref.WeakSet()
_FORK_LOCK = threading.Lock()  # serialises the pid-check reset (re-created in a child)


def _after_fork_in_child() -> None:
    global _FORK_LOCK
    _FORK_LOCK = threading.Lock()
    _forget_in_child(list(_CLIENTS))


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


class _Node(_NodeBase):
    def __init__(self, addr: str, tls_name: Optional[str] = None, entry: int = 0, placeholder: bool = False):
        # ``lock`` serialises connecting, and guards the connection and back-off state.
        super().__init__(addr, tls_name, entry, placeholder, threading.Lock())
        self.conn: Optional[_Connection] = None


class _SeqState(_SeqBase):
    """A named sequence's state (:class:`_SeqBase`); ``lock`` serialises taking from and
    refilling the buffer, so that values leave it in increasing order, each to exactly one
    call."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


class Client(_Core["_Node", "_SeqState"]):
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
        _count(n, unit=" per call")
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
        (slot,) = conn.submit([_with_request(conn, n, frame, kind)])
        self._stats.add("requests")
        return slot

    def _routed(self, key: Optional[str], run: Callable[[_Connection], _T]) -> _T:
        """``run`` with failover, or, with an idempotency key, on the key's node only."""
        if key is None:
            return self._with_failover(run)
        node = self._nodes[key_node(key, len(self._nodes))]  # as the list is now
        return self._attempts(_KeyRoute(self, getattr(self._local, "call", None), key, node), run)

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
        _count(n)
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
        layout = self._layout
        raw = _values_call(n, name, layout.max_batch if layout is not None else None)
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
        return cast(List[NodeState], self._node_states())

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
        slots = conn.submit(_id_requests(conn, n))
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
        slots = conn.submit(_uuid_requests(conn, n))
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
            (slot,) = conn.submit([(protocol.OP_GET_VALUES, _get_values_frame(raw, n, want, conn))])
            self._stats.add("value_requests")
            answer = conn.wait_values(slot, self._timeout)
            self._stats.add("values", len(answer.values))
            return answer

        return self._with_failover(run)

    def _new_seq(self) -> _SeqState:
        return _SeqState()

    def _ask(self, key: str, state: _SeqState, raw: bytes, n: int, want: int) -> Values:
        try:
            answer = self._get_values(raw, n, want)
        except ServerError as e:
            self._seq_failed(key, state, e)
            raise
        state.answered(answer)
        return answer

    def _prefetched_values(self, key: str, raw: bytes, n: int) -> List[int]:
        state = self._seq_state(key)
        if state.mode == protocol.MODE_STRICT:
            # Strict: exactly n, nothing kept, calls not serialized (pipelined calls share a
            # commit on the node); the answer says the mode.
            answer = self._ask(key, state, raw, n, n)
            if state.buffer:
                with state.lock:  # the sequence was dense once: its old values go
                    return state.exact(answer)
            return answer.values
        with state.lock:
            if state.mode != protocol.MODE_DENSE:
                # Not known yet (the first call for the name): exactly n, nothing kept, under
                # the name's lock, so that no call takes buffered values meanwhile that lie
                # below this call's (a thread's values would then go down).
                return state.exact(self._ask(key, state, raw, n, n))
            out = state.take(n, self._stats)
            if out is not None:
                return out
            want = max(self._seq_prefetch, n)
            try:
                answer = self._ask(key, state, raw, n, want)
            except ServerError as e:
                if not _ask_exactly(e, want, n):
                    raise
                answer = self._ask(key, state, raw, n, n)
            # Kept values above another node's fresh ones are dropped (a gap, never a repeat).
            return state.refilled(answer, n, self._stats)

    # -- failover -----------------------------------------------------------------------------

    def _with_failover(self, run: Callable[[_Connection], _T]) -> _T:
        return self._attempts(_Failover(self, getattr(self._local, "call", None)), run)

    def _attempts(self, plan: _Plan[_Node], run: Callable[[_Connection], _T]) -> _T:
        """Run ``plan`` (:class:`_shared._Plan`): connect to and ask each node it names until
        one answers, backing off the nodes that fail."""
        node = plan.next()
        while node is not None:
            conn: Optional[_Connection] = None
            try:
                conn = self._connection(node)
                result = run(conn)
            except ServerError as e:
                action = plan.refused(node, conn, e)
                if action == _RAISE:
                    raise
                if action == _BACK_OFF:
                    # A 3xx that keeps the connection open (300, 301, an unknown 3xx): back
                    # the node off but keep the connection for when it is tried again.
                    self._mark_down(node, conn, e, keep_connection=not e.closes_connection)
                    plan.failed(node, e)
            except plan.fails_over as e:
                if self._closed:
                    raise ClientClosedError("the client is closed") from e
                if plan.passes(e):
                    raise
                self._mark_down(node, conn, e)
                plan.failed(node, e)
            else:
                plan.answered(node)
                return result
            node = plan.next()
        raise plan.error()

    def _connection(self, node: _Node) -> _Connection:
        conn = node.conn
        if conn is not None and conn.alive:
            return conn
        with node.lock:
            conn = node.conn
            if conn is not None and conn.alive:
                return conn
            self._connect_check(node)  # closed, or another thread's connect just failed
            started = time.monotonic()
            try:
                if node.placeholder:
                    # expand=True: the name resolved to nothing. Down until it resolves
                    # (this failure makes the client resolve it again).
                    raise UnavailableError("the name resolves to no address", node.addr)
                conn = _Connection(
                    node.addr, self._connect_timeout, self._timeout, self._stats, self._tls_for(node)
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
        if failed is not None:
            self._connect_failed(node, failed, started)
            raise failed
        assert conn is not None
        self._connected(node, conn, started)
        return conn

    def _check_layout(self, conn: _Connection) -> None:
        layout = Layout.from_hello(conn.hello)
        with self._layout_lock:
            self._layout = _cluster_layout(self._layout, layout, conn.node)

    def _mark_down(
        self,
        node: _Node,
        conn: Optional[_Connection],
        err: BaseException,
        keep_connection: bool = False,
    ) -> None:
        """Back a node off (:meth:`_Core._back_off`); with ``expand=True`` resolve the names
        again."""
        self._back_off(node, conn, err, keep_connection)
        if self._expand:
            self._node_failed(node)

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
            self._request_event(info, count, started, outcome)

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
            if now - self._resolved_at >= 1.0:
                self._resolved_at = now
                new = self._resolve(self._nodes)
            else:
                new = list(self._nodes)
            removed = self._replace_nodes(new, node)
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
