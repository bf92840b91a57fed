"""Composition root: builds the core, starts the frontends, handles signals and shutdown."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from modelyard import logs
from modelyard.config.backend_settings import parse_backend_config
from modelyard.core.api import InferenceServer
from modelyard.core.model_version import LoadOptions
from modelyard.core.options import ServerOptions
from modelyard.fdlimit import raise_fd_limit
from modelyard.frontends.options import FrontendOptions, frontend_options
from modelyard.heap import retain_freed_memory

log = logging.getLogger("modelyard")


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        repositories=list(args.model_repository),
        control_mode=args.model_control_mode,
        load_models=list(args.load_model),
        server_id=args.id,
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        exit_timeout=args.exit_timeout_secs,
        poll_secs=args.repository_poll_secs,
        load_threads=args.model_load_thread_count,
        allow_client_shm=args.allow_client_shm,
        cache_bytes=_cache_bytes(args.cache_config),
        load=LoadOptions(
            auto_complete=not (args.strict_model_config or args.disable_auto_complete_config),
            backend_settings=parse_backend_config(args.backend_config),
        ),
    )


def _cache_bytes(items: list[str]) -> int:
    from modelyard.core.response_cache import parse_cache_config

    try:
        return parse_cache_config(items)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def _setup_logging(args: argparse.Namespace) -> None:
    if args.log_verbose < 0:
        raise SystemExit(f"--log-verbose must be 0 or more, got {args.log_verbose}")
    config = logs.LogConfig(
        log_file=args.log_file,
        log_info=args.log_info,
        log_warning=args.log_warning,
        log_error=args.log_error,
        log_verbose_level=args.log_verbose,
        log_format=args.log_format,
    )
    try:
        logs.configure(config)
    except OSError as e:
        raise SystemExit(f"--log-file: cannot open '{args.log_file}': {e.strerror}") from None


async def run_server(args: argparse.Namespace, fe: FrontendOptions) -> int:
    core = InferenceServer(options_from_args(args))
    failed = await core.start()
    if failed and args.exit_on_error:
        log.error("failed to load all models: %s", ", ".join(failed))
        await core.stop()
        return 1
    frontends: list[Any] = []
    try:
        if args.allow_grpc:
            from modelyard.frontends.grpc.server import start_grpc_server

            frontends.append(
                await start_grpc_server(
                    core, args.grpc_address, args.grpc_port, fe.grpc_restrictions
                )
            )
        if args.allow_http:
            from modelyard.frontends.http.server import start_http_server

            frontends.append(
                await start_http_server(
                    core, args.http_address, args.http_port, fe.http_limits, fe.http_restrictions
                )
            )
        if args.allow_metrics:
            from modelyard.metrics.server import start_metrics_server

            frontends.append(
                await start_metrics_server(core, args.metrics_address, args.metrics_port)
            )
    except OSError as e:
        log.error("failed to start a frontend: %s", e)
        for fe in frontends:
            await _close(fe, 0.0)
        await core.stop()
        return 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down: draining in-flight requests (up to %g s)", args.exit_timeout_secs)
    _start_backstop(args.exit_timeout_secs + BACKSTOP_GRACE_S)
    # Ordered shutdown: the models drain (new requests refused) and finalize within the exit
    # timeout, or are cut off; then the connections close (every request has its answer).
    clean = await core.stop()
    for fe in frontends:
        await _close(fe, 1.0)
    return 0 if clean else 1


# Past the exit timeout, shutdown itself (cutting off, closing connections) takes a second or
# two; this much more means something in the server hangs, and the process ends anyway.
BACKSTOP_GRACE_S = 15.0


def _start_backstop(after: float) -> None:
    def run() -> None:
        time.sleep(after)
        log.error("shutdown did not finish %g s after the signal: exiting now", after)
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=run, name="modelyard-exit-backstop", daemon=True).start()


async def _close(frontend: Any, grace: float) -> None:
    try:
        try:
            await frontend.close(grace)
        except TypeError:
            await frontend.close()
    except Exception as e:  # shutting down anyway
        log.debug("closing %s: %s", frontend, e)


def serve(args: argparse.Namespace) -> int:
    _setup_logging(args)
    if args.heap_retain_mb < 0:
        raise SystemExit(f"--heap-retain-mb must be 0 or more, got {args.heap_retain_mb}")
    retain_freed_memory(args.heap_retain_mb << 20)
    fe = frontend_options(args, raise_fd_limit())
    loop = os.environ.get("MODELYARD_EVENT_LOOP", "uvloop")
    if getattr(args, "ray", ""):
        try:
            from modelyard.ray.driver import run
        except ImportError as e:
            if not (e.name or "").startswith("ray"):
                raise
            raise SystemExit(
                f"--ray needs Ray Serve, which is not installed ({e}): pip install 'modelyard[ray]'"
            ) from None
        code = run(args, fe, options_from_args(args))
    elif loop == "uvloop":
        import uvloop

        code = uvloop.run(run_server(args, fe))
    else:
        code = asyncio.run(run_server(args, fe))
    if code:
        # Cut off at the exit timeout: a model thread (in-process mode) may still hang in
        # execute or finalize, and the interpreter would wait for it at exit.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
