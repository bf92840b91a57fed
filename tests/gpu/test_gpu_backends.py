"""The tensor backends on a KIND_GPU instance, on a real GPU, through tritonclient:
TorchScript runs on the instance's device (the module itself says so), and ONNX Runtime uses
the CUDA execution provider, or, with an onnxruntime built without CUDA, serves on the CPU and
says why in the log. Skipped without a GPU (tests/gpu/support.py says what is missing)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.gpu.support import GPU
from tests.helpers import MODELS, WAIT_S, infer_grpc, infer_http
from tests.serverproc import ServerProcess

pytestmark = [
    *GPU,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
]

START_S = 240.0  # torch's CUDA start; a guard, not a speed limit

TORCH_CONFIG = """
backend: "pytorch"
max_batch_size: 0
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { kind: KIND_GPU, gpus: [ 0 ] } ]
"""


def _torch_model(root: Path) -> None:
    import torch

    class Twice(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            # OUTPUT__1: 1 + the CUDA device index the module ran on, 0 on the CPU
            where = x.get_device() + 1 if x.is_cuda else 0
            return x * 2, torch.full([1], where, dtype=torch.int64)

    (root / "torch_gpu" / "1").mkdir(parents=True)
    torch.jit.script(Twice()).save(str(root / "torch_gpu" / "1" / "model.pt"))
    (root / "torch_gpu" / "config.pbtxt").write_text(TORCH_CONFIG)


@pytest.fixture(scope="module")
def served(serving: Serving) -> Iterator[ServerProcess]:
    root = serving.repo()
    _torch_model(root)
    shutil.copytree(MODELS / "onnx_add_sub", root / "onnx_gpu")
    config = (root / "onnx_gpu" / "config.pbtxt").read_text()
    config = config.replace("instance_group [ { count: 2 kind: KIND_CPU } ]",
                            "instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]")  # fmt: skip
    (root / "onnx_gpu" / "config.pbtxt").write_text(config)
    with serving.server(root, timeout=START_S) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_torchscript_runs_on_the_instances_gpu(served: ServerProcess, protocol: str) -> None:
    x = np.arange(4, dtype=np.float32)
    if protocol == "http":
        client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
        try:
            result = infer_http(client, "torch_gpu", {"INPUT__0": x})
        finally:
            client.close()
    else:
        with grpcclient.InferenceServerClient(served.grpc_url) as gclient:
            result = infer_grpc(gclient, "torch_gpu", {"INPUT__0": x})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x * 2)
    assert list(result.as_numpy("OUTPUT__1")) == [1]  # cuda:0


def test_onnx_on_a_gpu_instance(served: ServerProcess) -> None:
    import onnxruntime

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 10, dtype=np.float32)
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
    try:
        result = infer_http(client, "onnx_gpu", {"INPUT0": a, "INPUT1": b})
    finally:
        client.close()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        served.wait_for_log("onnxruntime has no CUDAExecutionProvider", timeout=WAIT_S)
