"""Composition root: `serve(ServerConfig)` builds the core, starts the frontends, handles signals
and shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from modelyard import logs
from modelyard.core.api import InferenceServer
from modelyard.devices import supported_gpus
from modelyard.event_loops import wants_uvloop
from modelyard.fdlimit import raise_fd_limit
from modelyard.frontends.base import Frontend
from modelyard.frontends.cloud.options import check_environment, cloud_options
from modelyard.heap import retain_freed_memory
from modelyard.server_config import ServerConfig

log = logging.getLogger("modelyard")


def _setup_logging(config: logs.LogConfig) -> None:
    try:
        logs.configure(dataclasses.replace(config))  # (a copy: v2/logging changes its own)
    except OSError as e:
        raise SystemExit(f"--log-file: cannot open '{config.log_file}': {e.strerror}") from None


async def start_frontends(core: InferenceServer, config: ServerConfig) -> list[Frontend]:
    """Bind and start the endpoints the configuration asks for (before any model loads: they
    answer live while models load, and a port that cannot be had stops the start at once).
    Raises FrontendError, one line naming the endpoint, address and cause; nothing stays
    bound."""
    _check_ports(config)
    fe, http, grpc = config.frontends, config.endpoints.http, config.endpoints.grpc
    metrics = config.endpoints.metrics
    frontends: list[Frontend] = []
    try:
        if grpc.allow:
            from modelyard.frontends.grpc.server import start_grpc_server

            grpc_start = start_grpc_server(
                core,
                grpc.address,
                grpc.port,
                fe.grpc_restrictions,
                fe.grpc_channel,
                fe.grpc_tls,
                fe.grpc_forward,
            )
            frontends.append(await _bind("gRPC service", grpc.address, grpc.port, grpc_start))
        if http.allow:
            from modelyard.frontends.http.server import start_http_server

            http_start = start_http_server(
                core,
                http.address,
                http.port,
                fe.http_limits,
                fe.http_restrictions,
                fe.dashboard,
                fe.http_tls,
                fe.http_forward,
                fe.reuse_http_port,
            )
            frontends.append(await _bind("HTTP service", http.address, http.port, http_start))
        if metrics.allow:
            from modelyard.metrics.server import start_metrics_server

            metrics_start = start_metrics_server(core, metrics.address, metrics.port)
            frontends.append(
                await _bind("metrics service", metrics.address, metrics.port, metrics_start)
            )
        openai = config.openai
        if openai is not None:
            from modelyard.frontends.openai.server import start_openai_server

            start = start_openai_server(core, openai, fe.http_limits)
            frontends.append(await _bind("OpenAI service", openai.address, openai.port, start))
        cloud = cloud_options(config.cloud)  # (checked in serve())
        if cloud.sagemaker is not None:
            from modelyard.frontends.cloud.sagemaker import start_sagemaker_server

            sm = cloud.sagemaker
            starting = start_sagemaker_server(core, sm, fe.http_limits)
            frontends.append(await _bind("SageMaker service", sm.address, sm.port, starting))
        if cloud.vertex is not None:
            from modelyard.frontends.cloud.vertex import start_vertex_server

            vx = cloud.vertex
            serving = start_vertex_server(core, vx, fe.http_limits)
            frontends.append(await _bind("Vertex AI service", vx.address, vx.port, serving))
    except BaseException:
        for frontend in frontends:
            await _close(frontend, 0.0)
        raise
    return frontends


class FrontendError(Exception):
    """An endpoint could not be started (its port is taken, its address is not ours...)."""


async def _bind(what: str, host: str, port: int, start: Any) -> Any:
    try:
        return await start
    except OSError as e:
        raise FrontendError(
            f"failed to start a frontend: the {what} cannot listen on {host}:{port}: "
            f"{_bind_problem(host, port, e)}"
        ) from None


def _check_ports(config: ServerConfig) -> None:
    """A port another process listens on stops the start before anything binds (gRPC would
    print lines of its own first)."""
    e, fe = config.endpoints, config.frontends
    for what, endpoint, reuse_port in (
        ("gRPC service", e.grpc, fe.grpc_channel.reuse_port),
        ("HTTP service", e.http, fe.reuse_http_port),
        ("metrics service", e.metrics, False),
    ):
        host, port = endpoint.address, endpoint.port
        if endpoint.allow and port:
            problem = _probe(host, port, reuse_port)
            if problem is not None:
                raise FrontendError(
                    f"failed to start a frontend: the {what} cannot listen on {host}:{port}: "
                    f"{_words(problem)}"
                )
    openai = config.openai
    if openai is not None and openai.port and (problem := _probe(openai.address, openai.port)):
        raise FrontendError(
            "failed to start a frontend: the OpenAI service cannot listen on "
            f"{openai.address}:{openai.port}: {_words(problem)}"
        )


def _probe(host: str, port: int, reuse_port: bool = False) -> OSError | None:
    """Bind ``host:port`` as the servers do (SO_REUSEADDR: only a listener holds it;
    ``reuse_port``: SO_REUSEPORT, as ``--reuse-http-port``/``--reuse-grpc-port`` bind)."""
    import socket

    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as e:
        return e
    for family, kind, proto, _name, address in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                probe.bind(address)
        except OSError as e:
            return e
    return None


def _bind_problem(host: str, port: int, error: OSError) -> str:
    """Why ``host:port`` cannot be bound, in a few words (gRPC's own error does not say)."""
    if error.errno is None and port:
        error = _probe(host, port) or error
    return _words(error)


def _words(error: OSError) -> str:
    import errno

    if error.errno == errno.EADDRINUSE:
        return "address already in use"
    return error.strerror or str(error)


def missing_repositories(paths: list[str]) -> list[str]:
    """One line for each ``--model-repository`` that is not a folder."""
    out = []
    for path in paths:
        if not os.path.exists(path):
            out.append(f"model repository '{path}' does not exist")
        elif not os.path.isdir(path):
            out.append(f"model repository '{path}' is not a folder")
    return out


INITIAL_LOAD_DONE = logs.INITIAL_LOAD_DONE  # the line tests and tools wait for


async def run_server(config: ServerConfig, setup: Any | None = None) -> int:
    """Serve until SIGINT/SIGTERM: the endpoints first (live, not ready), then the models,
    then the ready server; then the ordered shutdown. ``config`` is as ``serve`` completes
    it (``at_start``). ``setup(core)``, when given, runs once the models are loaded (the dev
    server starts watching there) and may return an object with an async ``close()``, closed
    before the shutdown."""
    core = InferenceServer(config.core)
    try:
        core.tracer.start()  # (the exporter's settings, checked before anything binds)
    except ValueError as e:
        log.error("%s", e)
        return 1
    try:
        frontends = await start_frontends(core, config)
    except FrontendError as e:
        log.error("%s", e)
        return 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    _forget_signals_when_forked()
    started = time.monotonic()
    loading = asyncio.ensure_future(core.start())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({loading, stopped}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    load_failed = False
    extra = None
    interrupted = not loading.done()
    if interrupted:
        log.info("stopping while the models load")
        _start_backstop(config.core.exit_timeout + BACKSTOP_GRACE_S)
        loading.cancel()
        await asyncio.gather(loading, return_exceptions=True)
    else:
        failed = loading.result()
        ready = sum(1 for e in core.registry.entries.values() if e.versions)
        log.info(
            "%s in %.2f s: %d model(s) ready, %d failed%s",
            INITIAL_LOAD_DONE,
            time.monotonic() - started,
            ready,
            len(failed),
            f" ({', '.join(failed)})" if failed else "",
        )
        if failed and config.core.exit_on_error:
            log.error("failed to load all models: %s", ", ".join(failed))
            stop.set()
            code, load_failed = 1, True
        elif (problem := await _frontends_loaded(frontends)) is not None:
            log.error("%s", problem)
            stop.set()
            code = 1
        elif setup is not None:
            extra = await setup(core)
        await stop.wait()
    stopped.cancel()
    if extra is not None:
        await extra.close()
    log.info("shutting down: draining in-flight requests (up to %g s)", config.core.exit_timeout)
    if not interrupted:
        _start_backstop(config.core.exit_timeout + BACKSTOP_GRACE_S)
    # Ordered shutdown: the models drain (new requests refused) and finalize within the exit
    # timeout, or are cut off; then the connections close (every request has its answer).
    clean = await core.stop()
    for frontend in frontends:
        await _close(frontend, 1.0)
    log.info("stopped")
    if load_failed:  # Triton's last words when a start-up load failed
        print("error: creating server: Internal - failed to load all models", file=sys.stderr)
    return code or (0 if clean else 1)


async def _frontends_loaded(frontends: list[Frontend]) -> str | None:
    """Why an endpoint that Triton starts only once the models are loaded (Vertex AI's, for
    its default model) cannot serve, or None."""
    for frontend in frontends:
        hook = getattr(frontend, "models_loaded", None)
        if hook is not None and (problem := await hook()) is not None:
            return str(problem)
    return None


# Past the exit timeout, shutdown itself (cutting off, closing connections) takes a second or
# two; this much more means something in the server hangs, and the process ends anyway.
BACKSTOP_GRACE_S = 15.0
_fork_hook = False


def _forget_signals_when_forked() -> None:
    """A process forked from the server (an in-process model's ``multiprocessing`` pool) gets
    the default signal handling back: it inherits the loop's wake-up socket, through which
    the SIGTERM that ends a pool's worker would otherwise reach the server's loop and stop
    the server."""
    global _fork_hook
    if not _fork_hook:
        _fork_hook = True
        os.register_at_fork(after_in_child=_default_signals)


def _default_signals() -> None:
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # (the forking thread is the child's main thread: not expected)
        pass


def _start_backstop(after: float) -> None:
    def run() -> None:
        time.sleep(after)
        log.error("shutdown did not finish %g s after the signal: exiting now", after)
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=run, name="modelyard-exit-backstop", daemon=True).start()


async def _close(frontend: Frontend, grace: float) -> None:
    try:
        await frontend.close(grace)
    except Exception as e:  # shutting down anyway
        log.debug("closing %s: %s", frontend, e)


def at_start(config: ServerConfig) -> ServerConfig:
    """``config`` completed with what the running process says: the HTTP connection cap
    from the open-file limit (raised here) and the GPUs models may use."""
    load = dataclasses.replace(config.core.load, gpus=supported_gpus(config.min_compute_capability))
    return dataclasses.replace(
        config,
        frontends=config.frontends.at_fd_limit(raise_fd_limit()),
        core=dataclasses.replace(config.core, load=load),
    )


def serve(config: ServerConfig, setup: Any | None = None) -> int:
    """Run the server ``config`` describes until SIGINT/SIGTERM (``modelyard serve``; from
    Python: ``serve(ServerConfig.from_args([...]))``); returns the exit code. ``setup``: see
    run_server."""
    _setup_logging(config.log)
    for line in config.warnings:
        log.warning("%s", line)
    problems = missing_repositories(config.core.repositories)
    if problems:
        for problem in problems:
            log.error("%s", problem)
        return 1
    retain_freed_memory(config.heap_retain_mb << 20)
    config = at_start(config)
    check_environment(config.cloud)
    if config.ray is not None:
        try:
            from modelyard.ray.driver import run
        except ImportError as e:
            if not (e.name or "").startswith("ray"):
                raise
            raise SystemExit(
                f"--ray needs Ray Serve, which is not installed ({e}): pip install 'modelyard[ray]'"
            ) from None
        code = run(config)
    elif wants_uvloop():
        import uvloop

        code = uvloop.run(run_server(config, setup))
    else:
        code = asyncio.run(run_server(config, setup))
    if code:
        # Cut off at the exit timeout: a model thread (in-process mode) may still hang in
        # execute or finalize, and the interpreter would wait for it at exit.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
