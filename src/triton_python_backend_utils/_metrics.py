"""Custom metrics: MetricFamily / Metric. Values live in this process; the server reads them
with ``snapshot()`` to export them."""

from __future__ import annotations

import bisect
import enum
import itertools
import math
import re
import threading
import time
import weakref
from typing import Any

from ._errors import TritonModelException

__all__ = ["Metric", "MetricFamily", "MetricKind", "snapshot"]

_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_DELETED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_KIND_NAMES = {
    MetricKind.COUNTER: "TRITONSERVER_METRIC_KIND_COUNTER",
    MetricKind.GAUGE: "TRITONSERVER_METRIC_KIND_GAUGE",
    MetricKind.HISTOGRAM: "TRITONSERVER_METRIC_KIND_HISTOGRAM",
}


class _Series:
    """One labelled time series (shared by every Metric created with the same labels)."""

    __slots__ = ("buckets", "count", "counts", "labels", "stamp", "sum", "value")

    def __init__(self, labels: dict[str, str], buckets: list[float] | None) -> None:
        self.labels = labels
        self.value = 0.0
        self.stamp = 0.0  # when the value last changed (merging gauges of several workers)
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1) if buckets is not None else []
        self.sum = 0.0
        self.count = 0


class _Family:
    """The registry's record of a family name (shared by MetricFamily objects of that name)."""

    __slots__ = ("description", "kind", "name", "series")

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self.series: dict[tuple[tuple[str, str], ...], _Series] = {}


_lock = threading.Lock()
_families: dict[str, _Family] = {}


class MetricFamily:
    """``MetricFamily(name, description, kind)``; kind is MetricFamily.COUNTER/GAUGE/HISTOGRAM."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not isinstance(name, str):
            raise TypeError(f"MetricFamily(): 'name' must be str, got {type(name).__name__}")
        if not isinstance(description, str):
            raise TypeError(
                f"MetricFamily(): 'description' must be str, got {type(description).__name__}"
            )
        if not isinstance(kind, MetricKind):
            raise TypeError(
                "MetricFamily(): 'kind' must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, got "
                f"{type(kind).__name__}"
            )
        if not _NAME_RE.match(name):
            raise TritonModelException(
                f"Error when creating MetricFamily: invalid metric family name '{name}'"
            )
        with _lock:
            family = _families.get(name)
            if family is None:
                family = _families[name] = _Family(name, description, kind)
            elif family.kind != kind:
                raise TritonModelException(
                    f"Error when creating MetricFamily: a metric family named '{name}' already "
                    f"exists with kind {_KIND_NAMES[family.kind]}"
                )
        self._family = family
        self._kind = kind

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None and not isinstance(buckets, list):
            raise TritonModelException("Failed to create metric. Buckets must be a list.")
        if self._kind == MetricKind.HISTOGRAM:
            if buckets is None:
                raise TritonModelException("Failed to create metric. Missing required buckets.")
        elif buckets is not None:
            raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        label_map: dict[str, str] = {}
        for key, value in (labels or {}).items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TritonModelException(
                    f"Failed to create metric. Label [{key}] must have a string key and value."
                )
            label_map[key] = value
        bounds: list[float] | None = None
        if buckets is not None:
            try:
                bounds = [float(b) for b in buckets]
            except (TypeError, ValueError):
                raise TritonModelException(
                    "Failed to create metric. Buckets must be a list of numbers."
                ) from None
            if any(b >= c for b, c in itertools.pairwise(bounds)):
                raise TritonModelException(
                    "Failed to create metric. Histogram buckets must be in increasing order."
                )
        series_key = tuple(sorted(label_map.items()))
        with _lock:
            series = self._family.series.get(series_key)
            if series is None:
                series = self._family.series[series_key] = _Series(label_map, bounds)
        return Metric._create(self, series)


class Metric:
    """One labelled metric: ``increment(v)``, ``set(v)``, ``observe(v)``, ``value()``."""

    __slots__ = ("_family", "_kind", "_series")

    _family: weakref.ref[MetricFamily]
    _kind: MetricKind
    _series: _Series

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Metric objects are created with MetricFamily.Metric(labels, buckets)")

    @classmethod
    def _create(cls, family: MetricFamily, series: _Series) -> Metric:
        m = cls.__new__(cls)
        m._family = weakref.ref(family)
        m._kind = family._kind
        m._series = series
        return m

    def _check(self, op: str, value: Any, allowed: tuple[MetricKind, ...]) -> float:
        if self._family() is None:
            raise TritonModelException(_DELETED)
        if self._kind not in allowed:
            raise TritonModelException(
                f"Failed to {op} metric value: {_KIND_NAMES[self._kind]} does not support "
                f"{op.capitalize()}"
            )
        if value is None or isinstance(value, (str, bytes)):
            raise TypeError(f"Metric.{op}(): value must be a number, got {type(value).__name__}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"Metric.{op}(): value must be a number, got {type(value).__name__}"
            ) from None

    def increment(self, value: float) -> None:
        v = self._check("increment", value, (MetricKind.COUNTER, MetricKind.GAUGE))
        if self._kind == MetricKind.COUNTER and v < 0.0:
            raise TritonModelException(
                "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only "
                "be incremented monotonically by non-negative values."
            )
        with _lock:
            self._series.value += v
            self._series.stamp = time.monotonic()

    def set(self, value: float) -> None:
        v = self._check("set", value, (MetricKind.GAUGE,))
        with _lock:
            self._series.value = v
            self._series.stamp = time.monotonic()

    def observe(self, value: float) -> None:
        v = self._check("observe", value, (MetricKind.HISTOGRAM,))
        series = self._series
        assert series.buckets is not None
        index = bisect.bisect_left(series.buckets, v) if not math.isnan(v) else len(series.buckets)
        with _lock:
            series.counts[index] += 1
            series.sum += v
            series.count += 1

    def value(self) -> float:
        if self._family() is None:
            raise TritonModelException(_DELETED)
        if self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException(
                "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not "
                "support Value"
            )
        return self._series.value


def snapshot() -> list[dict[str, Any]]:
    """Every custom metric family and series, for the server's metrics endpoint.

    Each family: ``{"name", "description", "kind": "counter"|"gauge"|"histogram", "series":
    [{"labels": {...}, "value": float}]}``; histogram series have ``"buckets"`` (upper
    bounds), ``"counts"`` (per bucket, non-cumulative, last one is +Inf), ``"sum"``,
    ``"count"`` instead of ``"value"``.
    """
    out: list[dict[str, Any]] = []
    with _lock:
        for family in _families.values():
            series_out: list[dict[str, Any]] = []
            for s in family.series.values():
                if family.kind == MetricKind.HISTOGRAM:
                    series_out.append(
                        {
                            "labels": dict(s.labels),
                            "buckets": list(s.buckets or []),
                            "counts": list(s.counts),
                            "sum": s.sum,
                            "count": s.count,
                        }
                    )
                else:
                    entry = {"labels": dict(s.labels), "value": s.value}
                    if family.kind == MetricKind.GAUGE:
                        entry["stamp"] = s.stamp  # the server keeps the gauge set last
                    series_out.append(entry)
            out.append(
                {
                    "name": family.name,
                    "description": family.description,
                    "kind": family.kind.name.lower(),
                    "series": series_out,
                }
            )
    return out
