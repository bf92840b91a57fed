"""Every GRPCInferenceService RPC against the real server (``python -m modelyard serve``),
through the unmodified tritonclient.grpc and tritonclient.grpc.aio."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import EXAMPLES, grpc_input, make_repo, wait_until
from tests.serverproc import ServerProcess

MODELS = ["grpc_identity_all", "grpc_decoupled", "grpc_slow", "grpc_raise"]
TIMEOUT = 30.0

DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BYTES"]  # fmt: skip
_NP = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
       "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
       "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64}  # fmt: skip


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    """The grpc_* test models and the examples' add_sub, loaded explicitly; the examples'
    string_upper is in the repository but not loaded."""
    repo = make_repo(serving.repo(MODELS), ["add_sub", "string_upper"], EXAMPLES)
    load = [a for m in [*MODELS, "add_sub"] for a in ("--load-model", m)]
    with serving.server(repo, "--model-control-mode", "explicit", *load) as proc:
        yield proc


def _array(datatype: str, n: int = 6) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        return np.array([f"v{i}".encode() * i for i in range(n)], dtype=np.object_)
    if datatype == "BOOL":
        mask: np.ndarray[Any, Any] = np.arange(n) % 3 == 0
        return mask
    return np.arange(n).astype(_NP[datatype])


def _fp32(name: str, array: np.ndarray[Any, Any]) -> Any:
    return grpc_input(name, array.astype(np.float32), "FP32")


def _status(e: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(e.value.status())


# -- health and metadata -------------------------------------------------------------------


def test_health(client: Any) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("grpc_slow")
    assert client.is_model_ready("grpc_slow", "1")
    assert not client.is_model_ready("nosuch")  # Triton 2.51: OK with ready=false
    with pytest.raises(InferenceServerException) as e:
        client.is_model_ready("grpc_slow", "abc")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message().startswith(
        "failed to get model version from specified version string 'abc'"
    )


def test_metadata_and_config(client: Any) -> None:
    md = client.get_server_metadata(as_json=True)
    assert md["name"] == "triton"
    assert "sequence" in md["extensions"] and "model_repository" in md["extensions"]

    mm = client.get_model_metadata("grpc_slow", as_json=True)
    assert mm["name"] == "grpc_slow" and mm["versions"] == ["1"]
    assert mm["platform"] == "python"
    assert mm["inputs"] == [{"name": "IN", "datatype": "FP32", "shape": ["-1"]}]
    mm = client.get_model_metadata("grpc_identity_all", as_json=True)
    assert {i["datatype"] for i in mm["inputs"]} == set(DATATYPES)

    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("nosuch")
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == "Request for unknown model: 'nosuch' is not found"
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("grpc_slow", "7")
    assert _status(e) == "StatusCode.NOT_FOUND"

    cfg = client.get_model_config("grpc_decoupled").config
    assert cfg.name == "grpc_decoupled"
    assert cfg.model_transaction_policy.decoupled is True
    assert cfg.input[0].name == "IN"
    with pytest.raises(InferenceServerException) as e:
        client.get_model_config("nosuch")
    assert _status(e) == "StatusCode.NOT_FOUND"


# -- unary inference -----------------------------------------------------------------------


def test_add_sub_example(client: Any) -> None:
    if not (EXAMPLES / "add_sub").is_dir():
        pytest.skip("examples/model_repository/add_sub is not there")
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 0.5, dtype=np.float32)
    result = client.infer("add_sub", [_fp32("INPUT0", a), _fp32("INPUT1", b)], request_id="q1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("add_sub", "1", "q1")


def test_every_datatype_raw(client: Any) -> None:
    inputs = [grpc_input(f"IN_{dt}", _array(dt), dt) for dt in DATATYPES]
    result = client.infer("grpc_identity_all", inputs)
    for dt in DATATYPES:
        got = result.as_numpy(f"OUT_{dt}")
        np.testing.assert_array_equal(got, _array(dt), err_msg=dt)
        if dt != "BYTES":
            assert got.dtype == _NP[dt]


def test_requested_outputs_subset(client: Any) -> None:
    inputs = [
        grpc_input("IN_INT32", _array("INT32"), "INT32"),
        grpc_input("IN_FP64", _array("FP64"), "FP64"),
    ]
    outputs = [grpcclient.InferRequestedOutput("OUT_FP64")]
    result = client.infer("grpc_identity_all", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUT_FP64"), _array("FP64"))
    assert result.as_numpy("OUT_INT32") is None


def test_typed_contents(server: ServerProcess) -> None:
    """Typed ``contents`` (tritonclient never sends them; other clients do)."""
    request = service_pb2.ModelInferRequest(model_name="grpc_identity_all", id="typed")
    fields = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
              "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
              "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
              "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}  # fmt: skip
    for dt, field in fields.items():
        t = request.inputs.add(name=f"IN_{dt}", datatype=dt, shape=[6])
        values = _array(dt)
        getattr(t.contents, field).extend(
            list(values) if dt == "BYTES" else [v.item() for v in values]
        )
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        reply = stub.ModelInfer(request, timeout=TIMEOUT)
    result = grpcclient.InferResult(reply)
    assert reply.id == "typed"
    assert len(reply.raw_output_contents) == len(reply.outputs) == len(fields)
    for dt in fields:
        np.testing.assert_array_equal(result.as_numpy(f"OUT_{dt}"), _array(dt), err_msg=dt)


def test_typed_contents_errors(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="grpc_identity_all")
        t = request.inputs.add(name="IN_FP32", datatype="FP32", shape=[2])
        t.contents.int_contents.extend([1, 2])
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(request, timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == (
            "unexpected explicit tensor data for input tensor 'IN_FP32' for model "
            "'grpc_identity_all' of type 'INT32', expected datatype 'FP32'"
        )
        request = service_pb2.ModelInferRequest(model_name="grpc_identity_all")
        request.inputs.add(name="IN_FP32", datatype="FP32", shape=[2])
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(request, timeout=TIMEOUT)
        assert e.value.details() == (
            "unable to find data for input tensor 'IN_FP32' for model 'grpc_identity_all' in "
            "request."
        )


def test_large_tensor(client: Any) -> None:
    big = np.random.default_rng(1).random(16 << 20, dtype=np.float32)  # 64 MiB
    result = client.infer("grpc_slow", [_fp32("IN", big)], client_timeout=120)
    np.testing.assert_array_equal(result.as_numpy("OUT"), big)


def test_infer_errors(client: Any) -> None:
    x = np.ones(2, np.float32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("nosuch", [_fp32("IN", x)])
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == "Request for unknown model: 'nosuch' is not found"

    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_slow", [grpc_input("IN", x.astype(np.int32), "INT32")])
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert "data-type is 'INT32', but model 'grpc_slow' expects 'FP32'" in e.value.message()

    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_slow", [_fp32("NOPE", x)])
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected inference input 'NOPE' for model 'grpc_slow'" in e.value.message()

    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_slow", [_fp32("IN", x)], model_version="abc")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"

    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_decoupled", [grpc_input("IN", np.array([1], np.int32), "INT32")])
    assert _status(e) == "StatusCode.UNIMPLEMENTED"
    assert e.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )

    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_raise", [_fp32("IN", x)])
    assert _status(e) == "StatusCode.INTERNAL"
    assert "grpc model failure" in e.value.message()

    # The server keeps serving.
    result = client.infer("grpc_slow", [_fp32("IN", x)])
    np.testing.assert_array_equal(result.as_numpy("OUT"), x)


def test_async_infer(client: Any) -> None:
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    x = np.arange(3, dtype=np.float32)
    client.async_infer(
        "grpc_slow", [_fp32("IN", x)], lambda result, error: done.put((result, error))
    )
    result, error = done.get(timeout=TIMEOUT)
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUT"), x)


# -- streaming -----------------------------------------------------------------------------


class Collector:
    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def take(self, n: int) -> list[tuple[Any, Any]]:
        return [self.items.get(timeout=TIMEOUT) for _ in range(n)]


def _count(n: int) -> list[Any]:
    return [grpc_input("IN", np.array([n], np.int32), "INT32")]


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def test_stream_decoupled(client: Any) -> None:
    got = Collector()
    client.start_stream(callback=got)
    try:
        client.async_stream_infer("grpc_decoupled", _count(3), request_id="d3")
        results = got.take(3)
        assert all(e is None for _, e in results)
        assert [int(r.as_numpy("OUT")[0]) for r, _ in results] == [0, 1, 2]
        assert {r.get_response().id for r, _ in results} == {"d3"}
        assert [_final(r) for r, _ in results] == [False, False, False]

        client.async_stream_infer(
            "grpc_decoupled", _count(1), request_id="e1", enable_empty_final_response=True
        )
        (first, _), (last, _) = got.take(2)
        assert _final(first) is False and int(first.as_numpy("OUT")[0]) == 0
        response = last.get_response()
        assert _final(last) is True
        assert (response.id, response.model_name, len(response.outputs)) == (
            "e1",
            "grpc_decoupled",
            0,
        )

        client.async_stream_infer(
            "grpc_decoupled", _count(0), request_id="z", enable_empty_final_response=True
        )
        ((only, _),) = got.take(1)
        assert _final(only) is True and only.get_response().id == "z"
    finally:
        client.stop_stream()
    time.sleep(0.2)
    assert got.items.empty()


def test_stream_non_decoupled_in_request_order(client: Any) -> None:
    got = Collector()
    client.start_stream(callback=got)
    try:
        x = np.ones(2, np.float32)
        client.async_stream_infer("grpc_slow", [_fp32("IN", x)], request_id="slow",
                                  parameters={"delay_ms": 500})  # fmt: skip
        client.async_stream_infer("grpc_slow", [_fp32("IN", x)], request_id="fast")
        results = got.take(2)
    finally:
        client.stop_stream()
    assert [e for _, e in results] == [None, None]
    assert [r.get_response().id for r, _ in results] == ["slow", "fast"]
    assert all(_final(r) for r, _ in results)
    assert results[0][0].get_response().model_version == "1"


def test_stream_errors_keep_stream_open(client: Any) -> None:
    got = Collector()
    client.start_stream(callback=got)
    try:
        client.async_stream_infer("nosuch", _count(1), request_id="u")
        client.async_stream_infer("grpc_decoupled", _count(-1), request_id="neg")
        client.async_stream_infer("grpc_raise", [_fp32("IN", np.ones(1))], request_id="r")
        messages = []
        for result, error in got.take(3):
            assert result is None and error is not None and error.status() is None
            messages.append(error.message())
        assert "Request for unknown model: 'nosuch' is not found" in messages
        assert "negative count" in messages
        assert any("grpc model failure" in m for m in messages)

        client.async_stream_infer("grpc_decoupled", _count(1), request_id="after")
        ((result, error),) = got.take(1)
        assert error is None and result.get_response().id == "after"
    finally:
        client.stop_stream()


def test_stream_many_in_flight(client: Any) -> None:
    got = Collector()
    client.start_stream(callback=got)
    try:
        for i in range(40):
            client.async_stream_infer("grpc_decoupled", _count(3), request_id=f"m{i}")
        results = got.take(120)
    finally:
        client.stop_stream()
    per_id: dict[str, list[int]] = {}
    for result, error in results:
        assert error is None
        per_id.setdefault(result.get_response().id, []).append(int(result.as_numpy("OUT")[0]))
    assert per_id == {f"m{i}": [0, 1, 2] for i in range(40)}


def test_stream_grpc_error_mode(server: ServerProcess) -> None:
    """``triton_grpc_error: true``: a model error ends the stream with its status; an unknown
    model (found before inference) does not, as in Triton 2.51."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got = Collector()
    try:
        client.start_stream(callback=got, headers={"triton_grpc_error": "true"})
        client.async_stream_infer("nosuch", _count(1))
        ((result, error),) = got.take(1)
        assert result is None and error.status() is None
        client.async_stream_infer("grpc_raise", [_fp32("IN", np.ones(1))])
        ((result, error),) = got.take(1)
        assert result is None and str(error.status()) == "StatusCode.INTERNAL"
        assert "grpc model failure" in error.message()
        client.stop_stream()
    finally:
        client.close()


