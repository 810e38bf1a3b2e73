"""Protocol version 5 (GET_IDS_WITH) against a real node: IDs after one seen, idempotency keys,
masked IDs; and key_node's fixed choices (the same in every idgen client)."""

import os
import time
import unittest

import _support
from idgen_client import (
    Client,
    KeyNodeUnavailableError,
    Keyring,
    NoNodeAvailable,
    OptionsUnsupportedError,
    ServerError,
    key_node,
)

KEYS = "4:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"


def id_at(unix_ms, epoch_ms=1767225600000):
    """An ID of the default layout at ``unix_ms``, from the largest worker, last sequence."""
    return ((unix_ms - epoch_ms) << 22) | (1023 << 12) | 4095


class KeyNode(unittest.TestCase):
    def test_fnv1a_choices(self):
        self.assertEqual(key_node("", 3), 0xCBF29CE484222325 % 3)
        self.assertEqual(key_node("a", 7), 0xAF63DC4C8601EC8C % 7)
        self.assertEqual(key_node("a", 1), 0)
        self.assertEqual(len({key_node(f"k{i}", 4) for i in range(100)}), 4)


class Options(unittest.TestCase):
    def server(self, *args, env=None):
        old = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        try:
            s = _support.Server(self, *args)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.addCleanup(s.stop)
        return s

    def client(self, server):
        c = Client([server.addr], timeout=5.0)
        self.addCleanup(c.close)
        return c

    def test_after_gives_greater_ids_even_from_a_clock_ahead(self):
        c = self.client(self.server("--max-drift", "1s"))
        seen = c.next_ids(3)[-1]
        self.assertTrue(all(i > seen for i in c.next_ids(10, after=seen)))
        ahead = id_at(int(time.time() * 1000) + 400)
        started = time.monotonic()
        self.assertTrue(all(i > ahead for i in c.next_ids(5, after=ahead)))
        self.assertGreaterEqual(time.monotonic() - started, 0.25)
        # Further ahead than max_drift: 301, retry elsewhere (with one node: none available).
        with self.assertRaises((ServerError, NoNodeAvailable)) as e:
            c.next_ids(1, after=id_at(int(time.time() * 1000) + 5000))
        self.assertIn("301", str(e.exception))
        time.sleep(0.5)  # the node's backoff after a 3xx
        # Keys and masking the node has not enabled.
        with self.assertRaises(ServerError) as e:
            c.next_ids(1, idempotency_key="k")
        self.assertEqual(e.exception.status, 205)
        with self.assertRaises(ServerError) as e:
            c.next_masked_ids(1)
        self.assertEqual(e.exception.status, 205)
        with self.assertRaises(ValueError):
            c.next_ids(1, idempotency_key="with space")
        self.assertEqual(len(c.next_ids(2)), 2)

    def test_a_key_gets_the_same_ids_and_masked_ids_unmask(self):
        server = self.server("--idempotency-window", "30s", env={"IDGEN_MASK_KEYS": KEYS})
        a, b = self.client(server), self.client(server)
        first = a.next_ids(4, idempotency_key="order-9")
        self.assertEqual(b.next_ids(4, idempotency_key="order-9"), first)
        with self.assertRaises(ServerError) as e:
            b.next_ids(5, idempotency_key="order-9")
        self.assertEqual(e.exception.status, 206)
        masked = a.next_masked_ids(20)
        self.assertEqual(masked.key_id, 4)
        ring = Keyring.parse(KEYS)
        ids = [ring.unmask(m) for m in masked.ids]
        self.assertEqual(ids, sorted(ids))
        self.assertEqual([ring.unmask_str(s) for s in masked.strings], ids)


class OlderNode(unittest.TestCase):
    def test_options_on_a_version_4_connection_are_refused_before_sending(self):
        node = _support.FakeNode(_support.default_hello(version=4, max_request_frame=128), "serve")
        self.addCleanup(node.close)
        c = Client([node.addr], timeout=2.0)
        self.addCleanup(c.close)
        with self.assertRaises(OptionsUnsupportedError):
            c.next_ids(1, after=5)
        with self.assertRaises(OptionsUnsupportedError) as e:
            c.next_masked_ids(1)
        self.assertIn("protocol version 4", str(e.exception))
        self.assertEqual(node.requests, 0)


class KeyedNoFailover(unittest.TestCase):
    """A keyed call goes to key_node's node only and is never failed over."""

    def key_for(self, index, nodes):
        return next(f"k{i}" for i in range(1000) if key_node(f"k{i}", nodes) == index)

    def test_retry_elsewhere_status_is_not_failed_over(self):
        down = _support.FakeNode(_support.default_hello(version=5), "unavailable", status=301)
        up = _support.FakeNode(_support.default_hello(version=5), "serve")
        self.addCleanup(down.close)
        self.addCleanup(up.close)
        c = Client([down.addr, up.addr], timeout=2.0)
        self.addCleanup(c.close)
        with self.assertRaises(KeyNodeUnavailableError) as e:
            c.next_ids(2, idempotency_key=self.key_for(0, 2))
        self.assertEqual(e.exception.status, 301)
        self.assertIn("not retried on another node", str(e.exception))
        self.assertEqual(up.requests, 0)

    def test_unreachable_key_node_is_not_failed_over(self):
        up = _support.FakeNode(_support.default_hello(version=5), "serve")
        self.addCleanup(up.close)
        dead = f"127.0.0.1:{_support.unused_port()}"
        c = Client([up.addr, dead], timeout=2.0)
        self.addCleanup(c.close)
        with self.assertRaises(KeyNodeUnavailableError) as e:
            c.next_ids(2, idempotency_key=self.key_for(1, 2))
        self.assertIsNone(e.exception.status)
        self.assertEqual(up.requests, 0)


if __name__ == "__main__":
    unittest.main()
