"""Prometheus metrics on their own port, with Triton's metric names, labels and text format
(see exposition.py for the server's metrics, custom.py for the models' own). With
``--allow-cpu-metrics`` the CPU gauges are polled on a timer, as Triton polls them; with
``--allow-gpu-metrics`` and GPUs, NVML is polled on a thread of its own (gpu_gauges.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from modelyard.devices import discover_gpus
from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi
from modelyard.metrics import custom
from modelyard.metrics.exposition import render_core
from modelyard.metrics.gpu_gauges import GpuSampler, start_gpu_sampler
from modelyard.metrics.host_gauges import CpuSampler

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")


class MetricsServer:
    def __init__(
        self,
        server: AsgiServer,
        poller: asyncio.Task[None] | None = None,
        gpu: GpuSampler | None = None,
    ):
        self._server = server
        self._poller = poller
        self._gpu = gpu
        self.port = server.port

    async def close(self, grace: float = 0.0) -> None:
        if self._poller is not None:
            self._poller.cancel()
        await self._server.close(grace)
        if self._gpu is not None:
            await self._gpu.stop()


_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]


async def _reply(send: Any, status: int, body: bytes) -> None:
    headers = [*_TEXT, (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def scrape(
    core: InferenceServer, cpu: CpuSampler | None, gpu: GpuSampler | None = None
) -> bytes:
    """The endpoint's text: the server's metrics, then the models' own (pb_utils.MetricFamily,
    pulled from their workers)."""
    return render_core(core, cpu, gpu) + custom.render(await custom.gather(core))


async def start_metrics_server(core: InferenceServer, host: str, port: int) -> MetricsServer:
    settings = core.options.metrics
    cpu = CpuSampler() if settings.cpu else None
    gpu: GpuSampler | None = None  # (started once the port is bound)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await _reply(send, 404, b"404: Not Found")
        elif scope["method"] not in ("GET", "HEAD"):
            await _reply(send, 405, b"405: Method Not Allowed")
        else:
            await _reply(send, 200, await scrape(core, cpu, gpu))

    server = await serve_asgi(app, host, port)
    log.info("Started Metrics Service at %s:%d", host, server.port)
    poller = None
    if cpu is not None:
        log.info("Collecting CPU metrics")
        poller = asyncio.ensure_future(cpu.run(settings.interval_ms))
    # (discovery ran at start and is cached; without a driver it imports nothing)
    gpu = start_gpu_sampler(discover_gpus().devices, settings.interval_ms) if settings.gpu else None
    return MetricsServer(server, poller, gpu)
