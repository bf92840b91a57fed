"""Custom metrics (pb_utils.MetricFamily) from models on the metrics endpoint, in both
execution modes, with the exposition Triton 2.51 gives (checked against it by hand: same
lines for this model)."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.metrics.custom import merge, render
from tests.reference import reference_available, start_reference
from tests.serverproc import ServerProcess, start_server

MODELS = Path(__file__).resolve().parents[1] / "models"
LABELS = '{kind="test",model="metrics_custom"}'


@pytest.fixture(scope="module", params=["process", "in-process"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("metrics") / "repo"
    repo.mkdir()
    (repo / "metrics_custom").symlink_to(MODELS / "metrics_custom")
    args = (
        ["--backend-config", "python,execution-mode=in-process"]
        if request.param == "in-process"
        else []
    )
    srv = start_server(repo, *args)
    try:
        yield srv
    finally:
        srv.stop()


def _infer(url: str, value: float, **params: str) -> np.ndarray:
    client = httpclient.InferenceServerClient(url, network_timeout=30)
    x = httpclient.InferInput("IN", [1], "FP32")
    x.set_data_from_numpy(np.array([value], np.float32))
    out: np.ndarray = client.infer("metrics_custom", [x], parameters=params or None).as_numpy("OUT")
    return out


def _infer_grpc(url: str, value: float) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        x = grpcclient.InferInput("IN", [1], "FP32")
        x.set_data_from_numpy(np.array([value], np.float32))
        out: np.ndarray = client.infer("metrics_custom", [x], client_timeout=30).as_numpy("OUT")
    return out


def _scrape(url: str) -> list[str]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/metrics")
    return [line for line in conn.getresponse().read().decode().splitlines() if "custom_" in line]


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


def test_a_busy_worker_still_answers_a_scrape(server: ServerProcess) -> None:
    """The instance running a long execute reports the metrics it has updated so far."""
    before = [*_scrape(server.metrics_url), f"custom_requests{LABELS} 0"]
    count = int(next(line for line in before if line.startswith("custom_requests{")).split()[-1])
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(_infer, server.http_url, 1.0, sleep_s="2.5")
        deadline = time.monotonic() + 2.0
        lines: list[str] = []
        while time.monotonic() < deadline and f"custom_requests{LABELS} {count + 1}" not in lines:
            time.sleep(0.2)
            lines = _scrape(server.metrics_url)
        assert not running.done()  # read while the model was still sleeping in execute
        assert f"custom_requests{LABELS} {count + 1}" in lines
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
def test_exposition_matches_the_reference(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "metrics_custom").symlink_to(MODELS / "metrics_custom")

    def observe(http_url: str, metrics_url: str) -> list[str]:
        for v in (0.5, 2.0, 7.0):
            _infer(http_url, v)
        host, port = metrics_url.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/metrics")
        return _normalized(conn.getresponse().read().decode().splitlines())

    ref = start_reference(repo)
    try:
        expected = observe(ref.http_url, ref.metrics_url)
    finally:
        ref.stop()
    mine = start_server(repo)
    try:
        got = observe(mine.http_url, mine.metrics_url)
    finally:
        mine.stop()
    assert got == expected
