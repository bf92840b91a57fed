"""Time to first response per model version: Triton 26.01's
``nv_inference_first_response_histogram_ms`` (``--metrics-config histogram_latencies=true``).

Triton's core observes, once per request, the whole milliseconds (integer division) from the
request's start to its first response, whatever that response is (a token of a decoupled
model, the only response of another, an error), into a prometheus-cpp histogram whose
buckets are ``100, 500, 2000, 5000`` unless the model's config sets its own
(``model_metrics { metric_control { metric_identifier { family:
"nv_inference_first_response_histogram_ms" } histogram_options { buckets: [...] } } }``).
Since 26.01 every model has it (before, decoupled models only).
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("modelyard")

FAMILY = "nv_inference_first_response_histogram_ms"
HELP = "Duration from request to first response in milliseconds"
DEFAULT_BUCKETS_MS: tuple[float, ...] = (100.0, 500.0, 2000.0, 5000.0)
_NS_PER_MS = 1_000_000


class BucketsError(ValueError):
    """Buckets prometheus-cpp would refuse (not strictly increasing)."""


class FirstResponseHistogram:
    """Counts per bucket (the last one ``+Inf``), the observations and their sum."""

    __slots__ = ("bounds", "count", "counts", "sum_ms")

    def __init__(self, bounds: Sequence[float] = DEFAULT_BUCKETS_MS) -> None:
        if any(b >= c for b, c in itertools.pairwise(bounds)):
            raise BucketsError(
                f"the buckets of {FAMILY} must be strictly increasing, got {list(bounds)}"
            )
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum_ms = 0

    def observe_ns(self, ns: int) -> None:
        ms = ns // _NS_PER_MS
        # prometheus-cpp: the first bucket whose bound is >= the value (``le``)
        self.counts[bisect.bisect_left(self.bounds, ms)] += 1
        self.count += 1
        self.sum_ms += ms

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it) per bucket, ``+Inf`` last, as exposed."""
        out, seen = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            seen += n
            out.append((bound, seen))
        return out


def histogram_for(cfg: Any) -> FirstResponseHistogram:
    """The model's histogram; buckets prometheus-cpp would refuse are logged as an error and
    the defaults used (the model serves all the same)."""
    try:
        return FirstResponseHistogram(buckets_from_config(cfg))
    except BucketsError as e:
        log.error("model '%s': %s; using %s", cfg.name, e, list(DEFAULT_BUCKETS_MS))
        return FirstResponseHistogram()


def buckets_from_config(cfg: Any) -> tuple[float, ...]:
    """The model config's buckets for the family (the last ``metric_control`` naming it wins,
    as Triton's parser overwrites), else the defaults."""
    buckets = DEFAULT_BUCKETS_MS
    for control in cfg.model_metrics.metric_control:
        if control.metric_identifier.family == FAMILY:
            buckets = tuple(control.histogram_options.buckets)
    return buckets


__all__ = [
    "DEFAULT_BUCKETS_MS",
    "FAMILY",
    "HELP",
    "BucketsError",
    "FirstResponseHistogram",
    "buckets_from_config",
    "histogram_for",
]
