"""Response parameters (Triton 25.02): ``InferenceResponse(..., parameters=...)`` and
``.parameters()``, as HTTP and gRPC clients, BLS callers and response senders see them, with
Triton's value types and error texts, in both execution modes."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.backends.python.test_bls import TIMEOUT_S
from tests.conftest import Serving
from tests.helpers import MODES
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

MODELS = ["resp_params", "resp_params_decoupled", "resp_params_bls", "resp_params_bls_async"]
PARAMS = {"bool": True, "str": "Hello World!", "int": 1024}


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=MODELS, mode=request.param) as server:
        yield server


def _text(value: Any) -> np.ndarray:
    return np.array([json.dumps(value).encode()], dtype=np.object_)


def _grpc_params(result: Any) -> dict[str, Any]:
    out = {}
    for key, value in result.get_response().parameters.items():
        out[key] = getattr(value, value.WhichOneof("parameter_choice"))
    return out


def infer_http(server: ServerProcess, params: Any, **kwargs: Any) -> Any:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=TIMEOUT_S)
    t = httpclient.InferInput("RESPONSE_PARAMETERS", [1], "BYTES")
    t.set_data_from_numpy(_text(params))
    try:
        return client.infer("resp_params", [t], **kwargs)
    finally:
        client.close()


def infer_grpc(server: ServerProcess, params: Any, **kwargs: Any) -> Any:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        t = grpcclient.InferInput("RESPONSE_PARAMETERS", [1], "BYTES")
        t.set_data_from_numpy(_text(params))
        return client.infer("resp_params", [t], client_timeout=TIMEOUT_S, **kwargs)


@pytest.mark.parametrize("sender", [False, True], ids=["returned", "response-sender"])
def test_clients_see_the_response_parameters(served: ServerProcess, sender: bool) -> None:
    extra = {"parameters": {"sender": True}} if sender else {}
    res = infer_http(served, PARAMS, **extra)
    assert res.get_response()["parameters"] == PARAMS
    # The model's own parameters() is json.dumps of what it set, as in Triton.
    assert res.as_numpy("OUTPUT")[0].decode() == json.dumps(PARAMS)
    res = infer_grpc(served, PARAMS, **extra)
    assert _grpc_params(res) == PARAMS
    assert isinstance(_grpc_params(res)["int"], int)


def test_no_parameters(served: ServerProcess) -> None:
    res = infer_http(served, {})
    assert "parameters" not in res.get_response()
    assert res.as_numpy("OUTPUT")[0].decode() == "{}"
    assert _grpc_params(infer_grpc(served, {})) == {}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ([], "Expect N8pybind114dictE, got <class 'list'>"),
        ({"1": "int key"}, "Expect parameters keys to have type str, found type <class 'int'>"),
        (
            {"int": 2, "float": 0.5},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
        (
            {"bool": True, "null": None},
            "Expect parameters values to have type bool/int/str, found type <class 'NoneType'>",
        ),
        (
            {"str": "", "list": ["variable"]},
            "Expect parameters values to have type bool/int/str, found type <class 'list'>",
        ),
    ],
)
def test_bad_parameters_raise_tritons_errors(
    served: ServerProcess, params: Any, message: str
) -> None:
    with pytest.raises(InferenceServerException) as e:
        infer_grpc(served, params)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == message
    with pytest.raises(InferenceServerException) as e:
        infer_http(served, params)
    assert (e.value.status(), e.value.message()) == ("400", message)


def test_decoupled_responses_carry_their_parameters(served: ServerProcess) -> None:
    sent: list[dict[str, Any]] = [{"bool": False, "int": 2048}, {"str": "Hello World!"}, {}]
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        t = grpcclient.InferInput("RESPONSE_PARAMETERS", [1], "BYTES")
        t.set_data_from_numpy(_text(sent))
        client.async_stream_infer("resp_params_decoupled", [t])
        results = [got.get(timeout=TIMEOUT_S) for _ in sent]
        client.stop_stream()
    for params, result in zip(sent, results, strict=True):
        # The model sends the final flag on its own, so every data response says "not final".
        assert _grpc_params(result) == {**params, "triton_final_response": False}


@pytest.mark.parametrize("caller", ["resp_params_bls", "resp_params_bls_async"])
def test_bls_callers_see_the_callees_parameters(served: ServerProcess, caller: str) -> None:
    many = [{"bool": True, "int": 10000}, {"str": "?"}]
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=TIMEOUT_S)
    inputs = []
    for name, value in [("RESPONSE_PARAMETERS", PARAMS), ("RESPONSE_PARAMETERS_DECOUPLED", many)]:
        t = httpclient.InferInput(name, [1], "BYTES")
        t.set_data_from_numpy(_text(value))
        inputs.append(t)
    res = client.infer(caller, inputs)
    report = json.loads(res.as_numpy("OUTPUT")[0])
    # A response that crossed the server: Triton's compact JSON; the flag-only final has none.
    compact = [json.dumps(p, separators=(",", ":")) for p in many]
    assert report == {
        "single": json.dumps(PARAMS, separators=(",", ":")),
        "single_error": None,
        "decoupled": [*compact, ""],
    }
    assert res.get_response()["parameters"] == PARAMS  # passed on to the caller's client

    inputs[0].set_data_from_numpy(_text([]))  # the callee answers with an error response
    report = json.loads(client.infer(caller, inputs).as_numpy("OUTPUT")[0])
    assert report["single"] == ""
    assert report["single_error"] == "Expect N8pybind114dictE, got <class 'list'>"
    client.close()
