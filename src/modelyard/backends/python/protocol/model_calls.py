"""How a Python model is called, written once for both execution modes (the worker process's
``worker/stub.py`` and the in-process instance's ``server/inprocess.py``): the arguments
``initialize`` gets, the ``TritonPythonModel`` lookup, ``auto_complete_config`` and its check,
the check of what ``execute`` returned, the release of rescheduled requests, and the pieces of
a BLS call that do not depend on the transport (its checks, its bound, its error responses).

What differs between the modes stays on each side: the transport (frames over a socket, or
direct calls) and where tensors live (shared memory, or the server's own arrays). ``pb`` is
passed in rather than imported: a worker imports ``triton_python_backend_utils`` only once
the model's folders are on ``sys.path``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Iterator
from typing import Any, NamedTuple, Protocol

from modelyard.backends.python.protocol import release_flags
from modelyard.backends.python.protocol.error_text import forked_bls_text
from modelyard.errors import ErrorCode
from modelyard.types import AS_PRODUCED, HOST_OUTPUTS

# Waiting for a BLS reply is bounded even when the request sets no timeout: the server's
# deadlock detection answers cycles at once, so this only guards against a call lost on the
# way; a request's own timeout bounds it a little past that timeout (the core ends it first).
DEFAULT_WAIT_S = 3600.0
TIMEOUT_GRACE_S = 5.0
TIMED_OUT = "BLS request timed out waiting for a response"


class Failure(Exception):
    """A call answered with an error: Triton's code and text."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class ModelFiles(Protocol):
    """What both sides know of the model instance they run (a worker's ``ModelSetup``, an
    in-process instance's ``WorkerSpec``)."""

    model_name: str
    version: int
    model_dir: str
    model_file: str
    instance_name: str
    instance_kind: str
    device_id: int
    config_json: str


# -- the model's lifecycle -------------------------------------------------------------------


def initialize_args(m: ModelFiles) -> dict[str, str]:
    """``initialize``'s argument, Triton's seven keys (all strings)."""
    return {
        "model_config": m.config_json,
        "model_instance_kind": m.instance_kind,
        "model_instance_name": m.instance_name,
        "model_instance_device_id": str(m.device_id),
        "model_repository": m.model_dir,
        "model_version": str(m.version),
        "model_name": m.model_name,
    }


def model_class(module: Any, path: str) -> Any:
    """The module's ``TritonPythonModel``, or Triton's error naming the file."""
    cls = getattr(module, "TritonPythonModel", None)
    if cls is None:
        raise Failure(ErrorCode.INTERNAL, f"Python model '{path}' has no class 'TritonPythonModel'")
    return cls


