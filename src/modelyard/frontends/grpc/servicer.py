"""GRPCInferenceService: every RPC, translated to and from the core API.

Each method receives a protobuf request (ModelInfer: a ``wire.WireInferRequest``) and returns
the response message (ModelInfer: a ``wire.EncodedResponse``); core errors become gRPC
statuses through ``proto_convert.GRPC_STATUS``.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, Protocol, TypeVar

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb

from modelyard.errors import (
    InternalError,
    InvalidArgument,
    ModelyardError,
    NotFound,
    Unsupported,
)
from modelyard.frontends.grpc import extensions, proto_convert
from modelyard.frontends.grpc.stream import run_stream
from modelyard.frontends.grpc.wire import EncodedResponse, WireInferRequest
from modelyard.frontends.header_forward import HeaderForward
from modelyard.serving.cuda_regions import cuda_unsupported
from modelyard.tracing.settings import parse_update
from modelyard.tracing.trace import AFTER, Trace
from modelyard.tracing.tracer import Tracer
from modelyard.types import InferRequest, InferResponse

log = logging.getLogger("modelyard")

DECOUPLED_UNSUPPORTED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_REPOSITORY_NAME_UNSUPPORTED = "'repository_name' specification is not supported"


class Core(Protocol):
    """The part of ``core.api.InferenceServer`` this frontend uses (``shm_*`` optional)."""

    def is_live(self) -> bool: ...
    def is_ready(self) -> bool: ...
    def server_metadata(self) -> dict[str, Any]: ...
    async def check_ready(self) -> bool: ...
    async def check_model_ready(self, name: str, version: str = "") -> bool: ...
    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]: ...
    def model_config(self, name: str, version: str = "") -> Any: ...
    def is_decoupled(self, name: str, version: str = "") -> bool: ...
    async def infer(self, request: InferRequest) -> InferResponse: ...
    def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]: ...
    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]: ...
    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None: ...
    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...
    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]: ...
    def get_log_settings(self) -> dict[str, Any]: ...
    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]: ...
    @property
    def tracer(self) -> Tracer: ...
    def get_trace_settings(self, model: str = "") -> dict[str, Any]: ...
    def update_trace_settings(self, model: str, settings: dict[str, Any]) -> dict[str, Any]: ...


async def abort(context: Any, error: BaseException) -> NoReturn:
    """End the call with the gRPC status for ``error`` (unexpected errors: INTERNAL)."""
    if not isinstance(error, ModelyardError):
        log.exception("gRPC handler failed", exc_info=error)
        error = InternalError(f"{type(error).__name__}: {error}")
    await context.abort(proto_convert.grpc_status(error.code), error.message)
    raise AssertionError("unreachable")  # context.abort raises


_R = TypeVar("_R")
_Handler = Callable[[Any, Any, Any], Awaitable[_R]]


def _rpc(fn: _Handler[_R]) -> _Handler[_R]:
    """Turn a ModelyardError (or a bug) raised by a unary handler into a gRPC status."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Any) -> _R:
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await abort(context, e)

    return wrapper


