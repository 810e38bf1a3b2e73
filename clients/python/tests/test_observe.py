"""Observability (clients/vectors/CONFIG.md): events on the ``idgen_client`` logger and to
``hooks=``, with their fields and levels; a hook that raises never breaks a call; nothing
is printed in a program that did not configure logging."""

import logging
import subprocess
import sys
import textwrap
import time
import unittest

import _support
from _support import Recorder, records
from idgen_client import Client, ServerError, UnavailableError, observe


class Events(unittest.TestCase):
    def fake(self, mode="serve", version=1, **kw):
        return _support.fake_node(self, mode, version, **kw)

    def client(self, nodes, **kw):
        kw.setdefault("timeout", 5.0)
        kw.setdefault("connect_timeout", 5.0)
        client = Client(nodes, **kw)
        self.addCleanup(client.close)
        return client

    def test_a_failover_shows_up_in_the_log_and_in_the_hook(self):
        bad = self.fake("unavailable", status=300)
        good = self.fake()
        hook = Recorder()
        client = self.client([bad.addr, good.addr], hooks=hook)
        with self.assertLogs("idgen_client", level="DEBUG") as logs:
            self.assertEqual(len(client.next_ids(3)), 3)
        self.assertEqual(
            hook.names(), ["connect", "refused", "node_down", "failover", "connect", "request"]
        )
        (failover,) = hook.only("failover")
        self.assertEqual(failover["from_node"], bad.addr)
        self.assertEqual(failover["to_node"], good.addr)
        self.assertIn("300", failover["reason"])
        (refused,) = hook.only("refused")
        self.assertEqual(
            {k: refused[k] for k in ("node", "op", "status", "status_name")},
            {"node": bad.addr, "op": "ids", "status": 300, "status_name": "UNAVAILABLE_LEASE"},
        )
        self.assertTrue(refused["message"])
        (down,) = hook.only("node_down")
        self.assertEqual(down["node"], bad.addr)
        self.assertGreater(down["retry_in"], 0)
        connect = hook.only("connect")[1]
        self.assertEqual(connect["node"], good.addr)
        self.assertEqual(connect["address"], good.addr)
        self.assertEqual(connect["version"], 1)
        self.assertGreaterEqual(connect["duration"], 0)
        (request,) = hook.only("request")
        self.assertEqual(
            {k: request[k] for k in ("op", "count", "node", "outcome")},
            {"op": "ids", "count": 3, "node": good.addr, "outcome": "ok"},
        )
        # The same events in the log, each at its level, with its fields attached.
        (rec,) = records(logs, "failover")
        self.assertEqual(rec.levelno, logging.WARNING)
        self.assertEqual(rec.idgen_fields["to_node"], good.addr)
        self.assertIn(f"from_node={bad.addr}", rec.getMessage())
        self.assertEqual(records(logs, "refused")[0].levelno, logging.INFO)
        self.assertEqual(records(logs, "node_down")[0].levelno, logging.WARNING)
        self.assertEqual(records(logs, "request")[0].levelno, logging.DEBUG)
        self.assertEqual([r.levelno for r in records(logs, "connect")], [logging.DEBUG] * 2)

    def test_connect_failed_node_up_and_a_failed_request(self):
        hook = Recorder()
        missing = f"127.0.0.1:{_support.unused_port()}"
        client = self.client([missing], hooks=hook, backoff_min=0.05)
        with self.assertRaises(UnavailableError):
            client.next_ids(2)
        (failed,) = hook.only("connect_failed")
        self.assertEqual(failed["node"], missing)
        self.assertIn("UnavailableError", failed["error"])
        (request,) = hook.only("request")
        self.assertEqual(request["outcome"], "UnavailableError")
        self.assertIsNone(request["node"])

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
        calls = []

        def broken(event, fields):
            calls.append(event)
            raise RuntimeError("hook bug")

        hook = Recorder()
        client = self.client([node.addr], hooks=[broken, hook])
        with self.assertLogs("idgen_client", level="WARNING") as logs:
            for _ in range(5):
                self.assertEqual(len(client.next_ids(2)), 2)
            client.ping()
        warnings = [r for r in logs.records if "hook" in r.getMessage()]
        self.assertEqual(len(warnings), 1, [r.getMessage() for r in logs.records])
        self.assertIn("RuntimeError: hook bug", warnings[0].getMessage())
        self.assertEqual(len(calls), 7, "every event still reaches the broken hook")
        self.assertEqual(hook.names(), ["connect"] + ["request"] * 6, "the next hook still runs")

    def test_hooks_must_be_callables(self):
        for bad in (5, "hook", [print, 3]):
            with self.subTest(hooks=bad), self.assertRaises(TypeError):
                Client(["127.0.0.1:7420"], hooks=bad)
        self.assertEqual(set(observe.EVENTS), {
            "connect", "connect_failed", "request", "refused", "failover", "node_down", "node_up",
        })  # fmt: skip

    def test_nothing_is_printed_without_logging_configured(self):
        bad = self.fake("unavailable", status=300)
        good = self.fake()
        missing = f"127.0.0.1:{_support.unused_port()}"
        program = textwrap.dedent(f"""
            import logging, sys
            try:  # the installed package (run_tests.sh), else the source tree
                from idgen_client import Client
            except ImportError:
                sys.path.insert(0, {str(_support.HERE.parent)!r})
                from idgen_client import Client
            assert logging.getLogger("idgen_client").handlers, "no NullHandler"
            with Client([{missing!r}, {bad.addr!r}, {good.addr!r}], timeout=5.0) as client:
                client.next_ids(3)  # connect_failed, refused, node_down, failover: warnings
                assert client.stats()["failovers"] == 2, client.stats()
            print("done")
        """)
        run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                             timeout=60, cwd=str(_support.HERE))  # fmt: skip
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout, "done\n")
        self.assertEqual(run.stderr, "", "the package printed without logging configured")


if __name__ == "__main__":
    unittest.main()
