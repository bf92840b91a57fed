"""What the harness's requests are and get back: :class:`Request`, :class:`Responses`, and
the sink that collects one request's responses from whichever thread sends them."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import triton_python_backend_utils as pb
from modelyard.backends.python.server.inprocess_runtime import InProcessRuntime
from modelyard.errors import ModelyardError
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse

ParamValue = bool | int | str


@dataclass
class Request:
    """One request of :meth:`ModelHandle.infer_batch` (the arguments of ``infer``)."""

    inputs: Mapping[str, Any]
    requested_outputs: Sequence[str] | None = None
    parameters: Mapping[str, ParamValue] | None = None
    correlation_id: int | str | None = None
    flags: int = 0
    request_id: str = ""


class Responses(list[Any]):
    """The ``pb_utils.InferenceResponse`` objects one request got, in the order the model sent
    them: one for an ordinary model, each one a decoupled model sent (a flag-only final,
    ``send(flags=FINAL)``, adds none). Errors the model returned or raised, and requests the
    server refuses (a wrong input name, datatype or shape), are error responses with Triton's
    texts and codes, as a client would get them. ``final``: the request ended (its final
    response or flag came)."""

    final: bool = False

    def output(self, name: str, index: int = 0) -> np.ndarray[Any, Any]:
        """The numpy array of output ``name`` of response ``index``; AssertionError naming the
        error when that response is one."""
        response = self[index]
        if response.has_error():
            raise AssertionError(f"response {index} is an error: {response.error().message()}")
        tensor = pb.get_output_tensor_by_name(response, name)
        if tensor is None:
            names = [t.name() for t in response.output_tensors()]
            raise AssertionError(f"response {index} has no output '{name}' (it has {names})")
        array: np.ndarray[Any, Any] = tensor._host_array()  # (GPU outputs: a host copy)
        return array


class Sink:
    """Collects one request's responses from whichever thread sends them."""

    __slots__ = ("_event", "final", "items")

    def __init__(self) -> None:
        self.items: list[InferResponse] = []
        self.final = False
        self._event: threading.Event | None = None

    def add(self, response: InferResponse) -> None:
        self.items.append(response)
        if response.final:
            self.final = True
            if self._event is not None:
                self._event.set()

    def attach(self, ctx: RequestContext) -> None:
        """Also collect what ``ctx`` delivers (after its own callback)."""
        inner = ctx.on_response

        def both(response: InferResponse) -> None:
            inner(response)
            self.add(response)

        ctx.on_response = both

    def wait(self, timeout: float, model: str) -> Responses:
        """Every response, once the final one came (TimeoutError after ``timeout`` s)."""
        if not self.final:
            self._event = threading.Event()
            if not self.final and not self._event.wait(timeout):
                raise TimeoutError(
                    f"model '{model}' sent no final response within {timeout:g} s "
                    f"({len(self.items)} response(s) so far)"
                )
        return responses_of(self.items)


def responses_of(items: list[InferResponse]) -> Responses:
    out = Responses(InProcessRuntime.pb_response(r) for r in items if not r.flag_only)
    out.final = any(r.final for r in items)
    return out


def error_response(request: InferRequest, error: ModelyardError) -> InferResponse:
    return InferResponse(request.model_name, request.model_version, request.id, error=error)
