"""idgen_client.otel.OpenTelemetryHook with the OpenTelemetry SDK's in-memory exporter
(run_tests.sh installs opentelemetry-api with the ``otel`` extra, and opentelemetry-sdk);
and the package without OpenTelemetry."""

import asyncio
import struct
import subprocess
import sys
import textwrap
import unittest

import _support
from idgen_client import AsyncClient, Client, UnavailableError, protocol

try:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, StatusCode

    from idgen_client.otel import OpenTelemetryHook
except ImportError as e:  # fail, never skip: run_tests.sh installs them
    MISSING = e
else:
    MISSING = None


def in_memory(test):
    """The test's tracer provider and in-memory exporter (failing, never skipping, without
    the SDK)."""
    if MISSING is not None:
        test.fail(f"opentelemetry-api/-sdk not installed (run_tests.sh installs them): {MISSING}")
    test.exporter = InMemorySpanExporter()
    test.provider = TracerProvider()
    test.provider.add_span_processor(SimpleSpanProcessor(test.exporter))
    test.addCleanup(test.provider.shutdown)


class OpenTelemetry(unittest.TestCase):
    def setUp(self):
        in_memory(self)

    def fake(self, mode="serve", **kw):
        return _support.fake_node(self, mode, **kw)

    def test_a_call_is_a_span_and_its_failover_span_events(self):
        bad = self.fake("unavailable", status=300)
        good = self.fake()
        hook = OpenTelemetryHook(tracer_provider=self.provider)
        with Client([bad.addr, good.addr], hooks=hook, timeout=5.0) as client:
            tracer = self.provider.get_tracer("test")
            with tracer.start_as_current_span("handler") as parent:
                self.assertEqual(len(client.next_ids(3)), 3)
        spans = {s.name: s for s in self.exporter.get_finished_spans()}
        self.assertEqual(set(spans), {"idgen ids", "handler"})
        span = spans["idgen ids"]
        self.assertEqual(span.kind, SpanKind.CLIENT)
        self.assertEqual(span.parent.span_id, parent.get_span_context().span_id)
        self.assertEqual(dict(span.attributes), {
            "idgen.op": "ids", "idgen.count": 3, "idgen.node": good.addr, "idgen.outcome": "ok",
        })  # fmt: skip
        self.assertEqual(span.status.status_code, StatusCode.UNSET)
        self.assertLessEqual(span.start_time, span.end_time)
        names = [e.name for e in span.events]
        self.assertEqual(names, ["connect", "refused", "node_down", "failover", "connect"])
        failover = span.events[3]
        self.assertEqual(failover.attributes["idgen.from_node"], bad.addr)
        self.assertEqual(failover.attributes["idgen.to_node"], good.addr)
        self.assertEqual(span.events[1].attributes["idgen.status"], 300)
        for event in span.events:
            self.assertGreaterEqual(event.timestamp, span.start_time)

    def test_a_failed_call_is_an_error_span(self):
        missing = f"127.0.0.1:{_support.unused_port()}"
        hook = OpenTelemetryHook(tracer_provider=self.provider)
        with Client([missing], hooks=hook, connect_timeout=2.0) as client:
            with self.assertRaises(UnavailableError):
                client.ping()
        (span,) = self.exporter.get_finished_spans()
        self.assertEqual(span.name, "idgen ping")
        self.assertEqual(span.status.status_code, StatusCode.ERROR)
        self.assertEqual(span.attributes["idgen.outcome"], "UnavailableError")
        self.assertNotIn("idgen.node", span.attributes)
        self.assertEqual([e.name for e in span.events], ["connect_failed", "node_down"])

    def test_tracer_or_provider_not_both(self):
        with self.assertRaises(ValueError):
            OpenTelemetryHook(tracer=self.provider.get_tracer("x"), tracer_provider=self.provider)


class HeldNode:
    """A fake node on the test's event loop that completes the handshake, then holds every
    request until :meth:`release`: ``received`` is set when the first request arrived."""

    def __init__(self):
        self.received = asyncio.Event()
        self._release = asyncio.Event()
        self._next_id = 1 << 41
        self._server = None
        self.addr = None

    async def start(self):
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.addr = f"{host}:{port}"
        return self

    def release(self):
        self._release.set()

    async def close(self):
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader, writer):
        try:
            await reader.readexactly(len(protocol.encode_hello()))
            writer.write(_support.hello_ok_bytes(_support.default_hello()))
            while True:
                (length,) = struct.unpack(">I", await reader.readexactly(4))
                body = await reader.readexactly(length)
                self.received.set()
                await asyncio.wait_for(self._release.wait(), 30.0)
                (count,) = struct.unpack(">I", body[1:5])
                ids = list(range(self._next_id, self._next_id + count))
                self._next_id += count
                if body[0] == protocol.OP_GET_RANGES:
                    writer.write(_support.ranges_bytes(ids))
                else:
                    writer.write(_support.ids_bytes(ids))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()


