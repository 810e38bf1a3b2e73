"""(h) Named sequences (protocol version 3) against fake nodes: the calls, the pre-send
checks, how each answer maps (clients/vectors/SEQUENCES.md), and prefetch for dense
sequences only. The real-server cases are in test_sequences_real.py."""

import struct
import time
import unittest

import _support
from _support import FakeNode, FakeSequence
from idgen_client import (
    Client,
    ProtocolError,
    SequencesUnsupportedError,
    ServerError,
    protocol,
)
from idgen_client import client as client_module

DENSE, STRICT = protocol.MODE_DENSE, protocol.MODE_STRICT


def v3_hello(**overrides):
    fields = dict(version=3, max_request_frame=128)
    fields.update(overrides)
    return _support.default_hello(**fields)


def node_state(client, addr):
    return next(n for n in client.nodes() if n["node"] == addr)


def increasing(values):
    return all(a < b for a, b in zip(values, values[1:]))


class Calls(unittest.TestCase):
    def fake(self, hello=None, mode="serve", **sequences):
        node = FakeNode(hello or v3_hello(), mode, sequences=sequences)
        self.addCleanup(node.close)
        return node

    def client(self, nodes, **kw):
        kw.setdefault("timeout", 2.0)
        c = Client([n.addr for n in nodes], **kw)
        self.addCleanup(c.close)
        return c

    def test_next_value_and_next_values_on_a_version_3_node(self):
        node = self.fake(orders=FakeSequence(start=42), ledger=FakeSequence(STRICT, 7, step=10))
        client = self.client([node])
        self.assertEqual(client.next_value("orders"), 42)
        self.assertEqual(client.next_values("orders", 3), [43, 44, 45])
        self.assertEqual(client.next_values("ledger", 2), [7, 17])
        self.assertEqual(client.next_value("ledger"), 27)
        self.assertEqual(
            node.value_requests, [("orders", 1), ("orders", 3), ("ledger", 2), ("ledger", 1)]
        )
        self.assertEqual(node.hellos, [protocol.encode_hello()])  # offered 1..=5
        self.assertEqual(node.hellos[0][-4:], b"\x00\x01\x00\x05")
        self.assertEqual(node_state(client, node.addr)["hello"].version, 3)
        stats = client.stats()
        self.assertEqual((stats["value_requests"], stats["values"]), (4, 7))
        self.assertEqual(stats["value_prefetch_served"], 0)
        self.assertEqual(len(client.next_ids(5)), 5)  # IDs on the same version 3 connection
        self.assertEqual(client.stats()["connects"], 1)

    def test_a_values_frame_of_max_batch_values_is_accepted(self):
        # 6 + 8 * max_batch bytes: one more than an IDS frame of max_batch IDs.
        node = self.fake(v3_hello(max_batch=1000), orders=FakeSequence())
        client = self.client([node])
        got = client.next_values("orders", 1000)
        self.assertEqual(got, list(range(1, 1001)))
        self.assertEqual(node_state(client, node.addr)["failures"], 0)

    def test_a_version_1_or_2_node_is_refused_before_sending_and_no_other_node_is_tried(self):
        for version in (1, 2):
            with self.subTest(version=version):
                old = self.fake(v3_hello(version=version), orders=FakeSequence())
                other = self.fake(orders=FakeSequence())
                client = self.client([old, other])
                for call in (lambda: client.next_value("orders"),
                             lambda: client.next_values("orders", 5)):  # fmt: skip
                    with self.assertRaises(SequencesUnsupportedError) as cm:
                        call()
                    err = cm.exception
                    self.assertEqual((err.version, err.required, err.node), (version, 3, old.addr))
                    self.assertIn(f"version {version}", str(err))
                    self.assertIn("need version 3", str(err))
                self.assertEqual(old.requests, 0, "nothing sent after the HELLO")
                self.assertEqual(old.value_requests, [])
                self.assertEqual(other.connections, 0, "no other node tried")
                self.assertFalse(node_state(client, old.addr)["down"])
                self.assertEqual(client.stats()["failovers"], 0)
                # The node still serves IDs over its version.
                self.assertEqual(len(client.next_ids(3)), 3)
                self.assertEqual(old.requests, 1)

    def test_bad_arguments_are_refused_before_anything_is_sent(self):
        node = self.fake(v3_hello(max_batch=10), orders=FakeSequence())
        client = self.client([node])
        bad_names = ["", "Orders", ".orders", "-x", "_x", "a/b", "a b", "caf\u00e9", "x" * 65,
                     "orders\n"]  # fmt: skip
        for name in bad_names:
            with self.subTest(name=name):
                with self.assertRaises(ValueError) as cm:
                    client.next_value(name)
                self.assertIn("sequence name", str(cm.exception))
        for name in (None, 7, ["orders"]):
            with self.assertRaises(TypeError):
                client.next_value(name)
        for n in (0, -1, protocol.MAX_VALUES_PER_CALL + 1):
            with self.assertRaises(ValueError):
                client.next_values("orders", n)
        for n in (1.0, "3", True, None):
            with self.assertRaises(TypeError):
                client.next_values("orders", n)
        self.assertEqual(node.connections, 0, "nothing needed a node so far")
        with self.assertRaises(ValueError) as cm:
            client.next_values("orders", 11)  # the node's max_batch is 10
        self.assertIn("max_batch", str(cm.exception))
        with self.assertRaises(ValueError):
            client.next_values("orders", 11)  # now checked against the known layout
        self.assertEqual(node.requests, 0)
        self.assertEqual(client.stats()["value_requests"], 0)
        self.assertEqual(len(client.next_values("orders", 10)), 10)
        self.assertEqual(node.value_requests, [("orders", 10)])

    def test_a_name_too_long_for_the_nodes_request_frame_limit_is_not_sent(self):
        node = self.fake(v3_hello(max_request_frame=64), **{"a" * 59: FakeSequence()})
        client = self.client([node])
        with self.assertRaises(ValueError) as cm:
            client.next_value("a" * 60)  # a 65-byte frame: the node would close (101)
        self.assertIn("at most 64 bytes", str(cm.exception))
        self.assertEqual(client.next_value("a" * 59), 1)  # 64 bytes
        self.assertEqual(node.value_requests, [("a" * 59, 1)])
        self.assertEqual(node_state(client, node.addr)["failures"], 0)


