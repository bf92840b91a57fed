"""The TorchScript backend through the real server and tritonclient: Triton's input/output
naming conventions, batching, metadata, load errors and BLS into a TorchScript model.
Skipped when torch is not installed (it is the optional ``modelyard[torch]`` extra)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import MODELS, grpc_input, http_input
from tests.serverproc import ServerProcess

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)

ADD_SUB_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { }
"""

# Inputs named after forward's arguments, listed in another order; one output, any name.
NAMED_CONFIG = """
platform: "pytorch_libtorch"
input [ { name: "b" data_type: TYPE_INT64 dims: [ 3 ] },
        { name: "a" data_type: TYPE_INT64 dims: [ 3 ] } ]
output [ { name: "difference" data_type: TYPE_INT64 dims: [ 3 ] } ]
"""

WRONG_COUNT_CONFIG = """
backend: "pytorch"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class Difference(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - b


def _model(root: Path, name: str, module: torch.nn.Module, config: str) -> None:
    (root / name / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(root / name / "1" / "model.pt"))
    (root / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    root = serving.repo()
    _model(root, "torch_add_sub", AddSub(), ADD_SUB_CONFIG)
    _model(root, "torch_named", Difference(), NAMED_CONFIG)
    _model(root, "torch_wrong_count", AddSub(), WRONG_COUNT_CONFIG)
    shutil.copytree(MODELS / "bls_native", root / "bls_native")
    with serving.server(root) as srv:
        yield srv


@pytest.fixture()
def http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def _inputs(mod: ModuleType, *arrays: tuple[str, np.ndarray[Any, Any], str]) -> list[Any]:
    make = http_input if mod is httpclient else grpc_input
    return [make(name, arr, dt) for name, arr, dt in arrays]


def test_indexed_names_with_batching(http: httpclient.InferenceServerClient,
                                     server: ServerProcess) -> None:  # fmt: skip
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((3, 4), np.float32)
    res = http.infer("torch_add_sub", _inputs(httpclient, ("INPUT__0", a, "FP32"),
                                              ("INPUT__1", b, "FP32")))  # fmt: skip
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a + b)  # index 0 of the tuple
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__1"), a - b)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        res = client.infer("torch_add_sub", _inputs(grpcclient, ("INPUT__0", a, "FP32"),
                                                    ("INPUT__1", b, "FP32")))  # fmt: skip
        np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a + b)


def test_forward_argument_names(http: httpclient.InferenceServerClient) -> None:
    a = np.array([[10, 20, 30]], np.int64)
    b = np.array([[1, 2, 3]], np.int64)
    res = http.infer("torch_named", _inputs(httpclient, ("a", a[0], "INT64"), ("b", b[0], "INT64")))
    np.testing.assert_array_equal(res.as_numpy("difference"), a[0] - b[0])


def test_metadata_and_config(http: httpclient.InferenceServerClient) -> None:
    meta = http.get_model_metadata("torch_add_sub")
    assert meta["platform"] == "pytorch_libtorch"
    assert meta["inputs"][0] == {"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 4]}
    cfg = http.get_model_config("torch_named")
    assert cfg["backend"] == "pytorch" and cfg["default_model_filename"] == "model.pt"
    assert cfg["instance_group"][0]["count"] == 1


def test_wrong_input_count_fails_the_load(http: httpclient.InferenceServerClient) -> None:
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["torch_wrong_count"]["state"] == "UNAVAILABLE"
    assert index["torch_wrong_count"]["reason"] == (
        "Invalid argument: unable to load model 'torch_wrong_count', configuration expects 1 "
        "inputs, model provides 2"
    )
    with pytest.raises(InferenceServerException):
        http.infer(
            "torch_wrong_count",
            _inputs(httpclient, ("INPUT__0", np.ones((1, 4), np.float32), "FP32")),
        )


def test_bls_into_torchscript(http: httpclient.InferenceServerClient) -> None:
    a, b = np.arange(4, dtype=np.float32), np.full(4, 2, np.float32)
    target = np.array([b"torch_add_sub"], dtype=np.object_)
    res = http.infer("bls_native", _inputs(httpclient, ("INPUT0", a, "FP32"), ("INPUT1", b, "FP32"),
                                           ("TARGET", target, "BYTES")))  # fmt: skip
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