class InferenceServicer:
    """Implements every RPC of ``inference.GRPCInferenceService``."""

    def __init__(self, core: Core, forward: HeaderForward | None = None) -> None:
        self._core = core
        self._forward = forward  # --grpc-header-forward-pattern

    # -- health and metadata -----------------------------------------------------------------

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self._core.is_live())

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=await self._core.check_ready())

    @_rpc
    async def ModelReady(self, request: Any, context: Any) -> Any:
        version = proto_convert.check_version(request.version)
        ready = await self._core.check_model_ready(request.name, version)
        return pb.ModelReadyResponse(ready=ready)

    @_rpc
    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        md = self._core.server_metadata()
        return pb.ServerMetadataResponse(
            name=md.get("name", ""),
            version=md.get("version", ""),
            extensions=md.get("extensions", []),
        )

    @_rpc
    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        version = proto_convert.check_version(request.version)
        md = self._core.model_metadata(request.name, version)
        response = pb.ModelMetadataResponse(
            name=md.get("name", ""),
            versions=[str(v) for v in md.get("versions", [])],
            platform=md.get("platform", ""),
        )
        for key, target in (("inputs", response.inputs), ("outputs", response.outputs)):
            for io in md.get(key, []):
                target.add(
                    name=io.get("name", ""),
                    datatype=io.get("datatype", ""),
                    shape=[int(d) for d in io.get("shape", [])],
                )
        return response

    @_rpc
    async def ModelConfig(self, request: Any, context: Any) -> Any:
        version = proto_convert.check_version(request.version)
        config = self._core.model_config(request.name, version)
        response = pb.ModelConfigResponse()
        try:
            response.config.CopyFrom(config)
        except TypeError:  # a ModelConfig class from another module: go through the wire
            response.config.MergeFromString(config.SerializeToString())
        return response

    # -- inference ---------------------------------------------------------------------------

    async def ModelInfer(
        self, request: WireInferRequest, context: Any, trace: Trace | None = None
    ) -> EncodedResponse:
        tracer = self._core.tracer
        if trace is None and tracer.on:  # with tracing off, the one check a request pays
            trace = tracer.sample(request.msg.model_name, context.invocation_metadata() or ())
            if trace is not None:
                trace.event("GRPC_WAITREAD_START", 0, AFTER)
                trace.event("GRPC_WAITREAD_END", 0, AFTER)
                try:
                    reply = await self.ModelInfer(request, context, trace)
                    trace.event("GRPC_SEND_END", 0, AFTER)
                    return reply
                finally:
                    trace.release()
        try:
            if request.error:  # the body was not a ModelInferRequest
                raise InvalidArgument(request.error)
            # Triton's order: version string, transaction policy, then parameters and inputs.
            msg = request.msg
            version = proto_convert.check_version(msg.model_version) if msg.model_version else ""
            if self._core.is_decoupled(msg.model_name, version):
                raise Unsupported(DECOUPLED_UNSUPPORTED)
            decoded = proto_convert.decode_infer_request(request)
            if self._forward is not None:
                decoded.request.parameters.update(self._forward.grpc(context.invocation_metadata()))
            if trace is not None:
                decoded.request.trace = trace
            response = await self._core.infer(decoded.request)
            if trace is not None:
                trace.event("INFER_RESPONSE_COMPLETE", 0, AFTER)
                trace.event("GRPC_SEND_START", 0, AFTER)
            if response.error is not None:
                raise response.error
            if decoded.classification:
                extensions.classify_outputs(self._core, response, decoded.classification)
            return proto_convert.encode_infer_response(response)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await abort(context, e)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[WireInferRequest], context: Any
    ) -> AsyncIterator[Any]:
        async for response in run_stream(self._core, request_iterator, context, self._forward):
            yield response

    # -- statistics --------------------------------------------------------------------------

    @_rpc
    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        version = proto_convert.check_version(request.version)
        stats = await self._core.statistics(request.name, version)
        return json_format.ParseDict(
            stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True
        )

    # -- repository --------------------------------------------------------------------------

    @_rpc
    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise Unsupported(_REPOSITORY_NAME_UNSUPPORTED)
        index = await self._core.repository_index(ready_only=request.ready)
        response = pb.RepositoryIndexResponse()
        for entry in index:
            response.models.add(
                name=entry.get("name", ""),
                version=str(entry.get("version", "")),
                state=entry.get("state", ""),
                reason=entry.get("reason", ""),
            )
        return response

    @_rpc
    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise Unsupported(_REPOSITORY_NAME_UNSUPPORTED)
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, param in request.parameters.items():
            which = param.WhichOneof("parameter_choice")
            if key == "config":
                if which != "string_param":
                    raise InvalidArgument(
                        f"invalid value type for load parameter '{key}', expected string_param."
                    )
                config = param.string_param
            elif key.startswith("file:"):
                if which != "bytes_param":
                    raise InvalidArgument(
                        f"invalid value type for load parameter '{key}', expected bytes_param."
                    )
                files[key] = param.bytes_param  # the core checks the path
            else:
                raise InvalidArgument(f"unrecognized load parameter '{key}'.")
        await self._core.load_model(request.model_name, config, files or None)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise Unsupported(_REPOSITORY_NAME_UNSUPPORTED)
        unload_dependents = False
        if "unload_dependents" in request.parameters:
            param = request.parameters["unload_dependents"]
            if param.WhichOneof("parameter_choice") != "bool_param":
                raise InvalidArgument(
                    "invalid value type for 'unload_dependents' parameter, expected bool_param."
                )
            unload_dependents = param.bool_param
        await self._core.unload_model(request.model_name, unload_dependents)
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory -----------------------------------------------------------------------

    @_rpc
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        status = getattr(self._core, "shm_status", None)
        if status is None:
            if request.name:
                raise NotFound(f"Unable to find system shared memory region: '{request.name}'")
            regions: list[dict[str, Any]] = []
        else:
            regions = await _maybe_await(status(request.name))
        response = pb.SystemSharedMemoryStatusResponse()
        for r in regions:
            response.regions[r["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(
                    name=r["name"],
                    key=r.get("key", ""),
                    offset=int(r.get("offset", 0)),
                    byte_size=int(r.get("byte_size", 0)),
                )
            )
        return response

    @_rpc
    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        register = getattr(self._core, "shm_register", None)
        if register is None:
            raise Unsupported("system shared memory is not supported by this server yet")
        await _maybe_await(register(request.name, request.key, request.offset, request.byte_size))
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc
    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        unregister = getattr(self._core, "shm_unregister", None)
        if unregister is not None:
            await _maybe_await(unregister(request.name))
        return pb.SystemSharedMemoryUnregisterResponse()

    @_rpc
    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        cuda_status = getattr(self._core, "cuda_shm_status", None)
        if cuda_status is not None:
            regions: list[dict[str, Any]] = await _maybe_await(cuda_status(request.name))
        elif request.name:
            raise NotFound(f"Unable to find cuda shared memory region: '{request.name}'")
        else:
            regions = []
        response = pb.CudaSharedMemoryStatusResponse()
        for r in regions:
            response.regions[r["name"]].CopyFrom(
                pb.CudaSharedMemoryStatusResponse.RegionStatus(
                    name=r["name"], device_id=int(r["device_id"]), byte_size=int(r["byte_size"])
                )
            )
        return response

    @_rpc
    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        register = getattr(self._core, "cuda_shm_register", None)
        if register is None:
            raise cuda_unsupported(request.name)
        # (as in Triton, the handle's bytes go to the core as they came; see cuda_regions.py)
        args = (request.name, request.raw_handle, request.device_id, request.byte_size)
        await _maybe_await(register(*args))
        return pb.CudaSharedMemoryRegisterResponse()

    @_rpc
    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        unregister = getattr(self._core, "cuda_shm_unregister", None)
        if unregister is not None:
            await _maybe_await(unregister(request.name))
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and log settings --------------------------------------------------------------

    @_rpc
    async def TraceSetting(self, request: Any, context: Any) -> Any:
        model = request.model_name
        if request.settings:
            if model:  # Triton checks the model before the settings
                self._core.get_trace_settings(model)
            raw: dict[str, Any] = {}
            for key, setting in request.settings.items():
                values = list(setting.value)
                if key == "trace_file":
                    raise Unsupported(
                        "trace file location can not be updated through network protocol"
                    )
                if not values:
                    raw[key] = None  # clear: fall back to the global setting
                elif key == "trace_level":
                    raw[key] = values
                elif len(values) == 1:
                    raw[key] = values[0]
                else:
                    raise InvalidArgument(f"expect only 1 value for '{key}'")
            update = parse_update(raw, grpc=True)
            settings = self._core.update_trace_settings(model, update)
        else:
            settings = self._core.get_trace_settings(model)
        response = pb.TraceSettingResponse()
        for key, value in settings.items():
            values = value if isinstance(value, list) else [value]
            response.settings[key].value.extend(str(v) for v in values)
        return response

    @_rpc
    async def LogSettings(self, request: Any, context: Any) -> Any:
        if request.settings:
            settings = self._core.update_log_settings(_log_update(request.settings))
        else:
            settings = self._core.get_log_settings()
        response = pb.LogSettingsResponse()
        for key, value in settings.items():
            target = response.settings[key]
            if isinstance(value, bool):
                target.bool_param = value
            elif isinstance(value, int):
                target.uint32_param = value
            else:
                target.string_param = str(value)
        return response


# Log setting -> the LogSettingsRequest.SettingValue member it must use, and the word Triton
# uses in its error message.
_LOG_TYPES = {
    "log_info": ("bool_param", "boolean"),
    "log_warning": ("bool_param", "boolean"),
    "log_error": ("bool_param", "boolean"),
    "log_verbose_level": ("uint32_param", "int32"),
    "log_format": ("string_param", "string"),
}


def _log_update(settings: Any) -> dict[str, Any]:
    """LogSettingsRequest.settings as a dict, checked as Triton checks it (unknown keys are
    ignored; a wrong value type is INVALID_ARGUMENT)."""
    if "log_file" in settings:
        raise Unsupported("log file location can not be updated through network protocol")
    update: dict[str, Any] = {}
    for key, (member, word) in _LOG_TYPES.items():
        if key not in settings:
            continue
        value = settings[key]
        if value.WhichOneof("parameter_choice") != member:
            raise InvalidArgument(f"expect {word} for '{key}'")
        update[key] = getattr(value, member)
    if "log_format" in update and update["log_format"] not in ("default", "ISO8601"):
        raise InvalidArgument(f"invalid argument for log_format, got: {update['log_format']}")
    return update


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value
