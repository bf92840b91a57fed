"""The metrics settings of ``modelyard serve`` (``--allow-*-metrics``, ``--metrics-interval-ms``,
``--metrics-config``), as Triton 2.51's core reads them.

Triton 2.51 knows three ``--metrics-config`` settings (core's ``MetricReporterConfig``):
``counter_latencies`` (``false`` drops the per-model latency counters), ``summary_latencies``
(``true`` adds the ``nv_*_summary_us`` summaries) and ``summary_quantiles``
(``<quantile>:<error>,...``). It takes any other name without a word; so does modelyard, with
a warning. One later name is taken: ``histogram_latencies`` (Triton 24.11 on; ``true`` adds
26.01's ``nv_inference_first_response_histogram_ms``, serving/first_response.py). A value
these cannot mean is refused here, where Triton would ignore it (a summary that silently
stays off helps nobody).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

# Triton's default quantiles: (quantile, allowed error in rank).
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)
# prometheus-cpp's summary window, which Triton 2.51 does not let anyone change.
SUMMARY_MAX_AGE_S = 60.0
SUMMARY_AGE_BUCKETS = 5

_KNOWN_LATER: dict[str, str] = {}


class MetricsConfigError(ValueError):
    """A ``--metrics-config`` value that cannot be used; the message is for the operator."""


@dataclass(frozen=True)
class MetricsSettings:
    """What the metrics endpoint shows and how often the server-wide gauges update."""

    enabled: bool = True  # --allow-metrics
    gpu: bool = True  # --allow-gpu-metrics (off without --allow-metrics)
    cpu: bool = True  # --allow-cpu-metrics (off without --allow-metrics)
    interval_ms: float = 2000.0  # --metrics-interval-ms
    counter_latencies: bool = True  # --metrics-config counter_latencies=
    summary_latencies: bool = False  # --metrics-config summary_latencies=
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES  # summary_quantiles=
    histogram_latencies: bool = False  # --metrics-config histogram_latencies= (Triton 24.11+)

    @property
    def summaries(self) -> bool:
        """Whether per-model latency summaries are kept (they cost each request a little)."""
        return self.enabled and self.summary_latencies

    @property
    def histograms(self) -> bool:
        """Whether each version keeps its time-to-first-response histogram."""
        return self.enabled and self.histogram_latencies


def split_setting(arg: str) -> tuple[str, str]:
    """One ``--metrics-config`` value, ``<setting>=<value>``, checked as Triton's parser
    checks it (same message)."""
    name, sep, value = arg.partition("=")
    if not sep or "," in name or not name or not value:
        raise MetricsConfigError(f"--metrics-config option format is <setting>=<value>. Got {arg}")
    return name, value


def apply_settings(
    settings: MetricsSettings,
    pairs: Iterable[tuple[str, str]],
    warn: Callable[[str], None],
) -> MetricsSettings:
    """``settings`` with the ``--metrics-config`` pairs applied in order (a later one wins);
    ``warn`` gets one line per setting Triton 2.51 would ignore."""
    for name, value in pairs:
        if name == "counter_latencies":
            settings = replace(settings, counter_latencies=_bool(name, value))
        elif name == "summary_latencies":
            settings = replace(settings, summary_latencies=_bool(name, value))
        elif name == "histogram_latencies":
            settings = replace(settings, histogram_latencies=_bool(name, value))
        elif name == "summary_quantiles":
            settings = replace(settings, quantiles=parse_quantiles(value))
        else:
            why = _KNOWN_LATER.get(name, "not a setting Triton 2.51 knows")
            warn(f"--metrics-config {name}={value} is ignored: {why}")
    return settings


def _bool(name: str, value: str) -> bool:
    # Triton compares the exact strings "true" and "false".
    if value in ("true", "false"):
        return value == "true"
    raise MetricsConfigError(f"{name} must be true or false, got '{value}'")


def parse_quantiles(text: str) -> tuple[tuple[float, float], ...]:
    """``0.5:0.05,0.9:0.01``: quantiles and their allowed errors, each in [0, 1]."""
    out: list[tuple[float, float]] = []
    for pair in text.split(","):
        quantile, sep, error = pair.partition(":")
        if not sep:
            raise MetricsConfigError(
                f"summary_quantiles: no ':' in [{pair}]; expected <quantile>:<error>,..."
            )
        try:
            q, e = float(quantile), float(error)
        except ValueError:
            raise MetricsConfigError(
                f"summary_quantiles: [{pair}] is not <quantile>:<error> (two numbers)"
            ) from None
        if not (0.0 <= q <= 1.0 and 0.0 <= e <= 1.0):
            raise MetricsConfigError(
                f"summary_quantiles: [{pair}]: quantile and error must be within [0, 1]"
            )
        out.append((q, e))
    return tuple(out)


__all__ = [
    "DEFAULT_QUANTILES",
    "SUMMARY_AGE_BUCKETS",
    "SUMMARY_MAX_AGE_S",
    "MetricsConfigError",
    "MetricsSettings",
    "apply_settings",
    "parse_quantiles",
    "split_setting",
]
