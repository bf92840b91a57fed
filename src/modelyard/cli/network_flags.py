"""`modelyard serve` flags for what faces the network: TLS (gRPC's as Triton 2.51 takes them,
HTTPS beyond Triton with the same options), gRPC's channel settings, forwarding headers as
request parameters, and port reuse. Checked when the server starts (frontends/options.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from modelyard.cli.values import parse_bool
from modelyard.frontends.grpc.channel import COMPRESSION_LEVELS, GrpcChannel

_DEFAULTS = GrpcChannel()
_NAMES = {"http": "HTTP", "grpc": "gRPC"}


class _MutualAction(argparse.Action):
    """``--<p>-use-ssl-mutual`` also sets ``--<p>-use-ssl`` to true, whatever its own value,
    in command-line order (Triton's parser does the same)."""

    def __init__(self, *args: Any, implies: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.implies = implies

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, self.implies, True)


def _bool_flag(s: argparse.ArgumentParser, name: str, help: str, **kwargs: Any) -> None:
    s.add_argument(
        name,
        type=parse_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help=f"{help} (default: false)",
        **kwargs,
    )


def _level(value: str) -> str:
    return value.strip().lower()


def _tls_flags(s: argparse.ArgumentParser, prefix: str, note: str) -> None:
    what = _NAMES[prefix]
    _bool_flag(s, f"--{prefix}-use-ssl", f"serve {what} over TLS{note}")
    _bool_flag(
        s,
        f"--{prefix}-use-ssl-mutual",
        f"serve {what} over TLS and require client certificates the root certificate "
        f"signed; implies --{prefix}-use-ssl{note}",
        action=_MutualAction,
        implies=f"{prefix}_use_ssl",
    )
    for name, holds in (
        ("server-cert", "the server's PEM certificate (chain)"),
        ("server-key", "the server's PEM private key"),
        ("root-cert", "the PEM root certificate that verifies client certificates"),
    ):
        s.add_argument(
            f"--{prefix}-{name}",
            default=None,
            metavar="PATH",
            help=f"file holding {holds}; read only with --{prefix}-use-ssl",
        )


def add_network_flags(s: argparse.ArgumentParser) -> None:
    _tls_flags(s, "grpc", "")
    _tls_flags(s, "http", ", beyond Triton")
    for protocol in ("http", "grpc"):
        s.add_argument(
            f"--{protocol}-header-forward-pattern",
            default=None,
            metavar="REGEX",
            help=f"{_NAMES[protocol]} request headers whose "
            "names match REGEX (any case, anywhere in the name) reach the model as string "
            "request parameters",
        )
        _bool_flag(
            s,
            f"--reuse-{protocol}-port",
            f"let several servers listen on the {_NAMES[protocol]} port (SO_REUSEPORT; "
            "every one of them must set it)",
        )
    s.add_argument(
        "--grpc-infer-response-compression-level",
        type=_level,
        choices=COMPRESSION_LEVELS,
        default=_DEFAULTS.compression_level,
        help="compress ModelInfer and ModelStreamInfer responses (low: gzip; medium, "
        "high: deflate)",
    )
    s.add_argument(
        "--grpc-infer-allocation-pool-size",
        type=int,
        default=8,
        metavar="N",
        help="accepted for Triton's command lines; no effect (nothing is pooled)",
    )
    for name, field, help in (
        ("keepalive-time", "keepalive_time_ms", "ms between keepalive pings on a connection"),
        ("keepalive-timeout", "keepalive_timeout_ms", "ms to wait for a keepalive ping's ack"),
        (
            "http2-max-pings-without-data",
            "http2_max_pings_without_data",
            "pings sent without data between them (0: no limit)",
        ),
        (
            "http2-min-recv-ping-interval-without-data",
            "http2_min_recv_ping_interval_without_data_ms",
            "shortest ms between a client's pings without data; a shorter one is a strike",
        ),
        (
            "http2-max-ping-strikes",
            "http2_max_ping_strikes",
            "bad pings tolerated before GOAWAY (0: any number)",
        ),
        ("max-connection-age", "max_connection_age_ms", "ms a connection may live (0: forever)"),
        (
            "max-connection-age-grace",
            "max_connection_age_grace_ms",
            "ms calls may still take once a connection is past its age (0: unset)",
        ),
    ):
        s.add_argument(
            f"--grpc-{name}",
            type=int,
            default=getattr(_DEFAULTS, field),
            metavar="MS" if field.endswith("_ms") else "N",
            help=help,
        )
    _bool_flag(
        s,
        "--grpc-keepalive-permit-without-calls",
        "let clients send keepalive pings while no call is in flight",
    )
