"""Statistics, metrics and whereabouts of a model's replicas: a frontend broadcasts to every
live replica of each deployment and adds their counters up. (A replica that died took its counters
with it: the sums count what the live replicas served.)"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi
from modelyard.metrics import custom
from modelyard.metrics.exposition import CpuSampler, render_stats
from modelyard.serving.stats import BatchStat, Duration, ModelStats

if TYPE_CHECKING:
    from modelyard.core.model_version import ModelVersion

log = logging.getLogger("modelyard")

# A replica that does not answer a broadcast within this long is left out of the sums.
BROADCAST_TIMEOUT_S = 5.0


def add_stats(into: ModelStats, other: ModelStats) -> None:
    """Add ``other``'s counters to ``into`` (the same model version, another replica)."""
    into.last_inference_ms = max(into.last_inference_ms, other.last_inference_ms)
    into.inference_count += other.inference_count
    into.execution_count += other.execution_count
    for f in fields(ModelStats):
        mine = getattr(into, f.name)
        if isinstance(mine, Duration):
            _add(mine, getattr(other, f.name))
    for size, stat in other.batches.items():
        have = into.batches.setdefault(size, BatchStat())
        _add(have.compute_input, stat.compute_input)
        _add(have.compute_infer, stat.compute_infer)
        _add(have.compute_output, stat.compute_output)
    for reason, n in other.fail_reasons.items():
        into.fail_reasons[reason] = into.fail_reasons.get(reason, 0) + n


def _add(into: Duration, other: Duration) -> None:
    into.count += other.count
    into.ns += other.ns


async def _broadcast(mv: ModelVersion, method: str) -> list[Any]:
    handle = mv.scheduler.handle()  # type: ignore[attr-defined]  # a RemoteScheduler
    try:
        results = await handle.broadcast(method).results_async(
            timeout_s=BROADCAST_TIMEOUT_S, return_exceptions=True
        )
    except Exception as e:  # the deployment is going away
        log.debug("broadcast %s to '%s' failed: %s", method, mv.name, e)
        return []
    return [r for r in results if not isinstance(r, BaseException)]


async def version_stats(mv: ModelVersion) -> tuple[ModelStats, int]:
    """One version's statistics over its live replicas, and their queued requests."""
    total = ModelStats(mv.name, str(mv.version))
    pending = 0
    for stats, queued in await _broadcast(mv, "stats"):
        add_stats(total, stats)
        pending += queued
    return total, pending


async def version_replicas(mv: ModelVersion) -> list[dict[str, Any]]:
    """Where each live replica of one version runs (its ``where``), by node then process."""
    found: list[dict[str, Any]] = await _broadcast(mv, "where")
    return sorted(found, key=lambda r: (r["node"], r["pid"]))


async def gather_stats(versions: list[ModelVersion]) -> list[tuple[ModelStats, int]]:
    return list(await asyncio.gather(*map(version_stats, versions)))


async def gather_metrics(versions: list[ModelVersion]) -> custom.Snapshot:
    """The models' custom metric families over every replica, merged as one registry."""
    snaps = await asyncio.gather(*(_broadcast(mv, "metrics") for mv in versions))
    return custom.merge([s for per_version in snaps for s in per_version])


async def start_metrics_server(versions: Any, host: str, port: int) -> AsgiServer:
    """Triton's metrics endpoint with the cluster's sums; ``versions()`` lists the deployed
    model versions (the frontend's mirror)."""
    cpu = CpuSampler()

    async def reply(send: Any, status: int, body: bytes) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(body)),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await reply(send, 404, b"404: Not Found")
        elif scope["method"] not in ("GET", "HEAD"):
            await reply(send, 405, b"405: Method Not Allowed")
        else:
            deployed = versions()
            rows, families = await asyncio.gather(gather_stats(deployed), gather_metrics(deployed))
            await reply(send, 200, render_stats(rows, cpu) + custom.render(families))

    return await serve_asgi(app, host, port)
