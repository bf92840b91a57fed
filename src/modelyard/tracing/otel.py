"""OpenTelemetry mode: finished traces exported over OTLP/HTTP with the official SDK's batch
span processor and exporter, as Triton exports them (service ``triton-inference-server``,
tracer ``triton-server``, SERVER spans, the timestamps as events).

Imported only in OpenTelemetry mode. The SDK's TracerProvider becomes the global one, so
plain OpenTelemetry API calls in a model's ``execute`` (in-process models, inside the
request's context, see ``activate``) export through the same processor; their spans also
join the trace's record in the store of recent traces.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from modelyard.tracing.config import TraceConfig
from modelyard.tracing.otel_logs import check_reachable, route_sdk_logs
from modelyard.tracing.trace import Span, Trace

log = logging.getLogger("modelyard")
DEFAULT_URL = "http://localhost:4318/v1/traces"
SERVICE_NAME = "triton-inference-server"
TRACER_NAME = "triton-server"
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_PROPAGATOR = TraceContextTextMapPropagator()


def endpoint(url: str | None) -> str:
    """Triton takes ``localhost:4318/v1/traces``; the exporter wants a scheme."""
    if not url:
        return DEFAULT_URL
    return url if "://" in url else "http://" + url


class OtelExporter:
    def __init__(
        self,
        config: TraceConfig,
        offset_ns: int,
        on_user_span: Callable[[int, Span], None],
    ) -> None:
        self.offset_ns = offset_ns
        attributes: dict[str, Any] = {"service.name": SERVICE_NAME, **config.resources}
        self.resource = Resource.create(attributes)
        self.scope = InstrumentationScope(TRACER_NAME)

        def setting(key: str, default: int) -> int:
            value = config.otel_value(key)
            return int(value) if value is not None else default

        url = endpoint(config.otel_value("url"))
        # The SDK's failures in the server's log, rate limited (they came out raw, once per
        # failed batch); below, one warning now if the collector cannot be reached.
        self._sdk_lines = route_sdk_logs(log)
        exporter = OTLPSpanExporter(endpoint=url)
        try:
            self.processor = BatchSpanProcessor(
                exporter,
                max_queue_size=setting("bsp_max_queue_size", 2048),
                schedule_delay_millis=setting("bsp_schedule_delay", 5000),
                max_export_batch_size=setting("bsp_max_export_batch_size", 512),
            )
        except ValueError as e:  # e.g. an export batch larger than the queue
            raise ValueError(f"--trace-config opentelemetry: {e}") from None
        check_reachable(url, log)
        self.provider = TracerProvider(resource=self.resource)
        self.provider.add_span_processor(self.processor)
        self.provider.add_span_processor(_Collect(offset_ns, on_user_span))
        otel_trace.set_tracer_provider(self.provider)
        self._queue: queue.SimpleQueue[Trace | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="modelyard-otel", daemon=True)
        self._thread.start()

    def export(self, trace: Trace) -> None:
        """Hand ``trace`` over: its spans are built and queued on the export thread, off the
        request's path."""
        self._queue.put(trace)

    def _run(self) -> None:
        while True:
            trace = self._queue.get()
            if trace is None:
                return
            try:
                self._export(trace)
            except Exception:
                log.exception("exporting a trace failed")

    def _export(self, trace: Trace) -> None:
        trace_id = trace.trace_id
        offset = self.offset_ns
        state = TraceState.from_header([trace.tracestate]) if trace.tracestate else None
        for span in trace.spans:
            if span.external or not span.end_ns:
                continue
            parent = span.parent_id
            self.processor.on_end(
                ReadableSpan(
                    span.name,
                    context=SpanContext(trace_id, span.span_id, False, _SAMPLED, state),
                    parent=None if parent is None else SpanContext(trace_id, parent, False),
                    resource=self.resource,
                    attributes=span.attributes,
                    events=[Event(n, timestamp=t + offset) for n, t in span.events],
                    kind=SpanKind.SERVER if span.kind_server else SpanKind.INTERNAL,
                    instrumentation_scope=self.scope,
                    start_time=span.start_ns + offset,
                    end_time=span.end_ns + offset,
                )
            )

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(10.0)
        self.provider.shutdown()  # exports what is queued
        self._sdk_lines.summary()


def activate(trace_id: int, span_id: int, sampled: bool = True) -> object:
    """Make ``span_id`` the current OpenTelemetry span of this thread or task (plain API
    calls in a model nest under it; unsampled, the SDK records none of them); returns the
    token for :func:`deactivate`."""
    flags = _SAMPLED if sampled else TraceFlags(TraceFlags.DEFAULT)
    span = NonRecordingSpan(SpanContext(trace_id, span_id, False, flags))
    return otel_context.attach(otel_trace.set_span_in_context(span))


def deactivate(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


def extract(carrier: Iterable[tuple[str, str]]) -> tuple[int, int, bool, str] | None:
    """The caller's W3C context: ``traceparent`` (trace id, span id, sampled) and
    ``tracestate`` as it came ("" when the SDK's propagator finds none valid), or None."""
    headers = {k.lower(): v for k, v in carrier if k.lower() in ("traceparent", "tracestate")}
    if "traceparent" not in headers:
        return None
    ctx = otel_trace.get_current_span(_PROPAGATOR.extract(headers)).get_span_context()
    if not ctx.is_valid:
        return None
    state = headers.get("tracestate", "") if len(ctx.trace_state) else ""
    return ctx.trace_id, ctx.span_id, ctx.trace_flags.sampled, state


class _Collect(SpanProcessor):
    """Spans made with the OpenTelemetry API inside a traced request: into the trace's
    record (the batch processor exports them itself)."""

    def __init__(self, offset_ns: int, sink: Callable[[int, Span], None]) -> None:
        self._offset = offset_ns
        self._sink = sink

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None or span.start_time is None or span.end_time is None:
            return
        parent = span.parent.span_id if span.parent is not None else None
        record = Span(span.name, "", parent, span.start_time - self._offset, ctx.span_id, False)
        record.end_ns = span.end_time - self._offset
        record.attributes = dict(span.attributes or {})
        record.events = [(e.name, e.timestamp - self._offset) for e in span.events]
        record.external = True
        self._sink(ctx.trace_id, record)
