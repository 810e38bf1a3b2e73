"""Log events and hooks (clients/vectors/CONFIG.md, "Observability").

The package logs through ``logging.getLogger("idgen_client")`` and adds only a
``NullHandler`` to it: a program that does not configure logging sees nothing. Hooks, given
to a client as ``hooks=`` (a callable ``hook(event, fields)`` or a list of them), are called
synchronously with each event after the fact; a hook that raises is logged once at warning
and otherwise ignored, so a hook can never fail or change a call.

Nothing here depends on a client class: any client of this package emits through an
:class:`Observer`.

===============  ==========================================================  =========
event            fields                                                      level
===============  ==========================================================  =========
connect          node, address, version, duration                            DEBUG
connect_failed   node, error, duration                                       WARNING
request          op, count, node, duration, outcome                          DEBUG
refused          node, op, status, status_name, message                      INFO
failover         from_node, to_node, reason                                  WARNING
node_down        node, reason, retry_in, failures                            WARNING
node_up          node, reason                                                INFO
===============  ==========================================================  =========

Durations are seconds (``float``); ``outcome`` is ``"ok"`` or the error's name (a server
status name such as ``"NOT_LEADER"``, else the exception class name).
"""

import logging
import threading
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Union

__all__ = [
    "LOGGER",
    "LOGGER_NAME",
    "EVENTS",
    "LEVELS",
    "CONNECT",
    "CONNECT_FAILED",
    "REQUEST",
    "REFUSED",
    "FAILOVER",
    "NODE_DOWN",
    "NODE_UP",
    "Hook",
    "Hooks",
    "Observer",
]

LOGGER_NAME = "idgen_client"
#: The package's logger. Quiet by default: its only handler is a ``NullHandler``.
LOGGER = logging.getLogger(LOGGER_NAME)
if not any(isinstance(h, logging.NullHandler) for h in LOGGER.handlers):
    LOGGER.addHandler(logging.NullHandler())

CONNECT = "connect"
CONNECT_FAILED = "connect_failed"
REQUEST = "request"
REFUSED = "refused"
FAILOVER = "failover"
NODE_DOWN = "node_down"
NODE_UP = "node_up"

#: Every event and the level it is logged at.
LEVELS: Dict[str, int] = {
    CONNECT: logging.DEBUG,
    CONNECT_FAILED: logging.WARNING,
    REQUEST: logging.DEBUG,
    REFUSED: logging.INFO,
    FAILOVER: logging.WARNING,
    NODE_DOWN: logging.WARNING,
    NODE_UP: logging.INFO,
}
EVENTS = tuple(LEVELS)

#: A hook: called as ``hook(event, fields)``; what it returns is ignored.
Hook = Callable[[str, Dict[str, object]], object]
#: What ``hooks=`` accepts: ``None``, one hook, or a sequence of hooks.
Hooks = Union[None, Hook, Sequence[Hook]]


def _hook_list(hooks: Hooks) -> List[Hook]:
    if hooks is None:
        return []
    if callable(hooks):
        return [hooks]
    if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence):
        raise TypeError(
            "hooks= is a callable hook(event, fields) or a list of them, "
            f"not {type(hooks).__name__}"
        )
    out = list(hooks)
    for i, hook in enumerate(out):
        if not callable(hook):
            raise TypeError(f"hooks[{i}] is not callable: {type(hook).__name__}")
    return out


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".") if value else "0"
    return str(value)


class Observer:
    """Emits events to the ``idgen_client`` logger and to the hooks. Thread-safe; a hook is
    called in the thread where the event happened."""

    def __init__(self, hooks: Hooks = None, logger: Optional[logging.Logger] = None):
        self.hooks: List[Hook] = _hook_list(hooks)
        self.logger = LOGGER if logger is None else logger
        self._failed: Set[int] = set()  # id() of hooks whose failure was logged
        self._lock = threading.Lock()

    def enabled(self, event: str) -> bool:
        """Whether emitting ``event`` does anything (a hook, or the logger at its level)."""
        return bool(self.hooks) or self.logger.isEnabledFor(LEVELS.get(event, logging.DEBUG))

    def emit(self, event: str, fields: Mapping[str, object], level: Optional[int] = None) -> None:
        """Log ``event`` with ``fields`` (at its level, or ``level``) and call every hook with
        ``(event, dict(fields))``. Never raises from a hook."""
        lvl = LEVELS.get(event, logging.DEBUG) if level is None else level
        if self.logger.isEnabledFor(lvl):
            text = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
            self.logger.log(
                lvl,
                "%s %s",
                event,
                text,
                extra={"idgen_event": event, "idgen_fields": dict(fields)},
            )
        for hook in self.hooks:
            try:
                hook(event, dict(fields))
            except Exception as e:  # a hook must never fail or change a call
                self._hook_failed(hook, event, e)

    def after_fork(self) -> None:
        """In a forked child: a new lock (the parent's may have been held by a thread that
        does not exist here)."""
        self._lock = threading.Lock()

    def _hook_failed(self, hook: Hook, event: str, error: Exception) -> None:
        with self._lock:
            first = id(hook) not in self._failed
            self._failed.add(id(hook))
        if first:
            self.logger.warning(
                "hook %r raised %s: %s (on event %s); ignored, and not logged again",
                hook,
                type(error).__name__,
                error,
                event,
            )
