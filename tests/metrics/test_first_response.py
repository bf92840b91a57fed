"""Triton 26.01's ``nv_inference_first_response_histogram_ms`` on the metrics endpoint with
``--metrics-config histogram_latencies=true``: every model version has it from its load
(26.01 extended it from decoupled models to all), with the default buckets or the ones its
config's ``model_metrics`` sets, and each request adds its whole milliseconds to the first
response once. Triton 2.51 (the reference) has no such metric, so the checks are against
26.01's core code (serving/first_response.py) rather than a differential run."""

from __future__ import annotations

import queue
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from modelyard.metrics.histograms import first_response_lines
from modelyard.serving.first_response import BucketsError, FirstResponseHistogram
from modelyard.serving.metrics_settings import MetricsSettings, apply_settings
from modelyard.serving.stats import ModelStats
from tests.conftest import Serving
from tests.helpers import EXAMPLES, MODELS, make_repo, read_metrics
from tests.serverproc import ServerProcess

FAMILY = "nv_inference_first_response_histogram_ms"
DELAY_MS = 40


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    repo = make_repo(
        serving.repo(["repeat", "add_sub"], EXAMPLES), ["first_response_delay"], MODELS
    )
    with serving.server(repo, "--metrics-config", "histogram_latencies=true") as srv:
        yield srv


def _stream(url: str, model: str, name: str, value: int, requests: int, responses: int) -> None:
    """``requests`` requests over one gRPC stream, each answered with ``responses`` responses
    and the empty final one asked for; returns once all of them have come."""
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: results.put(error or result))
        try:
            for _ in range(requests):
                x = grpcclient.InferInput(name, [1], "INT32")
                x.set_data_from_numpy(np.array([value], np.int32))
                client.async_stream_infer(model, [x], enable_empty_final_response=True)
            for _ in range(requests * (responses + 1)):
                answer = results.get(timeout=30)
                assert not isinstance(answer, Exception), answer
        finally:
            client.stop_stream()


def _series(text: str, model: str) -> dict[str, float]:
    """The family's series of ``model``: ``count``, ``sum`` and ``le=...`` per bucket, in
    the order written."""
    out: dict[str, float] = {}
    labels = f'model="{model}",version="1"'
    for line in text.splitlines():
        m = re.fullmatch(
            rf"{FAMILY}_(count|sum|bucket)\{{{labels}(?:,le=\"([^\"]+)\")?\}} (\S+)", line
        )
        if m:
            out[m[1] if m[1] != "bucket" else f"le={m[2]}"] = float(m[3])
    return out


def test_the_family_is_there_from_the_load_with_its_buckets(server: ServerProcess) -> None:
    text = read_metrics(server.metrics_url)
    lines = text.splitlines()
    assert f"# HELP {FAMILY} Duration from request to first response in milliseconds" in lines
    assert f"# TYPE {FAMILY} histogram" in lines
    # prometheus-cpp: histograms after the gauges, before any summary
    assert lines.index(f"# TYPE {FAMILY} histogram") > lines.index(
        "# TYPE nv_inference_pending_request_count gauge"
    )
    for model in ("add_sub", "repeat"):  # the default buckets, decoupled or not
        assert list(_series(text, model)) == [
            "count", "sum", "le=100", "le=500", "le=2000", "le=5000", "le=+Inf",
        ]  # fmt: skip
    assert list(_series(text, "first_response_delay"))[2:] == [
        "le=-1", "le=0", "le=1", "le=2.5", "le=30", "le=+Inf",
    ]  # fmt: skip


def test_a_decoupled_request_counts_once_at_its_first_response(server: ServerProcess) -> None:
    before = _series(read_metrics(server.metrics_url), "first_response_delay")
    _stream(server.grpc_url, "first_response_delay", "DELAY_MS", DELAY_MS, 3, 2)
    after = _series(read_metrics(server.metrics_url), "first_response_delay")
    assert after["count"] - before["count"] == 3  # two responses each, one observation
    assert after["le=+Inf"] == after["count"]
    assert after["sum"] - before["sum"] >= 3 * DELAY_MS  # whole ms, each at least the delay
    for bound in ("-1", "0", "1", "2.5", "30"):  # below the delay: nothing
        assert after[f"le={bound}"] == before[f"le={bound}"] == 0
    values = [after[k] for k in after if k.startswith("le=")]
    assert values == sorted(values)  # cumulative


def test_every_request_of_another_model_counts_too(server: ServerProcess) -> None:
    before = _series(read_metrics(server.metrics_url), "repeat")["count"]
    _stream(server.grpc_url, "repeat", "COUNT", 3, 4, 3)
    _stream(server.grpc_url, "repeat", "COUNT", 0, 1, 0)  # only the FINAL flag: no response
    after = _series(read_metrics(server.metrics_url), "repeat")
    assert after["count"] - before == 4 and after["le=+Inf"] == after["count"]


def test_units() -> None:
    assert MetricsSettings().histograms is False
    on = apply_settings(MetricsSettings(), [("histogram_latencies", "true")], print)
    assert (
        on.histograms
        and not apply_settings(on, [("histogram_latencies", "false")], print).histograms
    )
    histogram = FirstResponseHistogram((100, 500))
    for ns in (0, 99_999_999, 100_999_999, 101_000_000, 600_000_000):  # whole ms: 0 99 100 101 600
        histogram.observe_ns(ns)
    assert histogram.cumulative() == [(100.0, 3), (500.0, 4), (float("inf"), 5)]
    assert (histogram.count, histogram.sum_ms) == (5, 900)
    with pytest.raises(BucketsError, match="strictly increasing"):
        FirstResponseHistogram((1, 1))
    stats = ModelStats("m", "1")
    assert first_response_lines([stats]) == []  # without the histogram: no family
    stats.track_first_responses(FirstResponseHistogram((2.5,)), live=False)
    stats.record_first_response(0, 3_000_000)
    assert first_response_lines([stats]) == [
        f"# HELP {FAMILY} Duration from request to first response in milliseconds",
        f"# TYPE {FAMILY} histogram",
        f'{FAMILY}_count{{model="m",version="1"}} 1',
        f'{FAMILY}_sum{{model="m",version="1"}} 3',
        f'{FAMILY}_bucket{{model="m",version="1",le="2.5"}} 0',
        f'{FAMILY}_bucket{{model="m",version="1",le="+Inf"}} 1',
    ]
