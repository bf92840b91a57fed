"""A request the model answers with an error response (``InferenceResponse(error=...)``) is a
failure with reason BACKEND, in the statistics extension and in the metrics, in both execution
modes (Triton 2.51 counts it as a success). Statistics keep Triton's JSON shape."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.backends.python.test_bls import TIMEOUT_S
from tests.conftest import Serving
from tests.helpers import MODES, grpc_input, http_input, read_metrics
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

STATS_KEYS = [
    "name",
    "version",
    "last_inference",
    "inference_count",
    "execution_count",
    "inference_stats",
    "response_stats",
    "batch_stats",
    "memory_usage",
]
INFERENCE_STATS_KEYS = [
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
]


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    models = ["py_per_request_error", "py_identity", "grpc_decoupled"]
    with serving.server(models=models, mode=request.param) as server:
        yield server


def _stats(server: ServerProcess, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    (s,) = client.get_inference_statistics(model)["model_stats"]
    return dict(s)


def _metric(server: ServerProcess, name: str, model: str, reason: str = "") -> int:
    body = read_metrics(server.metrics_url, TIMEOUT_S)
    labels = (
        f'model="{model}",reason="{reason}",version="1"'
        if reason
        else (f'model="{model}",version="1"')
    )
    m = re.search(rf"^{name}\{{{re.escape(labels)}\}} (\d+)$", body, re.MULTILINE)
    assert m, f"no {name}{{{labels}}} in\n{body}"
    return int(m.group(1))


def _counts(server: ServerProcess, model: str) -> tuple[int, int, int, int]:
    s = _stats(server, model)
    stats = s["inference_stats"]
    return (
        stats["success"]["count"],
        stats["fail"]["count"],
        s["inference_count"],
        _metric(server, "nv_inference_request_failure", model, "BACKEND"),
    )


def test_error_responses_count_as_backend_failures(served: ServerProcess) -> None:
    before = _counts(served, "py_per_request_error")
    http = httpclient.InferenceServerClient(served.http_url)
    x = http_input("IN", np.ones(1, np.float32))
    with pytest.raises(InferenceServerException, match="bad value"):
        http.infer("py_per_request_error", [x])
    with grpcclient.InferenceServerClient(served.grpc_url) as grpc:
        g = grpc_input("IN", np.ones(1, np.float32))
        with pytest.raises(InferenceServerException, match="bad value"):
            grpc.infer("py_per_request_error", [g], client_timeout=TIMEOUT_S)
    success, fail, inferences, backend = _counts(served, "py_per_request_error")
    assert (success, fail, inferences, backend) == (
        before[0],
        before[1] + 2,
        before[2],
        before[3] + 2,
    )
    assert _metric(served, "nv_inference_request_success", "py_per_request_error") == success


def test_a_decoupled_error_response_fails_its_request(served: ServerProcess) -> None:
    before = _counts(served, "grpc_decoupled")
    received: list[Any] = []
    with grpcclient.InferenceServerClient(served.grpc_url) as grpc:
        grpc.start_stream(callback=lambda result, error: received.append(error or result))
        for n in (2, -1):
            grpc.async_stream_infer("grpc_decoupled", [grpc_input("IN", np.array([n], np.int32))])
        grpc.stop_stream()  # waits for every response
    assert sum(isinstance(r, InferenceServerException) for r in received) == 1
    after = _counts(served, "grpc_decoupled")
    assert after == (before[0] + 1, before[1] + 1, before[2] + 1, before[3] + 1)


def test_statistics_keep_tritons_shape(served: ServerProcess) -> None:
    ok, failed = _stats(served, "py_identity"), _stats(served, "py_per_request_error")
    assert list(failed) == list(ok) == STATS_KEYS
    assert list(failed["inference_stats"]) == INFERENCE_STATS_KEYS
    assert failed["inference_stats"]["fail"]["count"] > 0
    assert set(failed["inference_stats"]["fail"]) == {"count", "ns"}
    assert failed["inference_stats"]["fail"]["ns"] > 0
    with grpcclient.InferenceServerClient(served.grpc_url) as grpc:
        (g,) = grpc.get_inference_statistics("py_per_request_error", as_json=True)["model_stats"]
    assert int(g["inference_stats"]["fail"]["count"]) == failed["inference_stats"]["fail"]["count"]
