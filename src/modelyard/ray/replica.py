"""A replica of one model version's Serve deployment: modelyard's own core with that one
version loaded (its backend, its scheduler: dynamic batching per replica), and a mirror of
every other model of the cluster, so that the model's BLS calls reach their targets'
deployments. The core's host is :class:`RayHost`: the backends are unchanged.

Serve calls ``infer`` (one response) or ``infer_stream`` (a decoupled model's responses, as
they come); callers that know the replica's ``endpoint`` send requests straight to its port
instead (``ray/direct.py``); ``stats``, ``metrics``, ``where`` and ``endpoint`` are
broadcast to every replica.
A model that fails to load does not fail the replica (Serve would retry it for minutes): the
replica reports the error through ``describe`` and the controller deletes the deployment.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard import logs
from modelyard.backends.python.protocol import inbox
from modelyard.core.api import InferenceServer
from modelyard.core.host import CoreHost
from modelyard.core.model_version import ModelVersion
from modelyard.core.options import ServerOptions
from modelyard.core.placement import LocalPlacement
from modelyard.errors import ModelyardError
from modelyard.metrics import custom
from modelyard.ray.direct import DirectServer
from modelyard.ray.remote import RemoteScheduler
from modelyard.ray.table import POLL_WAIT_S, Mirror, Table
from modelyard.serving.stats import ModelStats
from modelyard.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from modelyard.core.parts import Loads

log = logging.getLogger("modelyard")


@dataclass
class ReplicaSpec:
    """What a replica is told by the controller that deploys it."""

    name: str
    version: int
    config_json: str  # the config the replica loads (one instance, this version only)
    shown: bytes  # a ModelConfig with the instance groups and version policy to show
    options: ServerOptions
    log_config: logs.LogConfig
    controller: Any  # the controller's actor handle
    files: dict[str, bytes] | None = None  # the load request's file: overrides
    extra: dict[str, Any] = field(default_factory=dict)


class OwnModel:
    """A replica's ``VersionPlacement``: its own model starts here (the core's pipeline), any
    other runs elsewhere (ensembles find their steps in the mirror); keeps why the load
    failed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.local = LocalPlacement()
        self.load_error: BaseException | None = None

    async def start(
        self,
        core: Loads,
        name: str,
        location: str,
        override: Any | None,
        files: dict[str, bytes] | None,
    ) -> list[ModelVersion]:
        if name != self.name:
            raise ModelyardError(f"model '{name}' is not deployed on the Ray cluster")
        try:
            return await self.local.start(core, name, location, override, files)
        except BaseException as e:  # the core words it for the client; the controller re-raises
            self.load_error = e
            raise


class RayHost(CoreHost):
    """The :class:`~modelyard.serving.host.ModelHost` of a model in a replica: requests go
    through the replica's core (its own model, or the mirrored deployments of the others);
    model control goes to the cluster's controller (deploy, delete); readiness is the
    cluster's."""

    def __init__(self, core: InferenceServer, controller: Any) -> None:
        super().__init__(core)
        self.controller = controller
        self.mirror: Mirror | None = None
        self.execute_on_loop = True  # the replica's loop serves its one model

    async def load_model(
        self, name: str, config: str | None, files: dict[str, bytes] | None
    ) -> None:
        error, generation = await self.controller.load_model.remote(name, config, files, True)
        await self._caught_up(generation)
        if error is not None:
            raise error

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        error, generation = await self.controller.unload_model.remote(name, unload_dependents, True)
        await self._caught_up(generation)
        if error is not None:
            raise error

    async def _caught_up(self, generation: int) -> None:
        if self.mirror is not None:
            await self.mirror.wait_for(generation)


