"""The controller's ``VersionPlacement``: each version a load selects becomes a Serve
application of one deployment (``ray/plan.py`` maps its config), whose replicas
(``ray/replica.py``) load it; a version's ``DeployedVersion`` deletes its application when
the core stops it. Every call to Serve's client API goes through one thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import ray
from google.protobuf import json_format
from ray import serve
from ray.serve.api import RunTarget
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard import logs
from modelyard.backends.instance import Instance
from modelyard.config import render
from modelyard.core.ensembles import load_ensemble
from modelyard.core.loader import read_config
from modelyard.core.model_version import ModelVersion
from modelyard.core.options import ServerOptions
from modelyard.core.validation import signature_from_config
from modelyard.errors import InternalError, ModelyardError, Unavailable
from modelyard.ray.plan import DeploymentPlan, infeasible, no_room, plan_deployment
from modelyard.ray.replica import ModelReplica, ReplicaSpec
from modelyard.ray.table import DEPLOYMENT, VersionRecord
from modelyard.serving.context import RequestContext
from modelyard.serving.stats import ModelStats

if TYPE_CHECKING:
    from modelyard.core.parts import Loads

log = logging.getLogger("modelyard")
T = TypeVar("T")

# Serve's client API is not thread-safe (building a deployment registers and unregisters
# modules with cloudpickle, process-wide): every call the controller makes goes through this
# one thread, off the event loop.
_SERVE_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="modelyard-serve")


async def serve_call(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(_SERVE_THREAD, fn, *args)


STICKY_ROUTER = "modelyard.ray.router.StickyRouter"  # (imported by Serve where it routes)
STATUS_POLL_S = 0.25  # how often a deploy or delete in progress looks at Serve's status


class StatusWatch:
    """Serve's status, read once per ``STATUS_POLL_S`` for every deploy and delete waiting on
    it (each reading it on its own cost the controller a call per waiter and poll)."""

    def __init__(self) -> None:
        self._status: Any = None
        self._error: BaseException | None = None
        self._begun = 0  # reads begun
        self._done = 0  # reads finished: the status (or error) is the last one's
        self._waiters = 0
        self._read: asyncio.Event | None = None
        self._task: asyncio.Future[None] | None = None

    async def next(self) -> Any:
        """Serve's status as read after this call began."""
        want = self._begun + 1
        self._waiters += 1
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.ensure_future(self._poll())
            while self._done < want:
                if self._read is None:
                    self._read = asyncio.Event()
                await self._read.wait()
            if self._error is not None:
                raise self._error
            return self._status
        finally:
            self._waiters -= 1

    async def _poll(self) -> None:
        while self._waiters:
            self._begun += 1
            try:
                self._status, self._error = await serve_call(serve.status), None
            except Exception as e:
                self._error = e
            self._done = self._begun
            read, self._read = self._read, None
            if read is not None:
                read.set()
            await asyncio.sleep(STATUS_POLL_S)


_STATUS = StatusWatch()


@dataclass
class ClusterSpec:
    options: ServerOptions
    log_config: logs.LogConfig
    app_prefix: str  # every application of this server: "<prefix>/<model>/<version>/<load>"
    replica_cpus: float  # CPUs per replica unless the model's ray_num_cpus says otherwise
    deploy_timeout: float  # how long a version may take to start before its load fails
    env_vars: dict[str, str]  # environment of the replicas


