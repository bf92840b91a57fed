"""The gRPC endpoint: ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` (its
Check, as Triton serves it) on grpc.aio. Messages up to INT32_MAX bytes either way, as
Triton's ``SetMaxMessageSize(MAX_GRPC_MESSAGE_SIZE)``; each method guarded by access.py
(malformed bodies, ``--grpc-restricted-protocol``). TLS (``--grpc-use-ssl``...), the channel
settings and inference response compression as Triton sets them (channel.py, ../tls.py)."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2

from modelyard.frontends.grpc.access import (
    METHOD_GROUPS,
    Streaming,
    Unary,
    guard_stream,
    guard_unary,
    tolerant,
)
from modelyard.frontends.grpc.channel import GrpcChannel
from modelyard.frontends.grpc.servicer import Core, InferenceServicer
from modelyard.frontends.grpc.wire import EncodedResponse, parse_infer_request
from modelyard.frontends.header_forward import HeaderForward
from modelyard.frontends.restricted import Restrictions
from modelyard.frontends.tls import TlsSettings, grpc_credentials

log = logging.getLogger("modelyard")

SERVICE_NAME = "inference.GRPCInferenceService"
HEALTH_SERVICE_NAME = "grpc.health.v1.Health"
INT32_MAX = 2**31 - 1

_OPTIONS = [
    ("grpc.max_send_message_length", INT32_MAX),
    ("grpc.max_receive_message_length", INT32_MAX),
]
_COMPRESSION = {"gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}


# grpc.aio applies a call's compression with its initial metadata, which a unary response
# otherwise carries along without it: the metadata goes first, on its own.


def _compressed_unary(fn: Unary, algorithm: grpc.Compression) -> Unary:
    async def call(request: Any, context: Any) -> Any:
        context.set_compression(algorithm)
        await context.send_initial_metadata(())
        return await fn(request, context)

    return call


def _compressed_stream(fn: Streaming, algorithm: grpc.Compression) -> Streaming:
    async def call(request_iterator: Any, context: Any) -> Any:
        context.set_compression(algorithm)
        await context.send_initial_metadata(())
        async for response in fn(request_iterator, context):
            yield response

    return call


def method_handlers(
    servicer: InferenceServicer,
    restrictions: Restrictions | None = None,
    compression: str | None = None,
) -> dict[str, Any]:
    """One handler per RPC of the service (from the generated descriptor, so none is missed).

    ModelInfer and ModelStreamInfer use the wire-level (de)serializers of ``wire.py``; they
    report a malformed body themselves and are wrapped only when restricted or their
    responses are compressed (``compression``: gzip or deflate), off the hot path otherwise.
    """
    restrictions = restrictions or Restrictions()
    algorithm = _COMPRESSION[compression] if compression else None
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    handlers: dict[str, Any] = {}
    for method in service.methods:
        fn = getattr(servicer, method.name)
        restriction = restrictions.get(METHOD_GROUPS[method.name])
        if method.name == "ModelInfer":
            if algorithm is not None:
                fn = _compressed_unary(fn, algorithm)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                guard_unary(fn, restriction) if restriction else fn,
                request_deserializer=parse_infer_request,
                response_serializer=EncodedResponse.serialize,
            )
        elif method.name == "ModelStreamInfer":
            if algorithm is not None:
                fn = _compressed_stream(fn, algorithm)
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                guard_stream(fn, restriction) if restriction else fn,
                request_deserializer=parse_infer_request,
                response_serializer=EncodedResponse.serialize_stream,
            )
        elif method.client_streaming or method.server_streaming:
            raise RuntimeError(f"unexpected streaming RPC {method.full_name}")
        else:
            request_cls = getattr(service_pb2, method.input_type.name)
            response_cls = getattr(service_pb2, method.output_type.name)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                guard_unary(fn, restriction),
                request_deserializer=tolerant(request_cls.FromString),
                response_serializer=response_cls.SerializeToString,
            )
    return handlers


def health_handlers(core: Core, restrictions: Restrictions | None = None) -> dict[str, Any]:
    """grpc.health.v1.Health: Check answers SERVING while the core is ready, whatever the
    service name; Watch is not served (UNIMPLEMENTED), as in Triton."""
    response = health_pb2.HealthCheckResponse

    async def check(request: Any, context: Any) -> Any:
        ready = await core.check_ready()
        return response(status=response.SERVING if ready else response.NOT_SERVING)

    restriction = (restrictions or Restrictions()).get(METHOD_GROUPS["Check"])
    return {
        "Check": grpc.unary_unary_rpc_method_handler(
            guard_unary(check, restriction),
            request_deserializer=tolerant(health_pb2.HealthCheckRequest.FromString),
            response_serializer=response.SerializeToString,
        )
    }


class GrpcServer:
    def __init__(self, server: Any, host: str, port: int) -> None:
        self._server = server
        self.host = host
        self.port = port

    async def close(self, grace: float = 1.0) -> None:
        """Stop accepting calls; calls still running after ``grace`` seconds are cancelled."""
        await self._server.stop(grace)

    def __repr__(self) -> str:
        return f"GrpcServer({self.host}:{self.port})"


async def start_grpc_server(
    core: Core,
    host: str,
    port: int,
    restrictions: Restrictions | None = None,
    channel: GrpcChannel | None = None,
    tls: TlsSettings | None = None,
    forward: HeaderForward | None = None,
) -> GrpcServer:
    """Bind ``host:port`` (0 picks a free port), start serving, and log the bound address.
    ``channel``: Triton's channel settings (defaults: Triton's); ``tls``: serve over TLS;
    ``forward``: the headers that become request parameters.

    Raises OSError when the address cannot be bound.
    """
    channel = channel or GrpcChannel()
    arguments = channel.arguments()
    log.debug("gRPC channel arguments: %s", ", ".join(f"{k}={v}" for k, v in arguments))
    server = grpc.aio.server(options=[*_OPTIONS, *arguments])
    servicer = InferenceServicer(core, forward)
    compression = channel.response_algorithm()
    # Generic handlers only: grpc.aio keeps one pending request-call per *registered* method
    # and waits on all of them (asyncio.wait) for every incoming call. With the service's 20
    # methods that cost ~125k instructions per ModelInfer, more than the servicer's own work.
    for name, handlers in (
        (SERVICE_NAME, method_handlers(servicer, restrictions, compression)),
        (HEALTH_SERVICE_NAME, health_handlers(core, restrictions)),
    ):
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, grpc_credentials(tls))
    except RuntimeError as e:
        raise OSError(f"failed to bind the gRPC service to {address}: {e}") from e
    if not bound:
        raise OSError(f"failed to bind the gRPC service to {address}")
    await server.start()
    log.info("Started GRPCInferenceService at %s:%d", host, bound)
    return GrpcServer(server, host, bound)
