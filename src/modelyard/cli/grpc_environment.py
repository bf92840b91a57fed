"""The environment ``modelyard serve`` and ``modelyard dev`` give gRPC. grpc reads it when it
is first imported, and the command line's own modules import it (model configuration is
tritonclient's protobuf), so the command applies it before importing them
(``modelyard.cli.entry.run``): this module imports nothing that imports grpc."""

from __future__ import annotations

from collections.abc import MutableMapping

# gRPC settings read from the environment when grpc is first imported, so set before that.
GRPC_ENVIRONMENT = {
    # gRPC's fork handlers can crash a child forked (to exec a model worker) while the gRPC
    # server's threads run: worker spawns during a reload then failed now and then. The
    # child execs at once, so it needs none of them.
    "GRPC_ENABLE_FORK_SUPPORT": "false",
    # Since grpcio 1.80, EventEngine threads do the sockets' I/O and then wake grpc.aio's
    # poller thread, which wakes the event loop: one thread hop more per completion than when
    # the poller does the I/O itself. Without it (benchmarks/grpc_floor.py, add_sub, A/B):
    # p50 -9 % in process mode, -15 % in-process, and ~15 % less server CPU per request.
    "GRPC_EXPERIMENTS": "-event_engine_listener,-event_engine_for_all_other_endpoints",
}


def apply_grpc_environment(environ: MutableMapping[str, str]) -> None:
    """Add ``GRPC_ENVIRONMENT`` to ``environ``; a value already set there wins."""
    for key, value in GRPC_ENVIRONMENT.items():
        environ.setdefault(key, value)


SERVING_COMMANDS = ("serve", "dev")
