"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: headers whose
names match reach the model as string request parameters (model hdr_params answers with
``request.parameters()``), through tritonclient's ``headers=``, in both execution modes."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from modelyard.frontends.header_forward import HeaderForward
from tests.conftest import Serving
from tests.helpers import MODES, WAIT_S, infer_grpc, infer_http
from tests.serverproc import ServerProcess

MODEL = "hdr_params"
PATTERN = "^x-|tenant"  # matched in any case, anywhere in the name
IN = {"IN": np.array([1], np.int32)}


@pytest.fixture(scope="module", params=MODES)
def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    flags = (f"--http-header-forward-pattern={PATTERN}", f"--grpc-header-forward-pattern={PATTERN}")
    with serving.server(
        None, *flags, models=[MODEL], mode=request.param, endpoints=("http", "grpc")
    ) as srv:
        yield srv


def seen(result: Any) -> dict[str, Any]:
    """The parameters the model saw, in their order."""
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def test_http_headers_reach_the_model_as_sent(server: ServerProcess) -> None:
    headers = {"X-Tenant": "acme", "Other": "no", "My-TENANT-Id": "7", "x-trace": "t 1"}
    with httpclient.InferenceServerClient(server.http_url) as c:
        params = seen(infer_http(c, MODEL, IN, headers=headers, parameters={"p": 3}))
    # names as the client wrote them, values as strings, after the body's parameters
    assert list(params.items()) == [
        ("p", 3),
        ("X-Tenant", "acme"),
        ("My-TENANT-Id", "7"),
        ("x-trace", "t 1"),
    ]


def test_http_header_replaces_a_body_parameter_of_its_name(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as c:
        result = infer_http(
            c, MODEL, IN, headers={"x-tenant": "header"}, parameters={"x-tenant": "body", "q": True}
        )
    assert list(seen(result).items()) == [("x-tenant", "header"), ("q", True)]


def test_grpc_metadata_reaches_the_model_by_name(server: ServerProcess) -> None:
    headers = {"x-trace": "1", "tenant-id": "7", "other": "no", "x-tenant": "acme"}
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        params = seen(infer_grpc(c, MODEL, IN, headers=headers, parameters={"p": 3}))
    assert list(params.items()) == [
        ("p", 3),
        ("tenant-id", "7"),
        ("x-tenant", "acme"),
        ("x-trace", "1"),
    ]


def test_grpc_stream_forwards_the_calls_metadata_to_every_request(
    server: ServerProcess,
) -> None:
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        c.start_stream(
            lambda result, error: results.put(error or result),
            headers={"x-tenant": "acme", "other": "no"},
        )
        try:
            for i in range(3):
                inputs = [grpcclient.InferInput("IN", [1], "INT32")]
                inputs[0].set_data_from_numpy(IN["IN"])
                c.async_stream_infer(MODEL, inputs, parameters={"i": i})
            got = [results.get(timeout=WAIT_S) for _ in range(3)]
        finally:
            c.stop_stream()
    assert [seen(r) for r in got] == [{"i": i, "x-tenant": "acme"} for i in range(3)]


def test_matching_is_a_search_in_any_case() -> None:
    forward = HeaderForward.compile("tenant")
    params: dict[str, Any] = {}
    headers = [(b"x-tenant", b"a"), (b"tenantless", b"b"), (b"te-nant", b"c")]
    forward.http(headers, [b"X-Tenant", b"Tenantless", b"Te-Nant"], params)
    assert params == {"X-Tenant": "a", "Tenantless": "b"}
    metadata: list[tuple[str, str | bytes]] = [("z-tenant", "1"), ("a-tenant", b"\xff2")]
    metadata.append(("x", "3"))
    assert list(forward.grpc(metadata).items()) == [("a-tenant", "\ufffd2"), ("z-tenant", "1")]
