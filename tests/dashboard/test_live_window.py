"""The rolling window (serving/live.py): buckets, percentiles, the summary's span, the series,
refusals among the errors, bounded memory, and that ModelStats feeds it without changing
Triton's statistics shape."""

from __future__ import annotations

import random
import time

import pytest

from modelyard.serving import live
from modelyard.serving.live import (
    SUMMARY_S,
    WINDOW_S,
    LiveWindow,
    bucket_value,
    latency_bucket,
)
from modelyard.serving.stats import ModelStats

S = 1_000_000_000
T0 = 1_000 * S  # an arbitrary monotonic second


def test_buckets_are_monotonic_and_within_five_percent() -> None:
    last = -1
    for us in [*range(0, 2000), *random.Random(7).sample(range(2000, 10**9), 2000)]:
        index = latency_bucket(us)
        if us < 2000:
            assert index >= last  # increasing latencies never go to a lower bucket
            last = index
        assert abs(bucket_value(index) - us) <= max(0.5, 0.0625 * us), us


def test_success_records_latency_queue_and_rate() -> None:
    w = LiveWindow()
    for i in range(100):  # 100 requests over the last second: 1 ms .. 100 ms, 50 us queued
        t_end = T0 + i * (S // 100)
        lat = (i + 1) * 1_000_000
        w.success(t_end - lat, t_end - lat + 10, t_end - lat + 50_010, t_end)
    snap = w.snapshot(T0 + S - 1)
    assert snap["requests"] == 100 and snap["errors"] == 0
    assert snap["p50_us"] == pytest.approx(50_000, rel=0.07)
    assert snap["p99_us"] == pytest.approx(99_000, rel=0.07)
    assert snap["queue_us"] == pytest.approx(50.0)
    # 100 requests over SUMMARY_S - 1 whole seconds and (almost) all of this one.
    assert snap["rate"] == pytest.approx(100 / SUMMARY_S, rel=0.01)
    assert snap["series"]["requests"][-1] == 100
    assert len(snap["series"]["requests"]) == WINDOW_S


def test_failures_and_batches() -> None:
    w = LiveWindow()
    w.failure(T0)
    w.failure(T0 + 1)
    w.execution(4, T0)
    w.execution(4, T0 + S)
    w.execution(1, T0 + S)
    snap = w.snapshot(T0 + S)
    assert snap["errors"] == 2 and snap["requests"] == 0
    assert snap["batches"] == {"1": 1, "4": 2}
    assert snap["series"]["errors"][-2:] == [2, 0]
    assert snap["p50_us"] == 0.0 and snap["queue_us"] == 0.0


def test_refusals_count_among_the_errors() -> None:
    w = LiveWindow()
    w.failure(T0)
    w.refusal(T0 + 1)
    w.refusal(T0 + S)
    snap = w.snapshot(T0 + S)
    assert (snap["errors"], snap["refused"], snap["requests"]) == (3, 2, 0)
    assert snap["series"]["errors"][-2:] == [2, 1]
    assert snap["rate"] > 0  # refused requests are requests
    assert w.refused_total == 2
    later = w.snapshot(T0 + (SUMMARY_S + 1) * S)
    assert (later["errors"], later["refused"], w.refused_total) == (0, 0, 2)


def test_every_figure_says_its_window() -> None:
    snap = LiveWindow().snapshot(T0)
    assert snap["window_s"] == SUMMARY_S and snap["series"]["window_s"] == WINDOW_S


def test_old_seconds_leave_the_summary_then_the_window() -> None:
    w = LiveWindow()
    w.success(T0, 0, 0, T0)
    assert w.snapshot(T0 + (SUMMARY_S - 1) * S)["requests"] == 1
    later = w.snapshot(T0 + SUMMARY_S * S)
    assert later["requests"] == 0 and later["rate"] == 0.0
    assert later["series"]["requests"][WINDOW_S - 1 - SUMMARY_S] == 1
    assert sum(w.snapshot(T0 + WINDOW_S * S)["series"]["requests"]) == 0


def test_memory_is_bounded_by_the_window() -> None:
    w = LiveWindow()
    for sec in range(10 * WINDOW_S):
        w.success(T0 + sec * S - 1000, 0, 0, T0 + sec * S)
    assert len(w._seconds) == WINDOW_S
    assert sum(w.snapshot(T0 + (10 * WINDOW_S - 1) * S)["series"]["requests"]) == WINDOW_S


def test_model_stats_feed_the_window_and_keep_tritons_shape() -> None:
    stats = ModelStats("m", "1")
    before = stats.as_dict()
    t = time.monotonic_ns()  # ModelStats records on the monotonic clock
    stats.record_success(t - 1_000_000, t - 990_000, t - 980_000, t, 1)
    stats.record_execution(1, 980_000)
    stats.record_failure(t - 5, t)
    after = stats.as_dict()
    assert after.keys() == before.keys()
    assert after["inference_stats"].keys() == before["inference_stats"].keys()
    snap = stats.live.snapshot()
    assert (snap["requests"], snap["errors"], snap["batches"]) == (1, 1, {"1": 1})
    assert snap["p50_us"] == pytest.approx(1000, rel=0.07)
    assert snap["queue_us"] == pytest.approx(10.0)


def test_two_buckets_of_one_second_are_merged() -> None:
    """Two threads rolling over at once may each start a bucket for the same second."""
    w = LiveWindow()
    w.success(T0 - 1000, 0, 0, T0)
    w._cur = type(w._cur)(-1)  # as if another thread had rolled over meanwhile
    w.success(T0 - 1000, 0, 0, T0 + 1)
    w.failure(T0 + 2)
    snap = w.snapshot(T0 + 3)
    assert (snap["requests"], snap["errors"], snap["series"]["requests"][-1]) == (2, 1, 2)


def test_the_lookup_table_is_latency_bucket() -> None:
    assert len(live._BUCKETS) == live._TABLE_US
    assert all(live._BUCKETS[us] == latency_bucket(us) for us in range(live._TABLE_US))
