"""``modelyard serve --ray ADDRESS``: serve the model repository on a Ray cluster.

This process is the cluster's driver: it connects to Ray (``local`` starts one), starts Serve
without its proxies, creates the controller (which deploys the models) and one frontend actor
per node that takes traffic, logs their addresses, and on SIGINT/SIGTERM deletes the
applications (in-flight requests drain within ``--exit-timeout-secs``) and ends its actors.
The controller and the frontends die with this process; Serve applications outlive it, so a
server that crashed leaves them behind and the next one with the same ``--id`` removes them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import time
from typing import Any

import ray
from ray import serve
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from modelyard import logs
from modelyard.core.options import ServerOptions
from modelyard.frontends.options import FrontendOptions
from modelyard.ray.controller import ClusterSpec, Controller
from modelyard.ray.frontend import Frontend, FrontendSpec

log = logging.getLogger("modelyard")

NAMESPACE = "modelyard"
# Past the exit timeout, this much longer for the applications' deletion and the actors' end.
STOP_GRACE_S = 15.0
# A frontend that has not bound its ports within this long fails the start.
FRONTEND_START_S = 60.0


def connect(address: str) -> None:
    """Connect this process to the cluster at ``address`` (``local``: start one here)."""
    kwargs: dict[str, Any] = {
        "namespace": NAMESPACE,
        "logging_level": logging.WARNING,
        "log_to_driver": True,  # the models' log lines reach this process's log
    }
    if address == "local":
        ray.init(include_dashboard=False, **kwargs)
    else:
        ray.init(address=address, **kwargs)
    quiet_ray()


def quiet_ray() -> None:
    """Ray Serve logs each deploy, delete and call at INFO; keep its warnings and errors."""
    logging.getLogger("ray.serve").setLevel(logging.WARNING)


def log_config(args: argparse.Namespace) -> logs.LogConfig:
    return logs.LogConfig(
        log_info=args.log_info,
        log_warning=args.log_warning,
        log_error=args.log_error,
        log_verbose_level=args.log_verbose,
        log_format=args.log_format,
    )


def actor_env() -> dict[str, str]:
    """The environment the cluster's processes get from this one: gRPC's settings (see
    cli/main.py) and modelyard's own. Not GRPC_EXPERIMENTS: Ray's own gRPC, in every Ray
    process, does not know the experiments grpcio names there and complains on every start."""
    os.environ.pop("GRPC_EXPERIMENTS", None)  # (before Ray starts processes from this one)
    return {k: v for k, v in os.environ.items() if k.startswith(("GRPC_", "MODELYARD_"))}


def run(args: argparse.Namespace, fe: FrontendOptions, options: ServerOptions) -> int:
    env = actor_env()
    try:
        connect(args.ray)
    except (ConnectionError, ValueError, RuntimeError) as e:
        log.error("cannot connect to the Ray cluster at '%s': %s", args.ray, e)
        return 1
    try:
        serve.start(proxy_location="Disabled", logging_config={"log_level": "WARNING"})
        spec = ClusterSpec(
            options=options,
            log_config=log_config(args),
            app_prefix=f"modelyard.{args.id}",
            replica_cpus=args.ray_replica_cpus,
            deploy_timeout=args.ray_deploy_timeout_secs,
            env_vars=env,
        )
        return asyncio.run(_serve(args, fe, spec))
    finally:
        ray.shutdown()


async def _serve(args: argparse.Namespace, fe: FrontendOptions, spec: ClusterSpec) -> int:
    here = ray.get_runtime_context().get_node_id()
    name = f"{spec.app_prefix}.controller"
    try:
        ray.get_actor(name)
    except ValueError:
        pass
    else:
        log.error("a modelyard server with --id %s is already serving on this cluster", args.id)
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
    try:
        started = time.monotonic()
        failed = await controller.start.remote()
        if failed and args.exit_on_error:
            log.error("failed to load all models: %s", ", ".join(failed))
            return 1
        frontends = await _start_frontends(args, fe, spec, controller)
        if not frontends:
            return 1
        # (on Ray the frontends start once the models are deployed: they mirror the table)
        log.info(
            "%s in %.2f s: %d failed%s",
            logs.INITIAL_LOAD_DONE,
            time.monotonic() - started,
            len(failed),
            f" ({', '.join(failed)})" if failed else "",
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down: draining in-flight requests (up to %g s)", args.exit_timeout_secs)
        return 0
    finally:
        clean = await _stop(controller, frontends, args.exit_timeout_secs)
        if not clean:
            log.error("the cluster did not stop cleanly within the exit timeout")


async def _start_frontends(
    args: argparse.Namespace, fe: FrontendOptions, spec: ClusterSpec, controller: Any
) -> list[Any]:
    nodes = [
        n
        for n in ray.nodes()  # type: ignore[no-untyped-call]
        if n.get("Alive")
        and (not args.ray_frontend_resource or args.ray_frontend_resource in n["Resources"])
    ]
    if not nodes:
        log.error(
            "no live node of the Ray cluster has the resource '%s' (--ray-frontend-resource)",
            args.ray_frontend_resource,
        )
        return []
    fspec = FrontendSpec(
        options=spec.options,
        frontend=fe,
        log_config=spec.log_config,
        http=(args.http_address, args.http_port) if args.allow_http else None,
        grpc=(args.grpc_address, args.grpc_port) if args.allow_grpc else None,
        metrics=(args.metrics_address, args.metrics_port) if args.allow_metrics else None,
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
            ("grpc", "GRPCInferenceService", args.grpc_address),
            ("http", "HTTPService", args.http_address),
            ("metrics", "Metrics Service", args.metrics_address),
        ):
            if key in b:
                host = b["ip"] if addr in ("0.0.0.0", "::", "") else addr
                log.info("Started %s at %s:%d (Ray node %s)", label, host, b[key], b["node"])
    return actors


async def _stop(controller: Any, frontends: list[Any], exit_timeout: float) -> bool:
    """Delete the applications (draining), close the frontends, end the actors; bounded."""
    clean = True
    try:
        clean = bool(await asyncio.wait_for(controller.stop.remote(), exit_timeout + STOP_GRACE_S))
    except Exception as e:
        log.error("stopping the models failed: %s", e)
        clean = False
    if frontends:
        try:
            await asyncio.wait_for(
                asyncio.gather(*(f.stop.remote(1.0) for f in frontends)), STOP_GRACE_S
            )
        except Exception as e:
            log.debug("closing the frontends: %s", e)
    for actor in [*frontends, controller]:
        try:
            ray.kill(actor)
        except Exception as e:
            log.debug("ending %s: %s", actor, e)
    return clean
