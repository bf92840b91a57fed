"""The frontends' settings, typed (``modelyard serve``'s flags, cli/frontend_flags.py and
cli/network_flags.py, read by ``modelyard.server_config``), and the checks of their values
with Triton's start-up errors."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Endpoint:
    """One of Triton's endpoints (HTTP, gRPC, metrics): served or not, and where."""

    allow: bool  # --allow-<name>
    address: str  # --<name>-address
    port: int  # --<name>-port (0: any free port)


@dataclass(frozen=True)
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
    # --http-max-connections; None: half the open-file limit, known once the server has
    # raised it (at_fd_limit)
    http_max_connections: int | None = None

    def at_fd_limit(self, fd_limit: int) -> FrontendOptions:
        """These settings with the HTTP connection cap the open-file limit allows, where
        ``--http-max-connections`` was not given."""
        if self.http_max_connections is not None:
            return self
        cap = default_max_connections(fd_limit)
        return dataclasses.replace(
            self, http_limits=dataclasses.replace(self.http_limits, max_connections=cap)
        )


class FlagError(ValueError):
    """A flag's value the server cannot start with: reported as argparse reports one."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


def check_max_input_size(size: int) -> None:
    if size <= 0:
        raise SystemExit("Error: --http-max-input-size must be greater than 0.")


def restrictions(
    http_api: Sequence[str], grpc_protocol: Sequence[str]
) -> tuple[Restrictions, Restrictions]:
    """``--http-restricted-api`` and ``--grpc-restricted-protocol``; SystemExit with
    Triton's message for a bad one."""
    flags = (
        ("http-restricted-api", http_api, "api", "", HTTP_GROUPS),
        ("grpc-restricted-protocol", grpc_protocol, "protocol", GRPC_HEADER_PREFIX, GROUPS),
    )
    parsed: list[Restrictions] = []
    for option, values, kind, prefix, known in flags:
        try:
            parsed.append(parse_restrictions(list(values), option, kind, prefix, known))
        except RestrictionError as e:
            raise SystemExit(f'Bad option: "--{option}".\n{e}') from None
    return parsed[0], parsed[1]


def tls(
    prefix: str, served: bool, use_ssl: bool, mutual: bool, cert: str, key: str, root: str
) -> TlsSettings | None:
    """``--<prefix>-use-ssl`` and its files, read only when the endpoint is served; FlagError
    naming the flag at fault."""
    if not served:
        return None
    try:
        return tls_settings(prefix, use_ssl, mutual, cert, key, root)
    except TlsError as e:
        raise FlagError(e.flag, str(e)) from None


def forward(protocol: str, pattern: str) -> HeaderForward | None:
    """``--<protocol>-header-forward-pattern`` (None when empty); FlagError for a bad one."""
    if not pattern:
        return None
    try:
        return HeaderForward.compile(pattern)
    except PatternError as e:
        raise FlagError(f"--{protocol}-header-forward-pattern", str(e)) from None
