"""modelyard's HTTP, gRPC and metrics frontends inside the cluster: one async actor per node
that takes traffic, serving the unmodified frontends over :class:`FrontendCore`, a core whose
models are all remote (the mirror of the cluster's table). Inference goes straight from the
frontend to the deployment's replicas through handles (no proxy, no extra HTTP hop); model
control, the repository index and readiness ask the controller; statistics and metrics add up
what every replica counted.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from dataclasses import dataclass, replace
from typing import Any

import ray

from modelyard import logs
from modelyard.core.api import InferenceServer
from modelyard.core.model_version import ModelVersion
from modelyard.core.options import ServerOptions, parse_version
from modelyard.errors import InvalidArgument
from modelyard.frontends.options import FrontendOptions
from modelyard.ray import stats
from modelyard.ray.remote import RemoteScheduler
from modelyard.ray.table import POLL_WAIT_S, Mirror, Table

log = logging.getLogger("modelyard")


class FrontendCore(InferenceServer):
    """The core the frontends of one node talk to (see the module doc)."""

    def __init__(self, options: ServerOptions, controller: Any) -> None:
        # Client shared memory is local to one host: not offered on a cluster.
        super().__init__(replace(options, allow_client_shm=False))
        self.controller = controller

        async def fetch(known: int) -> Table:
            table: Table = await controller.table.remote(known, POLL_WAIT_S)
            return table

        self.mirror = Mirror(self, fetch, RemoteScheduler)

    async def start(self) -> list[str]:
        await self.mirror.start()
        self.began_serving()
        return []

    async def shut_down(self) -> bool:
        await self.mirror.stop()
        return True

    async def check_ready(self) -> bool:
        if not self.is_ready():
            return False
        ready: bool = await self.controller.check_ready.remote()
        return ready

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        index: list[dict[str, Any]] = await self.controller.repository_index.remote(ready_only)
        return index

    async def load_model(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        from_model: bool = False,
    ) -> None:
        error, generation = await self.controller.load_model.remote(name, config, files, from_model)
        await self.mirror.wait_for(generation)
        if error is not None:
            raise error

    async def unload_model(
        self, name: str, unload_dependents: bool = False, from_model: bool = False
    ) -> None:
        error, generation = await self.controller.unload_model.remote(
            name, unload_dependents, from_model
        )
        await self.mirror.wait_for(generation)
        if error is not None:
            raise error

    def deployed(self) -> list[ModelVersion]:
        return [
            mv
            for _, e in sorted(self.registry.entries.items())
            for _, mv in sorted(e.versions.items())
        ]

    async def replicas(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        versions = self.deployed()
        found = await asyncio.gather(*map(stats.version_replicas, versions))
        return {(mv.name, str(mv.version)): r for mv, r in zip(versions, found, strict=True)}

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        if not name:
            versions = self.deployed()
        else:
            entry = self.registry.entries.get(name)
            if entry is None or not entry.versions:
                raise InvalidArgument(f"requested model '{name}' is not available")
            versions = [mv for _, mv in sorted(entry.versions.items())]
            if version:
                v = parse_version(version)
                if v not in entry.versions:
                    raise InvalidArgument(
                        f"requested model version is not available for model '{name}'"
                    )
                versions = [entry.versions[v]]
        rows = await stats.gather_stats(versions)
        return {"model_stats": [s.as_dict() for s, _ in rows]}


@dataclass
class FrontendSpec:
    options: ServerOptions
    frontend: FrontendOptions
    log_config: logs.LogConfig
    http: tuple[str, int] | None  # (address, port) to bind; None: not served
    grpc: tuple[str, int] | None
    metrics: tuple[str, int] | None


class Frontend:
    """One node's frontends (a Ray actor, see the module doc): ``start`` binds and returns
    the node's address and bound ports."""

    def __init__(self, spec: FrontendSpec, controller: Any) -> None:
        logs.configure(spec.log_config)
        logging.getLogger("ray.serve").setLevel(logging.WARNING)  # (see driver.quiet_ray)
        self.spec = spec
        self.core = FrontendCore(spec.options, controller)
        self.servers: list[Any] = []

    async def start(self) -> dict[str, Any]:
        spec, core = self.spec, self.core
        fe = spec.frontend
        await core.start()
        bound: dict[str, Any] = {
            "node": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
        }
        server: Any
        try:
            if spec.grpc is not None:
                from modelyard.frontends.grpc.server import start_grpc_server

                server = await start_grpc_server(
                    core,
                    spec.grpc[0],
                    spec.grpc[1],
                    fe.grpc_restrictions,
                    fe.grpc_channel,
                    fe.grpc_tls,
                    fe.grpc_forward,
                )
                self.servers.append(server)
                bound["grpc"] = server.port
            if spec.http is not None:
                from modelyard.frontends.http.server import start_http_server

                server = await start_http_server(
                    core,
                    spec.http[0],
                    spec.http[1],
                    fe.http_limits,
                    fe.http_restrictions,
                    dashboard=fe.dashboard,
                    tls=fe.http_tls,
                    forward=fe.http_forward,
                    reuse_port=fe.reuse_http_port,
                )
                self.servers.append(server)
                bound["http"] = server.port
            if spec.metrics is not None:
                metrics = await stats.start_metrics_server(core.deployed, *spec.metrics)
                self.servers.append(metrics)
                bound["metrics"] = metrics.port
        except OSError as e:
            await self.stop(0.0)
            bound["error"] = f"{socket.gethostname()}: {e}"
        gc.freeze()  # (Ray's and Serve's modules: no collection need walk them again)
        return bound

    async def stop(self, grace: float = 1.0) -> None:
        for server in self.servers:
            try:
                await server.close(grace)
            except Exception as e:  # shutting down anyway
                log.debug("closing %s: %s", server, e)
        self.servers = []
        await self.core.stop()
