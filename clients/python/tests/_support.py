"""Shared test helpers: paths, vectors, a real idgen server, fake nodes.

Every wait here is bounded in time, and tests stop only the processes they started.
"""

import json
import logging
import os
import pathlib
import select
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from unittest import mock

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent  # clients/python/tests -> repo root

try:  # the installed package (run_tests.sh), else the source tree next to the tests
    import idgen_client  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(HERE.parent))
    import idgen_client  # noqa: F401

from idgen_client import protocol  # noqa: E402

SERVER_START_TIMEOUT = 30.0


def load_json(relative):
    with open(REPO / relative, encoding="utf-8") as f:
        return json.load(f)


def idgen_bin():
    return os.environ.get("IDGEN_BIN") or str(REPO / "target" / "debug" / "idgen")


def require_idgen_bin(test):
    """Fail (never skip) when the server binary is missing."""
    path = idgen_bin()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        test.fail(
            f"idgen server binary not found at {path}: build it with "
            "`cargo build -p idgen` (binary target/debug/idgen) or set IDGEN_BIN"
        )
    return path


SEQ_CREATE_TIMEOUT = 60.0


class Server:
    """A real `idgen serve` on 127.0.0.1:0 (unless ``extra_args`` give ``--listen``) with the
    memory store, stopped by PID.

    With ``sequences`` (a list of argument lists, e.g. ``[["orders"], ["ledger", "--mode",
    "strict"]]``) it first runs ``idgen seq create ARGS --data-dir DIR`` for each, then serves
    the embedded store (the default) in that DIR: the memory store cannot be seeded before
    the node starts. A failing ``seq create`` fails the test (with its output)."""

    def __init__(self, test, *extra_args, sequences=None):
        path = require_idgen_bin(test)
        self.dir = tempfile.TemporaryDirectory(prefix="idgen-pytest-")
        self.log_path = os.path.join(self.dir.name, "server.log")
        for spec in sequences or []:
            self._seq_create(test, path, spec)
        self._log = open(self.log_path, "wb")
        store = [] if sequences else ["--store", "memory"]
        args = [
            path, "serve",
            *([] if "--listen" in extra_args else ["--listen", "127.0.0.1:0"]),
            "--admin-listen", "off",
            "--http-listen", "off",
            *store,
            "--shards", "2",
            "--data-dir", self.dir.name,
            *extra_args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL
        )
        self.tls_addr = None  # "listening with TLS on ADDR", with --tls-listen
        self.addr = self._wait_listening(test, "--tls-listen" in extra_args)
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _seq_create(self, test, path, spec):
        cmd = [path, "seq", "create", *spec, "--data-dir", self.dir.name]
        try:
            done = subprocess.run(
                cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=SEQ_CREATE_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            self.dir.cleanup()
            test.fail(f"{' '.join(cmd)} did not run: {e}")
        if done.returncode != 0:
            self.dir.cleanup()
            test.fail(
                f"{' '.join(cmd)} failed ({done.returncode}):\n"
                + done.stdout.decode("utf-8", "replace")
                + done.stderr.decode("utf-8", "replace")
            )

    def _wait_listening(self, test, tls):
        """The plaintext address; with ``tls``, wait for the TLS one too (``self.tls_addr``)."""
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        addr = None
        line = b""
        out = self.proc.stdout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([out], [], [], 0.2)
            if ready:
                byte = os.read(out.fileno(), 1)
                if not byte:
                    break
                line += byte
                if byte == b"\n":
                    text = line.decode("utf-8", "replace").strip()
                    line = b""
                    if text.startswith("listening with TLS on "):
                        self.tls_addr = text[len("listening with TLS on "):]
                    elif text.startswith("listening on "):
                        addr = text[len("listening on "):]
                    if addr and (self.tls_addr or not tls):
                        return addr
            elif self.proc.poll() is not None:
                break
        self.stop()
        test.fail(f"idgen did not print its listening addresses within {SERVER_START_TIMEOUT}s; log:\n"
                  + self.log())

    def _drain(self):
        try:
            while self.proc.stdout.read(4096):
                pass
        except (OSError, ValueError):
            pass

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def kill(self):
        """SIGKILL, as a crash."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.dir.cleanup()


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def hello_ok_bytes(hello):
    body = struct.pack(">HQBBBBIIIIH", *hello)
    return struct.pack(">IB", 1 + len(body), 0x81) + body


def error_bytes(status, message):
    msg = message.encode()
    return struct.pack(">IBH", 3 + len(msg), 0xFF, status) + msg


def ids_bytes(ids):
    return struct.pack(f">IBI{len(ids)}Q", 5 + 8 * len(ids), 0x82, len(ids), *ids)


def ranges_bytes(ids, run=1000):
    """A RANGES frame of consecutive ``ids``, in runs of at most ``run`` IDs."""
    runs = [(ids[i], len(ids[i : i + run])) for i in range(0, len(ids), run)]
    body = struct.pack(">BII", 0x84, len(ids), len(runs))
    body += b"".join(struct.pack(">QI", first, n) for first, n in runs)
    return struct.pack(">I", len(body)) + body


def pong_bytes(token):
    return struct.pack(">IBQ", 9, 0x83, token)


def values_bytes(mode, values):
    """A VALUES frame (0x85): ``mode`` 0 dense, 1 strict."""
    return struct.pack(
        f">IBBI{len(values)}Q", 6 + 8 * len(values), 0x85, mode, len(values), *values
    )


def uuids_bytes(uuids):
    """A UUIDS frame (0x86) of 16-byte ``uuids``."""
    return struct.pack(">IBI", 5 + 16 * len(uuids), 0x86, len(uuids)) + b"".join(uuids)


def uuid_of(hello, id_, random=0):
    """The version 7 UUID (16 bytes) a node of ``hello``'s layout makes from ``id_`` with
    ``random`` in its random bits (PROTOCOL.md section 3.7), written out independently of the
    client's decoder."""
    low_bits = hello.worker_bits + hello.sequence_bits
    unix_ms = hello.epoch_ms + (id_ >> low_bits)
    random_bits = 74 - low_bits
    payload = ((id_ & ((1 << low_bits) - 1)) << random_bits) | (random & ((1 << random_bits) - 1))
    u = (unix_ms << 80) | (0x7 << 76) | ((payload >> 62) << 64) | (0b10 << 62) | (payload & ((1 << 62) - 1))
    return u.to_bytes(16, "big")


class FakeSequence:
    """A sequence a :class:`FakeNode` serves: ``mode`` 0 (dense) or 1 (strict), values from
    ``start`` by ``step`` up to ``max``; ``status`` (an int) answers every GET_VALUES for it
    with that ERROR instead, and ``answer`` (``count -> bytes``) with those bytes."""

    def __init__(self, mode=0, start=1, step=1, max=(1 << 63) - 1, status=None, answer=None):
        self.answer = answer
        self.mode = mode
        self.next = start
        self.step = step
        self.max = max
        self.status = status


class FakeNode:
    """A tiny idgen node: completes the handshake with ``hello`` (a HelloOk), then answers
    every request according to ``mode``:

    * ``"unavailable"``: ERROR ``status`` (default 300 UNAVAILABLE_LEASE) to every request;
      the connection stays open, unless the status closes it (then the fake closes it);
    * ``"garbage"``: bytes that are not a valid response frame;
    * ``"silent"``: nothing at all (the client must time out);
    * ``"range_changed"``: on the first connection, serves ``serve_before`` requests, then
      answers the next one with ERROR 305 RANGE_CHANGED and closes; every later connection
      is greeted with ``hello_after`` (default ``hello``) and served.

    Serving answers GET_IDS with IDS and GET_RANGES with RANGES, runs of at most 1,000 IDs
    (as a version 2 node does when ``hello.version >= 2``, else ``202 UNKNOWN_OPCODE``), from
    one counter shared by all connections, so IDs never repeat, and PING with PONG;
    ``ops`` lists the opcode of every GET_IDS and GET_RANGES received. ``requests`` counts the request frames received after
    the handshake; ``ids_by_connection[i]`` lists the IDs sent on the ``i``-th connection.
    ``hellos`` holds each connection's HELLO frame.

    GET_VALUES (0x05) is answered as a version 3 node does when ``hello.version >= 3``
    (else ``202 UNKNOWN_OPCODE``): ``sequences`` maps names to :class:`FakeSequence`; an
    unknown name is ``203``, count 0 ``200``, above max_batch ``201``, past the maximum
    ``307``. ``value_requests`` lists ``(name, count)`` of every GET_VALUES received (in
    every mode).

    GET_UUIDS (0x06) is answered as a version 4 node does when ``hello.version >= 4`` (else
    ``202 UNKNOWN_OPCODE``): the version 7 UUIDs (:func:`uuid_of`, random bits from the
    counter) of IDs from the same counter, recorded in ``ids_by_connection``; ``uuid_answer``,
    when set, makes the answer instead (a function of the count, returning the frame's bytes).

    With ``tls`` (a server-side ``ssl.SSLContext``, see :func:`server_tls`) every connection
    speaks TLS from the first byte; ``tls_sessions`` lists ``(alpn, has_client_cert)`` of
    each completed handshake and ``tls_failures`` the error of each failed one.
    :meth:`kill` closes every open connection and stops accepting new ones.
    """

    def __init__(
        self, hello, mode, status=300, serve_before=0, hello_after=None, tls=None, first_id=1 << 40,
        sequences=None, uuid_answer=None,
    ):  # fmt: skip
        self.hello = hello
        self.uuid_answer = uuid_answer
        self.sequences = dict(sequences or {})
        self.value_requests = []
        self.hellos = []
        self.hello_after = hello_after or hello
        self.mode = mode
        self.status = status
        self.serve_before = serve_before
        self.requests = 0
        self.ops = []
        self.connections = 0
        self.ids_by_connection = []
        self.tls_sessions = []
        self.tls_failures = []
        self._open = []
        self._next_id = first_id
        self._lock = threading.Lock()
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                sock.settimeout(10.0)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as idgen does
                with fake._lock:
                    fake._open.append(sock)
                if tls is not None:
                    try:
                        sock = tls.wrap_socket(sock, server_side=True)
                    except (ssl.SSLError, OSError) as e:
                        with fake._lock:
                            fake.tls_failures.append(e)
                        return
                    with fake._lock:
                        fake._open.append(sock)  # the wrapped socket took over the descriptor
                        fake.tls_sessions.append(
                            (sock.selected_alpn_protocol(), sock.getpeercert() is not None)
                        )
                with fake._lock:
                    index = fake.connections
                    fake.connections += 1
                    sent = []
                    fake.ids_by_connection.append(sent)
                mode = fake.mode
                if mode == "range_changed" and index > 0:
                    mode = "serve"
                try:
                    hello_frame = read_exact(sock, 13)
                    if hello_frame is None:
                        return
                    with fake._lock:
                        fake.hellos.append(hello_frame)
                    sock.sendall(hello_ok_bytes(fake.hello if index == 0 else fake.hello_after))
                    for k in range(100000):  # bounded
                        header = read_exact(sock, 4)
                        if header is None:
                            return
                        (length,) = struct.unpack(">I", header)
                        body = read_exact(sock, length)
                        if body is None:
                            return
                        with fake._lock:
                            fake.requests += 1
                            if body[:1] == b"\x05" and len(body) >= 5:
                                fake.value_requests.append(
                                    (body[5:].decode("ascii", "replace"),
                                     struct.unpack(">I", body[1:5])[0])
                                )  # fmt: skip
                        if mode == "unavailable":
                            sock.sendall(error_bytes(fake.status, "fake node says no"))
                            if protocol.ErrorFrame(fake.status, "").closes:
                                return
                        elif mode == "garbage":
                            sock.sendall(b"\x00\x00\x00\x09\x84garbage!")
                        elif mode == "range_changed" and k >= fake.serve_before:
                            sock.sendall(error_bytes(305, "worker range changed"))
                            return  # and close
                        elif mode in ("serve", "range_changed"):
                            sock.sendall(fake._answer(body, sent))
                        # "silent": answer nothing
                except OSError:
                    return
                finally:
                    if tls is not None:
                        sock.close()  # the wrapped socket (socketserver closes the raw one)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        host, port = self._server.server_address[:2]
        self.addr = f"{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def _answer(self, body, sent):
        if body[0] == protocol.OP_PING:
            return pong_bytes(struct.unpack(">Q", body[1:9])[0])
        if body[0] == 0x05:
            return self._answer_values(body)
        if body[0] == 0x06:
            return self._answer_uuids(body, sent)
        ranges = body[0] == protocol.OP_GET_RANGES
        with self._lock:
            self.ops.append(body[0])
        if ranges and self.hello.version < 2:
            return error_bytes(202, "unknown opcode 0x04")
        (count,) = struct.unpack(">I", body[1:5])
        if count == 0:
            return error_bytes(200, "count 0")
        if count > self.hello.max_batch:
            return error_bytes(201, "batch too large")
        with self._lock:
            ids = list(range(self._next_id, self._next_id + count))
            self._next_id += count
        sent.extend(ids)
        return ranges_bytes(ids) if ranges else ids_bytes(ids)

    def _answer_uuids(self, body, sent):
        with self._lock:
            self.ops.append(body[0])
        if self.hello.version < 4:
            return error_bytes(202, "unknown opcode 0x06")
        (count,) = struct.unpack(">I", body[1:5])
        if count == 0:
            return error_bytes(200, "count 0")
        if count > self.hello.max_batch:
            return error_bytes(201, "batch too large")
        if self.uuid_answer is not None:
            return self.uuid_answer(count)
        with self._lock:
            ids = list(range(self._next_id, self._next_id + count))
            self._next_id += count
        sent.extend(ids)
        return uuids_bytes([uuid_of(self.hello, i, random=i * 0x9E3779B97F4A7C15) for i in ids])

    def _answer_values(self, body):
        if self.hello.version < 3:
            return error_bytes(202, "unknown opcode 0x05")
        (count,) = struct.unpack(">I", body[1:5])
        name = body[5:].decode("ascii", "replace")
        if count == 0:
            return error_bytes(200, "count 0")
        if count > self.hello.max_batch:
            return error_bytes(201, "batch too large")
        with self._lock:
            seq = self.sequences.get(name)
            if seq is None:
                return error_bytes(203, f"no sequence {name}")
            if seq.status is not None:
                return error_bytes(seq.status, "fake sequence says no")
            if seq.answer is not None:
                return seq.answer(count)
            last = seq.next + (count - 1) * seq.step
            if last > seq.max:
                return error_bytes(307, f"sequence {name} is used up")
            values = list(range(seq.next, last + 1, seq.step))
            seq.next = last + seq.step
        return values_bytes(seq.mode, values)

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def kill(self):
        """Stop accepting and cut every open connection (as a crashed node would)."""
        self.close()
        with self._lock:
            open_, self._open = self._open, []
        for sock in open_:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def server_tls(certs, name="server", client_ca=None):
    """A server-side context with ``certs/<name>.crt`` and ``.key``, offering ALPN idgen/1;
    with ``client_ca`` (a path) it requires client certificates that chain to it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(certs, f"{name}.crt"), os.path.join(certs, f"{name}.key"))
    ctx.set_alpn_protocols(["idgen/1"])
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=client_ca)
    return ctx


_CERTS = {}


def certs_dir(test):
    """The directory of test certificates written by the test kit's ``idgen-test-certs``
    (see testkit/src/bin/idgen-test-certs.rs): ``$IDGEN_TEST_CERTS`` when set
    (run_tests.sh sets it), else generated once per process with ``cargo run``. Fails
    (never skips) when neither works."""
    given = os.environ.get("IDGEN_TEST_CERTS")
    if given:
        if not os.path.isfile(os.path.join(given, "ca.crt")):
            test.fail(f"IDGEN_TEST_CERTS={given} holds no ca.crt")
        return given
    if "dir" not in _CERTS:
        tmp = tempfile.TemporaryDirectory(prefix="idgen-pytest-certs-")
        cmd = ["cargo", "run", "--quiet", "-p", "idgen-testkit", "--bin", "idgen-test-certs",
               "--", tmp.name]  # fmt: skip
        try:
            done = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            test.fail(f"cannot generate test certificates with {' '.join(cmd)}: {e}")
        if done.returncode != 0:
            test.fail(
                f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode(errors='replace')}"
            )
        _CERTS["tmp"] = tmp  # removed at exit
        _CERTS["dir"] = tmp.name
    return _CERTS["dir"]

def default_hello(**overrides):
    fields = dict(
        version=1, epoch_ms=1767225600000, timestamp_bits=41, worker_bits=10, sequence_bits=12,
        region_bits=0, max_batch=65536, max_request_frame=64, worker_first=0, worker_count=1,
        shard=0,
    )  # fmt: skip
    fields.update(overrides)
    return protocol.HelloOk(**fields)


class SilentAddress:
    """A loopback address where a TCP connect gets no answer at all: a listener whose accept
    queue (backlog 0) is full, so that the kernel drops further SYNs. ``addr`` is its
    ``(host, port)``; :meth:`close` releases it. Fails the test if the queue will not fill."""

    def __init__(self, test):
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0)
        self.addr = self._listener.getsockname()
        self._held = []
        for _ in range(16):
            s = socket.socket()
            s.settimeout(0.2)
            try:
                s.connect(self.addr)
            except socket.timeout:
                s.close()
                return
            self._held.append(s)
        self.close()
        test.fail("a listener with a full accept queue still accepted 16 connects")

    def close(self):
        for s in self._held:
            s.close()
        self._listener.close()


def unused_port():
    """A loopback port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_threads(n, target, timeout):
    """Run ``target(i)`` in ``n`` threads; returns results by index; raises the first error."""
    results = [None] * n
    errors = []

    def body(i):
        try:
            results[i] = target(i)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        raise AssertionError(f"threads still running after {timeout}s")
    if errors:
        raise errors[0]
    return results


# -- shared by the Client and AsyncClient suites ---------------------------------------------

#: The environment variables a client reads (clients/vectors/CONFIG.md).
CLIENT_VARS = (
    "IDGEN_NODES",
    "IDGEN_CLIENT_CA",
    "IDGEN_CLIENT_CERT",
    "IDGEN_CLIENT_KEY",
    "IDGEN_CLIENT_SERVER_NAME",
    "IDGEN_CLIENT_CONNECT_TIMEOUT_MS",
    "IDGEN_CLIENT_TIMEOUT_MS",
)


def clean_env(**values):
    """``os.environ`` with every IDGEN_CLIENT_* / IDGEN_NODES variable replaced by ``values``."""
    env = {k: v for k, v in os.environ.items() if k not in CLIENT_VARS}
    env.update(values)
    return mock.patch.dict(os.environ, env, clear=True)


def no_connect(test):
    """Make any connection attempt fail the test: configuration errors come first."""
    patch = mock.patch.object(
        socket, "getaddrinfo", side_effect=AssertionError("a connection was attempted")
    )
    patch.start()
    test.addCleanup(patch.stop)


def config_cases(test, kind):
    """clients/vectors/config.json's ``urls`` or ``envs`` cases (checked to be all there)."""
    cases = load_json("clients/vectors/config.json")[kind]
    test.assertGreater(len(cases), {"urls": 30, "envs": 15}[kind])
    return cases


class Recorder:
    """A hook that keeps every event: ``names()``, and ``only(name)`` the fields of each
    event of that name (at least one)."""

    def __init__(self):
        self.events = []

    def __call__(self, event, fields):
        self.events.append((event, fields))

    def names(self):
        return [e for e, _ in self.events]

    def only(self, name):
        found = [f for e, f in self.events if e == name]
        assert found, f"no {name} event in {self.names()}"
        return found


def records(logs, event):
    """The log records of one event in an ``assertLogs`` capture."""
    return [r for r in logs.records if getattr(r, "idgen_event", None) == event]


def fake_node(test, mode="serve", version=1, **kw):
    """A :class:`FakeNode` speaking ``version``, closed at the end of the test."""
    node = FakeNode(default_hello(version=version), mode, **kw)
    test.addCleanup(node.close)
    return node


def mutual_tls_server(test):
    """A real node whose TLS listener wants a client certificate from the test kit's CA:
    ``(certificates directory, server)``, stopped at the end of the test."""
    certs = certs_dir(test)
    path = lambda name: os.path.join(certs, name)  # noqa: E731
    server = Server(
        test, "--tls-listen", "127.0.0.1:0", "--tls-cert", path("server.crt"),
        "--tls-key", path("server.key"), "--tls-client-ca", path("ca.crt"),
    )  # fmt: skip
    test.addCleanup(server.stop)
    return certs, server


def client_cert(certs, name):
    """The ``tls_cert``/``tls_key`` arguments of the test kit's certificate ``name``."""
    return dict(
        tls_cert=os.path.join(certs, f"{name}.crt"), tls_key=os.path.join(certs, f"{name}.key")
    )


# -- expand=true over clients/with-debian-hosts.sh (config_probe.py, test_aio_config.py) ------

EXPAND_TIMEOUTS = "connect_timeout_ms=5000&timeout_ms=5000"


def expand_clients(cls, ca, plain_port, tls_port, hook):
    """The probe's clients: ``plain`` and ``tls`` (``cls`` Client or AsyncClient) from
    ``idgen[s]://localhost:PORT?expand=true`` URLs."""
    return {
        "plain": cls.from_url(f"idgen://localhost:{plain_port}?expand=true&{EXPAND_TIMEOUTS}",
                              hooks=hook, backoff_min=5.0),
        "tls": cls.from_url(f"idgens://localhost:{tls_port}?ca={ca}&expand=true&{EXPAND_TIMEOUTS}",
                            hooks=hook, backoff_min=5.0),
    }  # fmt: skip


def expand_report(kind, events, ids):
    """The probe's line for one call: the node that answered and the failovers."""
    answered = [f["node"] for e, f in events if e == "request"]
    moved = [f"{f['from_node']}->{f['to_node']}" for e, f in events if e == "failover"]
    print(f"{kind}: answered {answered[-1]} ids {len(ids)} failover {','.join(moved) or '-'}",
          flush=True)  # fmt: skip


def expand_test(test, probe):
    """The expand test: nodes on 127.0.0.1 and ::1 (plain and TLS, the same ports), the probe
    (``probe``: the Python arguments of its client side, ``CA PLAIN_PORT TLS_PORT`` added)
    under with-debian-hosts.sh, where ``localhost`` is ::1 then 127.0.0.1: each client has
    both nodes and uses ::1; with ::1 stopped, each fails over to 127.0.0.1."""
    certs = certs_dir(test)
    ca = os.path.join(certs, "ca.crt")
    tls = ["--tls-cert", os.path.join(certs, "server.crt"),
           "--tls-key", os.path.join(certs, "server.key")]  # fmt: skip
    v4 = Server(test, "--listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0", *tls)
    test.addCleanup(v4.stop)
    plain = v4.addr.rsplit(":", 1)[1]
    tport = v4.tls_addr.rsplit(":", 1)[1]
    v6 = Server(test, "--listen", f"[::1]:{plain}", "--tls-listen", f"[::1]:{tport}", *tls)
    test.addCleanup(v6.stop)
    proc = subprocess.Popen(
        ["bash", str(REPO / "clients" / "with-debian-hosts.sh"), sys.executable, *probe,
         ca, plain, tport],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        cwd=str(HERE),
    )  # fmt: skip
    test.addCleanup(lambda: proc.poll() is None and proc.kill())
    lines = []
    timer = threading.Timer(60, proc.kill)  # never wait forever
    timer.start()
    test.addCleanup(timer.cancel)
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith(("ready", "FAILED")):
            break
    out = "\n".join(lines)
    test.assertIn("ready", out, out)
    test.assertIn(f"plain: nodes [::1]:{plain},127.0.0.1:{plain}", out)
    test.assertIn(f"tls: nodes [::1]:{tport},127.0.0.1:{tport}", out)
    test.assertIn(f"plain: answered [::1]:{plain} ids 3 failover -", out)
    test.assertIn(f"tls: answered [::1]:{tport} ids 3 failover -", out)
    v6.stop()
    rest, _ = proc.communicate("go\n", timeout=60)
    out += "\n" + rest
    test.assertEqual(proc.returncode, 0, out)
    test.assertIn(
        f"plain: answered 127.0.0.1:{plain} ids 3 failover [::1]:{plain}->127.0.0.1:{plain}", out
    )
    test.assertIn(
        f"tls: answered 127.0.0.1:{tport} ids 3 failover [::1]:{tport}->127.0.0.1:{tport}", out
    )
    test.assertIn("done", out)


# -- the event checks of test_observe.py and test_aio_config.py ------------------------------


def check_failover_events(test, hook, logs, bad, good):
    """A call that failed over from ``bad`` (300) to ``good`` (version 1): the events in the
    hook, with their fields, and in the log (``logs``, from ``assertLogs`` at DEBUG), each at
    its level."""
    test.assertEqual(
        hook.names(), ["connect", "refused", "node_down", "failover", "connect", "request"]
    )
    (failover,) = hook.only("failover")
    test.assertEqual((failover["from_node"], failover["to_node"]), (bad.addr, good.addr))
    test.assertIn("300", failover["reason"])
    (refused,) = hook.only("refused")
    test.assertEqual(
        {k: refused[k] for k in ("node", "op", "status", "status_name")},
        {"node": bad.addr, "op": "ids", "status": 300, "status_name": "UNAVAILABLE_LEASE"},
    )
    test.assertTrue(refused["message"])
    (down,) = hook.only("node_down")
    test.assertEqual((down["node"], down["failures"]), (bad.addr, 1))
    test.assertGreater(down["retry_in"], 0)
    connect = hook.only("connect")[1]
    test.assertEqual((connect["node"], connect["address"], connect["version"]),
                     (good.addr, good.addr, 1))  # fmt: skip
    test.assertGreaterEqual(connect["duration"], 0)
    (request,) = hook.only("request")
    test.assertEqual(
        {k: request[k] for k in ("op", "count", "node", "outcome")},
        {"op": "ids", "count": 3, "node": good.addr, "outcome": "ok"},
    )
    # The same events in the log, each at its level, with its fields attached.
    (rec,) = records(logs, "failover")
    test.assertEqual(rec.levelno, logging.WARNING)
    test.assertEqual(rec.idgen_fields["to_node"], good.addr)
    test.assertIn(f"from_node={bad.addr}", rec.getMessage())
    test.assertEqual(records(logs, "refused")[0].levelno, logging.INFO)
    test.assertEqual(records(logs, "node_down")[0].levelno, logging.WARNING)
    test.assertEqual(records(logs, "request")[0].levelno, logging.DEBUG)
    test.assertEqual([r.levelno for r in records(logs, "connect")], [logging.DEBUG] * 2)


def check_connect_failed(test, hook, missing):
    """A call whose only node (``missing``) refused the connection: ``connect_failed`` and a
    failed ``request`` naming no node."""
    (failed,) = hook.only("connect_failed")
    test.assertEqual(failed["node"], missing)
    test.assertIn("UnavailableError", failed["error"])
    (request,) = hook.only("request")
    test.assertEqual((request["outcome"], request["node"]), ("UnavailableError", None))


class BrokenHook:
    """A hook that raises at every event (``calls`` lists them)."""

    def __init__(self):
        self.calls = []

    def __call__(self, event, fields):
        self.calls.append(event)
        raise RuntimeError("hook bug")


def check_broken_hook(test, logs, broken, hook):
    """After five ``next_ids`` and a ping with hooks ``[broken, hook]`` on one node: the
    broken hook logged once (``logs`` at WARNING), still called for every event, and the
    next hook still ran."""
    warnings = [r for r in logs.records if "hook" in r.getMessage()]
    test.assertEqual(len(warnings), 1, [r.getMessage() for r in logs.records])
    test.assertIn("RuntimeError: hook bug", warnings[0].getMessage())
    test.assertEqual(len(broken.calls), 7, "every event still reaches the broken hook")
    test.assertEqual(hook.names(), ["connect"] + ["request"] * 6, "the next hook still runs")


def fake_resolver(test, hosts):
    """``socket.getaddrinfo`` answering the names ``hosts`` with ``test.answer`` (``(ip,
    port)`` pairs, empty at first), counting ``test.lookups`` and first sleeping
    ``test.delay`` seconds; other names resolve as usual. Undone at the end of the test."""
    test.answer = []
    test.lookups = 0
    test.delay = 0.0
    real = socket.getaddrinfo

    def fake(host, port, *args, **kwargs):
        if host in hosts:
            test.lookups += 1
            time.sleep(test.delay)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a) for a in test.answer]
        return real(host, port, *args, **kwargs)

    patch = mock.patch.object(socket, "getaddrinfo", side_effect=fake)
    patch.start()
    test.addCleanup(patch.stop)


