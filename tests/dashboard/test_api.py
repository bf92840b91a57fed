"""The dashboard's JSON (``/dashboard/api/...``) and its routes on the real server, after
traffic through tritonclient (HTTP and gRPC): models with state and reason, their instances'
devices and the GPUs, live statistics (refused requests among the errors, Triton's statistics
unchanged), each figure's window, the call graph (BLS calls and ensemble steps), traces and
their model filter; read-only; the off switch; restricted access; the address the server logs
at start-up."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import modelyard
from modelyard.devices import discover_gpus
from tests.conftest import Serving
from tests.dashboard.pages import dashboard_repo, drive, fail, get, refuse, stream
from tests.helpers import wait_for_log, wait_until
from tests.serverproc import ServerProcess, refused_start

DASHBOARD_LINE = re.compile(r"Dashboard at (http://[^\s\"]+)")


def _api(srv: ServerProcess, name: str) -> Any:
    status, answer = get(f"http://{srv.http_url}/dashboard/api/{name}")
    assert status == 200, answer.body
    assert answer.headers["content-type"] == "application/json"
    return answer.json()


def _rows(srv: ServerProcess) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in _api(srv, "models")["models"]}


def test_models_with_state_reason_and_live_statistics(server: ServerProcess) -> None:
    drive(server.http_url, server.grpc_url, "add_sub", 6)
    fail(server.http_url, 2)
    rows = _rows(server)
    assert set(rows) == {"add_sub", "bls_add_sub", "ensemble_add_sub", "http_raise",
                         "py_init_error", "repeat"}  # fmt: skip
    assert rows["add_sub"]["version"] == "1" and rows["add_sub"]["state"] == "READY"
    broken = rows["py_init_error"]
    assert broken["state"] == "UNAVAILABLE" and "lorem_ipsum" in broken["reason"]
    assert "live" not in broken
    live = rows["add_sub"]["live"]
    assert live["success"] >= 6 and live["inference_count"] >= 6
    assert live["requests"] >= 6 and live["rate"] > 0 and live["errors"] == 0
    assert 0 < live["p50_us"] <= live["p99_us"]
    assert live["batches"]["1"] >= 6  # add_sub does not batch: one request per execution
    assert len(live["series"]["requests"]) == 60 and sum(live["series"]["requests"]) >= 6
    failing = rows["http_raise"]["live"]
    assert failing["errors"] == 2 and failing["fail"] == 2 and failing["requests"] == 0
    assert failing["refused"] == 0 and failing["refused_total"] == 0


def test_each_loaded_versions_instances_and_the_gpus(server: ServerProcess) -> None:
    doc = _api(server, "models")
    rows = {m["name"]: m for m in doc["models"]}
    # as Triton places them: the unnamed group is add_sub_0, its first instance add_sub_0_0
    assert rows["add_sub"]["instances"] == [{"name": "add_sub_0_0", "kind": "CPU", "device_id": 0}]
    assert "instances" not in rows["ensemble_add_sub"]  # (its steps' instances run it)
    assert "instances" not in rows["py_init_error"]  # (not loaded)
    assert doc["gpus"] == [
        {"index": d.index, "name": d.name, "uuid": d.uuid, "memory_total": d.total_memory}
        for d in discover_gpus().devices
    ]  # none on a machine without GPUs


def test_time_to_first_response_of_a_decoupled_model(server: ServerProcess) -> None:
    stream(server.grpc_url, 4)
    drive(server.http_url, server.grpc_url, "add_sub", 1)
    rows = _rows(server)
    first = rows["repeat"]["live"]["first_response"]
    assert first["requests"] >= 4
    assert 0 < first["p50_us"] <= first["p99_us"]
    # the first of three responses comes before the request's end (its latency)
    assert first["p50_us"] <= rows["repeat"]["live"]["p99_us"]
    assert rows["add_sub"]["live"]["first_response"] is None  # one response: its latency


def test_every_figure_says_its_window(server: ServerProcess) -> None:
    drive(server.http_url, server.grpc_url, "add_sub", 1)
    live = _rows(server)["add_sub"]["live"]
    assert live["window_s"] == 10  # requests, errors, refused, rate, percentiles, queue, batches
    assert live["series"]["window_s"] == 60  # one value per second
    assert live["since_load"] is True  # success, fail, refused_total, the counts
    assert _api(server, "call_graph")["since_start"] is True


def test_server_version_is_modelyards(server: ServerProcess) -> None:
    assert _api(server, "models")["server"] == {
        "name": "triton",
        "version": modelyard.__version__,
        "protocol_version": "2.51.0",
    }
    client = httpclient.InferenceServerClient(server.http_url)
    try:  # the protocol still answers as Triton
        assert client.get_server_metadata()["version"] == "2.51.0"
    finally:
        client.close()


def test_refused_requests_count_as_errors_but_not_in_tritons_statistics(
    server: ServerProcess,
) -> None:
    """Triton 2.51 counts no failure for a request its validation refuses (HTTP 400): its
    statistics stay Triton's, the dashboard counts the refusals among the model's errors."""
    before = _rows(server)["add_sub"]["live"]
    stats_before = _triton_fail_count(server, "add_sub")
    refuse(server.http_url, server.grpc_url, "add_sub", 4)
    live = _rows(server)["add_sub"]["live"]
    assert live["refused_total"] - before["refused_total"] == 4
    assert live["refused"] >= 4 and live["errors"] >= live["refused"]
    assert sum(live["series"]["errors"]) >= 4
    assert live["fail"] == before["fail"]  # Triton's count, as its statistics give it
    assert _triton_fail_count(server, "add_sub") == stats_before


def _triton_fail_count(server: ServerProcess, model: str) -> int:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        [h] = http.get_inference_statistics(model)["model_stats"]
        [g] = grpc.get_inference_statistics(model, as_json=True)["model_stats"]
    finally:
        http.close()
        grpc.close()
    count = int(h["inference_stats"]["fail"]["count"])
    assert int(g["inference_stats"]["fail"].get("count", 0)) == count
    return count


def _edges(server: ServerProcess) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["caller"], e["callee"]): e for e in _api(server, "call_graph")["edges"]}


def _calls(server: ServerProcess, caller: str, callee: str) -> int:
    edge = _edges(server).get((caller, callee))
    return int(edge["calls"]) if edge else 0


def test_call_graph_edges_after_bls_calls(server: ServerProcess) -> None:
    before = _calls(server, "bls_add_sub", "add_sub")
    drive(server.http_url, server.grpc_url, "bls_add_sub", 4)
    # The count may lag the client's answer: in process mode the callee's worker replies
    # straight to the caller's, and the server counts the call when it reads the outcome.
    wait_until(
        lambda: _calls(server, "bls_add_sub", "add_sub") >= before + 4,
        what=lambda: f"4 more bls_add_sub -> add_sub calls than {before}: {_edges(server)}",
    )
    edge = _edges(server)[("bls_add_sub", "add_sub")]
    assert edge["kind"] == "bls" and edge["errors"] == 0  # one call per request
    assert 0 < edge["p50_us"] <= edge["p99_us"]


def test_ensemble_steps_in_the_call_graph(server: ServerProcess) -> None:
    steps = [("ensemble_add_sub", "add_sub"), ("ensemble_add_sub", "bls_add_sub")]
    before = {s: _calls(server, *s) for s in steps}
    drive(server.http_url, server.grpc_url, "ensemble_add_sub", 3)
    wait_until(
        lambda: all(_calls(server, *s) >= before[s] + 3 for s in steps),
        what=lambda: f"3 more calls on each of {steps}: {_edges(server)}",
    )
    edges = _edges(server)
    for step in steps:
        edge = edges[step]
        assert edge["kind"] == "ensemble" and edge["errors"] == 0
        assert 0 < edge["p50_us"] <= edge["p99_us"]
    assert edges[("bls_add_sub", "add_sub")]["kind"] == "bls"  # the second step's own call


def test_traces_off_then_on_with_spans(server: ServerProcess) -> None:
    off = _api(server, "traces")
    assert off["tracing"]["on"] is False and "--trace-config" in off["tracing"]["help"]
    assert off["traces"] == []
    client = _http_client(server)
    try:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        drive(server.http_url, server.grpc_url, "bls_add_sub", 1)
        doc = wait_until(lambda: (d := _api(server, "traces"))["traces"] and d)
    finally:
        client.update_trace_settings(settings={"trace_level": ["OFF"]})
        client.close()
    assert doc["tracing"]["on"] is True and "help" not in doc["tracing"]
    [trace] = doc["traces"]
    assert trace["model"] == "bls_add_sub"
    names = [(s["name"], s["model"]) for s in trace["spans"]]
    assert ("compute", "bls_add_sub") in names and ("add_sub", "add_sub") in names
    status, answer = get(f"http://{server.http_url}/dashboard/api/traces?limit=0")
    assert status == 200 and answer.json()["traces"] == []
    status, answer = get(f"http://{server.http_url}/dashboard/api/traces?limit=x")
    assert status == 400
    assert answer.json() == {"error": "'limit' must be a non-negative integer, got 'x'"}


def test_traces_filtered_by_model(server: ServerProcess) -> None:
    client = _http_client(server)
    try:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        drive(server.http_url, server.grpc_url, "add_sub", 2)
        drive(server.http_url, server.grpc_url, "bls_add_sub", 2)
        wait_until(lambda: len(_api(server, "traces?model=bls_add_sub")["traces"]) >= 2)
        wait_until(lambda: len(_api(server, "traces?model=add_sub")["traces"]) >= 2)
    finally:
        client.update_trace_settings(settings={"trace_level": ["OFF"]})
        client.close()
    doc = _api(server, "traces?model=add_sub&limit=100")
    assert doc["model"] == "add_sub" and doc["limit"] == 100
    assert {t["model"] for t in doc["traces"]} == {"add_sub"}  # not the BLS callers' traces
    doc = _api(server, "traces?model=bls_add_sub&limit=1")
    assert [t["model"] for t in doc["traces"]] == ["bls_add_sub"]
    assert _api(server, "traces?model=nope")["traces"] == []
    every = _api(server, "traces?limit=100")
    assert every["model"] is None
    assert {"add_sub", "bls_add_sub"} <= {t["model"] for t in every["traces"]}


def _http_client(server: ServerProcess) -> Any:
    return httpclient.InferenceServerClient(server.http_url)


def test_dashboard_address_logged_at_start(server: ServerProcess) -> None:
    url = wait_for_log(server, DASHBOARD_LINE).group(1)
    assert url == f"http://127.0.0.1:{server.ports['http']}/dashboard/"  # the bound port
    assert len(DASHBOARD_LINE.findall(server.output())) == 1
    status, answer = get(url)
    assert status == 200 and b"modelyard dashboard" in answer.body


def test_page_and_files(server: ServerProcess) -> None:
    base = f"http://{server.http_url}/dashboard"
    status, answer = get(base)
    assert status == 308 and answer.headers["location"] == "dashboard/"
    status, answer = get(base + "/")
    assert status == 200 and answer.headers["content-type"] == "text/html; charset=utf-8"
    assert b'src="static/dashboard.js"' in answer.body
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    for name, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
        status, answer = get(f"{base}/static/{name}")
        assert status == 200 and answer.headers["content-type"].startswith(kind)
    for path in ("/static/nope.js", "/static/../__init__.py", "/api/nope", "x"):
        assert get(base + path)[0] == 404, path


def test_read_only(server: ServerProcess) -> None:
    base = f"http://{server.http_url}/dashboard"
    for path in ("/", "/api/models", "/api/traces"):
        status, answer = get(base + path, method="POST")
        assert status == 405 and answer.headers["allow"] == "GET"


def test_off_switch(serving: Serving) -> None:
    with serving.server(dashboard_repo(serving), "--allow-dashboard=false") as srv:
        for path in ("/dashboard", "/dashboard/", "/dashboard/api/models"):
            status, answer = get(f"http://{srv.http_url}{path}")
            assert (status, answer.body) == (404, b'{"error":"Not Found"}'), path
        assert get(f"http://{srv.http_url}/v2/health/live")[0] == 200
        assert not DASHBOARD_LINE.search(srv.output())  # nothing to open


def test_restricted_dashboard_group(serving: Serving) -> None:
    with serving.server(
        dashboard_repo(serving), "--http-restricted-api", "dashboard:admin-key=s3cret"
    ) as srv:
        url = f"http://{srv.http_url}/dashboard/api/models"
        status, answer = get(url)
        assert status == 403
        assert answer.json() == {"error": "This API is restricted, expecting header 'admin-key'"}
        assert get(url, {"admin-key": "wrong"})[0] == 403
        assert get(url, {"Admin-Key": "s3cret"})[0] == 200
        assert get(f"http://{srv.http_url}/v2/models/stats")[0] == 200  # its own group only
        assert not DASHBOARD_LINE.search(srv.output())  # a browser sends no header


def test_dashboard_guarded_by_the_groups_it_shows(serving: Serving) -> None:
    with serving.server(
        dashboard_repo(serving),
        "--http-restricted-api", "statistics:stats-key=a",
        "--http-restricted-api", "trace:trace-key=b",
    ) as srv:  # fmt: skip
        url = f"http://{srv.http_url}/dashboard/"
        assert get(url)[0] == 403
        assert get(url, {"stats-key": "a"})[0] == 403
        assert get(url, {"stats-key": "a", "trace-key": "b"})[0] == 200
        assert not DASHBOARD_LINE.search(srv.output())


def test_no_dashboard_address_without_http(serving: Serving) -> None:
    with serving.server(serving.repo(), endpoints=("grpc",)) as srv:
        assert "Started GRPCInferenceService" in srv.output()
        assert not DASHBOARD_LINE.search(srv.output())


def test_dashboard_group_is_http_only(tmp_path: Path) -> None:
    err = refused_start(tmp_path, "--grpc-restricted-protocol=dashboard:k=v")
    assert err.strip().splitlines()[-1] == "unknown restricted protocol 'dashboard'"
