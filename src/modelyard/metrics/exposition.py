"""The server's own metrics in Triton 2.51's exposition (prometheus-cpp's text format).

prometheus-cpp writes a registry's families by type, counters, then gauges, then summaries,
each in the order Triton registers them, and leaves out a family with no series. So:

- counters per model version: ``nv_inference_request_success``, ``_failure`` (per Triton
  ``reason``), ``nv_inference_count``, ``nv_inference_exec_count``; the latency counters
  unless ``--metrics-config counter_latencies=false``; the per-model cache counters for a
  model whose responses are cached; ``nv_energy_consumption`` per GPU with
  ``--allow-gpu-metrics`` (gpu_gauges.py);
- gauges: ``nv_inference_pending_request_count`` per version, the pinned-memory pool (none
  here: 0), the GPU gauges per GPU with ``--allow-gpu-metrics`` (gpu_gauges.py), the CPU
  gauges with ``--allow-cpu-metrics`` (host_gauges.py);
- histograms with ``--metrics-config histogram_latencies=true`` (a later Triton's setting):
  26.01's ``nv_inference_first_response_histogram_ms`` per version (histograms.py);
- summaries with ``--metrics-config summary_latencies=true``: ``count``, ``sum``, then one
  series per quantile (its label last), ``Nan`` while the window is empty.

Names, help texts, label order and numbers (``3``, not ``3.0``; 16 significant digits) are
Triton's. One difference: with ``counter_latencies=false`` Triton 2.51 also stops counting
successes, failures and inferences (its reporter returns before any counter); they count here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from modelyard.metrics.custom import labels_text
from modelyard.metrics.gpu_gauges import ENERGY, GAUGES, GpuReading, GpuSampler
from modelyard.metrics.histograms import first_response_lines
from modelyard.metrics.host_gauges import CpuSampler
from modelyard.serving.metrics_settings import MetricsSettings
from modelyard.serving.stats import FAILURE_REASONS, ModelStats
from modelyard.serving.summaries import LatencySummaries, Summary

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

_CACHED = "(includes cached requests)"
_NOT_CACHED = "(does not include cached requests)"
Counter = tuple[str, str, Callable[[ModelStats], int]]
# (name, help, value from a version's statistics); failures are written per reason.
_ALWAYS: list[Counter] = [
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
]
_LATENCY: list[Counter] = [
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
# Only for models whose responses are cached (Triton creates them with the cache).
_CACHE: list[Counter] = [
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit.count),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda s: s.cache_hit.ns // 1000,
    ),
    (
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        lambda s: s.cache_miss.count,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        lambda s: s.cache_miss.ns // 1000,
    ),
]
# (name, help, the version's summary); help texts as Triton 2.51 registers them.
_SUMMARIES: list[tuple[str, str, Callable[[LatencySummaries], Summary | None]]] = [
    (
        "nv_inference_request_summary_us",
        f"Summary of inference request duration in microseconds {_CACHED}",
        lambda s: s.request,
    ),
    (
        "nv_inference_queue_summary_us",
        f"Summary of inference queuing duration in microseconds {_CACHED}",
        lambda s: s.queue,
    ),
    (
        "nv_inference_compute_input_summary_us",
        f"Cumulative compute input duration in microseconds {_NOT_CACHED}",
        lambda s: s.compute_input,
    ),
    (
        "nv_inference_compute_infer_summary_us",
        f"Cumulative compute inference duration in microseconds {_NOT_CACHED}",
        lambda s: s.compute_infer,
    ),
    (
        "nv_inference_compute_output_summary_us",
        f"Cumulative inference compute output duration in microseconds {_NOT_CACHED}",
        lambda s: s.compute_output,
    ),
    (
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit counts/durations per model, in microseconds.",
        lambda s: s.cache_hit,
    ),
    (
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss counts/durations per model, in microseconds.",
        lambda s: s.cache_miss,
    ),
]


_PINNED = [
    ("nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes"),
    ("nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes"),
]


def render_core(
    core: InferenceServer, cpu: CpuSampler | None, gpu: GpuSampler | None = None
) -> bytes:
    versions = [mv for e in list(core.registry.entries.values()) for mv in e.versions.values()]
    rows = [(mv.stats, mv.scheduler.pending) for mv in versions]
    gpus = gpu.current() if gpu is not None else ()
    return render_stats(rows, cpu, core.options.metrics, gpus)


def render_stats(
    versions: list[tuple[ModelStats, int]],
    cpu: CpuSampler | None,
    settings: MetricsSettings | None = None,
    gpus: Sequence[GpuReading] = (),
) -> bytes:
    """The server's metrics from each version's statistics and pending-request count, and
    the GPUs' last readings."""
    settings = settings or MetricsSettings()
    gpus = gpus if settings.gpu else ()
    stats = [s for s, _ in versions]
    out: list[str] = []
    counters = [*_ALWAYS, *_LATENCY] if settings.counter_latencies else list(_ALWAYS)
    for name, doc, get in counters:
        _family(out, name, doc, "counter", _counter_lines(name, get, stats))
    if settings.counter_latencies:
        cached = [s for s in stats if s.cache_enabled]
        for name, doc, get in _CACHE:
            lines = [f"{name}{_labels(s)} {get(s)}" for s in cached]
            _family(out, name, doc, "counter", lines)
    name, doc = ENERGY
    _family(out, name, doc, "counter", _gpu_lines(name, lambda r: r.energy, gpus))
    name = "nv_inference_pending_request_count"
    pending = [f"{name}{_labels(s)} {n}" for s, n in versions]
    doc = "Instantaneous number of pending requests awaiting execution per-model."
    _family(out, name, doc, "gauge", pending)
    for name, doc in _PINNED:  # (no pinned-memory pool here: 0)
        _gauge(out, name, doc, 0)
    for name, doc, value_of in GAUGES:  # Triton registers the GPU gauges before the CPU ones
        _family(out, name, doc, "gauge", _gpu_lines(name, value_of, gpus))
    if cpu is not None and settings.cpu:
        utilization, total, used = cpu.current()
        _gauge(out, "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", utilization)
        _gauge(out, "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", total)
        _gauge(out, "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", used)
    out += first_response_lines(stats)  # histogram_latencies=true (histograms.py)
    if settings.summary_latencies:
        qs = [q for q, _ in settings.quantiles]
        for name, doc, pick in _SUMMARIES:
            series = [(s, summary) for s in stats if s.summaries and (summary := pick(s.summaries))]
            _family(out, name, doc, "summary", _summary_lines(name, series, qs))
    return ("\n".join(out) + "\n").encode() if out else b""


