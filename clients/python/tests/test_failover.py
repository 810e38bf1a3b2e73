"""(d) Failover across nodes and (f) bad input and bad servers: what the shared behaviour
scenarios (clients/vectors/scenarios.json, run by test_scenarios.py) cannot say: a real node
killed under load, the errors' details, backoff timing, connections kept, split batches and
threads across a 305, layouts."""

import threading
import time
import unittest

import _support
from idgen_client import (
    Client,
    ClientClosedError,
    NoNodeAvailable,
    ProtocolError,
    ServerError,
    UnavailableError,
)


def node_state(client, addr):
    return next(n for n in client.nodes() if n["node"] == addr)


class Failover(unittest.TestCase):
    def test_one_node_killed_mid_stream_one_answering_300_all_calls_succeed(self):
        # Two real nodes with disjoint worker IDs (regions 0 and 1 of a 1-bit region field:
        # each uses the memory store, so they would otherwise lease the same workers).
        doomed = _support.Server(self, "--region-bits", "1", "--region", "0")
        self.addCleanup(doomed.stop)
        survivor = _support.Server(self, "--region-bits", "1", "--region", "1")
        self.addCleanup(survivor.stop)
        with Client([survivor.addr]) as probe:
            layout = probe.layout
        fake = _support.FakeNode(
            _support.default_hello(
                epoch_ms=layout.epoch_ms, region_bits=1, worker_first=600, worker_count=1
            ),
            "unavailable",
        )
        self.addCleanup(fake.close)

        # Order matters: after the kill, calls start at the dead node, go on to the fake
        # (ERROR 300) and end on the survivor.
        client = Client([doomed.addr, fake.addr, survivor.addr], timeout=2.0, backoff_min=0.5)
        self.addCleanup(client.close)
        killed = threading.Event()
        received = [0]
        lock = threading.Lock()
        after_kill_calls = 40

        def work(i):
            got = []
            calls_after = 0
            deadline = time.monotonic() + 60
            for _ in range(100000):  # bounded in count and time
                if calls_after >= after_kill_calls or time.monotonic() > deadline:
                    break
                was_killed = killed.is_set()
                ids = client.next_ids(25)
                self.assertEqual(len(ids), 25)
                got.append((was_killed, ids))
                with lock:
                    received[0] += 25
                if was_killed:
                    calls_after += 1
            return got

        runner = {}
        t = threading.Thread(
            target=lambda: runner.setdefault("r", _support.run_threads(4, work, timeout=90))
        )
        t.start()
        for _ in range(600):  # wait (bounded) until IDs flow from the first node
            if received[0] >= 5000:
                break
            time.sleep(0.01)
        doomed.kill()
        killed.set()
        t.join(120)
        self.assertFalse(t.is_alive(), "worker threads did not finish")
        self.assertIn("r", runner, "a worker thread failed")

        results = runner["r"]
        all_ids = [i for r in results for _, ids in r for i in ids]
        self.assertEqual(len(all_ids), len(set(all_ids)), "duplicate IDs across failover")
        regions = {client.decode(i).region for i in all_ids}
        self.assertEqual(regions, {0, 1}, "IDs must come from the first node, then the survivor")
        # Every call issued after the kill was served by the survivor (region 1).
        for r in results:
            tail = [ids for was_killed, ids in r if was_killed]
            self.assertEqual(len(tail), after_kill_calls)
            self.assertTrue(all(client.decode(i).region == 1 for ids in tail for i in ids))
        self.assertGreaterEqual(fake.requests, 1, "the fake node was never asked")
        stats = client.stats()
        self.assertGreaterEqual(stats["failovers"], 1)
        self.assertGreaterEqual(stats["node_failures"], 2)
        self.assertIsInstance(node_state(client, doomed.addr)["last_error"], UnavailableError)
        fake_error = node_state(client, fake.addr)["last_error"]
        self.assertIsInstance(fake_error, ServerError)
        self.assertEqual(fake_error.status, 300)
        self.assertTrue(fake_error.retry_elsewhere)

    def test_all_nodes_down_raises_no_node_available_listing_each_error(self):
        # That the call fails is a scenario (every_node_down_is_unavailable); here: what
        # NoNodeAvailable says, and no attempt while every node backs off.
        a = f"127.0.0.1:{_support.unused_port()}"
        b = f"127.0.0.1:{_support.unused_port()}"
        with Client([a, b], connect_timeout=0.5, backoff_min=5.0) as client:
            with self.assertRaises(NoNodeAvailable) as cm:
                client.next_id()
            self.assertEqual(set(cm.exception.errors), {a, b})
            for err in cm.exception.errors.values():
                self.assertIsInstance(err, UnavailableError)
            self.assertIsInstance(cm.exception, UnavailableError)
            # Both are backing off now: no attempt at all, still a clear error.
            start = time.monotonic()
            with self.assertRaises(NoNodeAvailable) as cm:
                client.next_id()
            self.assertLess(time.monotonic() - start, 0.5)
            self.assertEqual(set(cm.exception.retry_in), {a, b})
            self.assertIn("retried in", str(cm.exception))

    def test_backoff_doubles_and_is_capped(self):
        dead = f"127.0.0.1:{_support.unused_port()}"
        with Client([dead], backoff_min=0.3, backoff_max=0.9) as client:
            expected = [0.3, 0.6, 0.9, 0.9]
            for k, delay in enumerate(expected):
                with self.assertRaises(UnavailableError):
                    client.next_id()
                state = node_state(client, dead)
                self.assertEqual(state["failures"], k + 1)
                self.assertLessEqual(state["retry_in"], delay + 0.01)
                self.assertGreater(state["retry_in"], delay - 0.25)
                with self.assertRaises(NoNodeAvailable):  # skipped while backing off
                    client.next_id()
                time.sleep(delay + 0.05)

    def test_node_recovers_after_backoff(self):
        server = _support.Server(self)
        self.addCleanup(server.stop)
        with Client([server.addr], backoff_min=0.5, timeout=5.0) as client:
            client.next_id()
            with client._nodes[0].lock:  # simulate a failure report on the live connection
                conn = client._nodes[0].conn
            client._mark_down(client._nodes[0], conn, UnavailableError("test", server.addr))
            with self.assertRaises(NoNodeAvailable):
                client.next_id()
            time.sleep(0.6)
            self.assertIsInstance(client.next_id(), int)
            self.assertEqual(node_state(client, server.addr)["failures"], 0)
            self.assertEqual(client.stats()["connects"], 2)


