"""The asyncio client (idgen_client.aio.AsyncClient) against real nodes (``/work``'s
``IDGEN_BIN``, started by the shared fixtures) and fake ones: concurrency and pipelining,
failover, timeouts, HELLO negotiation, count 0, options, prefetch and event loops."""

import asyncio
import socket
import time
import unittest
from unittest import mock

import _support
import idgen_client
from idgen_client import (
    AsyncClient,
    ClientClosedError,
    KeyNodeUnavailableError,
    NoNodeAvailable,
    OptionsUnsupportedError,
    UnavailableError,
    UuidsUnsupportedError,
    key_node,
    protocol,
)
from idgen_client.aio import AsyncClient as AioAsyncClient

TASKS = 5000


class AsyncTestCase(unittest.IsolatedAsyncioTestCase):
    """IsolatedAsyncioTestCase without asyncio's debug mode (its slow-callback lines)."""

    async def asyncSetUp(self):
        asyncio.get_running_loop().set_debug(False)


def region_server(test, region, *extra):
    """A real node in region ``region`` of a 1-bit region field: two memory-store nodes
    would otherwise lease the same worker IDs (and issue the same IDs)."""
    server = _support.Server(test, "--region-bits", "1", "--region", str(region), *extra)
    test.addCleanup(server.stop)
    return server


