"""The dashboard's JSON (``/dashboard/api/...``) and its routes on the real server, after
traffic through tritonclient (HTTP and gRPC): models with state and reason, live statistics,
the BLS call graph, traces; read-only; the off switch; restricted access."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import Serving
from tests.dashboard.pages import dashboard_repo, drive, fail, get
from tests.helpers import wait_until
from tests.serverproc import ServerProcess, refused_start


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
                         "py_init_error"}  # fmt: skip
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
    assert _api(server, "models")["server"] == {"name": "triton", "version": "2.51.0"}


def test_call_graph_edges_after_bls_calls(server: ServerProcess) -> None:
    drive(server.http_url, server.grpc_url, "bls_add_sub", 4)
    edges = {(e["caller"], e["callee"]): e for e in _api(server, "call_graph")["edges"]}
    edge = edges[("bls_add_sub", "add_sub")]
    assert edge["calls"] >= 4 and edge["errors"] == 0  # one call per request
    assert 0 < edge["p50_us"] <= edge["p99_us"]


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


def _http_client(server: ServerProcess) -> Any:
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(server.http_url)


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


def test_dashboard_group_is_http_only(tmp_path: Path) -> None:
    err = refused_start(tmp_path, "--grpc-restricted-protocol=dashboard:k=v")
    assert err.strip().splitlines()[-1] == "unknown restricted protocol 'dashboard'"
