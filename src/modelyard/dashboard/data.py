"""The dashboard's JSON: models with their state, live statistics and instances' devices, the
machine's GPUs, the call graph (BLS calls and ensemble steps), the last traces. Read-only views of the core; nothing here changes
the server. Every figure says what it covers: ``window_s`` (the live summary, the series),
``since_load`` (a version's totals) or ``since_start`` (the call graph)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import modelyard
from modelyard.config.placement import instance_placements
from modelyard.core.index import repository_index
from modelyard.devices import discover_gpus

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

DEFAULT_TRACES = 20
MAX_TRACES = 100

# How to turn tracing on, for the page to show while it is off.
TRACING_HELP = (
    "Start the server with --trace-config triton,file=PATH (or --trace-config "
    "mode=opentelemetry) and --trace-config level=TIMESTAMPS --trace-config rate=1; "
    "with a trace mode set, the trace-setting API turns it on at run time "
    '(POST /v2/trace/setting {"trace_level": ["TIMESTAMPS"]}).'
)


async def models(core: InferenceServer) -> dict[str, Any]:
    """Every model of the repository index (versions, state, reason) as the server knows it
    (no rescan of the repositories: the page polls), each loaded version with its live
    statistics (``serving/live.py``) under ``live``, its instances and their devices under
    ``instances`` and, on a Ray cluster, where its replicas run under ``replicas``; and the
    GPUs (``gpus``)."""
    index = repository_index(core.registry, False)
    live = {(s["name"], s["version"]): s for s in core.live_statistics()}
    where = await core.replicas()
    placed = instances(core)
    rows = []
    for item in index:
        row = dict(item)
        key = (item["name"], item.get("version", ""))
        stats = live.pop(key, None)
        if stats is not None:
            row["live"] = {k: v for k, v in stats.items() if k not in ("name", "version")}
        if key in placed:
            row["instances"] = placed[key]
        if key in where:
            row["replicas"] = where[key]
        rows.append(row)
    for (name, version), stats in sorted(live.items()):  # loaded, gone from the index
        rows.append({"name": name, "version": version, "state": "READY", "live": stats})
    return {"server": server(core), "gpus": gpus(), "models": rows}


def instances(core: InferenceServer) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each loaded version's instances as Triton places them (``config/placement.py``):
    ``name``, ``kind`` (``CPU``, ``GPU``, ``MODEL``) and ``device_id``. Versions without
    instances of their own here (ensembles, a Ray frontend's mirrors) are left out."""
    return {
        (e.name, str(v)): [
            {"name": p.name, "kind": p.kind, "device_id": p.device_id}
            for p in instance_placements(mv.config)
        ]
        for e in list(core.registry.entries.values())
        for v, mv in list(e.versions.items())
        if mv.instances
    }


def gpus() -> list[dict[str, Any]]:
    """The GPUs modelyard found at start (CUDA device ids): ``index``, ``name``, ``uuid`` and
    ``memory_total`` (bytes); their use over time is on the metrics port."""
    return [
        {"index": d.index, "name": d.name, "uuid": d.uuid, "memory_total": d.total_memory}
        for d in discover_gpus().devices
    ]


def server(core: InferenceServer) -> dict[str, Any]:
    """modelyard's version, and the Triton version whose protocol it speaks (what
    ``/v2`` answers as the server's version)."""
    meta = core.server_metadata()
    return {
        "name": meta["name"],
        "version": modelyard.__version__,
        "protocol_version": meta["version"],
    }


def call_graph(core: InferenceServer) -> dict[str, Any]:
    """The calls observed since the server started: caller -> callee edges, each a model's
    BLS calls (``kind`` "bls") or an ensemble's steps ("ensemble")."""
    return {"since_start": True, "edges": core.call_graph.snapshot()}


def traces(core: InferenceServer, limit: int = DEFAULT_TRACES, model: str = "") -> dict[str, Any]:
    """Whether tracing is on (with the global settings, or how to turn it on) and the last
    ``limit`` finished traces (of ``model``'s requests when given), newest first."""
    on = core.tracer.on
    tracing: dict[str, Any] = {"on": on, "settings": core.get_trace_settings()}
    if not on:
        tracing["help"] = TRACING_HELP
    limit = min(limit, MAX_TRACES)
    found = core.traces.recent(limit, model)
    return {"tracing": tracing, "model": model or None, "limit": limit, "traces": found}
