"""The gRPC endpoint's channel settings from Triton 2.51's flags, with Triton's defaults
(``grpc_server.h`` ``KeepAliveOptions``), as grpc core channel arguments.

Triton always sets the keepalive and HTTP/2 ping arguments, and the connection-age ones
only when they are not 0. Its defaults are grpc core's own, so a setting is passed here only
where it differs from them: the same channel, and a faster one (see ``arguments``).
``--grpc-infer-response-compression-level`` compresses ModelInfer and ModelStreamInfer
responses: grpc core picks, among the algorithms the client accepts, gzip for ``low`` and
deflate for ``medium`` and ``high`` (its ranking of gzip and deflate; every grpc client
accepts both).
"""

from __future__ import annotations

from dataclasses import dataclass

COMPRESSION_LEVELS = ("none", "low", "medium", "high")
# grpc core's defaults for a server's keepalive and ping arguments (chttp2 transport), which
# are also Triton's defaults for its flags
GRPC_SERVER_DEFAULTS = {
    "grpc.keepalive_time_ms": 7_200_000,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.keepalive_permit_without_calls": 0,
    "grpc.http2.max_pings_without_data": 2,
    "grpc.http2.min_ping_interval_without_data_ms": 300_000,
    "grpc.http2.max_ping_strikes": 2,
}
# grpc core's choice for a level when the client accepts gzip and deflate
_ALGORITHM = {"low": "gzip", "medium": "deflate", "high": "deflate"}


@dataclass(frozen=True)
class GrpcChannel:
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int = 0  # 0: not set
    max_connection_age_grace_ms: int = 0  # 0: not set
    compression_level: str = "none"  # one of COMPRESSION_LEVELS
    reuse_port: bool = False  # SO_REUSEPORT: several servers on one port

    def arguments(self) -> list[tuple[str, int]]:
        """grpc core channel arguments: Triton's settings, each where it differs from grpc
        core's own default for a server (Triton's defaults are those defaults). Passing a
        default explicitly changes nothing it promises, yet measured 10-19 % on a gRPC
        request's p50 (benchmarks/RESULTS.md)."""
        settings = [
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.http2_max_pings_without_data),
            (
                "grpc.http2.min_ping_interval_without_data_ms",
                self.http2_min_recv_ping_interval_without_data_ms,
            ),
            ("grpc.http2.max_ping_strikes", self.http2_max_ping_strikes),
        ]
        args = [("grpc.so_reuseport", int(self.reuse_port))]
        args += [(k, v) for k, v in settings if GRPC_SERVER_DEFAULTS[k] != v]
        if self.max_connection_age_ms != 0:
            args.append(("grpc.max_connection_age_ms", self.max_connection_age_ms))
        if self.max_connection_age_grace_ms != 0:
            args.append(("grpc.max_connection_age_grace_ms", self.max_connection_age_grace_ms))
        return args

    def response_algorithm(self) -> str | None:
        """The algorithm inference responses are compressed with (None: not compressed)."""
        return _ALGORITHM.get(self.compression_level)
