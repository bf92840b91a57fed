"""The SageMaker and Vertex AI endpoints against the reference Triton 2.51: the same requests
(health, inference in JSON and with the binary extension, the redirect header's routes, the
routes each endpoint does not have, method and content-type errors) get the same status,
content type, binary header length and body from both."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Serving
from tests.frontends.cloud_requests import (
    REDIRECT,
    SAGEMAKER_MIME,
    VERTEX_MIME,
    Answer,
    add_body,
    call,
)
from tests.helpers import MODELS
from tests.reference import free_ports, reference_available, start_reference

pytestmark = [pytest.mark.reference, pytest.mark.timeout(600)]

ENV = {
    "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "cloud_add",
    "AIP_PREDICT_ROUTE": "/predict",
    "AIP_HEALTH_ROUTE": "/health",
}
JSON_BODY, _ = add_body(binary=False)
BINARY_BODY, JSON_SIZE = add_body(binary=True)


def _requests(mime: str, infer_path: str) -> list[tuple[str, str, bytes | None, dict[str, str]]]:
    binary = {"Content-Type": f"{mime}{JSON_SIZE}"}
    bad_type = {"Content-Type": f"text/plain;{mime}{JSON_SIZE}"}
    return [
        ("POST", infer_path, JSON_BODY, {}),
        ("POST", infer_path, BINARY_BODY, binary),
        ("POST", infer_path, BINARY_BODY, bad_type),
        ("GET", infer_path, None, {}),
        ("POST", infer_path, JSON_BODY, {"Accept-Encoding": "gzip"}),
        ("GET", "/nope", None, {}),
        ("POST", "/v2/models/cloud_add/infer", JSON_BODY, {}),
    ]


SAGEMAKER = [
    ("GET", "/ping", None, {}),
    ("POST", "/ping", None, {}),
    ("GET", "/ping?probe=1", None, {}),
    *_requests(SAGEMAKER_MIME, "/invocations"),
    ("GET", "/models", None, {}),
    ("GET", "/models/x", None, {}),
    ("POST", "/models/x/invoke", JSON_BODY, {}),
    ("DELETE", "/models/x", None, {}),
    ("PUT", "/models/x", None, {}),
]
VERTEX = [
    ("GET", "/health", None, {}),
    ("POST", "/health", None, {}),
    *_requests(VERTEX_MIME, "/predict"),
    *(
        ("POST", "/predict", body, {REDIRECT: route})
        for route, body in (
            ("v2/models/cloud_add/infer", JSON_BODY),
            ("v2/models/cloud_add", None),
            ("v2/models/cloud_add/versions/1", None),
            ("v2/models/cloud_add/ready", None),
            ("v2/models/nope/ready", None),
            ("v2", None),
            ("v2/models/cloud_add/config", None),
            ("v2/health/live", None),
            ("v2/health/ready", None),
            ("v2/repository/index", None),
            ("v2/systemsharedmemory/status", None),
            ("v2/repository/models/cloud_add/unload", None),
            ("v2/logging", None),
            ("v2/trace/setting", None),
            ("v2/models/cloud_add/trace/setting", None),
            ("v2/models/cloud_add/generate", JSON_BODY),
            ("/v2", None),
        )
    ),
    ("GET", "/predict", None, {REDIRECT: "v2/models/cloud_add"}),
]


def _seen(url: str, requests: list[tuple[str, str, bytes | None, dict[str, str]]]) -> list[Any]:
    """What matters of each answer: status, content type, the binary JSON length, and the
    body (parsed when JSON)."""
    out = []
    for method, path, body, headers in requests:
        answer = call(url, method, path, body, headers)
        out.append((method, path, headers, *_essence(answer)))
    return out


def _essence(answer: Answer) -> tuple[Any, ...]:
    length = answer.headers.get("inference-header-content-length")
    body: Any = answer.body
    if answer.body[:1] in (b"{", b"[") and length is None:
        try:
            body = json.loads(answer.body)
        except ValueError:
            pass
    return answer.status, answer.content_type, length, body


@pytest.fixture(scope="module")
def answers(serving: Serving, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Both servers' answers to the same requests, in the same order."""
    if not reference_available():
        pytest.skip("reference Triton is not installed")
    repo = tmp_path_factory.mktemp("cloud") / "repo"
    for name in ("cloud_add", "http_decoupled"):
        shutil.copytree(MODELS / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    flags = ("--allow-sagemaker=true", "--allow-vertex-ai=true",
             "--vertex-ai-default-model=cloud_add")  # fmt: skip
    with serving.server(repo, *flags, "--sagemaker-port=0", "--vertex-ai-port=0",
                        env=ENV) as server:  # fmt: skip
        mine = (_seen(server.sagemaker_url, SAGEMAKER), _seen(server.vertex_url, VERTEX))
    sagemaker_port, vertex_port = free_ports(2)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in ENV.items():
            patch.setenv(key, value)
        ref = start_reference(repo, *flags, f"--sagemaker-port={sagemaker_port}",
                              f"--vertex-ai-port={vertex_port}")  # fmt: skip
    try:
        theirs = (
            _seen(f"127.0.0.1:{sagemaker_port}", SAGEMAKER),
            _seen(f"127.0.0.1:{vertex_port}", VERTEX),
        )
    finally:
        ref.stop()
    yield mine, theirs


def _pairs(answers: Any, which: int) -> list[tuple[Any, Any]]:
    mine, theirs = answers
    return list(zip(mine[which], theirs[which], strict=True))


@pytest.mark.parametrize(("which", "name"), [(0, "SageMaker"), (1, "Vertex AI")])
def test_the_same_answers_as_triton(answers: Any, which: int, name: str) -> None:
    different = [(mine, theirs) for mine, theirs in _pairs(answers, which) if mine != theirs]
    assert different == [], f"{name}: (modelyard, Triton) answers that differ"
