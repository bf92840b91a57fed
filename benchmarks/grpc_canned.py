"""gRPC servers that answer ModelInfer with a canned response: the steps below a real server.

    python benchmarks/grpc_canned.py KIND PORT MODEL

KIND:

* ``aio``: grpc.aio on uvloop (modelyard's stack), a handler that parses the request
  (``ModelInferRequest.FromString``) and returns a prebuilt response: grpcio's floor;
* ``pool``: the same from grpcio's thread-pool server;
* ``frontend``: modelyard's own gRPC frontend (``start_grpc_server``: its servicer, request
  decoding and response encoding) on a core whose ``infer`` returns prebuilt outputs.

MODEL is ``add_sub`` (outputs FP32 [4]) or ``add_sub_batched`` (FP32 [1, 4]). Prints ``ready``
once serving. Run it with the environment the server would have (``GRPC_EXPERIMENTS`` ...).
"""

from __future__ import annotations

import asyncio
import sys
from concurrent import futures
from typing import Any, cast

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

SERVICE = "inference.GRPCInferenceService"
OUTPUTS = ("OUTPUT0", "OUTPUT1")


def output_shape(model: str) -> tuple[int, ...]:
    return (1, 4) if model == "add_sub_batched" else (4,)


def canned_response(model: str) -> bytes:
    response = service_pb2.ModelInferResponse(model_name=model, model_version="1")
    for name in OUTPUTS:
        response.outputs.add(name=name, datatype="FP32", shape=output_shape(model))
        response.raw_output_contents.append(np.arange(4, dtype=np.float32).tobytes())
    return response.SerializeToString()  # type: ignore[no-any-return]


def _generic(handler: Any) -> Any:
    method = grpc.unary_unary_rpc_method_handler(
        handler, request_deserializer=service_pb2.ModelInferRequest.FromString
    )
    return grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": method})


async def _serve_aio(port: int, model: str) -> None:
    canned = canned_response(model)

    async def infer(request: Any, context: Any) -> bytes:
        return canned

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_generic(infer),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


def _serve_pool(port: int, model: str) -> None:
    canned = canned_response(model)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((_generic(lambda request, context: canned),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


class CannedCore:
    """Just enough of the core for ModelInfer: every request gets the same outputs."""

    def __init__(self, model: str) -> None:
        from modelyard.tracing.tracer import Tracer
        from modelyard.types import Tensor

        data = np.arange(4, dtype=np.float32).reshape(output_shape(model))
        self._outputs = [Tensor(name, "FP32", data.shape, data) for name in OUTPUTS]
        self.tracer = Tracer()  # off: the frontend's one check per request

    def is_ready(self) -> bool:
        return True

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return False

    async def infer(self, request: Any) -> Any:
        from modelyard.types import InferResponse

        return InferResponse(request.model_name, "1", request.id, self._outputs)


async def _serve_frontend(port: int, model: str) -> None:
    from modelyard.frontends.grpc.server import start_grpc_server
    from modelyard.frontends.grpc.servicer import Core

    server = await start_grpc_server(cast(Core, CannedCore(model)), "127.0.0.1", port)
    print("ready", flush=True)
    await asyncio.Event().wait()
    await server.close()


def main() -> None:
    kind, port, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind not in ("aio", "pool", "frontend"):
        raise SystemExit(f"unknown KIND {kind!r}: aio, pool or frontend")
    if kind == "pool":
        _serve_pool(port, model)
        return
    import uvloop

    uvloop.run(_serve_aio(port, model) if kind == "aio" else _serve_frontend(port, model))


if __name__ == "__main__":
    main()
