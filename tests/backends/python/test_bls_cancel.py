"""``cancel()`` on the iterator of a decoupled BLS call (Triton 25.04), through the real
server in both execution modes: the callee sees ``is_cancelled()`` and the caller's
iteration ends with the callee's final (CANCELLED) response."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.backends.python.test_bls import TIMEOUT_S
from tests.conftest import Serving
from tests.helpers import MODES, grpc_input, http_input
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

CANCELLED = 7  # pb_utils.TritonError.CANCELLED


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[tuple[ServerProcess, str]]:
    models = ["stream_until_cancelled", "bls_cancel_stream", "bls_cancel_stream_async"]
    with serving.server(models=models, mode=request.param) as server:
        yield server, request.param


def _report_http(server: ServerProcess, model: str, n: int, **kwargs: Any) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=TIMEOUT_S)
    t = http_input("N", np.array([n], np.int32))
    try:
        out: dict[str, Any] = json.loads(client.infer(model, [t], **kwargs).as_numpy("OUT")[0])
        return out
    finally:
        client.close()


def _report_grpc(server: ServerProcess, model: str, n: int) -> dict[str, Any]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        t = grpc_input("N", np.array([n], np.int32))
        res = client.infer(model, [t], client_timeout=TIMEOUT_S)
        out: dict[str, Any] = json.loads(res.as_numpy("OUT")[0])
        return out


def test_cancel_reaches_the_callee_of_exec(served: tuple[ServerProcess, str]) -> None:
    server, _mode = served
    for report in (
        _report_http(server, "bls_cancel_stream", 3),
        _report_grpc(server, "bls_cancel_stream", 1),
    ):
        # The callee saw is_cancelled() and ended with its CANCELLED error, which the caller
        # read as the last response (a few more data responses may come before it).
        assert report["error"] == "request has been cancelled"
        assert report["code"] == CANCELLED
        assert report["data"] >= 1


def test_cancel_of_async_exec(served: tuple[ServerProcess, str]) -> None:
    """``async def execute`` reads ``await async_exec(decoupled=True)`` with a plain `for` and
    cancels after two responses: the stream comes with its first response and the rest as
    they are sent, in both modes (in-process, the model's loop is not the server's)."""
    server, _mode = served
    for report in (
        _report_grpc(server, "bls_cancel_stream_async", 2),
        _report_http(server, "bls_cancel_stream_async", 2),
    ):
        assert (report["error"], report["code"]) == ("request has been cancelled", CANCELLED)
        assert report["data"] >= 2
