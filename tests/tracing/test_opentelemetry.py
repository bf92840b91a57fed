"""OpenTelemetry mode through the real clients, exported over OTLP/HTTP by the official SDK
to a test receiver (a real HTTP server decoding ExportTraceServiceRequest): Triton's span
names, attributes and events; BLS calls under the caller's compute span in both execution
modes (decoupled: one span, an event per response); the model's own spans; ensembles;
W3C traceparent (sampled joins, unsampled means no trace) over HTTP and gRPC."""

from __future__ import annotations

import json
import queue
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import MODES
from tests.serverproc import ServerProcess
from tests.tracing.otlp_receiver import OtlpReceiver
from tests.tracing.traces import infer, traced_repo


def _caller() -> str:
    """A caller's traceparent without its flags: a trace id of its own per test."""
    return f"00-{uuid.uuid4().hex}-b7ad6b7169242424"


ROOT_HTTP = ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE"]
ROOT_HTTP += ["HTTP_SEND_START", "HTTP_SEND_END"]
ROOT_GRPC = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE"]
ROOT_GRPC += ["GRPC_SEND_START", "GRPC_SEND_END"]
REQUEST = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
SERVER, INTERNAL = 2, 1  # OTLP span kinds


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    rec = OtlpReceiver()
    yield rec
    rec.close()


def _flags(receiver: OtlpReceiver) -> list[str]:
    flags = [
        "mode=opentelemetry",
        f"opentelemetry,url={receiver.url}",
        "opentelemetry,bsp_schedule_delay=20",
        "opentelemetry,resource=test.key=test.value",
        "level=TIMESTAMPS",
        "rate=1",
    ]
    return [a for f in flags for a in ("--trace-config", f)]


@pytest.fixture(scope="module", params=MODES)
def server(
    request: pytest.FixtureRequest, serving: Serving, receiver: OtlpReceiver
) -> Iterator[tuple[ServerProcess, str]]:
    with serving.server(traced_repo(serving), *_flags(receiver), mode=request.param) as srv:
        yield srv, request.param


