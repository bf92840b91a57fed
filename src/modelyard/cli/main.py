"""`modelyard` command line: `modelyard serve` takes Triton's flag names and defaults."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import MutableMapping, Sequence

from modelyard.bench.args import add_parser as add_bench_parser
from modelyard.cli.cloud_flags import add_cloud_flags, default_repository
from modelyard.cli.frontend_flags import add_frontend_flags
from modelyard.cli.metrics_flags import add_metrics_flags
from modelyard.cli.openai_flags import add_openai_flags
from modelyard.cli.rate_limit_flags import add_rate_limit_flags
from modelyard.cli.ray_flags import add_ray_flags
from modelyard.cli.trace_flags import add_trace_flags
from modelyard.cli.values import add_bool_flag, count, positive_int
from modelyard.config.placement import DEFAULT_MIN_COMPUTE_CAPABILITY
from modelyard.heap import DEFAULT_RETAIN_MB

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


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{value}'") from None


def _config_name(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("empty argument")
    if any(c.isspace() for c in value):
        raise argparse.ArgumentTypeError(f"'{value}' contains a space")
    return value


def _add_config_name(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model-config-name",
        type=_config_name,
        default=None,
        metavar="NAME",
        help="load each model's configs/NAME.pbtxt where it has one, else its config.pbtxt",
    )


class _HelpFormatter(argparse.HelpFormatter):
    """Shows each default once: a help text that already names its default keeps its own
    words; others get "(default: X)" where there is a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "(default" in text
            or not action.option_strings
            or default is None
            or default is argparse.SUPPRESS
            or default is False
            or default == []
        ):
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    import modelyard

    parser = argparse.ArgumentParser(
        prog="modelyard",
        description=(
            "Serve Triton Inference Server model repositories (Python backend, BLS) over "
            "Triton's HTTP and gRPC protocol."
        ),
    )
    parser.add_argument("--version", action="version", version=f"modelyard {modelyard.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the inference server", formatter_class=_HelpFormatter)
    s.add_argument(
        "repository",
        metavar="REPOSITORY",
        nargs="?",
        help="the model repository to serve (or --model-repository, Triton's flag)",
    )
    add_serve_flags(s, repository_required=False)
    add_ray_flags(s)  # (not dev's: the dev server is one process)
    d = sub.add_parser(
        "dev",
        help="serve a repository in-process and reload the models you edit",
        description="Serve REPOSITORY in this process (so breakpoint() and debuggers stop in "
        "execute), watch it, and reload each model whose files change; a broken edit keeps "
        "the last good version serving. Takes serve's flags.",
        formatter_class=_HelpFormatter,
    )
    d.add_argument("repository", metavar="REPOSITORY", help="the model repository to serve")
    add_serve_flags(d, repository_required=False, dev=True)
    c = sub.add_parser(
        "check",
        help="check that every model of a repository would load",
        description="Check every model of REPOSITORY as loading would: config parsing, "
        "normalisation and validation, auto-complete, and model.py imported in a separate "
        "process (initialize and finalize too with --load). One line per model; the exit "
        "code is 1 when any model is broken.",
        formatter_class=_HelpFormatter,
    )
    c.add_argument("repository", metavar="REPOSITORY", help="the model repository to check")
    _add_config_name(c)
    c.add_argument(
        "--load",
        action="store_true",
        help="also load each model (its initialize runs, then finalize)",
    )
    c.add_argument(
        "--backend-config",
        action="append",
        default=[],
        metavar="BACKEND,KEY=VALUE",
        help="backend setting, as serve takes it; repeatable",
    )
    c.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the server's log (to stderr) while checking",
    )
    add_bench_parser(sub)
    return parser


