"""The asyncio client: :class:`AsyncClient`, the threaded :class:`~idgen_client.Client`'s
semantics on an event loop.

Usage::

    from idgen_client.aio import AsyncClient

    async with AsyncClient(["10.0.0.1:7420", "10.0.0.2:7420"], prefetch=1000) as client:
        one = await client.next_id()
        many = await client.next_ids(10_000)
        order_no = await client.next_value("orders")

Design
======

Pipelining: **one connection per node, a FIFO of waiting futures and one reader task.** A
call builds its request frames (a batch above the node's ``max_batch`` is split), appends one
slot (an ``asyncio.Future``) per frame to the connection's FIFO and writes the frames, with
no ``await`` in between, so the FIFO is in wire order; then it awaits the transport's
``drain()`` (bounded by ``timeout``) and its slots' futures. The reader task decodes answers
as they arrive and resolves the slot at the head of the FIFO (the node answers in request
order). So any number of tasks have requests in flight on one connection at once. A task
cancelled while waiting leaves its slot in the FIFO; the answer is matched by position and
dropped (a gap, never a repeat). No answer within ``timeout`` fails the connection: the node
is treated as down and every request in flight on it fails over.

Everything else is :class:`~idgen_client.Client`'s (client.py's module docstring): the same
HELLO (versions 1..=5), GET_RANGES from version 2, the same checks of every answer, the same
failover, back-off and retry rules, the same named-sequence prefetch, UUIDs, ``after`` and
idempotency keys (a keyed call goes to its node only), masked IDs, and the same errors. The
layout, the error classes, :class:`~idgen_client.client.Layout`, the TLS settings and the
node parsing are client.py's own.

Connecting follows clients/vectors/CONNECT.md: every address the host resolves to is tried
in the resolver's order, each attempt given ``time left / addresses left``, and the whole
setup (addresses, TLS, HELLO) is bounded by ``connect_timeout``. TLS runs through asyncio's
own TLS (``asyncio.open_connection(sock=..., ssl=context, server_hostname=...)``): the name
verified and sent as SNI is the host given (or ``server_hostname``), never the address.

Configuration and observability are ``Client``'s too (clients/vectors/CONFIG.md):
:meth:`AsyncClient.from_url`, :meth:`AsyncClient.from_env` and
:meth:`AsyncClient.from_settings` build from config.py's :class:`~idgen_client.Settings`
(a setting given both in code and in the URL or environment is a ``ConfigError``);
``tls=True`` verifies against the system's roots; ``expand=True`` makes each address a name
resolves to a node, resolved with ``loop.getaddrinfo`` (never blocking the loop) at the
first call and again when a node fails, at most once a second, TLS verifying the name given;
``hooks=`` and the ``idgen_client`` logger get observe.py's events with ``Client``'s fields
and levels, a hook being called on the event loop, synchronously. The rules that do no I/O
(answer checks, the walk through the nodes of a call and what a refusal means for it, batch
splits, back-off, the events' fields, the prefetch of dense sequences, the expanded node
list) are _shared.py's, which both clients import: this module keeps only the asyncio I/O.

Event loops: a client belongs to the event loop that first uses it (its connections, locks
and tasks live there). Using it from another loop while that one is still open raises
``RuntimeError``; once that loop is closed (``asyncio.run`` returned), the next use starts
afresh on the new loop.

Fork: a child never uses its parent's connections, pool or sequence buffers. An
``os.register_at_fork`` hook (and a pid check at every public call) makes the child forget
them: it closes only its own copy of each socket's descriptor, never sends on it, never shuts
it down, and never touches the parent's event loop. The child's next call (on the child's
own event loop: run a new one there, e.g. ``asyncio.run``) connects afresh.
"""

import asyncio
import collections
import contextvars
import itertools
import os
import socket
import ssl
import time
import uuid
import weakref
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    cast,
)

from . import forms, protocol
from . import observe as _observe
from . import tls as _tls
from ._shared import (
    _BACK_OFF,
    _MASKED_KIND,
    _RAISE,
    NO_LOCK,
    _addresses,
    _ask_exactly,
    _CallInfo,
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
    _Failover,
    _KeyRoute,
    _Plan,
    _format_addr,
    _fresh,
    _get_values_frame,
    _id_requests,
    _NodeBase,
    _outcome,
    _parse_node,
    _pool_guard,
    _SeqBase,
    _Stats,
    _uuid_requests,
    _values_call,
    _with_frame,
    _with_request,
)
from .client import (
    IdParts,
    Layout,
    MaskedIdList,
    NodeState,
    UuidParts,
    _tls_settings,
    key_node,
)
from .config import Settings, parse_url
from .errors import (
    ClientClosedError,
    IdgenError,
    ProtocolError,
    ServerError,
    UnavailableError,
)
from .protocol import HelloOk, MaskedIds, Values

__all__ = ["AsyncClient"]

