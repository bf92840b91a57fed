"""`modelyard serve` flags for the frontends' limits and access control.

``--http-restricted-api`` / ``--grpc-restricted-protocol`` and ``--http-max-input-size`` are
Triton's, with Triton's start-up errors; the other limits are modelyard's (Triton leaves
them to libevhtp). Values are checked when the server starts (``frontends/options.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from modelyard.cli.network_flags import add_network_flags
from modelyard.frontends.http.limits import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_INPUT_SIZE,
    DEFAULT_READ_TIMEOUT_S,
)
from modelyard.frontends.restricted import (
    GROUPS,
    GRPC_HEADER_PREFIX,
    HTTP_GROUPS,
)


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    def parse(value: str) -> int | float:
        try:
            n = kind(value)
        except ValueError:
            n = 0
        if not n > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got '{value}'")
        return n

    return parse


def add_frontend_flags(s: argparse.ArgumentParser) -> None:
    allowed = ", ".join(GROUPS)
    s.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="API[,API...]:KEY=VALUE",
        help="restrict HTTP APIs to requests carrying header KEY with VALUE "
        f"(else 403); repeatable; APIs: {', '.join(HTTP_GROUPS)}",
    )
    s.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="PROTOCOL[,PROTOCOL...]:KEY=VALUE",
        help="restrict gRPC protocols to calls carrying metadata "
        f"'{GRPC_HEADER_PREFIX}KEY' with VALUE (else UNAVAILABLE); repeatable; "
        f"protocols: {allowed}",
    )
    s.add_argument(
        "--http-max-input-size",
        type=int,
        default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest JSON part, JSON input, raw binary body and decompressed body "
        "of an HTTP request (Triton's flag)",
    )
    s.add_argument(
        "--http-max-header-size",
        type=_positive(int),
        metavar="BYTES",
        default=DEFAULT_MAX_HEADER_SIZE,
        help="largest HTTP request line and headers (else 431)",
    )
    s.add_argument(
        "--http-max-body-size",
        type=_positive(int),
        metavar="BYTES",
        default=DEFAULT_MAX_BODY_SIZE,
        help="largest HTTP request body as sent (else 413)",
    )
    s.add_argument(
        "--http-max-connections",
        type=_positive(int),
        metavar="N",
        default=None,
        help="open HTTP connections at most; one more is answered 503 (default: "
        "half the open-file limit, at most 10000)",
    )
    s.add_argument(
        "--http-read-timeout",
        type=_positive(float),
        metavar="SECONDS",
        default=DEFAULT_READ_TIMEOUT_S,
        help="longest pause while an HTTP request is being received, and before a "
        "new connection's first request (else 408 and close)",
    )
    s.add_argument(
        "--http-idle-timeout",
        type=_positive(float),
        metavar="SECONDS",
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="how long an idle keep-alive HTTP connection stays open",
    )
    add_network_flags(s)  # TLS, gRPC channel settings, forwarded headers, port reuse