# -- aio client ----------------------------------------------------------------------------


async def test_aio_client(server: ServerProcess) -> None:
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        assert await client.is_server_live()
        assert await client.is_model_ready("grpc_slow")
        x = np.arange(5, dtype=np.float32)
        inp = grpc_input("IN", x, "FP32")
        result = await client.infer("grpc_slow", [inp], request_id="a1")
        np.testing.assert_array_equal(result.as_numpy("OUT"), x)

        count = grpc_input("IN", np.array([2], np.int32), "INT32")

        async def requests() -> Any:
            yield {"model_name": "grpc_decoupled", "inputs": [count], "request_id": "s1"}
            yield {"model_name": "grpc_slow", "inputs": [inp], "request_id": "s2"}
            yield {"model_name": "nosuch", "inputs": [inp], "request_id": "s3"}

        seen, errors = [], []
        async for result, error in client.stream_infer(requests()):
            if error is not None:
                errors.append(error.message())
            else:
                seen.append(result.get_response().id)
        assert sorted(seen) == ["s1", "s1", "s2"]
        assert errors == ["Request for unknown model: 'nosuch' is not found"]


# -- statistics, repository, settings, shared memory ---------------------------------------


def test_statistics(client: Any) -> None:
    before = client.get_inference_statistics("grpc_slow", as_json=True)["model_stats"][0]
    client.infer("grpc_slow", [_fp32("IN", np.ones(1))])
    after = client.get_inference_statistics("grpc_slow", "1", as_json=True)["model_stats"][0]
    assert after["name"] == "grpc_slow" and after["version"] == "1"
    assert int(after.get("inference_count", 0)) == int(before.get("inference_count", 0)) + 1
    assert "success" in after["inference_stats"]
    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {"grpc_slow", "grpc_decoupled"} <= {s["name"] for s in every}
    with pytest.raises(InferenceServerException) as e:
        client.get_inference_statistics("nosuch")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == "requested model 'nosuch' is not available"


