"""What the dashboard will read, filled by real traffic: a core with its HTTP frontend in this
process, driven by tritonclient. ``core.call_graph`` counts every BLS call, traced or not;
``core.traces.recent()`` holds the last finished traces in the documented shape."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from modelyard.backends.loader import LoadOptions
from modelyard.core.api import InferenceServer
from modelyard.core.options import ServerOptions
from modelyard.frontends.http.server import start_http_server
from modelyard.tracing.config import parse_trace_config
from tests.helpers import EXAMPLES, MODELS, MODES, make_repo
from tests.tracing.traces import EXAMPLE_MODELS, infer

SPAN_KEYS = {"span_id", "parent_id", "name", "model", "start_ns", "end_ns", "attributes", "events"}


@pytest.fixture(params=MODES)
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[InferenceServer, str]]:
    repo = make_repo(
        make_repo(tmp_path / "repo", EXAMPLE_MODELS, EXAMPLES), ["trace_caller"], MODELS
    )
    backend = {"python": {"execution-mode": request.param}}
    trace = parse_trace_config([f"triton,file={tmp_path / 'trace.json'}", "rate=1"])
    core = InferenceServer(
        ServerOptions(
            repositories=[str(repo)],
            trace=trace,
            load=LoadOptions(backend_settings=backend),
        )
    )
    assert not await core.start()
    http = await start_http_server(core, "127.0.0.1", 0)
    try:
        yield core, f"127.0.0.1:{http.port}"
    finally:
        await http.close(1.0)
        await core.stop()


async def test_call_graph_and_recent_traces(served: tuple[InferenceServer, str]) -> None:
    core, url = served
    # Tracing off (level OFF): nothing is traced, every BLS call still counts.
    for _ in range(3):
        await asyncio.to_thread(infer, url, "http", "bls_add_sub")
    await asyncio.to_thread(infer, url, "http", "trace_caller")
    assert core.traces.recent() == []
    edges = {(e["caller"], e["callee"]): e for e in core.call_graph.snapshot()}
    assert edges[("bls_add_sub", "add_sub")]["calls"] == 3
    assert edges[("trace_caller", "add_sub")]["calls"] == 1
    assert edges[("trace_caller", "repeat")]["calls"] == 1
    for edge in edges.values():
        assert edge["errors"] == 0
        assert 0 < edge["p50_us"] <= edge["p99_us"]
        assert edge["mean_us"] > 0
    # Traced: the store holds the trace with its spans.
    core.update_trace_settings("", {"trace_level": 4})  # TIMESTAMPS
    await asyncio.to_thread(infer, url, "http", "bls_add_sub", "stored")
    [trace] = await _recent(core)
    assert set(trace) == {"trace_id", "model", "request_id", "start_ns", "end_ns", "spans"}
    assert (trace["model"], trace["request_id"]) == ("bls_add_sub", "stored")
    assert len(trace["trace_id"]) == 32 and trace["start_ns"] < trace["end_ns"]
    spans = trace["spans"]
    assert all(set(s) == SPAN_KEYS for s in spans)
    by_id = {s["span_id"]: s for s in spans}
    named = sorted(
        (s["name"], by_id[s["parent_id"]]["name"] if s["parent_id"] else None) for s in spans
    )
    assert named == [
        ("InferRequest", None),
        ("add_sub", "compute"),
        ("bls_add_sub", "InferRequest"),
        ("compute", "add_sub"),
        ("compute", "bls_add_sub"),
    ]
    call = next(s for s in spans if s["name"] == "add_sub")
    assert call["model"] == "add_sub"
    assert [e["name"] for e in call["events"]] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert trace["start_ns"] <= call["start_ns"] < call["end_ns"] <= trace["end_ns"]
    assert edges[("bls_add_sub", "add_sub")]["calls"] == 3  # (a snapshot is a copy)
    assert {(e["caller"], e["callee"]): e["calls"] for e in core.call_graph.snapshot()}[
        ("bls_add_sub", "add_sub")
    ] == 4


async def _recent(core: InferenceServer) -> list[dict[str, Any]]:
    """The store once the trace is in (it finishes as the frontend releases it)."""
    for _ in range(500):
        found = core.traces.recent()
        if found:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError("no trace was stored")
