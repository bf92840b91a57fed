"""What the dashboard reads: the last finished traces, and the call graph.

``RecentTraces`` keeps the last N traces (any mode) as plain dicts (shape in
ARCHITECTURE.md). ``CallGraph`` counts every BLS call and every ensemble step, traced or
not, since the server started: per (caller, callee, kind) edge the calls, errors and a
log-bucket latency histogram (8 buckets per octave, so percentiles are within ~5 %), a few
list operations per call.
"""

from __future__ import annotations

import collections
import math
import threading
from typing import Any

from modelyard.tracing.trace import Trace

DEFAULT_RECENT = 100
_PER_OCTAVE = 8
_BUCKETS = 40 * _PER_OCTAVE  # up to 2**40 us


def trace_record(trace: Trace, offset_ns: int) -> dict[str, Any]:
    """A finished trace as the store keeps it (wall-clock ns, hex ids)."""
    spans = []
    for span in trace.spans:
        if not span.end_ns:
            continue
        spans.append(
            {
                "span_id": f"{span.span_id:016x}",
                "parent_id": None if span.parent_id is None else f"{span.parent_id:016x}",
                "name": span.name,
                "model": span.model or trace.model,
                "start_ns": span.start_ns + offset_ns,
                "end_ns": span.end_ns + offset_ns,
                "attributes": dict(span.attributes),
                "events": [{"name": n, "time_ns": t + offset_ns} for n, t in span.events],
            }
        )
    root = trace.root
    return {
        "trace_id": f"{trace.trace_id:032x}",
        "model": trace.model,
        "request_id": trace.request_id,
        "start_ns": root.start_ns + offset_ns,
        "end_ns": max(root.end_ns, *(s.end_ns for s in trace.spans)) + offset_ns,
        "spans": spans,
    }


class RecentTraces:
    """The last ``size`` finished traces, newest first. A trace is kept as it is and made
    into its dict when read (the request that finished it does not pay for that)."""

    def __init__(self, size: int = DEFAULT_RECENT, offset_ns: int = 0) -> None:
        self._items: collections.deque[Trace | dict[str, Any]] = collections.deque(maxlen=size)
        self._offset = offset_ns
        self._lock = threading.Lock()

    def add(self, trace: Trace | dict[str, Any]) -> None:
        with self._lock:
            self._items.appendleft(trace)

    def recent(self, limit: int | None = None, model: str = "") -> list[dict[str, Any]]:
        """The newest ``limit`` traces; with ``model``, only the traces of its requests
        (the trace's own model, the one the client called)."""
        with self._lock:
            items = list(self._items)
        if model:
            items = [t for t in items if _model_of(t) == model]
        if limit is not None:
            items = items[: max(0, limit)]
        return [t if isinstance(t, dict) else trace_record(t, self._offset) for t in items]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _model_of(trace: Trace | dict[str, Any]) -> str:
    return str(trace["model"]) if isinstance(trace, dict) else trace.model


BLS = "bls"
ENSEMBLE = "ensemble"


class _Edge:
    __slots__ = ("buckets", "calls", "errors", "total_ns")

    def __init__(self) -> None:
        self.calls = 0
        self.errors = 0
        self.total_ns = 0
        self.buckets = [0] * _BUCKETS


def _bucket(ns: int) -> int:
    us = ns / 1000.0
    if us < 1.0:
        return 0
    return min(_BUCKETS - 1, int(math.log2(us) * _PER_OCTAVE) + 1)


def _bucket_value(index: int) -> float:
    """The geometric middle of a bucket, in us."""
    if index == 0:
        return 0.5
    return float(2 ** ((index - 0.5) / _PER_OCTAVE))


class CallGraph:
    """Calls by (caller model, callee model, kind): ``BLS`` calls a model makes, and the
    ``ENSEMBLE`` steps an ensemble runs."""

    def __init__(self) -> None:
        self._edges: dict[tuple[str, str, str], _Edge] = {}
        self._lock = threading.Lock()

    def record(self, caller: str, callee: str, ns: int, error: bool, kind: str = BLS) -> None:
        index = _bucket(ns)
        key = (caller, callee, kind)
        with self._lock:
            edge = self._edges.get(key)
            if edge is None:
                edge = self._edges[key] = _Edge()
            edge.calls += 1
            edge.errors += error
            edge.total_ns += ns
            edge.buckets[index] += 1

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            edges = [
                (k, e.calls, e.errors, e.total_ns, list(e.buckets)) for k, e in self._edges.items()
            ]
        out = []
        for (caller, callee, kind), calls, errors, total, buckets in sorted(edges):
            out.append(
                {
                    "caller": caller,
                    "callee": callee,
                    "kind": kind,
                    "calls": calls,
                    "errors": errors,
                    "mean_us": total / calls / 1000.0 if calls else 0.0,
                    "p50_us": _percentile(buckets, calls, 0.50),
                    "p99_us": _percentile(buckets, calls, 0.99),
                }
            )
        return out

    def clear(self) -> None:
        with self._lock:
            self._edges.clear()


def _percentile(buckets: list[int], total: int, q: float) -> float:
    if not total:
        return 0.0
    rank = q * total
    seen = 0
    for index, count in enumerate(buckets):
        seen += count
        if count and seen >= rank:
            return _bucket_value(index)
    return _bucket_value(len(buckets) - 1)
