"""The cluster's model control: one actor (owned by the ``modelyard serve --ray`` process)
whose core loads a model by deploying each of its versions as a Serve application and unloads
it by deleting them (``ray/deployments.py``, the placement the core is built with). The core's
own model control does the rest as on one server: control modes, one load per model at a
time, reloads that keep the old versions serving until the new ones run (a new application
per load), ensembles after their steps, the repository index and its states, Triton's error
texts (a replica that fails to load reports the core's error).

Frontends and replicas mirror the controller's table of serving versions (``table``: a long
poll that answers as soon as the table changes).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray
from ray import serve

from modelyard import logs
from modelyard.core.api import InferenceServer
from modelyard.core.registry import ModelRegistry
from modelyard.errors import InternalError, ModelyardError
from modelyard.ray.deployments import (
    ClusterSpec,
    DeployedVersion,
    ServeDeployments,
    delete_apps,
    serve_call,
)
from modelyard.ray.table import Table, VersionRecord

log = logging.getLogger("modelyard")

__all__ = ["ClusterCore", "ClusterSpec", "Controller"]  # (the driver imports ClusterSpec here)


class Controller:
    """The controller actor (see the module doc); every method answers errors as values."""

    def __init__(self, spec: ClusterSpec) -> None:
        logs.configure(spec.log_config)
        logging.getLogger("ray.serve").setLevel(logging.WARNING)  # (see driver.quiet_ray)
        self.core = ClusterCore(spec, ray.get_runtime_context().current_actor)
        self._starting: asyncio.Future[list[str]] | None = None

    async def start(self) -> list[str]:
        """Remove what a crashed server of the same prefix left, then load the models the
        control mode asks for; returns the names that failed. ``stop`` cancels it."""
        self._starting = asyncio.ensure_future(self._start())
        return await self._starting

    async def _start(self) -> list[str]:
        await self.core.remove_leftovers()
        return await self.core.start()

    async def table(self, known: int, wait: float) -> Table:
        return await self.core.table(known, wait)

    async def load_model(
        self, name: str, config: str | None, files: dict[str, bytes] | None, from_model: bool
    ) -> tuple[ModelyardError | None, int]:
        try:
            await self.core.load_model(name, config, files, from_model)
        except Exception as e:
            return _portable(e), self.core.generation
        return None, self.core.generation

    async def unload_model(
        self, name: str, unload_dependents: bool, from_model: bool
    ) -> tuple[ModelyardError | None, int]:
        try:
            await self.core.unload_model(name, unload_dependents, from_model)
        except Exception as e:
            return _portable(e), self.core.generation
        return None, self.core.generation

    async def repository_index(self, ready_only: bool) -> list[dict[str, Any]]:
        return await self.core.repository_index(ready_only)

    async def check_ready(self) -> bool:
        return await self.core.check_ready()

    async def stop(self) -> bool:
        """Delete every application (in-flight requests drain within the exit timeout); a
        start still loading models is cancelled first (its deploys are deleted)."""
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        return await self.core.stop()


def _portable(e: Exception) -> ModelyardError:
    if isinstance(e, ModelyardError):
        return e
    log.exception("model control failed", exc_info=e)
    return InternalError(f"{type(e).__name__}: {e}")


class ServingTable:
    """The table of serving versions the others mirror: a new generation whenever the
    core's model control reports a change (its ``ControlEvents``); a model being unloaded
    leaves it at once, while its versions drain."""

    def __init__(self) -> None:
        self.generation = 0
        self._changed = asyncio.Event()
        self._leaving: set[str] = set()

    def _publish(self) -> None:
        self.generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def switched(self, name: str) -> None:
        self._publish()

    def unloading(self, name: str) -> None:
        self._leaving.add(name)
        self._publish()

    def unloaded(self, name: str) -> None:
        self._leaving.discard(name)
        self._publish()

    async def read(self, registry: ModelRegistry, known: int, wait: float) -> Table:
        """The table once its generation is past ``known`` (or ``wait`` seconds passed)."""
        if known >= self.generation:
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except asyncio.TimeoutError:
                pass
        models: dict[str, list[VersionRecord]] = {}
        for name, entry in registry.entries.items():
            if name in self._leaving:
                continue
            for _, mv in sorted(entry.versions.items()):
                app = mv.instances[0]
                if isinstance(app, DeployedVersion):
                    models.setdefault(name, []).append(app.record)
        return self.generation, models


class ClusterCore(InferenceServer):
    """The controller's core: a model version loads as a Serve application (see module doc);
    the table follows its model control."""

    def __init__(self, spec: ClusterSpec, controller: Any) -> None:
        self.published = ServingTable()
        super().__init__(spec.options, ServeDeployments(spec, controller), self.published)
        self.spec = spec
        self._removing_all = False  # stopping: every application of this server goes

    @property
    def generation(self) -> int:
        return self.published.generation

    async def table(self, known: int, wait: float) -> Table:
        return await self.published.read(self.registry, known, wait)

    async def stop(self) -> bool:
        """Delete every application of this server at once, those still deploying too (a
        deploy cancelled while Serve's thread ran it, a load under way): Serve drains each
        replica's requests within the exit timeout. (Deleting the versions first and the rest
        after cost a round of Serve's status, slow on a loaded machine, more.)"""
        self._removing_all = True
        everything = asyncio.ensure_future(self.remove_leftovers())
        clean = await super().stop()  # (each version waits for its application to go)
        return await everything and clean

    async def remove_leftovers(self) -> bool:
        """Delete this server's applications that no loaded version owns (a crashed server's;
        once stopping, every one: a cancelled deploy's too); True once none is left."""
        status = await serve_call(serve.status)
        owned = (
            set()
            if self._removing_all
            else {
                mv.instances[0].record.app
                for e in self.registry.entries.values()
                for mv in e.versions.values()
                if mv.instances and isinstance(mv.instances[0], DeployedVersion)
            }
        )
        mine = [
            app
            for app in status.applications
            if app.startswith(self.spec.app_prefix + "/") and app not in owned
        ]
        if not mine:
            return True
        if not self._removing_all:
            log.warning(
                "removing %d Serve applications a previous server left on the cluster: %s",
                len(mine),
                ", ".join(sorted(mine)),
            )
        return await delete_apps(mine, self.spec.options.exit_timeout)
