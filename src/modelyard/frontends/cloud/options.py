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

import argparse
import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

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


class CloudError(Exception):
    """An endpoint that cannot start; the message is Triton's."""


def cloud_options(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> CloudOptions:
    sagemaker = vertex = None
    if getattr(args, "allow_sagemaker", False):
        sagemaker = SageMakerOptions(
            port=args.sagemaker_port,
            default_model=environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", NO_DEFAULT_MODEL),
            ping_mode=environ.get("SAGEMAKER_TRITON_PING_MODE", "ready"),
        )
    if getattr(args, "allow_vertex_ai", False):
        predict = environ.get("AIP_PREDICT_ROUTE", "")
        health = environ.get("AIP_HEALTH_ROUTE", "")
        if not predict:  # (Triton's message names API_, not AIP_)
            raise CloudError("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not health:
            raise CloudError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        vertex = VertexOptions(
            port=args.vertex_ai_port,
            predict_route=_route("AIP_PREDICT_ROUTE", predict),
            health_route=_route("AIP_HEALTH_ROUTE", health),
            default_model=args.vertex_ai_default_model or "",
        )
    return CloudOptions(sagemaker, vertex)


def _route(name: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise CloudError(f"{name} is not a regular expression: {pattern!r} ({e})") from None


def port_collision(args: argparse.Namespace) -> str | None:
    """Triton's check of the endpoints' ports (its words), or None. Port 0 (any free port)
    collides with nothing."""
    ports: list[tuple[str, str, int, tuple[int, int] | None]] = []
    for name, flag in (("HTTP", "http"), ("GRPC", "grpc"), ("metrics", "metrics")):
        if getattr(args, f"allow_{flag}", False):
            ports.append(
                (name, getattr(args, f"{flag}_address"), getattr(args, f"{flag}_port"), None)
            )
    if getattr(args, "allow_sagemaker", False):
        safe = getattr(args, "sagemaker_safe_port_range", None)
        ports.append(("SageMaker", ANY_ADDRESS, args.sagemaker_port, safe))
    if getattr(args, "allow_vertex_ai", False):
        ports.append(("Vertex AI", ANY_ADDRESS, args.vertex_ai_port, None))
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


def check_cloud_flags(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> None:
    """Before anything binds: a port clash is one line and exit code 2 (a bad command line);
    an endpoint that cannot start is Triton's error line and exit code 1."""
    problem = port_collision(args)
    cloud = getattr(args, "allow_sagemaker", False) or getattr(args, "allow_vertex_ai", False)
    if problem is None and cloud and getattr(args, "ray", ""):
        problem = "--allow-sagemaker and --allow-vertex-ai are not served with --ray yet"
    if problem is not None:
        command = getattr(args, "command", None) or "serve"
        sys.stderr.write(f"modelyard {command}: error: {problem}\n")
        raise SystemExit(2)
    try:
        cloud_options(args, environ)
    except CloudError as e:
        log.error("failed to start Vertex AI service: Invalid argument - %s", e)
        raise SystemExit(1) from None
