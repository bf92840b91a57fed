"""The ONNX Runtime backend through the real server and tritonclient: configs given and
auto-completed, batching, instance groups, Triton's load errors, BLS into ONNX models from
both Python execution modes, and an ensemble step."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import MODELS, grpc_inputs, http_input
from tests.serverproc import ServerProcess

A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 10, dtype=np.float32)

CONFIGS = {
    # name: (source model, config.pbtxt text, Triton's load error or "" when it loads)
    "onnx_bad_dtype": ("onnx_fixed", """
        backend: "onnxruntime"
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
        output [ { name: "y" data_type: TYPE_INT32 dims: [ 2, 3 ] } ]""",
        "unable to load model 'onnx_bad_dtype', configuration expects datatype TYPE_FP32 for "
        "input 'x', model provides TYPE_INT32"),
    "onnx_bad_batch": ("onnx_fixed", """
        backend: "onnxruntime"
        max_batch_size: 4""",
        "autofill failed for model 'onnx_bad_batch': model does not support batching while "
        "non-zero max_batch_size is specified"),
    "onnx_bad_name": ("onnx_fixed", """
        platform: "onnxruntime_onnx"
        input [ { name: "z" data_type: TYPE_INT32 dims: [ 2, 3 ] } ]
        output [ { name: "y" data_type: TYPE_INT32 dims: [ 2, 3 ] } ]""",
        "unexpected inference input 'z', allowed inputs are: x"),
    "onnx_bad_dims": ("onnx_add_sub", """
        backend: "onnxruntime"
        max_batch_size: 2
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
                { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 5 ] } ]""",
        "model 'onnx_bad_dims', tensor 'OUTPUT0': the model expects 2 dimensions (shape "
        "[-1,4]) but the model configuration specifies 2 dimensions (an initial batch dimension "
        "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
        "shape [-1,5])"),
    "onnx_bad_mode": ("onnx_fixed", """
        backend: "onnxruntime"
        parameters { key: "execution_mode" value { string_value: "3" } }""",
        "Invalid configuration value provided. Expected values for  execution_mode are 0 or 1 "
        "but got 3 ."),
    # Not errors. Inputs given, outputs auto-completed (and max_batch_size, as Triton does).
    "onnx_partial": ("onnx_add_sub", """
        backend: "onnxruntime"
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
                { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]""",
        ""),
    # The client sees [6], the model [2, 3].
    "onnx_reshape": ("onnx_fixed", """
        backend: "onnxruntime"
        input [ { name: "x" data_type: TYPE_INT32 dims: [ 6 ] reshape { shape: [ 2, 3 ] } } ]
        output [ { name: "y" data_type: TYPE_INT32 dims: [ 6 ] reshape { shape: [ 2, 3 ] } } ]""",
        ""),
}  # fmt: skip


@pytest.fixture(scope="module")
def repo(serving: Serving) -> Path:
    root = serving.repo(
        ["onnx_add_sub", "onnx_auto", "onnx_fixed", "bls_native", "ens_onnx", "onnx_strings"]
    )
    # The BLS caller again, in the in-process execution mode.
    inproc = root / "bls_native_inproc"
    shutil.copytree(MODELS / "bls_native", inproc)
    cfg = (inproc / "config.pbtxt").read_text()
    (inproc / "config.pbtxt").write_text(cfg + '\nparameters { key: "MODELYARD_EXECUTION_MODE" '
                                         'value { string_value: "in-process" } }\n')  # fmt: skip
    for name, (source, text, _) in CONFIGS.items():
        (root / name / "1").mkdir(parents=True)
        shutil.copy(MODELS / source / "1" / "model.onnx", root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(text)
    return root


@pytest.fixture(scope="module")
def server(serving: Serving, repo: Path) -> Iterator[ServerProcess]:
    with serving.server(repo) as srv:
        yield srv


@pytest.fixture()
def http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def _http_inputs(*arrays: tuple[str, np.ndarray[Any, Any], str]) -> list[httpclient.InferInput]:
    return [http_input(name, arr, dt) for name, arr, dt in arrays]


@pytest.mark.parametrize("model", ["onnx_add_sub", "onnx_auto"])
def test_add_sub_over_http(http: httpclient.InferenceServerClient, model: str) -> None:
    res = http.infer(model, _http_inputs(("INPUT0", A, "FP32"), ("INPUT1", B, "FP32")))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), A - B)


def test_add_sub_over_grpc_one_output(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = []
        for name, arr in (("INPUT0", A), ("INPUT1", B)):
            t = grpcclient.InferInput(name, list(arr.shape), "FP32")
            t.set_data_from_numpy(arr)
            inputs.append(t)
        res = client.infer("onnx_add_sub", inputs,
                           outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])  # fmt: skip
        assert [o.name for o in res.get_response().outputs] == ["OUTPUT1"]
        np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), A - B)


def test_fixed_shape_model_without_config(http: httpclient.InferenceServerClient) -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    res = http.infer("onnx_fixed", _http_inputs(("x", x, "INT32")))
    np.testing.assert_array_equal(res.as_numpy("y"), x + x)


def test_auto_completed_configs(http: httpclient.InferenceServerClient) -> None:
    auto = http.get_model_config("onnx_auto")
    assert auto["platform"] == "onnxruntime_onnx" and auto["backend"] == "onnxruntime"
    assert auto["max_batch_size"] == 4  # Triton's default-max-batch-size
    assert auto["dynamic_batching"]["preferred_batch_size"] == [4]
    assert [(i["name"], i["data_type"], i["dims"]) for i in auto["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]  # fmt: skip
    assert [o["name"] for o in auto["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert auto["instance_group"][0]["count"] == 2  # Triton's CPU default for onnxruntime
    assert auto["default_model_filename"] == "model.onnx"
    fixed = http.get_model_config("onnx_fixed")
    assert fixed["max_batch_size"] == 0 and "dynamic_batching" not in fixed
    assert fixed["input"][0]["dims"] == [2, 3] and fixed["output"][0]["data_type"] == "TYPE_INT32"


def test_metadata(http: httpclient.InferenceServerClient) -> None:
    meta = http.get_model_metadata("onnx_add_sub")
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}
    cfg = http.get_model_config("onnx_add_sub")
    assert cfg["parameters"]["intra_op_thread_count"] == {"string_value": "1"}
    assert [g["count"] for g in cfg["instance_group"]] == [2]


def test_dynamic_batching_merges_concurrent_requests(server: ServerProcess) -> None:
    async def run() -> list[np.ndarray]:
        client = grpcaio.InferenceServerClient(server.grpc_url)
        try:

            async def one(i: int) -> np.ndarray:
                a = np.full((1, 4), i, np.float32)
                res = await client.infer("onnx_add_sub", grpc_inputs({"INPUT0": a, "INPUT1": a}))
                out: np.ndarray = res.as_numpy("OUTPUT0")
                return out

            return await asyncio.gather(*(one(i) for i in range(16)))
        finally:
            await client.close()

    http = httpclient.InferenceServerClient(server.http_url)
    before = http.get_inference_statistics("onnx_add_sub")["model_stats"][0]
    results = asyncio.run(run())
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, np.full((1, 4), 2 * i, np.float32))
    after = http.get_inference_statistics("onnx_add_sub")["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 16
    assert executions < 16  # the 20 ms queue delay lets the batcher merge requests


def test_bad_request_is_rejected_and_server_keeps_serving(
    http: httpclient.InferenceServerClient,
) -> None:
    bad = np.ones((2, 5), np.float32)
    with pytest.raises(InferenceServerException) as exc:
        http.infer("onnx_add_sub", _http_inputs(("INPUT0", bad, "FP32"), ("INPUT1", bad, "FP32")))
    assert exc.value.status() == "400"
    assert "unexpected shape for input 'INPUT0'" in exc.value.message()
    test_add_sub_over_http(http, "onnx_add_sub")


@pytest.mark.parametrize("name", sorted(n for n in CONFIGS if CONFIGS[n][2]))
def test_load_errors_have_tritons_messages(http: httpclient.InferenceServerClient,
                                           name: str) -> None:  # fmt: skip
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index[name]["state"] == "UNAVAILABLE"
    # A backend's load error fails the version: Triton shows its status code before it.
    assert index[name]["reason"] == "Invalid argument: " + CONFIGS[name][2]


@pytest.mark.parametrize("caller", ["bls_native", "bls_native_inproc"])
def test_bls_into_onnx(http: httpclient.InferenceServerClient, caller: str) -> None:
    a, b = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    target = np.array([b"onnx_add_sub"], dtype=np.object_)
    res = http.infer(caller, _http_inputs(("INPUT0", a, "FP32"), ("INPUT1", b, "FP32"),
                                          ("TARGET", target, "BYTES")))  # fmt: skip
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)


def test_ensemble_step_into_onnx(http: httpclient.InferenceServerClient) -> None:
    res = http.infer("ens_onnx", _http_inputs(("A", A, "FP32"), ("B", B, "FP32")))
    np.testing.assert_array_equal(res.as_numpy("SUM"), A + B)


def test_bytes_through_string_tensors(http: httpclient.InferenceServerClient) -> None:
    text = np.array([[b"hello", b"Stra\xc3\x9fe"], [b"", b"x"]], dtype=np.object_)
    cfg = http.get_model_config("onnx_strings")
    assert cfg["input"][0]["data_type"] == "TYPE_STRING"
    res = http.infer("onnx_strings", _http_inputs(("TEXT", text, "BYTES")))
    assert res.as_numpy("SAME").tolist() == text.tolist()


def test_reshape(http: httpclient.InferenceServerClient) -> None:
    x = np.arange(6, dtype=np.int32)
    res = http.infer("onnx_reshape", _http_inputs(("x", x, "INT32")))
    assert res.as_numpy("y").shape == (6,)
    np.testing.assert_array_equal(res.as_numpy("y"), x + x)


def test_partial_config_is_completed(http: httpclient.InferenceServerClient) -> None:
    cfg = http.get_model_config("onnx_partial")
    assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
    assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == [
        ("OUTPUT0", "TYPE_FP32", [4]), ("OUTPUT1", "TYPE_FP32", [4])]  # fmt: skip
    test_add_sub_over_http(http, "onnx_partial")
