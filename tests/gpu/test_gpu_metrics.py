"""Triton's GPU metrics on a real GPU, through NVML: every family with Triton's HELP and TYPE
for every GPU modelyard finds (labelled with its ``GPU-...`` UUID), plausible values
(utilization a fraction, used memory within the total, power and its limit in watts), the
energy counter growing and never falling between scrapes, the Triton log line per GPU,
``--allow-gpu-metrics=false`` removing them all, and the dashboard's instance devices and GPU
memory. A server with a KIND_GPU model (gpu_add_sub) runs while they are read. Skipped
without a GPU (tests/gpu/support.py says what is missing)."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from modelyard.devices import GpuDevice, discover_gpus, supported_gpus
from tests.conftest import Serving
from tests.dashboard.pages import get
from tests.gpu.support import GPU, MODELS
from tests.helpers import WAIT_S, infer_http, metric_value, read_metrics, wait_for_log, wait_until
from tests.serverproc import ServerProcess

pytestmark = [*GPU, pytest.mark.timeout(300)]

START_S = 240.0  # torch's CUDA start in the instance is seconds; a guard, not a speed limit
INTERVAL_MS = 200  # polled every 100 ms, so the waits below are short
# Triton 2.51's families: (name, type, HELP text).
FAMILIES = [
    ("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)"),
    ("nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes"),
    ("nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes"),
    ("nv_gpu_power_usage", "gauge", "GPU power usage in watts"),
    ("nv_gpu_power_limit", "gauge", "GPU power management limit in watts"),
    (
        "nv_energy_consumption",
        "counter",
        "GPU energy consumption in joules since the Triton Server started",
    ),
]
UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _gpus() -> list[GpuDevice]:
    """The GPUs the server reports: every CUDA-visible one, as Triton's metrics."""
    return list(discover_gpus().devices)


def _complete(metrics_url: str) -> str | None:
    """The metrics text once every family has a series for every GPU (NVML is opened and
    first polled on the sampler's thread after the port is bound), else None."""
    text = read_metrics(metrics_url)
    for name, _, _ in FAMILIES:
        for gpu in _gpus():
            if metric_value(text, name, gpu_uuid=gpu.uuid) is None:
                return None
    return text


def _energy(metrics_url: str) -> dict[str, float]:
    text = read_metrics(metrics_url)
    values = {g.uuid: metric_value(text, "nv_energy_consumption", gpu_uuid=g.uuid) for g in _gpus()}
    assert all(v is not None for v in values.values()), text
    return {k: float(v) for k, v in values.items() if v is not None}


def _add_sub(server: ServerProcess, n: int) -> None:
    """``n`` requests to gpu_add_sub: some work on the GPU while the metrics are read."""
    a = np.arange(1 << 20, dtype=np.float32)
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S)
    try:
        for _ in range(n):
            result = infer_http(client, "gpu_add_sub", {"INPUT0": a, "INPUT1": a})
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    finally:
        client.close()


@pytest.fixture(scope="module")
def served(serving: Serving) -> Iterator[ServerProcess]:
    repo = serving.repo(["gpu_add_sub"], source=MODELS)
    flags = ("--metrics-interval-ms", str(INTERVAL_MS))
    with serving.server(repo, *flags, timeout=START_S) as server:
        yield server


def _value(text: str, name: str, uuid: str) -> float:
    found = metric_value(text, name, gpu_uuid=uuid)
    assert found is not None, (name, uuid, text)
    return found