class ModelReplica:
    """The class of every model deployment (see the module doc)."""

    # Serve awaits an async constructor on the replica's event loop, where the core runs.
    async def __init__(self, spec: ReplicaSpec) -> None:  # type: ignore[misc]
        logs.configure(spec.log_config)
        self.spec = spec
        self.own = OwnModel(spec.name)
        self.core = core = InferenceServer(spec.options, self.own)
        host = RayHost(core, spec.controller)
        core.host = host  # before any load: the backends take the host at load time

        async def fetch(known: int) -> Table:
            table: Table = await spec.controller.table.remote(known, POLL_WAIT_S)
            return table

        self.mirror = host.mirror = Mirror(
            core, fetch, RemoteScheduler, local=(spec.name, spec.version)
        )
        await self.mirror.start()
        self.version: ModelVersion | None = None
        try:
            await core.load_model(spec.name, spec.config_json, spec.files)
            self.version = core.get_version(spec.name, str(spec.version))
        except ModelyardError:
            pass  # reported by describe()
        except Exception:
            log.exception("loading '%s' version %d failed", spec.name, spec.version)
        self.node = ray.get_runtime_context().get_node_id()
        self.ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.direct = DirectServer(core)
        if self.version is not None:
            await self.direct.start(self.ip)
        core.began_serving()
        gc.freeze()  # (Ray's and Serve's modules: no collection need walk them again)

    async def describe(self) -> tuple[bytes, BaseException | None]:
        """The version's config as the cluster shows it, or why it failed to load."""
        if self.version is None:
            error = self.own.load_error or ModelyardError(
                f"failed to load '{self.spec.name}' version {self.spec.version}"
            )
            return b"", error
        cfg = ModelConfig()
        cfg.CopyFrom(self.version.config)
        shown = ModelConfig.FromString(self.spec.shown)
        del cfg.instance_group[:]
        cfg.instance_group.extend(shown.instance_group)
        cfg.version_policy.CopyFrom(shown.version_policy)
        return cfg.SerializeToString(), None

    async def infer(self, request: InferRequest) -> InferResponse:
        fut: asyncio.Future[InferResponse] = asyncio.get_running_loop().create_future()

        def on_response(resp: InferResponse) -> None:
            if resp.final and not fut.done():
                fut.set_result(resp)

        try:
            ctx = self.core.submit(request, on_response)
        except ModelyardError as e:
            return _error(request, e)
        try:
            return await fut
        except asyncio.CancelledError:  # the caller cancelled: the model sees is_cancelled()
            ctx.cancel()
            raise

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        queue: asyncio.Queue[InferResponse] = asyncio.Queue()
        try:
            ctx = self.core.submit(request, queue.put_nowait)
        except ModelyardError as e:
            yield _error(request, e)
            return
        try:
            while True:
                resp = await queue.get()
                yield resp
                if resp.final:
                    return
        finally:
            if not ctx.done:
                ctx.cancel()

    async def stats(self) -> tuple[ModelStats, int]:
        """This replica's statistics of its version, and its queued requests."""
        mv = self.version
        if mv is None:
            return ModelStats(self.spec.name, str(self.spec.version)), 0
        return mv.stats, mv.scheduler.pending

    async def where(self) -> dict[str, Any]:
        """Where this replica runs (the dashboard's view of the cluster): its Ray node (id and
        address), its process, its queued requests, those it took on the direct path."""
        pending = self.version.scheduler.pending if self.version is not None else 0
        return {
            "node": self.node,
            "ip": self.ip,
            "pid": os.getpid(),
            "queued": pending,
            "direct": self.direct.served,
        }

    async def endpoint(self) -> dict[str, Any] | None:
        """Where this replica takes requests directly (ray/direct.py): for callers only (the
        token is not for the dashboard). None until it serves."""
        if not self.direct.port:
            return None
        return {"node": self.node, "ip": self.ip, "port": self.direct.port,
                "token": self.direct.token}  # fmt: skip

    async def metrics(self) -> custom.Snapshot:
        """The custom metric families (pb_utils.MetricFamily) of this replica's model."""
        return await custom.gather(self.core)

    async def check_ready(self) -> bool:
        return await self.core.check_model_ready(self.spec.name, str(self.spec.version))

    async def __del__(self) -> None:
        # Serve's graceful shutdown: in-flight requests have drained (those that came by the
        # direct path drain in the core's stop); finalize the model.
        self.direct.stop_listening()
        await self.mirror.stop()
        await self.core.stop()
        await self.direct.close()
        inbox.remove_folder()  # (Serve kills the actor next: its atexit handlers never run)


def _error(request: InferRequest, error: ModelyardError) -> InferResponse:
    return InferResponse(request.model_name, request.model_version, request.id, error=error)