def _trace(receiver: OtlpReceiver, trace_id: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` spans of trace ``trace_id`` (waits for them, bounded)."""
    spans = receiver.wait_for(lambda s: sum(x["trace_id"] == trace_id for x in s) >= count)
    return [s for s in spans if s["trace_id"] == trace_id]


def _the_trace_of(receiver: OtlpReceiver, model: str, request_id: str) -> str:
    spans = receiver.wait_for(
        lambda s: any(
            x["name"] == model and x["attributes"].get("triton.request_id") == request_id for x in s
        )
    )
    return str(
        next(
            x["trace_id"]
            for x in spans
            if x["name"] == model and x["attributes"].get("triton.request_id") == request_id
        )
    )


def _tree(spans: list[dict[str, Any]]) -> dict[str, list[str]]:
    """parent name -> sorted child names (as Triton's QA checks nesting)."""
    names = {s["span_id"]: s["name"] for s in spans}
    tree: dict[str, list[str]] = {}
    for s in spans:
        if s["parent_id"] in names:
            tree.setdefault(names[s["parent_id"]], []).append(s["name"])
    return {k: sorted(v) for k, v in tree.items()}


def _one(spans: list[dict[str, Any]], name: str, **attributes: Any) -> dict[str, Any]:
    [span] = [
        s
        for s in spans
        if s["name"] == name and all(s["attributes"].get(k) == v for k, v in attributes.items())
    ]
    return span


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_plain_request(
    server: tuple[ServerProcess, str], receiver: OtlpReceiver, protocol: str
) -> None:
    srv, mode = server
    url = srv.http_url if protocol == "http" else srv.grpc_url
    rid = f"plain-{protocol}-{mode}"
    infer(url, protocol, "add_sub", request_id=rid)
    trace_id = _the_trace_of(receiver, "add_sub", rid)
    spans = _trace(receiver, trace_id, 3)
    assert _tree(spans) == {"InferRequest": ["add_sub"], "add_sub": ["compute"]}
    root, model, compute = (_one(spans, n) for n in ("InferRequest", "add_sub", "compute"))
    assert root["parent_id"] == ""  # no caller context
    assert root["events"] == (ROOT_HTTP if protocol == "http" else ROOT_GRPC)
    assert model["events"] == REQUEST and compute["events"] == COMPUTE
    assert model["attributes"] == {
        "triton.model_name": "add_sub",
        "triton.model_version": 1,
        "triton.trace_id": model["attributes"]["triton.trace_id"],
        "triton.trace_parent_id": 0,
        "triton.request_id": rid,
    }
    assert {s["kind"] for s in spans} == {SERVER}
    assert model["resource"]["service.name"] == "triton-inference-server"
    assert model["resource"]["test.key"] == "test.value"
    assert model["scope"] == "triton-server"
    assert root["start"] <= model["start"] <= compute["start"] <= compute["end"] <= root["end"]


def test_bls_spans_hang_under_compute(
    server: tuple[ServerProcess, str], receiver: OtlpReceiver
) -> None:
    srv, mode = server
    result = infer(srv.http_url, "http", "trace_caller", request_id=f"bls-{mode}")
    trace_id = _the_trace_of(receiver, "trace_caller", f"bls-{mode}")
    # In-process the plain OpenTelemetry API span joins too (a worker has no provider).
    expected = {
        "InferRequest": ["trace_caller"],
        "trace_caller": ["compute"],
        "compute": ["prepare", "repeat"],
        "prepare": ["add_sub"],
        "add_sub": ["compute"],
        "repeat": ["compute"],
    }
    if mode == "in-process":
        expected["compute"] = sorted([*expected["compute"], "otel_api"])
    spans = _trace(receiver, trace_id, 8 + (mode == "in-process"))
    tree = _tree(spans)
    assert tree == expected
    caller = _one(spans, "trace_caller")
    caller_compute = next(
        s for s in spans if s["name"] == "compute" and s["parent_id"] == caller["span_id"]
    )
    prepare, stream = _one(spans, "prepare"), _one(spans, "repeat")
    assert prepare["parent_id"] == caller_compute["span_id"]
    assert prepare["kind"] == INTERNAL and prepare["attributes"] == {"step": 1}
    assert stream["parent_id"] == caller_compute["span_id"]
    # The decoupled call: one span, an event per response (3 and the final flag).
    assert stream["events"] == [
        "REQUEST_START",
        "QUEUE_START",
        *4 * ["INFER_RESPONSE_COMPLETE"],
        "REQUEST_END",
    ]
    assert stream["attributes"]["triton.trace_parent_id"] == caller["attributes"]["triton.trace_id"]
    # request.trace().get_context(): Triton's JSON, the model span's traceparent.
    context = json.loads(result.as_numpy("CONTEXT")[0])
    assert context == {"traceparent": f"00-{trace_id}-{caller['span_id']}-01"}
    assert caller_compute["start"] <= prepare["start"] <= prepare["end"] <= caller_compute["end"]


def test_ensemble_steps(server: tuple[ServerProcess, str], receiver: OtlpReceiver) -> None:
    srv, mode = server
    infer(srv.http_url, "http", "ensemble_add_sub", request_id=f"ens-{mode}")
    trace_id = _the_trace_of(receiver, "ensemble_add_sub", f"ens-{mode}")
    spans = _trace(receiver, trace_id, 8)
    assert _tree(spans) == {
        "InferRequest": ["ensemble_add_sub"],
        "ensemble_add_sub": ["add_sub", "bls_add_sub"],
        "add_sub": ["compute", "compute"],
        "bls_add_sub": ["compute"],
        "compute": ["add_sub"],  # bls_add_sub's own call
    }


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_traceparent_joins_the_callers_trace(
    server: tuple[ServerProcess, str], receiver: OtlpReceiver, protocol: str
) -> None:
    srv, mode = server
    url = srv.http_url if protocol == "http" else srv.grpc_url
    caller = _caller()
    header = {"traceparent": f"{caller}-01"}
    rid = f"joined-{protocol}-{mode}"
    infer(url, protocol, "add_sub", request_id=rid, headers=header)
    trace_id = _the_trace_of(receiver, "add_sub", rid)
    assert trace_id == caller.split("-")[1]
    root = _one(_trace(receiver, trace_id, 3), "InferRequest")
    assert root["parent_id"] == caller.split("-")[2]


def test_unsampled_traceparent_means_no_trace(
    server: tuple[ServerProcess, str], receiver: OtlpReceiver
) -> None:
    srv, _ = server
    unsampled = f"{_caller()}-00"
    infer(
        srv.http_url, "http", "add_sub", request_id="unsampled", headers={"traceparent": unsampled}
    )
    infer(
        srv.grpc_url, "grpc", "add_sub", request_id="unsampled", headers={"traceparent": unsampled}
    )
    after = f"after-unsampled-{uuid.uuid4().hex}"
    infer(srv.http_url, "http", "add_sub", request_id=after)
    _the_trace_of(receiver, "add_sub", after)  # exported after the others
    assert not any(s["trace_id"] == unsampled.split("-")[1] for s in receiver.spans)
    assert not any(s["attributes"].get("triton.request_id") == "unsampled" for s in receiver.spans)


STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


def _contexts(url: str, protocol: str, headers: dict[str, str], rid: str) -> list[Any]:
    """What context_caller, its exec() and its async_exec() call to context_echo read from
    request.trace().get_context() (parsed JSON; None when it had none)."""
    mod: Any = httpclient if protocol == "http" else grpcclient
    client = mod.InferenceServerClient(url)
    try:
        inp = mod.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], np.int32))
        result = client.infer("context_caller", [inp], headers=headers, request_id=rid)
    finally:
        client.close()
    texts = [result.as_numpy(name)[0] for name in ("CONTEXT", "SYNC", "ASYNC")]
    return [json.loads(t) if t else None for t in texts]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_w3c_context_reaches_the_model_and_its_callees(
    server: tuple[ServerProcess, str], receiver: OtlpReceiver, protocol: str
) -> None:
    """A sampled caller: each request's context names its own span, and tracestate travels
    unchanged (also on the exported spans)."""
    srv, mode = server
    url = srv.http_url if protocol == "http" else srv.grpc_url
    caller = _caller()
    rid = f"w3c-{protocol}-{mode}"
    own, sync, async_ = _contexts(
        url, protocol, {"traceparent": f"{caller}-01", "tracestate": STATE}, rid
    )
    trace_id = caller.split("-")[1]
    spans = _trace(receiver, trace_id, 7)  # root, caller + compute, 2 x (echo + compute)
    model = _one(spans, "context_caller")
    echoes = {s["span_id"] for s in spans if s["name"] == "context_echo"}
    assert own == {"traceparent": f"00-{trace_id}-{model['span_id']}-01", "tracestate": STATE}
    for context in (sync, async_):
        assert context["tracestate"] == STATE
        version, tid, span_id, flags = context["traceparent"].split("-")
        assert (version, tid, flags) == ("00", trace_id, "01") and span_id in echoes
    assert sync != async_  # two calls, two spans
    assert {s["trace_state"] for s in spans} == {STATE}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unsampled_w3c_context_passes_through_unchanged(
    server: tuple[ServerProcess, str], receiver: OtlpReceiver, protocol: str
) -> None:
    """An unsampled caller: the model and its BLS callees read the caller's traceparent and
    tracestate as they came, and nothing is exported."""
    srv, _ = server
    url = srv.http_url if protocol == "http" else srv.grpc_url
    unsampled = f"{_caller()}-00"
    headers = {"traceparent": unsampled, "tracestate": STATE}
    contexts = _contexts(url, protocol, headers, "unsampled-w3c")
    assert contexts == 3 * [{"traceparent": unsampled, "tracestate": STATE}]
    # Without tracestate, only the traceparent.
    contexts = _contexts(url, protocol, {"traceparent": unsampled}, "unsampled-w3c")
    assert contexts == 3 * [{"traceparent": unsampled}]
    after = f"after-unsampled-w3c-{uuid.uuid4().hex}"
    infer(srv.http_url, "http", "add_sub", request_id=after)
    _the_trace_of(receiver, "add_sub", after)  # exported after the others
    assert not any(s["trace_id"] == unsampled.split("-")[1] for s in receiver.spans)
    assert not any(
        s["attributes"].get("triton.request_id") == "unsampled-w3c" for s in receiver.spans
    )


def test_level_off_per_model_at_run_time(
    server: tuple[ServerProcess, str], receiver: OtlpReceiver
) -> None:
    srv, _ = server
    client = httpclient.InferenceServerClient(srv.http_url)
    try:
        client.update_trace_settings("add_sub", {"trace_level": ["OFF"]})
        infer(srv.http_url, "http", "add_sub", request_id="model-off")
        # A sampled traceparent does not override a model's OFF either.
        infer(
            srv.http_url,
            "http",
            "add_sub",
            request_id="model-off",
            headers={"traceparent": f"{_caller()}-01"},
        )
        still_on = f"still-on-{uuid.uuid4().hex}"
        infer(srv.http_url, "http", "bls_add_sub", request_id=still_on)
        _the_trace_of(receiver, "bls_add_sub", still_on)
        assert not any(
            s["attributes"].get("triton.request_id") == "model-off" for s in receiver.spans
        )
    finally:
        client.update_trace_settings("add_sub", {"trace_level": None})
        client.close()


def test_streamed_requests(server: tuple[ServerProcess, str], receiver: OtlpReceiver) -> None:
    srv, mode = server
    done: queue.SimpleQueue[Any] = queue.SimpleQueue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    rid = f"stream-{mode}"
    try:
        client.start_stream(callback=lambda result, error: done.put((result, error)))
        count = grpcclient.InferInput("COUNT", [1], "INT32")
        count.set_data_from_numpy(np.array([2], np.int32))
        client.async_stream_infer("repeat", [count], request_id=rid)
        for _ in range(2):
            _, error = done.get(timeout=30)
            assert error is None
    finally:
        client.stop_stream()
        client.close()
    trace_id = _the_trace_of(receiver, "repeat", rid)
    spans = _trace(receiver, trace_id, 3)
    assert _tree(spans) == {"InferRequest": ["repeat"], "repeat": ["compute"]}
    # Triton's events: the first response completes, then each written response.
    assert _one(spans, "InferRequest")["events"] == [
        "GRPC_WAITREAD_START",
        "GRPC_WAITREAD_END",
        "INFER_RESPONSE_COMPLETE",
        *2 * ["GRPC_SEND_START", "GRPC_SEND_END"],
    ]
