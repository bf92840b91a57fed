"""SageMaker's endpoint through the real server (--allow-sagemaker): /ping as readiness or
liveness, /invocations with KServe JSON and with the binary extension's content type, the
multi-model routes, other paths, and Triton's port check."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import Serving
from tests.frontends.cloud_requests import SAGEMAKER_MIME, A, B, call, infer, model_name
from tests.helpers import metric_value, read_metrics
from tests.reference import free_ports
from tests.serverproc import ServerProcess, refused_start

pytestmark = pytest.mark.timeout(300)

ENV = {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "cloud_add"}


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(None, "--allow-sagemaker", "--sagemaker-port", "0",
                        models=["cloud_add", "http_decoupled"], env=ENV) as srv:  # fmt: skip
        assert "Started Sagemaker HTTPService at 0.0.0.0:" in srv.output()
        yield srv


def test_ping_answers_readiness(server: ServerProcess) -> None:
    answer = call(server.sagemaker_url, "GET", "/ping")
    assert (answer.status, answer.body) == (200, b"")
    answer = call(server.sagemaker_url, "POST", "/ping")
    assert (answer.status, answer.body) == (405, b'{"error":"Method Not Allowed"}')


@pytest.mark.parametrize("binary", [False, True])
def test_invocations_run_the_default_model(server: ServerProcess, binary: bool) -> None:
    answer, result = infer(server.sagemaker_url, "/invocations", SAGEMAKER_MIME, binary)
    assert answer.status == 200, answer
    np.testing.assert_array_equal(result.as_numpy("SUM"), A + B)
    assert model_name(result) == "cloud_add"
    if binary:  # the JSON length travels in SageMaker's content type, not KServe's header
        assert answer.content_type.startswith(SAGEMAKER_MIME)
        assert "inference-header-content-length" not in answer.headers
    else:
        assert answer.content_type == "application/json"


def test_invocations_count_as_the_models_requests(server: ServerProcess) -> None:
    before = metric_value(read_metrics(server.metrics_url), "nv_inference_request_success",
                          model="cloud_add") or 0  # fmt: skip
    infer(server.sagemaker_url, "/invocations", SAGEMAKER_MIME, False)
    after = metric_value(read_metrics(server.metrics_url), "nv_inference_request_success",
                         model="cloud_add")  # fmt: skip
    assert after == before + 1


def test_invocation_errors_are_the_http_endpoints(server: ServerProcess) -> None:
    answer = call(server.sagemaker_url, "GET", "/invocations")
    assert (answer.status, answer.body) == (405, b'{"error":"Method Not Allowed"}')
    answer = call(server.sagemaker_url, "POST", "/invocations", b'{"inputs": []}')
    assert answer.status == 400 and b"expected 2 inputs but got 0" in answer.body, answer
    mime = f"text/plain;{SAGEMAKER_MIME}12"
    answer = call(server.sagemaker_url, "POST", "/invocations", b"{}", {"Content-Type": mime})
    assert answer.status == 400
    assert json.loads(answer.body) == {
        "error": f"expect MIME type for binary data starts with '{SAGEMAKER_MIME}', got: {mime}"
    }


def test_compression_headers_are_ignored(server: ServerProcess) -> None:
    body = json.dumps({"inputs": [
        {"name": "A", "datatype": "FP32", "shape": [2], "data": A.tolist()},
        {"name": "B", "datatype": "FP32", "shape": [2], "data": B.tolist()},
    ]}).encode()  # fmt: skip
    answer = call(server.sagemaker_url, "POST", "/invocations", body,
                  {"Content-Encoding": "identity", "Accept-Encoding": "gzip"})  # fmt: skip
    assert answer.status == 200 and "content-encoding" not in answer.headers
    assert json.loads(answer.body)["outputs"][0]["data"] == [4.0, 6.0]


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        ("GET", "/models", 200, b'{"models":[]}'),
        ("GET", "/models/x", 404, b""),
        ("POST", "/models/x/invoke", 404, b""),
        ("DELETE", "/models/x", 404, b""),
        ("PUT", "/models/x", 400, b""),
        ("GET", "/v2/health/ready", 400, b""),
        ("POST", "/v2/models/cloud_add/infer", 400, b""),
    ],
)
def test_other_routes_answer_as_triton(
    server: ServerProcess, method: str, path: str, status: int, body: bytes
) -> None:
    answer = call(server.sagemaker_url, method, path)
    assert (answer.status, answer.body) == (status, body)


def test_loading_by_url_is_not_supported(server: ServerProcess) -> None:
    answer = call(server.sagemaker_url, "POST", "/models",
                  b'{"model_name": "h", "url": "/opt/ml/models/h/model"}')  # fmt: skip
    assert answer.status == 501 and b"not supported" in answer.body


def test_ping_modes_when_a_model_failed(serving: Serving) -> None:
    flags = ("--allow-sagemaker", "--sagemaker-port", "0")
    models = ["cloud_add", "py_init_error"]
    with serving.server(None, *flags, models=models, env=ENV) as srv:
        assert call(srv.sagemaker_url, "GET", "/ping").status == 400  # not ready
    env = {**ENV, "SAGEMAKER_TRITON_PING_MODE": "live"}
    with serving.server(None, *flags, models=models, env=env) as srv:
        assert call(srv.sagemaker_url, "GET", "/ping").status == 200  # live


def test_no_default_model_is_tritons_placeholder(serving: Serving) -> None:
    with serving.server(None, "--allow-sagemaker", "--sagemaker-port", "0",
                        models=["cloud_add"]) as srv:  # fmt: skip
        answer = call(srv.sagemaker_url, "POST", "/invocations", b"{}")
    assert answer.status == 404
    assert b"unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME" in answer.body


def test_a_port_clash_is_refused_with_tritons_words(serving: Serving) -> None:
    (port,) = free_ports(1)
    err = refused_start(serving.repo(["cloud_add"]), "--http-port", str(port),
                        "--allow-sagemaker", "--sagemaker-port", str(port))  # fmt: skip
    assert err.splitlines()[-1] == (
        "modelyard serve: error: The server cannot listen to HTTP requests and SageMaker "
        f"requests at the same address and port 0.0.0.0:{port}"
    )
    http, grpc = free_ports(2)
    err = refused_start(serving.repo(["cloud_add"]), "--http-port", str(http), "--grpc-port",
                        str(grpc), "--allow-metrics=false", "--allow-sagemaker",
                        "--sagemaker-safe-port-range", f"{http}-{http}")  # fmt: skip
    assert err.splitlines()[-1] == (
        f"modelyard serve: error: The server cannot listen to GRPC requests at port {grpc}, "
        f"allowed port range is [{http}, {http}]"
    )
