"""The metrics settings from ``modelyard serve``'s flags (cli/metrics_flags.py declares and
checks them; ``modelyard.server_config`` reads them), resolved as Triton's parser resolves
them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from modelyard.serving.metrics_settings import MetricsSettings, apply_settings


def metrics_settings(
    enabled: bool,
    gpu: bool,
    cpu: bool,
    interval_ms: float,
    config: Iterable[tuple[str, str]],
    warn: Callable[[str], None],
) -> MetricsSettings:
    """The flags as one value; GPU and CPU metrics are off without ``--allow-metrics``, and
    ``warn`` gets a line for each ``--metrics-config`` name Triton 2.51 does not know (it is
    ignored)."""
    settings = MetricsSettings(
        enabled=enabled, gpu=enabled and gpu, cpu=enabled and cpu, interval_ms=interval_ms
    )
    return apply_settings(settings, config, warn)


def metrics_address(given: str | None, http_address: str) -> str:
    """``--metrics-address`` defaults to ``--http-address`` (Triton, built with HTTP)."""
    return http_address if given is None else given
