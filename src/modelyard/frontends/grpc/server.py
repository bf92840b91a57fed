"""The gRPC endpoint: ``inference.GRPCInferenceService`` on grpc.aio (plus grpc.health.v1
when grpcio-health-checking is installed)."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from tritonclient.grpc import service_pb2

from modelyard.frontends.grpc.servicer import Core, InferenceServicer
from modelyard.frontends.grpc.wire import EncodedResponse, parse_infer_request

log = logging.getLogger("modelyard")

SERVICE_NAME = "inference.GRPCInferenceService"
INT32_MAX = 2**31 - 1

_OPTIONS = [
    ("grpc.max_send_message_length", INT32_MAX),
    ("grpc.max_receive_message_length", INT32_MAX),
    # A port another process holds must fail to bind, not be shared.
    ("grpc.so_reuseport", 0),
]


def method_handlers(servicer: InferenceServicer) -> dict[str, Any]:
    """One handler per RPC of the service (from the generated descriptor, so none is missed).

    ModelInfer and ModelStreamInfer use the wire-level (de)serializers of ``wire.py``.
    """
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    handlers: dict[str, Any] = {}
    for method in service.methods:
        fn = getattr(servicer, method.name)
        if method.name == "ModelInfer":
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=parse_infer_request,
                response_serializer=EncodedResponse.serialize,
            )
        elif method.name == "ModelStreamInfer":
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                fn,
                request_deserializer=parse_infer_request,
                response_serializer=EncodedResponse.serialize_stream,
            )
        elif method.client_streaming or method.server_streaming:
            raise RuntimeError(f"unexpected streaming RPC {method.full_name}")
        else:
            request_cls = getattr(service_pb2, method.input_type.name)
            response_cls = getattr(service_pb2, method.output_type.name)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=request_cls.FromString,
                response_serializer=response_cls.SerializeToString,
            )
    return handlers


def _add_health(server: Any, core: Core) -> bool:
    """Register grpc.health.v1.Health (SERVING while the core is ready), if installed."""
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError:
        return False
    except Exception as e:  # e.g. protobuf VersionError: built for a newer protobuf runtime
        log.warning("grpc.health.v1 not served: grpcio-health-checking does not load: %s", e)
        return False

    class HealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
        async def Check(self, request: Any, context: Any) -> Any:
            status = health_pb2.HealthCheckResponse
            return status(status=status.SERVING if core.is_ready() else status.NOT_SERVING)

    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(), server)
    return True


class GrpcServer:
    def __init__(self, server: Any, host: str, port: int, health: bool = False) -> None:
        self._server = server
        self.host = host
        self.port = port
        self.health = health  # grpc.health.v1.Health is served

    async def close(self, grace: float = 1.0) -> None:
        """Stop accepting calls; calls still running after ``grace`` seconds are cancelled."""
        await self._server.stop(grace)

    def __repr__(self) -> str:
        return f"GrpcServer({self.host}:{self.port})"


async def start_grpc_server(core: Core, host: str, port: int) -> GrpcServer:
    """Bind ``host:port`` (0 picks a free port), start serving, and log the bound address.

    Raises OSError when the address cannot be bound.
    """
    server = grpc.aio.server(options=_OPTIONS)
    handlers = method_handlers(InferenceServicer(core))
    # Generic handlers only: grpc.aio keeps one pending request-call per *registered* method
    # and waits on all of them (asyncio.wait) for every incoming call. With the service's 20
    # methods that cost ~125k instructions per ModelInfer, more than the servicer's own work.
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    health = _add_health(server, core)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:
        raise OSError(f"failed to bind the gRPC service to {address}: {e}") from e
    if not bound:
        raise OSError(f"failed to bind the gRPC service to {address}")
    await server.start()
    log.info("Started GRPCInferenceService at %s:%d", host, bound)
    return GrpcServer(server, host, bound, health)