_T = TypeVar("_T")
_RECV_CHUNK = 256 * 1024

# A request for :meth:`_Connection.submit`, as in client.py: (opcode, count or token), or
# (opcode, (count, the encoded frame)) for GET_VALUES and GET_IDS_WITH.
_Request = Tuple[int, Union[int, Tuple[int, bytes]]]
_TLS = Optional[Tuple[ssl.SSLContext, Optional[str]]]


def _retrieve(fut: "asyncio.Future[object]") -> None:
    """Mark a slot's exception as retrieved: a slot whose caller was cancelled may fail with
    no one awaiting it, which is not worth a "never retrieved" log line."""
    if not fut.cancelled():
        fut.exception()


class _Slot:
    """One request frame waiting for its answer: a future the reader task resolves."""

    __slots__ = ("future", "kind", "expect")

    def __init__(self, loop: asyncio.AbstractEventLoop, kind: int, expect: int):
        self.future: "asyncio.Future[object]" = loop.create_future()
        self.future.add_done_callback(_retrieve)
        self.kind = kind
        self.expect = expect

    def set(self, result: object) -> None:
        if not self.future.done():
            self.future.set_result(result)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(_fresh(error))


async def _connect_any(
    node: str, host: str, port: int, deadline: float, connect_timeout: float
) -> socket.socket:
    """A connected non-blocking TCP socket to the first of ``host``'s addresses that accepts,
    tried in getaddrinfo's order, each attempt given an even share of the time left
    (CONNECT.md; client.py's ``_connect_any`` on the event loop)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM),
            max(deadline - time.monotonic(), 0.001),
        )
    except asyncio.TimeoutError:
        raise UnavailableError(f"connect timed out after {connect_timeout}s (resolving)", node) from None
    except OSError as e:
        raise UnavailableError(f"cannot connect: {e}", node) from e
    last: Optional[BaseException] = None
    for i, (family, kind, proto, _, addr) in enumerate(infos):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), left / (len(infos) - i))
            return sock
        except asyncio.TimeoutError as e:
            sock.close()
            last = e
        except OSError as e:
            sock.close()
            last = e
        except BaseException:  # cancelled: never leak the socket
            sock.close()
            raise
    tried = f" ({len(infos)} addresses tried)" if len(infos) > 1 else ""
    if last is None or isinstance(last, asyncio.TimeoutError):
        raise UnavailableError(f"connect timed out after {connect_timeout}s{tried}", node)
    raise UnavailableError(f"cannot connect: {last}{tried}", node) from last


class _Connection(_ConnBase):
    """One TCP (or TLS) connection to one node on one event loop: FIFO of slots, reader task.
    Made by :meth:`open`."""

    def __init__(
        self,
        node: str,
        sock: socket.socket,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        hello: HelloOk,
        buf: bytearray,
        timeout: float,
        stats: _Stats,
        address: str,
    ):
        self.node = node
        #: The address that accepted the connection (``ip:port``, IPv6 in brackets).
        self.address = address
        self.hello = hello
        self.loop = asyncio.get_running_loop()
        self._sock = sock  # ours: closed alone (no shutdown, no loop) in a forked child
        self._reader = reader
        self._writer = writer
        self._timeout = timeout
        self._stats = stats
        self._lock = NO_LOCK  # only the event loop touches _pending and _error
        self._pending: Deque[_Slot] = collections.deque()
        self._error: Optional[BaseException] = None
        self._lost = False  # a submit found the transport closing
        self._drain_lock = asyncio.Lock()  # concurrent drain() is not safe on every Python
        self._last_id = -1
        self._last_uuid = -1
        self.max_frame = protocol.response_frame_limit(hello.max_batch, hello.version)
        tls = writer.get_extra_info("ssl_object")
        self.tls_version: Optional[str] = tls.version() if tls is not None else None
        self.alpn: Optional[str] = tls.selected_alpn_protocol() if tls is not None else None
        self._task = self.loop.create_task(self._read_loop(buf))

    @classmethod
    async def open(
        cls, node: str, connect_timeout: float, timeout: float, stats: _Stats, tls: _TLS
    ) -> "_Connection":
        host, port = _parse_node(node)
        deadline = time.monotonic() + connect_timeout
        sock = await _connect_any(node, host, port, deadline, connect_timeout)
        writer: Optional[asyncio.StreamWriter] = None
        try:
            try:
                peer = sock.getpeername()
                address = _format_addr(str(peer[0]), int(peer[1]))
            except OSError:
                address = node
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            left = max(deadline - time.monotonic(), 0.001)
            try:
                if tls is not None:
                    ctx, name = tls
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(
                            sock=sock,
                            ssl=ctx,
                            server_hostname=name or host,
                            ssl_handshake_timeout=left,
                        ),
                        left,
                    )
                else:
                    reader, writer = await asyncio.open_connection(sock=sock)
            except asyncio.TimeoutError:
                raise UnavailableError("no TLS handshake within connect_timeout", node) from None
            except ssl.SSLError as e:
                raise _tls.tls_error(e, node) from e
            except ValueError as e:  # e.g. a server_hostname that is not a host name
                raise UnavailableError(f"TLS: {e}", node) from e
            except OSError as e:
                raise UnavailableError(f"TLS handshake failed: {e}", node) from e
            assert writer is not None
            hello, buf = await cls._handshake(node, reader, writer, deadline)
            stats.add("connects")
            return cls(node, sock, reader, writer, hello, buf, timeout, stats, address)
        except BaseException:
            if writer is not None:
                writer.transport.abort()
            sock.close()
            raise

    @staticmethod
    async def _handshake(
        node: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float
    ) -> Tuple[HelloOk, bytearray]:
        try:
            writer.write(protocol.encode_hello())
            await asyncio.wait_for(writer.drain(), max(deadline - time.monotonic(), 0.001))
            buf = bytearray()
            hello = _hello_from(buf, node)
            while hello is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise asyncio.TimeoutError()
                data = await asyncio.wait_for(reader.read(_RECV_CHUNK), remaining)
                if not data:
                    raise UnavailableError("connection closed during the handshake", node)
                buf += data
                hello = _hello_from(buf, node)
        except asyncio.TimeoutError:
            raise UnavailableError("no HELLO_OK within connect_timeout", node) from None
        except (ProtocolError, OSError) as e:
            err = _handshake_error(e, node)
            if err is e:
                raise
            raise err from e
        return hello, buf

    # -- state ----------------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        """Break the connection: every waiting slot fails with ``error``, later submits fail
        at once, the transport is aborted (which ends the reader task)."""
        if not self._fail_slots(error):
            return
        if not self.loop.is_closed():
            self._writer.transport.abort()
        else:
            self._sock.close()

    async def close(self) -> None:
        self.fail(ClientClosedError(f"{self.node}: connection closed by the client"))
        if self._task is not asyncio.current_task() and not self.loop.is_closed():
            await asyncio.wait({self._task}, timeout=1.0)

    def forget(self) -> None:
        """In a forked child (or after the client's loop closed): stop using this connection
        without its event loop (:meth:`_ConnBase._forget_socket`)."""
        self._forget_socket()

    # -- requests -------------------------------------------------------------------------

    def submit(self, requests: Sequence[_Request]) -> List[_Slot]:
        """Queue request frames (as client.py's ``_Connection.submit``) and write them as one
        write; :meth:`flush` then waits for the transport to take them."""
        slots = []
        frames = []
        for op, arg in requests:
            expect, frame = _encode_request(op, arg)
            frames.append(frame)
            slots.append(_Slot(self.loop, op, expect))
        if self._error is not None:
            raise _fresh(self._error)
        # No await between queueing and writing: the FIFO stays in wire order.
        self._pending.extend(slots)
        if self._writer.transport.is_closing():
            # The node closed the connection (perhaps after a closing ERROR the reader has
            # not handed out yet): nothing is written; flush() lets the reader say why.
            self._lost = True
        else:
            self._writer.write(b"".join(frames))
        return slots

    async def flush(self) -> None:
        """Wait (at most ``timeout``) until the transport has room again."""
        if self._lost:
            await asyncio.wait({self._task}, timeout=self._timeout)
            err = UnavailableError("connection closed by the server", self.node)
            self.fail(err)
            raise _fresh(self._error or err)
        if self._writer.transport.get_write_buffer_size() == 0:
            return
        try:
            async with self._drain_lock:
                await asyncio.wait_for(self._writer.drain(), self._timeout)
        except asyncio.TimeoutError:
            err = UnavailableError(f"send blocked longer than {self._timeout}s", self.node)
            self.fail(err)
            raise _fresh(self._error or err) from None
        except (OSError, ssl.SSLError) as e:
            # The node closed the connection: a closing ERROR it sent first says more than
            # the send's error. Let the reader report it (bounded).
            await asyncio.wait({self._task}, timeout=self._timeout)
            err = UnavailableError(f"send failed: {e}", self.node)
            self.fail(err)
            raise _fresh(self._error or err) from e

    async def wait(self, slot: _Slot) -> object:
        """The answer of one slot, or raise its error. No answer within ``timeout`` breaks the
        connection (the node is stuck or gone)."""
        try:
            return await asyncio.wait_for(slot.future, self._timeout)
        except asyncio.TimeoutError:
            err = UnavailableError(f"no answer within {self._timeout}s", self.node)
            self.fail(err)
            raise _fresh(err) from None

    async def wait_ids(self, slot: _Slot) -> List[int]:
        ids = await self.wait(slot)
        assert isinstance(ids, list)
        return ids

    async def wait_uuids(self, slot: _Slot) -> List[uuid.UUID]:
        uuids = await self.wait(slot)
        assert slot.kind == protocol.OP_GET_UUIDS and isinstance(uuids, list), slot.kind
        return uuids

    async def wait_values(self, slot: _Slot) -> Values:
        frame = await self.wait(slot)
        assert slot.kind == protocol.OP_GET_VALUES and isinstance(frame, Values), slot.kind
        return frame

    # -- reader task ----------------------------------------------------------------------

    async def _read_loop(self, buf: bytearray) -> None:
        try:
            while self._error is None:
                self._dispatch_all(buf)
                data = await self._reader.read(_RECV_CHUNK)
                if not data:
                    self._server_closed(idle=not self._pending and not buf)
                    return
                buf += data
        except asyncio.CancelledError:
            self.fail(ClientClosedError(f"{self.node}: connection closed by the client"))
            raise
        except Exception as e:
            self._reader_failed(e)
class _Node(_NodeBase):
    def __init__(
        self, addr: str, tls_name: Optional[str] = None, entry: int = 0, placeholder: bool = False
    ):
        # expand=True, as client.py's _Node. Only touched on the event loop: no lock.
        super().__init__(addr, tls_name, entry, placeholder, NO_LOCK)
        self.connect_lock: Optional[asyncio.Lock] = None  # made on the client's loop
        self.conn: Optional[_Connection] = None


class _SeqState(_SeqBase):
    """As client.py's ``_SeqState``, with an ``asyncio.Lock``."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = asyncio.Lock()




# Fork safety: every live AsyncClient, reset in a forked child by the at-fork hook.
_CLIENTS: "weakref.WeakSet[AsyncClient]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    _forget_in_child(list(_CLIENTS))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class AsyncClient(_Core["_Node", "_SeqState"]):
    """An asyncio client for a cluster of idgen nodes: :class:`~idgen_client.Client`'s
    constructor parameters and semantics, with coroutine methods. Any number of tasks may
    call it at once; their requests are pipelined on one connection per node.

    ``prefetch=N`` keeps a pool of up to ``N`` IDs for :meth:`next_id`, refilled by a
    background task when it falls below ``low_water`` (default ``N // 4``); the first
    refill starts at ``async with`` (or the first :meth:`next_id`). ``sequence_prefetch=K``
    buffers values of dense named sequences as ``Client`` does.

    Use it as ``async with AsyncClient(...) as client:`` or call :meth:`aclose`.

    Configuration as ``Client``'s: :meth:`from_url`, :meth:`from_env`, :meth:`from_settings`,
    ``tls=True`` (the system's trusted roots), ``expand=True`` (each address a name resolves
    to is a node; resolved with ``loop.getaddrinfo`` at the first call or ``async with``, and
    again when a node fails, at most once a second). Observability as ``Client``'s: the
    ``idgen_client`` logger and ``hooks=`` (called on the event loop, see
    :mod:`idgen_client.observe`).
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
        if isinstance(prefetch, bool) or not isinstance(prefetch, int):
            raise TypeError(f"prefetch must be an int, not {type(prefetch).__name__}")
        nodes, low_water = _checked_settings(
            nodes, timeout, connect_timeout, backoff_min, backoff_max,
            prefetch, low_water, sequence_prefetch, expand,
        )  # fmt: skip
        self._obs = _observe.Observer(hooks)
        # The public call in progress in this task (its op, the node that answered).
        self._call: "contextvars.ContextVar[Optional[_CallInfo]]" = contextvars.ContextVar(
            "idgen_client_call", default=None
        )
        self._tls = _tls_settings(ssl_context, tls_ca, tls_cert, tls_key, server_hostname, tls)
        self._pid = os.getpid()
        self._expand = expand
        self._entries = [_parse_node(n) for n in nodes]
        # expand=True: every entry a placeholder until the first call resolves the names on
        # the event loop (never blocking it); then again on node failures, once a second.
        self._nodes: List[_Node] = (
            _expanded(self._entries, [None] * len(self._entries), [], _Node)
            if expand
            else [_Node(n) for n in nodes]
        )
        self._resolved = not expand
        self._first_resolve: "Optional[asyncio.Task[None]]" = None
        self._resolving = False
        self._resolved_at = time.monotonic()
        self._timeout = float(timeout)
        self._connect_timeout = float(connect_timeout)
        self._backoff_min = float(backoff_min)
        self._backoff_max = float(backoff_max)
        self._preferred = 0
        self._layout: Optional[Layout] = None
        self._stats = _Stats()
        self._tokens = itertools.count(1)
        self._closed = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._prefetch = prefetch
        self._low_water = low_water
        self._pool: Deque[int] = collections.deque()
        self._refill: "Optional[asyncio.Task[Optional[BaseException]]]" = None
        self._refill_not_before = 0.0
        self._seq_prefetch = sequence_prefetch
        self._seqs: "collections.OrderedDict[str, _SeqState]" = collections.OrderedDict()
        self._seqs_lock = NO_LOCK
        _CLIENTS.add(self)

    # -- configuration ----------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **code_settings: Any) -> "AsyncClient":
        """An async client configured by an ``idgen://`` / ``idgens://`` URL, with further
        settings given in code, exactly as :meth:`Client.from_url` (a setting given both
        ways is a :class:`idgen_client.ConfigError`). Nothing connects here."""
        return cls.from_settings(parse_url(url), **code_settings)

    @classmethod
    def from_env(cls, **code_settings: Any) -> "AsyncClient":
        """An async client configured by ``IDGEN_NODES`` (and, with a plain list, the
        ``IDGEN_CLIENT_*`` variables), as :meth:`Client.from_env`."""
        return cls.from_settings(Settings.from_env(), **code_settings)

    @classmethod
    def from_settings(cls, settings: Settings, **code_settings: Any) -> "AsyncClient":
        """An async client from parsed :class:`idgen_client.Settings` and settings given in
        code (each setting from one source only: :meth:`Settings.merge`)."""
        kwargs: Dict[str, Any] = dict(settings.merge(code_settings))
        nodes = kwargs.pop("nodes")
        return cls(nodes, **kwargs)

    # -- loop and fork ----------------------------------------------------------------------

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            self._forget_parent()

    def _forget_parent(self) -> None:
        """In a forked child: drop the parent's pool, sequence buffers and connections (their
        sockets closed in this process only) and the tie to its event loop."""
        self._forget_connections()
        self._stats = _Stats()
        self._obs.after_fork()
        self._pid = os.getpid()

    def _forget_connections(self) -> None:
        for node in self._nodes:
            conn, node.conn = node.conn, None
            node.connect_lock = None
            if conn is not None:
                conn.forget()
        self._pool = collections.deque()
        self._refill = None
        self._seqs = collections.OrderedDict()
        self._loop = None
        self._first_resolve = None
        self._resolving = False

    def _enter(self) -> None:
        """At every public coroutine: the fork check, and the client's tie to this loop."""
        self._check_fork()
        if self._closed:
            raise ClientClosedError("the client is closed")
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None and not self._loop.is_closed():
            raise RuntimeError(
                "this AsyncClient belongs to another event loop that is still open; "
                "make one client per event loop"
            )
        self._forget_connections()  # those of a closed loop, if any
        self._loop = loop
        for node in self._nodes:
            node.connect_lock = asyncio.Lock()

    async def _begin(self) -> None:
        """At every public coroutine: :meth:`_enter`, and with ``expand=True`` the first
        resolution of the names (one for all the tasks that call at once)."""
        self._enter()
        if self._resolved:
            return
        task = self._first_resolve
        if task is None or task.done():
            task = self._first_resolve = asyncio.get_running_loop().create_task(
                self._resolve_first()
            )
        await asyncio.shield(task)

    async def _resolve_first(self) -> None:
        self._resolving = True
        try:
            new = await self._resolve(self._nodes)
            self._resolved_at = time.monotonic()
            self._set_nodes(new)
            self._resolved = True
        finally:
            self._resolving = False

    # -- public API -------------------------------------------------------------------------

    async def next_id(self) -> int:
        """One ID: from the prefetch pool when ``prefetch`` is set, else one GET_IDS."""
        await self._begin()
        if self._prefetch:
            return await self._pool_pop()
        return (await self.next_ids(1))[0]

    async def next_ids(
        self, n: int, *, after: Optional[int] = None, idempotency_key: Optional[str] = None
    ) -> List[int]:
        """``n`` IDs, increasing, from one node (all or nothing), as :meth:`Client.next_ids`
        (``after``, ``idempotency_key`` included). ``n`` must be 1 or more: 0 raises
        ``ValueError`` before anything is sent."""
        await self._begin()
        _count(n)
        if after is None and idempotency_key is None:
            return await self._observed(
                "ids", n, lambda: self._with_failover(lambda conn: self._fetch(conn, n))
            )
        frame = _with_frame(n, after, idempotency_key, masked=False)

        async def run(conn: _Connection) -> List[int]:
            slot = await self._submit_with(conn, n, frame, protocol.OP_GET_IDS_WITH)
            return await conn.wait_ids(slot)

        return await self._observed("ids_with", n, lambda: self._routed(idempotency_key, run))

    async def next_masked_ids(
        self, n: int, *, after: Optional[int] = None, idempotency_key: Optional[str] = None
    ) -> MaskedIdList:
        """``n`` IDs masked by the node, as :meth:`Client.next_masked_ids`."""
        await self._begin()
        _count(n)
        frame = _with_frame(n, after, idempotency_key, masked=True)

        async def run(conn: _Connection) -> MaskedIdList:
            slot = await self._submit_with(conn, n, frame, _MASKED_KIND)
            got = await conn.wait(slot)
            assert isinstance(got, MaskedIds)
            key = forms.BASE62_ALPHABET[got.key_id]
            return MaskedIdList(got.key_id, got.ids, [key + forms.to_base62(m) for m in got.ids])

        return await self._observed("masked_ids", n, lambda: self._routed(idempotency_key, run))

    async def next_uuid(self) -> uuid.UUID:
        """One version 7 UUID (see :meth:`next_uuids`)."""
        return (await self.next_uuids(1))[0]

    async def next_uuids(self, n: int) -> List[uuid.UUID]:
        """``n`` version 7 UUIDs, strictly increasing, from one node, as
        :meth:`Client.next_uuids`."""
        await self._begin()
        _count(n)
        return await self._observed(
            "uuids", n, lambda: self._with_failover(lambda conn: self._fetch_uuids(conn, n))
        )

    async def next_value(self, name: str) -> int:
        """One value of the named sequence ``name`` (see :meth:`next_values`)."""
        return (await self.next_values(name, 1))[0]

    async def next_values(self, name: str, n: int) -> List[int]:
        """``n`` values of the named sequence ``name``, strictly increasing, as
        :meth:`Client.next_values` (with ``sequence_prefetch`` for dense sequences)."""
        await self._begin()
        layout = self._layout
        raw = _values_call(n, name, layout.max_batch if layout is not None else None)
        if not self._seq_prefetch:

            async def plain() -> List[int]:
                return (await self._get_values(raw, n, n)).values

            return await self._observed("values", n, plain)
        return await self._observed(
            "values", n, lambda: self._prefetched_values(raw.decode("ascii"), raw, n)
        )

    async def ping(self) -> float:
        """PING a node (with failover); returns the round-trip time in seconds."""
        await self._begin()

        async def run(conn: _Connection) -> float:
            start = time.monotonic()
            (slot,) = conn.submit([(protocol.OP_PING, next(self._tokens) & protocol.MAX_U64)])
            self._stats.add("pings")
            await conn.flush()
            await conn.wait(slot)
            return time.monotonic() - start

        return await self._observed("ping", 1, lambda: self._with_failover(run))

    async def get_layout(self) -> Layout:
        """The cluster's ID layout (from the first HELLO_OK; connects if needed)."""
        await self._begin()
        if self._layout is None:

            async def hello(conn: _Connection) -> HelloOk:
                return conn.hello

            await self._with_failover(hello)
        assert self._layout is not None
        return self._layout

    @property
    def layout(self) -> Optional[Layout]:
        """The layout once a node has answered, else ``None`` (:meth:`get_layout` connects)."""
        return self._layout

    async def decode(self, id_: int) -> IdParts:
        """Take an ID apart with the cluster's layout (connects if needed)."""
        return (await self.get_layout()).decode(id_)

    async def decode_uuid(self, value: uuid.UUID) -> UuidParts:
        """Take a version 7 UUID apart with the cluster's layout (connects if needed)."""
        return (await self.get_layout()).decode_uuid(value)

    def stats(self) -> Dict[str, int]:
        """The counters of :meth:`Client.stats` (a forked child starts from zero)."""
        self._check_fork()
        return self._stats.snapshot()

    def nodes(self) -> List[NodeState]:
        """Each node's state, as :meth:`Client.nodes`."""
        self._check_fork()
        return cast(List[NodeState], self._node_states())

    async def aclose(self) -> None:
        """Close every connection and stop the refill task. Pooled IDs are dropped (a gap);
        waiting calls fail with :class:`ClientClosedError`. In a forked child it closes only
        the child's own connections."""
        self._check_fork()
        if self._closed:
            return
        self._closed = True
        self._pool.clear()
        self._seqs.clear()
        refill, self._refill = self._refill, None
        if refill is not None and not refill.done():
            refill.cancel()
        for node in self._nodes:
            conn, node.conn = node.conn, None
            if conn is None:
                continue
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:  # pragma: no cover - aclose is a coroutine
                running = None
            if conn.loop is running:
                await conn.close()
            else:
                conn.forget()  # its loop is gone: just this process's descriptor

    async def __aenter__(self) -> "AsyncClient":
        await self._begin()
        if self._prefetch:
            self._start_refill()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient({[n.addr for n in self._nodes]!r})"

    # -- options ----------------------------------------------------------------------------

    async def _submit_with(self, conn: _Connection, n: int, frame: bytes, kind: int) -> _Slot:
        (slot,) = conn.submit([_with_request(conn, n, frame, kind)])
        self._stats.add("requests")
        await conn.flush()
        return slot

    async def _routed(
        self, key: Optional[str], run: Callable[[_Connection], Awaitable[_T]]
    ) -> _T:
        """``run`` with failover, or, with an idempotency key, on the key's node only."""
        if key is None:
            return await self._with_failover(run)
        node = self._nodes[key_node(key, len(self._nodes))]  # as the list is now
        return await self._attempts(_KeyRoute(self, self._call.get(), key, node), run)

    # -- requests ---------------------------------------------------------------------------

    async def _fetch(self, conn: _Connection, n: int) -> List[int]:
        slots = conn.submit(_id_requests(conn, n))
        self._stats.add("requests", len(slots))
        await conn.flush()
        if len(slots) == 1:
            ids = await conn.wait_ids(slots[0])
        else:
            ids = []
            for slot in slots:  # answers arrive in order; a failed part fails the whole call
                ids.extend(await conn.wait_ids(slot))
        self._stats.add("ids", len(ids))
        return ids

    async def _fetch_uuids(self, conn: _Connection, n: int) -> List[uuid.UUID]:
        slots = conn.submit(_uuid_requests(conn, n))
        self._stats.add("uuid_requests", len(slots))
        await conn.flush()
        uuids: List[uuid.UUID] = []
        for slot in slots:
            uuids.extend(await conn.wait_uuids(slot))
        self._stats.add("uuids", len(uuids))
        return uuids

    # -- named sequences (client.py's rules, on asyncio locks) ------------------------------

    async def _get_values(self, raw: bytes, n: int, want: int) -> Values:
        async def run(conn: _Connection) -> Values:
            (slot,) = conn.submit([(protocol.OP_GET_VALUES, _get_values_frame(raw, n, want, conn))])
            self._stats.add("value_requests")
            await conn.flush()
            answer = await conn.wait_values(slot)
            self._stats.add("values", len(answer.values))
            return answer

        return await self._with_failover(run)

    def _new_seq(self) -> _SeqState:
        return _SeqState()

    async def _ask(self, key: str, state: _SeqState, raw: bytes, n: int, want: int) -> Values:
        try:
            answer = await self._get_values(raw, n, want)
        except ServerError as e:
            self._seq_failed(key, state, e)
            raise
        state.answered(answer)
        return answer

    async def _prefetched_values(self, key: str, raw: bytes, n: int) -> List[int]:
        state = self._seq_state(key)
        if state.mode == protocol.MODE_STRICT:
            return state.exact(await self._ask(key, state, raw, n, n))
        async with state.lock:
            if state.mode != protocol.MODE_DENSE:
                return state.exact(await self._ask(key, state, raw, n, n))
            out = state.take(n, self._stats)
            if out is not None:
                return out
            want = max(self._seq_prefetch, n)
            try:
                answer = await self._ask(key, state, raw, n, want)
            except ServerError as e:
                if not _ask_exactly(e, want, n):
                    raise
                answer = await self._ask(key, state, raw, n, n)
            return state.refilled(answer, n, self._stats)  # a gap, never a repeat

    # -- failover (client.py's rules) -------------------------------------------------------

    async def _with_failover(self, run: Callable[[_Connection], Awaitable[_T]]) -> _T:
        return await self._attempts(_Failover(self, self._call.get()), run)

    async def _attempts(self, plan: _Plan[_Node], run: Callable[[_Connection], Awaitable[_T]]) -> _T:
        """Run ``plan`` (client.py's ``_attempts``, awaiting the connects and answers)."""
        node = plan.next()
        while node is not None:
            conn: Optional[_Connection] = None
            try:
                conn = await self._connection(node)
                result = await run(conn)
            except ServerError as e:
                action = plan.refused(node, conn, e)
                if action == _RAISE:
                    raise
                if action == _BACK_OFF:
                    await self._failed(node, conn, e, keep_connection=not e.closes_connection)
                    plan.failed(node, e)
            except plan.fails_over as e:
                if self._closed:
                    raise ClientClosedError("the client is closed") from e
                if plan.passes(e):
                    raise
                await self._failed(node, conn, e)
                plan.failed(node, e)
            else:
                plan.answered(node)
                return result
            node = plan.next()
        raise plan.error()

    async def _connection(self, node: _Node) -> _Connection:
        conn = node.conn
        if conn is not None and conn.alive:
            return conn
        lock = node.connect_lock
        if lock is None:  # a node added by a re-resolution on this loop
            lock = node.connect_lock = asyncio.Lock()
        async with lock:
            conn = node.conn
            if conn is not None and conn.alive:
                return conn
            self._connect_check(node)
            started = time.monotonic()
            try:
                if node.placeholder:
                    # expand=True: the name resolved to nothing. Down until it resolves
                    # (this failure makes the client resolve it again).
                    raise UnavailableError("the name resolves to no address", node.addr)
                conn = await _Connection.open(
                    node.addr, self._connect_timeout, self._timeout, self._stats, self._tls_for(node)
                )
                try:
                    self._check_layout(conn)
                    if self._closed:
                        raise ClientClosedError("the client is closed")
                except IdgenError:
                    await conn.close()
                    raise
            except IdgenError as e:
                self._connect_failed(node, e, started)
                raise
            node.conn = conn
        self._connected(node, conn, started)
        return conn

    def _check_layout(self, conn: _Connection) -> None:
        self._layout = _cluster_layout(self._layout, Layout.from_hello(conn.hello), conn.node)

    async def _failed(
        self,
        node: _Node,
        conn: Optional[_Connection],
        err: BaseException,
        keep_connection: bool = False,
    ) -> None:
        """A node failed a call: :meth:`_Core._back_off`, and with ``expand=True`` the names
        resolved again (at most once a second)."""
        self._back_off(node, conn, err, keep_connection)
        if self._expand:
            await self._node_failed(node)

    # -- events -------------------------------------------------------------------------------

    async def _observed(self, op: str, count: int, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run one public call and emit its ``request`` event (op, count, the node that
        answered, duration, outcome) when it finishes; the call's info lives in this task's
        context (a ``ContextVar``), so concurrent tasks each report their own."""
        info = _CallInfo(op)
        token = self._call.set(info)
        started = time.monotonic()
        outcome = "ok"
        try:
            return await call()
        except BaseException as e:
            outcome = _outcome(e)
            raise
        finally:
            self._call.reset(token)
            self._request_event(info, count, started, outcome)

    # -- expand=True: each address of a name is a node (client.py's rules) ------------------

    async def _resolve(self, current: List[_Node]) -> List[_Node]:
        """The node list for the configured entries (client.py's ``_expanded``), the names
        resolved with ``loop.getaddrinfo`` (in the default executor: the loop never blocks),
        all at once, each within ``connect_timeout``."""
        loop = asyncio.get_running_loop()

        async def one(host: str, port: int) -> Optional[List[Tuple[str, int]]]:
            try:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), self._connect_timeout
                )
            except (OSError, asyncio.TimeoutError) as e:
                _observe.LOGGER.debug("resolving %s:%s failed: %r", host, port, e)
                return None
            return _addresses(infos)

        answers = await asyncio.gather(*(one(host, port) for host, port in self._entries))
        return _expanded(self._entries, list(answers), current, _Node)

    def _set_nodes(self, new: List[_Node], failed: Optional[_Node] = None) -> List[_Node]:
        """:meth:`_Core._replace_nodes`, the new nodes given their connect locks."""
        removed = self._replace_nodes(new, failed)
        if self._loop is not None:
            for n in self._nodes:
                if n.connect_lock is None:
                    n.connect_lock = asyncio.Lock()
        return removed

    async def _node_failed(self, node: _Node) -> None:
        """expand=True: a node failed. Resolve the names again (at most once a second, one
        resolution at a time), and drop the node if its address is gone."""
        if self._resolving or not self._resolved:
            return
        self._resolving = True
        try:
            now = time.monotonic()
            if now - self._resolved_at >= 1.0:
                self._resolved_at = now
                new = await self._resolve(self._nodes)
            else:
                new = list(self._nodes)
            removed = self._set_nodes(new, node)
        finally:
            self._resolving = False
        for n in removed:
            conn, n.conn = n.conn, None
            if conn is not None:
                await conn.close()

    # -- prefetch pool ----------------------------------------------------------------------

    def _start_refill(self) -> "asyncio.Task[Optional[BaseException]]":
        task = self._refill
        if task is None or task.done():
            task = self._refill = asyncio.get_running_loop().create_task(self._refill_once())
        return task

    async def _refill_once(self) -> Optional[BaseException]:
        """Fill the pool up to ``prefetch``; returns the error of a failed refill (which the
        waiting callers raise) rather than raising it. A refill is a request (its event,
        op ``ids``), as ``Client``'s."""
        want = self._prefetch - len(self._pool)
        if want <= 0:
            return None
        try:
            ids = await self._observed(
                "ids", want, lambda: self._with_failover(lambda conn: self._fetch(conn, want))
            )
        except Exception as e:  # handed to the waiting callers
            self._refill_not_before = time.monotonic() + min(self._backoff_min, 0.2)
            return e
        if not self._closed:
            self._pool.extend(ids)
            self._stats.add("prefetch_refills")
        return None

    async def _pool_pop(self) -> int:
        guard = _pool_guard(self._prefetch, self._connect_timeout, self._timeout, len(self._nodes))
        deadline = time.monotonic() + guard
        while True:
            if self._closed:
                raise ClientClosedError("the client is closed")
            if self._pool:
                id_ = self._pool.popleft()
                if len(self._pool) < self._low_water and time.monotonic() >= self._refill_not_before:
                    self._start_refill()
                self._stats.add("prefetch_served")
                return id_
            task = self._start_refill()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UnavailableError(f"prefetch pool stayed empty for {guard:.1f}s")
            done, _ = await asyncio.wait({task}, timeout=remaining)
            if task in done and not task.cancelled():
                error = task.result()
                if error is not None and not self._pool:
                    raise _fresh(error)
