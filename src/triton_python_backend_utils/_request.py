"""InferenceRequest (received by execute, or built by the model for BLS), PreferredMemory,
InferenceTrace."""

from __future__ import annotations

import asyncio
import enum
import inspect
import operator
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, overload

from ._errors import TritonModelException
from ._response import (
    InferenceResponse,
    InferenceResponseSender,
    ResponseIterator,
    check_parameters,
    check_sequence,
    params_json,
)
from ._runtime import require_runtime
from ._tensor import Tensor

__all__ = ["InferenceRequest", "InferenceTrace", "MemoryType", "PreferredMemory"]

RELEASE_ALL = 1
_UINT32 = (1 << 32) - 1
_UINT64 = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class MemoryType(enum.IntEnum):
    """pb_utils memory types (note: GPU=0, CPU=1, unlike TRITONSERVER_MemoryType)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


class PreferredMemory:
    """Where a BLS call would like its outputs: ``PreferredMemory(TRITONSERVER_MEMORY_CPU, 0)``.

    The server reads ``_memory_type`` (a MemoryType, or None for no preference) and
    ``_device_id``.
    """

    __slots__ = ("_device_id", "_memory_type")

    _memory_type: MemoryType | None
    _device_id: int

    def __init__(self, preferred_memory_type: MemoryType, preferred_device_id: int = 0) -> None:
        if not isinstance(preferred_memory_type, MemoryType):
            raise TypeError(
                "PreferredMemory(): 'preferred_memory_type' must be "
                "TRITONSERVER_MEMORY_CPU or TRITONSERVER_MEMORY_GPU, got "
                f"{type(preferred_memory_type).__name__}"
            )
        self._memory_type = preferred_memory_type
        self._device_id = _as_int(
            preferred_device_id, "preferred_device_id", _INT64_MIN, _INT64_MAX
        )

    @classmethod
    def _no_preference(cls) -> PreferredMemory:
        pm = cls.__new__(cls)
        pm._memory_type = None
        pm._device_id = 0
        return pm


class InferenceTrace:
    """The trace of a request (``request.trace()``); only ``get_context()`` is public."""

    __slots__ = ("_context",)

    _context: str | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("triton_python_backend_utils.InferenceTrace: No constructor defined!")

    @classmethod
    def _from_server(cls, context: str | None = None) -> InferenceTrace:
        trace = cls.__new__(cls)
        trace._context = context
        return trace

    def get_context(self) -> str | None:
        """The trace context (a JSON string), or None when tracing is off."""
        return self._context


_NO_PREFERENCE = PreferredMemory._no_preference()
_NO_TRACE = InferenceTrace._from_server(None)


class _Required:
    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()


class InferenceRequest:
    """A request: the ones ``execute`` receives, or one the model builds for BLS.

    ``InferenceRequest(request_id="", correlation_id=0, inputs, requested_output_names,
    model_name, model_version=-1, flags=0, timeout=0, preferred_memory=<none>, trace=<none>,
    parameters=None)`` -- ``inputs``, ``requested_output_names`` and ``model_name`` are
    required; ``timeout`` is in microseconds.
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_compact",
        "_correlation_id",
        "_flags",
        "_inputs",
        "_model_name",
        "_model_version",
        "_params",
        "_params_json",
        "_preferred_memory",
        "_release_flags",
        "_request_id",
        "_requested_output_names",
        "_response_sender",
        "_timeout",
        "_trace",
    )

    _request_id: str
    _correlation_id: int | str
    _inputs: list[Tensor]
    _requested_output_names: set[str]
    _model_name: str
    _model_version: int
    _flags: int
    _timeout: int
    _preferred_memory: PreferredMemory
    _trace: InferenceTrace
    _params: dict[str, Any] | None
    _params_json: str | None
    _compact: bool
    _response_sender: InferenceResponseSender | None
    _release_flags: int

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = _REQUIRED,
        requested_output_names: Sequence[str] = _REQUIRED,
        model_name: str = _REQUIRED,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory = _NO_PREFERENCE,
        trace: InferenceTrace = _NO_TRACE,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        for arg, label in (
            (inputs, "inputs"),
            (requested_output_names, "requested_output_names"),
            (model_name, "model_name"),
        ):
            if arg is _REQUIRED:
                raise TypeError(f"InferenceRequest() missing required argument: '{label}'")
        # Argument types first (Triton's binding rejects these with TypeError) ...
        request_id = _as_str(request_id, "request_id")
        model_name = _as_str(model_name, "model_name")
        tensors = list(check_sequence(inputs, "InferenceRequest 'inputs'"))
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"InferenceRequest 'inputs' must contain Tensor objects, found {type(t).__name__}"
                )
        names = [
            _as_str(n, "requested output name")
            for n in check_sequence(
                requested_output_names, "InferenceRequest 'requested_output_names'"
            )
        ]
        if correlation_id is None:
            raise TypeError("InferenceRequest 'correlation_id' must be an int or str, got None")
        model_version = _as_int(model_version, "model_version", _INT64_MIN, _INT64_MAX)
        flags = _as_int(flags, "flags", 0, _UINT32)
        timeout = _as_int(timeout, "timeout", 0, _UINT64)
        if not isinstance(preferred_memory, PreferredMemory):
            raise TypeError(
                "InferenceRequest 'preferred_memory' must be a PreferredMemory, got "
                f"{type(preferred_memory).__name__}"
            )
        if not isinstance(trace, InferenceTrace):
            raise TypeError(
                f"InferenceRequest 'trace' must be an InferenceTrace, got {type(trace).__name__}"
            )
        # ... then the checks Triton makes with its own errors.
        if isinstance(correlation_id, bool):
            correlation_id = int(correlation_id)
        elif not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        if isinstance(correlation_id, int) and not 0 <= correlation_id <= _UINT64:
            raise RuntimeError(
                "Unable to cast Python instance to C++ type: correlation_id must fit an "
                "unsigned 64-bit integer"
            )
        params = check_parameters(parameters)
        for t in tensors:
            if t is None:
                raise TritonModelException(
                    f"Input tensor for request with id '{request_id}' and model name "
                    f"'{model_name}' should not be empty."
                )
        for n in names:
            if not n:
                raise TritonModelException(
                    f"Requested output name for request with id '{request_id}' and model name "
                    f"'{model_name}' should not be empty."
                )
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = tensors
        self._requested_output_names = set(names)
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory
        self._trace = trace
        self._params = params
        self._params_json = None
        self._compact = False
        self._response_sender = None
        self._release_flags = RELEASE_ALL

    @classmethod
    def _from_server(
        cls,
        *,
        request_id: str,
        correlation_id: int | str,
        model_name: str,
        model_version: int,
        flags: int,
        inputs: list[Tensor],
        requested_output_names: Iterable[str],
        parameters: dict[str, Any] | None,
        timeout: int,
        response_sender: InferenceResponseSender,
        is_cancelled: Callable[[], bool] | None = None,
        trace_context: str | None = None,
        parameters_json: str | None = None,
    ) -> InferenceRequest:
        """Build a request the server received, without argument checks or copies.

        ``parameters`` may hold floats (client parameters); ``parameters()`` renders them as
        compact JSON on first use unless ``parameters_json`` is given. ``is_cancelled``, if
        given, becomes the sender's cancellation check.
        """
        r = cls.__new__(cls)
        r._request_id = request_id
        r._correlation_id = correlation_id
        r._inputs = inputs
        r._requested_output_names = set(requested_output_names)
        r._model_name = model_name
        r._model_version = model_version
        r._flags = flags
        r._timeout = timeout
        r._preferred_memory = _NO_PREFERENCE
        r._trace = (
            _NO_TRACE if trace_context is None else InferenceTrace._from_server(trace_context)
        )
        r._params = parameters
        r._params_json = parameters_json
        r._compact = True
        if is_cancelled is not None:
            response_sender._is_cancelled_fn = is_cancelled
        r._response_sender = response_sender
        r._release_flags = RELEASE_ALL
        return r

    # -- accessors -------------------------------------------------------------------------

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = _as_int(flags, "flags", 0, _UINT32)

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> set[str]:
        return self._requested_output_names

    def parameters(self) -> str:
        """The request parameters as JSON text ("{}" when there are none)."""
        text = self._params_json
        if text is None:
            text = self._params_json = params_json(self._params, self._compact)
        return text

    def timeout(self) -> int:
        """The timeout in microseconds (0: none)."""
        return self._timeout

    def trace(self) -> InferenceTrace:
        return self._trace

    def get_preferred_memory(self) -> PreferredMemory:
        return self._preferred_memory

    def get_response_sender(self) -> InferenceResponseSender:
        """The request's response sender (the same object on every call)."""
        sender = self._response_sender
        if sender is None:
            sender = self._response_sender = InferenceResponseSender(None)
        return sender

    def is_cancelled(self) -> bool:
        """Whether the client cancelled this request; False for requests the model built."""
        sender = self._response_sender
        return sender.is_cancelled() if sender is not None else False

    def set_release_flags(self, flags: int, /) -> None:
        """E.g. ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` (iterative sequences)."""
        self._release_flags = _as_int(flags, "flags", 0, _UINT32)

    # -- BLS -------------------------------------------------------------------------------

    @overload
    def exec(self, decoupled: Literal[False] = ...) -> InferenceResponse: ...
    @overload
    def exec(self, decoupled: Literal[True]) -> ResponseIterator: ...
    @overload
    def exec(self, decoupled: bool) -> InferenceResponse | ResponseIterator: ...

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on the server (BLS) and wait. Failures come back as a response with
        ``has_error()``; ``decoupled=True`` returns an iterator over the callee's responses."""
        decoupled = _as_bool(decoupled)
        result = require_runtime("BLS (InferenceRequest.exec)").exec(self, decoupled)
        if decoupled:
            return _as_response_iterator(result)
        if not isinstance(result, InferenceResponse):
            raise TritonModelException(
                "modelyard runtime error: a BLS call must produce an InferenceResponse, got "
                f"{type(result).__name__}"
            )
        return result

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[Any]:
        """Like ``exec`` but returns an asyncio future; needs a running event loop."""
        decoupled = _as_bool(decoupled)
        loop = asyncio.get_running_loop()  # RuntimeError: no running event loop, as in Triton
        awaitable = require_runtime("BLS (InferenceRequest.async_exec)").async_exec(self, decoupled)
        if decoupled:
            return loop.create_task(_await_iterator(awaitable))
        return asyncio.ensure_future(awaitable, loop=loop)

    def __repr__(self) -> str:
        return (
            f"<triton_python_backend_utils.InferenceRequest id={self._request_id!r} "
            f"model={self._model_name!r} inputs={[t.name() for t in self._inputs]}>"
        )