class ServeDeployments:
    """Where the controller's core starts a load's versions: Serve applications named
    ``<prefix>/<model>/<version>/<load>`` (a new one per load, so a reload's old versions
    serve until the new ones run)."""

    def __init__(self, spec: ClusterSpec, controller: Any) -> None:
        self.spec = spec
        self.controller = controller  # the controller's actor handle, for the replicas
        self._loads = itertools.count(1)

    async def start(
        self,
        core: Loads,
        name: str,
        location: str,
        override: Any | None,
        files: dict[str, bytes] | None,
    ) -> list[ModelVersion]:
        raw = read_config(name, location, override)
        if raw.platform == "ensemble":
            # The core's checks (step models loaded first, maps against their signatures).
            await load_ensemble(name, location, raw, core)
        plan = plan_deployment(name, raw, location, self.spec.replica_cpus)
        nodes = await serve_call(ray.nodes)
        why = infeasible(
            plan.resources,
            plan.replicas_at_start * len(plan.versions),
            [n["Resources"] for n in nodes if n.get("Alive")],
        )
        if why:
            raise Unavailable(f"model '{name}' cannot be deployed: {why}")
        load = next(self._loads)
        apps = {v: f"{self.spec.app_prefix}/{name}/{v}/{load}" for v in plan.versions}

        def deploy() -> None:
            targets = [
                RunTarget(
                    self._deployment(plan).bind(self._replica(plan, v, files)),
                    name=app,
                    route_prefix=None,
                )
                for v, app in apps.items()
            ]
            serve.run_many(targets, wait_for_applications_running=False)

        await serve_call(deploy)
        try:
            await self._wait_running(plan, list(apps.values()))
            described = await asyncio.gather(
                *(
                    serve.get_deployment_handle(
                        DEPLOYMENT, app_name=app, _check_exists=False
                    ).describe.remote()
                    for app in apps.values()
                )
            )
        except BaseException:
            await delete_apps(list(apps.values()), self.spec.options.exit_timeout)
            raise
        errors = [error for _, error in described if error is not None]
        if errors:
            await delete_apps(list(apps.values()), self.spec.options.exit_timeout)
            raise errors[0]
        versions = []
        for (v, app), (config, _) in zip(apps.items(), described, strict=True):
            record = VersionRecord(name, v, app, config, plan.sticky, plan.autoscaling is not None)
            versions.append(self._version(record))
        return versions

    def _version(self, record: VersionRecord) -> ModelVersion:
        cfg = ModelConfig.FromString(record.config)
        return ModelVersion(
            name=record.name,
            version=record.version,
            config=cfg,
            config_json=render.config_to_json(cfg),
            signature=signature_from_config(cfg),
            decoupled=bool(cfg.model_transaction_policy.decoupled),
            instances=[DeployedVersion(record, self.spec.options.exit_timeout)],
            scheduler=NoRequests(),
            stats=ModelStats(record.name, str(record.version)),
        )

    def _deployment(self, plan: DeploymentPlan) -> Any:
        options: dict[str, Any] = {
            "name": DEPLOYMENT,
            "ray_actor_options": {
                **plan.actor_options,
                "runtime_env": {"env_vars": dict(self.spec.env_vars)},
            },
            "max_ongoing_requests": plan.max_ongoing_requests,
            "graceful_shutdown_wait_loop_s": 0.1,
            "graceful_shutdown_timeout_s": max(0.1, self.spec.options.exit_timeout),
            "logging_config": {"log_level": "WARNING", "enable_access_log": False},
        }
        if plan.autoscaling is not None:
            options["autoscaling_config"] = plan.autoscaling
        else:
            options["num_replicas"] = plan.num_replicas
        if plan.max_replicas_per_node is not None:
            options["max_replicas_per_node"] = plan.max_replicas_per_node
        if plan.sticky:
            options["request_router_config"] = {"request_router_class": STICKY_ROUTER}
        return serve.deployment(**options)(ModelReplica)

    def _replica(
        self, plan: DeploymentPlan, version: int, files: dict[str, bytes] | None
    ) -> ReplicaSpec:
        opts = self.spec.options
        return ReplicaSpec(
            name=plan.name,
            version=version,
            config_json=json_format.MessageToJson(plan.replica_config(version)),
            shown=plan.shown.SerializeToString(),
            options=replace(opts, control_mode="explicit", load_models=[], allow_client_shm=False),
            log_config=replace(self.spec.log_config, log_file=""),
            controller=self.controller,
            files=files,  # the replicas materialise them on their own nodes
        )

    async def _wait_running(self, plan: DeploymentPlan, apps: list[str]) -> None:
        """Until every application runs; a failed start fails the load with Serve's words for
        it, a slow one (replicas the cluster has no room for, or still starting) with ours."""
        name = plan.name
        if plan.deploy_timeout is None:
            timeout, source = self.spec.deploy_timeout, "--ray-deploy-timeout-secs"
        else:
            timeout, source = plan.deploy_timeout, "its parameter ray_deploy_timeout_secs"
        deadline = time.monotonic() + timeout
        while True:
            status = await _STATUS.next()
            states = [status.applications.get(app) for app in apps]
            if all(s is not None and s.status == "RUNNING" for s in states):
                return
            for s in states:
                if s is not None and s.status == "DEPLOY_FAILED":
                    raise Unavailable(
                        f"model '{name}' failed to start on the Ray cluster: {_why(s)}"
                    )
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"model '{name}' did not start on the Ray cluster within "
                    f"{timeout:g} s ({source}): " + await _not_started(plan, states)
                )


