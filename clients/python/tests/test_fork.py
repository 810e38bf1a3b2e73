"""(g) Fork safety: a child process never hands out an ID its parent holds.

Each test forks (``os.fork`` or ``multiprocessing`` with the fork start method) after the
client in the parent has a live connection (and, with ``prefetch``, a filled pool and a
running refill thread). A child reports its IDs (and any error) to the parent over a pipe
and always leaves with ``os._exit``; the parent reaps it by PID within a deadline, and
kills it (by that PID) if it overstays.
"""

import json
import multiprocessing
import os
import select
import signal
import threading
import time
import unittest

import _support
from idgen_client import Client
from idgen_client import client as client_module

CHILD_TIMEOUT = 60.0


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Child:
    """``body(ids)`` run in a forked child; ``ids`` is a list it appends to, so the IDs taken
    before an error still reach the parent. ``go`` (optional) is a read fd the child waits
    on before starting, so parent and child start together."""

    def __init__(self, test, body, go=None):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never return into unittest
            code = 0
            try:
                os.close(r)
                ids, error = [], None
                try:
                    if go is not None:
                        select.select([go], [], [], 10.0)
                    body(ids)
                except BaseException as e:  # reported to the parent
                    error = repr(e)
                    code = 1
                _write_all(w, json.dumps({"ids": ids, "error": error}).encode())
                os.close(w)
            except BaseException:
                code = 2
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self._r = r
        self._reaped = False
        test.addCleanup(self.reap)

    def result(self, timeout=CHILD_TIMEOUT):
        """The child's ``(ids, error)``; waits (bounded) for its pipe to close and reaps it."""
        deadline = time.monotonic() + timeout
        data = b""
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"child {self.pid} did not finish within {timeout}s")
                ready, _, _ = select.select([self._r], [], [], remaining)
                if not ready:
                    continue
                chunk = os.read(self._r, 65536)
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(self._r)
            self._r = None
            self.reap()
        if not data:
            raise AssertionError(f"child {self.pid} exited without a report")
        out = json.loads(data)
        return out["ids"], out["error"]

    def reap(self, timeout=10.0):
        if self._reaped:
            return
        if self._r is not None:
            os.close(self._r)
            self._r = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reaped = True
                return
            time.sleep(0.01)
        os.kill(self.pid, signal.SIGKILL)  # our own child, by PID
        os.waitpid(self.pid, 0)
        self._reaped = True


def _take_one_by_one(client, n):
    def body(ids):
        for _ in range(n):
            ids.append(client.next_id())

    return body


def _take_batches(client, calls, size):
    def body(ids):
        for _ in range(calls):
            got = client.next_ids(size)
            if len(got) != size or any(a >= b for a, b in zip(got, got[1:])):
                raise AssertionError(f"asked for {size} increasing IDs, got {got}")
            ids.extend(got)

    return body


