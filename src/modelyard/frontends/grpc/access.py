"""What guards each gRPC method: malformed request bodies and restricted protocols.

* A request body that does not parse as the method's message answers INVALID_ARGUMENT
  (``Unable to parse request: ...``); the deserializers here never raise, so grpc does not
  turn the failure into UNKNOWN.
* ``--grpc-restricted-protocol``: a method of a restricted group answers UNAVAILABLE
  ``This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'`` unless the
  call's metadata carries that key with the exact value. As in Triton, a body that does not
  parse is reported before the restriction, and a stream is refused before it reads.

``METHOD_GROUPS`` is Triton's table (``grpc_server.cc``), grpc.health.v1's Check included.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from modelyard.frontends import restricted as groups
from modelyard.frontends.grpc.wire import WireInferRequest, unparsable

METHOD_GROUPS: dict[str, str] = {
    "ServerLive": groups.HEALTH,
    "ServerReady": groups.HEALTH,
    "ModelReady": groups.HEALTH,
    "Check": groups.HEALTH,  # grpc.health.v1.Health
    "ServerMetadata": groups.METADATA,
    "ModelMetadata": groups.METADATA,
    "ModelConfig": groups.MODEL_CONFIG,
    "ModelStatistics": groups.STATISTICS,
    "TraceSetting": groups.TRACE,
    "LogSettings": groups.LOGGING,
    "SystemSharedMemoryStatus": groups.SHARED_MEMORY,
    "SystemSharedMemoryRegister": groups.SHARED_MEMORY,
    "SystemSharedMemoryUnregister": groups.SHARED_MEMORY,
    "CudaSharedMemoryStatus": groups.SHARED_MEMORY,
    "CudaSharedMemoryRegister": groups.SHARED_MEMORY,
    "CudaSharedMemoryUnregister": groups.SHARED_MEMORY,
    "RepositoryIndex": groups.MODEL_REPOSITORY,
    "RepositoryModelLoad": groups.MODEL_REPOSITORY,
    "RepositoryModelUnload": groups.MODEL_REPOSITORY,
    "ModelInfer": groups.INFERENCE,
    "ModelStreamInfer": groups.INFERENCE,
}

Unary = Callable[[Any, Any], Awaitable[Any]]
Streaming = Callable[[Any, Any], AsyncIterator[Any]]


class Malformed:
    """What a tolerant deserializer returns for a body that does not parse."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def tolerant(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """A request deserializer that returns Malformed instead of raising."""

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:  # protobuf's DecodeError, or anything a broken body causes
            return Malformed(unparsable(e))

    return deserialize


def _malformed(request: Any) -> bool:
    return type(request) is Malformed or (type(request) is WireInferRequest and bool(request.error))


def _allowed(context: Any, restriction: groups.Restriction) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == restriction.header:  # the first one counts
            return bool(value == restriction.value)
    return False


def _refusal(restriction: groups.Restriction) -> str:
    return f"This protocol is restricted, expecting header '{restriction.header}'"


def guard_unary(fn: Unary, restriction: groups.Restriction | None) -> Unary:
    """``fn`` answering INVALID_ARGUMENT for a Malformed request (ModelInfer reports its own)
    and, when restricted, UNAVAILABLE for a call without the header."""

    async def guarded(request: Any, context: Any) -> Any:
        if type(request) is Malformed:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.error)
        if (
            restriction is not None
            and not _malformed(request)
            and not _allowed(context, restriction)
        ):
            await context.abort(grpc.StatusCode.UNAVAILABLE, _refusal(restriction))
        return await fn(request, context)

    return guarded


def guard_stream(fn: Streaming, restriction: groups.Restriction) -> Streaming:
    """A restricted bidirectional stream: refused before it reads a message."""

    async def guarded(request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        if not _allowed(context, restriction):
            await context.abort(grpc.StatusCode.UNAVAILABLE, _refusal(restriction))
        async for response in fn(request_iterator, context):
            yield response

    return guarded
