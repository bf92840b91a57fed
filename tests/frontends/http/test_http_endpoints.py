"""The real server (``python -m modelyard serve``) through tritonclient.http, tritonclient.http.aio
and raw HTTP: every endpoint family, binary and JSON tensors of every datatype, compression,
errors, classification, generate/SSE and the repository API.

Models: tests/models/http_* and the examples' add_sub and string_upper, in explicit mode
with every model loaded at start.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import EXAMPLES, http_input, make_repo
from tests.serverproc import ServerProcess

OUR_MODELS = ["http_identity", "http_raise", "http_decoupled", "http_classify"]
EXAMPLE_MODELS = ["add_sub", "string_upper"]

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def repo(serving: Serving) -> Path:
    return make_repo(serving.repo(OUR_MODELS), EXAMPLE_MODELS, EXAMPLES)


@pytest.fixture(scope="module")
def server(serving: Serving, repo: Path) -> Iterator[ServerProcess]:
    with serving.server(repo, "--model-control-mode=explicit", "--load-model=*",
                        endpoints=("http",)) as srv:  # fmt: skip
        yield srv


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def raw(
    server: ServerProcess, method: str, path: str, body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


A = np.array([1, 2, 3, 4], np.float32)
B = np.array([0.5, 0.5, 0.5, 0.5], np.float32)

ARRAYS: dict[str, np.ndarray[Any, Any]] = {
    "BOOL": np.array([True, False, True]),
    "UINT8": np.array([0, 255], np.uint8),
    "UINT16": np.array([1, 65535], np.uint16),
    "UINT32": np.array([1, 2**32 - 1], np.uint32),
    "UINT64": np.array([1, 2**64 - 1], np.uint64),
    "INT8": np.array([-128, 127], np.int8),
    "INT16": np.array([-5, 5], np.int16),
    "INT32": np.array([-(2**31), 2**31 - 1], np.int32),
    "INT64": np.array([-(2**63), 2**63 - 1], np.int64),
    "FP16": np.array([1.5, -2.0], np.float16),
    "FP32": np.array([0.1, -3e38], np.float32),
    "FP64": np.array([0.1, 1e300], np.float64),
    "BYTES": np.array([b"ab", b"\xc3\xa9", b""], dtype=np.object_),
}


# -- health and metadata -----------------------------------------------------------------------


def test_health_and_server_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "triton" and "binary_tensor_data" in meta["extensions"]


def test_model_metadata_config_and_readiness(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("http_classify")
    assert meta["inputs"] == [{"name": "INPUT", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["versions"] == ["1"] and meta["platform"] == "python"
    assert client.get_model_metadata("add_sub", "1")["name"] == "add_sub"
    config = client.get_model_config("add_sub")
    assert config["name"] == "add_sub" and config["backend"] == "python"
    assert config["input"][0]["dims"] == [4]
    assert client.is_model_ready("add_sub") and client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("nosuch")
    assert not client.is_model_ready("add_sub", "9")
    with pytest.raises(InferenceServerException) as exc:
        client.get_model_metadata("nosuch")
    assert exc.value.status() == "404"
    assert exc.value.message() == "Request for unknown model: 'nosuch' is not found"
    with pytest.raises(InferenceServerException) as exc:
        client.get_model_config("add_sub", "9")
    assert exc.value.message() == "Request for unknown model: 'add_sub' version 9 is not found"


def test_unmatched_routes_and_methods(server: ServerProcess) -> None:
    assert raw(server, "GET", "/v2/nope")[::2] == (404, b'{"error":"Not Found"}')
    assert raw(server, "GET", "/v2/models/add_sub/versions/x")[::2] == (
        404, b'{"error":"Not Found"}')  # fmt: skip
    assert raw(server, "DELETE", "/v2/models/add_sub")[::2] == (
        405, b'{"error":"Method Not Allowed"}')  # fmt: skip
    assert raw(server, "GET", "/v2/health/ready")[::2] == (200, b"")


# -- inference ---------------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
def test_add_sub(client: httpclient.InferenceServerClient, binary: bool) -> None:
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)]  # fmt: skip
    result = client.infer("add_sub", [http_input("INPUT0", A, "FP32", binary),
                                      http_input("INPUT1", B, "FP32", binary)],
                          outputs=outputs, request_id="req-1")  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    response = result.get_response()
    assert (response["id"], response["model_name"], response["model_version"]) == (
        "req-1", "add_sub", "1")  # fmt: skip


def test_add_sub_async_infer_and_default_outputs(client: httpclient.InferenceServerClient) -> None:
    inputs = [http_input("INPUT0", A, "FP32"), http_input("INPUT1", B, "FP32")]
    pending = [client.async_infer("add_sub", inputs) for _ in range(8)]
    for p in pending:
        result = p.get_result()
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT0", "OUTPUT1"]


@pytest.mark.parametrize("dt", list(ARRAYS))
@pytest.mark.parametrize("binary", [True, False])
def test_identity_every_datatype(
    client: httpclient.InferenceServerClient, dt: str, binary: bool
) -> None:
    arr = ARRAYS[dt]
    out = httpclient.InferRequestedOutput(f"OUT_{dt}", binary_data=binary)
    inp = http_input(f"IN_{dt}", arr, dt, binary)
    if dt == "FP16" and not binary:
        with pytest.raises(InferenceServerException) as exc:
            client.infer("http_identity", [inp], outputs=[out])
        assert exc.value.status() == "400"
        assert exc.value.message() == (
            "receiving FP16 data via JSON is not supported. Please use the binary data format "
            "for input IN_FP16")  # fmt: skip
        return
    result = client.infer("http_identity", [inp], outputs=[out])
    got = result.as_numpy(f"OUT_{dt}")
    if dt == "BYTES" and not binary:
        assert got.tolist() == [b.decode() for b in arr.tolist()]
    elif dt == "BYTES":
        assert got.tolist() == arr.tolist()
    else:
        assert got.dtype == arr.dtype
        np.testing.assert_array_equal(got, arr)


def test_fp16_output_cannot_be_json(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as exc:
        client.infer("http_identity", [http_input("IN_FP16", ARRAYS["FP16"], "FP16")],
                     outputs=[httpclient.InferRequestedOutput("OUT_FP16", binary_data=False)])  # fmt: skip
    assert exc.value.status() == "400"
    assert "sending FP16 data via JSON is not supported" in exc.value.message()


def test_empty_tensors_and_mixed_inputs(client: httpclient.InferenceServerClient) -> None:
    result = client.infer("http_identity", [
        http_input("IN_FP32", np.zeros(0, np.float32), "FP32"),
        http_input("IN_INT64", np.array([7, 8], np.int64), "INT64", binary=False)])  # fmt: skip
    assert result.as_numpy("OUT_FP32").shape == (0,)
    assert result.as_numpy("OUT_INT64").tolist() == [7, 8]


def test_request_parameters_reach_the_model(client: httpclient.InferenceServerClient) -> None:
    result = client.infer("http_identity", [http_input("IN_INT32", np.array([1], np.int32), "INT32")],
                          parameters={"color": "red", "n": 3, "flag": True})  # fmt: skip
    assert result.get_response()["parameters"] == {"color": "red", "n": 3, "flag": True}


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compression_both_ways(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    result = client.infer(
        "add_sub", [http_input("INPUT0", A, "FP32"), http_input("INPUT1", B, "FP32")],
        request_compression_algorithm=algorithm, response_compression_algorithm=algorithm,
    )  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_large_binary_tensor(client: httpclient.InferenceServerClient) -> None:
    big = np.random.default_rng(0).random(4 << 20).astype(np.float32)  # 16 MiB
    result = client.infer("http_identity", [http_input("IN_FP32", big, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), big)


@pytest.mark.parametrize(
    ("model", "inputs", "outputs", "status", "message"),
    [
        ("nosuch", [("INPUT0", A, "FP32")], None, "404",
         "Request for unknown model: 'nosuch' is not found"),
        ("add_sub", [("INPUT0", A.astype(np.int32), "INT32"), ("INPUT1", B, "FP32")], None, "400",
         "inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'"),
        ("add_sub", [("INPUT0", A[:3], "FP32"), ("INPUT1", B, "FP32")], None, "400",
         "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [3]"),
        ("add_sub", [("INPUT0", A, "FP32"), ("INPUT1", B, "FP32")], ["NOPE"], "400",
         "unexpected inference output 'NOPE' for model 'add_sub'"),
        ("http_raise", [("IN", np.array([0], np.int32), "INT32")], None, "500", "model says no"),
        ("http_raise", [("IN", np.array([1], np.int32), "INT32")], None, "500",
         "model raised on purpose"),
        ("http_decoupled", [("COUNT", np.array([1], np.int32), "INT32")], None, "501",
         "HTTP end point doesn't support models with decoupled transaction policy"),
    ],
)  # fmt: skip
def test_infer_errors(
    client: httpclient.InferenceServerClient, model: str, inputs: list[Any],
    outputs: list[str] | None, status: str, message: str,
) -> None:  # fmt: skip
    requested = None if outputs is None else [httpclient.InferRequestedOutput(o) for o in outputs]
    with pytest.raises(InferenceServerException) as exc:
        client.infer(model, [http_input(*i) for i in inputs], outputs=requested)
    assert exc.value.status() == status
    assert message in exc.value.message()


def test_one_connection_survives_errors(client: httpclient.InferenceServerClient) -> None:
    big = np.zeros(1 << 20, np.float32)
    for _ in range(3):
        with pytest.raises(InferenceServerException) as exc:
            client.infer("nosuch", [http_input("IN", big, "FP32")])
        assert exc.value.status() == "404"
        with pytest.raises(InferenceServerException):
            client.infer("http_raise", [http_input("IN", np.array([0], np.int32), "INT32")])
        result = client.infer(
            "add_sub", [http_input("INPUT0", A, "FP32"), http_input("INPUT1", B, "FP32")]
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_malformed_and_mis_sized_bodies(server: ServerProcess) -> None:
    status, _, body = raw(server, "POST", "/v2/models/add_sub/infer", b'{"inputs":[')
    assert status == 500
    assert json.loads(body)["error"].startswith("failed to parse the request JSON buffer")
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
    ]}).encode()  # fmt: skip
    hl = {"Inference-Header-Content-Length": str(len(header))}
    status, _, body = raw(server, "POST", "/v2/models/add_sub/infer", header + A.tobytes(), hl)
    assert (status, json.loads(body)["error"]) == (
        400, "unexpected size for input 'INPUT1', expecting 16 additional bytes for model "
        "'add_sub'")  # fmt: skip
    status, _, body = raw(server, "POST", "/v2/models/add_sub/infer",
                          header + A.tobytes() + B.tobytes() + b"x", hl)  # fmt: skip
    assert (status, json.loads(body)["error"]) == (
        400, "unexpected additional input data for model 'add_sub'")  # fmt: skip


def test_raw_binary_request(server: ServerProcess) -> None:
    status, headers, body = raw(server, "POST", "/v2/models/http_classify/infer", A.tobytes(),
                                {"Inference-Header-Content-Length": "0"})  # fmt: skip
    assert status == 200
    n = int(headers["inference-header-content-length"])
    assert json.loads(body[:n])["outputs"][0]["shape"] == [1, 4]
    np.testing.assert_array_equal(np.frombuffer(body[n:], np.float32), A)


def test_classification_with_labels(client: httpclient.InferenceServerClient) -> None:
    scores = np.array([[0.1, 3.3, 0.2, 1.0], [5, 1, 2, 7]], np.float32)
    result = client.infer("http_classify", [http_input("INPUT", scores, "FP32")], outputs=[
        httpclient.InferRequestedOutput("OUTPUT", class_count=2)])  # fmt: skip
    assert result.as_numpy("OUTPUT").tolist() == [
        [b"3.300000:1:pear", b"1.000000:3:fig"],
        [b"7.000000:3:fig", b"5.000000:0:apple"],
    ]
    result = client.infer("http_classify", [http_input("INPUT", scores[:1], "FP32")], outputs=[
        httpclient.InferRequestedOutput("OUTPUT", class_count=9, binary_data=False)])  # fmt: skip
    assert result.get_response()["outputs"][0]["shape"] == [1, 4]


async def test_aio_client(server: ServerProcess) -> None:
    client = aioclient.InferenceServerClient(server.http_url)
    try:
        assert await client.is_server_ready()
        assert (await client.get_model_metadata("add_sub"))["name"] == "add_sub"
        inputs = [http_input("INPUT0", A, "FP32"), http_input("INPUT1", B, "FP32")]
        result = await client.infer("add_sub", inputs)  # the aio client asks for gzip
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
        text = np.array([b"hello", b"world"], dtype=np.object_)
        result = await client.infer("string_upper", [http_input("INPUT0", text, "BYTES")])
        assert result.as_numpy("OUTPUT0").tolist() == [b"HELLO", b"WORLD"]
        with pytest.raises(InferenceServerException) as exc:
            await client.infer("nosuch", inputs)
        assert exc.value.status() == "404"
        assert isinstance(await client.get_model_repository_index(), list)
    finally:
        await client.close()


# -- generate ----------------------------------------------------------------------------------


def test_generate(server: ServerProcess) -> None:
    status, headers, body = raw(server, "POST", "/v2/models/string_upper/generate",
                                json.dumps({"INPUT0": "abc", "id": "g"}).encode())  # fmt: skip
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body) == {"id": "g", "model_name": "string_upper", "model_version": "1",
                                "OUTPUT0": "ABC"}  # fmt: skip
    status, _, body = raw(server, "POST", "/v2/models/add_sub/generate",
                          json.dumps({"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}).encode())  # fmt: skip
    assert json.loads(body)["OUTPUT0"] == [2.0, 3.0, 4.0, 5.0]
    status, _, body = raw(server, "POST", "/v2/models/http_decoupled/generate", b'{"COUNT":2}')
    assert status == 200 and "exactly 1 response" in json.loads(body)["error"]


def test_generate_stream(server: ServerProcess) -> None:
    status, headers, body = raw(server, "POST", "/v2/models/http_decoupled/generate_stream",
                                b'{"COUNT":3}')  # fmt: skip
    assert status == 200 and headers["content-type"] == "text/event-stream; charset=utf-8"
    events = [json.loads(e.removeprefix(b"data: ")) for e in body.split(b"\n\n") if e]
    assert [(e["OUT"], e["TEXT"]) for e in events] == [(0, "tok0"), (1, "tok1"), (2, "tok2")]
    status, _, body = raw(server, "POST", "/v2/models/http_decoupled/generate_stream",
                          b'{"COUNT":-1}')  # fmt: skip
    assert (status, body) == (400, b'data: {"error":"negative count"}\n\n')
    status, _, body = raw(server, "POST", "/v2/models/nosuch/generate_stream", b"{}")
    assert status == 404


# -- statistics, repository, settings, shared memory -------------------------------------------


def test_statistics(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("add_sub")["model_stats"][0]["inference_count"]
    client.infer("add_sub", [http_input("INPUT0", A, "FP32"), http_input("INPUT1", B, "FP32")])
    after = client.get_inference_statistics("add_sub", "1")["model_stats"][0]
    assert after["inference_count"] == before + 1
    assert {s["name"] for s in client.get_inference_statistics()["model_stats"]} >= set(OUR_MODELS)
    with pytest.raises(InferenceServerException) as exc:
        client.get_inference_statistics("nosuch")
    assert (exc.value.status(), exc.value.message()) == (
        "400", "requested model 'nosuch' is not available")  # fmt: skip


def test_repository_unload_and_load(client: httpclient.InferenceServerClient) -> None:
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["http_raise"]["state"] == "READY"
    client.unload_model("http_raise")
    for _ in range(100):
        if not client.is_model_ready("http_raise"):
            break
    assert not client.is_model_ready("http_raise")
    ready = {m["name"] for m in client.get_model_repository_index() if m.get("state") == "READY"}
    assert "http_raise" not in ready
    client.load_model("http_raise")
    assert client.is_model_ready("http_raise")
    client.unload_model("nosuch")  # unknown models unload fine
    with pytest.raises(InferenceServerException) as exc:
        client.load_model("nosuch")
    assert exc.value.status() == "500"


def test_logging_and_trace_settings(client: httpclient.InferenceServerClient) -> None:
    settings = client.get_log_settings()
    assert set(settings) >= {"log_info", "log_verbose_level", "log_format"}
    assert client.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0
    with pytest.raises(InferenceServerException) as exc:
        client.update_log_settings({"log_file": "x.log"})
    assert exc.value.status() == "501"
    trace = client.get_trace_settings()
    assert trace["trace_level"] == ["OFF"]
    assert client.update_trace_settings("add_sub", {"trace_rate": "7"})["trace_rate"] == "7"
    with pytest.raises(InferenceServerException) as exc:
        client.get_trace_settings("nosuch")
    assert exc.value.status() == "400"


def test_shared_memory_endpoints(client: httpclient.InferenceServerClient) -> None:
    assert isinstance(client.get_system_shared_memory_status(), list)
    client.unregister_system_shared_memory("never-registered")
    assert client.get_cuda_shared_memory_status() == []
    with pytest.raises(InferenceServerException) as exc:  # (checked before a GPU is looked for)
        client.register_cuda_shared_memory("r", b"AAAA", 0, 16)
    assert exc.value.status() == "400"
    assert exc.value.message() == "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
    with pytest.raises(InferenceServerException) as exc:
        client.register_cuda_shared_memory("r", base64.b64encode(b"\0" * 64), 0, 16)
    assert exc.value.status() == "400"
    assert (
        exc.value.message()
        == "failed to register CUDA shared memory region: 'r', GPUs not supported"
    )
