"""`modelyard` command line: `modelyard serve` takes Triton's flag names and defaults."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from modelyard.bench.args import add_parser as add_bench_parser
from modelyard.cli.grpc_environment import SERVING_COMMANDS, apply_grpc_environment
from modelyard.cli.serve_flags import (
    HelpFormatter,
    add_config_name,
    add_serve_arguments,
    add_serve_flags,
)


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
    s = sub.add_parser("serve", help="run the inference server", formatter_class=HelpFormatter)
    add_serve_arguments(s)
    d = sub.add_parser(
        "dev",
        help="serve a repository in-process and reload the models you edit",
        description="Serve REPOSITORY in this process (so breakpoint() and debuggers stop in "
        "execute), watch it, and reload each model whose files change; a broken edit keeps "
        "the last good version serving. Takes serve's flags.",
        formatter_class=HelpFormatter,
    )
    d.add_argument("repository", metavar="REPOSITORY", help="the model repository to serve")
    add_serve_flags(d, repository_required=False, dev=True)
    d.set_defaults(model_namespacing=False, ray="")  # (one process, models by folder name)
    c = sub.add_parser(
        "check",
        help="check that every model of a repository would load",
        description="Check every model of REPOSITORY as loading would: config parsing, "
        "normalisation and validation, auto-complete, and model.py imported in a separate "
        "process (initialize and finalize too with --load). One line per model; the exit "
        "code is 1 when any model is broken.",
        formatter_class=HelpFormatter,
    )
    c.add_argument("repository", metavar="REPOSITORY", help="the model repository to check")
    add_config_name(c)
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


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command in SERVING_COMMANDS:
        apply_grpc_environment(os.environ)  # (in case grpc is not imported yet: see run())
        from modelyard.server_config import config_from_args

        config = config_from_args(args)
        if args.command == "serve":
            from modelyard.server import serve

            sys.exit(serve(config))
        from modelyard.dev import run_dev

        sys.exit(run_dev(config))
    if args.command == "check":
        from modelyard.check import CheckConfig, run_check
        from modelyard.config.backend_settings import parse_backend_config

        check = CheckConfig(
            repository=Path(args.repository),
            config_name=args.model_config_name or "",
            backend_settings=parse_backend_config(args.backend_config),
            load=args.load,
            verbose=args.verbose,
        )
        sys.exit(run_check(check))
    if args.command == "bench":
        from modelyard.bench.runner import run

        sys.exit(run(args))


if __name__ == "__main__":
    main()
