"""The frontends' settings from ``modelyard serve``'s flags (cli/frontend_flags.py declares
them), checked when the server starts, with Triton's start-up errors."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import NoReturn

from modelyard.frontends.grpc.channel import GrpcChannel
from modelyard.frontends.header_forward import HeaderForward, PatternError
from modelyard.frontends.http.limits import HttpLimits, default_max_connections
from modelyard.frontends.restricted import (
    GROUPS,
    GRPC_HEADER_PREFIX,
    HTTP_GROUPS,
    RestrictionError,
    Restrictions,
    parse_restrictions,
)
from modelyard.frontends.tls import TlsError, TlsSettings, tls_settings


@dataclass
class FrontendOptions:
    http_limits: HttpLimits
    http_restrictions: Restrictions
    grpc_restrictions: Restrictions
    dashboard: bool = True  # serve /dashboard on the HTTP port
    # cli/network_flags.py's: TLS (None: plain), forwarded headers, port reuse, gRPC channel
    http_tls: TlsSettings | None = None
    grpc_tls: TlsSettings | None = None
    http_forward: HeaderForward | None = None
    grpc_forward: HeaderForward | None = None
    reuse_http_port: bool = False
    grpc_channel: GrpcChannel = field(default_factory=GrpcChannel)


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
    return FrontendOptions(
        limits,
        parsed[0],
        parsed[1],
        args.allow_dashboard,
        http_tls=_tls(args, "http"),
        grpc_tls=_tls(args, "grpc"),
        http_forward=_forward(args, "http"),
        grpc_forward=_forward(args, "grpc"),
        reuse_http_port=args.reuse_http_port,
        grpc_channel=GrpcChannel(
            keepalive_time_ms=args.grpc_keepalive_time,
            keepalive_timeout_ms=args.grpc_keepalive_timeout,
            keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
            http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
            http2_min_recv_ping_interval_without_data_ms=(
                args.grpc_http2_min_recv_ping_interval_without_data
            ),
            http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
            max_connection_age_ms=args.grpc_max_connection_age,
            max_connection_age_grace_ms=args.grpc_max_connection_age_grace,
            compression_level=args.grpc_infer_response_compression_level,
            reuse_port=args.reuse_grpc_port,
        ),
    )


def _flag_error(args: argparse.Namespace, flag: str, message: str) -> NoReturn:
    """One line naming the flag, as argparse reports a bad value, and exit code 2."""
    command = getattr(args, "command", None) or "serve"
    sys.stderr.write(f"modelyard {command}: error: argument {flag}: {message}\n")
    raise SystemExit(2)


def _tls(args: argparse.Namespace, prefix: str) -> TlsSettings | None:
    if not getattr(args, f"allow_{prefix}"):
        return None
    try:
        return tls_settings(
            prefix,
            getattr(args, f"{prefix}_use_ssl"),
            getattr(args, f"{prefix}_use_ssl_mutual"),
            getattr(args, f"{prefix}_server_cert") or "",
            getattr(args, f"{prefix}_server_key") or "",
            getattr(args, f"{prefix}_root_cert") or "",
        )
    except TlsError as e:
        _flag_error(args, e.flag, str(e))


def _forward(args: argparse.Namespace, protocol: str) -> HeaderForward | None:
    pattern: str | None = getattr(args, f"{protocol}_header_forward_pattern")
    if not pattern:
        return None
    try:
        return HeaderForward.compile(pattern)
    except PatternError as e:
        _flag_error(args, f"--{protocol}-header-forward-pattern", str(e))