class ConcurrentTasks(unittest.IsolatedAsyncioTestCase):
    """AsyncClient: many tasks share one thread, and each call's span gets its own events."""

    async def asyncSetUp(self):
        in_memory(self)

    async def held(self):
        node = await HeldNode().start()
        self.addAsyncCleanup(node.close)
        node_release = node.release
        self.addCleanup(node_release)  # never leave a call waiting
        return node

    async def client(self, nodes, hook):
        client = AsyncClient(nodes, hooks=hook, timeout=10.0, connect_timeout=5.0)
        self.addAsyncCleanup(client.aclose)
        return client

    async def test_concurrent_calls_each_get_their_own_events(self):
        bad = _support.FakeNode(_support.default_hello(), "unavailable", status=300)
        self.addCleanup(bad.close)
        held_a, held_b = await self.held(), await self.held()
        hook = OpenTelemetryHook(tracer_provider=self.provider)  # one hook for both calls
        tracer = self.provider.get_tracer("test")
        client_a = await self.client([bad.addr, held_a.addr], hook)  # fails over
        client_b = await self.client([held_b.addr], hook)  # does not

        async def call(name, client):
            with tracer.start_as_current_span(name):
                return await client.next_ids(3)

        # A fails over and waits for its answer; then B connects and waits; A is answered
        # first, then B: both calls are in flight at once on one thread.
        task_a = asyncio.create_task(call("task a", client_a))
        await asyncio.wait_for(held_a.received.wait(), 10.0)
        task_b = asyncio.create_task(call("task b", client_b))
        await asyncio.wait_for(held_b.received.wait(), 10.0)
        held_a.release()
        self.assertEqual(len(await asyncio.wait_for(task_a, 10.0)), 3)
        held_b.release()
        self.assertEqual(len(await asyncio.wait_for(task_b, 10.0)), 3)

        spans = self.exporter.get_finished_spans()
        self.assertEqual(sorted(s.name for s in spans), ["idgen ids", "idgen ids", "task a", "task b"])
        parents = {s.name: s for s in spans if s.name.startswith("task")}
        by_parent = {}
        for s in spans:
            if s.name == "idgen ids":
                for name, parent in parents.items():
                    if s.parent.span_id == parent.context.span_id:
                        by_parent[name] = s
        self.assertEqual(set(by_parent), {"task a", "task b"})
        span_a, span_b = by_parent["task a"], by_parent["task b"]
        self.assertEqual(span_a.attributes["idgen.node"], held_a.addr)
        self.assertEqual(span_b.attributes["idgen.node"], held_b.addr)
        self.assertEqual(
            [(e.name, e.attributes.get("idgen.node")) for e in span_a.events],
            [("connect", bad.addr), ("refused", bad.addr), ("node_down", bad.addr),
             ("failover", None), ("connect", held_a.addr)],
        )  # fmt: skip
        self.assertEqual(span_a.events[3].attributes["idgen.from_node"], bad.addr)
        self.assertEqual(span_a.events[3].attributes["idgen.to_node"], held_a.addr)
        self.assertEqual([(e.name, e.attributes["idgen.node"]) for e in span_b.events],
                         [("connect", held_b.addr)])  # fmt: skip
        for parent in parents.values():  # nothing strayed onto the callers' spans
            self.assertEqual(list(parent.events), [])

    async def test_a_task_started_inside_a_call_never_reports_its_parents_events(self):
        # As a prefetch refill started by a call: the child task inherits the context, and
        # with it the parent call's waiting events, which are the parent's to report.
        hook = OpenTelemetryHook(tracer_provider=self.provider)
        tracer = self.provider.get_tracer("test")

        async def child_call():
            hook("connect", {"node": "child:7420"})
            hook("request", {"op": "ping", "count": 1, "node": "child:7420", "duration": 1.0,
                             "outcome": "ok"})  # fmt: skip

        with tracer.start_as_current_span("handler"):
            hook("connect", {"node": "parent:7420"})  # the parent's call, in progress
            await asyncio.create_task(child_call())
            hook("request", {"op": "ids", "count": 1, "node": "parent:7420", "duration": 60.0,
                             "outcome": "ok"})  # fmt: skip
        spans = {s.name: s for s in self.exporter.get_finished_spans()}
        self.assertEqual(set(spans), {"idgen ping", "idgen ids", "handler"})
        self.assertEqual([e.attributes["idgen.node"] for e in spans["idgen ping"].events],
                         ["child:7420"])  # fmt: skip
        self.assertEqual([e.attributes["idgen.node"] for e in spans["idgen ids"].events],
                         ["parent:7420"])  # fmt: skip
        self.assertEqual(list(spans["handler"].events), [])


class WithoutOpenTelemetry(unittest.TestCase):
    def test_the_package_works_without_opentelemetry(self):
        node = _support.FakeNode(_support.default_hello(), "serve")
        self.addCleanup(node.close)
        program = textwrap.dedent(f"""
            import sys
            sys.modules["opentelemetry"] = None  # as if not installed: importing it fails
            try:  # the installed package (run_tests.sh), else the source tree
                import idgen_client
            except ImportError:
                sys.path.insert(0, {str(_support.HERE.parent)!r})
                import idgen_client
            with idgen_client.Client([{node.addr!r}]) as client:
                assert len(client.next_ids(2)) == 2
            try:
                import idgen_client.otel
            except ImportError:
                print("ok: no opentelemetry needed; idgen_client.otel needs it")
        """)
        run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                             timeout=60, cwd=str(_support.HERE))  # fmt: skip
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("ok: no opentelemetry needed", run.stdout)


if __name__ == "__main__":
    unittest.main()