def test_every_family_for_every_gpu_with_tritons_help_and_plausible_values(
    served: ServerProcess,
) -> None:
    gpus = _gpus()
    assert gpus and all(UUID.fullmatch(g.uuid) for g in gpus), gpus
    _add_sub(served, 4)
    text = wait_until(lambda: _complete(served.metrics_url), what="every GPU family per GPU")
    lines = text.splitlines()
    for name, kind, doc in FAMILIES:
        assert f"# HELP {name} {doc}" in lines and f"# TYPE {name} {kind}" in lines, name
        # one series per GPU, its only label gpu_uuid
        pattern = re.compile(name + r'\{gpu_uuid="([^"]+)"\} \S+')
        series = [pattern.fullmatch(line) for line in lines if line.startswith(name + "{")]
        assert all(series), lines
        assert sorted(m.group(1) for m in series if m) == sorted(g.uuid for g in gpus), series
    for gpu in gpus:
        assert 0.0 <= _value(text, "nv_gpu_utilization", gpu.uuid) <= 1.0
        total = _value(text, "nv_gpu_memory_total_bytes", gpu.uuid)
        used = _value(text, "nv_gpu_memory_used_bytes", gpu.uuid)
        # NVML's total and the CUDA runtime's totalGlobalMem are the same memory, give or take
        # what the driver reserves
        assert 0.9 * gpu.total_memory <= total <= 1.1 * gpu.total_memory, (total, gpu)
        assert 0 < used <= total  # (gpu_add_sub's instance holds a CUDA context)
        assert _value(text, "nv_gpu_power_usage", gpu.uuid) > 0
        assert _value(text, "nv_gpu_power_limit", gpu.uuid) > 0
        assert _value(text, "nv_energy_consumption", gpu.uuid) >= 0
        wait_for_log(served, f"Collecting metrics for GPU {gpu.index}: {gpu.name}")


def test_the_energy_counter_grows_and_never_falls(served: ServerProcess) -> None:
    wait_until(lambda: _complete(served.metrics_url), what="every GPU family per GPU")
    first = _energy(served.metrics_url)
    seen = [first]

    def grown() -> bool:
        _add_sub(served, 2)
        now = _energy(served.metrics_url)
        seen.append(now)
        return all(now[u] > first[u] for u in first)

    # a GPU draws tens of watts at rest: joules within a few polls
    wait_until(grown, what=lambda: f"every GPU's energy to grow: {seen}")
    for before, after in itertools.pairwise(seen):
        assert all(after[u] >= before[u] for u in before), seen


def test_the_dashboard_shows_each_instances_gpu_and_the_gpus_memory(
    served: ServerProcess,
) -> None:
    status, answer = get(f"http://{served.http_url}/dashboard/api/models")
    assert status == 200, answer.body
    doc = answer.json()
    gpus = {g["index"]: g for g in doc["gpus"]}
    assert sorted(gpus) == [g.index for g in _gpus()]
    for gpu in _gpus():
        assert gpus[gpu.index]["uuid"] == gpu.uuid
        assert gpus[gpu.index]["memory_total"] == gpu.total_memory > 0
    [row] = [m for m in doc["models"] if m["name"] == "gpu_add_sub"]
    # KIND_GPU without gpus: the group gpu_add_sub_0 on every supported GPU, one instance each
    assert row["instances"] == [
        {"name": "gpu_add_sub_0_0", "kind": "GPU", "device_id": i} for i in supported_gpus().ids
    ], row


def test_allow_gpu_metrics_false_removes_them(serving: Serving) -> None:
    # (a CPU model: the GPUs are there whatever runs on them, and no torch start to wait for)
    flags = ("--allow-gpu-metrics=false", "--metrics-interval-ms", str(INTERVAL_MS))
    with serving.server(None, *flags, models=["cloud_add"]) as server:
        wait_for_log(server, "Collecting CPU metrics")
        # Absence needs time to show: several polls' worth of scrapes (bounded, ~1 s).
        for _ in range(5):
            text = read_metrics(server.metrics_url)
            assert "nv_gpu_" not in text and "nv_energy_consumption" not in text, text
            assert metric_value(text, "nv_cpu_utilization") is not None, text  # (the rest stays)
            time.sleep(INTERVAL_MS / 1000)
        assert "Collecting metrics for GPU" not in server.output()
