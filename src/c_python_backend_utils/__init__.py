"""c_python_backend_utils: the name of the compiled module behind Triton's pb_utils.

Triton's stub embeds a C++ module of this name; its ``triton_python_backend_utils`` wraps it,
and a few model files import it directly. Here it is the same classes as
``triton_python_backend_utils`` (one implementation, two names), plus ``shared_memory``,
whose ``free_memory()`` Triton keeps for its own tests (QA ``restart`` compares it before and
after a stub restart).
"""

from __future__ import annotations

from collections.abc import Callable

from triton_python_backend_utils import (
    InferenceRequest,
    InferenceResponse,
    Logger,
    MetricFamily,
    PreferredMemory,
    Tensor,
    TritonError,
    TritonModelException,
    is_model_ready,
    load_model,
    unload_model,
)
from triton_python_backend_utils._metrics import Metric, MetricKind
from triton_python_backend_utils._request import InferenceTrace, MemoryType
from triton_python_backend_utils._response import InferenceResponseSender, ResponseIterator

__all__ = [
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "PreferredMemory",
    "ResponseIterator",
    "SharedMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "is_model_ready",
    "load_model",
    "set_free_memory",
    "shared_memory",
    "unload_model",
]


class SharedMemory:
    """The calling process's tensor pool, as Triton's ``SharedMemoryManager`` shows it."""

    def __init__(self) -> None:
        self._free: Callable[[], int] = lambda: 0

    def free_memory(self) -> int:
        """Bytes the pool can still hand out. A process-mode worker reports its own pool (its
        limit less the segments its tensors hold); where tensors never travel through shared
        memory (in-process mode, or no server) it is 0, and stays 0."""
        return self._free()


shared_memory = SharedMemory()


def set_free_memory(free: Callable[[], int]) -> None:
    """Server-side hook: the worker installs its pool's ``free_bytes``."""
    shared_memory._free = free
