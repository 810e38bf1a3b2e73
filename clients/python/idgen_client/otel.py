"""OpenTelemetry for the idgen client: a hook that turns events into spans.

Needs ``opentelemetry-api`` (``pip install 'idgen-client[otel]'``); the rest of the package
works without it, and only importing this module needs it::

    from idgen_client import Client
    from idgen_client.otel import OpenTelemetryHook

    client = Client(["10.0.0.1:7420"], hooks=OpenTelemetryHook())

Each ``request`` event (one per call) becomes a span ``idgen <op>`` (kind CLIENT) that
covers the call, with the attributes ``idgen.op``, ``idgen.count``, ``idgen.node``,
``idgen.outcome`` and an error status when the outcome is not ``ok``; it is a child of
the span current in the calling task or thread. The other events (``connect``,
``connect_failed``, ``refused``, ``failover``, ``node_down``, ``node_up``) become span events
of the call's span, with their fields as ``idgen.<field>`` attributes and their own time.
An event outside a call (a connect for :attr:`Client.layout`, say) goes to the current span
when one is recording, else nowhere.

Both clients emit a call's events from the task (:class:`~idgen_client.aio.AsyncClient`) or
thread (:class:`~idgen_client.Client`) that makes the call, so the events waiting for their
call's ``request`` are kept per task and per thread: in a ``contextvars.ContextVar`` (an
immutable tuple, set anew at each event, so a task never changes the one its parent task or a
concurrent task sees), each event marked with the task (or thread) that emitted it. Concurrent
calls on one event loop each get their own events; a task started inside a call (a prefetch
refill, say) inherits its parent's waiting events but never reports them: only their emitter
does.
"""

import asyncio
import contextvars
import threading
import time
from typing import Dict, Optional, Tuple

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from . import observe

__all__ = ["OpenTelemetryHook"]

#: Events kept per task or thread while a call is in progress (a bound, not a limit one
#: meets).
_MAX_PENDING = 256

#: An event waiting for its call's ``request``: (name, attributes, time, the task or thread
#: that emitted it).
_Pending = Tuple[str, Dict[str, AttributeValue], int, object]


def _emitter() -> object:
    """The asyncio task running this code, else the thread's identity."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop running in this thread
        task = None
    return task if task is not None else threading.get_ident()


def _attributes(fields: Dict[str, object]) -> Dict[str, AttributeValue]:
    out: Dict[str, AttributeValue] = {}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, (bool, int, float, str)):
            out[f"idgen.{name}"] = value
        else:
            out[f"idgen.{name}"] = str(value)
    return out


class OpenTelemetryHook:
    """A hook (``hooks=OpenTelemetryHook()``) that maps ``request`` events to spans and the
    other events to span events. ``tracer_provider`` defaults to the global one
    (``opentelemetry.trace.get_tracer_provider()``); ``tracer`` takes one of your own."""

    def __init__(
        self,
        tracer: Optional[trace.Tracer] = None,
        tracer_provider: Optional[trace.TracerProvider] = None,
    ) -> None:
        if tracer is not None and tracer_provider is not None:
            raise ValueError("give tracer or tracer_provider, not both")
        if tracer is None:
            from . import __version__

            tracer = trace.get_tracer("idgen_client", __version__, tracer_provider)
        self._tracer = tracer
        # This hook's events waiting for their call's request, in the emitter's context (per
        # task under asyncio, per thread otherwise); never changed in place.
        self._pending: "contextvars.ContextVar[Tuple[_Pending, ...]]" = contextvars.ContextVar(
            "idgen_client_otel_pending", default=()
        )

    def __call__(self, event: str, fields: Dict[str, object]) -> None:
        now = time.time_ns()
        if event != observe.REQUEST:
            pending = self._pending.get()[-(_MAX_PENDING - 1):]
            self._pending.set(pending + ((event, _attributes(fields), now, _emitter()),))
            return
        duration = fields.get("duration")
        took = int(duration * 1e9) if isinstance(duration, (int, float)) else 0
        start = now - took
        op = fields.get("op")
        span = self._tracer.start_span(
            f"idgen {op}",
            kind=SpanKind.CLIENT,
            attributes=_attributes({k: v for k, v in fields.items() if k != "duration"}),
            start_time=start,
        )
        pending = self._pending.get()
        self._pending.set(())
        me = _emitter()
        earlier = trace.get_current_span()
        for name, attributes, at, emitter in pending:
            if emitter != me:
                continue  # inherited from the task that started this one: that task's own
            if at >= start:
                span.add_event(name, attributes, timestamp=at)
            elif earlier.is_recording():
                earlier.add_event(name, attributes, timestamp=at)
        outcome = fields.get("outcome")
        if outcome != "ok":
            span.set_status(Status(StatusCode.ERROR, str(outcome)))
        span.end(end_time=now)