class Answers(unittest.TestCase):
    """SEQUENCES.md's table of answers."""

    def fake(self, mode="serve", status=300, hello=None, **sequences):
        node = FakeNode(hello or v3_hello(), mode, status=status, sequences=sequences)
        self.addCleanup(node.close)
        return node

    def test_statuses_that_fail_at_once_carry_the_status_and_try_no_other_node(self):
        cases = {
            203: ("UNKNOWN_SEQUENCE", "nope", None),
            204: ("INVALID_SEQUENCE_NAME", "orders", FakeSequence(status=204)),
            307: ("SEQUENCE_USED_UP", "orders", FakeSequence(max=0)),
            200: ("INVALID_COUNT", "orders", FakeSequence(status=200)),
            201: ("BATCH_TOO_LARGE", "orders", FakeSequence(status=201)),
        }
        for status, (name, seq_name, seq) in cases.items():
            for prefetch in (0, 10):
                with self.subTest(status=status, prefetch=prefetch):
                    first = self.fake(**({seq_name: seq} if seq else {}))
                    other = self.fake(**{seq_name: FakeSequence()})
                    with Client([first.addr, other.addr], sequence_prefetch=prefetch) as client:
                        with self.assertRaises(ServerError) as cm:
                            client.next_values(seq_name, 2)
                        err = cm.exception
                        self.assertEqual((err.status, err.name), (status, name))
                        self.assertFalse(err.retry_elsewhere)
                        self.assertFalse(err.closes_connection)
                        self.assertEqual(err.node, first.addr)
                        self.assertEqual(len(first.value_requests), 1, "no retry on the node")
                        self.assertEqual(other.connections, 0, "no other node tried")
                        state = node_state(client, first.addr)
                        self.assertFalse(state["down"])
                        self.assertTrue(state["connected"], "the connection stays usable")
                        self.assertEqual(client.stats()["failovers"], 0)
                        self.assertEqual(len(client.next_ids(2)), 2)
                        self.assertEqual(client.stats()["connects"], 1)

    def test_sequence_used_up_once_past_the_maximum(self):
        node = self.fake(tiny=FakeSequence(max=5))
        with Client([node.addr]) as client:
            got = [client.next_value("tiny") for _ in range(5)]
            self.assertEqual(got, [1, 2, 3, 4, 5])
            with self.assertRaises(ServerError) as cm:
                client.next_value("tiny")
            self.assertEqual(cm.exception.status, 307)

    def test_308_and_306_are_retried_on_the_next_node(self):
        for status in (308, 306):
            with self.subTest(status=status):
                busy = self.fake(orders=FakeSequence(status=status))
                good = self.fake(orders=FakeSequence(start=100))
                with Client([busy.addr, good.addr], backoff_min=5.0) as client:
                    self.assertEqual(client.next_values("orders", 3), [100, 101, 102])
                    self.assertEqual(busy.value_requests, [("orders", 3)])
                    self.assertEqual(good.value_requests, [("orders", 3)], "asked again")
                    state = node_state(client, busy.addr)
                    self.assertTrue(state["down"])
                    self.assertTrue(state["connected"], f"{status} keeps the connection")
                    self.assertEqual(state["last_error"].status, status)
                    self.assertEqual(client.stats()["failovers"], 1)
                    self.assertEqual(client.next_value("orders"), 103)  # sticks to `good`

    def test_308_on_the_only_node_is_raised_with_its_status(self):
        node = self.fake(orders=FakeSequence(status=308))
        with Client([node.addr], backoff_min=0.1, backoff_max=0.1) as client:
            with self.assertRaises(ServerError) as cm:
                client.next_value("orders")
            self.assertEqual((cm.exception.status, cm.exception.name), (308, "SEQUENCE_UNAVAILABLE"))
            self.assertTrue(cm.exception.retry_elsewhere)
            time.sleep(0.15)  # past the backoff: the same connection is asked again
            with self.assertRaises(ServerError):
                client.next_value("orders")
            self.assertEqual(len(node.value_requests), 2)
            self.assertEqual(node.connections, 1)

    def test_closing_statuses_and_broken_streams_fail_over(self):
        for mode, status in (("unavailable", 302), ("unavailable", 303), ("garbage", 0)):
            with self.subTest(mode=mode, status=status):
                bad = self.fake(mode, status, orders=FakeSequence())
                good = self.fake(orders=FakeSequence(start=9))
                with Client([bad.addr, good.addr], backoff_min=5.0) as client:
                    self.assertEqual(client.next_values("orders", 2), [9, 10])
                    state = node_state(client, bad.addr)
                    self.assertTrue(state["down"])
                    self.assertFalse(state["connected"])
                    self.assertEqual(len(bad.value_requests), 1)

    def test_an_answer_that_does_not_fit_the_request_is_a_protocol_error(self):
        answers = {
            "count": lambda count: _support.values_bytes(DENSE, list(range(1, count + 2))),
            "ids": lambda count: _support.ids_bytes(list(range(1, count + 1))),
            "decreasing": lambda count: _support.values_bytes(DENSE, [5, 4][:count] + [3] * (count - 2)),
            "zero": lambda count: _support.values_bytes(STRICT, list(range(0, count))),
            "mode": lambda count: struct.pack(">IBBI", 6 + 8 * count, 0x85, 9, count) + b"\0" * 8 * count,
        }  # fmt: skip
        for kind, answer in answers.items():
            with self.subTest(kind):
                node = self.fake(orders=FakeSequence(answer=answer))
                with Client([node.addr], backoff_min=5.0) as client:
                    with self.assertRaises(ProtocolError) as cm:
                        client.next_values("orders", 2)
                    if kind in ("decreasing", "zero", "mode"):
                        self.assertEqual(cm.exception.status, 100)
                    state = node_state(client, node.addr)
                    self.assertTrue(state["down"])
                    self.assertFalse(state["connected"], "the connection is dropped")


