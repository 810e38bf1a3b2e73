"""AsyncClient's configuration and observability (clients/vectors/CONFIG.md): every
config.json case through AsyncClient.from_url / from_env (no network), settings given both
ways, clients from IDGEN_NODES (plain and mutual TLS via IDGEN_CLIENT_*) and from URLs
against a real node, ``expand=true`` over clients/with-debian-hosts.sh and re-resolution
with ``loop.getaddrinfo`` (never blocking the loop), and the events on the ``idgen_client``
logger and in ``hooks=``: a failover in both, a raising hook harmless.

Run as ``test_aio_config.py probe CA PLAIN_PORT TLS_PORT`` it is the client side of the
expand test (under with-debian-hosts.sh), as config_probe.py is for ``Client``."""

import asyncio
import logging
import os
import sys
import unittest

import _support  # the installed package (run_tests.sh), else the source tree
from _support import Recorder, clean_env, no_connect, records
from idgen_client import AsyncClient, ConfigError, ServerError, UnavailableError, parse_url


class AsyncTestCase(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        asyncio.get_running_loop().set_debug(False)


class Captured(AsyncClient):
    """An AsyncClient that only records what from_url / from_env pass to the constructor."""

    def __init__(self, nodes, **kwargs):  # noqa: D107 - no super(): nothing is built
        self.nodes_given = list(nodes)
        self.kwargs = kwargs


def expected_kwargs(case):
    """The constructor arguments a config.json case must turn into."""
    out = {}
    if case["tls"]:
        out["tls"] = True
    names = {"ca": "tls_ca", "cert": "tls_cert", "key": "tls_key", "server_name": "server_hostname"}
    for field, kwarg in names.items():
        if case[field] is not None:
            out[kwarg] = case[field]
    if case["connect_timeout_ms"] is not None:
        out["connect_timeout"] = case["connect_timeout_ms"] / 1000.0
    if case["timeout_ms"] is not None:
        out["timeout"] = case["timeout_ms"] / 1000.0
    if case["expand"]:
        out["expand"] = True
    return out


class Vectors(unittest.TestCase):
    """Each case through AsyncClient's own path: the constructor arguments it makes, and the
    client built from them (its nodes, TLS, timeouts, expand), or the ConfigError before any
    connection. Cases naming TLS files (which do not exist here) build a client that fails
    on that file, with a ValueError naming it, not with a ConfigError."""

    def setUp(self):
        no_connect(self)

    def check_client(self, case, make):
        captured = make(Captured)
        self.assertEqual(captured.nodes_given, case["nodes"])
        self.assertEqual(captured.kwargs, expected_kwargs(case))
        files = [case[f] for f in ("ca", "cert", "key") if case[f] is not None]
        if files:
            with self.assertRaises(ValueError) as caught:
                make(AsyncClient)
            self.assertNotIsInstance(caught.exception, ConfigError)
            self.assertIn(case["ca"] or case["cert"], str(caught.exception))
            return
        client = make(AsyncClient)
        # Before the first call (expand=true: before its names are resolved) the nodes are
        # the configured entries.
        self.assertEqual([n["node"] for n in client.nodes()], case["nodes"])
        self.assertEqual(client._tls is not None, case["tls"])
        if case["tls"]:
            self.assertEqual(client._tls[1], case["server_name"])
        self.assertEqual(client._expand, case["expand"])
        ct, t = case["connect_timeout_ms"], case["timeout_ms"]
        self.assertEqual(client._connect_timeout, 1.0 if ct is None else ct / 1000.0)
        self.assertEqual(client._timeout, 1.0 if t is None else t / 1000.0)

    def test_every_url_case_through_from_url(self):
        for case in _support.config_cases(self, "urls"):
            with self.subTest(url=case["url"]):
                if "error" in case:
                    with self.assertRaises(ConfigError) as caught:
                        AsyncClient.from_url(case["url"])
                    self.assertTrue(str(caught.exception))
                else:
                    self.check_client(case, lambda cls: cls.from_url(case["url"]))

    def test_every_env_case_through_from_env(self):
        for case in _support.config_cases(self, "envs"):
            with self.subTest(env=case["env"]), clean_env(**case["env"]):
                if "error" in case:
                    with self.assertRaises(ConfigError) as caught:
                        AsyncClient.from_env()
                    self.assertTrue(str(caught.exception))
                else:
                    self.check_client(case, lambda cls: cls.from_env())

    def test_a_setting_given_both_ways_is_an_error(self):
        with self.assertRaises(ConfigError) as caught:
            AsyncClient.from_url("idgen://h?timeout_ms=100", timeout=2.0)
        self.assertIn("timeout=", str(caught.exception))
        with self.assertRaises(ConfigError):
            AsyncClient.from_url("idgens://h?expand=true", expand=False)
        with self.assertRaises(ConfigError):
            AsyncClient.from_url("idgen://h", nodes=["x:1"])
        with self.assertRaises(ConfigError) as caught:
            AsyncClient.from_url("idgen://h", tls_ca="/ca.pem")
        self.assertIn("use idgens://", str(caught.exception))
        with clean_env(IDGEN_NODES="h:7420", IDGEN_CLIENT_CONNECT_TIMEOUT_MS="100"):
            with self.assertRaises(ConfigError) as caught:
                AsyncClient.from_env(connect_timeout=1.0)
            self.assertIn("the environment", str(caught.exception))
        with clean_env(), self.assertRaises(ConfigError) as caught:
            AsyncClient.from_env()
        self.assertIn("IDGEN_NODES is not set", str(caught.exception))
        with self.assertRaises(TypeError):
            AsyncClient.from_url("idgen://h", no_such_option=1)

    def test_code_settings_next_to_a_url_and_from_settings(self):
        client = AsyncClient.from_url("idgen://a:1,b:2?timeout_ms=1500", connect_timeout=3.0,
                                      prefetch=10, sequence_prefetch=5, hooks=print)  # fmt: skip
        self.assertEqual([n["node"] for n in client.nodes()], ["a:1", "b:2"])
        self.assertEqual((client._timeout, client._connect_timeout), (1.5, 3.0))
        self.assertEqual((client._prefetch, client._seq_prefetch), (10, 5))
        self.assertEqual(client._obs.hooks, [print])
        client = AsyncClient.from_settings(parse_url("idgens://n1?server_name=idgen.internal"))
        self.assertEqual(client._tls[1], "idgen.internal")
        self.assertTrue(client._tls[0].check_hostname)  # tls=True: the system's roots, verified
        with self.assertRaises(TypeError):
            AsyncClient(["h:1"], expand="yes")
        for bad in (5, "hook", [print, 3]):
            with self.subTest(hooks=bad), self.assertRaises(TypeError):
                AsyncClient(["h:1"], hooks=bad)


class FromEnvAndUrl(AsyncTestCase):
    """Against a real node: plain and mutual TLS, from IDGEN_NODES (+ IDGEN_CLIENT_*) and from
    URLs."""

    def setUp(self):
        self.certs, self.server = _support.mutual_tls_server(self)
        self.ca = os.path.join(self.certs, "ca.crt")
        self.cert = os.path.join(self.certs, "client.crt")
        self.key = os.path.join(self.certs, "client.key")
        self.tls_port = self.server.tls_addr.rsplit(":", 1)[1]

    async def ids(self, client):
        self.addAsyncCleanup(client.aclose)
        ids = await client.next_ids(5)
        self.assertEqual(len(ids), 5)
        self.assertEqual(ids, sorted(set(ids)))
        return client

    async def test_plain_from_IDGEN_NODES_alone(self):
        with clean_env(IDGEN_NODES=self.server.addr, IDGEN_CLIENT_TIMEOUT_MS="4000"):
            client = AsyncClient.from_env()
        await self.ids(client)
        self.assertEqual(client._timeout, 4.0)
        self.assertIsNone(client._tls)
        with clean_env(IDGEN_NODES=f"idgen://{self.server.addr}"):
            client = AsyncClient.from_env(prefetch=10)
        await self.ids(client)
        self.assertIsInstance(await client.next_id(), int)

    async def test_mutual_tls_from_IDGEN_NODES_and_IDGEN_CLIENT_variables(self):
        env = dict(IDGEN_NODES=f"localhost:{self.tls_port}", IDGEN_CLIENT_CA=self.ca,
                   IDGEN_CLIENT_CERT=self.cert, IDGEN_CLIENT_KEY=self.key)  # fmt: skip
        with clean_env(**env):
            client = AsyncClient.from_env()
        await self.ids(client)
        self.assertIsNotNone(client.nodes()[0]["hello"])
        # By address, verifying the name the certificate holds.
        env.update(IDGEN_NODES=f"127.0.0.1:{self.tls_port}", IDGEN_CLIENT_SERVER_NAME="localhost")
        with clean_env(**env):
            client = AsyncClient.from_env()
        await self.ids(client)
        # Without the client certificate the node refuses the client: an UnavailableError.
        env = dict(IDGEN_NODES=f"localhost:{self.tls_port}", IDGEN_CLIENT_CA=self.ca)
        with clean_env(**env):
            client = AsyncClient.from_env(connect_timeout=5.0)
        self.addAsyncCleanup(client.aclose)
        with self.assertRaises(UnavailableError):
            await client.next_ids(1)

    async def test_from_a_url_plain_and_mutual_tls(self):
        await self.ids(AsyncClient.from_url(f"idgen://{self.server.addr}/?timeout_ms=5000"))
        tls = f"ca={self.ca}&cert={self.cert}&key={self.key}"
        await self.ids(AsyncClient.from_url(f"idgens://localhost:{self.tls_port}?{tls}"))
        await self.ids(
            AsyncClient.from_url(f"idgens://127.0.0.1:{self.tls_port}?{tls}&server_name=localhost")
        )
        with clean_env(IDGEN_NODES=f"idgens://localhost:{self.tls_port}?{tls}"):
            client = AsyncClient.from_env()
        await self.ids(client)


class Expand(unittest.TestCase):
    def test_each_address_of_localhost_is_a_node(self):
        """Two nodes on [::1]:P and 127.0.0.1:P (plain and TLS); under with-debian-hosts.sh
        ``localhost`` resolves to both (::1 first). The async client has two nodes, uses ::1
        first, and fails over to 127.0.0.1 (a failover event) when the node on ::1 stops; TLS
        verifies ``localhost`` on both (:func:`probe` is the client side)."""
        _support.expand_test(self, [os.path.abspath(__file__), "probe"])


async def probe(ca, plain_port, tls_port):
    """The client side of Expand (see the module docstring)."""
    events = []
    hook = lambda event, fields: events.append((event, fields))  # noqa: E731
    clients = _support.expand_clients(AsyncClient, ca, plain_port, tls_port, hook)
    loop = asyncio.get_running_loop()

    async def call(kind):
        del events[:]
        _support.expand_report(kind, events, await clients[kind].next_ids(3))

    try:
        for kind, client in clients.items():
            await client.__aenter__()  # resolves the name
            print(f"{kind}: nodes {','.join(n['node'] for n in client.nodes())}", flush=True)
            await call(kind)
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        for kind in clients:
            await call(kind)
    except Exception as e:  # noqa: BLE001 — any failure is the answer
        print(f"FAILED: {type(e).__name__}: {e}", flush=True)
        return 1
    finally:
        for client in clients.values():
            await client.aclose()
    print("done", flush=True)
    return 0


class Reresolve(AsyncTestCase):
    """``expand=True`` with getaddrinfo replaced for one name (``loop.getaddrinfo`` calls it
    in an executor thread): addresses that appear are added, gone ones dropped when they
    fail, at most one resolution a second, and a slow resolver never blocks the loop."""

    def setUp(self):
        _support.fake_resolver(self, ("idgen.test", "idgen.internal"))

    def fake(self):
        return _support.serving_node(self)

    def client(self, nodes, **kw):
        client = AsyncClient(nodes, expand=True, **kw)
        self.addAsyncCleanup(client.aclose)
        return client

    async def test_new_addresses_are_added_and_gone_ones_dropped(self):
        a, a_addr = self.fake()
        b, b_addr = self.fake()
        self.answer = [a_addr]
        client = self.client(["idgen.test:7420"], timeout=2.0, connect_timeout=2.0)
        self.assertEqual(self.lookups, 0, "nothing resolved before the first call")
        self.assertEqual(len(await client.next_ids(2)), 2)
        self.assertEqual([n["node"] for n in client.nodes()], [a.addr])
        self.assertEqual(self.lookups, 1)
        await asyncio.sleep(1.05)  # past the once-a-second limit
        self.answer = [b_addr]
        a.kill()
        # The call on a fails; the names are resolved again, b added, a (gone) dropped, and
        # the same call goes on to b.
        self.assertEqual(len(await client.next_ids(2)), 2)
        self.assertEqual([n["node"] for n in client.nodes()], [b.addr])
        self.assertEqual(len(b.ids_by_connection), 1)
        self.assertEqual(self.lookups, 2)

    async def test_a_name_that_resolves_to_nothing_is_a_node_that_is_down(self):
        self.answer = []
        client = self.client(["idgen.test:7420"], connect_timeout=0.5, backoff_min=0.05)
        with self.assertRaises(UnavailableError):
            await client.next_id()
        self.assertEqual([n["node"] for n in client.nodes()], ["idgen.test:7420"])
        lookups = self.lookups
        await asyncio.sleep(0.06)  # the backoff
        with self.assertRaises(UnavailableError):
            await client.next_id()  # within the second: no new resolution
        self.assertEqual(self.lookups, lookups, "resolved at most once a second")
        b, b_addr = self.fake()
        self.answer = [b_addr]
        await asyncio.sleep(1.05)
        self.assertEqual(len(await client.next_ids(2)), 2)
        self.assertEqual([n["node"] for n in client.nodes()], [b.addr])

    async def test_tls_verifies_and_sends_the_name_given_never_the_address(self):
        certs = _support.certs_dir(self)
        path = lambda name: os.path.join(certs, name)  # noqa: E731
        ctx = _support.server_tls(certs, "server-other-name", path("ca.crt"))  # idgen.internal
        names = []
        ctx.sni_callback = lambda sock, name, context: names.append(name)
        fake = _support.FakeNode(_support.default_hello(), "serve", tls=ctx)
        self.addCleanup(fake.close)
        host, port = fake.addr.rsplit(":", 1)
        self.answer = [(host, int(port))]
        client = self.client([f"idgen.internal:{port}"], tls_ca=path("ca.crt"),
                             tls_cert=path("client.crt"), tls_key=path("client.key"),
                             timeout=5.0, connect_timeout=5.0)  # fmt: skip
        self.assertEqual(len(await client.next_ids(3)), 3)
        self.assertEqual([n["node"] for n in client.nodes()], [fake.addr])
        self.assertEqual(names, ["idgen.internal"])
        self.assertEqual(fake.tls_sessions, [("idgen/1", True)])

    async def test_resolving_never_blocks_the_event_loop(self):
        a, a_addr = self.fake()
        self.answer = [a_addr]
        self.delay = 0.5
        client = self.client(["idgen.test:7420"], timeout=2.0, connect_timeout=2.0)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.get_running_loop().create_task(ticker())
        try:
            # Many tasks at once: one resolution for all of them.
            got = await asyncio.gather(*(client.next_ids(2) for _ in range(10)))
        finally:
            task.cancel()
        self.assertEqual(len({i for ids in got for i in ids}), 20)
        self.assertEqual(self.lookups, 1)
        self.assertGreaterEqual(ticks, 10, "the loop ran while the name was being resolved")


class Events(AsyncTestCase):
    def fake(self, mode="serve", version=1, **kw):
        return _support.fake_node(self, mode, version, **kw)

    def client(self, nodes, **kw):
        return _support.make_client(self, AsyncClient, nodes, **kw)

    async def test_a_failover_shows_up_in_the_log_and_in_the_hook(self):
        bad = self.fake("unavailable", status=300)
        good = self.fake()
        hook = Recorder()
        client = self.client([bad.addr, good.addr], hooks=hook)
        with self.assertLogs("idgen_client", level="DEBUG") as logs:
            self.assertEqual(len(await client.next_ids(3)), 3)
        _support.check_failover_events(self, hook, logs, bad, good)

    async def test_connect_failed_node_up_and_a_failed_request(self):
        hook = Recorder()
        missing = f"127.0.0.1:{_support.unused_port()}"
        client = self.client([missing], hooks=hook, backoff_min=0.05)
        with self.assertLogs("idgen_client", level="WARNING") as logs:
            with self.assertRaises(UnavailableError):
                await client.next_ids(2)
        _support.check_connect_failed(self, hook, missing)
        self.assertEqual(records(logs, "connect_failed")[0].levelno, logging.WARNING)

        node = self.fake("garbage")
        hook = Recorder()
        client = self.client([node.addr], hooks=hook, backoff_min=0.05)
        with self.assertRaises(Exception):
            await client.next_ids(2)
        self.assertEqual(hook.only("node_down")[0]["node"], node.addr)
        node.mode = "serve"
        await asyncio.sleep(0.1)  # the backoff
        with self.assertLogs("idgen_client", level="INFO") as logs:
            await client.next_ids(2)
        (up,) = hook.only("node_up")
        self.assertEqual(up["node"], node.addr)
        self.assertEqual(records(logs, "node_up")[0].levelno, logging.INFO)

    async def test_refused_names_the_op_and_each_task_reports_its_own_call(self):
        node = self.fake("unavailable", status=304, version=4)  # 304 EXHAUSTED: raised at once
        hook = Recorder()
        client = self.client([node.addr], hooks=hook)
        with self.assertRaises(ServerError):
            await client.next_uuids(2)
        (refused,) = hook.only("refused")
        self.assertEqual((refused["op"], refused["status"]), ("uuids", 304))
        (request,) = hook.only("request")
        self.assertEqual((request["op"], request["node"], request["outcome"]),
                         ("uuids", node.addr, refused["status_name"]))  # fmt: skip
        # Concurrent tasks: each refusal and request event names its own task's call.
        hook.events.clear()
        got = await asyncio.gather(client.next_uuids(3), client.ping(), client.next_ids(4),
                                   client.next_values("orders", 2), return_exceptions=True)  # fmt: skip
        self.assertTrue(all(isinstance(g, ServerError) for g in got), got)
        requests = {(f["op"], f["count"]) for f in hook.only("request")}
        self.assertEqual(requests, {("uuids", 3), ("ping", 1), ("ids", 4), ("values", 2)})
        self.assertEqual(sorted(f["op"] for f in hook.only("refused")),
                         ["ids", "ping", "uuids", "values"])  # fmt: skip

    async def test_prefetch_refills_are_requests(self):
        node = self.fake()
        hook = Recorder()
        client = self.client([node.addr], hooks=hook, prefetch=50)
        async with client:
            for _ in range(5):
                await client.next_id()
        refills = hook.only("request")
        self.assertEqual((refills[0]["op"], refills[0]["count"], refills[0]["outcome"]),
                         ("ids", 50, "ok"))  # fmt: skip
        self.assertLessEqual(len(refills), 2, "a next_id served from the pool is no request")

    async def test_a_hook_that_raises_does_not_break_calls_and_is_logged_once(self):
        node = self.fake()
        broken = _support.BrokenHook()
        hook = Recorder()
        client = self.client([node.addr], hooks=[broken, hook])
        with self.assertLogs("idgen_client", level="WARNING") as logs:
            for _ in range(5):
                self.assertEqual(len(await client.next_ids(2)), 2)
            await client.ping()
        _support.check_broken_hook(self, logs, broken, hook)

    def test_nothing_is_printed_without_logging_configured(self):
        _support.check_prints_nothing(self, "AsyncClient", """
            async def main():
                async with AsyncClient(NODES, timeout=5.0) as client:
                    await client.next_ids(3)  # connect_failed, refused, node_down, failover
                    assert client.stats()["failovers"] == 2, client.stats()

            asyncio.run(main())
        """)


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        sys.exit(asyncio.run(probe(*sys.argv[2:5])))
    unittest.main()