class Concurrency(AsyncTestCase):
    def setUp(self):
        self.a = region_server(self, 0)
        self.b = region_server(self, 1)

    async def client(self, nodes, **kw):
        kw.setdefault("timeout", 10.0)
        kw.setdefault("connect_timeout", 5.0)
        client = AsyncClient(nodes, **kw)
        self.addAsyncCleanup(client.aclose)
        return client

    def test_exported_from_the_package(self):
        self.assertIs(idgen_client.AsyncClient, AioAsyncClient)
        self.assertIn("AsyncClient", idgen_client.__all__)

    async def test_5000_concurrent_tasks_across_two_nodes_unique_and_valid(self):
        # One client prefers node a, the other node b: the tasks alternate between them, so
        # both nodes serve at once, and each client pipelines its 2,500 tasks on one
        # connection.
        first = await self.client([self.a.addr, self.b.addr])
        second = await self.client([self.b.addr, self.a.addr])
        clients = (first, second)
        started_ms = int(time.time() * 1000)

        async def task(i):
            client = clients[i % 2]
            return i % 2, await client.next_id()

        got = await asyncio.wait_for(asyncio.gather(*(task(i) for i in range(TASKS))), 120)
        ended_ms = int(time.time() * 1000)
        ids = [id_ for _, id_ in got]
        self.assertEqual(len(ids), TASKS)
        self.assertEqual(len(set(ids)), TASKS, "duplicate IDs")
        layout = await first.get_layout()
        self.assertTrue(layout.same_ids(await second.get_layout()))
        hellos = {
            n["node"]: n["hello"] for c in clients for n in c.nodes() if n["hello"] is not None
        }
        for which, id_ in got:
            parts = layout.decode(id_)  # raises for a value that is not an ID of the layout
            self.assertEqual(parts.region, which, "an ID from the other client's node")
            hello = hellos[(self.a.addr, self.b.addr)[which]]
            self.assertTrue(hello.worker_first <= parts.worker < hello.worker_first + hello.worker_count)
            self.assertTrue(started_ms - 2000 <= parts.unix_ms <= ended_ms + 2000, parts)
        for client in clients:
            stats = client.stats()
            self.assertEqual(stats["connects"], 1, stats)  # pipelined on one connection
            self.assertEqual(stats["requests"], TASKS // 2, stats)
            self.assertEqual(stats["ids"], TASKS // 2, stats)
            self.assertEqual(stats["node_failures"], 0, stats)
        # A task's own IDs increase while its client stays on one node.
        batches = await asyncio.gather(*(first.next_ids(50) for _ in range(100)))
        for batch in batches:
            self.assertEqual(batch, sorted(set(batch)))
            self.assertEqual(len(batch), 50)

    async def test_a_large_batch_is_split_by_max_batch_and_rejoined(self):
        server = _support.Server(self, "--max-batch", "1000")
        self.addCleanup(server.stop)
        client = await self.client([server.addr])
        ids = await client.next_ids(4500)
        self.assertEqual(len(ids), 4500)
        self.assertEqual(ids, sorted(set(ids)))
        self.assertEqual(client.stats()["requests"], 5)
        self.assertGreater(await client.ping(), 0)

    async def test_prefetch_pool_serves_5000_tasks_without_duplicates(self):
        client = await self.client([self.a.addr], prefetch=1000)
        async with client:
            ids = await asyncio.wait_for(
                asyncio.gather(*(client.next_id() for _ in range(TASKS))), 120
            )
        self.assertEqual(len(set(ids)), TASKS)
        stats = client.stats()
        self.assertEqual(stats["prefetch_served"], TASKS, stats)
        self.assertGreaterEqual(stats["prefetch_refills"], TASKS // 1000, stats)
        with self.assertRaises(ClientClosedError):
            await client.next_id()

    async def test_failover_when_a_node_is_stopped_mid_run(self):
        doomed = region_server(self, 0)
        survivor = region_server(self, 1)
        client = await self.client(
            [doomed.addr, survivor.addr], timeout=2.0, backoff_min=0.5
        )
        killed = asyncio.Event()
        after_kill_calls = 30

        async def work():
            got = []
            calls_after = 0
            deadline = time.monotonic() + 60
            while calls_after < after_kill_calls and time.monotonic() < deadline:
                was_killed = killed.is_set()
                ids = await client.next_ids(25)
                self.assertEqual(len(ids), 25)
                got.append((was_killed, ids))
                if was_killed:
                    calls_after += 1
            return got

        workers = [asyncio.ensure_future(work()) for _ in range(50)]
        for _ in range(600):  # wait (bounded) until IDs flow from the first node
            if client.stats()["ids"] >= 5000:
                break
            await asyncio.sleep(0.01)
        doomed.kill()  # SIGKILL, by PID
        killed.set()
        results = await asyncio.wait_for(asyncio.gather(*workers), 120)

        layout = await client.get_layout()
        all_ids = [i for r in results for _, ids in r for i in ids]
        self.assertEqual(len(all_ids), len(set(all_ids)), "duplicate IDs across failover")
        self.assertEqual({layout.decode(i).region for i in all_ids}, {0, 1})
        for r in results:
            tail = [ids for was_killed, ids in r if was_killed]
            self.assertEqual(len(tail), after_kill_calls)
            self.assertTrue(all(layout.decode(i).region == 1 for ids in tail for i in ids))
        stats = client.stats()
        self.assertGreaterEqual(stats["failovers"], 1, stats)
        self.assertGreaterEqual(stats["node_failures"], 1, stats)
        states = {n["node"]: n for n in client.nodes()}
        self.assertIsInstance(states[doomed.addr]["last_error"], UnavailableError)
        self.assertFalse(states[survivor.addr]["down"])


class Timeouts(AsyncTestCase):
    def fake(self, mode="serve", **hello):
        node = _support.FakeNode(_support.default_hello(**hello), mode)
        self.addCleanup(node.close)
        return node

    def client(self, nodes, **kw):
        client = AsyncClient(nodes, **kw)
        self.addAsyncCleanup(client.aclose)
        return client

    async def test_a_node_that_never_answers_times_out_with_a_clear_error(self):
        # That the call then fails over is a scenario (no_answer_in_time_is_retried_...).
        silent = self.fake("silent")
        client = self.client([silent.addr], timeout=0.3, backoff_min=5.0)
        start = time.monotonic()
        with self.assertRaises(UnavailableError) as caught:
            await client.next_ids(3)
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertIn("no answer within 0.3s", str(caught.exception))
        self.assertEqual(silent.requests, 1)
        self.assertTrue(client.nodes()[0]["down"])

    async def test_many_tasks_waiting_on_a_silent_node_all_fail_over(self):
        silent = self.fake("silent")
        live = self.fake("serve")
        client = self.client([silent.addr, live.addr], timeout=0.5, backoff_min=5.0)
        got = await asyncio.wait_for(asyncio.gather(*(client.next_id() for _ in range(200))), 10)
        self.assertEqual(sorted(got), sorted(set(got)))
        self.assertEqual(len(got), 200)
        self.assertEqual(client.stats()["node_failures"], 1)

    async def test_a_listener_that_accepts_but_never_says_hello_fails_within_connect_timeout(self):
        # The kernel accepts the TCP connection into the backlog; nothing ever reads HELLO.
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        self.addCleanup(listener.close)
        host, port = listener.getsockname()
        client = self.client([f"{host}:{port}"], connect_timeout=0.4, timeout=5.0)
        start = time.monotonic()
        with self.assertRaises(UnavailableError) as caught:
            await client.next_id()
        self.assertLess(time.monotonic() - start, 1.5)
        self.assertIn("no HELLO_OK within connect_timeout", str(caught.exception))

    def resolving_to(self, *addrs):
        infos = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a) for a in addrs]
        patch = mock.patch.object(socket, "getaddrinfo", return_value=infos)
        patch.start()
        self.addCleanup(patch.stop)

    def silent_address(self):
        s = _support.SilentAddress(self)
        self.addCleanup(s.close)
        return s.addr

    async def test_every_address_is_tried_each_with_its_share_of_the_connect_timeout(self):
        fake = self.fake("serve")
        host, port = fake.addr.rsplit(":", 1)
        self.resolving_to(self.silent_address(), (host, int(port)))
        client = self.client(["idgen.test:7420"], connect_timeout=1.0, timeout=5.0)
        start = time.monotonic()
        self.assertEqual(len(await client.next_ids(3)), 3)
        self.assertLess(time.monotonic() - start, 1.0)

    async def test_silent_addresses_fail_within_one_connect_timeout(self):
        self.resolving_to(self.silent_address(), self.silent_address(), self.silent_address())
        client = self.client(["idgen.test:7420"], connect_timeout=0.6, timeout=5.0)
        start = time.monotonic()
        with self.assertRaises(UnavailableError) as caught:
            await client.next_id()
        self.assertLess(time.monotonic() - start, 1.2, "each attempt had the whole timeout")
        self.assertIn("timed out", str(caught.exception))
        self.assertIn("3 addresses tried", str(caught.exception))

    async def test_all_nodes_down_raises_no_node_available(self):
        a = f"127.0.0.1:{_support.unused_port()}"
        b = f"127.0.0.1:{_support.unused_port()}"
        client = self.client([a, b], connect_timeout=0.5)
        with self.assertRaises(NoNodeAvailable) as caught:
            await client.next_id()
        self.assertEqual(set(caught.exception.errors), {a, b})
        self.assertEqual(set(caught.exception.retry_in), {a, b})


class Protocol(AsyncTestCase):
    """What is sent: HELLO 1..=5, GET_RANGES from version 2, nothing for refused counts."""

    def fake(self, mode="serve", **hello):
        hello.setdefault("max_request_frame", 128)
        node = _support.FakeNode(_support.default_hello(**hello), mode)
        self.addCleanup(node.close)
        return node

    def client(self, nodes, **kw):
        kw.setdefault("timeout", 5.0)
        client = AsyncClient(nodes, **kw)
        self.addAsyncCleanup(client.aclose)
        return client

    async def test_hello_offers_1_to_5_and_ranges_are_used_from_version_2(self):
        for version, op in ((1, protocol.OP_GET_IDS), (2, protocol.OP_GET_RANGES), (5, protocol.OP_GET_RANGES)):
            node = self.fake(version=version)
            client = self.client([node.addr])
            ids = await client.next_ids(2500)
            self.assertEqual(ids, node.ids_by_connection[0])
            self.assertEqual(node.hellos, [protocol.encode_hello(1, 5)])
            self.assertEqual(set(node.ops), {op}, version)
            self.assertEqual(client.nodes()[0]["hello"].version, version)

    async def test_uuids_from_version_4_and_refused_below(self):
        node = self.fake(version=4)
        client = self.client([node.addr])
        uuids = await client.next_uuids(10)
        self.assertEqual([u.version for u in uuids], [7] * 10)
        self.assertEqual(uuids, sorted(uuids))
        parts = await client.decode_uuid(uuids[0])
        self.assertEqual(parts.id, node.ids_by_connection[0][0])
        self.assertEqual((await client.next_uuid()).version, 7)
        old = self.fake(version=3)
        client = self.client([old.addr])
        with self.assertRaises(UuidsUnsupportedError):
            await client.next_uuids(1)
        self.assertEqual(old.requests, 0)

    async def test_count_0_is_refused_before_anything_is_sent(self):
        node = self.fake(version=5)
        client = self.client([node.addr])
        for call in (
            lambda: client.next_ids(0),
            lambda: client.next_ids(-1),
            lambda: client.next_ids(0, after=5),
            lambda: client.next_ids(0, idempotency_key="k"),
            lambda: client.next_uuids(0),
            lambda: client.next_values("orders", 0),
            lambda: client.next_masked_ids(0),
        ):
            with self.assertRaises(ValueError) as caught:
                await call()
            self.assertIn("n must be 1 to", str(caught.exception))
        with self.assertRaises(TypeError):
            await client.next_ids(True)
        with self.assertRaises(TypeError):
            await client.next_ids(2.0)
        self.assertEqual((node.connections, node.requests), (0, 0))

    async def test_options_need_version_5_and_keys_go_to_their_node_only(self):
        old = self.fake(version=4)
        client = self.client([old.addr])
        with self.assertRaises(OptionsUnsupportedError):
            await client.next_ids(1, after=5)
        self.assertEqual(old.requests, 0)

        down = self.fake("unavailable", version=5)
        up = self.fake("serve", version=5)
        client = self.client([down.addr, up.addr])
        key = next(f"k{i}" for i in range(1000) if key_node(f"k{i}", 2) == 0)
        with self.assertRaises(KeyNodeUnavailableError) as caught:
            await client.next_ids(2, idempotency_key=key)
        self.assertEqual(caught.exception.status, 300)
        self.assertEqual(up.requests, 0)

    async def test_cancelled_tasks_leave_the_other_answers_in_order(self):
        node = self.fake()
        client = self.client([node.addr])
        warm = await client.next_ids(2)  # the connection exists: every task submits at once
        tasks = [asyncio.ensure_future(client.next_ids(3)) for _ in range(100)]
        await asyncio.sleep(0)  # each task has written its request and waits for its answer
        for t in tasks[::2]:
            t.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        sent = node.ids_by_connection[0]
        self.assertEqual(sent[:2], warm)
        for i, got in enumerate(done):
            if i % 2:
                self.assertEqual(got, sent[2 + 3 * i : 5 + 3 * i], i)  # its own frame's answer
            else:
                self.assertIsInstance(got, asyncio.CancelledError)
        after = await client.next_ids(3)  # the dropped answers did not shift later ones
        self.assertEqual(after, sent[302:305])
        self.assertEqual(client.stats()["connects"], 1)

    async def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            AsyncClient([])
        with self.assertRaises(ValueError):
            AsyncClient(["a:1", "a:1"])
        with self.assertRaises(ValueError):
            AsyncClient(["nohost"])
        with self.assertRaises(ValueError):
            AsyncClient(["127.0.0.1:7420"], timeout=0)
        with self.assertRaises(ValueError):
            AsyncClient(["127.0.0.1:7420"], prefetch=-1)
        with self.assertRaises(ValueError):
            AsyncClient(["127.0.0.1:7420"], server_hostname="x")  # needs TLS


class Loops(unittest.TestCase):
    """A client belongs to one event loop; a closed loop's successor starts afresh."""

    def test_a_client_outlives_asyncio_run_and_refuses_a_second_open_loop(self):
        node = _support.FakeNode(_support.default_hello(), "serve")
        self.addCleanup(node.close)
        client = AsyncClient([node.addr], timeout=5.0)
        first = asyncio.run(client.next_ids(3))
        second = asyncio.run(client.next_ids(3))  # the first loop is closed: reconnects
        self.assertEqual(node.connections, 2)
        self.assertGreater(second[0], first[-1])

        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(client.next_id())
            with self.assertRaises(RuntimeError) as caught:
                asyncio.run(client.next_id())
            self.assertIn("another event loop", str(caught.exception))
            loop.run_until_complete(client.aclose())
        finally:
            loop.close()
        with self.assertRaises(ClientClosedError):
            asyncio.run(client.next_id())


if __name__ == "__main__":
    unittest.main()
