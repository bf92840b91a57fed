"""Prometheus metrics on their own port, with Triton's metric names, labels and text format
(see exposition.py for the server's metrics, custom.py for the models' own)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi
from modelyard.metrics import custom
from modelyard.metrics.exposition import CpuSampler, render_core

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")


class MetricsServer:
    def __init__(self, server: AsgiServer):
        self._server = server
        self.port = server.port

    async def close(self, grace: float = 0.0) -> None:
        await self._server.close(grace)


_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]


async def _reply(send: Any, status: int, body: bytes) -> None:
    headers = [*_TEXT, (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def start_metrics_server(core: InferenceServer, host: str, port: int) -> MetricsServer:
    cpu = CpuSampler()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await _reply(send, 404, b"404: Not Found")
        elif scope["method"] not in ("GET", "HEAD"):
            await _reply(send, 405, b"405: Method Not Allowed")
        else:
            # Models' own metrics (pb_utils.MetricFamily) are pulled from their workers.
            models = custom.render(await custom.gather(core))
            await _reply(send, 200, render_core(core, cpu) + models)

    server = await serve_asgi(app, host, port)
    log.info("Started Metrics Service at %s:%d", host, server.port)
    return MetricsServer(server)
