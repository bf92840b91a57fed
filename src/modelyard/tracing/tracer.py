"""The server's tracer: settings, sampling at the frontends, and the sinks a finished trace
goes to (Triton's file or OpenTelemetry, and always the store of recent traces); also the
BLS call graph.

With tracing off (every setting's level OFF, the default) ``on`` is False and a request
pays for that one check: frontends sample nothing, so no request carries a trace.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from modelyard.tracing.config import LEVEL_OFF, MODE_OPENTELEMETRY, TraceConfig
from modelyard.tracing.settings import TraceSettings
from modelyard.tracing.stores import CallGraph, RecentTraces
from modelyard.tracing.trace import Span, Trace
from modelyard.tracing.triton_file import TritonWriter

log = logging.getLogger("modelyard")


class Tracer:
    def __init__(self, config: TraceConfig | None = None, recent: int = 100) -> None:
        self.config = config or TraceConfig()
        self.settings = TraceSettings(self.config)
        self.on = self.settings.on
        self.otel_mode = self.config.mode == MODE_OPENTELEMETRY
        self.offset_ns = time.time_ns() - time.monotonic_ns()  # monotonic -> wall clock
        self.recent = RecentTraces(recent, self.offset_ns)
        self.call_graph = CallGraph()
        self._ids = itertools.count(1)
        self._id_lock = threading.Lock()
        self._writer = TritonWriter()
        self._otel: Any = None
        self._live: dict[int, Trace] = {}  # traces in flight, by trace id

    def start(self) -> None:
        """Set up the exporter (OpenTelemetry mode); ValueError for bad settings."""
        if self.otel_mode and self._otel is None:
            try:
                from modelyard.tracing.otel import OtelExporter
            except ImportError as e:
                raise ValueError(
                    f"--trace-config mode=opentelemetry needs the OpenTelemetry SDK and OTLP "
                    f"exporter ({e}): pip install 'modelyard[otel]'"
                ) from None

            self._otel = OtelExporter(self.config, self.offset_ns, self._user_span)

    def close(self) -> None:
        """Write what is pending (Triton's file) and flush the exporter."""
        self._writer.close()
        if self._otel is not None:
            self._otel.close()
            self._otel = None

    # -- settings ----------------------------------------------------------------------------

    def get_settings(self, model: str = "") -> dict[str, Any]:
        return self.settings.get(model)

    def update_settings(self, model: str, update: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.settings.update(model, update)
        finally:
            self.on = self.settings.on

    # -- traces ------------------------------------------------------------------------------

    def _next_id(self) -> int:
        with self._id_lock:
            return next(self._ids)

    def sample(self, model: str, carrier: Iterable[tuple[Any, Any]] | None = None) -> Trace | None:
        """A trace for a client request to ``model``, or None. ``carrier``: the request's
        headers or metadata, where OpenTelemetry mode looks for W3C ``traceparent`` and
        ``tracestate``: a sampled caller forces a trace that joins the caller's; an unsampled
        one gets an unsampled trace, which records and exports nothing but carries the
        caller's context unchanged to the model and its BLS calls (beyond Triton,
        server#8474)."""
        setting = self.settings.for_model(model)
        if setting.level == LEVEL_OFF:
            return None
        parent = None
        if self.otel_mode and carrier is not None:
            from modelyard.tracing.otel import extract

            parent = extract(_text_pairs(carrier))
        sampled = parent is None or parent[2]
        if sampled and not setting.take(force=parent is not None):
            return None
        trace = Trace(
            self._finished,
            setting,
            self._next_id,
            trace_id=parent[0] if parent else 0,
            remote_parent=parent[1] if parent else None,
            sampled=sampled,
            tracestate=parent[3] if parent else "",
        )
        if not sampled:
            return trace
        if self._otel is not None:
            self._live[trace.trace_id] = trace
        return trace

    def _finished(self, trace: Trace) -> None:
        if not trace.sampled:  # the caller's context passed through; nothing to record
            return
        self._live.pop(trace.trace_id, None)
        if not trace.requests:  # refused before any model saw it (an unknown model)
            return
        try:
            if trace.triton_file:
                self._writer.write(trace)
            elif self._otel is not None:
                self._otel.export(trace)
            if trace.requests:
                self.recent.add(trace)
        except Exception:  # a sink must never fail the request that ended the trace
            log.exception("recording a trace failed")

    def _user_span(self, trace_id: int, span: Span) -> None:
        trace = self._live.get(trace_id)
        if trace is not None:
            trace.spans.append(span)

    def activate(self, trace: Trace, span_id: int) -> object | None:
        """OpenTelemetry mode: make the span current for plain API calls (a token for
        :meth:`deactivate`; unsampled, the caller's span and flags); None in Triton mode."""
        if self._otel is None:
            return None
        from modelyard.tracing.otel import activate

        if not trace.sampled:
            return activate(trace.trace_id, trace.root.parent_id or span_id, False)
        return activate(trace.trace_id, span_id)

    def deactivate(self, token: object | None) -> None:
        if token is not None:
            from modelyard.tracing.otel import deactivate

            deactivate(token)


def _text_pairs(carrier: Iterable[tuple[Any, Any]]) -> Iterable[tuple[str, str]]:
    for key, value in carrier:
        k = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        v = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        yield k, v
