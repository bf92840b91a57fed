"""The tracing serve flags: ``--trace-config`` and the deprecated flags Triton 2.51 still takes
(``--trace-file``, ``--trace-level``, ``--trace-rate``, ``--trace-count``,
``--trace-log-frequency``), kept in one ordered list (``args.trace_flags``) of ``(name,
value)``: Triton prints their warnings and reports their errors in the order given, and
``modelyard.tracing.config.parse_trace_flags`` reads them so."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from modelyard.tracing.config import DEPRECATED_FLAGS, TRACE_CONFIG

DEST = "trace_flags"

_DEPRECATED_HELP = {
    "trace-file": (
        "PATH",
        "the trace file (triton mode); with --trace-log-frequency the prefix of PATH.0, "
        "PATH.1, ...",
    ),
    "trace-level": ("LEVEL", "OFF, TIMESTAMPS or TENSORS; repeatable, the levels add up"),
    "trace-rate": ("N", "trace one request in N (default: 1000)"),
    "trace-count": ("N", "stop after N traces; -1 for no limit (default: -1)"),
    "trace-log-frequency": (
        "N",
        "write every N traces to a file of their own (PATH.0, PATH.1, ...), each a whole "
        "JSON array; 0 writes PATH (default: 0)",
    ),
}


class _Ordered(argparse.Action):
    """Appends ``(flag name, value)`` to the one list all the tracing flags share."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        items = list(getattr(namespace, self.dest, None) or [])  # (never the shared default)
        items.append((self.option_strings[0][2:], str(values)))
        setattr(namespace, self.dest, items)


def add_trace_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        f"--{TRACE_CONFIG}",
        action=_Ordered,
        dest=DEST,
        default=[],
        metavar="[MODE,]SETTING=VALUE",
        help="tracing, Triton's syntax (repeatable): level=TIMESTAMPS|TENSORS|OFF, rate=N, "
        "count=N, mode=triton|opentelemetry; triton,file=PATH, triton,log-frequency=N; "
        "opentelemetry,url=HOST:PORT/v1/traces, opentelemetry,resource=KEY=VALUE, "
        "opentelemetry,bsp_max_queue_size|bsp_schedule_delay|bsp_max_export_batch_size=N",
    )
    group = s.add_argument_group(
        "deprecated trace flags",
        "Triton's older names, taken as Triton 2.51 takes them: each prints Triton's "
        "deprecation warning; they trace in triton mode (the default mode), and with "
        "--trace-config mode=opentelemetry --trace-file and --trace-log-frequency are "
        "ignored; a --trace-config setting overrides its deprecated flag (levels add up).",
    )
    for name, use in DEPRECATED_FLAGS.items():
        metavar, what = _DEPRECATED_HELP[name]
        group.add_argument(
            f"--{name}",
            action=_Ordered,
            dest=DEST,
            default=[],
            metavar=metavar,
            help=f"{what}; use --trace-config {use}",
        )
