"""The histogram families of the metrics endpoint: Triton 26.01's
``nv_inference_first_response_histogram_ms`` per model version, for the versions that keep
one (``--metrics-config histogram_latencies=true``; serving/first_response.py).

prometheus-cpp writes a histogram's series as ``_count``, ``_sum``, then one ``_bucket`` per
bound with ``le`` after the sorted labels, ``+Inf`` last; histograms come after the gauges
and before the summaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from modelyard.metrics.custom import labels_text
from modelyard.serving.first_response import FAMILY, HELP
from modelyard.serving.stats import ModelStats


def _value(v: float) -> str:
    """A double as prometheus-cpp writes it (16 significant digits, ``+Inf``)."""
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return f"{v:.16g}"


def first_response_lines(stats: Iterable[ModelStats]) -> list[str]:
    """The family's lines (none when no version keeps the histogram)."""
    lines: list[str] = []
    for s in stats:
        histogram = s.first_response
        if histogram is None:
            continue
        buckets = histogram.cumulative()
        pairs = s.labels()
        labels = labels_text(pairs)
        # the count is the +Inf bucket's (requests recorded meanwhile show at the next scrape)
        lines.append(f"{FAMILY}_count{labels} {buckets[-1][1]}")
        lines.append(f"{FAMILY}_sum{labels} {_value(histogram.sum_ms)}")
        for bound, n in buckets:
            lines.append(f"{FAMILY}_bucket{labels_text([*pairs, ('le', _value(bound))])} {n}")
    if not lines:
        return []
    return [f"# HELP {FAMILY} {HELP}", f"# TYPE {FAMILY} histogram", *lines]


__all__ = ["first_response_lines"]
