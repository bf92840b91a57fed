"""Differential tests: modelyard and the reference Triton 2.51 serve the same copy of
examples/model_repository; the same tritonclient calls (HTTP and gRPC) must get the same
answers: outputs, metadata, configuration JSON, readiness, repository index, and the
status codes and messages of bad requests.

Each check observes both servers the same way and compares the observations, so a
failure shows the reference's answer next to modelyard's. Skipped when the reference
is not installed (``shared/reference/triton install``).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import wait_until
from tests.reference import ReferenceServer, reference_available, start_reference

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "model_repository"
MODELS = (
    "accumulate",
    "add_sub",
    "bls_add_sub",
    "ensemble_add_sub",
    "repeat",
    "scale_batched",
    "signal_features",
    "signal_pipeline",
    "square_auto",
    "string_upper",
)
# Example models the reference cannot load: it is a CPU build of Triton 2.51 that ships only
# the Python backend. Both servers get the repository without them; tests/test_examples.py
# runs them (and the pipeline through them) on modelyard alone.
REFERENCE_CANNOT_LOAD = {"signal_classifier": "no onnxruntime backend in the reference build"}
PROTOCOLS = ("http", "grpc")


# ------------------------------------------------------------------ servers


@dataclass(frozen=True)
class Endpoints:
    name: str
    http: str
    grpc: str

    def url(self, protocol: str) -> str:
        return self.http if protocol == "http" else self.grpc


@dataclass(frozen=True)
class Pair:
    reference: Endpoints
    modelyard: Endpoints


@pytest.fixture(scope="module")
def servers(serving: Serving) -> Iterator[Pair]:
    examples = sorted(p.name for p in EXAMPLES.iterdir()
                      if (p / "config.pbtxt").is_file() and p.name not in REFERENCE_CANNOT_LOAD)  # fmt: skip
    repo = serving.repo(examples, EXAMPLES, copy=True)
    ref: ReferenceServer = start_reference(repo)
    try:
        with serving.server(repo) as mine:
            wait_until(lambda: _ready(mine.http_url), 60, 0.1, what="modelyard to be ready")
            yield Pair(
                Endpoints("triton", ref.http_url, ref.grpc_url),
                Endpoints("modelyard", mine.http_url, mine.grpc_url),
            )
    finally:
        ref.stop()


def _ready(hostport: str) -> bool:
    try:
        with httpclient.InferenceServerClient(hostport) as client:
            return bool(client.is_server_ready())
    except Exception:
        return False


def both(pair: Pair, observe: Callable[[Endpoints], Any]) -> tuple[Any, Any]:
    """(reference observation, modelyard observation)."""
    return observe(pair.reference), observe(pair.modelyard)


def same(mine: Any, ref: Any) -> None:
    """modelyard's observation must equal the reference's (pytest shows modelyard on the left)."""
    assert mine == ref, "modelyard (left) differs from Triton 2.51 (right)"


def _error(exc: InferenceServerException) -> dict[str, Any]:
    return {"status": exc.status(), "message": exc.message()}


def _call(fn: Callable[[], Any]) -> dict[str, Any]:
    """The value, or the status and message of the error, of a tritonclient call."""
    try:
        return {"value": fn()}
    except InferenceServerException as exc:
        return {"error": _error(exc)}


def _http(ep: Endpoints) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(ep.http, network_timeout=30.0)


def _grpc(ep: Endpoints) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(ep.grpc)


def _raw_http(
    ep: Endpoints, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    host, port = ep.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# ------------------------------------------------------------------ inference cases


@dataclass(frozen=True)
class In:
    name: str
    datatype: str
    data: np.ndarray
    shape: tuple[int, ...] | None = None  # declared shape, when it should differ from data's


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    inputs: tuple[In, ...]
    outputs: tuple[str, ...] = ()  # requested outputs; empty: all
    version: str = ""
    request_id: str = ""
    binary: bool = True  # HTTP: binary tensor extension (True) or JSON tensors (False)
    error: bool = False  # the reference answers with an error
    protocols: tuple[str, ...] = PROTOCOLS


F4A = np.array([1, 2, 3, 4], dtype=np.float32)
F4B = np.array([10, 20, 30, 40], dtype=np.float32)


def _add_sub(*extra: In, a: In | None = None, b: In | None = None) -> tuple[In, ...]:
    return (a or In("INPUT0", "FP32", F4A), b or In("INPUT1", "FP32", F4B), *extra)


STRINGS = np.array([b"hello", b"", b"Stra\xc3\x9fe 42"], dtype=np.object_)
BATCH3 = np.arange(12, dtype=np.float32).reshape(3, 4)
INTS = np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int32)

# fmt: off
CASES = [
    # answers
    Case("add_sub", "add_sub", _add_sub()),
    Case("add_sub_json", "add_sub", _add_sub(), binary=False, protocols=("http",)),
    Case("add_sub_version_1", "add_sub", _add_sub(), version="1"),
    Case("add_sub_one_output_with_id", "add_sub", _add_sub(), outputs=("OUTPUT1",),
         request_id="req-42"),
    Case("string_upper", "string_upper", (In("INPUT0", "BYTES", STRINGS),)),
    Case("string_upper_json", "string_upper", (In("INPUT0", "BYTES", STRINGS[:1]),),
         binary=False, protocols=("http",)),
    Case("scale_batched", "scale_batched", (In("INPUT0", "FP32", BATCH3),)),
    Case("square_auto", "square_auto", (In("INPUT0", "INT32", INTS),)),
    Case("ensemble_add_sub", "ensemble_add_sub", _add_sub()),
    Case("ensemble_add_sub_one_output", "ensemble_add_sub", _add_sub(), outputs=("OUTPUT1",),
         request_id="ens-1"),
    Case("signal_features", "signal_features", (In("SIGNAL", "FP32", F4B),)),
    # errors
    Case("unknown_model", "no_such_model", _add_sub(), error=True),
    Case("unknown_version", "add_sub", _add_sub(), version="7", error=True),
    Case("wrong_input_name", "add_sub", _add_sub(b=In("INPUTX", "FP32", F4B)), error=True),
    Case("extra_input", "add_sub", _add_sub(In("INPUT2", "FP32", F4B)), error=True),
    Case("wrong_dtype", "add_sub", _add_sub(b=In("INPUT1", "INT32", F4B.astype(np.int32))),
         error=True),
    Case("wrong_shape", "add_sub", _add_sub(b=In("INPUT1", "FP32", np.ones(5, np.float32))),
         error=True),
    Case("wrong_rank", "add_sub", _add_sub(b=In("INPUT1", "FP32", F4B.reshape(1, 4))),
         error=True),
    Case("missing_input", "add_sub", (In("INPUT0", "FP32", F4A),), error=True),
    Case("byte_size_mismatch", "add_sub",
         _add_sub(b=In("INPUT1", "FP32", F4B[:3], shape=(4,))), error=True),
    Case("json_element_count_mismatch", "add_sub",
         _add_sub(b=In("INPUT1", "FP32", F4B[:3], shape=(4,))), binary=False, error=True,
         protocols=("http",)),
    Case("unknown_output", "add_sub", _add_sub(), outputs=("OUTPUT0", "OUTPUTX"), error=True),
    Case("batch_too_large", "scale_batched",
         (In("INPUT0", "FP32", np.ones((9, 4), np.float32)),), error=True),
    Case("batch_dim_missing", "scale_batched", (In("INPUT0", "FP32", F4A),), error=True),
    Case("bytes_model_given_fp32", "string_upper", (In("INPUT0", "FP32", F4A),), error=True),
    Case("ensemble_wrong_input", "ensemble_add_sub", _add_sub(b=In("INPUTX", "FP32", F4B)),
         error=True),
    Case("ensemble_unknown_output", "ensemble_add_sub", _add_sub(), outputs=("SUM",), error=True),
    Case("signal_features_empty", "signal_features",
         (In("SIGNAL", "FP32", np.zeros(0, np.float32)),), error=True),
]
# fmt: on


def _http_infer(ep: Endpoints, case: Case) -> dict[str, Any]:
    inputs = []
    for spec in case.inputs:
        tensor = httpclient.InferInput(spec.name, list(spec.data.shape), spec.datatype)
        tensor.set_data_from_numpy(spec.data, binary_data=case.binary)
        if spec.shape is not None:
            tensor.set_shape(list(spec.shape))
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=case.binary) for n in case.outputs]
    with _http(ep) as client:
        try:
            result = client.infer(
                case.model,
                inputs,
                model_version=case.version,
                outputs=outputs or None,
                request_id=case.request_id,
            )
        except InferenceServerException as exc:
            return {"error": _error(exc)}
    response = dict(result.get_response())
    names = [o["name"] for o in response.get("outputs", [])]
    response["outputs"] = sorted(response.get("outputs", []), key=lambda o: o["name"])
    return {"response": response, "arrays": _arrays(result, names)}


def _grpc_infer(ep: Endpoints, case: Case) -> dict[str, Any]:
    inputs = []
    for spec in case.inputs:
        tensor = grpcclient.InferInput(spec.name, list(spec.data.shape), spec.datatype)
        tensor.set_data_from_numpy(spec.data)
        if spec.shape is not None:
            tensor.set_shape(list(spec.shape))
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(n) for n in case.outputs]
    with _grpc(ep) as client:
        try:
            result = client.infer(
                case.model,
                inputs,
                model_version=case.version,
                outputs=outputs or None,
                request_id=case.request_id,
                client_timeout=30,
            )
        except InferenceServerException as exc:
            return {"error": _error(exc)}
    response = dict(result.get_response(as_json=True))
    response.pop("raw_output_contents", None)  # compared below, decoded, per output
    names = [o["name"] for o in response.get("outputs", [])]
    response["outputs"] = sorted(response.get("outputs", []), key=lambda o: o["name"])
    return {"response": response, "arrays": _arrays(result, names)}


def _arrays(result: Any, names: list[str]) -> dict[str, Any]:
    arrays = {}
    for name in names:
        arr = result.as_numpy(name)
        arrays[name] = None if arr is None else (str(arr.dtype), arr.shape, arr.tolist())
    return arrays


def _infer(protocol: str) -> Callable[[Endpoints, Case], dict[str, Any]]:
    return _http_infer if protocol == "http" else _grpc_infer


INFER_PARAMS = [
    pytest.param(case, protocol, id=f"{case.id}-{protocol}")
    for case in CASES
    for protocol in case.protocols
]


@pytest.mark.parametrize(("case", "protocol"), INFER_PARAMS)
def test_infer_matches_reference(servers: Pair, case: Case, protocol: str) -> None:
    ref, mine = both(servers, lambda ep: _infer(protocol)(ep, case))
    assert ("error" in ref) == case.error, f"reference answered unexpectedly: {ref}"
    same(mine, ref)


def test_answers_are_right(servers: Pair) -> None:
    """Not only equal to the reference: equal to the known values."""
    out = _http_infer(servers.modelyard, CASES[0])
    assert out["arrays"]["OUTPUT0"][2] == (F4A + F4B).tolist()
    assert out["arrays"]["OUTPUT1"][2] == (F4A - F4B).tolist()
    out = _grpc_infer(
        servers.modelyard, Case("s", "string_upper", (In("INPUT0", "BYTES", STRINGS),))
    )
    assert out["arrays"]["OUTPUT0"][2] == [s.upper() for s in STRINGS.tolist()]
    out = _grpc_infer(
        servers.modelyard, Case("b", "scale_batched", (In("INPUT0", "FP32", BATCH3),))
    )
    assert out["arrays"]["OUTPUT0"][2] == (BATCH3 * 2).tolist()
    out = _http_infer(servers.modelyard, Case("q", "square_auto", (In("INPUT0", "INT32", INTS),)))
    assert out["arrays"]["OUTPUT0"][2] == (INTS * INTS).tolist()


def test_concurrent_batched_requests_match_reference(servers: Pair) -> None:
    """Requests of different batch sizes at once, so the dynamic batcher may merge them."""
    batches = [
        np.full((n, 4), n, dtype=np.float32) + np.arange(4, dtype=np.float32)
        for n in (1, 2, 3, 1, 2, 1)
    ]

    def observe(ep: Endpoints) -> list[Any]:
        cases = [
            Case(f"c{i}", "scale_batched", (In("INPUT0", "FP32", b),))
            for i, b in enumerate(batches)
        ]
        with ThreadPoolExecutor(len(cases)) as pool:
            return list(pool.map(lambda c: _grpc_infer(ep, c)["arrays"], cases))

    ref, mine = both(servers, observe)
    same(mine, ref)
    assert [m["OUTPUT0"][2] for m in mine] == [(b * 2).tolist() for b in batches]


# ------------------------------------------------------------------ metadata and config


def _ask(ep: Endpoints, protocol: str, method: str, *args: str, as_json: bool = True) -> Any:
    """Call a tritonclient method over one protocol; gRPC answers as JSON-like dicts."""
    if protocol == "http":
        with _http(ep) as hclient:
            return _call(lambda: getattr(hclient, method)(*args))
    kwargs = {"as_json": True} if as_json else {}
    with _grpc(ep) as gclient:
        return _call(lambda: getattr(gclient, method)(*args, **kwargs))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_server_metadata_has_the_same_shape(servers: Pair, protocol: str) -> None:
    # name, version and the extension list are the server's own; their presence and types
    # are what clients rely on.
    ref, mine = both(servers, lambda ep: _ask(ep, protocol, "get_server_metadata"))
    assert sorted(mine["value"]) == sorted(ref["value"])
    meta = mine["value"]
    assert isinstance(meta["name"], str) and meta["name"]
    assert isinstance(meta["version"], str) and meta["version"]
    assert isinstance(meta["extensions"], list)
    assert all(isinstance(e, str) for e in meta["extensions"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", MODELS)
def test_model_metadata_matches_reference(servers: Pair, model: str, protocol: str) -> None:
    ref, mine = both(servers, lambda ep: _ask(ep, protocol, "get_model_metadata", model))
    assert "value" in ref
    same(mine, ref)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", MODELS)
def test_model_config_matches_reference(servers: Pair, model: str, protocol: str) -> None:
    ref, mine = both(servers, lambda ep: _ask(ep, protocol, "get_model_config", model))
    assert "value" in ref
    same(mine, ref)


QUERY_ERRORS = [
    ("metadata_unknown_model", "get_model_metadata", ("no_such_model",)),
    ("metadata_unknown_version", "get_model_metadata", ("add_sub", "3")),
    ("config_unknown_model", "get_model_config", ("no_such_model",)),
    ("config_unknown_version", "get_model_config", ("add_sub", "3")),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("what", "method", "args"), QUERY_ERRORS, ids=[q[0] for q in QUERY_ERRORS])
def test_query_errors_match_reference(
    servers: Pair, what: str, method: str, args: tuple[str, ...], protocol: str
) -> None:
    ref, mine = both(servers, lambda ep: _ask(ep, protocol, method, *args))
    assert "error" in ref, f"{what}: the reference did not fail: {ref}"
    same(mine, ref)


# ------------------------------------------------------------------ readiness and repository


READY_CASES = [("add_sub", ""), ("add_sub", "1"), ("add_sub", "7"), ("no_such_model", "")]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("model", "version"), READY_CASES)
def test_model_ready_matches_reference(
    servers: Pair, model: str, version: str, protocol: str
) -> None:
    ref, mine = both(
        servers, lambda ep: _ask(ep, protocol, "is_model_ready", model, version, as_json=False)
    )
    same(mine, ref)


@pytest.mark.parametrize(
    "path",
    [
        "/v2/health/ready",
        "/v2/health/live",
        "/v2/models/add_sub/ready",
        "/v2/models/add_sub/versions/7/ready",
        "/v2/models/no_such_model/ready",
    ],
)
def test_http_status_codes_match_reference(servers: Pair, path: str) -> None:
    ref, mine = both(servers, lambda ep: _raw_http(ep, "GET", path)[0])
    same(mine, ref)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_repository_index_matches_reference(servers: Pair, protocol: str) -> None:
    def observe(ep: Endpoints) -> Any:
        index = _ask(ep, protocol, "get_model_repository_index")["value"]
        models = index if protocol == "http" else index.get("models", [])
        return sorted(models, key=lambda m: (m.get("name", ""), m.get("version", "")))

    ref, mine = both(servers, observe)
    assert [m["name"] for m in ref] == sorted(MODELS)
    same(mine, ref)


def test_http_repository_index_ready_filter_matches_reference(servers: Pair) -> None:
    def observe(ep: Endpoints) -> tuple[int, Any]:
        status, body = _raw_http(ep, "POST", "/v2/repository/index", b'{"ready": true}')
        parsed = sorted(json.loads(body), key=lambda m: m.get("name", ""))
        return status, parsed

    ref, mine = both(servers, observe)
    same(mine, ref)
