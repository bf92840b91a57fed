"""The serve flags of ``--ray`` (a model repository on a Ray cluster, src/modelyard/ray/)."""

from __future__ import annotations

import argparse

# CPUs a replica reserves by default: a fraction, so that a laptop's few CPUs hold every
# model of a repository (a whole CPU each left most of them waiting for room).
REPLICA_CPUS = 0.1


def _cpus(value: str) -> float:
    try:
        n = float(value)
    except ValueError:
        n = -1.0
    if not n >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got '{value}'")
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
        "HOST:PORT, ray://HOST:PORT, or 'local' to start a Ray instance here (stopped, and its "
        "temporary folder removed, when the server stops)",
    )
    p.add_argument(
        "--ray-replica-cpus",
        type=_cpus,
        default=REPLICA_CPUS,
        metavar="CPUS",
        help="with --ray, CPUs each model replica reserves unless its config parameter "
        f"ray_num_cpus asks for more or less (default {REPLICA_CPUS:g}: replicas share a "
        f"node's CPUs as Triton's instances share a machine's, {1 / REPLICA_CPUS:g} to a CPU; "
        "0: no limit; 1: Ray Serve's default)",
    )
    p.add_argument(
        "--ray-num-cpus",
        type=_cpus,
        default=None,
        metavar="CPUS",
        help="with --ray local, the CPUs of the Ray instance it starts (default: this machine's)",
    )
    p.add_argument(
        "--ray-num-gpus",
        type=_cpus,
        default=None,
        metavar="GPUS",
        help="with --ray local, the GPUs of the Ray instance it starts (default: this machine's)",
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
        help="with --ray, how long a model version's replicas may take to start (waiting "
        "for room on the cluster included) before its load fails, naming what they need "
        "and what the cluster has",
    )
