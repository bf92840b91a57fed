"""The metrics settings from ``modelyard serve``'s flags (cli/metrics_flags.py declares and
checks them), resolved as Triton's parser resolves them."""

from __future__ import annotations

import argparse
import logging

from modelyard.serving.metrics_settings import MetricsSettings, apply_settings

log = logging.getLogger("modelyard")


def metrics_settings(args: argparse.Namespace) -> MetricsSettings:
    """The flags as one value; GPU and CPU metrics are off without ``--allow-metrics``, and
    a ``--metrics-config`` name Triton 2.51 does not know is logged and ignored."""
    enabled = getattr(args, "allow_metrics", True)
    settings = MetricsSettings(
        enabled=enabled,
        gpu=enabled and getattr(args, "allow_gpu_metrics", True),
        cpu=enabled and getattr(args, "allow_cpu_metrics", True),
        interval_ms=getattr(args, "metrics_interval_ms", 2000.0),
    )
    return apply_settings(settings, getattr(args, "metrics_config", []), log.warning)


def resolve_metrics_address(args: argparse.Namespace) -> None:
    """``--metrics-address`` defaults to ``--http-address`` (Triton, built with HTTP)."""
    if getattr(args, "metrics_address", None) is None:
        args.metrics_address = getattr(args, "http_address", "0.0.0.0")
