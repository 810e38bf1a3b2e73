"""The rules ``Client`` (client.py) and ``AsyncClient`` (aio.py) share, none of which does
I/O: node parsing, the checks of settings and of every answer, what a refusal means for
failover, back-off, batch splits, the walk through the nodes of one call (:class:`_Failover`),
the events' fields, the prefetch of dense sequences and the expanded node list of
``expand=True``. Each client keeps only its I/O (blocking sockets and threads, or asyncio):
:class:`_Core` holds the methods both clients inherit, which never block and never await.

Private: the names are the clients' internals, and client.py re-exports the ones it always had.
"""

import collections
import logging
import ssl
import threading
import time
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Generic,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from . import observe as _observe
from . import protocol
from . import status as _status
from . import tls as _tls
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

#: The slot kind of a GET_IDS_WITH answered with MASKED_IDS (client-internal: the opcode with a
#: flag above the byte).
_MASKED_KIND = 0x100 | protocol.OP_GET_IDS_WITH
_MAX_IDS_PER_CALL = 1 << 24  # a guard against accidental huge requests (16 Mi IDs)
#: Sequence buffers kept at most (a namespace holds at most 1024 sequences).
MAX_PREFETCHED_SEQUENCES = 1024


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


# -- the state and the rules both clients' objects share ---------------------------------------


