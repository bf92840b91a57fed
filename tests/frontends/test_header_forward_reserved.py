"""Request parameters with Triton's reserved keys, as Triton 26.05 refuses them.

There is no 26.05 reference here; the behaviour comes from triton-inference-server/server
r26.05, commit 69987b7 (PR #8763, "Reject requests if parameters and forward headers contain
Triton reserved parameter keys"):

- ``src/common.h``: ``kReservedParameterKeys`` = sequence_id, sequence_start, sequence_end,
  priority, timeout, headers, binary_data_output; keys starting with ``triton_`` are reserved
  too.
- ``src/http_server.cc`` ``ForEachHeader`` and ``src/grpc/infer_handler.h``
  ``ForwardHeadersAsParameters``: a header the forward pattern matches whose name is one of
  them fails the request with INVALID_ARG, text ``Header '<name>' is reserved for Triton usage
  and cannot be forwarded.`` (HTTP 400, gRPC INVALID_ARGUMENT; on a stream, each request's
  response carries the error). The name is compared as forwarded: HTTP keeps its case.
- ``qa/L0_parameters/parameters_test.py`` (``test_headers_reserved_rejected``, pattern ``.*``
  on both protocols; ``test_params_reserved_rejected``: tritonclient refuses such body
  parameters itself, "is a reserved parameter and cannot be specified", and a raw HTTP body
  with a ``triton_`` key gets 400 "reserved for Triton usage").
"""

from __future__ import annotations

import http.client
import json
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.errors import InvalidArgument
from modelyard.frontends.header_forward import HeaderForward
from tests.conftest import Serving
from tests.helpers import WAIT_S, infer_grpc, infer_http
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)

MODEL = "hdr_params"
IN = {"IN": np.array([1], np.int32)}
# qa/L0_parameters/parameters_test.py's _RESERVED_PARAMETER_KEYS
RESERVED = (
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "headers",
    "binary_data_output",
    "triton_enable_empty_final_response",
    "triton_final_response",
    "triton_injected_via_header",
)


def refused(name: str) -> str:
    return f"Header '{name}' is reserved for Triton usage and cannot be forwarded."


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    flags = ("--http-header-forward-pattern=.*", "--grpc-header-forward-pattern=.*")
    with serving.server(None, *flags, models=[MODEL], endpoints=("http", "grpc")) as srv:
        yield srv


def seen(result: Any) -> dict[str, Any]:
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def raw_infer(server: ServerProcess, headers: dict[str, str], params: Any = None) -> Any:
    """POST a JSON infer request with exactly these header names; (status, body)."""
    host, port = server.http_url.rsplit(":", 1)
    body: dict[str, Any] = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32"}]}
    body["inputs"][0]["data"] = [1]
    if params is not None:
        body["parameters"] = params
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    try:
        conn.request("POST", f"/v2/models/{MODEL}/infer", json.dumps(body), headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("name", RESERVED)
def test_reserved_headers_are_refused_over_http_and_grpc(server: ServerProcess, name: str) -> None:
    with (
        httpclient.InferenceServerClient(server.http_url) as c,
        pytest.raises(InferenceServerException) as e,
    ):
        infer_http(c, MODEL, IN, headers={name: "dummy-value"})
    assert (e.value.status(), e.value.message()) == ("400", refused(name))
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as g,
        pytest.raises(InferenceServerException) as e,
    ):
        infer_grpc(g, MODEL, IN, headers={name: "dummy-value"})
    assert (e.value.status(), e.value.message()) == ("StatusCode.INVALID_ARGUMENT", refused(name))
    assert raw_infer(server, {name: "dummy-value"}) == (400, {"error": refused(name)})


def test_other_headers_still_reach_the_model(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as g:
        params = seen(infer_grpc(g, MODEL, IN, headers={"tenant": "acme"}))
    assert params["tenant"] == "acme"
    # HTTP compares the name as sent (Triton's libevhtp keeps its case): "Priority" is not
    # the reserved "priority", so it is forwarded.
    status, body = raw_infer(server, {"Priority": "high", "X-Tenant": "acme"})
    assert status == 200
    params = json.loads(body["outputs"][0]["data"][0])
    assert (params["Priority"], params["X-Tenant"]) == ("high", "acme")


def test_each_request_of_a_stream_with_a_reserved_header_fails(server: ServerProcess) -> None:
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as g:
        g.start_stream(lambda result, error: results.put(error or result), headers={"timeout": "1"})
        try:
            for _ in range(2):
                inputs = [grpcclient.InferInput("IN", [1], "INT32")]
                inputs[0].set_data_from_numpy(IN["IN"])
                g.async_stream_infer(MODEL, inputs)
            got = [results.get(timeout=WAIT_S) for _ in range(2)]
        finally:
            g.stop_stream()
    for error in got:
        assert isinstance(error, InferenceServerException)
        assert error.message() == refused("timeout")


def test_reserved_body_parameters(server: ServerProcess) -> None:
    # tritonclient (26.05's, and the one the tests use) refuses them before sending ...
    reserved = pytest.raises(InferenceServerException, match="is a reserved parameter")
    with httpclient.InferenceServerClient(server.http_url) as c, reserved:
        infer_http(c, MODEL, IN, parameters={"headers": "x"})
    reserved = pytest.raises(InferenceServerException, match="is a reserved parameter")
    with grpcclient.InferenceServerClient(server.grpc_url) as g, reserved:
        infer_grpc(g, MODEL, IN, parameters={"triton_final_response": "x"})
    # ... and the server refuses a triton_ key in a raw body.
    status, body = raw_infer(server, {}, {"triton_final_response": "x"})
    assert status == 400
    assert body["error"] == (
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not "
        "be specified."
    )


def test_check_uses_the_name_as_forwarded() -> None:
    forward = HeaderForward.compile(".*")
    params: dict[str, Any] = {}
    forward.http([(b"priority", b"1")], [b"Priority"], params)
    assert params == {"Priority": "1"}
    with pytest.raises(InvalidArgument, match=r"Header 'triton_x' is reserved"):
        forward.http([(b"triton_x", b"1")], [b"triton_x"], {})
    # gRPC's metadata is read by name: the first reserved name in that order is reported.
    with pytest.raises(InvalidArgument, match=r"Header 'priority' is reserved"):
        forward.grpc([("timeout", "1"), ("priority", "2"), ("a", "3")])