def test_stream_statistics(client: Any) -> None:
    def count(model: str) -> int:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0))

    before_slow, before_dec = count("grpc_slow"), count("grpc_decoupled")
    got = Collector()
    client.start_stream(callback=got)
    try:
        client.async_stream_infer("grpc_slow", [_fp32("IN", np.ones(1))])
        client.async_stream_infer("grpc_decoupled", _count(2))
        got.take(3)
    finally:
        client.stop_stream()
    assert count("grpc_slow") == before_slow + 1
    assert count("grpc_decoupled") == before_dec + 1


def test_repository_load_unload(client: Any) -> None:
    index = client.get_model_repository_index(as_json=True)["models"]
    by_name = {m["name"]: m for m in index}
    assert by_name["grpc_slow"]["state"] == "READY"
    if (EXAMPLES / "string_upper").is_dir():
        assert by_name["string_upper"] == {"name": "string_upper"}  # present, never loaded

    client.unload_model("grpc_raise")
    wait_until(lambda: not client.is_model_ready("grpc_raise"), TIMEOUT, what="the unload")
    client.load_model("grpc_raise")
    assert client.is_model_ready("grpc_raise")
    client.unload_model("nosuch")  # unknown: OK, as Triton

    with pytest.raises(InferenceServerException) as e:
        client.load_model("nosuch")
    assert _status(e) == "StatusCode.INTERNAL"
    assert e.value.message() == "failed to load 'nosuch', failed to poll from model repository"


