"""Prometheus metrics on their own port, with Triton's metric names and labels."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi

if TYPE_CHECKING:
    from modelyard.core.server import InferenceServer

log = logging.getLogger("modelyard")

# (metric name, help, getter over a ModelStats)
_COUNTERS: list[tuple[str, str, Any]] = [
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes",
     lambda s: s.success.count),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes",
     lambda s: s.fail.count),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)",
     lambda s: s.inference_count),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)",
     lambda s: s.execution_count),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds",
     lambda s: s.success.ns // 1000),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds",
     lambda s: s.queue.ns // 1000),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds",
     lambda s: s.compute_input.ns // 1000),
    ("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds",
     lambda s: s.compute_infer.ns // 1000),
    ("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds",
     lambda s: s.compute_output.ns // 1000),
]  # fmt: skip


class CoreCollector(Collector):
    def __init__(self, core: InferenceServer):
        self.core = core

    def collect(self) -> Iterator[Metric]:
        versions = [mv for e in self.core.registry.entries.values() for mv in e.versions.values()]
        for name, doc, get in _COUNTERS:
            fam = CounterMetricFamily(name.removesuffix("_total"), doc, labels=["model", "version"])
            for mv in versions:
                fam.add_metric([mv.name, str(mv.version)], get(mv.stats))
            yield fam
        pending = GaugeMetricFamily("nv_inference_pending_request_count",
                                    "Instantaneous number of pending requests awaiting execution per-model.",
                                    labels=["model", "version"])  # fmt: skip
        for mv in versions:
            pending.add_metric([mv.name, str(mv.version)], mv.scheduler.pending)
        yield pending


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
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CoreCollector(core))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await _reply(send, 404, b"404: Not Found")
        elif scope["method"] not in ("GET", "HEAD"):
            await _reply(send, 405, b"405: Method Not Allowed")
        else:
            body = generate_latest(registry)
            # Counters keep Triton's names: prometheus-client appends "_total" to counters,
            # so strip it to match what Triton exports.
            await _reply(send, 200, body.replace(b"_total{", b"{").replace(b"_total ", b" "))

    server = await serve_asgi(app, host, port)
    log.info("Started Metrics Service at %s:%d", host, server.port)
    return MetricsServer(server)
