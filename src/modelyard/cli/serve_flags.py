"""``modelyard serve``'s command line, declared once: the CLI's ``serve`` and ``dev``
subcommands and :meth:`modelyard.server_config.ServerConfig.from_args` (a server started from
Python) all parse with these declarations, so a flag's default lives here and nowhere else."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from modelyard.cli.cloud_flags import add_cloud_flags
from modelyard.cli.frontend_flags import add_frontend_flags
from modelyard.cli.metrics_flags import add_metrics_flags
from modelyard.cli.openai_flags import add_openai_flags
from modelyard.cli.rate_limit_flags import add_rate_limit_flags
from modelyard.cli.ray_flags import add_ray_flags
from modelyard.cli.trace_flags import add_trace_flags
from modelyard.cli.values import add_bool_flag, count, positive_int
from modelyard.config.placement import DEFAULT_MIN_COMPUTE_CAPABILITY
from modelyard.heap import DEFAULT_RETAIN_MB


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{value}'") from None


def _gpu_bytes(value: str) -> tuple[int, int]:
    """Triton's ``<GPU id>:<bytes>``."""
    gpu, sep, size = value.partition(":")
    try:
        pair = (int(gpu), int(size))
    except ValueError:
        pair = (-1, -1)
    if not sep or pair[0] < 0 or pair[1] < 0:
        raise argparse.ArgumentTypeError(f"expected <GPU id>:<bytes>, got '{value}'")
    return pair


def _config_name(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("empty argument")
    if any(c.isspace() for c in value):
        raise argparse.ArgumentTypeError(f"'{value}' contains a space")
    return value


def add_config_name(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model-config-name",
        type=_config_name,
        default=None,
        metavar="NAME",
        help="load each model's configs/NAME.pbtxt where it has one, else its config.pbtxt",
    )


class HelpFormatter(argparse.HelpFormatter):
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
        "allow clients to register shared-memory regions (system: keys under /dev/shm; CUDA)",
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
    add_config_name(s)
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
    s.add_argument(
        "--cuda-memory-pool-byte-size",
        type=_gpu_bytes,
        action="append",
        default=[],
        metavar="GPU:BYTES",
        help="accepted for Triton's command lines; no effect (GPU tensors pass between "
        "processes in place, by CUDA IPC, with no pool to size); repeatable",
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


def add_serve_arguments(s: argparse.ArgumentParser) -> None:
    """Everything ``serve`` takes: its optional REPOSITORY, the serve flags and ``--ray``'s."""
    s.add_argument(
        "repository",
        metavar="REPOSITORY",
        nargs="?",
        help="the model repository to serve (or --model-repository, Triton's flag)",
    )
    add_serve_flags(s, repository_required=False)
    add_ray_flags(s)  # (not dev's: the dev server is one process)
    s.set_defaults(command="serve")


def parse_serve_args(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` as ``modelyard serve`` parses it (what follows ``serve`` on its command line);
    a bad flag exits as the command does (one line naming it, exit code 2)."""
    parser = argparse.ArgumentParser(prog="modelyard serve", formatter_class=HelpFormatter)
    add_serve_arguments(parser)
    return parser.parse_args(list(argv))
