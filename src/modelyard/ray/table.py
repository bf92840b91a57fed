"""The cluster's model table, and its mirror in each process's core.

The controller publishes which model versions serve and where (their Serve application) with
their configs as served; every frontend and replica keeps a mirror of it in its own core's
registry: each remote version is a ``ModelVersion`` whose scheduler forwards requests to the
deployment (``remote.RemoteScheduler``). The core then validates, routes BLS calls, runs
ensembles and answers metadata as it does on one server. The mirror follows the table by long
polling the controller (an answer as soon as the table changes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config import render
from modelyard.core.model_version import ModelVersion
from modelyard.core.validation import signature_from_config
from modelyard.serving.stats import ModelStats

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer
    from modelyard.scheduling.base import Scheduler

log = logging.getLogger("modelyard")

# How long one long poll of the controller waits for a change before asking again.
POLL_WAIT_S = 30.0
# After a failed poll (the controller restarting, the driver gone), wait this long to retry.
RETRY_S = 1.0


@dataclass(frozen=True)
class VersionRecord:
    """One serving model version: where it runs and its config as served."""

    name: str
    version: int
    app: str  # the Serve application (one deployment, named DEPLOYMENT)
    config: bytes  # the normalized ModelConfig, serialized
    sticky: bool  # a sequence model: requests of one sequence go to one replica
    autoscaled: bool = False  # Serve scales its replicas by the requests it sees


# The table: generation (grows with every change) and the serving versions by model name.
Table = tuple[int, dict[str, list[VersionRecord]]]
Fetch = Callable[[int], Awaitable[Table]]
MakeScheduler = Callable[[VersionRecord, bool], "Scheduler"]

DEPLOYMENT = "model"  # each application's one deployment


def remote_version(record: VersionRecord, make_scheduler: MakeScheduler) -> ModelVersion:
    cfg = ModelConfig.FromString(record.config)
    decoupled = bool(cfg.model_transaction_policy.decoupled)
    return ModelVersion(
        name=record.name,
        version=record.version,
        config=cfg,
        config_json=render.config_to_json(cfg),
        signature=signature_from_config(cfg),
        decoupled=decoupled,
        instances=[],
        scheduler=make_scheduler(record, decoupled),
        stats=ModelStats(record.name, str(record.version)),
    )


class Mirror:
    """Keeps ``core``'s registry equal to the cluster's table. ``local``: the model version this
    process serves itself (a replica's own), which stays as loaded."""

    def __init__(
        self,
        core: InferenceServer,
        fetch: Fetch,
        make_scheduler: MakeScheduler,
        local: tuple[str, int] | None = None,
    ) -> None:
        self.core = core
        self.fetch = fetch
        self.make_scheduler = make_scheduler
        self.local = local
        self.generation = -1
        self._apps: dict[tuple[str, int], str] = {}  # mirrored version -> its application
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Mirror the table now, then follow its changes."""
        self.apply(*await self.fetch(-1))
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def wait_for(self, generation: int, timeout: float = POLL_WAIT_S) -> None:
        """Until the mirror has caught up with ``generation`` (e.g. after a load this process
        asked for), bounded."""
        if self.generation >= generation:
            return
        try:
            self.apply(*await asyncio.wait_for(self.fetch(-1), timeout))
        except (asyncio.TimeoutError, Exception) as e:  # the follower catches up later
            log.warning("could not refresh the model table: %s", e)

    async def _follow(self) -> None:
        while True:
            try:
                table = await self.fetch(self.generation)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("model table poll failed: %s", e)
                await asyncio.sleep(RETRY_S)
                continue
            try:
                self.apply(*table)
            except Exception:  # a bug: keep following (and say so)
                log.exception("applying the model table failed")

    def apply(self, generation: int, models: dict[str, list[VersionRecord]]) -> None:
        if generation <= self.generation:
            return
        self.generation = generation
        registry = self.core.registry
        seen: set[tuple[str, int]] = set()
        for name, records in models.items():
            entry = registry.entry(name)
            for record in records:
                key = (name, record.version)
                if key == self.local:
                    continue
                seen.add(key)
                if self._apps.get(key) == record.app and record.version in entry.versions:
                    continue
                old = entry.versions.get(record.version)
                entry.versions[record.version] = remote_version(record, self.make_scheduler)
                self._apps[key] = record.app
                if old is not None:
                    old.scheduler.close()
            entry.state, entry.reason = "READY", ""
        for key in [k for k in self._apps if k not in seen]:
            del self._apps[key]
            name, version = key
            entry = registry.entry(name)
            gone = entry.versions.pop(version, None)
            if gone is not None:
                gone.scheduler.close()
            if not entry.versions:
                entry.state, entry.reason = "UNAVAILABLE", "unloaded"
