"""The cloud endpoints' settings: the flags (cli/cloud_flags.py) and the environment Triton's
endpoints read when they start, checked before anything binds.

- SageMaker: ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`` (the model ``/invocations`` runs) and
  ``SAGEMAKER_TRITON_PING_MODE`` (``live``: ``/ping`` answers liveness; otherwise readiness).
  (The other ``SAGEMAKER_*`` variables are read by the container's start script, which turns
  them into flags; ``docs/operators/metrics-and-cloud.md`` lists them.)
- Vertex AI: ``AIP_PREDICT_ROUTE`` and ``AIP_HEALTH_ROUTE`` (regular expressions a request's
  whole path must match), both required.
- Triton's port check: two endpoints on one address and port, or with
  ``--sagemaker-safe-port-range`` an endpoint outside it, is an error.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from modelyard.frontends.options import Endpoint

log = logging.getLogger("modelyard")

NO_DEFAULT_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"  # Triton's placeholder
ANY_ADDRESS = "0.0.0.0"  # Triton's cloud endpoints have no address flag


@dataclass(frozen=True)
class SageMakerOptions:
    port: int
    default_model: str = NO_DEFAULT_MODEL
    ping_mode: str = "ready"
    address: str = ANY_ADDRESS


@dataclass(frozen=True)
class VertexOptions:
    port: int
    predict_route: re.Pattern[str]
    health_route: re.Pattern[str]
    default_model: str = ""  # "": the repository's only model, found once the models load
    address: str = ANY_ADDRESS


@dataclass(frozen=True)
class CloudOptions:
    sagemaker: SageMakerOptions | None = None
    vertex: VertexOptions | None = None


@dataclass(frozen=True)
class CloudSettings:
    """The SageMaker and Vertex AI flags (cli/cloud_flags.py declares them and their
    defaults)."""

    allow_sagemaker: bool
    sagemaker_port: int
    sagemaker_safe_port_range: tuple[int, int] | None  # where the other endpoints may listen
    allow_vertex_ai: bool
    vertex_ai_port: int
    vertex_ai_default_model: str  # "": the repository's only model

    @property
    def served(self) -> bool:
        return self.allow_sagemaker or self.allow_vertex_ai


class CloudError(Exception):
    """An endpoint that cannot start; the message is Triton's."""


def cloud_options(settings: CloudSettings, environ: Mapping[str, str] = os.environ) -> CloudOptions:
    sagemaker = vertex = None
    if settings.allow_sagemaker:
        sagemaker = SageMakerOptions(
            port=settings.sagemaker_port,
            default_model=environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", NO_DEFAULT_MODEL),
            ping_mode=environ.get("SAGEMAKER_TRITON_PING_MODE", "ready"),
        )
    if settings.allow_vertex_ai:
        predict = environ.get("AIP_PREDICT_ROUTE", "")
        health = environ.get("AIP_HEALTH_ROUTE", "")
        if not predict:  # (Triton's message names API_, not AIP_)
            raise CloudError("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not health:
            raise CloudError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        vertex = VertexOptions(
            port=settings.vertex_ai_port,
            predict_route=_route("AIP_PREDICT_ROUTE", predict),
            health_route=_route("AIP_HEALTH_ROUTE", health),
            default_model=settings.vertex_ai_default_model,
        )
    return CloudOptions(sagemaker, vertex)


def _route(name: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise CloudError(f"{name} is not a regular expression: {pattern!r} ({e})") from None


def port_collision(
    http: Endpoint, grpc: Endpoint, metrics: Endpoint, cloud: CloudSettings
) -> str | None:
    """Triton's check of the endpoints' ports (its words), or None. Port 0 (any free port)
    collides with nothing."""
    ports: list[tuple[str, str, int, tuple[int, int] | None]] = []
    for name, endpoint in (("HTTP", http), ("GRPC", grpc), ("metrics", metrics)):
        if endpoint.allow:
            ports.append((name, endpoint.address, endpoint.port, None))
    if cloud.allow_sagemaker:
        safe = cloud.sagemaker_safe_port_range
        ports.append(("SageMaker", ANY_ADDRESS, cloud.sagemaker_port, safe))
    if cloud.allow_vertex_ai:
        ports.append(("Vertex AI", ANY_ADDRESS, cloud.vertex_ai_port, None))
    for i, (name, address, port, safe) in enumerate(ports):
        # A service with a safe range checks every other one; others only those after them.
        for j, (other, other_address, other_port, _) in enumerate(ports):
            if j == i or (safe is None and j < i) or address != other_address:
                continue
            if safe is not None and other_port and not safe[0] <= other_port <= safe[1]:
                return (
                    f"The server cannot listen to {other} requests at port {other_port}, "
                    f"allowed port range is [{safe[0]}, {safe[1]}]"
                )
            if port and port == other_port:
                return (
                    f"The server cannot listen to {name} requests and {other} requests at "
                    f"the same address and port {address}:{port}"
                )
    return None


def check_environment(settings: CloudSettings, environ: Mapping[str, str] = os.environ) -> None:
    """Before anything binds, once the log is set up: an endpoint that cannot start with the
    environment it reads is Triton's error line and exit code 1."""
    try:
        cloud_options(settings, environ)
    except CloudError as e:
        log.error("failed to start Vertex AI service: Invalid argument - %s", e)
        raise SystemExit(1) from None
