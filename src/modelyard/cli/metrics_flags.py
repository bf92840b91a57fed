"""`modelyard serve` flags of the metrics endpoint, with Triton 2.51's names, defaults and
``--metrics-config`` syntax (what they mean: serving/metrics_settings.py)."""

from __future__ import annotations

import argparse

from modelyard.cli.values import add_bool_flag
from modelyard.serving.metrics_settings import (
    MetricsConfigError,
    MetricsSettings,
    apply_settings,
    split_setting,
)

_DEFAULTS = MetricsSettings()


def _setting(value: str) -> tuple[str, str]:
    """One ``--metrics-config`` value: Triton's format, and a value its setting can take."""
    try:
        pair = split_setting(value)
        apply_settings(_DEFAULTS, [pair], lambda _: None)  # (an unknown name warns at start)
    except MetricsConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return pair


def _interval(value: str) -> float:
    try:
        ms = float(value)
    except ValueError:
        ms = 0.0
    if not ms > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of ms, got '{value}'")
    return ms


def add_metrics_flags(s: argparse.ArgumentParser) -> None:
    add_bool_flag(s, "--allow-metrics", True, "serve Prometheus metrics")
    add_bool_flag(
        s,
        "--allow-gpu-metrics",
        _DEFAULTS.gpu,
        "GPU utilization, memory, power and energy (nv_gpu_*, nv_energy_consumption) through "
        "NVML (the gpu extra); ignored without --allow-metrics",
    )
    add_bool_flag(
        s,
        "--allow-cpu-metrics",
        _DEFAULTS.cpu,
        "CPU utilization and memory gauges (nv_cpu_*); ignored without --allow-metrics",
    )
    s.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics port")
    s.add_argument(
        "--metrics-address",
        default=None,
        metavar="ADDRESS",
        help="address the metrics server binds (default: --http-address's)",
    )
    s.add_argument(
        "--metrics-interval-ms",
        type=_interval,
        default=_DEFAULTS.interval_ms,
        metavar="MS",
        help="how often the CPU and GPU metrics are collected (Triton polls every half interval)",
    )
    s.add_argument(
        "--metrics-config",
        type=_setting,
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="metrics setting, as Triton 2.51 takes them: counter_latencies=false, "
        "summary_latencies=true, summary_quantiles=0.5:0.05,0.9:0.01,...; repeatable",
    )