class ServerStatuses(unittest.TestCase):
    """How 3xx statuses that keep the connection open and 305 (which closes it) are handled."""

    def test_300_keeps_the_connection_across_the_backoff(self):
        # That 300 fails over is a scenario (clients/vectors/scenarios.json); here: the
        # connection it leaves open is used again once the backoff has passed.
        fake = _support.FakeNode(_support.default_hello(), "unavailable", 300)
        self.addCleanup(fake.close)
        with Client([fake.addr], backoff_min=0.2, backoff_max=0.2) as client:
            before = fake.connections
            for _ in range(3):
                with self.assertRaises(ServerError) as cm:
                    client.next_id()
                self.assertEqual(cm.exception.status, 300)
                self.assertTrue(node_state(client, fake.addr)["connected"])
                time.sleep(0.25)  # past the backoff: the same connection is used again
            self.assertEqual(fake.connections - before, 1)
            self.assertEqual(client.stats()["connects"], 1)

    def test_305_in_a_split_batch_never_hands_out_the_answered_part(self):
        # That a 305 reconnects to the same node is a scenario; here: a split batch, and the
        # new HELLO_OK's range is the one used afterwards.
        fake = _support.FakeNode(
            _support.default_hello(max_batch=10, worker_first=5), "range_changed", serve_before=1,
            hello_after=_support.default_hello(max_batch=10, worker_first=9),
        )  # fmt: skip
        self.addCleanup(fake.close)
        # A long backoff: a client that counted the node as broken would fail the next call.
        with Client([fake.addr], backoff_min=5.0, timeout=2.0) as client:
            ids = client.next_ids(25)  # 10 + 10 + 5: the first part answered, then 305
            partial = fake.ids_by_connection[0]
            self.assertEqual(len(partial), 10, "the fake answered the first part")
            self.assertEqual(len(ids), 25)
            self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])))
            self.assertFalse(set(ids) & set(partial), "IDs of the partly answered batch")
            self.assertEqual(ids, fake.ids_by_connection[1])
            state = node_state(client, fake.addr)
            self.assertEqual((state["down"], state["failures"]), (False, 0))
            self.assertEqual(state["hello"].worker_first, 9, "the new HELLO_OK's range")
            self.assertEqual(len(client.next_ids(4)), 4)
            stats = client.stats()
            self.assertEqual((stats["connects"], stats["node_failures"]), (2, 0), stats)

    def test_305_with_requests_in_flight_from_several_threads(self):
        fake = _support.FakeNode(_support.default_hello(), "range_changed", serve_before=10)
        self.addCleanup(fake.close)
        with Client([fake.addr], backoff_min=5.0, timeout=2.0) as client:
            start = time.monotonic()
            results = _support.run_threads(
                4, lambda i: [i for _ in range(25) for i in client.next_ids(2)], timeout=30
            )
            self.assertLess(time.monotonic() - start, 10.0)
            all_ids = [i for r in results for i in r]
            self.assertEqual(len(all_ids), 200)
            self.assertEqual(len(set(all_ids)), 200)
            self.assertEqual(fake.connections, 2)
            self.assertEqual(client.stats()["node_failures"], 0)