def _labels(stats: ModelStats, *extra: tuple[str, str]) -> str:
    return labels_text(sorted([*stats.labels(), *extra]))  # (prometheus-cpp sorts them)


def _counter_lines(
    name: str, get: Callable[[ModelStats], int], stats: Iterable[ModelStats]
) -> list[str]:
    if name != "nv_inference_request_failure":
        return [f"{name}{_labels(s)} {get(s)}" for s in stats]
    return [
        f"{name}{_labels(s, ('reason', r))} {s.fail_reasons.get(r, 0)}"
        for s in stats
        for r in FAILURE_REASONS
    ]


def _gpu_lines(
    name: str, pick: Callable[[GpuReading], float | None], gpus: Iterable[GpuReading]
) -> list[str]:
    """One series per GPU that has the value (a value NVML could not give is left out)."""
    return [
        f"{name}{labels_text([('gpu_uuid', r.uuid)])} {prom_number(value)}"
        for r in gpus
        if (value := pick(r)) is not None
    ]


def _summary_lines(
    name: str, series: list[tuple[ModelStats, Summary]], qs: list[float]
) -> list[str]:
    lines: list[str] = []
    for stats, summary in series:
        count, total = summary.count, summary.sum  # (read before the quantiles: never fewer)
        labels = _labels(stats)
        lines.append(f"{name}_count{labels} {count}")
        lines.append(f"{name}_sum{labels} {prom_number(total)}")
        for q, value in zip(qs, summary.quantiles(qs), strict=True):
            # prometheus-cpp adds the quantile after the sorted labels
            quantile = labels[:-1] + f',quantile="{prom_number(q)}"}}'
            lines.append(f"{name}{quantile} {prom_number(value)}")
    return lines


def _gauge(out: list[str], name: str, doc: str, value: float) -> None:
    _family(out, name, doc, "gauge", [f"{name} {prom_number(value)}"])


def _family(out: list[str], name: str, doc: str, kind: str, lines: list[str]) -> None:
    if lines:  # prometheus-cpp writes no family without series
        out += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", *lines]


def prom_number(v: float) -> str:
    """A value as prometheus-cpp writes it: 16 significant digits, ``Nan``, ``+Inf``."""
    if math.isnan(v):
        return "Nan"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return f"{v:.16g}"


__all__ = ["CpuSampler", "prom_number", "render_core", "render_stats"]
