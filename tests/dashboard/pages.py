"""Helpers for the dashboard tests: the repository, traffic through tritonclient, and plain
GETs of the dashboard's paths (the page and its JSON are not Triton's protocol)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import EXAMPLES, MODELS, make_repo

# add_sub, a BLS caller of it, an ensemble of both, a decoupled model (repeat: COUNT
# responses); a model that fails every request and one that fails to load (UNAVAILABLE with
# its reason).
EXAMPLE_MODELS = ["add_sub", "bls_add_sub", "ensemble_add_sub", "repeat"]
TEST_MODELS = ["http_raise", "py_init_error"]


def dashboard_repo(serving: Serving) -> Path:
    return make_repo(serving.repo(EXAMPLE_MODELS, source=EXAMPLES), TEST_MODELS, MODELS)


def drive(http_url: str, grpc_url: str, model: str, count: int) -> None:
    """``count`` requests to ``model`` (add_sub's inputs), alternating HTTP and gRPC."""
    clients: list[Any] = [
        (httpclient, httpclient.InferenceServerClient(http_url)),
        (grpcclient, grpcclient.InferenceServerClient(grpc_url)),
    ]
    try:
        for i in range(count):
            mod, client = clients[i % 2]
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                inp = mod.InferInput(name, [4], "FP32")
                inp.set_data_from_numpy(np.ones(4, np.float32))
                inputs.append(inp)
            client.infer(model, inputs)
    finally:
        for _, client in clients:
            client.close()


def stream(grpc_url: str, requests: int, count: int = 3) -> None:
    """``requests`` requests to the decoupled ``repeat`` over a gRPC stream, each answered
    with ``count`` responses; returns when every response has come."""
    import queue

    client = grpcclient.InferenceServerClient(grpc_url)
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    try:
        for _ in range(requests):
            inp = grpcclient.InferInput("COUNT", [1], "INT32")
            inp.set_data_from_numpy(np.array([count], np.int32))
            client.async_stream_infer("repeat", [inp])
        for _ in range(requests * count):
            answer = results.get(timeout=30)
            assert not isinstance(answer, Exception), answer
    finally:
        client.stop_stream()
        client.close()


def fail(http_url: str, count: int) -> None:
    """``count`` requests that http_raise fails (each an error response)."""
    client = httpclient.InferenceServerClient(http_url)
    try:
        for _ in range(count):
            inp = httpclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.zeros(1, np.int32))
            try:
                client.infer("http_raise", [inp])
            except Exception as e:
                assert "model says no" in str(e)
            else:
                raise AssertionError("http_raise answered without an error")
    finally:
        client.close()


def refuse(http_url: str, grpc_url: str, model: str, count: int) -> None:
    """``count`` requests to ``model`` (add_sub's inputs) with a wrong shape, alternating
    HTTP and gRPC: each refused by validation (HTTP 400, gRPC INVALID_ARGUMENT)."""
    from tritonclient.utils import InferenceServerException

    clients: list[Any] = [
        (httpclient, httpclient.InferenceServerClient(http_url), "400"),
        (grpcclient, grpcclient.InferenceServerClient(grpc_url), "StatusCode.INVALID_ARGUMENT"),
    ]
    try:
        for i in range(count):
            mod, client, status = clients[i % 2]
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                inp = mod.InferInput(name, [3], "FP32")
                inp.set_data_from_numpy(np.ones(3, np.float32))
                inputs.append(inp)
            try:
                client.infer(model, inputs)
            except InferenceServerException as e:
                assert e.status() == status and "unexpected shape" in str(e), e
            else:
                raise AssertionError(f"{model} accepted a wrong shape")
    finally:
        for _, client, _ in clients:
            client.close()


class Answer:
    """An HTTP answer: headers and body."""

    def __init__(self, headers: Any, body: bytes) -> None:
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, Answer]:
    """(status, answer) of one request, error statuses included; no redirect followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, Answer(response.headers, response.read())
    except urllib.error.HTTPError as e:
        return e.code, Answer(e.headers, e.read())
