"""AsyncClient across os.fork(): a child gets IDs on its own connections (on its own event
loop, ``asyncio.run``) and never one its parent holds; the parent keeps its connection.

The parent drives its client on an event loop of its own (``run_until_complete``) and forks
while that loop is not running. Children report over a pipe and leave with ``os._exit``
(test_fork.py's ``_Child``, which reaps them by PID within a deadline)."""

import asyncio
import os
import unittest

import _support
from idgen_client import AsyncClient
from idgen_client import aio as aio_module
from test_fork import _Child


def _in_child(client, calls, size, concurrency=10, close=True):
    """A child body: ``calls`` calls of ``next_ids(size)`` (``size`` 0: ``next_id()``) from
    ``concurrency`` tasks on a new event loop, each answer checked."""

    def body(ids):
        async def task(k):
            for _ in range(k):
                if size:
                    got = await client.next_ids(size)
                    if len(got) != size or any(a >= b for a, b in zip(got, got[1:])):
                        raise AssertionError(f"asked for {size} increasing IDs, got {got}")
                    ids.extend(got)
                else:
                    ids.append(await client.next_id())

        async def main():
            await asyncio.gather(*(task(calls // concurrency) for _ in range(concurrency)))
            await client.ping()
            stats = client.stats()
            if stats["connects"] != 1:
                raise AssertionError(f"the child's own connection: {stats}")
            if close:
                await client.aclose()

        asyncio.run(main())

    return body


class AsyncFork(unittest.TestCase):
    def setUp(self):
        self.server = _support.Server(self)
        self.addCleanup(self.server.stop)
        self.loop = asyncio.new_event_loop()
        self.addCleanup(self.loop.close)

    def client(self, **kw):
        kw.setdefault("timeout", 5.0)
        client = AsyncClient([self.server.addr], **kw)
        self.addCleanup(lambda: self.loop.run_until_complete(client.aclose()))
        return client

    def run_(self, coro):
        return self.loop.run_until_complete(asyncio.wait_for(coro, 60))

    def next_id_from_tasks(self, client, n):
        """``n`` tasks each taking one ``next_id()``, on the parent's loop."""

        async def main():
            return await asyncio.gather(*(client.next_id() for _ in range(n)))

        return self.run_(main())

    def assert_distinct(self, *lists):
        all_ids = [i for ids in lists for i in ids]
        self.assertEqual(len(all_ids) - len(set(all_ids)), 0, "duplicate IDs across fork")

    def test_parent_and_child_use_the_client_at_once_on_their_own_connections(self):
        client = self.client()
        before = self.run_(client.next_ids(5))  # the parent's connection and reader task
        conn = client._nodes[0].conn
        go_r, go_w = os.pipe()
        try:
            children = [_Child(self, _in_child(client, 700, 3), go=go_r) for _ in range(2)]
        finally:
            os.close(go_r)
        os.write(go_w, b"xx")  # start together
        os.close(go_w)

        async def parent():
            got = await asyncio.gather(*(client.next_ids(2) for _ in range(1000)))
            return [i for ids in got for i in ids]

        mine = self.run_(parent())
        results = [c.result() for c in children]
        for ids, error in results:
            self.assertIsNone(error, "a child's calls failed")
            self.assertEqual(len(ids), 2100)
        self.assert_distinct(before, mine, *(ids for ids, _ in results))
        after = self.run_(client.next_ids(10))
        self.assert_distinct(before, mine, after, *(ids for ids, _ in results))
        self.assertIs(client._nodes[0].conn, conn, "the parent's connection was replaced")
        self.assertTrue(conn.alive)
        stats = client.stats()
        self.assertEqual((stats["connects"], stats["node_failures"]), (1, 0), stats)

    def test_the_prefetch_pool_is_not_shared_with_a_child(self):
        client = self.client(prefetch=1000)
        before = self.next_id_from_tasks(client, 10)
        self.assertGreater(len(client._pool), 900)  # the parent's pool is full
        child = _Child(self, _in_child(client, 2000, 0))
        mine = self.next_id_from_tasks(client, 2000)
        child_ids, error = child.result()
        self.assertIsNone(error, "the child's next_id() failed")
        self.assertEqual(len(child_ids), 2000)
        self.assert_distinct(before, mine, child_ids)

    def test_the_pid_check_alone_resets_a_child(self):
        # As without os.register_at_fork: the hook does not know this client.
        client = self.client(prefetch=500)
        before = self.next_id_from_tasks(client, 10)
        aio_module._CLIENTS.discard(client)
        child = _Child(self, _in_child(client, 1000, 0, close=False))
        mine = self.next_id_from_tasks(client, 1000)
        child_ids, error = child.result()
        self.assertIsNone(error, "the child's next_id() failed")
        self.assertEqual(len(child_ids), 1000)
        self.assert_distinct(before, mine, child_ids)
        self.assertEqual(client.stats()["connects"], 1)


if __name__ == "__main__":
    unittest.main()
