"""``modelyard serve --ray ADDRESS``: serve the model repository on a Ray cluster.

This process is the cluster's driver: it connects to Ray (``local`` starts one here, in a
folder of its own under the temporary folder, removed when it stops), starts Serve without
its proxies, creates the controller and one frontend actor per node that takes traffic (they
answer live, not ready, while the controller deploys the models), logs their addresses, and
on SIGINT/SIGTERM, in any phase, deletes the applications (in-flight requests drain) and ends
its actors within ``--exit-timeout-secs``; a second signal skips the wait. The controller and
the frontends die with this process; Serve applications outlive it on a cluster it connected
to, so a server that crashed leaves them behind and the next one with the same ``--id``
removes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import ray
from ray import serve
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from modelyard import logs
from modelyard.backends.python.protocol import tensor_pool
from modelyard.ray.controller import ClusterSpec, Controller
from modelyard.ray.frontend import Frontend, FrontendSpec
from modelyard.server_config import RaySettings, ServerConfig

log = logging.getLogger("modelyard")
T = TypeVar("T")

NAMESPACE = "modelyard"
# Past the exit timeout, this much longer for stopping Ray before the process ends anyway.
STOP_GRACE_S = 15.0
# A frontend that has not bound its ports within this long fails the start.
FRONTEND_START_S = 60.0
# Ray's socket paths (in its session folder) must fit in 107 bytes.
MAX_RAY_TMP = 30


class Interrupted(BaseException):
    """SIGINT or SIGTERM while Ray or Serve starts (blocking calls in this thread; not an
    Exception, which Ray's start retries would swallow)."""


_signalled = ""  # the signal that interrupted the start ("" for none)


def _interrupt(signum: int, frame: Any) -> None:
    global _signalled
    _signalled = signal.Signals(signum).name
    raise Interrupted(_signalled)


def _stopping_already(signum: int, frame: Any) -> None:
    log.info("already stopping (%s): the cluster is being shut down", signal.Signals(signum).name)


def _on_signals(handler: Any) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


class LocalRay:
    """The folder of the Ray instance ``--ray local`` starts, ``modelyard-ray-<pid>`` in the
    temporary folder: Ray's session (sockets, logs) and every temporary file of its processes
    (the replicas' inbox folders, onnxruntime's session file). Removed when the server stops;
    kept, with Ray's logs, when Ray failed to start or the server crashed, until the next
    ``--ray local`` server removes it."""

    PREFIX = "modelyard-ray-"

    def __init__(self) -> None:
        base = os.environ.get("RAY_TMPDIR") or (
            tempfile.gettempdir() if sys.platform.startswith("linux") else "/tmp"
        )
        if len(base) > MAX_RAY_TMP:
            base = "/tmp"  # (under a long TMPDIR, Ray's socket paths would not fit)
        self._sweep(base)
        self.folder = os.path.join(base, f"{self.PREFIX}{os.getpid()}")
        shutil.rmtree(self.folder, ignore_errors=True)  # (a gone process's, with this pid)
        os.mkdir(self.folder, 0o700)
        os.environ["TMPDIR"] = self.folder  # for the processes Ray starts from this one

    def _sweep(self, base: str) -> None:
        """Remove the folders of ``--ray local`` servers that are gone."""
        try:
            names = os.listdir(base)
        except OSError:
            return
        for name in names:
            pid = name[len(self.PREFIX) :] if name.startswith(self.PREFIX) else ""
            if pid.isdigit() and not tensor_pool.process_alive(int(pid)):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)

    def close(self, keep: bool) -> None:
        # The shared-memory segments of replicas Ray killed (/dev/shm is not in the folder).
        tensor_pool.sweep_dead_servers()
        if keep:
            log.info(
                "Ray's logs of this run: %s", os.path.join(self.folder, "session_latest", "logs")
            )
        else:
            shutil.rmtree(self.folder, ignore_errors=True)


def connect(config: ServerConfig, local: LocalRay | None) -> None:
    """Connect this process to the cluster at ``--ray`` (``local``: start one here)."""
    settings = ray_settings(config)
    kwargs: dict[str, Any] = {
        "namespace": NAMESPACE,
        "logging_level": logging.WARNING,
        "log_to_driver": True,  # the models' log lines reach this process's log
    }
    if local is not None:
        # (Ray's annotations say int; its resources take fractions, as the flags do)
        size: dict[str, Any] = {"num_cpus": settings.num_cpus, "num_gpus": settings.num_gpus}
        ray.init(include_dashboard=False, _temp_dir=local.folder, **size, **kwargs)
    else:
        ray.init(address=settings.address, **kwargs)
    quiet_ray()