def _as_response_iterator(result: Any) -> ResponseIterator:
    if isinstance(result, ResponseIterator):
        return result
    if not isinstance(result, Iterator):
        raise TritonModelException(
            "modelyard runtime error: a decoupled BLS call must produce an iterator of "
            f"responses, got {type(result).__name__}"
        )
    return ResponseIterator(result)


async def _await_iterator(awaitable: Awaitable[Any]) -> ResponseIterator:
    if not inspect.isawaitable(awaitable):
        raise TritonModelException(
            "modelyard runtime error: Runtime.async_exec(decoupled=True) must return an "
            "awaitable that resolves to a blocking iterator of responses, got "
            f"{type(awaitable).__name__}"
        )
    return _as_response_iterator(await awaitable)


def _as_str(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise TypeError(f"InferenceRequest {what} must be str, got {type(value).__name__}")


def _as_int(value: Any, what: str, lo: int, hi: int) -> int:
    if value is None or isinstance(value, float):
        raise TypeError(f"'{what}' must be an int, got {type(value).__name__}")
    try:
        result = operator.index(value)
    except TypeError:
        raise TypeError(f"'{what}' must be an int, got {type(value).__name__}") from None
    if not lo <= result <= hi:
        raise TypeError(f"'{what}' is out of range: {result}")
    return result


def _as_bool(value: Any) -> bool:
    if value is None:
        raise TypeError("'decoupled' must be a bool, got None")
    return bool(value)
