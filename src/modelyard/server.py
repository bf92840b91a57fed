"""Composition root: builds the core, starts the frontends, handles signals and shutdown."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any

from modelyard import logs
from modelyard.cli.main import parse_backend_config
from modelyard.core.lifecycle import LoadOptions
from modelyard.core.server import InferenceServer, ServerOptions
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


async def run_server(args: argparse.Namespace) -> int:
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

            frontends.append(await start_grpc_server(core, args.grpc_address, args.grpc_port))
        if args.allow_http:
            from modelyard.frontends.http.server import start_http_server

            frontends.append(await start_http_server(core, args.http_address, args.http_port))
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
    # Ordered shutdown: stop taking new connections, drain models, then close connections.
    await core.stop()
    for fe in frontends:
        await _close(fe, 1.0)
    return 0


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
    loop = os.environ.get("MODELYARD_EVENT_LOOP", "uvloop")
    if loop == "uvloop":
        import uvloop

        return uvloop.run(run_server(args))
    return asyncio.run(run_server(args))