def serving_node(test):
    """A serving :class:`FakeNode` and its ``(host, port)``."""
    node = fake_node(test)
    host, port = node.addr.rsplit(":", 1)
    return node, (host, int(port))


def check_prints_nothing(test, client, body):
    """Run ``body`` (Python source, dedented; ``NODES`` in it is a node list of an unused
    port, a node refusing with 300 and a serving one, for a call with every warning event)
    after importing ``client`` from idgen_client, with no logging configured: it must print
    nothing, on stdout or stderr."""
    nodes = [f"127.0.0.1:{unused_port()}", fake_node(test, "unavailable", status=300).addr,
             fake_node(test).addr]  # fmt: skip
    program = textwrap.dedent(f"""
        import asyncio, logging, sys
        try:  # the installed package (run_tests.sh), else the source tree
            from idgen_client import {client}
        except ImportError:
            sys.path.insert(0, {str(HERE.parent)!r})
            from idgen_client import {client}
    """) + textwrap.dedent(body).replace("NODES", repr(nodes)) + '\nprint("done")\n'
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60, cwd=str(HERE))  # fmt: skip
    test.assertEqual(run.returncode, 0, run.stderr)
    test.assertEqual(run.stdout, "done\n")
    test.assertEqual(run.stderr, "", "the package printed without logging configured")


def make_client(test, cls, nodes, **kw):
    """A ``cls`` (Client or AsyncClient) for ``nodes`` with 5 s timeouts unless ``kw`` says
    otherwise, closed at the end of the test."""
    kw.setdefault("timeout", 5.0)
    kw.setdefault("connect_timeout", 5.0)
    client = cls(nodes, **kw)
    if hasattr(client, "aclose"):
        test.addAsyncCleanup(client.aclose)
    else:
        test.addCleanup(client.close)
    return client
