"""(c) Against a real `idgen serve`: concurrency, uniqueness, order, batch splitting, decode."""

import threading
import time
import unittest
import uuid

import _support
from idgen_client import Client, ServerError


class RealServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = None

    def setUp(self):
        if RealServer.server is None:
            RealServer.server = _support.Server(self)

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()
            cls.server = None

    def client(self, **kw):
        kw.setdefault("timeout", 5.0)  # generous: CI machines are shared with Rust builds
        c = Client([self.server.addr], **kw)
        self.addCleanup(c.close)
        return c

    def test_live_ids_lie_in_the_bounds_of_their_time(self):
        client = self.client()
        ids = client.next_ids(5000)
        layout = client.layout
        times = [layout.decode(i).unix_ms for i in ids]
        first, last = min(times), max(times)
        lo, hi = layout.bounds(first, last + 1)
        self.assertTrue(all(lo <= i < hi for i in ids), (lo, hi))
        # The first millisecond's bounds hold exactly its IDs; the next one's none of them.
        lo, hi = layout.bounds(first, first + 1)
        self.assertEqual([i for i in ids if lo <= i < hi], [i for i, t in zip(ids, times) if t == first])
        lo, hi = layout.bounds(last + 1, last + 2)
        self.assertFalse(any(lo <= i < hi for i in ids))
        for i, t in zip(ids[:50], times):
            self.assertLessEqual(layout.min_id_at(t), i)
            self.assertLessEqual(i, layout.max_id_at(t))

    def test_uuids_are_version_7_increasing_and_made_from_the_connections_ids(self):
        client = self.client()
        before = client.next_ids(1)[0]
        max_batch = client.layout.max_batch
        one = client.next_uuid()
        many = client.next_uuids(max_batch + 10)  # two GET_UUIDS, re-joined
        after = client.next_ids(1)[0]
        got = [one] + many
        self.assertEqual(len(got), max_batch + 11)
        self.assertTrue(all(isinstance(u, uuid.UUID) for u in got))
        self.assertTrue(all(u.version == 7 and u.variant == uuid.RFC_4122 for u in got))
        self.assertTrue(all(a < b for a, b in zip(got, got[1:])), "strictly increasing")
        ids = [client.decode_uuid(u).id for u in got]
        self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])))
        self.assertLess(before, ids[0], "they continue the connection's IDs")
        self.assertLess(ids[-1], after)
        parts = client.decode_uuid(one)
        self.assertEqual(parts.unix_ms, one.int >> 80)
        self.assertLess(abs(parts.unix_ms - time.time() * 1000), 60_000, "made now")
        self.assertEqual(client.stats()["uuid_requests"], 3)

    def test_20000_ids_from_8_threads_unique_and_increasing_per_thread(self):
        client = self.client(timeout=5.0)
        per_thread = 2500

        def work(i):
            got = []
            for k in range(10000):  # bounded; ends long before by count
                if len(got) >= per_thread:
                    break
                if k % 2 == 0:
                    got.append(client.next_id())
                else:
                    got.extend(client.next_ids(min(1 + (k % 7), per_thread - len(got))))
            return got

        start = time.monotonic()
        results = _support.run_threads(8, work, timeout=120)
        elapsed = time.monotonic() - start
        all_ids = [i for r in results for i in r]
        self.assertEqual(len(all_ids), 20000)
        self.assertEqual(len(set(all_ids)), 20000, "duplicate IDs")
        for r in results:
            self.assertEqual(len(r), per_thread)
            self.assertTrue(all(a < b for a, b in zip(r, r[1:])), "a thread's IDs decreased")
        stats = client.stats()
        self.assertEqual(stats["connects"], 1, "one connection shared by all threads")
        self.assertEqual(stats["ids"], 20000)
        print(f"\n  20000 IDs from 8 threads in {elapsed:.2f}s ({stats['requests']} requests)")

    def test_next_ids_150000_is_split_by_max_batch_and_rejoined(self):
        client = self.client(timeout=10.0)
        max_batch = client.layout.max_batch
        before = client.stats()["requests"]
        ids = client.next_ids(150000)
        self.assertEqual(len(ids), 150000)
        self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])), "not strictly increasing")
        parts = -(-150000 // max_batch)
        self.assertGreater(parts, 1, "150000 must need more than one GET_IDS")
        self.assertEqual(client.stats()["requests"] - before, parts)

    def test_split_with_a_small_server_max_batch(self):
        server = _support.Server(self, "--max-batch", "1000")
        self.addCleanup(server.stop)
        with Client([server.addr], timeout=10.0) as client:
            self.assertEqual(client.layout.max_batch, 1000)
            ids = client.next_ids(150000)
            self.assertEqual(len(ids), 150000)
            self.assertEqual(len(set(ids)), 150000)
            self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])))
            self.assertEqual(client.stats()["requests"], 150)
            self.assertEqual(len(client.next_ids(1000)), 1000)
            self.assertEqual(len(client.next_ids(1001)), 1001)

    def test_decode_agrees_with_the_layout(self):
        client = self.client()
        ids = client.next_ids(100)
        layout = client.layout
        hello = client.nodes()[0]["hello"]
        self.assertEqual(layout.timestamp_bits + layout.worker_bits + layout.sequence_bits, 63)
        now_ms = time.time() * 1000
        for id_ in ids:
            parts = client.decode(id_)
            self.assertLess(abs(parts.unix_ms - now_ms), 60000)
            self.assertEqual(parts.unix_ms, layout.epoch_ms + parts.timestamp)
            self.assertGreaterEqual(parts.worker, hello.worker_first)
            self.assertLess(parts.worker, hello.worker_first + hello.worker_count)
            self.assertLess(parts.sequence, 1 << layout.sequence_bits)
            self.assertEqual(parts.region, 0)
            rebuilt = (
                (parts.timestamp << (layout.worker_bits + layout.sequence_bits))
                | (parts.worker << layout.sequence_bits)
                | parts.sequence
            )
            self.assertEqual(rebuilt, id_)

    def test_ping_and_pipelined_pings_with_ids(self):
        client = self.client()
        self.assertGreaterEqual(client.ping(), 0.0)
        def mixed(i):
            for _ in range(50):
                if i % 2:
                    client.ping()
                else:
                    client.next_ids(10)

        _support.run_threads(4, mixed, timeout=60)
        self.assertEqual(client.stats()["pings"], 101)

    def test_count_0_is_refused_before_anything_is_sent(self):
        # clients/vectors/CONFIG.md, "Count 0": ValueError, like a negative count, with no
        # request on the wire and no connection made for it.
        client = self.client()
        calls = [
            lambda: client.next_ids(0),
            lambda: client.next_ids(0, after=1),
            lambda: client.next_ids(0, idempotency_key="k"),
            lambda: client.next_masked_ids(0),
            lambda: client.next_uuids(0),
            lambda: client.next_values("orders", 0),
        ]
        for call in calls:
            with self.assertRaises(ValueError):
                call()
        self.assertEqual(client.stats()["connects"], 0)
        self.assertEqual(client.stats()["requests"], 0)
        self.assertIsInstance(client.next_id(), int)
        self.assertEqual(client.stats()["connects"], 1)
        self.assertEqual(client.stats()["node_failures"], 0)

    def test_threads_share_one_connection_while_a_big_batch_is_in_flight(self):
        client = self.client(timeout=10.0)
        client.next_id()
        big = {}
        t = threading.Thread(target=lambda: big.setdefault("ids", client.next_ids(150000)))
        t.start()
        small = [client.next_id() for _ in range(50)]
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(set(big["ids"]) | set(small)), 150050)


if __name__ == "__main__":
    unittest.main()
