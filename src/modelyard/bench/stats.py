"""One record per step, from every worker's results merged (latencies pooled, never averaged)."""

from __future__ import annotations

from typing import Any

import numpy as np

from modelyard.bench.load import WorkerResult

PERCENTILES = {"p50_us": 50.0, "p90_us": 90.0, "p95_us": 95.0, "p99_us": 99.0, "p99_9_us": 99.9}
LATENCY_FIELDS = ("avg_us", "min_us", *PERCENTILES, "max_us")


def percentile(sorted_ns: np.ndarray[Any, np.dtype[np.int64]], q: float) -> int:
    """perf_analyzer's rule: the sample at rank round(q% of (n - 1)); always an observed value,
    so the percentiles of one step are ordered."""
    return int(sorted_ns[int(q / 100.0 * (len(sorted_ns) - 1) + 0.5)])


def latency_summary(latencies_ns: np.ndarray[Any, np.dtype[np.int64]]) -> dict[str, int | None]:
    """Latencies in whole microseconds; None for every field when nothing was measured."""
    if latencies_ns.size == 0:
        return dict.fromkeys(LATENCY_FIELDS)
    ordered = np.sort(latencies_ns)
    out: dict[str, int | None] = {
        "avg_us": round(float(ordered.mean()) / 1000),
        "min_us": round(int(ordered[0]) / 1000),
    }
    for key, q in PERCENTILES.items():
        out[key] = round(percentile(ordered, q) / 1000)
    out["max_us"] = round(int(ordered[-1]) / 1000)
    return out


def merge_latencies(results: list[WorkerResult]) -> np.ndarray[Any, np.dtype[np.int64]]:
    parts = [np.frombuffer(r.latencies_ns, dtype=np.int64) for r in results]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def step_record(
    base: dict[str, Any],
    results: list[WorkerResult],
    window_s: float,
    batch_size: int,
    request_rate: float | None,
    sequences: bool = False,
) -> dict[str, Any]:
    """``base`` holds the run's fields (model, protocol, ...) and the step's concurrency."""
    requests = sum(r.requests for r in results)
    errors = sum(r.errors for r in results)
    samples: dict[str, int] = {}
    for r in results:
        for message, n in r.error_samples.items():
            samples[message] = samples.get(message, 0) + n
    window = max(window_s, 1e-9)
    record: dict[str, Any] = {
        **base,
        "request_rate": request_rate,
        "duration_s": round(window_s, 6),
        "requests": requests,
        "errors": errors,
        "warmup_errors": sum(r.warmup_errors for r in results),
        "unanswered": sum(r.unanswered for r in results),
        "throughput": requests / window,
        "infer_per_s": requests * batch_size / window,
        "responses": sum(r.responses for r in results),
        "response_throughput": sum(r.responses for r in results) / window,
        "send_rate": sum(r.sent for r in results) / window if request_rate else None,
        "delayed_requests": sum(r.delayed for r in results) if request_rate else None,
        "sequences": sum(r.sequences for r in results) if sequences else None,
        **latency_summary(merge_latencies(results)),
        "client_cpu_us_per_request": (
            round(sum(r.cpu_s for r in results) / (requests + errors) * 1e6)
            if requests + errors
            else None
        ),
        "error_samples": [f"{n}x {message}" for message, n in samples.items()],
    }
    return record


def failed(record: dict[str, Any]) -> bool:
    """A step whose requests failed, or that measured none at all."""
    return bool(
        record["errors"]
        or record["warmup_errors"]
        or record["unanswered"]
        or not record["requests"]
    )
