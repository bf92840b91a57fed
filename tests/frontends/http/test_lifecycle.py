"""Starting and stopping the uvicorn-served frontends: ``start_http_server`` in-process over a
real core (port 0, the log line, a taken port, close), the router's safety net, the real
server's shutdown drain, and the metrics endpoint."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from modelyard.core.api import InferenceServer
from modelyard.core.options import ServerOptions
from modelyard.frontends.http.server import _Router, start_http_server
from tests.conftest import Serving
from tests.frontends.http.conftest import LOADED, UNLOADED
from tests.serverproc import ServerProcess, start_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[InferenceServer]:
    """A real core over an empty repository (no backends needed)."""
    server = InferenceServer(ServerOptions(repositories=[str(tmp_path)]))
    await server.start()
    yield server
    await server.stop()


def _get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


async def test_port_zero_log_line_and_close(
    core: InferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelyard")
    srv = await start_http_server(core, "127.0.0.1", 0)
    try:
        assert srv.port > 0
        messages = [r.getMessage() for r in caplog.records if r.name == "modelyard"]
        assert messages.count(f"Started HTTPService at 127.0.0.1:{srv.port}") == 1
        status, headers, body = await asyncio.to_thread(_get, srv.port, "/v2/health/live")
        assert (status, headers["content-type"], body) == (200, "text/plain", b"")
        # the port is taken while we serve
        with pytest.raises(OSError, match="address already in use"):
            await start_http_server(core, "127.0.0.1", srv.port)
    finally:
        await srv.close()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.to_thread(_get, srv.port, "/v2/health/live")


async def test_close_waits_for_an_in_flight_request_then_closes_idle_connections(
    core: InferenceServer,
) -> None:
    srv = await start_http_server(core, "127.0.0.1", 0)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", srv.port)
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    # A request whose body has not fully arrived is in flight.
    writer.write(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{")
    await asyncio.sleep(0.2)
    closing = asyncio.ensure_future(srv.close(5.0))
    await asyncio.sleep(0.2)
    assert not closing.done()
    assert await asyncio.wait_for(idle_reader.read(), 5) == b""  # the idle one is closed
    writer.write(b"}")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head
    await asyncio.wait_for(closing, 5)
    idle_writer.close()
    writer.close()


async def test_an_unexpected_exception_is_a_500_and_the_app_keeps_serving(
    core: InferenceServer,
) -> None:
    """The router's safety net, driven as uvicorn drives it: an exception that is no
    ModelyardError (here from the ASGI receive channel itself) becomes a 500 naming it, and
    the next request is served as usual."""
    app = _Router(core)

    async def request(path: bytes, fail: bool) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if fail:
                raise RuntimeError("receive broke")
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        scope = {"type": "http", "method": "POST", "raw_path": path, "headers": []}
        await app(scope, receive, send)
        return sent

    start, body = await request(b"/v2/repository/index", fail=True)
    assert start["status"] == 500
    assert json.loads(body["body"]) == {"error": "internal error: RuntimeError: receive broke"}
    start, body = await request(b"/v2/repository/index", fail=False)
    assert (start["status"], json.loads(body["body"])) == (200, [])


def test_shutdown_drains_in_flight_requests_and_reports_not_ready(serving: Serving) -> None:
    # With py_init_error, which fails to load: the server is not ready.
    repo = serving.repo([*LOADED, *UNLOADED])
    with serving.server(repo, endpoints=("http",)) as srv:
        port = srv.ports["http"]
        # Outside explicit mode the repository API refuses to unload (503).
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v2/repository/models/http_add/unload", body=b"{}")
        r = conn.getresponse()
        assert (r.status, json.loads(r.read())) == (503, {"error": (
            "explicit model load / unload is not allowed if polling is enabled")})  # fmt: skip
        conn.close()
        assert _get(port, "/v2/health/live")[::2] == (200, b"")
        assert _get(port, "/v2/health/ready")[::2] == (400, b"")  # strict readiness

        result: dict[str, Any] = {}
        under_way = threading.Event()

        def stream() -> None:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = json.dumps({"COUNT": 8, "parameters": {"delay_ms": 150}})
            c.request("POST", "/v2/models/http_stream/generate_stream", body=body)
            resp = c.getresponse()
            result["status"], result["first"] = resp.status, resp.readline()
            under_way.set()  # the first event came: the stream is under way
            result["body"] = result["first"] + resp.read()

        t = threading.Thread(target=stream)
        t.start()
        assert under_way.wait(30), "the stream did not start"
        srv.proc.terminate()
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                seen.append((_get(port, "/v2/health/live")[0], _get(port, "/v2/health/ready")[0]))
            except ConnectionError:
                break
            time.sleep(0.05)
        t.join(60)
        assert (200, 400) in seen  # draining: live (as Triton while exiting), not ready
        assert result["status"] == 200 and result["body"].count(b"data: ") == 8  # drained
        assert srv.proc.wait(30) == 0
        with pytest.raises(ConnectionRefusedError):
            _get(port, "/v2/health/live")


@pytest.fixture(scope="module")
def with_metrics(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["http_echo"], endpoints=("http", "metrics")) as srv:
        yield srv


def test_metrics_endpoint(with_metrics: ServerProcess) -> None:
    srv = with_metrics
    assert f"Started Metrics Service at 127.0.0.1:{srv.ports['metrics']}" in srv.output()
    body = json.dumps({"inputs": [{"name": "IN", "shape": [1, 2], "datatype": "FP32",
                                   "data": [1, 2]}]})  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", srv.ports["http"], timeout=30)
    conn.request("POST", "/v2/models/http_echo/infer", body=body)
    assert conn.getresponse().status == 200
    conn.close()
    status, headers, text = _get(srv.ports["metrics"], "/metrics")
    assert status == 200 and headers["content-type"] == "text/plain; charset=utf-8"
    assert (
        b'nv_inference_request_success{model="http_echo",version="1"} 1\n' in text
    )  # Triton's format
    assert b"_total{" not in text and b"_total " not in text  # no "_total" counter suffix
    assert _get(srv.ports["metrics"], "/metrics", "HEAD")[::2] == (200, b"")
    assert _get(srv.ports["metrics"], "/nope")[0] == 404
    assert _get(srv.ports["metrics"], "/metrics", "POST")[0] == 405


def test_a_taken_port_fails_the_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError) as exc:
            start_server(tmp_path, "--allow-grpc=false", "--allow-metrics=false",
                         "--http-port", str(port), timeout=60, expect=("http",))  # fmt: skip
    assert "failed to start a frontend" in str(exc.value)
    assert "address already in use" in str(exc.value)
