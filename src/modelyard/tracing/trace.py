"""A sampled trace and its spans, the one record every sink reads (Triton's JSON file,
OpenTelemetry, the store of recent traces).

A frontend samples a :class:`Trace` for a client request: its root span is Triton's
``InferRequest`` (the frontend's timestamps are its events). Each request the trace covers
(the client's, every BLS call and ensemble step it leads to) gets a :class:`RequestTrace`:
a span named after its model (``REQUEST_START``, ``QUEUE_START``, ``REQUEST_END``) with a
``compute`` span below it (``COMPUTE_START`` ... ``COMPUTE_END``; ensembles have none).
A BLS call's span hangs under the caller's ``compute`` span (or under the model's own
span opened with ``modelyard.tracing.span``), an ensemble step's under the ensemble's span.
The trace is finished once the frontend has released it and every request has ended.

Times are ``time.monotonic_ns()`` (Triton's steady clock); sinks add the tracer's offset
to make wall-clock times.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from modelyard.tracing.config import LEVEL_TENSORS, LEVEL_TIMESTAMPS, MODE_TRITON
from modelyard.types import host_data

if TYPE_CHECKING:
    from modelyard.tracing.settings import TraceSetting

ROOT_SPAN = "InferRequest"
COMPUTE_SPAN = "compute"
RESPONSE_EVENT = "INFER_RESPONSE_COMPLETE"
BEFORE, AMID, AFTER = 0, 1, 2  # where a frontend timestamp goes in Triton's file


def new_span_id() -> int:
    return random.getrandbits(64) or 1


def attribute(value: Any) -> Any:
    """A value OpenTelemetry takes as an attribute (others as text)."""
    if isinstance(value, (str, bool, int, float)):
        return value
    return str(value)


class Span:
    """One span: ids are ints (64-bit span ids, 128-bit trace ids), times monotonic ns."""

    __slots__ = (
        "attributes",
        "end_ns",
        "events",
        "external",
        "kind_server",
        "model",
        "name",
        "parent_id",
        "span_id",
        "start_ns",
    )

    def __init__(
        self,
        name: str,
        model: str,
        parent_id: int | None,
        start_ns: int = 0,
        span_id: int = 0,
        kind_server: bool = True,
    ) -> None:
        self.span_id = span_id or new_span_id()
        self.parent_id = parent_id
        self.name = name
        self.model = model
        self.start_ns = start_ns
        self.end_ns = 0
        self.attributes: dict[str, Any] = {}
        self.events: list[tuple[str, int]] = []
        self.external = False  # made by the OpenTelemetry SDK (exported there already)
        self.kind_server = kind_server  # Triton's spans are SERVER spans; models' INTERNAL


class Trace:
    """One sampled client request and everything it led to."""

    def __init__(
        self,
        sink: Callable[[Trace], None],
        setting: TraceSetting,
        ids: Callable[[], int],
        trace_id: int = 0,
        remote_parent: int | None = None,
        sampled: bool = True,
        tracestate: str = "",
    ) -> None:
        self._sink = sink
        self._ids = ids  # Triton's numeric trace ids (the file's "id")
        self.setting = setting
        self.level = setting.level
        self.triton_file = setting.mode == MODE_TRITON
        self.trace_id = trace_id or (random.getrandbits(128) or 1)
        # A caller's W3C context: unsampled, the trace records nothing and hands the caller's
        # traceparent on unchanged; tracestate travels as it came either way.
        self.sampled = sampled
        self.tracestate = tracestate
        self.root = Span(ROOT_SPAN, "", remote_parent, time.monotonic_ns())
        self.spans: list[Span] = [self.root]
        self.requests: list[RequestTrace] = []
        # The frontend's timestamps by where Triton's file has them: before the request's
        # records, between its tensors and its compute timestamps, after its REQUEST_END.
        self.frontend: tuple[list[tuple[str, int]], ...] = ([], [], [])
        self._open = 1  # the frontend's hold, and one per request not ended
        self._lock = threading.Lock()

    def event(self, name: str, ns: int = 0, place: int = 0) -> None:
        """A frontend timestamp (an event of the root span); ``place``: BEFORE, AMID or
        AFTER the request's own timestamps in Triton's file."""
        item = (name, ns or time.monotonic_ns())
        self.root.events.append(item)
        self.frontend[place].append(item)

    def start_request(self, request: Any, version: int, decoupled: bool, compute: bool) -> Any:
        return RequestTrace(self, self.root.span_id, 0, request, version, decoupled, compute)

    def release(self) -> None:
        """The frontend is done with the trace."""
        self.root.end_ns = time.monotonic_ns()
        self._close()

    def hold(self) -> None:
        with self._lock:
            self._open += 1

    def drop_hold(self) -> None:
        """A :meth:`hold` of the frontend's is over (a streamed response written): the
        trace ends no earlier than that."""
        self.root.end_ns = time.monotonic_ns()
        self._close()

    def _close(self) -> None:
        with self._lock:
            self._open -= 1
            done = self._open == 0
        if done:
            self._sink(self)

    @property
    def model(self) -> str:
        return self.requests[0].model if self.requests else ""

    @property
    def request_id(self) -> str:
        return self.requests[0].request_id if self.requests else ""


class RequestTrace:
    """The trace of one request (the client's, a BLS call, an ensemble step)."""

    __slots__ = (
        "compute",
        "decoupled",
        "ended",
        "id",
        "inputs",
        "model",
        "outputs",
        "parent_id",
        "request_id",
        "span",
        "t_input_end",
        "t_output_start",
        "trace",
        "version",
    )

    def __init__(
        self,
        trace: Trace,
        parent_span: int,
        parent_id: int,
        request: Any,
        version: int,
        decoupled: bool,
        compute: bool,
    ) -> None:
        trace.hold()
        self.trace = trace
        self.id = trace._ids()
        self.parent_id = parent_id
        self.model: str = request.model_name
        self.version = version
        self.request_id: str = request.id
        self.decoupled = decoupled
        now = time.monotonic_ns()
        self.span = Span(self.model, self.model, parent_span, now)
        attrs = self.span.attributes
        attrs["triton.model_name"] = self.model
        attrs["triton.model_version"] = version
        attrs["triton.trace_id"] = self.id
        attrs["triton.trace_parent_id"] = parent_id
        if self.request_id:
            attrs["triton.request_id"] = self.request_id
        self.compute = Span(COMPUTE_SPAN, self.model, self.span.span_id) if compute else None
        self.t_input_end = 0
        self.t_output_start = 0
        self.ended = False
        self.inputs: list[tuple[str, str, Any]] | None = None
        self.outputs: list[tuple[str, str, Any]] = []
        if trace.level & LEVEL_TENSORS and trace.triton_file:
            self.inputs = [(t.name, t.datatype, _elements(t)) for t in request.inputs]
        trace.requests.append(self)

    # -- links for the requests this one makes ---------------------------------------------

    def link(self, span_id: int = 0) -> TraceLink:
        """Where a request this one makes (a BLS call) hangs: under ``span_id`` (a span the
        model opened) or the compute span."""
        if span_id:
            return TraceLink(self, span_id)
        parent = self.compute or self.span
        return TraceLink(self, parent.span_id)

    def step_link(self) -> TraceLink:
        """Where an ensemble step hangs: under the ensemble's span."""
        return TraceLink(self, self.span.span_id)

    @property
    def parent_span(self) -> int:
        """The span a model's own spans and calls hang under by default."""
        return (self.compute or self.span).span_id

    def context(self) -> str | None:
        """``request.trace().get_context()``: Triton's JSON in OpenTelemetry mode."""
        trace = self.trace
        if trace.triton_file:
            return None
        if trace.sampled:
            parent = f"00-{trace.trace_id:032x}-{self.span.span_id:016x}-01"
        else:  # not a participant: the caller's traceparent as it came
            parent = f"00-{trace.trace_id:032x}-{trace.root.parent_id or 0:016x}-00"
        if not trace.tracestate:
            return f'{{"traceparent":"{parent}"}}'
        return json.dumps(
            {"traceparent": parent, "tracestate": trace.tracestate}, separators=(",", ":")
        )

    def worker_info(self) -> tuple[str, int]:
        """What a worker process needs of the trace (see protocol RequestItem.trace)."""
        return self.context() or "", self.parent_span

    def model_span(
        self,
        span_id: int,
        parent_id: int,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any],
    ) -> Span:
        """A span the model opened (``modelyard.tracing.span``), ended."""
        span = Span(name, self.model, parent_id, start_ns, span_id, kind_server=False)
        span.end_ns = end_ns
        span.attributes = {k: attribute(v) for k, v in attributes.items()}
        self.trace.spans.append(span)
        return span

    # -- the request's life ----------------------------------------------------------------

    def on_response(self, ctx: Any, response: Any) -> None:
        """Each response of the request (RequestContext.send); the final one ends it."""
        now = time.monotonic_ns()
        if self.decoupled and self.parent_id:
            self.span.events.append((RESPONSE_EVENT, now))
        if self.inputs is not None:
            self.outputs += [(t.name, t.datatype, _elements(t)) for t in response.outputs]
        if response.final:
            self.finish(ctx, now, response.error)

    def finish(self, ctx: Any, now: int, error: Any = None) -> None:
        if self.ended:
            return
        self.ended = True
        t_received = ctx.t_received or self.span.start_ns
        span = self.span
        span.start_ns = t_received
        span.end_ns = now
        queued = ctx.t_queued or t_received
        span.events[:0] = [("REQUEST_START", t_received), ("QUEUE_START", queued)]
        span.events.append(("REQUEST_END", now))
        if error is not None:
            span.attributes["modelyard.error"] = error.message
        trace = self.trace
        trace.spans.append(span)
        compute = self.compute
        if compute is not None and ctx.t_start:
            start = ctx.t_start
            compute.start_ns = start
            compute.end_ns = now
            compute.events = [
                ("COMPUTE_START", start),
                ("COMPUTE_INPUT_END", self.t_input_end or start),
                ("COMPUTE_OUTPUT_START", self.t_output_start or now),
                ("COMPUTE_END", now),
            ]
            trace.spans.append(compute)
        else:
            self.compute = None
        trace._close()

    def abandon(self) -> None:
        """The request never ran (refused before queueing)."""
        if self.ended:
            return
        self.ended = True
        now = time.monotonic_ns()
        self.span.end_ns = now
        self.compute = None
        self.trace.spans.append(self.span)
        self.trace._close()

    @property
    def timestamps(self) -> bool:
        return bool(self.trace.level & LEVEL_TIMESTAMPS)


class TraceLink:
    """A parent for a request a traced request makes (a BLS call, an ensemble step)."""

    __slots__ = ("parent", "span_id")

    def __init__(self, parent: RequestTrace, span_id: int) -> None:
        self.parent = parent
        self.span_id = span_id

    def start_request(self, request: Any, version: int, decoupled: bool, compute: bool) -> Any:
        parent = self.parent
        return RequestTrace(
            parent.trace, self.span_id, parent.id, request, version, decoupled, compute
        )


def _elements(t: Any) -> Any:
    """A tensor's elements for a tensor-level trace: a GPU tensor's as a host copy."""
    if t.data is None and t.device is not None:
        return host_data(t)
    return t.data
