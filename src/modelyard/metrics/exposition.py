"""The server's own metrics in Triton 2.51's exposition (prometheus-cpp's text format).

Per model and version: the ``nv_inference_*`` counters (failures split by Triton's
``reason`` label) and the pending-request gauge; then the server-wide gauges a CPU-only
Triton exports (pinned memory pool, CPU utilization and memory). Names, help texts, label
order and number formatting (``3``, not ``3.0``) are Triton's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from modelyard.metrics.custom import labels_text, number
from modelyard.serving.stats import FAILURE_REASONS, ModelStats

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

_CACHED = "(includes cached requests)"
_NOT_CACHED = "(does not include cached requests)"
# (name, help, value from a version's statistics); failures are written per reason.
_COUNTERS: list[tuple[str, str, Callable[[ModelStats], int]]] = [
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda s: s.success.count,
    ),
    (
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        lambda s: s.fail.count,
    ),
    (
        "nv_inference_count",
        f"Number of inferences performed {_NOT_CACHED}",
        lambda s: s.inference_count,
    ),
    (
        "nv_inference_exec_count",
        f"Number of model executions performed {_NOT_CACHED}",
        lambda s: s.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        f"Cumulative inference request duration in microseconds {_CACHED}",
        lambda s: s.success.ns // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        f"Cumulative inference queuing duration in microseconds {_CACHED}",
        lambda s: s.queue.ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        f"Cumulative compute input duration in microseconds {_NOT_CACHED}",
        lambda s: s.compute_input.ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        f"Cumulative compute inference duration in microseconds {_NOT_CACHED}",
        lambda s: s.compute_infer.ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        f"Cumulative inference compute output duration in microseconds {_NOT_CACHED}",
        lambda s: s.compute_output.ns // 1000,
    ),
]


class CpuSampler:
    """CPU utilization between two scrapes (Triton samples it periodically), from /proc/stat."""

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None

    def utilization(self) -> float:
        now = _cpu_times()
        last, self._last = self._last, now
        if now is None or last is None or now[0] <= last[0]:
            return 0.0
        return max(0.0, min(1.0, (now[1] - last[1]) / (now[0] - last[0])))


def _cpu_times() -> tuple[int, int] | None:
    """(total, busy) jiffies of all CPUs."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields), sum(fields) - idle


def _memory() -> tuple[int, int]:
    """(total, used) bytes of RAM."""
    info: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    total = info.get("MemTotal", 0)
    return total, total - info.get("MemAvailable", total)


def render_core(core: InferenceServer, cpu: CpuSampler) -> bytes:
    versions = [mv for e in list(core.registry.entries.values()) for mv in e.versions.values()]
    return render_stats([(mv.stats, mv.scheduler.pending) for mv in versions], cpu)


def render_stats(versions: list[tuple[ModelStats, int]], cpu: CpuSampler) -> bytes:
    """The server's metrics from each version's statistics and pending-request count."""
    out: list[str] = []
    for name, doc, get in _COUNTERS:
        out += [f"# HELP {name} {doc}", f"# TYPE {name} counter"]
        for stats, _ in versions:
            model, version = ("model", stats.name), ("version", stats.version)
            if name == "nv_inference_request_failure":
                for reason in FAILURE_REASONS:
                    n = stats.fail_reasons.get(reason, 0)
                    out.append(f"{name}{labels_text([model, ('reason', reason), version])} {n}")
            else:
                out.append(f"{name}{labels_text([model, version])} {get(stats)}")
    name = "nv_inference_pending_request_count"
    out += [
        f"# HELP {name} Instantaneous number of pending requests awaiting execution per-model.",
        f"# TYPE {name} gauge",
    ]
    for stats, pending in versions:
        labels = labels_text([("model", stats.name), ("version", stats.version)])
        out.append(f"{name}{labels} {pending}")
    total, used = _memory()
    for name, doc, value in _server_gauges(cpu.utilization(), total, used):
        out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name} {number(value)}"]
    return ("\n".join(out) + "\n").encode()


def _server_gauges(cpu: float, total: int, used: int) -> list[tuple[str, str, Any]]:
    return [
        ("nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes", 0),
        ("nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes", 0),
        ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", cpu),
        ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", total),
        ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", used),
    ]


__all__ = ["CpuSampler", "render_core", "render_stats"]