class Prefetch(unittest.TestCase):
    """``sequence_prefetch=K``: dense sequences only."""

    def setUp(self):
        self.node = FakeNode(
            v3_hello(),
            "serve",
            sequences={
                "orders": FakeSequence(DENSE),
                "ledger": FakeSequence(STRICT, start=1000),
            },
        )
        self.addCleanup(self.node.close)

    def client(self, k, **kw):
        kw.setdefault("timeout", 5.0)
        c = Client([self.node.addr], sequence_prefetch=k, **kw)
        self.addCleanup(c.close)
        return c

    def counts(self, name):
        return [c for n, c in self.node.value_requests if n == name]

    def test_off_by_default_every_call_asks_for_exactly_n(self):
        client = self.client(0)
        got = [client.next_value("orders") for _ in range(20)]
        self.assertEqual(got, list(range(1, 21)))
        self.assertEqual(self.counts("orders"), [1] * 20)
        self.assertEqual(client.stats()["value_prefetch_served"], 0)

    def test_dense_calls_cost_about_calls_over_k_requests(self):
        client = self.client(100)
        got = [client.next_value("orders") for _ in range(1000)]
        self.assertEqual(got, list(range(1, 1001)), "unique and increasing, no gap here")
        counts = self.counts("orders")
        # The first call asks for exactly 1 and learns the mode; then max(K, n) = 100 each.
        self.assertEqual(counts[0], 1)
        self.assertEqual(set(counts[1:]), {100})
        self.assertEqual(len(counts), 1 + 10)  # 1000 calls, about 1000 / 100 requests
        stats = client.stats()
        self.assertEqual(stats["value_requests"], 11)
        self.assertEqual(stats["value_prefetch_served"], 1000 - 11)

    def test_strict_calls_each_send_a_request_for_exactly_n(self):
        client = self.client(100)
        got = [client.next_value("ledger") for _ in range(30)]
        got += client.next_values("ledger", 4)
        self.assertEqual(got, list(range(1000, 1034)))
        self.assertEqual(self.counts("ledger"), [1] * 30 + [4])
        self.assertEqual(client.stats()["value_prefetch_served"], 0)
        self.assertEqual(client.stats()["values"], 34, "no strict value was kept")

    def test_first_call_asks_exactly_n_then_the_buffer_answers_and_refills(self):
        client = self.client(10)
        self.assertEqual(client.next_values("orders", 3), [1, 2, 3])  # learns: dense
        self.assertEqual(client.next_value("orders"), 4)  # asks 10: 4..13, keeps 5..13
        self.assertEqual(client.next_values("orders", 5), [5, 6, 7, 8, 9])  # buffer: 10..13
        # 4 kept, 6 asked for: the kept ones, then the first of a new max(10, 6) = 10.
        self.assertEqual(client.next_values("orders", 6), [10, 11, 12, 13, 14, 15])
        # 8 kept (16..23), n > K: asks max(10, 30) = 30 (24..53), keeps 46..53.
        self.assertEqual(client.next_values("orders", 30), list(range(16, 46)))
        self.assertEqual(client.next_values("orders", 8), list(range(46, 54)))  # the buffer
        self.assertEqual(len(client._seqs["orders"].buffer), 0)
        self.assertEqual(client.next_value("orders"), 54)
        self.assertEqual(self.counts("orders"), [3, 10, 10, 30, 10])
        self.assertEqual(list(client._seqs["orders"].buffer), list(range(55, 64)))

    def test_k_above_max_batch_asks_for_max_batch(self):
        node = FakeNode(v3_hello(max_batch=50), "serve", sequences={"orders": FakeSequence()})
        self.addCleanup(node.close)
        with Client([node.addr], sequence_prefetch=1000) as client:
            got = [client.next_value("orders") for _ in range(120)]
            self.assertEqual(got, list(range(1, 121)))
            self.assertEqual([c for _, c in node.value_requests], [1, 50, 50, 50])

    def test_unknown_sequence_empties_the_buffer_and_forgets_the_mode(self):
        client = self.client(10)
        client.next_value("orders")  # 1: learns dense
        client.next_value("orders")  # 2, keeps 3..11
        self.assertEqual(client.next_values("orders", 5), [3, 4, 5, 6, 7])  # keeps 8..11
        with self.node._lock:
            del self.node.sequences["orders"]  # dropped
        with self.assertRaises(ServerError) as cm:
            client.next_values("orders", 6)  # 4 kept are not enough: asks, 203
        self.assertEqual(cm.exception.status, 203)
        self.assertNotIn("orders", client._seqs)
        with self.node._lock:  # created again, strict, above every old value
            self.node.sequences["orders"] = FakeSequence(STRICT, start=500)
        self.assertEqual(client.next_value("orders"), 500, "the old kept values are gone")
        self.assertEqual(client.next_value("orders"), 501)
        self.assertEqual(self.counts("orders")[-3:], [10, 1, 1], "mode forgotten, then strict")

    def test_a_dense_name_that_answers_strict_keeps_nothing(self):
        client = self.client(10)
        client.next_value("orders")
        client.next_value("orders")  # keeps 3..11
        with self.node._lock:
            self.node.sequences["orders"].mode = STRICT
        self.assertEqual(client.next_values("orders", 9), list(range(3, 12)))  # from the buffer
        got = client.next_values("orders", 2)  # asks max(10, 2), answered strict
        self.assertEqual(got, [12, 13], "only the values asked for by the call")
        self.assertEqual(len(client._seqs["orders"].buffer), 0)
        self.assertEqual(client.next_value("orders"), 22)
        self.assertEqual(self.counts("orders"), [1, 10, 10, 1])

    def test_threads_take_each_value_once_in_increasing_order(self):
        client = self.client(64)
        results = _support.run_threads(
            8, lambda i: [client.next_value("orders") for _ in range(500)], timeout=120
        )
        all_values = [v for r in results for v in r]
        self.assertEqual(len(all_values), 4000)
        self.assertEqual(len(set(all_values)), 4000, "a value handed out twice")
        for r in results:
            self.assertTrue(increasing(r), "a thread's values decreased")
        stats = client.stats()
        kept = len(client._seqs["orders"].buffer)
        self.assertEqual(stats["values"], 4000 + kept, "every value received is handed or kept")
        # Up to 8 first calls of 1 before the mode is known, then about 4000 / 64.
        self.assertLessEqual(stats["value_requests"], 8 + 4000 // 64 + 2, stats)
        self.assertGreaterEqual(stats["value_requests"], 4000 // 64)

    def test_at_most_1024_names_are_kept_least_recently_used_first(self):
        names = [f"s{i}" for i in range(1030)]
        with self.node._lock:
            for name in names:
                self.node.sequences[name] = FakeSequence()
        client = self.client(5)
        for name in names:
            client.next_value(name)
        self.assertEqual(len(client._seqs), client_module.MAX_PREFETCHED_SEQUENCES)
        self.assertEqual(len(client._seqs), 1024)
        self.assertNotIn("s0", client._seqs)
        self.assertIn("s6", client._seqs)
        self.assertEqual(list(client._seqs)[-1], "s1029")
        client.next_value("s6")  # used again: now the most recent
        self.assertEqual(list(client._seqs)[-1], "s6")
        self.assertEqual(client.next_value("s0"), 2)  # forgotten: asks exactly 1 again
        self.assertEqual(self.counts("s0"), [1, 1])
        self.assertNotIn("s7", client._seqs, "s7 was the least recently used")

    def test_close_drops_the_buffers(self):
        client = self.client(50)
        client.next_value("orders")
        client.next_value("orders")
        self.assertEqual(len(client._seqs["orders"].buffer), 49)
        client.close()
        self.assertEqual(len(client._seqs), 0)

    def test_bad_sequence_prefetch(self):
        for k in (-1, protocol.MAX_VALUES_PER_CALL + 1):
            with self.assertRaises(ValueError):
                Client(["127.0.0.1:1"], sequence_prefetch=k)
        for k in (1.5, "10", None):
            with self.assertRaises(TypeError):
                Client(["127.0.0.1:1"], sequence_prefetch=k)


if __name__ == "__main__":
    unittest.main()
