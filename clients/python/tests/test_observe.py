"""Observability (clients/vectors/CONFIG.md): events on the ``idgen_client`` logger and to
``hooks=``, with their fields and levels; a hook that raises never breaks a call; nothing
is printed in a program that did not configure logging."""

import time
import unittest

import _support
from _support import Recorder
from idgen_client import Client, ServerError, UnavailableError, observe


class Events(unittest.TestCase):
    def fake(self, mode="serve", version=1, **kw):
        return _support.fake_node(self, mode, version, **kw)

    def client(self, nodes, **kw):
        return _support.make_client(self, Client, nodes, **kw)

    def test_a_failover_shows_up_in_the_log_and_in_the_hook(self):
        bad = self.fake("unavailable", status=300)
        good = self.fake()
        hook = Recorder()
        client = self.client([bad.addr, good.addr], hooks=hook)
        with self.assertLogs("idgen_client", level="DEBUG") as logs:
            self.assertEqual(len(client.next_ids(3)), 3)
        _support.check_failover_events(self, hook, logs, bad, good)

    def test_connect_failed_node_up_and_a_failed_request(self):
        hook = Recorder()
        missing = f"127.0.0.1:{_support.unused_port()}"
        client = self.client([missing], hooks=hook, backoff_min=0.05)
        with self.assertRaises(UnavailableError):
            client.next_ids(2)
        _support.check_connect_failed(self, hook, missing)

        node = self.fake("garbage")
        hook = Recorder()
        client = self.client([node.addr], hooks=hook, backoff_min=0.05)
        with self.assertRaises(Exception):
            client.next_ids(2)
        self.assertEqual(hook.only("node_down")[0]["node"], node.addr)
        node.mode = "serve"
        time.sleep(0.1)  # the backoff
        client.next_ids(2)
        (up,) = hook.only("node_up")
        self.assertEqual(up["node"], node.addr)

    def test_refused_names_the_op_and_the_status(self):
        node = self.fake("unavailable", status=304, version=4)  # 304 EXHAUSTED: raised at once
        hook = Recorder()
        client = self.client([node.addr], hooks=hook)
        with self.assertRaises(ServerError):
            client.next_uuids(2)
        (refused,) = hook.only("refused")
        self.assertEqual((refused["op"], refused["status"]), ("uuids", 304))
        (request,) = hook.only("request")
        self.assertEqual((request["op"], request["node"], request["outcome"]),
                         ("uuids", node.addr, refused["status_name"]))  # fmt: skip
        hook.events.clear()
        with self.assertRaises(ServerError):
            client.ping()
        self.assertEqual(hook.only("request")[0]["op"], "ping")

    def test_a_hook_that_raises_does_not_break_calls_and_is_logged_once(self):
        node = self.fake()
        broken = _support.BrokenHook()
        hook = Recorder()
        client = self.client([node.addr], hooks=[broken, hook])
        with self.assertLogs("idgen_client", level="WARNING") as logs:
            for _ in range(5):
                self.assertEqual(len(client.next_ids(2)), 2)
            client.ping()
        _support.check_broken_hook(self, logs, broken, hook)

    def test_hooks_must_be_callables(self):
        for bad in (5, "hook", [print, 3]):
            with self.subTest(hooks=bad), self.assertRaises(TypeError):
                Client(["127.0.0.1:7420"], hooks=bad)
        self.assertEqual(set(observe.EVENTS), {
            "connect", "connect_failed", "request", "refused", "failover", "node_down", "node_up",
        })  # fmt: skip

    def test_nothing_is_printed_without_logging_configured(self):
        _support.check_prints_nothing(self, "Client", """
            assert logging.getLogger("idgen_client").handlers, "no NullHandler"
            with Client(NODES, timeout=5.0) as client:
                client.next_ids(3)  # connect_failed, refused, node_down, failover: warnings
                assert client.stats()["failovers"] == 2, client.stats()
        """)


if __name__ == "__main__":
    unittest.main()
