"""A per model-version rolling window of the last minute, for the dashboard.

``ModelStats`` feeds it where it records Triton's cumulative statistics, and the core where
it refuses a request for the version (validation: Triton's statistics do not count those, the
dashboard's errors do). Memory is bounded:
one bucket per second that saw traffic, the last ``WINDOW_S`` of them. Recording costs a
few integer operations and two sparse-dict updates (no lock: like the cumulative counters,
each update is a handful of bytecodes under the GIL). Latencies go into a log-scale
histogram with 8 buckets per octave (percentiles within ~5 %), indexed with integer bit
operations rather than a logarithm.
"""

from __future__ import annotations

import collections
import time
from typing import Any

WINDOW_S = 60  # seconds kept
SUMMARY_S = 10  # seconds the summary (rate, percentiles, queue, batches) covers
_NS = 1_000_000_000
_SUB = 3  # 2**3 = 8 buckets per octave


def latency_bucket(us: int) -> int:
    """A latency in µs -> its histogram bucket (exact below 16 µs, then 8 per octave)."""
    bits = us.bit_length()
    if bits <= _SUB + 1:
        return us
    return (bits << _SUB) | ((us >> (bits - _SUB - 1)) & 7)


def bucket_value(index: int) -> float:
    """The middle of a bucket, in µs (the inverse of :func:`latency_bucket`)."""
    if index < 1 << (_SUB + 1):
        return float(index)
    bits, sub = index >> _SUB, index & 7
    low = (8 | sub) << (bits - _SUB - 1)
    return low + (1 << (bits - _SUB - 1)) / 2


# latency_bucket() of every latency below 65 ms, looked up (a third of the cost); built run
# by run: from 16 µs on, each bucket is a run of equal indexes (the largest is 135).
_TABLE_BITS = 16
_TABLE_US = 1 << _TABLE_BITS
_BUCKETS = bytes(range(1 << (_SUB + 1))) + b"".join(
    bytes([(bits << _SUB) | sub]) * (1 << (bits - _SUB - 1))
    for bits in range(_SUB + 2, _TABLE_BITS + 1)
    for sub in range(8)
)


class _Second:
    """What one second saw."""

    __slots__ = ("batches", "errors", "first", "hist", "queue_n", "queue_ns", "refused", "sec")

    def __init__(self, sec: int) -> None:
        self.sec = sec
        self.errors = 0  # failed requests (as Triton's statistics count them)
        self.refused = 0  # requests the core refused (validation), not in Triton's count
        self.queue_ns = 0
        self.queue_n = 0
        self.hist: dict[int, int] = {}  # latency bucket -> successful requests
        self.batches: dict[int, int] = {}  # execution batch size -> executions
        self.first: dict[int, int] = {}  # time-to-first-response bucket -> requests