def quiet_ray() -> None:
    """Ray Serve logs each deploy, delete and call at INFO; keep its warnings and errors."""
    logging.getLogger("ray.serve").setLevel(logging.WARNING)


def ray_settings(config: ServerConfig) -> RaySettings:
    assert config.ray is not None, "served on Ray without --ray"
    return config.ray


def log_config(config: ServerConfig) -> logs.LogConfig:
    """The log settings of the cluster's processes: this one's, without its log file."""
    return dataclasses.replace(config.log, log_file="")


def actor_env() -> dict[str, str]:
    """The environment the cluster's processes get from this one: gRPC's settings (see
    cli/main.py), modelyard's own and Serve's gRPC message limit. Not GRPC_EXPERIMENTS: Ray's
    own gRPC, in every Ray process, does not know the experiments grpcio names there and
    complains on every start."""
    os.environ.pop("GRPC_EXPERIMENTS", None)  # (before Ray starts processes from this one)
    env = {k: v for k, v in os.environ.items() if k.startswith(("GRPC_", "MODELYARD_"))}
    # Small requests go by Serve's gRPC transport (ray/remote.py), and their responses come
    # back the same way: lift gRPC's 4 MiB default to a response as large as gRPC carries.
    env["RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"] = os.environ.get(
        "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH", str(2**31 - 1)
    )
    return env


def run(config: ServerConfig) -> int:
    """Serve ``config`` (its ``ray`` set; as ``server.serve`` completes it) on the cluster."""
    settings = ray_settings(config)
    env = actor_env()
    local = LocalRay() if settings.address == "local" else None
    code = 1
    crashed = True  # keep the local instance's logs unless the server ends as it should
    # Until the event loop takes the signals over: a signal ends the blocking start.
    _on_signals(_interrupt)
    try:
        try:
            connect(config, local)
            _on_signals(_interrupt)  # (ray.init set a SIGTERM handler of its own)
            if not _signalled:
                serve.start(proxy_location="Disabled", logging_config={"log_level": "WARNING"})
            if _signalled:  # (raised where Ray caught it)
                raise Interrupted(_signalled)
        except Interrupted as e:
            log.info("stopping while Ray starts (%s)", e)
            _backstop(config.core.exit_timeout + STOP_GRACE_S)
            crashed = False
            code = 0
            return code
        except (ConnectionError, ValueError, RuntimeError) as e:
            log.error("cannot connect to the Ray cluster at '%s': %s", settings.address, e)
            return code
        spec = ClusterSpec(
            options=config.core,
            log_config=log_config(config),
            app_prefix=f"modelyard.{config.core.server_id}",
            replica_cpus=settings.replica_cpus,
            deploy_timeout=settings.deploy_timeout_secs,
            env_vars=env,
        )
        try:
            code = asyncio.run(_serve(config, spec))
        except Interrupted as e:  # (before the event loop took the signals over)
            log.info("stopping while the server starts (%s)", e)
            code = 0
        crashed = False
        return code
    finally:
        _on_signals(_stopping_already)  # (stopping Ray takes a moment: let it finish)
        ray.shutdown()
        if local is not None:
            local.close(keep=crashed)
        log.info("stopped")


async def _serve(config: ServerConfig, spec: ClusterSpec) -> int:
    stop, hurry = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            log.info("a second signal: stopping without waiting for the models")
            hurry.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    here = ray.get_runtime_context().get_node_id()
    name = f"{spec.app_prefix}.controller"
    try:
        ray.get_actor(name)
    except ValueError:
        pass
    else:
        server_id = config.core.server_id
        log.error("a modelyard server with --id %s is already serving on this cluster", server_id)
        return 1
    controller_class: Any = ray.remote(Controller)
    controller = controller_class.options(
        name=name,
        num_cpus=0,
        max_concurrency=10_000,  # long polls of every replica and frontend
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
        runtime_env={"env_vars": spec.env_vars},
    ).remote(spec)
    frontends: list[Any] = []
    code = 1
    try:
        code = await _serve_until_stopped(config, spec, controller, frontends, stop)
    finally:
        exit_timeout = config.core.exit_timeout
        _backstop(exit_timeout + STOP_GRACE_S)
        log.info("shutting down: draining in-flight requests (up to %g s)", exit_timeout)
        clean = await _stop(controller, frontends, exit_timeout, hurry)
        if not clean:
            log.error("the cluster did not stop cleanly within the exit timeout")
    return code or (0 if clean else 1)


