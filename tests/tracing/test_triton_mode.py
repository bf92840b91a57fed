"""Triton mode (``--trace-config triton,file=PATH``) through the real clients: the records
of a plain request (HTTP, gRPC), a BLS caller (sync and decoupled calls, both execution
modes), an ensemble; log-frequency files; the settings' run-time effect; and the structure
of the file against the reference Triton's on the same repository."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import EXAMPLES, MODES
from tests.reference import reference_available, start_reference
from tests.serverproc import ServerProcess
from tests.tracing.traces import (
    EXAMPLE_MODELS,
    TraceFiles,
    infer,
    names_of,
    requests_of,
    stream_infer,
    structure,
    traced_repo,
)

COMPUTE = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
HTTP_ROOT = ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START"]
HTTP_ROOT += ["INFER_RESPONSE_COMPLETE", *COMPUTE, "REQUEST_END", "HTTP_SEND_START"]
HTTP_ROOT += ["HTTP_SEND_END"]
CHILD = ["REQUEST_START", "QUEUE_START", *COMPUTE, "REQUEST_END"]


def _flags(path: Path, *extra: str) -> list[str]:
    flags = [f"triton,file={path}", "triton,log-frequency=1", "level=TIMESTAMPS", "rate=1"]
    return [a for f in [*flags, *extra] for a in ("--trace-config", f)]


@pytest.fixture(scope="module", params=MODES)
def traced(
    request: pytest.FixtureRequest, serving: Serving, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, TraceFiles]]:
    path = tmp_path_factory.mktemp("traces") / "trace.json"
    with serving.server(traced_repo(serving), *_flags(path), mode=request.param) as srv:
        yield srv, TraceFiles(path)


def test_plain_request_http(traced: tuple[ServerProcess, TraceFiles]) -> None:
    srv, files = traced
    infer(srv.http_url, "http", "add_sub", request_id="plain")
    records = files.take()
    [(rid, model)] = requests_of(records).items()
    assert model == {"id": rid, "model_name": "add_sub", "model_version": 1, "request_id": "plain"}
    assert names_of(records, rid) == HTTP_ROOT
    assert records[2] == model  # after HTTP_RECV_START/END, as Triton writes it


def test_plain_request_grpc(traced: tuple[ServerProcess, TraceFiles]) -> None:
    srv, files = traced
    infer(srv.grpc_url, "grpc", "add_sub")
    records = files.take()
    [rid] = requests_of(records)
    assert "request_id" not in requests_of(records)[rid]  # none was given
    assert names_of(records, rid) == [
        *CHILD,
        "GRPC_WAITREAD_START",
        "GRPC_WAITREAD_END",
        "INFER_RESPONSE_COMPLETE",
        "GRPC_SEND_START",
        "GRPC_SEND_END",
    ]


@pytest.mark.parametrize(
    ("model", "empty_final", "writes"),
    [("add_sub", False, 1), ("repeat", False, 2), ("repeat", True, 3)],
)
def test_streamed_request_events(
    traced: tuple[ServerProcess, TraceFiles], model: str, empty_final: bool, writes: int
) -> None:
    """A request on a ModelStreamInfer stream: Triton's INFER_RESPONSE_COMPLETE at its first
    response, GRPC_SEND_START/END around each response written (the empty final too)."""
    srv, files = traced
    stream_infer(srv.grpc_url, model, "streamed", enable_empty_final_response=empty_final)
    records = files.take()
    [rid] = requests_of(records)
    assert names_of(records, rid) == [
        *CHILD,
        "GRPC_WAITREAD_START",
        "GRPC_WAITREAD_END",
        "INFER_RESPONSE_COMPLETE",
        *writes * ["GRPC_SEND_START", "GRPC_SEND_END"],
    ]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bls_calls_are_child_traces(
    traced: tuple[ServerProcess, TraceFiles], protocol: str
) -> None:
    srv, files = traced
    url = srv.http_url if protocol == "http" else srv.grpc_url
    result = infer(url, protocol, "trace_caller", request_id="bls")
    assert result.as_numpy("STREAMED")[0] == 3
    assert result.as_numpy("CONTEXT")[0] == b""  # Triton mode: get_context() is None
    records = files.take()
    models = requests_of(records)
    [caller] = [r for r in models.values() if r["model_name"] == "trace_caller"]
    children = {r["model_name"]: r for r in models.values() if r is not caller}
    assert set(children) == {"add_sub", "repeat"}  # the sync call and the decoupled one
    for child in children.values():
        assert child["parent_id"] == caller["id"]
        assert names_of(records, child["id"]) == CHILD
    # Children first, the client's request last (as Triton writes an ensemble's).
    assert records[-1]["id"] == caller["id"]


def test_ensemble_steps_and_their_bls_calls(traced: tuple[ServerProcess, TraceFiles]) -> None:
    srv, files = traced
    infer(srv.http_url, "http", "ensemble_add_sub", request_id="ens")
    records = files.take()
    models = requests_of(records)
    [ensemble] = [r for r in models.values() if r["model_name"] == "ensemble_add_sub"]
    steps = {r["model_name"]: r for r in models.values() if r.get("parent_id") == ensemble["id"]}
    assert set(steps) == {"add_sub", "bls_add_sub"}
    assert all(s["request_id"] == "ens" for s in steps.values())  # steps keep the id
    # bls_add_sub's own BLS call hangs under it.
    [call] = [r for r in models.values() if r.get("parent_id") == steps["bls_add_sub"]["id"]]
    assert call["model_name"] == "add_sub"
    assert not set(COMPUTE) & set(names_of(records, ensemble["id"]))  # an ensemble computes nothing


def test_settings_change_at_run_time(serving: Serving, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    with serving.server(traced_repo(serving), *_flags(path)) as srv:
        files = TraceFiles(path)
        client = httpclient.InferenceServerClient(srv.http_url)
        client.update_trace_settings(settings={"trace_rate": "2"})
        for i in range(4):
            infer(srv.http_url, "http", "add_sub", request_id=f"rate{i}")
        traced_ids = [requests_of(files.take()).popitem()[1]["request_id"] for _ in range(2)]
        assert traced_ids == ["rate1", "rate3"]  # every second request
        client.update_trace_settings(settings={"trace_rate": "1"})
        # Per model: add_sub off, everything else still traced.
        client.update_trace_settings("add_sub", {"trace_level": ["OFF"]})
        infer(srv.http_url, "http", "add_sub", request_id="off")
        infer(srv.http_url, "http", "bls_add_sub", request_id="on")
        models = requests_of(files.take())
        # bls_add_sub's call to add_sub is part of bls_add_sub's trace: traced.
        assert sorted(r["model_name"] for r in models.values()) == ["add_sub", "bls_add_sub"]
        assert {r.get("request_id") for r in models.values()} == {"on", None}
        # Tensors at run time.
        client.update_trace_settings("add_sub", {"trace_level": ["TIMESTAMPS", "TENSORS"]})
        infer(srv.http_url, "http", "add_sub", request_id="tensors")
        records = files.take()
        tensors = [(r["activity"], r["tensor"]["name"]) for r in records if "activity" in r]
        assert sorted(tensors) == [
            ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"),
            ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"),
            ("TENSOR_QUEUE_INPUT", "INPUT0"),
            ("TENSOR_QUEUE_INPUT", "INPUT1"),
        ]
        assert next(r for r in records if "activity" in r)["tensor"]["data"] == "1,1,1,1"
        # A count: that many traces more, then none.
        client.update_trace_settings("add_sub", {"trace_level": None})
        client.update_trace_settings(settings={"trace_count": "1", "log_frequency": "0"})
        infer(srv.http_url, "http", "add_sub", request_id="counted")
        infer(srv.http_url, "http", "add_sub", request_id="beyond")
        assert client.get_trace_settings()["trace_count"] == "0"
        assert [requests_of(files.take()).popitem()[1]["request_id"]] == ["counted"]
        client.update_trace_settings(settings={"trace_level": ["OFF"]})
        client.close()
    assert files.none_pending()  # nothing else was traced


def test_structure_matches_the_reference(serving: Serving, tmp_path: Path) -> None:
    if not reference_available():
        pytest.skip("reference Triton is not installed")
    repo = serving.repo(EXAMPLE_MODELS, source=EXAMPLES, copy=True)  # (no modelyard import)
    calls = [("http", "add_sub"), ("http", "bls_add_sub"), ("http", "ensemble_add_sub")]
    calls += [("grpc", "add_sub"), ("stream", "add_sub"), ("stream", "repeat")]
    calls += [("stream-empty-final", "repeat")]

    def run(http_url: str, grpc_url: str, files: TraceFiles) -> list[dict[tuple[str, str], Any]]:
        out = []
        for protocol, model in calls:
            if protocol.startswith("stream"):
                empty = protocol == "stream-empty-final"
                stream_infer(grpc_url, model, "r", enable_empty_final_response=empty)
            else:
                url = http_url if protocol == "http" else grpc_url
                infer(url, protocol, model, request_id="r")
            out.append(structure(files.take()))
        return out

    ours_path, theirs_path = tmp_path / "ours.json", tmp_path / "theirs.json"
    tensors = ("level=TENSORS",)
    with serving.server(repo, *_flags(ours_path, *tensors)) as srv:
        ours = run(srv.http_url, srv.grpc_url, TraceFiles(ours_path))
    ref = start_reference(repo, *_flags(theirs_path, *tensors))
    try:
        theirs = run(ref.http_url, ref.grpc_url, TraceFiles(theirs_path))
    finally:
        ref.stop()
    for (protocol, model), mine, reference in zip(calls, ours, theirs, strict=True):
        # Beyond Triton: BLS calls are traced without trace= (as children of the caller).
        bls = "bls_add_sub" in model or "ensemble" in model
        extra: set[tuple[str, str]] = {("add_sub", "bls_add_sub")} if bls else set()
        assert set(mine) - set(reference) == extra, (protocol, model)
        for key, shape in reference.items():
            assert mine[key] == shape, f"{protocol} {model} {key}\n{mine[key]}\n{shape}"