class LiveWindow:
    """The last ``WINDOW_S`` seconds of one model version, second by second (monotonic
    clock, the one the statistics use)."""

    __slots__ = ("_cur", "_seconds", "first_responses", "refused_total")

    def __init__(self) -> None:
        self._seconds: collections.deque[_Second] = collections.deque(maxlen=WINDOW_S)
        self._cur = _Second(-1)
        self.refused_total = 0  # since the version loaded
        # Decoupled versions: time to first response too (ModelStats.track_first_responses).
        self.first_responses = False

    def _second(self, now_ns: int) -> _Second:
        sec = now_ns // _NS
        cur = self._cur
        if cur.sec != sec:
            cur = self._cur = _Second(sec)
            self._seconds.append(cur)
        return cur

    def success(self, t_received: int, t_queued: int, t_start: int, t_end: int) -> None:
        # Per request, so kept inline and small: the successes are the histogram's sum.
        s = self._cur
        if s.sec != t_end // _NS:
            s = self._second(t_end)
        us = (t_end - t_received) // 1000
        b = _BUCKETS[us] if us < _TABLE_US else latency_bucket(us)
        hist = s.hist
        hist[b] = hist.get(b, 0) + 1
        if t_start and t_queued:
            s.queue_ns += t_start - t_queued
            s.queue_n += 1

    def first_response(self, t_received: int, t_first: int) -> None:
        us = (t_first - t_received) // 1000
        first = self._second(t_first).first
        b = _BUCKETS[us] if us < _TABLE_US else latency_bucket(us)
        first[b] = first.get(b, 0) + 1

    def failure(self, t_end: int) -> None:
        self._second(t_end).errors += 1

    def refusal(self, t_end: int) -> None:
        """A request refused before it was queued (bad inputs): only the core's error path
        calls this, so accepted requests pay nothing for it."""
        self._second(t_end).refused += 1
        self.refused_total += 1

    def execution(self, batch_size: int, t_end: int) -> None:
        b = self._second(t_end).batches
        b[batch_size] = b.get(batch_size, 0) + 1

    def snapshot(self, now_ns: int | None = None) -> dict[str, Any]:
        """The summary of the last ``SUMMARY_S`` seconds (``window_s``) and per-second series
        of the last ``WINDOW_S`` (``series.window_s``; oldest first, seconds without traffic
        are zeros). ``errors`` counts failures and refusals, ``refused`` the refusals."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        sec = now // _NS
        # Copies first: recording may go on in other threads (list() of a deque and dict()
        # of a dict are single operations under the GIL).
        # Two threads rolling over at once may have made two buckets for one second: each
        # second's buckets are merged.
        seen: dict[int, list[_Second]] = {}
        for s in list(self._seconds):
            if s.sec <= sec:
                seen.setdefault(s.sec, []).append(s)
        series: dict[str, list[float]] = {"requests": [], "errors": [], "p99_us": []}
        hist: dict[int, int] = {}
        first: dict[int, int] = {}
        batches: dict[int, int] = {}
        errors = refused = queue_n = queue_ns = 0
        for t in range(sec - WINDOW_S + 1, sec + 1):
            h: dict[int, int] = {}
            errs = refs = 0
            for s in seen.get(t, ()):
                _add(h, dict(s.hist))
                errs += s.errors + s.refused
                refs += s.refused
                if t > sec - SUMMARY_S:
                    _add(batches, dict(s.batches))
                    _add(first, dict(s.first))
                    queue_n += s.queue_n
                    queue_ns += s.queue_ns
            n = sum(h.values())
            series["requests"].append(n)
            series["errors"].append(errs)
            series["p99_us"].append(_percentile(h, n, 0.99))
            if t > sec - SUMMARY_S:
                _add(hist, h)
                errors += errs
                refused += refs
        requests = sum(hist.values())
        firsts = sum(first.values())
        # The summary's span so far: SUMMARY_S - 1 whole seconds and what passed of this one.
        span_s = SUMMARY_S - 1 + (now % _NS) / _NS
        return {
            "window_s": SUMMARY_S,
            "requests": requests,
            "errors": errors,
            "refused": refused,
            "rate": (requests + errors) / span_s,
            "p50_us": _percentile(hist, requests, 0.50),
            "p99_us": _percentile(hist, requests, 0.99),
            "queue_us": queue_ns / queue_n / 1000 if queue_n else 0.0,
            "batches": {str(k): v for k, v in sorted(batches.items())},
            # decoupled versions: from the request to its first response (None for others)
            "first_response": {
                "requests": firsts,
                "p50_us": _percentile(first, firsts, 0.50),
                "p99_us": _percentile(first, firsts, 0.99),
            }
            if self.first_responses
            else None,
            "series": {"window_s": WINDOW_S, **series},
        }


def _add(into: dict[int, int], counts: dict[int, int]) -> None:
    for k, v in counts.items():
        into[k] = into.get(k, 0) + v


def _percentile(hist: dict[int, int], total: int, q: float) -> float:
    if not total:
        return 0.0
    rank = q * total
    seen = 0
    for index in sorted(hist):
        seen += hist[index]
        if seen >= rank:
            return bucket_value(index)
    return bucket_value(max(hist))
