"""The Ray tests' cluster: two Ray nodes on this machine (``ray.cluster_utils.Cluster``), the
head with the custom resource ``node_a``, the second with ``node_b``, shared by every Ray test
of the session; the servers under test are ``modelyard serve --ray <its address>`` processes,
drivers of their own. It starts with the first test that uses it and stops after the last test
of that module (the Ray tests run one after another, in one xdist unit: tests/conftest.py), so
no other Ray instance and no other test carries an idle cluster.

The test modules skip, with the reason, where ``ray[serve]`` is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_until
from tests.serverproc import ServerProcess, start_server

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
# A guard for a loaded 2-core machine, not a speed limit: test_cluster's server deploys 12
# models on two Ray nodes at start (220 s seen at load 6-10, over 300 s at load 18).
START_TIMEOUT_S = 540.0
OBJECT_STORE = 256 << 20  # per node (/dev/shm, used only as it fills)
_FRONTEND = re.compile(
    r"Started (HTTPService|GRPCInferenceService|Metrics Service) at ([\d.]+):(\d+) \(Ray node (\w+)\)"
)
_KEYS = {"HTTPService": "http", "GRPCInferenceService": "grpc", "Metrics Service": "metrics"}


@dataclass
class RayCluster:
    """The two-node cluster, started on first use."""

    cluster: Any = None
    tmp: str = ""
    raylets: dict[str, str] = field(default_factory=dict)  # node resource -> raylet pid
    node_ids: dict[str, str] = field(default_factory=dict)  # Ray node id -> node resource

    @property
    def address(self) -> str:
        if self.cluster is None:
            self.start()
        return str(self.cluster.address)

    def start(self) -> None:
        # A short folder of our own: Ray's socket paths must stay short, and the default
        # /tmp/ray is shared with whatever else runs Ray here.
        self.tmp = tempfile.mkdtemp(prefix="myr", dir="/tmp")
        os.environ["RAY_TMPDIR"] = self.tmp  # (Cluster(temp_dir=...) breaks; see FINDINGS)
        os.environ.pop("GRPC_EXPERIMENTS", None)  # Ray's gRPC does not know grpcio's
        from ray.cluster_utils import Cluster

        common: dict[str, Any] = {"num_cpus": 2, "object_store_memory": OBJECT_STORE}
        cluster = Cluster(
            initialize_head=True,
            head_node_args={**common, "resources": {"node_a": 100}, "include_dashboard": False},
        )
        self.cluster = cluster
        second = cluster.add_node(**common, resources={"node_b": 100})
        for node, name in ((cluster.head_node, "node_a"), (second, "node_b")):
            self.raylets[name] = str(node.all_processes["raylet"][0].process.pid)  # type: ignore[union-attr]
            self.node_ids[node.node_id] = name  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = ""

    def node_of(self, raylet_pid: str) -> str:
        """node_a or node_b: the node whose raylet has this process id."""
        return next(n for n, pid in self.raylets.items() if pid == raylet_pid)


_CLUSTER = RayCluster()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    try:
        yield _CLUSTER
    finally:
        _CLUSTER.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop the cluster after the last test of the module that started it (once its
    fixtures, the servers, are torn down): the next Ray tests start Ray instances of their
    own, and two at once on 2 cores slow both past their bounds."""
    yield
    if nextitem is None or nextitem.path != item.path:
        _CLUSTER.stop()


@dataclass
class RayServer:
    """A ``modelyard serve --ray`` process and its frontends, one per node."""

    process: ServerProcess
    frontends: dict[str, dict[str, str]]  # node id -> {"http": url, "grpc": url, "metrics": url}

    def urls(self, key: str) -> list[str]:
        return [f[key] for f in self.frontends.values()]


def serve_on_cluster(cluster: RayCluster, repo: Path | list[Path], *args: str) -> RayServer:
    """Start ``modelyard serve --ray`` on ``cluster`` and wait until a frontend runs on each
    node; the caller stops ``.process``."""
    process = start_server(
        repo, "--ray", cluster.address, "--ray-replica-cpus", "0", *args, timeout=START_TIMEOUT_S
    )
    frontends: dict[str, dict[str, str]] = {}

    def both_nodes() -> bool:
        for line in process.log:
            m = _FRONTEND.search(line)
            if m:
                frontends.setdefault(m.group(4), {})[_KEYS[m.group(1)]] = (
                    f"{m.group(2)}:{m.group(3)}"
                )
        return len(frontends) == 2 and all(len(f) == 3 for f in frontends.values())

    try:
        wait_until(both_nodes, timeout=60.0, what="a frontend on each node")
    except BaseException:
        process.stop()
        raise
    return RayServer(process, frontends)
