"""The serve flags of ``--ray`` (a model repository on a Ray cluster, src/modelyard/ray/)."""

from __future__ import annotations

import argparse


def _cpus(value: str) -> float:
    try:
        n = float(value)
    except ValueError:
        n = -1.0
    if not n >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of CPUs >= 0, got '{value}'")
    return n


def _seconds(value: str) -> float:
    try:
        n = float(value)
    except ValueError:
        n = 0.0
    if not n > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got '{value}'")
    return n


def add_ray_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ray",
        default="",
        metavar="ADDRESS",
        help="serve on a Ray cluster with Ray Serve (pip install modelyard[ray]): 'auto', "
        "HOST:PORT, ray://HOST:PORT, or 'local' to start a Ray instance here",
    )
    p.add_argument(
        "--ray-replica-cpus",
        type=_cpus,
        default=1.0,
        metavar="CPUS",
        help="with --ray, CPUs each model replica reserves unless its config parameter "
        "ray_num_cpus says otherwise (0: none, replicas then share nodes freely)",
    )
    p.add_argument(
        "--ray-frontend-resource",
        default="",
        metavar="NAME",
        help="with --ray, run the HTTP/gRPC/metrics frontends only on the nodes that have "
        "this custom resource (default: every node)",
    )
    p.add_argument(
        "--ray-deploy-timeout-secs",
        type=_seconds,
        default=300.0,
        metavar="SECS",
        help="with --ray, how long a model version's replicas may take to start (scheduling "
        "included) before its load fails",
    )