def _mp_worker(client, conn, n):
    """A multiprocessing (fork) child: half from the pool, half in batches of 10."""
    ids, error = [], None
    try:
        for _ in range(n // 2):
            ids.append(client.next_id())
        for _ in range(n // 20):
            ids.extend(client.next_ids(10))
    except BaseException as e:  # reported to the parent
        error = repr(e)
    conn.send((ids, error))
    conn.close()


class Fork(unittest.TestCase):
    def server(self):
        server = _support.Server(self)
        self.addCleanup(server.stop)
        return server

    def client(self, server, **kw):
        kw.setdefault("timeout", 5.0)
        client = Client([server.addr], **kw)
        self.addCleanup(client.close)
        return client

    def assert_distinct(self, *lists):
        all_ids = [i for ids in lists for i in ids]
        dups = len(all_ids) - len(set(all_ids))
        self.assertEqual(dups, 0, f"{dups} duplicate IDs across parent and child")

    def test_prefetch_pool_is_not_shared_with_a_forked_child(self):
        server = self.server()
        client = self.client(server, prefetch=1000)
        before = [client.next_id() for _ in range(10)]  # pool filled, refill thread running
        child = _Child(self, _take_one_by_one(client, 2000))
        parent = [client.next_id() for _ in range(2000)]
        child_ids, error = child.result()
        self.assert_distinct(before, parent, child_ids)
        self.assertIsNone(error, "the child's next_id() failed")
        self.assertEqual(len(child_ids), 2000)

    def test_without_prefetch_parent_and_child_use_the_client_concurrently(self):
        server = self.server()
        client = self.client(server, timeout=2.0)
        before = client.next_ids(5)  # the connection (and its reader thread) exists
        go_r, go_w = os.pipe()
        try:
            child = _Child(self, _take_batches(client, 700, 3), go=go_r)
        finally:
            os.close(go_r)
        parent, parent_error = [], None
        os.write(go_w, b"x")  # start together
        os.close(go_w)
        try:
            _take_batches(client, 1000, 2)(parent)
        except Exception as e:  # checked after the child is collected
            parent_error = e
        child_ids, error = child.result()
        self.assert_distinct(before, parent, child_ids)
        self.assertIsNone(error, "the child's calls failed")
        self.assertIsNone(parent_error, "the parent's calls failed")
        self.assertEqual((len(parent), len(child_ids)), (2000, 2100))
        stats = client.stats()
        self.assertEqual((stats["connects"], stats["node_failures"]), (1, 0), stats)

    def test_multiprocessing_fork_children_share_no_ids(self):
        server = self.server()
        client = self.client(server, prefetch=500)
        before = [client.next_id() for _ in range(10)] + client.next_ids(10)
        ctx = multiprocessing.get_context("fork")
        pipes, procs = [], []
        for _ in range(4):
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_mp_worker, args=(client, w, 1000), daemon=True)
            p.start()
            self.addCleanup(self._stop_process, p)
            w.close()
            pipes.append(r)
            procs.append(p)
        parent = [client.next_id() for _ in range(1000)]
        results = []
        for r, p in zip(pipes, procs):
            self.assertTrue(r.poll(CHILD_TIMEOUT), f"child {p.pid} sent nothing")
            results.append(r.recv())
            r.close()
            p.join(CHILD_TIMEOUT)
            self.assertFalse(p.is_alive(), f"child {p.pid} did not exit")
        self.assert_distinct(before, parent, *(ids for ids, _ in results))
        for ids, error in results:
            self.assertIsNone(error, "a child's calls failed")
            self.assertEqual(len(ids), 1000)

    @staticmethod
    def _stop_process(p):
        p.join(10)
        if p.is_alive():
            p.kill()  # our own child, by PID
            p.join(10)

    def test_parent_client_keeps_its_connection_after_children_exit(self):
        server = self.server()
        client = self.client(server, timeout=2.0)
        before = client.next_ids(10)
        conn = client._nodes[0].conn

        def body(ids):
            _take_batches(client, 50, 10)(ids)
            client.ping()
            client.close()  # a child closing its client leaves the parent's alone

        children = [_Child(self, body) for _ in range(3)]
        results = [c.result() for c in children]
        for ids, error in results:
            self.assertIsNone(error, "a child's calls failed")
            self.assertEqual(len(ids), 500)
        after = client.next_ids(100)
        client.ping()
        self.assert_distinct(before, after, *(ids for ids, _ in results))
        self.assertIs(client._nodes[0].conn, conn, "the parent's connection was replaced")
        self.assertTrue(conn.alive)
        stats = client.stats()
        self.assertEqual((stats["connects"], stats["node_failures"]), (1, 0), stats)

    def test_sequence_buffers_are_not_shared_with_a_forked_child(self):
        # A fake version 3 node: the values it sent are known, so the test can tell that the
        # child asked for its own rather than answer from the parent's buffer.
        fake = _support.FakeNode(
            _support.default_hello(version=3, max_request_frame=128), "serve",
            sequences={"orders": _support.FakeSequence()},
        )  # fmt: skip
        self.addCleanup(fake.close)
        client = Client([fake.addr], timeout=5.0, sequence_prefetch=500)
        self.addCleanup(client.close)
        before = [client.next_value("orders") for _ in range(10)]  # a buffer of 491 kept
        self.assertEqual(len(client._seqs["orders"].buffer), 491)

        def body(values):
            for _ in range(300):
                values.append(client.next_value("orders"))

        child = _Child(self, body)
        parent = [client.next_value("orders") for _ in range(300)]  # from its buffer
        child_values, error = child.result()
        self.assertIsNone(error, "the child's next_value() failed")
        self.assertEqual(len(child_values), 300)
        self.assert_distinct(before, parent, child_values)
        self.assertEqual(parent, list(range(11, 311)))
        self.assertGreater(min(child_values), 501, "the child answered from the parent's buffer")
        self.assertEqual(fake.connections, 2, "the child made its own connection")

    def test_pid_check_alone_resets_a_child(self):
        # As on a platform without os.register_at_fork: the at-fork hook does not know
        # this client, so only the pid check on the child's first call can catch the fork.
        server = self.server()
        client = self.client(server, prefetch=1000)
        before = [client.next_id() for _ in range(10)]
        registry = getattr(client_module, "_CLIENTS", None)
        if registry is not None:
            registry.discard(client)
        child = _Child(self, _take_one_by_one(client, 2000))
        parent = [client.next_id() for _ in range(2000)]
        child_ids, error = child.result()
        self.assert_distinct(before, parent, child_ids)
        self.assertIsNotNone(registry, "idgen_client.client._CLIENTS (the at-fork registry)")
        self.assertIsNone(error, "the child's next_id() failed")
        self.assertEqual(len(child_ids), 2000)


if __name__ == "__main__":
    unittest.main()
