"""Latency summaries per model version (``--metrics-config summary_latencies=true``).

A summary as Triton's prometheus-cpp keeps it: a count and a sum since the version loaded, and
quantiles over a sliding window of the last ``max_age`` seconds, which moves in
``age_buckets`` steps (so the window holds between 4/5 and all of the last minute). An empty
window has NaN quantiles. prometheus-cpp estimates quantiles (CKMS) within each one's error;
here they are exact over what the window kept: every observation, or past ``SLICE_CAP`` in
one step a uniform sample of that step, weighted by what it stands for. Observation costs an
append under a lock; the work is at scrape time.
"""

from __future__ import annotations

import math
import random
import threading
import time
from array import array
from collections.abc import Callable

import numpy as np

from modelyard.serving.metrics_settings import SUMMARY_AGE_BUCKETS, SUMMARY_MAX_AGE_S

SLICE_CAP = 4096  # observations kept per window step (8 bytes each)


class _Slice:
    __slots__ = ("index", "seen", "values")

    def __init__(self, index: int) -> None:
        self.index = index
        self.seen = 0
        self.values = array("d")


class Summary:
    """Count, sum and windowed quantiles of one measured duration."""

    def __init__(
        self,
        max_age_s: float = SUMMARY_MAX_AGE_S,
        age_buckets: int = SUMMARY_AGE_BUCKETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = 0
        self.sum = 0.0
        self._step = max_age_s / age_buckets
        self._steps = age_buckets
        self._clock = clock
        self._slices: list[_Slice] = []
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        index = int(self._clock() // self._step)
        with self._lock:
            self.count += 1
            self.sum += value
            slices = self._slices
            if not slices or slices[-1].index != index:
                slices[:] = [s for s in slices if s.index > index - self._steps]
                slices.append(_Slice(index))
            current = slices[-1]
            current.seen += 1
            if len(current.values) < SLICE_CAP:
                current.values.append(value)
            else:  # reservoir sampling: each observation of the step kept with equal chance
                j = random.randrange(current.seen)
                if j < SLICE_CAP:
                    current.values[j] = value

    def quantiles(self, qs: list[float]) -> list[float]:
        """The value at each quantile of ``qs`` over the window (NaN when it is empty)."""
        oldest = int(self._clock() // self._step) - self._steps
        with self._lock:
            kept = [(np.array(s.values), s.seen) for s in self._slices if s.index > oldest]
        kept = [(v, seen) for v, seen in kept if len(v)]
        if not kept:
            return [math.nan] * len(qs)
        values = np.concatenate([v for v, _ in kept])
        weights = np.concatenate([np.full(len(v), seen / len(v)) for v, seen in kept])
        order = np.argsort(values, kind="stable")
        cumulative = np.cumsum(weights[order])
        total = float(cumulative[-1])
        out = []
        for q in qs:
            at = int(np.searchsorted(cumulative, q * total - 1e-9 * total, side="left"))
            out.append(float(values[order[min(at, len(order) - 1)]]))
        return out


class LatencySummaries:
    """A model version's summaries, fed where its statistics are recorded. Triton keeps no
    request summary for a model whose responses are cached (its request time is not one
    observation), and adds cache hit and miss summaries instead."""

    def __init__(self, cached: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.request = None if cached else Summary(clock=clock)
        self.queue = Summary(clock=clock)
        self.compute_input = Summary(clock=clock)
        self.compute_infer = Summary(clock=clock)
        self.compute_output = Summary(clock=clock)
        self.cache_hit = Summary(clock=clock) if cached else None
        self.cache_miss = Summary(clock=clock) if cached else None

    def success(self, t_received: int, t_queued: int, t_start: int, t_end: int) -> None:
        """One successful inference (monotonic ns), observed in whole microseconds as Triton
        does; the compute parts as the statistics record them."""
        if self.request is not None:
            self.request.observe((t_end - t_received) // 1000)
        if t_start and t_queued:
            self.queue.observe(max(0, t_start - t_queued) // 1000)
            self.compute_input.observe(0)
            self.compute_infer.observe((t_end - t_start) // 1000)
            self.compute_output.observe(0)

    def hit(self, queue_ns: int, hit_ns: int) -> None:
        """A request answered from the response cache."""
        self.queue.observe(queue_ns // 1000)
        if self.cache_hit is not None:
            self.cache_hit.observe(hit_ns // 1000)

    def miss(self, ns: int) -> None:
        """A response looked up in vain and then stored (lookup plus insertion)."""
        if self.cache_miss is not None:
            self.cache_miss.observe(ns // 1000)


__all__ = ["SLICE_CAP", "LatencySummaries", "Summary"]
