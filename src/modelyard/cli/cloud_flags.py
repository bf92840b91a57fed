"""`modelyard serve` flags of the SageMaker and Vertex AI endpoints, with Triton 2.51's names
and defaults, and the environment Triton's parser reads: ``AIP_MODE=PREDICTION`` turns Vertex
AI on and HTTP and gRPC off by default, ``AIP_HTTP_PORT`` is the Vertex AI port's default and
``AIP_STORAGE_URI`` the model repository when none is given. (What the endpoints read at
start-up, ``SAGEMAKER_TRITON_*`` and the ``AIP_*_ROUTE`` variables: frontends/cloud/options.py.)

:func:`add_cloud_flags` must come after ``--allow-http`` and ``--allow-grpc`` (it changes
their defaults under ``AIP_MODE=PREDICTION``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from modelyard.cli.values import add_bool_flag


def _port_range(value: str) -> tuple[int, int]:
    first, sep, second = value.partition("-")
    try:
        if not sep:
            raise ValueError
        return int(first), int(second)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected <first>-<second> (two port numbers), got '{value}'"
        ) from None


def add_cloud_flags(s: argparse.ArgumentParser, environ: Mapping[str, str] = os.environ) -> None:
    add_bool_flag(s, "--allow-sagemaker", False, "serve SageMaker's /ping and /invocations")
    s.add_argument(
        "--sagemaker-port", type=int, default=8080, metavar="PORT", help="the SageMaker port"
    )
    s.add_argument(
        "--sagemaker-safe-port-range",
        type=_port_range,
        default=None,
        metavar="FIRST-LAST",
        help="the ports the other endpoints may use (on SageMaker's address); another is "
        "an error at start",
    )
    s.add_argument(
        "--sagemaker-thread-count",
        type=int,
        default=8,
        metavar="N",
        help="accepted for Triton's command lines; no effect (one event loop serves)",
    )
    prediction = environ.get("AIP_MODE", "") == "PREDICTION"
    add_bool_flag(
        s,
        "--allow-vertex-ai",
        prediction,
        "serve Vertex AI's predict and health routes (AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE); "
        "on by default when AIP_MODE=PREDICTION",
    )
    s.add_argument(
        "--vertex-ai-port",
        type=int,
        # (a string default goes through type=: a bad AIP_HTTP_PORT is this flag's error)
        default=environ.get("AIP_HTTP_PORT", "8080"),
        metavar="PORT",
        help="the Vertex AI port (default: AIP_HTTP_PORT, else 8080)",
    )
    s.add_argument(
        "--vertex-ai-thread-count",
        type=int,
        default=8,
        metavar="N",
        help="accepted for Triton's command lines; no effect (one event loop serves)",
    )
    s.add_argument(
        "--vertex-ai-default-model",
        default="",
        metavar="NAME",
        help="the model a prediction without the X-Vertex-Ai-Triton-Redirect header runs "
        "(default: the repository's only model)",
    )
    if prediction:  # Triton's defaults on a Vertex AI prediction node
        s.set_defaults(allow_http=False, allow_grpc=False)


def default_repositories(given: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """The repositories to serve: those given, else ``AIP_STORAGE_URI``'s, as Triton takes
    it."""
    uri = environ.get("AIP_STORAGE_URI", "")
    return given if given or not uri else [uri]
