"""Every BLS call of a traced request is recorded, under concurrency, whatever path carried it
(process mode's worker-to-worker reply, a staged batch, in-process direct and inline
``async_exec`` calls): many concurrent requests over HTTP and gRPC to callers that make sync,
decoupled and async BLS calls, in both execution modes; then each callee's Triton-mode
record has every core timestamp, each OpenTelemetry BLS span its compute span, and the call
graph counts every call."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.dashboard.pages import get
from tests.helpers import MODELS, MODES, make_repo, wait_until
from tests.serverproc import ServerProcess
from tests.tracing.otlp_receiver import OtlpReceiver
from tests.tracing.traces import EXAMPLE_MODELS, EXAMPLES, caller_inputs, read_trace_file

CHILD = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END"]
CHILD += ["COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
ROUNDS = 6  # each round: both callers over both protocols
THREADS = 8
FANOUT = 8  # bls_async_fanout's async_exec calls per request
# Per round: trace_caller twice (a sync call to add_sub and a decoupled one to repeat each),
# bls_async_fanout twice (FANOUT async calls to bls_echo each).
EXPECTED_EDGES = {
    ("trace_caller", "add_sub"): 2 * ROUNDS,
    ("trace_caller", "repeat"): 2 * ROUNDS,
    ("bls_async_fanout", "bls_echo"): 2 * ROUNDS * FANOUT,
}


def _repo(serving: Serving) -> Path:
    root = serving.repo(["add_sub", "repeat"], source=EXAMPLES)
    assert set(EXAMPLE_MODELS) >= {"add_sub", "repeat"}
    return make_repo(root, ["trace_caller", "bls_async_fanout", "bls_echo"], MODELS)


def _one(url: str, protocol: str, model: str) -> None:
    mod: Any = httpclient if protocol == "http" else grpcclient
    client = mod.InferenceServerClient(url)
    try:
        if model == "trace_caller":
            result = client.infer(model, caller_inputs(mod))
            assert result.as_numpy("STREAMED")[0] == 3
        else:
            inp = mod.InferInput("INPUT0", [2], "FP32")
            inp.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
            result = client.infer(model, [inp])
            assert result.as_numpy("OUTPUT0").shape == (2 * FANOUT,)
    finally:
        client.close()


def _load(srv: ServerProcess) -> None:
    """ROUNDS rounds of each caller over each protocol, THREADS at a time."""
    calls = [
        (srv.http_url if protocol == "http" else srv.grpc_url, protocol, model)
        for _ in range(ROUNDS)
        for protocol in ("http", "grpc")
        for model in ("trace_caller", "bls_async_fanout")
    ]
    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(_one, *call) for call in calls]:
            future.result(timeout=120)


def _call_graph(srv: ServerProcess) -> dict[tuple[str, str], int]:
    status, answer = get(f"http://{srv.http_url}/dashboard/api/call_graph")
    assert status == 200
    return {(e["caller"], e["callee"]): e["calls"] for e in answer.json()["edges"]}


def _graph_complete(srv: ServerProcess) -> bool:
    graph = _call_graph(srv)
    return all(graph.get(edge, 0) >= n for edge, n in EXPECTED_EDGES.items())


@pytest.mark.parametrize("mode", MODES)
def test_triton_mode_records_every_callee(serving: Serving, tmp_path: Path, mode: str) -> None:
    path = tmp_path / "trace.json"
    flags = [f"triton,file={path}", "level=TIMESTAMPS", "rate=1"]
    args = [a for f in flags for a in ("--trace-config", f)]
    with serving.server(_repo(serving), *args, mode=mode) as srv:
        _load(srv)
        wait_until(lambda: _graph_complete(srv))  # the outcome may trail the client's answer
        assert _call_graph(srv) == EXPECTED_EDGES  # and nothing counted twice
    records = read_trace_file(path)  # written whole when the server stops
    models = {r["id"]: r for r in records if "model_name" in r}
    names: dict[int, list[str]] = {}
    for r in records:
        if "timestamps" in r:
            names.setdefault(r["id"], []).append(r["timestamps"][0]["name"])
    callers = {i for i, r in models.items() if "parent_id" not in r}
    children = Counter(
        (models[r["parent_id"]]["model_name"], r["model_name"])
        for r in models.values()
        if "parent_id" in r
    )
    assert children == EXPECTED_EDGES
    for rid, record in models.items():
        if rid in callers:
            continue
        # Each callee's own record: every core timestamp, once.
        assert sorted(names[rid]) == sorted(CHILD), (record, names[rid])


@pytest.fixture(scope="module")
def receiver() -> Any:
    rec = OtlpReceiver()
    yield rec
    rec.close()


@pytest.mark.parametrize("mode", MODES)
def test_opentelemetry_spans_of_every_callee(
    serving: Serving, receiver: OtlpReceiver, mode: str
) -> None:
    flags = [
        "mode=opentelemetry",
        f"opentelemetry,url={receiver.url}",
        "opentelemetry,bsp_schedule_delay=20",
        "level=TIMESTAMPS",
        "rate=1",
    ]
    args = [a for f in flags for a in ("--trace-config", f)]
    receiver.spans.clear()
    with serving.server(_repo(serving), *args, mode=mode) as srv:
        _load(srv)
        wait_until(lambda: _graph_complete(srv))
    # Everything is exported by the time the server has stopped (the SDK flushes).
    spans = list(receiver.spans)
    by_id = {s["span_id"]: s for s in spans}
    calls: Counter[tuple[str, str]] = Counter()
    computes = Counter(s["parent_id"] for s in spans if s["name"] == "compute")
    for span in spans:
        if span["name"] in ("compute", "InferRequest", "prepare", "otel_api"):
            continue
        parent = by_id.get(span["parent_id"])
        if parent is None or parent["name"] == "InferRequest":
            continue  # a client's request
        # A BLS call hangs under its caller's compute span (or the model's own span).
        caller = parent
        while caller["name"] in ("compute", "prepare"):
            caller = by_id[caller["parent_id"]]
        calls[(caller["name"], span["name"])] += 1
        assert computes[span["span_id"]] == 1, span  # the callee's compute span is there
        assert span["events"][:2] == ["REQUEST_START", "QUEUE_START"]
    assert calls == EXPECTED_EDGES
