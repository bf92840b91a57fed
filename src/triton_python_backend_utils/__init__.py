"""triton_python_backend_utils (``pb_utils``): the API that Triton Python-backend model files
import, implemented in Python so that model.py files run unchanged under modelyard and can be
imported and unit-tested without any server.

Server-side hooks (for ``modelyard.backends.python``; models never use these)
----------------------------------------------------------------------------------------
* Runtime: ``set_runtime(rt)`` installs the process-wide object that BLS, the model-control
  API, Logger and get_model_dir() go through; ``runtime_context(rt)`` overrides it for one
  thread/task. The contract is the ``Runtime`` Protocol in ``_runtime.py``: ``exec`` returns
  an InferenceResponse, or for decoupled=True a blocking, thread-safe iterator of responses;
  ``async_exec`` returns an awaitable resolving to the same (not an async iterator: Triton
  models iterate the awaited value with a plain ``for``).
* Received requests: ``InferenceRequest._from_server(request_id=, correlation_id=,
  model_name=, model_version=, flags=, inputs=, requested_output_names=, parameters=,
  timeout=, response_sender=, is_cancelled=None, trace_context=None, parameters_json=None)``
  (keyword-only; no checks, no copies). ``request._release_flags`` holds what the model set
  with ``set_release_flags`` (default TRITONSERVER_REQUEST_RELEASE_ALL); ``request._params``
  is the parameters dict (or None) and ``request._response_sender`` the sender. Instances have
  a ``__dict__`` for the server's own attributes.
* Tensors: ``Tensor._from_server(name, array, code=None)`` wraps a C-contiguous array as is
  (BYTES: an object array of ``bytes``; BF16: ml_dtypes' bfloat16). ``tensor._host_array()``
  is what the runtime sends on for a tensor the model made: its array, or a host copy of a
  GPU tensor (``as_numpy()`` refuses GPU and BF16 tensors, as Triton's). GPU tensors:
  ``tensor._gpu`` is the ``_memory.DeviceMemory`` a GPU tensor refers to (None on the host),
  ``Tensor._from_device(name, memory)`` wraps such memory without a copy,
  ``tensor._to_device(device_id)`` / ``tensor._on_host()`` give the tensor there (itself
  when it is there already; BYTES and machines without a GPU stay on the host).
* Response sender: ``InferenceResponseSender(deliver, decoupled=False, is_cancelled=None)``
  where ``deliver(response_or_None, flags)`` hands one response to the server (it may raise
  TritonModelException, which reaches the model). ``sender._update_state(response, flags)``
  applies Triton's one-response/closed rules (call it for a response returned from a
  default-mode execute, with flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL), ``sender._close()``
  closes it (e.g. after a failed execute), ``sender._set_cancelled()`` marks it cancelled;
  ``sender._closed`` / ``sender._sent`` expose the state.
* Responses the model built: ``response.output_tensors()``, ``response.error()`` (a
  TritonError: ``message()``, ``int(code())``) and ``response._params`` (dict or None, no JSON
  round trip). BLS results: ``InferenceResponse._from_server(tensors, error=None,
  parameters=None)`` and ``TritonError._from_server(message, code_int)``.
* BLS request fields for the runtime: ``model_name()``, ``model_version()`` (-1 = latest),
  ``request_id()``, ``correlation_id()``, ``flags()``, ``inputs()``,
  ``requested_output_names()``, ``timeout()`` (µs), ``_params``, ``_preferred_memory``
  (``_memory_type``: MemoryType or None, ``_device_id``), ``trace().get_context()``.
* Custom metrics: ``_metrics.snapshot()`` lists every family and series with its values.
"""

from __future__ import annotations

import json  # noqa: F401 - Triton's module has json, struct and np too
import struct  # noqa: F401

import numpy as np  # noqa: F401

from ._config import (
    ModelConfig,
    get_input_config_by_name,
    get_input_tensor_by_name,
    get_output_config_by_name,
    get_output_tensor_by_name,
    using_decoupled_model_transaction_policy,
)
from ._errors import TritonError, TritonModelException
from ._metrics import Metric, MetricFamily, MetricKind
from ._request import InferenceRequest, InferenceTrace, MemoryType, PreferredMemory
from ._response import InferenceResponse, InferenceResponseSender, ResponseIterator
from ._runtime import Runtime as Runtime
from ._runtime import get_runtime as get_runtime
from ._runtime import runtime_context as runtime_context
from ._runtime import set_runtime as set_runtime
from ._server import Logger, get_model_dir, is_model_ready, load_model, unload_model
from ._tensor import Tensor
from ._types import (
    TRITON_STRING_TO_NUMPY,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU

# The names Triton's module has inside a stub (its .py file plus what the stub injects).
__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "Logger",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

# Reachable in Triton only through objects (type(sender) ...) or not at all; modelyard names
# them so they can be used in type hints and by the server.
_EXTRAS = [
    "InferenceResponseSender",
    "InferenceTrace",
    "MemoryType",
    "Metric",
    "MetricKind",
    "ResponseIterator",
    "Runtime",
    "get_runtime",
    "runtime_context",
    "set_runtime",
]

for _cls in (
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    InferenceTrace,
    Logger,
    MemoryType,
    Metric,
    MetricFamily,
    MetricKind,
    ModelConfig,
    PreferredMemory,
    ResponseIterator,
    Tensor,
    TritonError,
    TritonModelException,
):
    _cls.__module__ = __name__
del _cls


def __dir__() -> list[str]:
    dunders = [n for n in globals() if n.startswith("__") and n.endswith("__")]
    return sorted([*__all__, *_EXTRAS, "json", "struct", "np", *dunders])
