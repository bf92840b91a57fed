"""The HTTP frontend of the real server (``python -m modelyard serve``) on the http_* test
models: routing, status codes, bodies, headers, compression, binary framing, settings and
the repository API. Clients: tritonclient.http.aio and raw aiohttp."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import zlib
from collections.abc import AsyncIterator

import aiohttp
import numpy as np
import pytest
import tritonclient.http.aio as aioclient
from tritonclient.http import InferRequestedOutput
from tritonclient.utils import InferenceServerException

from modelyard.core.api import SERVER_VERSION
from tests.frontends.http.conftest import LOADED, call
from tests.helpers import http_input
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)


A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)
ADD = "/v2/models/http_add/infer"


def _add_body() -> bytes:
    return json.dumps({"inputs": [
        {"name": "A", "shape": [4], "datatype": "FP32", "data": A.tolist()},
        {"name": "B", "shape": [4], "datatype": "FP32", "data": B.tolist()}],
        "outputs": [{"name": "SUM"}]}).encode()  # fmt: skip


# -- start, routing, errors --------------------------------------------------------------------


def test_logs_the_bound_port(frontend: ServerProcess) -> None:
    assert frontend.ports["http"] > 0
    assert f"Started HTTPService at 127.0.0.1:{frontend.ports['http']}" in frontend.output()


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        ("GET", "/", 404, b'{"error":"Not Found"}'),
        ("GET", "/v2/nope", 404, b'{"error":"Not Found"}'),
        ("GET", "/v2/models/http_add/versions/abc", 404, b'{"error":"Not Found"}'),
        ("GET", "/v2/models/http_add/infer/x", 404, b'{"error":"Not Found"}'),
        ("POST", "/v2/models//infer", 404, b'{"error":"Not Found"}'),
        ("GET", "/v2/systemsharedmemory/region/r/x", 404, b'{"error":"Not Found"}'),
        ("POST", "/v2", 405, b'{"error":"Method Not Allowed"}'),
        ("POST", "/v2/health/live", 405, b'{"error":"Method Not Allowed"}'),
        ("GET", "/v2/models/http_add/infer", 405, b'{"error":"Method Not Allowed"}'),
        ("GET", "/v2/models/http_add/versions/1/infer", 405, b'{"error":"Method Not Allowed"}'),
        ("POST", "/v2/models/http_add", 405, b'{"error":"Method Not Allowed"}'),
        ("PUT", "/v2/logging", 405, b'{"error":"Method Not Allowed"}'),
        ("GET", "/v2/repository/index", 405, b'{"error":"Method Not Allowed"}'),
        ("POST", "/v2/systemsharedmemory/status", 405, b'{"error":"Method Not Allowed"}'),
        ("GET", "/v2/cudasharedmemory/region/r/register", 405, b'{"error":"Method Not Allowed"}'),
        ("POST", "/v2/models/stats", 405, b'{"error":"Method Not Allowed"}'),
        ("GET", "/v2/models/http_add/generate", 405, b'{"error":"Method Not Allowed"}'),
    ],
)
async def test_unmatched_routes_and_wrong_methods(
    frontend: ServerProcess, session: aiohttp.ClientSession, method: str, path: str,
    status: int, body: bytes,
) -> None:  # fmt: skip
    got = await call(session, frontend, method, path)
    assert (got[0], got[2]) == (status, body)
    assert got[1]["Content-Type"] == "text/plain"


async def test_health(frontend: ServerProcess, session: aiohttp.ClientSession) -> None:
    assert (await call(session, frontend, "GET", "/v2/health/live"))[::2] == (200, b"")
    assert (await call(session, frontend, "GET", "/v2/health/ready"))[::2] == (200, b"")
    # (not ready, not live: see test_lifecycle's shutdown test)


async def test_metadata_config_ready_stats(client: aioclient.InferenceServerClient) -> None:
    assert (await client.get_server_metadata())["version"] == SERVER_VERSION
    meta = await client.get_model_metadata("http_echo")
    assert meta["inputs"] == [{"name": "IN", "datatype": "FP32", "shape": [-1, -1]}]
    config = await client.get_model_config("http_add", "1")
    assert (config["name"], config["backend"]) == ("http_add", "python")
    assert await client.is_model_ready("http_add")
    assert not await client.is_model_ready("nosuch")
    assert not await client.is_model_ready("http_add", "2")
    stats = (await client.get_inference_statistics("http_add"))["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [("http_add", "1")]
    everything = (await client.get_inference_statistics())["model_stats"]
    assert {s["name"] for s in everything} == set(LOADED)
    with pytest.raises(InferenceServerException) as exc:
        await client.get_inference_statistics("nosuch")
    assert (exc.value.status(), exc.value.message()) == (
        "400", "requested model 'nosuch' is not available")  # fmt: skip
    with pytest.raises(InferenceServerException) as exc:
        await client.get_model_metadata("nosuch")
    assert exc.value.status() == "404"
    assert exc.value.message() == "Request for unknown model: 'nosuch' is not found"


async def test_model_ready_false_is_400_with_triton_body(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    status, _, body = await call(session, frontend, "GET", "/v2/models/nosuch/ready")
    assert (status, body) == (400, b'{"error":"Model version not ready"}')


async def test_percent_encoded_names_and_query_strings(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    status, _, body = await call(session, frontend, "GET", "/v2/models/http%5Fadd?x=1&y")
    assert status == 200 and json.loads(body)["name"] == "http_add"
    # An encoded '/' stays inside its segment: matched first, decoded after.
    status, _, body = await call(session, frontend, "GET", "/v2/models/no%2Fsuch")
    assert (status, json.loads(body)) == (
        404, {"error": "Request for unknown model: 'no/such' is not found"})  # fmt: skip
    status, _, body = await call(session, frontend, "POST", "/v2/models/http%5Fadd/infer?q",
                                 _add_body())  # fmt: skip
    assert status == 200 and json.loads(body)["model_name"] == "http_add"
    assert (await call(session, frontend, "GET", "/v2/health/live?verbose=1"))[0] == 200


# -- inference ---------------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
async def test_infer_binary_and_json(client: aioclient.InferenceServerClient, binary: bool) -> None:
    outputs = [InferRequestedOutput("SUM", binary_data=binary),
               InferRequestedOutput("DIFF", binary_data=binary)]  # fmt: skip
    result = await client.infer(
        "http_add", [http_input("A", A, binary=binary), http_input("B", B, binary=binary)], outputs=outputs,
        request_id="id-1",
    )  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("SUM"), A + B)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), A - B)
    response = result.get_response()
    assert response["id"] == "id-1" and response["model_version"] == "1"
    assert [o["name"] for o in response["outputs"]] == ["SUM", "DIFF"]


async def test_infer_passes_sequence_priority_timeout_parameters(
    client: aioclient.InferenceServerClient,
) -> None:
    result = await client.infer(
        "http_add", [http_input("A", A), http_input("B", B)], sequence_id=9, sequence_start=True,
        priority=2, timeout=10_000_000, parameters={"echo_x": "y", "n": 5},
    )  # fmt: skip
    seen = json.loads(result.as_numpy("SEEN")[0])
    # (priority has no pb_utils accessor; the codec tests check that it is parsed)
    assert (seen["correlation_id"], seen["flags"], seen["timeout"]) == (9, 1, 10_000_000)
    assert seen["parameters"] == {"echo_x": "y", "n": 5}
    assert result.get_response()["parameters"] == {"echo_x": "y"}


async def test_aio_client_gets_gzip_responses(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    headers = {"Accept-Encoding": "gzip, deflate, br"}
    status, h, raw = await call(session, frontend, "POST", ADD, _add_body(), headers)
    assert status == 200 and h["Content-Encoding"] == "gzip"
    assert json.loads(gzip.decompress(raw))["outputs"][0]["data"] == (A + B).tolist()
    # only /infer responses are compressed
    status, h, raw = await call(session, frontend, "GET", "/v2/models/http_add", None, headers)
    assert "Content-Encoding" not in h and json.loads(raw)["name"] == "http_add"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
async def test_request_and_response_compression(
    client: aioclient.InferenceServerClient, algorithm: str
) -> None:
    result = await client.infer(
        "http_add", [http_input("A", A), http_input("B", B)], request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("SUM"), A + B)


async def test_unsupported_request_encoding(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    status, headers, body = await call(
        session, frontend, "POST", ADD, b"{}", {"Content-Encoding": "br"}
    )
    assert (status, body) == (501, b'{"error":"Unsupported compression type"}')
    assert headers["Accept-Encoding"] == "gzip, deflate"


async def test_deflate_request_body_with_binary_tensors(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    header = json.dumps({"inputs": [
        {"name": "A", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
        {"name": "B", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}],
        "parameters": {"binary_data_output": True}}).encode()  # fmt: skip
    body = zlib.compress(header + A.tobytes() + B.tobytes())
    status, h, raw = await call(session, frontend, "POST", ADD, body, {
        "Content-Encoding": "deflate", "Inference-Header-Content-Length": str(len(header))})  # fmt: skip
    assert status == 200 and h["Content-Type"] == "application/octet-stream"
    n = int(h["Inference-Header-Content-Length"])
    doc = json.loads(raw[:n])
    sizes = [o["parameters"]["binary_data_size"] for o in doc["outputs"]]  # SUM, DIFF, SEEN
    assert sizes[:2] == [16, 16] and len(raw) == n + sum(sizes)
    np.testing.assert_array_equal(np.frombuffer(raw[n : n + 16], np.float32), A + B)
    np.testing.assert_array_equal(np.frombuffer(raw[n + 16 : n + 32], np.float32), A - B)


async def test_large_tensors_round_trip(client: aioclient.InferenceServerClient) -> None:
    big = np.arange(3 << 20, dtype=np.float32)  # 12 MiB in, 12 MiB out
    result = await client.infer("http_echo", [http_input("IN", big[None, :])],
                                response_compression_algorithm=None)  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("OUT")[0], big)


async def test_raw_binary_request(frontend: ServerProcess, session: aiohttp.ClientSession) -> None:
    data = np.array([1.5, 2.5, 3.5], np.float32)
    status, h, raw = await call(session, frontend, "POST", "/v2/models/http_echo/infer",
                                data.tobytes(), {"Inference-Header-Content-Length": "0"})  # fmt: skip
    assert status == 200
    n = int(h["Inference-Header-Content-Length"])
    doc = json.loads(raw[:n])
    assert doc["outputs"][0]["shape"] == [1, 3]
    np.testing.assert_array_equal(np.frombuffer(raw[n:], np.float32), data)


async def test_infer_errors(frontend: ServerProcess, session: aiohttp.ClientSession) -> None:
    cases = [
        ("/v2/models/nosuch/infer", b"not json", 404,
         "Request for unknown model: 'nosuch' is not found"),
        ("/v2/models/http_stream/infer", b"{}", 501,
         "HTTP end point doesn't support models with decoupled transaction policy"),
        (ADD, b'{"inputs":[', 500, "failed to parse the request JSON buffer"),
        (ADD, b'{"inputs":[]}', 400, "missing required input(s) ['A','B']"),
        ("/v2/models/http_raise/infer", b'{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32",'
         b'"data":[0]}]}', 500, "model says no"),
    ]  # fmt: skip
    for path, body, status, message in cases:
        got_status, headers, got_body = await call(session, frontend, "POST", path, body)
        assert got_status == status, path
        assert headers["Content-Type"] == "application/json"
        assert message in json.loads(got_body)["error"]


async def test_shared_memory_unknown_key_and_region(
    frontend: ServerProcess, session: aiohttp.ClientSession,
    client: aioclient.InferenceServerClient,
) -> None:  # fmt: skip
    assert await client.get_system_shared_memory_status() == []
    with pytest.raises(InferenceServerException) as exc:
        await client.get_system_shared_memory_status("r")
    assert exc.value.status() == "404"
    with pytest.raises(InferenceServerException) as exc:
        await client.register_system_shared_memory("r", "/modelyard_test_no_such_key", 64)
    assert (exc.value.status(), exc.value.message()) == (
        "500", "Unable to open shared memory region: '/modelyard_test_no_such_key'")  # fmt: skip
    await client.unregister_system_shared_memory("r")
    await client.unregister_system_shared_memory()
    body = json.dumps({"inputs": [
        {"name": "A", "shape": [4], "datatype": "FP32", "parameters": {
            "shared_memory_region": "r", "shared_memory_byte_size": 16}},
        {"name": "B", "shape": [4], "datatype": "FP32", "data": B.tolist()}]}).encode()  # fmt: skip
    status, _, raw = await call(session, frontend, "POST", ADD, body)
    assert (status, json.loads(raw)) == (404, {"error": "Unable to find shared memory region: 'r'"})


async def test_cuda_shared_memory_is_unsupported(client: aioclient.InferenceServerClient) -> None:
    assert await client.get_cuda_shared_memory_status() == []
    with pytest.raises(InferenceServerException) as exc:
        await client.get_cuda_shared_memory_status("r")
    assert exc.value.status() == "404"
    handle = base64.b64encode(b"\0" * 64)
    with pytest.raises(InferenceServerException) as exc:
        await client.register_cuda_shared_memory("r", handle, 0, 64)
    assert (exc.value.status(), exc.value.message()) == (
        "400", "failed to register CUDA shared memory region: 'r', GPUs not supported")  # fmt: skip
    await client.unregister_cuda_shared_memory()


async def test_classification_uses_the_label_file(client: aioclient.InferenceServerClient) -> None:
    scores = np.array([[0.1, 3.3, 0.2, 1.0], [5, 1, 2, 7]], np.float32)
    result = await client.infer("http_echo", [http_input("IN", scores)],
                                outputs=[InferRequestedOutput("OUT", class_count=2)])  # fmt: skip
    assert result.as_numpy("OUT").tolist() == [
        [b"3.300000:1:one", b"1.000000:3:three"],
        [b"7.000000:3:three", b"5.000000:0:zero"],
    ]


# -- repository, logging, trace -----------------------------------------------------------------


async def test_repository_index_load_unload(client: aioclient.InferenceServerClient) -> None:
    index = await client.get_model_repository_index()
    assert {"name": "http_add", "version": "1", "state": "READY"} in index
    await client.load_model("http_add")  # a reload
    # The override files are decoded and handed to the core, which loads the model from them
    # (no class in model.py: the load fails with the model's error, 400 or 500).
    with pytest.raises(InferenceServerException) as exc:
        await client.load_model("new", config='{"backend":"python"}',
                                files={"file:1/model.py": b"print('hi')\n"})  # fmt: skip
    assert exc.value.status() in ("400", "500") and "new" in exc.value.message()
    await client.unload_model("http_add", unload_dependents=True)
    try:
        assert not await client.is_model_ready("http_add")
        states = {m["name"]: m.get("state") for m in await client.get_model_repository_index()}
        assert states["http_add"] == "UNAVAILABLE"
    finally:
        await client.load_model("http_add")
    assert await client.is_model_ready("http_add")
    with pytest.raises(InferenceServerException) as exc:
        await client.load_model("nosuch")
    assert exc.value.status() == "500"
    # (unload refused outside explicit mode, 503: see test_lifecycle)


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v2/repository/index", b'{"ready":1}', 500, "attempt to access JSON non-boolean"),
        ("/v2/repository/models/m/load", b'{"parameters":{"config":1}}', 500,
         "attempt to access JSON non-string as string"),
        ("/v2/repository/models/m/load", b'{"parameters":{"other":"x"}}', 500,
         "unexpected error on creating Triton parameter"),
        ("/v2/repository/models/m/load", b'{"parameters":{"file:1/a":"QQ=="}}', 500,
         "failed to load 'm', failed to poll from model repository: Load parameter 'config' "
         "must be specified for model file override"),
        ("/v2/repository/models/m/load",
         b'{"parameters":{"config":"{}","file:../x":"QQ=="}}', 500,
         "failed to load 'm', failed to poll from model repository: invalid file override"),
        ("/v2/repository/models/m/load",
         b'{"parameters":{"config":"{}","file:1/a":"%%%"}}', 400, "base64"),
        ("/v2/repository/models/m/unload", b'{"parameters":{"unload_dependents":1}}', 500,
         "Unable to parse 'unload_dependents'"),
        ("/v2/repository/r/models/m/load", b"", 501,
         "'repository_name' specification is not supported"),
    ],
)  # fmt: skip
async def test_repository_errors(
    frontend: ServerProcess, session: aiohttp.ClientSession, path: str, body: bytes,
    status: int, message: str,
) -> None:  # fmt: skip
    got_status, _, raw = await call(session, frontend, "POST", path, body)
    assert got_status == status
    assert message in json.loads(raw)["error"]


async def test_index_ready_flag_and_repository_name(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    async def names(path: str, body: bytes | None = None) -> list[str]:
        status, _, raw = await call(session, frontend, "POST", path, body)
        assert status == 200
        return [m["name"] for m in json.loads(raw)]

    everything = await names("/v2/repository/index")
    assert everything == sorted([*LOADED, "py_init_error"])
    assert await names("/v2/repository/index", b'{"ready":true}') == sorted(LOADED)
    assert await names("/v2/repository/index", b'{"ready":false}') == everything
    assert await names("/v2/repository/other/index") == everything  # the name is ignored


async def test_logging_settings(
    client: aioclient.InferenceServerClient, frontend: ServerProcess,
    session: aiohttp.ClientSession,
) -> None:  # fmt: skip
    settings = await client.get_log_settings()
    assert settings["log_verbose_level"] == 0
    try:
        updated = await client.update_log_settings({"log_verbose_level": 2, "log_info": False})
        assert updated["log_verbose_level"] == 2 and updated["log_info"] is False
        assert (await client.get_log_settings())["log_verbose_level"] == 2
    finally:
        await client.update_log_settings({"log_verbose_level": 0, "log_info": True})
    cases = [
        (b'{"log_file":"x"}', 501, "log file location can not be updated"),
        (b'{"log_info":1}', 500, "attempt to access JSON non-boolean as boolean"),
        (b'{"log_verbose_level":"1"}', 500, "non-unsigned-integer"),
        (b'{"log_format":"xml"}', 503, "invalid argument for --log_format, got: xml"),
    ]
    for body, status, message in cases:
        got_status, _, raw = await call(session, frontend, "POST", "/v2/logging", body)
        assert got_status == status and message in json.loads(raw)["error"]


async def test_trace_settings(
    client: aioclient.InferenceServerClient, frontend: ServerProcess,
    session: aiohttp.ClientSession,
) -> None:  # fmt: skip
    assert (await client.get_trace_settings())["trace_rate"] == "1000"
    try:
        updated = await client.update_trace_settings(
            "http_add", {"trace_rate": "5", "trace_count": None}
        )
        assert updated["trace_rate"] == "5"
        assert (await client.get_trace_settings("http_add"))["trace_rate"] == "5"
        assert (await client.get_trace_settings())["trace_rate"] == "1000"  # the global one
    finally:
        await client.update_trace_settings("http_add", {"trace_rate": None})
    assert (await client.get_trace_settings("http_add"))["trace_rate"] == "1000"
    with pytest.raises(InferenceServerException) as exc:
        await client.get_trace_settings("nosuch")
    assert exc.value.message() == "Request for unknown model : nosuch"
    cases = [
        (b'{"trace_file":"x"}', 501, "trace file location can not be updated"),
        (b'{"trace_rate":"abc"}', 400, "Unable to parse 'trace_rate', got: abc"),
        (b'{"trace_rate":5}', 500, "attempt to access JSON non-string as string"),
        (b'{"trace_count":"-2"}', 400, "Expecting value >= -1"),
        (b'{"trace_level":["OFF","TIMESTAMPS"]}', 400, "Expect only one trace level 'OFF'"),
    ]
    for body, status, message in cases:
        got_status, _, raw = await call(session, frontend, "POST", "/v2/trace/setting", body)
        assert got_status == status and message in json.loads(raw)["error"]


# -- connections and bodies --------------------------------------------------------------------


async def test_chunked_request_body(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    doc = _add_body()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(doc), 7):
            yield doc[i : i + 7]

    url = f"http://{frontend.http_url}{ADD}"
    async with session.post(url, data=pieces(), headers={"Accept-Encoding": "identity"}) as r:
        assert r.status == 200
        assert json.loads(await r.read())["outputs"][0]["data"] == (A + B).tolist()


async def test_expect_100_continue(frontend: ServerProcess) -> None:
    doc = _add_body()
    reader, writer = await asyncio.open_connection("127.0.0.1", frontend.ports["http"])
    try:
        writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Length: %d\r\n\r\n" % (ADD.encode(), len(doc)))  # fmt: skip
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(doc)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()


async def test_keep_alive_serves_many_requests_on_one_connection(frontend: ServerProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", frontend.ports["http"])
    try:
        for _ in range(5):
            writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200") and b"content-length: 0" in head.lower()
            assert b"connection: close" not in head.lower()
    finally:
        writer.close()


async def test_connection_survives_an_error_with_an_unread_body(
    client: aioclient.InferenceServerClient,
) -> None:
    big = np.zeros(1 << 20, np.float32)
    for _ in range(3):
        with pytest.raises(InferenceServerException) as exc:
            await client.infer("nosuch", [http_input("IN", big[None, :])])
        assert exc.value.status() == "404"
        result = await client.infer("http_add", [http_input("A", A), http_input("B", B)])
        np.testing.assert_array_equal(result.as_numpy("SUM"), A + B)