class BadInput(unittest.TestCase):
    def test_negative_and_non_int_counts_are_refused_before_connecting(self):
        # Count 0 is a scenario (count_0_is_refused_before_sending).
        with Client(["127.0.0.1:1"]) as client:
            with self.assertRaises(ValueError) as cm:
                client.next_ids(-1)
            self.assertIn("not -1", str(cm.exception))
            with self.assertRaises(TypeError):
                client.next_ids(1.5)
            self.assertEqual(client.stats()["connects"], 0)

    def test_garbage_raises_protocol_error_and_marks_the_node_down(self):
        garbage = _support.FakeNode(_support.default_hello(), "garbage")
        self.addCleanup(garbage.close)
        with Client([garbage.addr], backoff_min=5.0) as client:
            with self.assertRaises(ProtocolError) as cm:
                client.next_id()
            self.assertEqual(cm.exception.status, 100)
            state = node_state(client, garbage.addr)
            self.assertTrue(state["down"])
            self.assertFalse(state["connected"])
            self.assertIsInstance(state["last_error"], ProtocolError)
            with self.assertRaises(NoNodeAvailable):
                client.next_id()

    def test_a_node_with_another_layout_is_refused(self):
        server = _support.Server(self)
        self.addCleanup(server.stop)
        odd = _support.FakeNode(_support.default_hello(epoch_ms=12345), "unavailable")
        self.addCleanup(odd.close)
        with Client([server.addr, odd.addr]) as client:
            client.next_id()
            server.kill()
            with self.assertRaises(NoNodeAvailable) as cm:
                client.next_id()
            self.assertIn("layout", str(cm.exception.errors[odd.addr]))

    def test_closed_client_raises(self):
        server = _support.Server(self)
        self.addCleanup(server.stop)
        client = Client([server.addr])
        client.next_id()
        client.close()
        with self.assertRaises(ClientClosedError):
            client.next_id()

    def test_bad_constructor_arguments(self):
        for kwargs in ({"timeout": 0}, {"backoff_min": 2, "backoff_max": 1}, {"prefetch": -1},
                       {"prefetch": 10, "low_water": 10}):
            with self.assertRaises(ValueError):
                Client(["127.0.0.1:1"], **kwargs)
        for nodes in ([], ["nohost"], ["h:0"], ["a:1", "a:1"]):
            with self.assertRaises(ValueError):
                Client(nodes)


if __name__ == "__main__":
    unittest.main()