class _NoLock:
    """A lock that is no lock: ``AsyncClient``'s nodes, layout and sequence table are only
    touched on its event loop, between awaits, so the shared code's ``with ...lock:`` needs
    nothing there (``Client``'s are ``threading.Lock``)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NO_LOCK = _NoLock()


class _Conn(Protocol):
    """What the shared rules use of a connection (client.py's and aio.py's ``_Connection``)."""

    node: str
    address: str
    hello: HelloOk

    @property
    def alive(self) -> bool: ...

    def fail(self, error: BaseException) -> None: ...


class _Lock(Protocol):
    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


class _NodeBase:
    """One node of a client: its address (and with ``expand=True`` the name TLS verifies,
    the configured entry it came from, whether it stands for a name that resolved to nothing
    and whether its address is gone from its name's), its back-off state and its connection.
    ``lock`` guards ``conn`` and the back-off state (``NO_LOCK`` on an event loop)."""

    conn: Optional[_Conn]

    def __init__(
        self,
        addr: str,
        tls_name: Optional[str],
        entry: int,
        placeholder: bool,
        lock: _Lock,
    ):
        _parse_node(addr)
        self.addr = addr
        self.tls_name = tls_name
        self.entry = entry
        self.placeholder = placeholder
        self.gone = False  # no longer among its name's addresses: dropped when it fails
        self.lock = lock
        self.failures = 0
        self.down_until = 0.0
        self.last_error: Optional[BaseException] = None


class _SeqBase:
    """What a client knows of one named sequence with ``sequence_prefetch`` on: its mode as
    the last VALUES said (``None`` before the first), and, for a dense one, the values kept
    for later calls. Each client adds the ``lock`` that serialises taking from and refilling
    the buffer (values leave it in increasing order, each to exactly one call)."""

    def __init__(self) -> None:
        self.mode: Optional[int] = None
        self.buffer: Deque[int] = collections.deque()

    def answered(self, answer: Values) -> None:
        """A VALUES answer for the name: its mode is the sequence's now."""
        self.mode = answer.mode

    def forget(self) -> None:
        """After UNKNOWN_SEQUENCE: no mode, no values."""
        self.mode = None
        self.buffer.clear()

    def take(self, n: int, stats: "_Stats") -> Optional[List[int]]:
        """``n`` values from the buffer when it holds them (counted as served), else ``None``."""
        if len(self.buffer) < n:
            return None
        out = [self.buffer.popleft() for _ in range(n)]
        stats.add("value_prefetch_served", n)
        return out

    def exact(self, answer: Values) -> List[int]:
        """A call that asked for exactly its ``n`` (the mode unknown, or strict): nothing kept,
        and a strict answer empties what a once dense sequence kept."""
        if answer.mode == protocol.MODE_STRICT:
            self.buffer.clear()
        return answer.values

    def refilled(self, answer: Values, n: int, stats: "_Stats") -> List[int]:
        """A dense sequence's call that asked for more than ``n``: its ``n`` values from the
        buffer and ``answer``, the rest kept (:func:`_take_values`). A strict answer (the
        sequence dropped and created again) answers this call only."""
        if answer.mode != protocol.MODE_DENSE:
            self.buffer.clear()
            return answer.values[:n]
        out, kept = _take_values(self.buffer, answer.values, n)
        if kept:
            stats.add("value_prefetch_served", kept)
        return out


def _ask_exactly(err: ServerError, want: int, n: int) -> bool:
    """Ask again for exactly ``n`` after asking for ``want``: fewer than ``want`` values may
    be left below the sequence's maximum, but ``n`` may (clients/vectors/SEQUENCES.md)."""
    return err.status == _status.SEQUENCE_USED_UP and want != n


def _count(n: int, limit: int = _MAX_IDS_PER_CALL, unit: str = "") -> int:
    """``n`` checked before anything is sent: an int in 1 ..= ``limit`` (a count of 0 is
    refused like a negative one, clients/vectors/CONFIG.md "Count 0")."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    if not 1 <= n <= limit:
        raise ValueError(f"n must be 1 to {limit}{unit}, not {n}")
    return n


def _values_call(n: int, name: str, max_batch: Optional[int]) -> bytes:
    """A named-sequence call checked before anything is sent: ``n`` (at most the node's
    ``max_batch`` once known) and the name, as the frame's name bytes."""
    _count(n, protocol.MAX_VALUES_PER_CALL)
    raw = protocol.check_sequence_name(name)
    if max_batch is not None and n > max_batch:
        raise ValueError(f"n must be 1 to {max_batch} (the node's max_batch), not {n}")
    return raw


def _get_values_frame(raw: bytes, n: int, want: int, conn: _Conn) -> Tuple[int, bytes]:
    """The GET_VALUES request of a call for ``n`` values (up to ``want``) on ``conn``: its
    count and frame, or :class:`SequencesUnsupportedError`."""
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
    return count, frame


def _with_request(conn: _Conn, n: int, frame: bytes, kind: int) -> Tuple[int, Tuple[int, bytes]]:
    """The GET_IDS_WITH request of a call with options: one frame, so at most the node's
    ``max_batch``; the node must speak version 5."""
    if conn.hello.version < protocol.IDS_WITH_VERSION:
        raise OptionsUnsupportedError(conn.hello.version, conn.node)
    if n > conn.hello.max_batch:
        raise ValueError(
            f"a call with options is one request: at most the node's max_batch "
            f"({conn.hello.max_batch}) IDs, not {n}"
        )
    return kind, (n, frame)


def _uuid_requests(conn: _Conn, n: int) -> List[Tuple[int, int]]:
    """The GET_UUIDS frames of a call for ``n`` UUIDs (version 4, else
    :class:`UuidsUnsupportedError`)."""
    if conn.hello.version < protocol.UUIDS_VERSION:
        raise UuidsUnsupportedError(conn.hello.version, conn.node)
    return [(protocol.OP_GET_UUIDS, c) for c in _split(n, conn.hello.max_batch)]


def _id_requests(conn: _Conn, n: int) -> List[Tuple[int, int]]:
    """The GET_IDS (GET_RANGES from version 2) frames of a call for ``n`` IDs."""
    return [(_ids_op(conn.hello), c) for c in _split(n, conn.hello.max_batch)]


class _SameIds(Protocol):
    def same_ids(self, other: Any) -> bool: ...


_L = TypeVar("_L", bound=_SameIds)


def _cluster_layout(current: Optional[_L], new: _L, node: str) -> _L:
    """The cluster's layout after a node announced ``new``: the first one, or a
    :class:`ProtocolError` for a node whose IDs would differ."""
    if current is None:
        return new
    if not current.same_ids(new):
        raise ProtocolError(f"node's ID layout {new} differs from the cluster's {current}", node=node)
    return current


_NB = TypeVar("_NB", bound=_NodeBase)
_SB = TypeVar("_SB", bound=_SeqBase)


class _Core(Generic[_NB, _SB]):
    """The methods ``Client`` and ``AsyncClient`` share: bookkeeping and events, never I/O.
    The attributes are each client's (set in its constructor)."""

    _obs: _observe.Observer
    _stats: _Stats
    _closed: bool
    _expand: bool
    _nodes: List[_NB]
    _preferred: int
    _backoff_min: float
    _backoff_max: float
    _tls: Optional[Tuple[ssl.SSLContext, Optional[str]]]
    _seqs: "collections.OrderedDict[str, _SB]"
    _seqs_lock: _Lock

    def _new_seq(self) -> _SB:
        raise NotImplementedError

    # -- nodes ------------------------------------------------------------------------------

    def _tls_for(self, node: _NodeBase) -> Optional[Tuple[ssl.SSLContext, Optional[str]]]:
        """The TLS settings for a connection to ``node``: with ``expand=True`` the name given
        is verified, not the address."""
        tls = self._tls
        if tls is not None and tls[1] is None and node.tls_name is not None:
            tls = (tls[0], node.tls_name)
        return tls

    def _connect_check(self, node: _NodeBase) -> None:
        """Before a connect, under the node's connect lock: the client still open, and the
        node not found down meanwhile (another caller's connect just failed)."""
        if self._closed:
            raise ClientClosedError("the client is closed")
        if node.down_until > time.monotonic() and node.last_error is not None:
            raise UnavailableError(f"node is down: {node.last_error}", node.addr)

    def _connected(self, node: _NodeBase, conn: _Conn, started: float) -> None:
        self._obs.emit(
            _observe.CONNECT,
            {
                "node": node.addr,
                "address": conn.address,
                "version": conn.hello.version,
                "duration": time.monotonic() - started,
            },
        )

    def _connect_failed(self, node: _NodeBase, err: BaseException, started: float) -> None:
        self._obs.emit(
            _observe.CONNECT_FAILED,
            {"node": node.addr, "error": _reason(err), "duration": time.monotonic() - started},
        )

    def _drop(self, node: _NodeBase, conn: Optional[_Conn]) -> None:
        with node.lock:
            if conn is not None and node.conn is conn:
                node.conn = None
        if conn is not None:
            conn.fail(UnavailableError("connection dropped", node.addr))

    def _back_off(
        self,
        node: _NodeBase,
        conn: Optional[_Conn],
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

    def _answered(self, node: _NodeBase, info: Optional[_CallInfo]) -> None:
        """``node`` answered a call: the call's node, and the node up again if it was down."""
        if info is not None:
            info.node = node.addr
        if node.failures:
            with node.lock:
                was_down, node.failures = node.failures, 0
            if was_down:
                self._obs.emit(_observe.NODE_UP, {"node": node.addr, "reason": "answered again"})

    def _refusal_action(
        self,
        node: _NodeBase,
        conn: Optional[_Conn],
        err: ServerError,
        info: Optional[_CallInfo],
        may_reconnect: bool,
    ) -> str:
        """A node refused a call: the ``refused`` event and :func:`_on_refusal`'s action, the
        connection dropped when the call reconnects or raises a status that closed it; the
        caller backs the node off on ``_BACK_OFF``."""
        if info is not None:
            info.node = node.addr
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
        action = _on_refusal(err, may_reconnect)
        if action == _RECONNECT or (action == _RAISE and err.closes_connection):
            # 305: the node took another worker range and closed this connection. The node
            # is fine: reconnect at once (the new HELLO_OK announces the new range).
            self._drop(node, conn)
        return action

    def _request_event(self, info: _CallInfo, count: int, started: float, outcome: str) -> None:
        self._obs.emit(
            _observe.REQUEST,
            {
                "op": info.op,
                "count": count,
                "node": info.node,
                "duration": time.monotonic() - started,
                "outcome": outcome,
            },
        )

    def _node_states(self) -> List[Dict[str, Any]]:
        now = time.monotonic()
        out: List[Dict[str, Any]] = []
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

    def _replace_nodes(self, new: List[_NB], failed: Optional[_NB] = None) -> List[_NB]:
        """``expand=True``: make ``new`` the node list (the preferred node kept); after
        ``failed`` failed, without the gone nodes that failed or are idle. Returns the nodes
        removed."""
        current = self._nodes
        if failed is not None:
            new = _without_gone(new, failed, lambda n: n.conn is None)
        removed = [n for n in current if n not in new]
        if [n.addr for n in new] != [n.addr for n in current]:
            preferred = current[self._preferred % len(current)]
            self._nodes = new
            self._preferred = new.index(preferred) if preferred in new else 0
            _observe.LOGGER.log(
                logging.INFO,
                "nodes now %s (names resolved%s)",
                ", ".join(n.addr for n in new),
                "" if failed is None else " again",
            )
        else:
            self._nodes = new
        return removed

    # -- named sequences ----------------------------------------------------------------------

    def _seq_state(self, key: str) -> _SB:
        """The name's state, made if new; the least recently used beyond 1024 is forgotten
        (its buffered values are a gap)."""
        with self._seqs_lock:
            state = self._seqs.get(key)
            if state is None:
                state = self._seqs[key] = self._new_seq()
                while len(self._seqs) > MAX_PREFETCHED_SEQUENCES:
                    self._seqs.popitem(last=False)
            else:
                self._seqs.move_to_end(key)
            return state

    def _seq_failed(self, key: str, state: _SB, err: ServerError) -> None:
        """After UNKNOWN_SEQUENCE: empty the name's buffer and forget its mode."""
        if err.status != _status.UNKNOWN_SEQUENCE:
            return
        with self._seqs_lock:
            if self._seqs.get(key) is state:
                del self._seqs[key]
        state.forget()


class _Plan(Generic[_NB]):
    """Which node a call tries next and what a node's failure means for the call, without
    I/O. Each client runs a plan the same way (its ``_attempts``): ``node = plan.next()``
    until ``None``, connecting and asking ``node``; then :meth:`refused` (the client raises
    on ``_RAISE``, backs the node off on ``_BACK_OFF`` and calls :meth:`failed`), or, for an
    error of :attr:`fails_over` (raised as it is when :meth:`passes`), a back-off and
    :meth:`failed`; or :meth:`answered`. At the end ``raise plan.error()``."""

    #: The errors of connecting or asking that back the node off.
    fails_over: Tuple[Type[IdgenError], ...] = (UnavailableError, ProtocolError)

    def __init__(self, core: "_Core[_NB, Any]", info: Optional[_CallInfo]):
        if core._closed:
            raise ClientClosedError("the client is closed")
        self._core = core
        self.info = info

    def next(self) -> Optional[_NB]:
        raise NotImplementedError

    def refused(self, node: _NB, conn: Optional[_Conn], err: ServerError) -> str:
        raise NotImplementedError

    def passes(self, err: BaseException) -> bool:
        """An error of :attr:`fails_over` the call raises as it is, without a back-off."""
        return False

    def failed(self, node: _NB, err: BaseException) -> None:
        raise NotImplementedError

    def answered(self, node: _NB) -> None:
        raise NotImplementedError

    def error(self) -> BaseException:
        raise NotImplementedError


class _KeyRoute(_Plan[_NB]):
    """A call with an idempotency key: on the key's node only (another node would issue new
    IDs), reconnecting once after a 305; a node failure raises
    :class:`KeyNodeUnavailableError`, and a ``ProtocolError`` is raised as it is."""

    fails_over = (UnavailableError,)

    def __init__(self, core: "_Core[_NB, Any]", info: Optional[_CallInfo], key: str, node: _NB):
        super().__init__(core, info)
        self._key = key
        self._node = node
        self._attempts = 0

    def next(self) -> Optional[_NB]:
        self._attempts += 1  # the first, or again after a 305 (once)
        return self._node if self._attempts <= 2 else None

    def refused(self, node: _NB, conn: Optional[_Conn], err: ServerError) -> str:
        return self._core._refusal_action(
            node, conn, err, self.info, may_reconnect=self._attempts == 1
        )

    def passes(self, err: BaseException) -> bool:
        return isinstance(err, KeyNodeUnavailableError)

    def failed(self, node: _NB, err: BaseException) -> None:
        """Backed off as failover would, but not retried elsewhere with this key: say so."""
        raise KeyNodeUnavailableError(self._key, node.addr, err) from err

    def answered(self, node: _NB) -> None:
        if self.info is not None:
            self.info.node = node.addr

    def error(self) -> BaseException:
        return UnavailableError("the key's node changed its range twice", self._node.addr)


class _Failover(_Plan[_NB]):
    """A call with failover: from the preferred node on, each node once (skipping those
    backing off), a node that changed its range (305) once more at once, the nodes a
    re-resolution added (``expand=True``) after them; the ``failovers`` counter and the
    ``failover`` event; the preferred node after an answer; the error when no node
    answered."""

    def __init__(self, core: "_Core[_NB, Any]", info: Optional[_CallInfo]):
        super().__init__(core, info)
        self._nodes = nodes = core._nodes  # this call's list (expand=True may replace it)
        start = core._preferred % len(nodes)
        self._order = collections.deque((start + k) % len(nodes) for k in range(len(nodes)))
        self._index = -1
        self._tried: List[BaseException] = []
        self._reconnected: "set[int]" = set()  # nodes already reconnected to after a 305
        self._moving: Optional[Tuple[str, BaseException]] = None  # the node left, and why

    def next(self) -> Optional[_NB]:
        """The next node to try, or ``None`` when every one was tried."""
        core, order = self._core, self._order
        while order or (core._expand and core._nodes is not self._nodes):
            if not order:
                # expand=True: the names were resolved again meanwhile; their new addresses
                # are tried too.
                new = [n for n in core._nodes if n not in self._nodes]
                if not new:
                    break
                order.extend(range(len(self._nodes), len(self._nodes) + len(new)))
                self._nodes = self._nodes + new
            index = order.popleft()
            node = self._nodes[index]
            if node.down_until > time.monotonic():
                continue
            if self._tried and index not in self._reconnected:
                core._stats.add("failovers")
            moving = self._moving
            if moving is not None and moving[0] != node.addr:
                core._obs.emit(
                    _observe.FAILOVER,
                    {"from_node": moving[0], "to_node": node.addr, "reason": _reason(moving[1])},
                )
                self._moving = None
            self._index = index
            return node
        return None

    def refused(self, node: _NB, conn: Optional[_Conn], err: ServerError) -> str:
        """The node refused the call (:meth:`_Core._refusal_action`): on ``_RECONNECT`` the
        same node comes next (once a call)."""
        index = self._index
        action = self._core._refusal_action(
            node, conn, err, self.info, may_reconnect=index not in self._reconnected
        )
        if action == _RECONNECT:
            self._reconnected.add(index)
            self._order.appendleft(index)
        return action

    def failed(self, node: _NB, err: BaseException) -> None:
        """The node failed the call: the call moves on (the client backs the node off)."""
        self._tried.append(err)
        self._moving = (node.addr, err)

    def answered(self, node: _NB) -> None:
        """The node answered: it is the preferred node now."""
        core = self._core
        core._answered(node, self.info)
        current = core._nodes
        if self._nodes is current:
            core._preferred = self._index
        else:
            core._preferred = current.index(node) if node in current else 0

    def error(self) -> BaseException:
        """What the call raises when no node answered: the one node's error when it tried one,
        else :class:`NoNodeAvailable` with every node's last error."""
        if len(self._tried) == 1:
            return _fresh(self._tried[0])
        now = time.monotonic()
        errors = {n.addr: n.last_error for n in self._nodes}
        retry_in = {n.addr: n.down_until - now for n in self._nodes if n.down_until > now}
        err = NoNodeAvailable(errors, retry_in)
        err.__cause__ = self._tried[-1] if self._tried else None  # raise ... from
        err.__suppress_context__ = True
        return err


# -- connections: what the blocking and the asyncio connection share ---------------------------


def _encode_request(op: int, arg: Union[int, Tuple[int, bytes]]) -> Tuple[int, bytes]:
    """A request for a connection's ``submit``, ``(opcode, count or token)`` or, for
    GET_VALUES and GET_IDS_WITH, ``(opcode, (count, the encoded frame))``: what its answer
    must hold (the count, or the PING token) and the frame to send."""
    if op in (protocol.OP_GET_VALUES, protocol.OP_GET_IDS_WITH, _MASKED_KIND) and isinstance(
        arg, tuple
    ):
        return arg
    if op == protocol.OP_GET_IDS and isinstance(arg, int):
        return arg, protocol.encode_get_ids(arg)
    if op == protocol.OP_GET_RANGES and isinstance(arg, int):
        return arg, protocol.encode_get_ranges(arg)
    if op == protocol.OP_GET_UUIDS and isinstance(arg, int):
        return arg, protocol.encode_get_uuids(arg)
    if op == protocol.OP_PING and isinstance(arg, int):
        return arg, protocol.encode_ping(arg)
    raise TypeError(f"not a request: opcode {op} with {type(arg).__name__}")


def _hello_from(buf: bytearray, node: str) -> Optional[HelloOk]:
    """The node's HELLO_OK once ``buf`` holds a whole frame (taken out of it), else ``None``;
    an ERROR frame, another frame or a version not offered raises."""
    decoded = protocol.decode_response(buf, protocol.DEFAULT_MAX_RESPONSE_FRAME)
    if decoded is None:
        return None
    frame, used = decoded
    del buf[:used]
    if isinstance(frame, ErrorFrame):
        raise ServerError(frame.status, frame.name, frame.message, node)
    if not isinstance(frame, HelloOk):
        raise ProtocolError(f"expected HELLO_OK, got {type(frame).__name__}", node=node)
    if not protocol.MIN_PROTOCOL_VERSION <= frame.version <= protocol.PROTOCOL_VERSION:
        raise ProtocolError(
            f"server picked version {frame.version}, only versions "
            f"{protocol.MIN_PROTOCOL_VERSION}..={protocol.PROTOCOL_VERSION} were offered",
            node=node,
        )
    return frame


def _handshake_error(err: Exception, node: str) -> BaseException:
    """What a failed HELLO exchange raises: a ``ProtocolError`` as it is (naming the node),
    a TLS error as :class:`TLSError` (TLS 1.3: a node that refuses the client certificate
    says so after the handshake, which the client then reads here), another socket error as
    :class:`UnavailableError`."""
    if isinstance(err, ProtocolError):
        err.node = node
        return err
    if isinstance(err, ssl.SSLError):
        return _tls.tls_error(err, node)
    return UnavailableError(f"handshake failed: {err}", node)


class _SlotLike(Protocol):
    kind: int
    expect: int

    def set(self, result: object) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class _ConnBase:
    """What both clients' connections share: the reader's side, which does no I/O of its own
    (answers decoded from what was read, each handed to the slot at the head of the FIFO,
    checked; the errors that end the reader) and a forked child's forgetting. ``_lock``
    guards ``_pending`` and ``_error`` (``NO_LOCK`` on an event loop)."""

    node: str
    max_frame: int
    _lock: _Lock
    _pending: Deque[Any]
    _error: Optional[BaseException]
    _sock: Any
    _last_id: int
    _last_uuid: int

    def fail(self, error: BaseException) -> None:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return self._error is None

    def _fail_slots(self, error: BaseException) -> bool:
        """The first failure of the connection: ``error`` for every waiting slot and every
        later submit. False when it had failed already (nothing more to do)."""
        with self._lock:
            if self._error is not None:
                return False
            self._error = error
            pending, self._pending = self._pending, collections.deque()
        for slot in pending:
            slot.fail(error)
        return True

    def _forget_socket(self) -> None:
        """In a forked child: nothing sent, no ``shutdown()`` (that would cut the parent's
        connection too); only this process's copy of the descriptor is closed."""
        self._pending = collections.deque()
        self._error = ClientClosedError(f"{self.node}: connection inherited across fork()")
        try:
            self._sock.close()
        except OSError:
            pass

    def _dispatch_all(self, buf: bytearray) -> None:
        """Hand out every whole answer ``buf`` holds (taken out of it)."""
        while True:
            decoded = protocol.decode_response(buf, self.max_frame)
            if decoded is None:
                return
            frame, used = decoded
            del buf[:used]
            self._dispatch(frame)

    def _dispatch(self, frame: protocol.Response) -> None:
        """The answer for the slot at the head of the FIFO (the node answers in order)."""
        with self._lock:
            slot: Optional[_SlotLike] = self._pending.popleft() if self._pending else None
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

    def _server_closed(self, idle: bool) -> None:
        """The node closed the connection: an idle one (its idle timeout) is no node failure,
        the next call simply reconnects."""
        if idle:
            self.fail(UnavailableError("connection closed by the server (idle)", self.node))
        else:
            self.fail(
                UnavailableError("connection closed by the server with requests unanswered", self.node)
            )

    def _reader_failed(self, err: Exception) -> None:
        """The reader stopped on ``err``: the connection fails with what it means (any other
        exception is a bug, which never leaves callers waiting)."""
        if isinstance(err, ProtocolError):
            err.node = self.node
            self.fail(err)
        elif isinstance(err, ssl.SSLError):
            self.fail(_tls.tls_error(err, self.node))
        elif isinstance(err, OSError):
            self.fail(UnavailableError(f"receive failed: {err}", self.node))
        else:
            self.fail(ProtocolError(f"reader failed: {err!r}", node=self.node))


class _Forgets(Protocol):
    def _forget_parent(self) -> None: ...


def _forget_in_child(clients: Sequence[_Forgets]) -> None:
    """The at-fork hook's work in a child: every live client forgets its parent's state."""
    for client in clients:
        try:
            client._forget_parent()
        except Exception:  # pragma: no cover - the pid check on its next call retries
            pass
