"""(i) Named sequences against a real `idgen serve` (clients/vectors/SEQUENCES.md, "Tests
each client runs"): the sequences are created with `idgen seq create ... --data-dir DIR`
before `idgen serve --data-dir DIR` starts on the embedded store. Fails, never skips, when
the server binary is missing."""

import unittest

import _support
from idgen_client import Client, ServerError, protocol

SEQUENCES = [
    ["orders"],
    ["ledger", "--mode", "strict"],
    ["tiny", "--max", "5"],
    ["tiny.prefetched", "--max", "5"],
    ["prefetched"],
    ["prefetched.strict", "--mode", "strict"],
    ["big"],
]


def increasing(values):
    return all(a < b for a, b in zip(values, values[1:]))


class RealServerSequences(unittest.TestCase):
    server = None

    def setUp(self):
        if RealServerSequences.server is None:
            RealServerSequences.server = _support.Server(self, sequences=SEQUENCES)

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()
            cls.server = None

    def client(self, **kw):
        kw.setdefault("timeout", 10.0)  # strict values wait for a store commit
        c = Client([self.server.addr], **kw)
        self.addCleanup(c.close)
        return c

    def test_the_node_negotiates_version_5_which_has_the_sequences_of_3(self):
        client = self.client()
        self.assertIsInstance(client.next_value("orders"), int)
        self.assertEqual(client.nodes()[0]["hello"].version, 5)

    def check_unique_increasing(self, name, threads=4, calls=150):
        client = self.client()

        def work(i):
            got = []
            for k in range(calls):
                if k % 3 == 0:
                    got.extend(client.next_values(name, 1 + k % 5))
                else:
                    got.append(client.next_value(name))
            return got

        results = _support.run_threads(threads, work, timeout=180)
        all_values = [v for r in results for v in r]
        self.assertEqual(len(all_values), len(set(all_values)), f"{name}: a value repeated")
        for r in results:
            self.assertTrue(increasing(r), f"{name}: a thread's values decreased")
            self.assertTrue(all(1 <= v <= protocol.MAX_VALUE for v in r))
        stats = client.stats()
        self.assertEqual(stats["connects"], 1, "one connection shared by the threads")
        self.assertEqual(stats["values"], len(all_values))
        self.assertEqual(stats["node_failures"], 0)
        return all_values

    def test_a_dense_sequence_gives_unique_increasing_values(self):
        values = self.check_unique_increasing("orders")
        self.assertEqual(len(values), 4 * (100 + sum(1 + k % 5 for k in range(0, 150, 3))))

    def test_a_strict_sequence_gives_unique_increasing_values(self):
        self.check_unique_increasing("ledger", threads=4, calls=60)
        # Real-time order: a call that begins after another returned gets larger values.
        client = self.client()
        last = 0
        for _ in range(20):
            got = client.next_values("ledger", 2)
            self.assertGreater(got[0], last)
            self.assertTrue(increasing(got))
            last = got[-1]

    def test_an_unknown_name_fails_with_unknown_sequence(self):
        client = self.client()
        with self.assertRaises(ServerError) as cm:
            client.next_value("no-such-sequence")
        err = cm.exception
        self.assertEqual((err.status, err.name), (203, "UNKNOWN_SEQUENCE"))
        self.assertFalse(err.retry_elsewhere or err.closes_connection)
        self.assertIsInstance(client.next_value("orders"), int)  # the connection stays usable
        self.assertEqual(client.stats()["connects"], 1)

    def test_a_bad_name_fails_before_sending(self):
        client = self.client()
        client.next_value("orders")  # connected
        before = client.stats()
        for name in ("Orders", ".orders", "a/b", "x" * 65, ""):
            with self.subTest(name=name):
                with self.assertRaises(ValueError):
                    client.next_value(name)
        with self.assertRaises(ValueError):
            client.next_values("orders", 0)
        with self.assertRaises(ValueError):
            client.next_values("orders", client.layout.max_batch + 1)
        after = client.stats()
        self.assertEqual(after["value_requests"], before["value_requests"], "something was sent")
        self.assertEqual(after["connects"], 1)

    def test_a_small_max_fails_with_sequence_used_up_once_used_up(self):
        client = self.client()
        got = [client.next_value("tiny") for _ in range(5)]
        self.assertEqual(len(set(got)), 5)
        self.assertTrue(increasing(got))
        self.assertTrue(all(1 <= v <= 5 for v in got), got)
        for _ in range(2):  # and stays used up; no other node could help
            with self.assertRaises(ServerError) as cm:
                client.next_value("tiny")
            err = cm.exception
            self.assertEqual((err.status, err.name), (307, "SEQUENCE_USED_UP"))
            self.assertFalse(err.retry_elsewhere)
        self.assertEqual(client.stats()["node_failures"], 0)

    def test_prefetch_reaches_the_last_values_below_a_maximum(self):
        # A fetch of 100 is refused with only 5 values in the sequence: the call asks again
        # for exactly what it needs, so every value below the maximum is handed out.
        client = self.client(sequence_prefetch=100)
        self.assertEqual([client.next_value("tiny.prefetched") for _ in range(5)], [1, 2, 3, 4, 5])
        with self.assertRaises(ServerError) as cm:
            client.next_value("tiny.prefetched")
        self.assertEqual(cm.exception.status, 307)

    def test_prefetch_dense_costs_about_calls_over_k_requests(self):
        client = self.client(sequence_prefetch=100)
        got = [client.next_value("prefetched") for _ in range(2000)]
        self.assertEqual(len(set(got)), 2000)
        self.assertTrue(increasing(got))
        stats = client.stats()
        # The first call asks for exactly 1 and learns "dense"; then 100 at a time.
        self.assertLessEqual(stats["value_requests"], 1 + 2000 // 100 + 1, stats)
        self.assertGreaterEqual(stats["value_requests"], 2000 // 100, stats)
        self.assertEqual(stats["value_prefetch_served"], 2000 - stats["value_requests"])

    def test_prefetch_strict_sends_a_request_per_call(self):
        client = self.client(sequence_prefetch=100)
        got = [client.next_value("prefetched.strict") for _ in range(40)]
        got += client.next_values("prefetched.strict", 3)
        self.assertEqual(len(set(got)), 43)
        self.assertTrue(increasing(got))
        stats = client.stats()
        self.assertEqual(stats["value_requests"], 41)
        self.assertEqual(stats["values"], 43, "a strict value was kept")
        self.assertEqual(stats["value_prefetch_served"], 0)

    def test_max_batch_values_in_one_call(self):
        # A VALUES frame of max_batch values is one byte longer than an IDS frame of as many.
        client = self.client()
        n = client.layout.max_batch
        got = client.next_values("big", n)
        self.assertEqual(len(got), n)
        self.assertTrue(increasing(got))
        self.assertEqual(client.stats()["node_failures"], 0)


if __name__ == "__main__":
    unittest.main()
