"""Vertex AI's endpoint through the real server (--allow-vertex-ai): the AIP_* routes, the
default model, the binary extension's content type, the X-Vertex-Ai-Triton-Redirect header
to the KServe routes, AIP_MODE=PREDICTION's defaults, and the starts Triton refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import Serving
from tests.frontends.cloud_requests import REDIRECT, VERTEX_MIME, A, B, call, infer, model_name
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(300)

ROUTES = {"AIP_PREDICT_ROUTE": "/v1/endpoints/e/deployedModels/m:predict",
          "AIP_HEALTH_ROUTE": "/v1/endpoints/e/deployedModels/m"}  # fmt: skip
PREDICT, HEALTH = ROUTES["AIP_PREDICT_ROUTE"], ROUTES["AIP_HEALTH_ROUTE"]
VERTEX = ("--allow-vertex-ai", "--vertex-ai-port", "0")


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(None, *VERTEX, "--vertex-ai-default-model", "cloud_add",
                        models=["cloud_add", "http_decoupled"], env=ROUTES) as srv:  # fmt: skip
        yield srv


def test_health_answers_readiness(server: ServerProcess) -> None:
    assert call(server.vertex_url, "GET", HEALTH).status == 200
    answer = call(server.vertex_url, "POST", HEALTH)
    assert (answer.status, answer.body) == (405, b'{"error":"Method Not Allowed"}')


@pytest.mark.parametrize("binary", [False, True])
def test_predict_runs_the_default_model(server: ServerProcess, binary: bool) -> None:
    answer, result = infer(server.vertex_url, PREDICT, VERTEX_MIME, binary)
    assert answer.status == 200, answer
    np.testing.assert_array_equal(result.as_numpy("SUM"), A + B)
    assert model_name(result) == "cloud_add"
    if binary:  # responses are KServe's
        assert answer.content_type == "application/octet-stream"
        assert "inference-header-content-length" in answer.headers


def test_the_redirect_header_reaches_the_kserve_routes(server: ServerProcess) -> None:
    answer, result = infer(server.vertex_url, PREDICT, VERTEX_MIME, True,
                           **{REDIRECT: "v2/models/cloud_add/infer"})  # fmt: skip
    assert answer.status == 200 and model_name(result) == "cloud_add"

    def redirect(route: str, body: bytes | None = None) -> tuple[int, bytes]:
        answer = call(server.vertex_url, "POST", PREDICT, body, {REDIRECT: route})
        return answer.status, answer.body

    status, body = redirect("v2/models/cloud_add")
    assert status == 200 and json.loads(body)["name"] == "cloud_add"
    assert redirect("v2/models/cloud_add/ready") == (200, b"")
    assert json.loads(redirect("v2/models/cloud_add/config")[1])["backend"] == "python"
    assert json.loads(redirect("v2/models/stats")[1])["model_stats"]
    assert json.loads(redirect("v2")[1])["name"] == "triton"
    assert redirect("v2/health/live") == (200, b"")
    index = json.loads(redirect("v2/repository/index")[1])
    assert {m["name"] for m in index} == {"cloud_add", "http_decoupled"}
    assert redirect("v2/systemsharedmemory/status") == (200, b"[]")
    status, body = redirect("metrics")
    assert status == 200 and b"# TYPE nv_inference_request_success counter" in body


@pytest.mark.parametrize(
    "route", ["v2/logging", "v2/models/cloud_add/trace/setting", "/v2", "dashboard",
              "v2/models/cloud_add/generate"],
)  # fmt: skip
def test_a_route_vertex_does_not_redirect_to_is_400(server: ServerProcess, route: str) -> None:
    answer = call(server.vertex_url, "POST", PREDICT, b"{}", {REDIRECT: route})
    assert (answer.status, answer.body) == (400, b"")


def test_a_redirect_must_be_a_post(server: ServerProcess) -> None:
    answer = call(server.vertex_url, "GET", PREDICT, None, {REDIRECT: "v2/models/cloud_add"})
    assert (answer.status, answer.body) == (405, b"")
    answer = call(server.vertex_url, "GET", PREDICT)  # no redirect: the infer route's 405
    assert (answer.status, answer.body) == (405, b'{"error":"Method Not Allowed"}')


def test_other_paths_are_400(server: ServerProcess) -> None:
    for method, path in (("GET", "/"), ("POST", "/v2/models/cloud_add/infer")):
        assert call(server.vertex_url, method, path).status == 400


def test_the_only_model_is_the_default_one(serving: Serving) -> None:
    with serving.server(None, *VERTEX, models=["cloud_add"], env=ROUTES) as srv:
        answer, result = infer(srv.vertex_url, PREDICT, VERTEX_MIME, False)
        assert answer.status == 200 and model_name(result) == "cloud_add"


def test_aip_mode_prediction_serves_vertex_instead_of_http_and_grpc(serving: Serving) -> None:
    env = {**ROUTES, "AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "0"}
    with serving.server(None, models=["cloud_add"], env=env,
                        endpoints=("metrics", "vertex")) as srv:  # fmt: skip
        assert "Started HTTPService" not in srv.output()
        assert "Started GRPCInferenceService" not in srv.output()
        assert call(srv.vertex_url, "GET", HEALTH).status == 200


@pytest.mark.parametrize(
    ("env", "flags", "line"),
    [
        ({"AIP_PREDICT_ROUTE": "/p"}, (),
         "failed to start Vertex AI service: Invalid argument - AIP_HEALTH_ROUTE is not "
         "defined for Vertex AI endpoint"),
        ({"AIP_HEALTH_ROUTE": "/h"}, (),
         "failed to start Vertex AI service: Invalid argument - API_PREDICT_ROUTE is not "
         "defined for Vertex AI endpoint"),
        (ROUTES, ("--vertex-ai-default-model", "nope"),
         "failed to start Vertex AI service: Invalid argument - Expect the default model "
         "'nope' is loaded"),
        (ROUTES, (),
         "failed to start Vertex AI service: Invalid argument - Expect the model repository "
         "contains only a single model if default model is not specified"),
    ],
)  # fmt: skip
def test_starts_triton_refuses(
    serving: Serving, env: dict[str, str], flags: tuple[str, ...], line: str
) -> None:
    repo = serving.repo(["cloud_add", "http_decoupled"])
    ports = [f"--{e}-port=0" for e in ("http", "grpc", "metrics")]
    proc = subprocess.run(
        [sys.executable, "-m", "modelyard", "serve", str(repo), *ports, *VERTEX, *flags],
        capture_output=True, text=True, timeout=180, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert line in proc.stderr
    assert "error: creating server" not in proc.stderr