def test_log_settings(client: Any) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"] == {"bool_param": True}
    assert "log_verbose_level" in settings and "log_format" in settings
    updated = client.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
    assert updated["log_verbose_level"] == {"uint32_param": 1}
    client.update_log_settings({"log_verbose_level": 0})
    with pytest.raises(InferenceServerException) as e:
        client.update_log_settings({"log_file": "/tmp/x.log"})
    assert _status(e) == "StatusCode.UNIMPLEMENTED"
    assert e.value.message() == "log file location can not be updated through network protocol"


def test_trace_settings(client: Any) -> None:
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_level"] == {"value": ["OFF"]}
    assert settings["trace_rate"] == {"value": ["1000"]}
    updated = client.update_trace_settings("grpc_slow", {"trace_rate": "5"}, as_json=True)
    assert updated["settings"]["trace_rate"] == {"value": ["5"]}
    cleared = client.update_trace_settings("grpc_slow", {"trace_rate": None}, as_json=True)
    assert cleared["settings"]["trace_rate"] == {"value": ["1000"]}
    with pytest.raises(InferenceServerException) as e:
        client.get_trace_settings(model_name="nosuch")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"


def test_shared_memory_status(client: Any) -> None:
    assert client.get_system_shared_memory_status(as_json=True) in ({}, {"regions": {}})
    client.unregister_system_shared_memory()
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    with pytest.raises(InferenceServerException) as e:
        client.register_cuda_shared_memory("c", b"\0" * 64, 0, 64)
    # Triton's CPU build answers INVALID_ARGUMENT, naming the region.
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert "'c', GPUs not supported" in e.value.message()
