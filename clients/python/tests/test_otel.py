"""idgen_client.otel.OpenTelemetryHook with the OpenTelemetry SDK's in-memory exporter
(run_tests.sh installs opentelemetry-api with the ``otel`` extra, and opentelemetry-sdk);
and the package without OpenTelemetry."""

import subprocess
import sys
import textwrap
import unittest

import _support
from idgen_client import Client, UnavailableError

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


class OpenTelemetry(unittest.TestCase):
    def setUp(self):
        if MISSING is not None:
            self.fail(f"opentelemetry-api/-sdk not installed (run_tests.sh installs them): {MISSING}")
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.addCleanup(self.provider.shutdown)

    def fake(self, mode="serve", **kw):
        node = _support.FakeNode(_support.default_hello(), mode, **kw)
        self.addCleanup(node.close)
        return node

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