def add_serve_flags(
    s: argparse.ArgumentParser, repository_required: bool = True, dev: bool = False
) -> None:
    """``serve``'s flags (``dev`` takes them too, its repository as an argument, and keeps
    serving when a model fails to load)."""
    s.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        default=[],
        dest="model_repository",
        metavar="PATH",
        required=repository_required,
        help="model repository folder; repeat for several",
    )
    s.add_argument("--http-port", type=int, default=8000, help="HTTP port (0 picks a free one)")
    s.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (0 picks a free one)")
    s.add_argument("--http-address", default="0.0.0.0", help="address the HTTP server binds")
    s.add_argument("--grpc-address", default="0.0.0.0", help="address the gRPC server binds")
    add_frontend_flags(s)
    add_openai_flags(s)
    add_bool_flag(s, "--allow-http", True, "serve HTTP/REST")
    add_bool_flag(s, "--allow-grpc", True, "serve gRPC")
    add_bool_flag(
        s, "--allow-dashboard", True, "serve the read-only dashboard at /dashboard (HTTP port)"
    )
    add_bool_flag(
        s,
        "--allow-client-shm",
        True,
        "allow clients to register system shared-memory regions (keys under /dev/shm)",
    )
    add_metrics_flags(s)
    add_cloud_flags(s)  # (after --allow-http and --allow-grpc: AIP_MODE changes their defaults)
    s.add_argument(
        "--cache-config",
        action="append",
        default=[],
        metavar="CACHE,KEY=VALUE",
        help="response cache, Triton's syntax: local,size=BYTES enables an LRU "
        "cache for models with response_cache { enable: true }",
    )
    add_trace_flags(s)
    add_rate_limit_flags(s)
    s.add_argument(
        "--model-control-mode",
        choices=["none", "explicit", "poll"],
        default="none",
        help="none: load every model at start; explicit: only --load-model and the "
        "repository API load models; poll: load every model and reload what "
        "changes in the repositories",
    )
    s.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="with explicit mode, a model to load at start ('*' for all); repeatable",
    )
    s.add_argument(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        help="how often poll mode rescans the repositories (seconds, may be fractional)",
    )
    s.add_argument(
        "--model-load-thread-count",
        type=positive_int,
        default=4,
        help="at most this many models load at once; the others wait",
    )
    s.add_argument(
        "--model-load-retry-count",
        type=count,
        default=0,
        metavar="N",
        help="load a version whose instances fail to start up to N more times",
    )
    if not dev:  # (dev reloads models by folder name)
        add_bool_flag(
            s,
            "--model-namespacing",
            False,
            "each --model-repository a namespace: a name several of them hold is a model in "
            "each (a request by that name alone is refused as ambiguous)",
        )
    _add_config_name(s)
    add_bool_flag(
        s,
        "--strict-model-config",
        False,
        "require complete config.pbtxt files (turns auto-complete off)",
    )
    s.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not auto-complete model configurations",
    )
    add_bool_flag(s, "--strict-readiness", True, "server ready only when every model is ready")
    s.add_argument(
        "--backend-config",
        action="append",
        default=[],
        metavar="BACKEND,KEY=VALUE",
        help="backend setting, e.g. python,default-max-batch-size=8 or "
        "python,shm-enabled=false; repeatable",
    )
    s.add_argument(
        "--min-supported-compute-capability",
        type=_number,
        default=DEFAULT_MIN_COMPUTE_CAPABILITY,
        metavar="X.Y",
        help="GPUs below this CUDA compute capability are not used (KIND_GPU and KIND_AUTO "
        "instance groups)",
    )
    add_bool_flag(
        s,
        "--exit-on-error",
        not dev,
        "exit (code 1) when a model fails to load at start-up",
    )
    s.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="on shutdown, how long in-flight requests may take before cancellation",
    )
    s.add_argument(
        "--heap-retain-mb",
        type=int,
        default=DEFAULT_RETAIN_MB,
        help="free memory (MiB) the server keeps mapped for reuse, so large tensors do not "
        "page-fault on every request; 0 keeps glibc's defaults",
    )
    s.add_argument("--log-verbose", type=int, default=0, help="verbose log level (0 = off)")
    add_bool_flag(s, "--log-info", True, "log info lines")
    add_bool_flag(s, "--log-warning", True, "log warnings")
    add_bool_flag(s, "--log-error", True, "log errors")
    s.add_argument(
        "--log-format",
        choices=["default", "ISO8601"],
        default="default",
        help="time stamp format of log lines",
    )
    s.add_argument(
        "--log-file",
        default="",
        metavar="PATH",
        help="append the log to this file instead of stderr",
    )
    s.add_argument("--id", default="triton", help="server id reported in server metadata")


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        if args.repository:  # as dev and check take it
            args.model_repository.insert(0, args.repository)
        default_repository(args)  # AIP_STORAGE_URI, when none is given
        if not args.model_repository:
            sys.stderr.write(
                "modelyard serve: error: no model repository: modelyard serve REPOSITORY "
                "(or --model-repository PATH)\n"
            )
            sys.exit(2)
        apply_grpc_environment(os.environ)
        from modelyard.server import serve

        sys.exit(serve(args))
    if args.command == "dev":
        apply_grpc_environment(os.environ)
        from modelyard.dev import run_dev

        sys.exit(run_dev(args))
    if args.command == "check":
        from modelyard.check import run_check

        sys.exit(run_check(args))
    if args.command == "bench":
        from modelyard.bench.runner import run

        sys.exit(run(args))


if __name__ == "__main__":
    main()
