"""Per model-version inference statistics, in Triton's statistics-extension shape."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from modelyard.serving.first_response import FirstResponseHistogram
from modelyard.serving.live import LiveWindow
from modelyard.serving.summaries import LatencySummaries

# Triton's failure reasons, in the order its metrics list them.
FAILURE_REASONS = ("OTHER", "BACKEND", "CANCELED", "REJECTED")


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, n: int = 1) -> None:
        self.count += n
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStat:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    name: str
    version: str
    namespace: str = ""  # --model-namespacing: the repository (the metrics' namespace label)
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStat] = field(default_factory=dict)
    # Failed requests by Triton's reason (the metrics' ``reason`` label).
    fail_reasons: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    # The last minute, second by second, for the dashboard (not part of Triton's shape).
    live: LiveWindow = field(default_factory=LiveWindow)
    # The metrics' latency summaries (--metrics-config summary_latencies=true), else None.
    summaries: LatencySummaries | None = None
    cache_enabled: bool = False  # the model's responses are cached (its metrics differ)
    # Time to first response: the metrics' histogram (--metrics-config histogram_latencies=true)
    # and the live window's (decoupled models, for the dashboard). RequestContext.send records
    # it when ``first_responses`` is on, so other versions pay one check per request.
    first_response: FirstResponseHistogram | None = None
    first_responses: bool = False

    def labels(self) -> list[tuple[str, str]]:
        """The version's metric labels, sorted (prometheus-cpp's order); with namespacing Triton
        adds the model's namespace."""
        if self.namespace:
            return [("model", self.name), ("namespace", self.namespace), ("version", self.version)]
        return [("model", self.name), ("version", self.version)]

    def track_first_responses(self, histogram: FirstResponseHistogram | None, live: bool) -> None:
        self.first_response = histogram
        self.live.first_responses = live
        self.first_responses = histogram is not None or live

    def record_first_response(self, t_received: int, t_first: int) -> None:
        if self.first_response is not None:
            self.first_response.observe_ns(t_first - t_received)
        if self.live.first_responses:
            self.live.first_response(t_received, t_first)

    def record_success(
        self, t_received: int, t_queued: int, t_start: int, t_end: int, batch: int
    ) -> None:
        self.last_inference_ms = int(time.time() * 1000)
        self.inference_count += batch
        self.success.add(t_end - t_received)
        if t_start and t_queued:
            self.queue.add(max(0, t_start - t_queued))
            self.compute_infer.add(t_end - t_start)
            self.compute_input.add(0)
            self.compute_output.add(0)
        self.live.success(t_received, t_queued, t_start, t_end)
        if self.summaries is not None:
            self.summaries.success(t_received, t_queued, t_start, t_end)

    def record_execution(self, batch_size: int, infer_ns: int) -> None:
        """One model execution of ``batch_size`` (recorded by the scheduler, per batch)."""
        self.execution_count += 1
        stat = self.batches.get(batch_size)
        if stat is None:
            stat = self.batches[batch_size] = BatchStat()
        stat.compute_infer.add(infer_ns)
        stat.compute_input.add(0)
        stat.compute_output.add(0)
        self.live.execution(batch_size, time.monotonic_ns())

    def record_failure(self, t_received: int, t_end: int, reason: str = "BACKEND") -> None:
        self.last_inference_ms = int(time.time() * 1000)
        self.fail.add(t_end - t_received)
        self.fail_reasons[reason] = self.fail_reasons.get(reason, 0) + 1
        self.live.failure(t_end)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_dict(),
                "fail": self.fail.as_dict(),
                "queue": self.queue.as_dict(),
                "compute_input": self.compute_input.as_dict(),
                "compute_infer": self.compute_infer.as_dict(),
                "compute_output": self.compute_output.as_dict(),
                "cache_hit": self.cache_hit.as_dict(),
                "cache_miss": self.cache_miss.as_dict(),
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.as_dict(),
                    "compute_infer": b.compute_infer.as_dict(),
                    "compute_output": b.compute_output.as_dict(),
                }
                for size, b in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }
