"""AsyncClient's named sequences against a real node (sequences made with `idgen seq create`
before `idgen serve` starts, as test_sequences_real.py), and the prefetch buffer's rules
against a fake version 3 node."""

import asyncio
import unittest

import _support
from idgen_client import AsyncClient, SequencesUnsupportedError, ServerError

SEQUENCES = [
    ["orders"],
    ["ledger", "--mode", "strict"],
    ["prefetched"],
    ["prefetched.strict", "--mode", "strict"],
    ["tiny.prefetched", "--max", "5"],
]


def increasing(values):
    return all(a < b for a, b in zip(values, values[1:]))


class RealNodeSequences(unittest.IsolatedAsyncioTestCase):
    server = None

    def setUp(self):
        if RealNodeSequences.server is None:
            RealNodeSequences.server = _support.Server(self, sequences=SEQUENCES)

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()
            cls.server = None

    async def asyncSetUp(self):
        asyncio.get_running_loop().set_debug(False)

    def client(self, **kw):
        kw.setdefault("timeout", 10.0)  # strict values wait for a store commit
        client = AsyncClient([self.server.addr], **kw)
        self.addAsyncCleanup(client.aclose)
        return client

    async def take(self, client, name, tasks, calls, n=1):
        async def one():
            got = []
            for _ in range(calls):
                got.extend(await client.next_values(name, n) if n > 1 else [await client.next_value(name)])
            return got

        return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(tasks))), 120)

    async def test_dense_with_prefetch_costs_about_calls_over_k_requests(self):
        client = self.client(sequence_prefetch=100)
        per_task = await self.take(client, "prefetched", tasks=20, calls=100)
        values = [v for got in per_task for v in got]
        self.assertEqual(len(set(values)), 2000)
        for got in per_task:  # each task's values increase
            self.assertTrue(increasing(got))
        stats = client.stats()
        self.assertLessEqual(stats["value_requests"], 1 + 2000 // 100 + 1, stats)
        self.assertGreaterEqual(stats["value_requests"], 2000 // 100, stats)
        self.assertEqual(stats["value_prefetch_served"], 2000 - stats["value_requests"], stats)
        self.assertEqual(stats["connects"], 1, stats)

    async def test_dense_without_prefetch_from_many_tasks(self):
        client = self.client()
        per_task = await self.take(client, "orders", tasks=50, calls=10, n=3)
        values = [v for got in per_task for v in got]
        self.assertEqual(len(set(values)), 1500)
        self.assertTrue(all(increasing(got) for got in per_task))
        self.assertEqual(client.stats()["value_requests"], 500)

    async def test_strict_sends_a_request_per_call_and_keeps_nothing(self):
        client = self.client(sequence_prefetch=100)
        per_task = await self.take(client, "prefetched.strict", tasks=8, calls=10)
        values = [v for got in per_task for v in got]
        self.assertEqual(len(set(values)), 80)
        self.assertTrue(all(increasing(got) for got in per_task))
        stats = client.stats()
        self.assertEqual(stats["value_requests"], 80, stats)
        self.assertEqual(stats["values"], 80, "a strict value was kept")
        self.assertEqual(stats["value_prefetch_served"], 0)
        plain = self.client()
        more = await plain.next_values("ledger", 5)
        self.assertTrue(increasing(more))

    async def test_unknown_used_up_and_bad_names(self):
        client = self.client(sequence_prefetch=100)
        with self.assertRaises(ServerError) as caught:
            await client.next_value("no.such.sequence")
        self.assertEqual(caught.exception.status, 203)
        self.assertEqual([await client.next_value("tiny.prefetched") for _ in range(5)], [1, 2, 3, 4, 5])
        with self.assertRaises(ServerError) as caught:
            await client.next_value("tiny.prefetched")
        self.assertEqual(caught.exception.status, 307)
        requests = client.stats()["value_requests"]
        with self.assertRaises(ValueError):
            await client.next_value("Bad Name")
        self.assertEqual(client.stats()["value_requests"], requests)
        self.assertEqual(client.stats()["node_failures"], 0)


class OlderNode(unittest.IsolatedAsyncioTestCase):
    async def test_sequences_on_a_version_2_node_are_refused_before_sending(self):
        node = _support.FakeNode(_support.default_hello(version=2), "serve")
        self.addCleanup(node.close)
        client = AsyncClient([node.addr], timeout=5.0)
        self.addAsyncCleanup(client.aclose)
        with self.assertRaises(SequencesUnsupportedError):
            await client.next_value("orders")
        self.assertEqual(node.requests, 0)


if __name__ == "__main__":
    unittest.main()
