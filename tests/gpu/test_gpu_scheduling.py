"""GPU outputs through the schedulers, on a real GPU, in both execution modes, through
tritonclient, after Triton's QA models variable_gpu_output and ensemble_gpu: a dynamic batch
whose requests each get a GPU output of their own length, and an ensemble whose steps pass
GPU outputs on. Skipped without a GPU (tests/gpu/support.py says what is missing)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.gpu.support import GPU, MODELS
from tests.helpers import MODES, WAIT_S, http_input, infer_http
from tests.serverproc import ServerProcess

pytestmark = [*GPU, pytest.mark.timeout(300)]

START_S = 240.0  # torch's CUDA start in each instance is seconds; a guard, not a speed limit
NAMES = ["gpu_variable_output", "gpu_ensemble", "gpu_add_sub"]


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(
        serving.repo(NAMES, source=MODELS), mode=request.param, timeout=START_S
    ) as server:
        yield server


def test_each_request_of_a_batch_gets_its_own_gpu_output(served: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(
        served.http_url, network_timeout=WAIT_S, concurrency=5
    )
    try:
        pending = {
            n: client.async_infer(
                "gpu_variable_output", [http_input("N", np.array([[n]], np.int32), "INT32")]
            )
            for n in range(1, 6)
        }
        for n, call in pending.items():
            out = call.get_result(timeout=WAIT_S).as_numpy("OUT")
            np.testing.assert_array_equal(out, np.full((1, n), n, dtype=np.float32))
        stats = client.get_inference_statistics("gpu_variable_output")["model_stats"][0]
    finally:
        client.close()
    assert stats["inference_count"] == 5
    assert stats["execution_count"] < 5  # (batched: the queue delay holds the first)


def test_an_ensemble_passes_gpu_outputs_between_its_steps(served: ServerProcess) -> None:
    a = np.arange(8, dtype=np.float32)
    b = np.full(8, 3.0, dtype=np.float32)
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
    try:
        result = infer_http(client, "gpu_ensemble", {"A": a, "B": b})
    finally:
        client.close()
    np.testing.assert_array_equal(result.as_numpy("OUT0"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("OUT1"), 2 * b)
