"""Custom metrics (pb_utils.MetricFamily) from models on the metrics endpoint, in both
execution modes, with the exposition Triton 2.51 gives (checked against it by hand: same
lines for this model)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.metrics.custom import merge, render
from tests.conftest import Serving
from tests.helpers import MODES, grpc_input, http_input, read_metrics, wait_until
from tests.reference import reference_available, start_reference
from tests.serverproc import ServerProcess

LABELS = '{kind="test",model="metrics_custom"}'


@pytest.fixture(scope="module", params=MODES)
def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["metrics_custom"], mode=request.param) as srv:
        yield srv


def _infer(url: str, value: float, **params: str) -> np.ndarray:
    client = httpclient.InferenceServerClient(url, network_timeout=30)
    x = http_input("IN", np.array([value], np.float32))
    out: np.ndarray = client.infer("metrics_custom", [x], parameters=params or None).as_numpy("OUT")
    return out


def _infer_grpc(url: str, value: float) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        x = grpc_input("IN", np.array([value], np.float32))
        out: np.ndarray = client.infer("metrics_custom", [x], client_timeout=30).as_numpy("OUT")
    return out


def _scrape(url: str) -> list[str]:
    return [line for line in read_metrics(url).splitlines() if "custom_" in line]


def test_model_metrics_reach_the_endpoint(server: ServerProcess) -> None:
    before = _scrape(server.metrics_url)
    with ThreadPoolExecutor(3) as pool:  # both instances take requests
        list(pool.map(lambda v: _infer_grpc(server.grpc_url, v), [0.5, 2.0, 7.0]))
    lines = _scrape(server.metrics_url)
    assert lines[:3] == ["# HELP custom_requests Requests seen", "# TYPE custom_requests counter",
                         f"custom_requests{LABELS} 3"]  # fmt: skip
    assert "# TYPE custom_last_value gauge" in lines
    assert any(line.startswith(f"custom_last_value{LABELS} ") for line in lines)
    hist = [line for line in lines if line.startswith("custom_input_value")]
    assert hist == [
        f"custom_input_value_count{LABELS} 3",
        f"custom_input_value_sum{LABELS} 9.5",
        'custom_input_value_bucket{kind="test",model="metrics_custom",le="1"} 1',
        'custom_input_value_bucket{kind="test",model="metrics_custom",le="2.5"} 2',
        'custom_input_value_bucket{kind="test",model="metrics_custom",le="10"} 3',
        'custom_input_value_bucket{kind="test",model="metrics_custom",le="+Inf"} 3',
    ]
    assert before == [] or "custom_requests" in before[0]


def test_a_busy_worker_still_answers_a_scrape(server: ServerProcess, tmp_path: Path) -> None:
    """The instance running a long execute (held until the test opens its gate) reports the
    metrics it has updated so far."""
    before = [*_scrape(server.metrics_url), f"custom_requests{LABELS} 0"]
    count = int(next(line for line in before if line.startswith("custom_requests{")).split()[-1])
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(_infer, server.http_url, 1.0, gate=str(gate))
        try:
            wait_until(
                lambda: f"custom_requests{LABELS} {count + 1}" in _scrape(server.metrics_url),
                interval=0.2,
                what="the running request's count in a scrape",
            )
            assert not running.done()  # read while the model was still in execute
        finally:
            gate.touch()
        running.result(timeout=30)


MISUSES = {
    "negative": "can only be incremented monotonically by non-negative values",
    "set_counter": "TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
    "value_histogram": "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
    "kind_clash": "a metric family named 'custom_requests' already exists",
    "no_buckets": "Failed to create metric. Missing required buckets.",
    "bad_name": "invalid metric family name 'bad name'",
}


@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_misuse_raises_tritons_error(server: ServerProcess, misuse: str) -> None:
    with pytest.raises(InferenceServerException) as e:
        _infer(server.http_url, 1.0, misuse=misuse)
    assert e.value.message().startswith("TritonModelException: ")
    assert MISUSES[misuse] in e.value.message()


def test_merge_adds_counters_and_keeps_the_last_gauge() -> None:
    def fam(kind: str, **series: object) -> dict[str, object]:
        return {
            "name": f"m_{kind}",
            "description": "d",
            "kind": kind,
            "series": [{"labels": {"a": "1"}, **series}],
        }

    merged = merge([
        [fam("counter", value=2.0), fam("gauge", value=5.0, stamp=2.0),
         fam("histogram", buckets=[1.0], counts=[1, 0], sum=0.5, count=1)],
        [fam("counter", value=3.0), fam("gauge", value=9.0, stamp=1.0),
         fam("histogram", buckets=[1.0], counts=[0, 2], sum=4.0, count=2)],
    ])  # fmt: skip
    text = render(merged).decode().splitlines()
    assert 'm_counter{a="1"} 5' in text
    assert 'm_gauge{a="1"} 5' in text
    assert 'm_histogram_bucket{a="1",le="+Inf"} 3' in text and 'm_histogram_sum{a="1"} 4.5' in text


def _normalized(lines: list[str]) -> list[str]:
    """Metric lines with timing and machine values blanked, sorted (families may interleave)."""
    out = []
    for line in lines:
        if not line.startswith("#") and any(k in line for k in ("duration_us", "nv_cpu_")):
            line = line.rsplit(" ", 1)[0] + " N"
        out.append(line)
    return sorted(out)


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_exposition_matches_the_reference(serving: Serving) -> None:
    repo = serving.repo(["metrics_custom"])

    def observe(http_url: str, metrics_url: str) -> list[str]:
        for v in (0.5, 2.0, 7.0):
            _infer(http_url, v)
        return _normalized(read_metrics(metrics_url).splitlines())

    ref = start_reference(repo)
    try:
        expected = observe(ref.http_url, ref.metrics_url)
    finally:
        ref.stop()
    with serving.server(repo) as mine:
        got = observe(mine.http_url, mine.metrics_url)
    assert got == expected
