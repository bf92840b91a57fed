"""The frontends' settings from ``modelyard serve``'s flags (cli/frontend_flags.py declares
them), checked when the server starts, with Triton's start-up errors."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from modelyard.frontends.http.limits import HttpLimits, default_max_connections
from modelyard.frontends.restricted import (
    GROUPS,
    GRPC_HEADER_PREFIX,
    HTTP_GROUPS,
    RestrictionError,
    Restrictions,
    parse_restrictions,
)


@dataclass
class FrontendOptions:
    http_limits: HttpLimits
    http_restrictions: Restrictions
    grpc_restrictions: Restrictions
    dashboard: bool = True  # serve /dashboard on the HTTP port


def frontend_options(args: argparse.Namespace, fd_limit: int) -> FrontendOptions:
    """The frontends' settings; raises SystemExit with Triton's message for a bad value."""
    if args.http_max_input_size <= 0:
        raise SystemExit("Error: --http-max-input-size must be greater than 0.")
    limits = HttpLimits(
        max_input_size=args.http_max_input_size,
        max_header_size=args.http_max_header_size,
        max_body_size=args.http_max_body_size,
        read_timeout=args.http_read_timeout,
        idle_timeout=args.http_idle_timeout,
        max_connections=args.http_max_connections or default_max_connections(fd_limit),
    )
    flags = (
        ("http-restricted-api", args.http_restricted_api, "api", "", HTTP_GROUPS),
        (
            "grpc-restricted-protocol",
            args.grpc_restricted_protocol,
            "protocol",
            GRPC_HEADER_PREFIX,
            GROUPS,
        ),
    )
    parsed: list[Restrictions] = []
    for option, values, kind, prefix, known in flags:
        try:
            parsed.append(parse_restrictions(values, option, kind, prefix, known))
        except RestrictionError as e:
            raise SystemExit(f'Bad option: "--{option}".\n{e}') from None
    return FrontendOptions(limits, parsed[0], parsed[1], args.allow_dashboard)