def auto_complete(pb: Any, cls: Any, model_name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Run ``cls.auto_complete_config`` on ``config`` (Triton's dict shape); the config as it
    was when the class has none."""
    fn = getattr(cls, "auto_complete_config", None)
    if fn is None:
        return config
    result = fn(pb.ModelConfig(config))
    if not isinstance(result, pb.ModelConfig):
        raise Failure(
            ErrorCode.INTERNAL,
            f"auto_complete_config function in model '{model_name}' must return a valid "
            "pb.ModelConfig object.",
        )
    completed: dict[str, Any] = result.as_dict()
    return completed


def output_names(config_json: str) -> list[str]:
    """The outputs the config declares: what a request that names none gets."""
    outputs = json.loads(config_json).get("output", []) if config_json else []
    return [o["name"] for o in outputs]


# -- execute ---------------------------------------------------------------------------------


def no_execute_text(model_file: str) -> str:
    """Triton's error for each request to a model whose class has no ``execute``."""
    return f"Python model {model_file} does not implement `execute` method."


def check_returned(
    pb: Any, decoupled: bool, instance: str, requests: list[Any], returned: Any
) -> list[Any] | None:
    """Check what ``execute`` returned as Triton does: the responses, one per request (None
    where the model answers through the request's sender), or None for no responses at all."""
    if decoupled:
        if returned is not None:
            raise Failure(
                ErrorCode.INTERNAL,
                f"Python model '{instance}' is using the decoupled mode and the execute "
                "function must return None.",
            )
        return None
    if returned is None:
        return None
    if not isinstance(returned, list):
        raise Failure(
            ErrorCode.INTERNAL,
            f"Expected a list in the execute return, found type '{type(returned)}'.",
        )
    if len(returned) != len(requests):
        raise Failure(
            ErrorCode.INTERNAL,
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            f"objects. InferenceRequest(s) size is:{len(requests)}, and InferenceResponse(s) "
            f"size is:{len(returned)}\n",
        )
    response_type = pb.InferenceResponse
    for req, resp in zip(requests, returned, strict=True):
        if resp is None:
            continue
        if req._release_flags & release_flags.RESCHEDULE:
            raise Failure(ErrorCode.INTERNAL, release_flags.returned_for_rescheduled(resp))
        if not isinstance(resp, response_type):
            raise Failure(
                ErrorCode.INTERNAL,
                "Expected an 'InferenceResponse' object in the execute function return list, "
                f"found type '{type(resp)}'.",
            )
    return returned


def release_rescheduled(pb: Any, iterative: bool, requests: list[Any]) -> tuple[int, ...]:
    """The indices of the requests the model rescheduled, to execute again (an iterative
    model), after refusing them for any other model (see release_flags.py)."""
    if len(requests) == 1:  # (the usual batch: no list built)
        indices = [0] if requests[0]._release_flags & release_flags.RESCHEDULE else []
    else:
        indices = [i for i, r in enumerate(requests) if r._release_flags & release_flags.RESCHEDULE]
    if not indices:
        return ()
    if not iterative:
        release_flags.refuse(pb, requests, indices)
        return ()
    return tuple(indices)


# -- BLS -------------------------------------------------------------------------------------


def check_bls(pb: Any, phase: str) -> None:
    """As Triton's stub: BLS calls only once ``initialize`` has returned, before ``finalize``."""
    if phase != "ready":
        raise pb.TritonModelException("BLS is only supported during the 'execute' function.")


def forked_text(owner: int) -> str:
    """The error of a BLS or model-control call made in a process the model forked ("" in
    ``owner``, the process whose threads serve the calls). A forked copy has the worker's
    socket, inbox and pool names (or the server's memory) but none of their threads: its frames
    would mix with the worker's and the worker's threads would read its replies, or no event
    loop would ever run the call; it would wait forever, so it gets this error at once."""
    pid = os.getpid()
    return "" if pid == owner else forked_bls_text(pid, owner)


def version_text(version: Any) -> str:
    """A BLS request's model version as the server reads it ("" for the newest)."""
    return "" if version is None or int(version) < 0 else str(version)


_new = tuple.__new__  # builds a NamedTuple without its Python-level constructor (hot paths)


class BlsCall(NamedTuple):
    """What a model's BLS request carries to the server (both modes read it here): its input
    ``pb_utils.Tensor`` objects in the model's order (GPU ones too: each side decides how a GPU
    tensor travels), and where the caller wants the outputs (``placement``)."""

    model_name: str
    version: str
    request_id: str
    correlation_id: int | str
    flags: int
    inputs: list[Any]
    outputs: list[str]
    parameters: dict[str, Any]
    timeout_us: int
    placement: int


def bls_call(request: Any) -> BlsCall:
    """Read a ``pb_utils.InferenceRequest`` the model executes."""
    params = request._params
    if params is None:
        text = request.parameters()
        params = json.loads(text) if text and text != "{}" else {}
    return _new(
        BlsCall,
        (
            request.model_name(),
            version_text(request.model_version()),
            request.request_id(),
            request.correlation_id(),
            request.flags(),
            list(request.inputs()),
            list(request.requested_output_names()),
            dict(params),
            int(request.timeout() or 0),
            output_placement(request._preferred_memory),
        ),
    )


# -- GPU tensors through BLS -------------------------------------------------------------------
# Triton's rules: a BLS output comes back where the callee made it (a GPU tensor stays on its
# GPU), unless the call's preferred_memory names CPU or a GPU; a model receives GPU inputs only
# with FORCE_CPU_ONLY_INPUT_TENSORS "no" (BYTES always on the CPU).

_MEMORY_CPU = 1  # pb_utils.TRITONSERVER_MEMORY_CPU (GPU is 0)
FORCE_CPU_ONLY = "FORCE_CPU_ONLY_INPUT_TENSORS"


def output_placement(preferred: Any) -> int:
    """Where a BLS call's outputs go: AS_PRODUCED, HOST_OUTPUTS or a GPU id, from its
    ``pb_utils.PreferredMemory``."""
    kind = preferred._memory_type
    if kind is None:
        return AS_PRODUCED
    if int(kind) == _MEMORY_CPU:
        return HOST_OUTPUTS
    return max(int(preferred._device_id), 0)


def target_device(placement: int, made_on: int | None) -> int | None:
    """The GPU a BLS output goes to (None: host memory), given where it was made."""
    if placement == AS_PRODUCED:
        return made_on
    return None if placement == HOST_OUTPUTS else placement


def placed(tensor: Any, device: int | None) -> Any:
    """``tensor`` (a ``pb_utils.Tensor``) on GPU ``device``, or in host memory for None."""
    if device is None:
        return tensor if tensor.is_cpu() else tensor._on_host()
    return tensor._to_device(device)


def gpu_inputs(config: dict[str, Any]) -> bool:
    """Whether a model receives GPU inputs as GPU tensors (``FORCE_CPU_ONLY_INPUT_TENSORS``
    "no"); any value but "yes" and "no" fails the load with Triton's text."""
    entry = config.get("parameters", {}).get(FORCE_CPU_ONLY)
    value = entry.get("string_value", "") if isinstance(entry, dict) else None
    if value is None or value == "yes":
        return False
    if value == "no":
        return True
    raise Failure(ErrorCode.UNSUPPORTED, f"Incorrect value for {FORCE_CPU_ONLY}: {value}'")


class ResponseParts(NamedTuple):
    """What a model's response carries to the server: its error (text, code), or the output
    ``pb_utils.Tensor`` objects the request asked for, in the model's order (GPU ones too), and
    its parameters."""

    error: tuple[str, ErrorCode] | None
    outputs: list[Any]
    parameters: dict[str, Any] | None


def response_parts(response: Any, output_names: Collection[str] | None) -> ResponseParts:
    """Read a ``pb_utils.InferenceResponse`` a model sent or returned; outputs the request did
    not ask for are dropped, as Triton drops them (``output_names`` None: every output)."""
    err = response.error()
    if err is not None:
        return ResponseParts((err.message(), err.code()), [], None)
    outputs = response.output_tensors()
    if output_names is not None:
        wanted = set(output_names)
        outputs = [t for t in outputs if t.name() in wanted]
    # (tuple.__new__: a NamedTuple's own constructor is a Python call, twice per BLS request)
    return _new(ResponseParts, (None, outputs, response._params or None))


def reply_wait_s(timeout_us: int) -> float:
    """How long a caller waits for a BLS reply."""
    return timeout_us / 1e6 + TIMEOUT_GRACE_S if timeout_us > 0 else DEFAULT_WAIT_S


def error_response(pb: Any, text: str, code: ErrorCode) -> Any:
    """A BLS call's response holding only an error."""
    return pb.InferenceResponse._from_server([], pb.TritonError._from_server(text, code))


def timeout_response(pb: Any) -> Any:
    """The response of a BLS call that got no reply within its bound."""
    return error_response(pb, TIMED_OUT, ErrorCode.UNAVAILABLE)


def forked_response(pb: Any, text: str, decoupled: bool) -> Any:
    """What ``exec()`` returns in a process the model forked (``text``: forked_bls_text)."""
    response = error_response(pb, text, ErrorCode.UNSUPPORTED)
    return iter([response]) if decoupled else response


class ResponseStream:
    """The responses of a decoupled BLS call (``exec``/``async_exec`` with
    ``decoupled=True``), ending with the final one. ``reply()`` gives the next response and
    whether it is the final one, waiting within the call's bound (a timeout error is final);
    ``cancel()`` asks for the call to be cancelled (Triton 25.04: the callee sees
    ``is_cancelled()``, and the stream still ends with its final response; a call still queued
    ends with a CANCELLED error). Both come from the side's transport."""

    __slots__ = ("_cancel", "_ended", "_reply")

    def __init__(self, reply: Callable[[], tuple[Any, bool]], cancel: Callable[[], None]):
        self._reply = reply
        self._cancel = cancel
        self._ended = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        response, final = self._reply()
        self._ended = final
        return response

    def cancel(self) -> None:
        if not self._ended:
            self._cancel()


async def resolved(value: Any) -> Any:
    """An awaitable of a value already known (an ``async_exec()`` answered at once)."""
    return value
