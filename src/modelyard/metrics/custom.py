"""Custom metrics from models (``pb_utils.MetricFamily``) on the metrics endpoint.

Triton keeps one metric registry for the whole server. Here each worker process holds the
families its model created; a scrape asks every worker for its snapshot (one message each,
bounded by a timeout) and adds the server's own (in-process models). The same family and
labels seen in several processes are merged as one registry would hold them: counters and
histograms add up, a gauge shows the value set last. The text follows Triton's exposition
(prometheus-cpp): ``# HELP``/``# TYPE`` lines, labels sorted by name, numbers without a
trailing ``.0``, histogram ``_count``, ``_sum``, then ``_bucket`` lines.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

Snapshot = list[dict[str, Any]]


async def gather(core: InferenceServer, timeout: float = 2.0) -> Snapshot:
    """Every custom metric family of the server and its workers, merged."""
    from triton_python_backend_utils._metrics import snapshot

    pulls = [
        pull(timeout)
        for entry in list(core.registry.entries.values())
        for mv in list(entry.versions.values())
        for instance in mv.instances
        if (pull := getattr(instance, "metrics_snapshot", None)) is not None
    ]
    results = await asyncio.gather(*pulls, return_exceptions=True)
    snapshots = [snapshot(), *(r for r in results if isinstance(r, list))]
    return merge(snapshots)


def merge(snapshots: list[Snapshot]) -> Snapshot:
    families: dict[str, dict[str, Any]] = {}
    for snap in snapshots:
        for fam in snap:
            into = families.get(fam["name"])
            if into is None:
                into = families[fam["name"]] = {**fam, "series": {}}
            elif into["kind"] != fam["kind"]:
                continue  # a clash the worker could not see; the first kind stays
            for s in fam["series"]:
                key = tuple(sorted(s["labels"].items()))
                have = into["series"].get(key)
                into["series"][key] = dict(s) if have is None else _combine(fam["kind"], have, s)
    return [{**f, "series": list(f["series"].values())} for f in families.values()]


def _combine(kind: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    if kind == "counter":
        return {**a, "value": a["value"] + b["value"]}
    if kind == "gauge":
        return dict(b) if b.get("stamp", 0.0) >= a.get("stamp", 0.0) else a
    if a["buckets"] != b["buckets"]:
        return a
    counts = [x + y for x, y in zip(a["counts"], b["counts"], strict=True)]
    return {**a, "counts": counts, "sum": a["sum"] + b["sum"], "count": a["count"] + b["count"]}


def render(families: Snapshot) -> bytes:
    lines: list[str] = []
    for fam in families:
        name, kind = fam["name"], fam["kind"]
        lines.append(f"# HELP {name} {_escape_help(fam['description'])}")
        lines.append(f"# TYPE {name} {kind}")
        for s in fam["series"]:
            labels = sorted(s["labels"].items())
            if kind != "histogram":
                lines.append(f"{name}{labels_text(labels)} {number(s['value'])}")
                continue
            lines.append(f"{name}_count{labels_text(labels)} {s['count']}")
            lines.append(f"{name}_sum{labels_text(labels)} {number(s['sum'])}")
            cumulative = 0
            bounds = [*s["buckets"], math.inf]
            for bound, n in zip(bounds, s["counts"], strict=True):
                cumulative += n
                le = [*labels, ("le", number(bound))]
                lines.append(f"{name}_bucket{labels_text(le)} {cumulative}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


def number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def labels_text(pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in pairs)
    return "{" + inner + "}"


def _escape_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")