async def _not_started(plan: DeploymentPlan, states: list[Any]) -> str:
    """Why the replicas of ``plan``'s applications (Serve's ``states``) are not all running,
    in one line: how many wait, what each needs and what the cluster has free."""
    wanted = plan.replicas_at_start * len(states)
    running = sum(
        d.replica_states.get("RUNNING", 0)
        for s in states
        if s is not None
        for d in s.deployments.values()
    )
    waiting = max(1, wanted - running)
    free, total = await serve_call(_resources)
    why = no_room(plan.resources, free, total)
    if why:
        return f"{waiting} of its {wanted} replicas found no room: {why}"
    return f"{waiting} of its {wanted} replicas are still starting (the model's initialize)"


def _resources() -> tuple[dict[str, float], dict[str, float]]:
    """The cluster's free and total resources."""
    free: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
    total: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return free, total


def _why(app_status: Any) -> str:
    parts = [app_status.message] if app_status.message else []
    for d in app_status.deployments.values():
        if d.message:
            parts.append(d.message)
    return " ".join(parts) or app_status.status


async def delete_apps(apps: list[str], timeout: float) -> bool:
    """Delete Serve applications (their replicas drain within ``timeout``); True once gone."""
    for app in apps:
        await serve_call(serve.delete, app, False)
    deadline = time.monotonic() + timeout + 10.0
    while time.monotonic() < deadline:
        status = await _STATUS.next()
        if not any(app in status.applications for app in apps):
            return True
    log.error("Serve applications still present after delete: %s", ", ".join(apps))
    return False


class DeployedVersion(Instance):
    """A model version's Serve application, as the controller's core sees an instance:
    stopping it deletes the application."""

    def __init__(self, record: VersionRecord, exit_timeout: float) -> None:
        self.record = record
        self.name = record.app
        self.exit_timeout = exit_timeout

    async def start(self) -> None:
        return None  # deployed by ServeDeployments.start

    async def execute(self, batch: list[RequestContext]) -> None:
        raise InternalError("the controller runs no requests")

    async def stop(self) -> None:
        try:
            await delete_apps([self.record.app], self.exit_timeout)
        except Exception as e:  # the cluster is going away
            log.error("deleting '%s' failed: %s", self.record.app, e)


class NoRequests:
    """The controller's scheduler: requests go to the deployments, never here."""

    pending = 0

    def submit(self, ctx: RequestContext) -> None:
        raise Unavailable("the controller runs no requests")

    def close(self, shutdown: bool = False) -> None:
        return None

    async def drain(self, timeout: float) -> bool:
        return True

    def abort(self, queued: ModelyardError, running: ModelyardError) -> None:
        return None
