"""InferenceResponse, InferenceResponseSender and ResponseIterator."""

from __future__ import annotations

import _thread
import asyncio
import json
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ._errors import TritonError, TritonModelException
from ._tensor import Tensor

__all__ = [
    "InferenceResponse",
    "InferenceResponseSender",
    "ResponseIterator",
    "check_parameters",
    "params_json",
]

RESPONSE_COMPLETE_FINAL = 1

Parameters = dict[str, bool | int | str]
Deliver = Callable[["InferenceResponse | None", int], None]


def check_parameters(parameters: Any) -> Parameters | None:
    """Validate request/response parameters as Triton does; return a shallow copy (or None)."""
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        # The odd text is Triton's (a mangled C++ type name).
        raise TritonModelException(f"Expect N8pybind114dictE, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)


def params_json(params: dict[str, Any] | None, compact: bool) -> str:
    """JSON text of parameters: json.dumps style for model-built objects, compact UTF-8 (as
    Triton's backend writes it) for objects the server built."""
    if not params:
        return "{}"
    if compact:
        return json.dumps(params, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(params)


def check_sequence(value: Any, what: str) -> Sequence[Any]:
    if type(value) is list or type(value) is tuple:
        return value
    if value is None or isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{what} must be a list, got {type(value).__name__}")
    return value


class InferenceResponse:
    """``InferenceResponse(output_tensors=[], error=None, parameters=None)``."""

    __slots__ = ("__weakref__", "_compact", "_error", "_output_tensors", "_params", "_params_json")

    _output_tensors: list[Tensor]
    _error: TritonError | None
    _params: Parameters | None
    _params_json: str | None
    _compact: bool

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        tensors = list(check_sequence(output_tensors, "InferenceResponse output_tensors"))
        for t in tensors:
            if type(t) is not Tensor:
                if t is None:
                    raise TritonModelException(
                        "Output tensor for inference response should not be empty."
                    )
                if not isinstance(t, Tensor):
                    raise TypeError(
                        "InferenceResponse output_tensors must contain Tensor objects, found "
                        f"{type(t).__name__}"
                    )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f"InferenceResponse error must be a TritonError or None, got {type(error).__name__}"
            )
        self._output_tensors = tensors
        self._error = error
        self._params = check_parameters(parameters)
        self._params_json = None
        self._compact = False

    @classmethod
    def _from_server(
        cls,
        output_tensors: list[Tensor],
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
        flag_only: bool = False,
    ) -> InferenceResponse:
        """Server-side constructor (e.g. BLS results): no checks, nothing copied. As in
        Triton, an error response and a flag-only final have "" as ``parameters()``."""
        r = cls.__new__(cls)
        r._output_tensors = output_tensors
        r._error = error
        r._params = parameters
        r._params_json = "" if error is not None or flag_only else None
        r._compact = True
        return r

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as JSON text ("{}" when there are none; "" for a BLS
        error response or flag-only final)."""
        text = self._params_json
        if text is None:
            text = self._params_json = params_json(self._params, self._compact)
        return text

    def __repr__(self) -> str:
        names = [t.name() for t in self._output_tensors]
        return (
            f"<triton_python_backend_utils.InferenceResponse outputs={names} error={self._error!r}>"
        )


class InferenceResponseSender:
    """Sends responses for one request: ``send(response=None, flags=0)``, ``is_cancelled()``.

    Built by the server (``InferenceResponseSender(deliver, decoupled, is_cancelled)``);
    models get it from ``request.get_response_sender()``. ``deliver(response, flags)`` hands
    one response (None for a flag-only final) to the server; it may raise
    TritonModelException, which reaches the model. Without ``deliver`` (a request the model
    built itself) every send fails as in Triton.
    """

    __slots__ = (
        "__weakref__",
        "_cancelled",
        "_closed",
        "_decoupled",
        "_deliver",
        "_is_cancelled_fn",
        "_lock",
        "_sent",
    )

    def __init__(
        self,
        deliver: Deliver | None,
        decoupled: bool = False,
        is_cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self._deliver = deliver
        self._decoupled = bool(decoupled)
        self._is_cancelled_fn = is_cancelled
        self._cancelled = False
        self._closed = False
        self._sent = 0
        self._lock = _thread.RLock()  # threading.RLock adds a Python call per sender

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                "send(): 'response' must be an InferenceResponse or None, got "
                f"{type(response).__name__}"
            )
        flags = _as_flags(flags)
        if flags != 0 and flags != RESPONSE_COMPLETE_FINAL:
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        with self._lock:
            self._update_state_locked(response, flags)
            deliver = self._deliver
            assert deliver is not None
            deliver(response, flags)

    def is_cancelled(self) -> bool:
        if self._cancelled:
            return True
        check = self._is_cancelled_fn
        if check is not None and check():
            self._cancelled = True
            return True
        return False

    # -- server side ---------------------------------------------------------------------------

    def _update_state(self, response: InferenceResponse | None, flags: int) -> None:
        """Account for one response as Triton does, raising its errors; ``send`` calls this,
        and the server calls it for a response returned from a default-mode ``execute``."""
        with self._lock:
            self._update_state_locked(response, flags)

    def _update_state_locked(self, response: InferenceResponse | None, flags: int) -> None:
        if self._deliver is None:
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        if not self._decoupled:
            if response is not None and self._sent > 0:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model cannot send more than one "
                    "response."
                )
            if response is None and self._sent == 0:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model cannot send complete final "
                    "before sending a response."
                )
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if flags == RESPONSE_COMPLETE_FINAL:
            self._closed = True
        self._sent += 1

    def _close(self) -> None:
        """Close the sender (e.g. the server failed the request after an execute error)."""
        with self._lock:
            self._closed = True

    def _set_cancelled(self) -> None:
        """Push-style cancellation: later is_cancelled() calls answer True without polling."""
        self._cancelled = True


def _as_flags(flags: Any) -> int:
    if flags is None or isinstance(flags, float):
        raise TypeError(f"'flags' must be an int, got {type(flags).__name__}")
    try:
        return operator.index(flags)
    except TypeError:
        raise TypeError(f"'flags' must be an int, got {type(flags).__name__}") from None


_END = object()


class ResponseIterator:
    """Responses of a decoupled BLS call (``exec(decoupled=True)``), in order.

    As in Triton, iterating again once every response was read restarts from the first one;
    otherwise a new loop resumes where the last one stopped (after a ``break`` and a
    ``next()``, the responses not read yet). ``async for`` also works (each step waits in the
    loop's default executor).
    """

    __slots__ = ("__weakref__", "_done", "_index", "_lock", "_responses", "_source")

    def __init__(self, source: Iterator[InferenceResponse]) -> None:
        self._source = source
        self._responses: list[InferenceResponse] = []
        self._index = 0
        self._done = False
        self._lock = threading.Lock()

    def __iter__(self) -> ResponseIterator:
        with self._lock:
            if self._done and self._index >= len(self._responses):
                self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        with self._lock:
            if self._index < len(self._responses):
                response = self._responses[self._index]
                self._index += 1
                return response
            if self._done:
                raise StopIteration
            try:
                response = next(self._source)
            except StopIteration:
                self._done = True
                raise
            self._responses.append(response)
            self._index += 1
            return response

    def cancel(self) -> None:
        """Ask the server to cancel the BLS request if it is still running (Triton 25.04+)."""
        if self._done:
            return
        cancel = getattr(self._source, "cancel", None)
        if callable(cancel):
            cancel()

    def __aiter__(self) -> ResponseIterator:
        return self.__iter__()

    async def __anext__(self) -> InferenceResponse:
        with self._lock:
            if self._index < len(self._responses):
                response = self._responses[self._index]
                self._index += 1
                return response
            if self._done:
                raise StopAsyncIteration
        item = await asyncio.get_running_loop().run_in_executor(None, self._next_or_end)
        if item is _END:
            raise StopAsyncIteration
        assert isinstance(item, InferenceResponse)
        return item

    def _next_or_end(self) -> object:
        try:
            return self.__next__()
        except StopIteration:
            return _END