async def _serve_until_stopped(
    config: ServerConfig,
    spec: ClusterSpec,
    controller: Any,
    frontends: list[Any],
    stop: asyncio.Event,
) -> int:
    """Start the frontends (into ``frontends``), then the models; serve until ``stop``."""
    # The frontends first: they answer live (not ready) while the models deploy, and mirror
    # the table of models as each version starts serving.
    started = time.monotonic()
    bound = await _unless(stop, _start_frontends(config, spec, controller))
    if bound is None:
        log.info("stopping while the frontends start")
        return 0
    if not bound:
        return 1
    frontends += bound
    failed = await _unless(stop, _ray_call(controller.start.remote()))
    if failed is None:
        log.info("stopping while the models load")
        return 0
    log.info(
        "%s in %.2f s: %d failed%s",
        logs.INITIAL_LOAD_DONE,
        time.monotonic() - started,
        len(failed),
        f" ({', '.join(failed)})" if failed else "",
    )
    if failed and config.core.exit_on_error:
        log.error("failed to load all models: %s", ", ".join(failed))
        return 1
    await stop.wait()
    return 0


async def _ray_call(ref: Awaitable[T]) -> T:
    return await ref


async def _unless(stop: asyncio.Event, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None when ``stop`` is set first (``work`` is then cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


def _backstop(after: float) -> None:
    """End the process ``after`` seconds from now if stopping hangs, and the processes it
    started with it (a local Ray instance's: its agents outlive a driver that just exits)."""

    def run() -> None:
        time.sleep(after)
        log.error("shutdown did not finish %g s after the signal: exiting now", after)
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=run, name="modelyard-exit-backstop", daemon=True).start()


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux's /proc; none elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


async def _start_frontends(config: ServerConfig, spec: ClusterSpec, controller: Any) -> list[Any]:
    resource = ray_settings(config).frontend_resource
    nodes = [
        n
        for n in ray.nodes()  # type: ignore[no-untyped-call]
        if n.get("Alive") and (not resource or resource in n["Resources"])
    ]
    if not nodes:
        log.error(
            "no live node of the Ray cluster has the resource '%s' (--ray-frontend-resource)",
            resource,
        )
        return []
    http, grpc, metrics = config.endpoints.http, config.endpoints.grpc, config.endpoints.metrics
    fspec = FrontendSpec(
        options=spec.options,
        frontend=config.frontends,
        log_config=spec.log_config,
        http=(http.address, http.port) if http.allow else None,
        grpc=(grpc.address, grpc.port) if grpc.allow else None,
        metrics=(metrics.address, metrics.port) if metrics.allow else None,
    )
    frontend_class: Any = ray.remote(Frontend)
    actors = [
        frontend_class.options(
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
            runtime_env={"env_vars": spec.env_vars},
        ).remote(fspec, controller)
        for n in nodes
    ]
    try:
        bound = await asyncio.wait_for(
            asyncio.gather(*(a.start.remote() for a in actors)), FRONTEND_START_S
        )
    except Exception as e:
        log.error("the frontends did not start: %s", e)
        for a in actors:
            ray.kill(a)
        return []
    errors = [b["error"] for b in bound if "error" in b]
    if errors:
        log.error("failed to start a frontend: %s", "; ".join(errors))
        for a in actors:
            ray.kill(a)
        return []
    for b in bound:
        for key, label, addr in (
            ("grpc", "GRPCInferenceService", grpc.address),
            ("http", "HTTPService", http.address),
            ("metrics", "Metrics Service", metrics.address),
        ):
            if key in b:
                host = b["ip"] if addr in ("0.0.0.0", "::", "") else addr
                log.info("Started %s at %s:%d (Ray node %s)", label, host, b[key], b["node"])
    return actors


async def _stop(
    controller: Any, frontends: list[Any], exit_timeout: float, hurry: asyncio.Event
) -> bool:
    """Delete the applications (draining) within the exit timeout, unless ``hurry`` is set
    first; then close the frontends and end the actors."""
    clean = False
    try:
        done = await asyncio.wait_for(
            _unless(hurry, _ray_call(controller.stop.remote())), exit_timeout
        )
        clean = bool(done)
    except asyncio.TimeoutError:
        log.error("the models did not stop within %g s (--exit-timeout-secs)", exit_timeout)
    except Exception as e:
        log.error("stopping the models failed: %s", e)
    if frontends:
        try:
            await asyncio.wait_for(
                asyncio.gather(*(_ray_call(f.stop.remote(1.0)) for f in frontends)), 2.0
            )
        except Exception as e:
            log.debug("closing the frontends: %s", e)
    for actor in [*frontends, controller]:
        try:
            ray.kill(actor)
        except Exception as e:
            log.debug("ending %s: %s", actor, e)
    return clean
