"""Spans a model opens in a worker process (``modelyard.tracing.span``).

The worker has no OpenTelemetry exporter: a span is timed here and sent to the server as a
``SpanEnd`` message, which adds it to the request's trace (the server exports it with the
rest). ``CURRENT`` holds (request key, span id) of the innermost span in this context: the
execute of a traced batch sets it to the request's compute span, each open span to itself;
BLS calls made meanwhile carry it, so their spans hang under it.
"""

from __future__ import annotations

import contextvars
import random
import time
from typing import TYPE_CHECKING, Any

from modelyard.backends.python.protocol import framing
from modelyard.backends.python.protocol.messages import SpanEnd

if TYPE_CHECKING:
    from modelyard.backends.python.worker.stub import Stub

CURRENT: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "modelyard_worker_span", default=None
)


def first_traced(items: list[Any]) -> tuple[int, int] | None:
    """(key, span id) for a batch's first traced request: where its spans hang."""
    for item in items:
        if item.trace is not None:
            return item.key, item.trace[1]
    return None


class WorkerSpan:
    """A span opened by the model; a no-op outside a traced request."""

    __slots__ = ("_attributes", "_name", "_parent", "_span_id", "_start", "_stub", "_token")

    def __init__(self, stub: Stub, name: str, attributes: dict[str, Any]) -> None:
        self._stub = stub
        self._name = name
        self._attributes = attributes
        self._token: contextvars.Token[tuple[int, int] | None] | None = None
        self._parent: tuple[int, int] = (0, 0)
        self._span_id = 0
        self._start = 0

    def __enter__(self) -> None:
        current = CURRENT.get()
        if current is None:
            return
        self._parent = current
        self._span_id = random.getrandbits(64) or 1
        self._token = CURRENT.set((current[0], self._span_id))
        self._start = time.monotonic_ns()

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if self._token is None:
            return
        end = time.monotonic_ns()
        CURRENT.reset(self._token)
        self._token = None
        attributes = self._attributes
        if error is not None:
            attributes = {**attributes, "exception": f"{type(error).__name__}: {error}"}
        key, parent = self._parent
        message = SpanEnd(key, self._span_id, parent, self._name, self._start, end, attributes)
        try:
            self._stub.send(message)
        except (OSError, *framing.ENCODE_ERRORS):  # the server is gone, or an attribute
            pass  # no UTF-8 can hold: the span is lost, the model goes on
