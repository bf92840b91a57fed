"""GPU tensors through BLS on a real GPU, in both execution modes, driven by tritonclient:
where a GPU input lands (FORCE_CPU_ONLY_INPUT_TENSORS), where outputs come back
(preferred_memory, or where the callee made them), exec and exec(decoupled=True), and the
memory itself: in-process, the callee gets the caller's device memory and the caller gets it
back (zero copy); in process mode it travels through CUDA IPC (benchmarks/gpu_bls.py times
it; pointers of two processes cannot be compared). Also: a client's
(host) input to a model with FORCE_CPU_ONLY_INPUT_TENSORS "no" stays a host tensor, and an
invalid value of that parameter fails the load with Triton's text. Skipped without a GPU
(tests/gpu/support.py says what is missing)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.gpu.support import GPU, MODELS
from tests.helpers import MODES, WAIT_S, infer_http
from tests.serverproc import ServerProcess

pytestmark = [*GPU, pytest.mark.timeout(300)]

NAMES = ["gpu_bls_memory", "gpu_identity"]
START_S = 240.0  # torch's CUDA start in each instance is seconds; a guard, not a speed limit
BAD_VALUE = "maybe"


def _repo(serving: Serving) -> Path:
    """The models, plus two made from gpu_identity: ``gpu_identity_cpu_inputs`` (Triton's
    default, host inputs) and ``gpu_bad_force`` (an invalid FORCE_CPU_ONLY_INPUT_TENSORS)."""
    repo = serving.repo(NAMES, source=MODELS)
    config = (MODELS / "gpu_identity" / "config.pbtxt").read_text()
    plain = config.replace(
        'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }', ""
    )
    bad = config.replace('string_value: "no"', f'string_value: "{BAD_VALUE}"')
    for name, text in (("gpu_identity_cpu_inputs", plain), ("gpu_bad_force", bad)):
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(MODELS / "gpu_identity" / "1" / "model.py", repo / name / "1" / "model.py")
        (repo / name / "config.pbtxt").write_text(text)
    return repo


class Served(NamedTuple):
    server: ServerProcess
    mode: str


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[Served]:
    with serving.server(_repo(serving), mode=request.param, timeout=START_S) as server:
        yield Served(server, request.param)


def _infer(served: Served, model: str, arrays: dict[str, np.ndarray[Any, Any]]) -> Any:
    client = httpclient.InferenceServerClient(served.server.http_url, network_timeout=WAIT_S)
    try:
        return infer_http(client, model, arrays)
    finally:
        client.close()


def test_gpu_tensors_through_bls_land_where_triton_puts_them(served: Served) -> None:
    result = _infer(served, "gpu_bls_memory", {"IN": np.array([1], dtype=np.int32)})
    checks = json.loads(result.as_numpy("RESULTS")[0])
    failed = {name: text for name, text in checks.items() if text != "ok"}
    assert not failed, "\n".join(f"{n}:\n{t}" for n, t in failed.items())
    assert len(checks) == 7
    facts = json.loads(result.as_numpy("FACTS")[0])
    if served.mode == "in-process":  # one address space: the pointers tell zero copy
        assert facts["callee_got_the_callers_memory"]
        assert facts["output_is_the_callers_memory"]


def test_a_client_input_stays_a_host_tensor(served: Served) -> None:
    x = np.arange(8, dtype=np.float32)
    result = _infer(served, "gpu_identity", {"IN": x})
    np.testing.assert_array_equal(result.as_numpy("OUT"), x)
    assert list(result.as_numpy("WHERE")) == [1, 0, 0]


def test_an_invalid_force_cpu_only_value_fails_the_load(served: Served) -> None:
    client = httpclient.InferenceServerClient(served.server.http_url, network_timeout=WAIT_S)
    try:
        index = {m["name"]: m for m in client.get_model_repository_index()}
    finally:
        client.close()
    assert index["gpu_bad_force"]["state"] == "UNAVAILABLE"
    assert index["gpu_bad_force"]["reason"].endswith(
        f"Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: {BAD_VALUE}'"
    )
