"""Opt-in batch stacking for Python models (beyond Triton; see server#3984).

Triton hands a model's ``execute`` the dynamic batcher's batch as a list of requests, and
every model repeats the same loop: gather each input, concatenate, run, split the outputs back
per request. ``@batched`` does that loop::

    from modelyard.batching import batched

    class TritonPythonModel:
        @batched
        def execute(self, inputs):                # {"INPUT0": array [N, ...], ...}
            return {"OUTPUT0": inputs["INPUT0"] * 2}  # arrays with the same N rows

``inputs`` holds each input of all requests concatenated along the batch dimension (models
with ``max_batch_size`` > 0); with ``batched(stack=True)`` (models without a batch
dimension) each request's input becomes one row of a new first dimension, and each output
row goes back to its request without that dimension. Every output must have one row per
input row; otherwise the batch fails with an error naming the output. Plain module: works
under Triton too, and in unit tests without a server.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import triton_python_backend_utils as pb_utils

Arrays = dict[str, np.ndarray[Any, Any]]
BatchFn = Callable[[Any, Arrays], Arrays]
ExecuteFn = Callable[[Any, list[Any]], list[Any]]

__all__ = ["batched", "split_outputs", "stack_inputs"]


def stack_inputs(requests: list[Any], stack: bool = False) -> tuple[Arrays, list[int]]:
    """Each input of ``requests`` joined into one array, and the rows each request gave."""
    if not requests:
        return {}, []
    names = [t.name() for t in requests[0].inputs()]
    per_input: dict[str, list[np.ndarray[Any, Any]]] = {n: [] for n in names}
    for i, request in enumerate(requests):
        for name in names:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise pb_utils.TritonModelException(
                    f"batched: request {i} of the batch has no input '{name}' "
                    "(every request must carry the same inputs)"
                )
            per_input[name].append(tensor.as_numpy())
    first = per_input[names[0]] if names else []
    rows = [1] * len(requests) if stack else [int(a.shape[0]) if a.ndim else 1 for a in first]
    join = np.stack if stack else np.concatenate
    return {n: join(arrays) for n, arrays in per_input.items()}, rows


def split_outputs(outputs: Arrays, rows: list[int], stack: bool = False) -> list[Any]:
    """One InferenceResponse per request, with its rows of every output."""
    total = sum(rows)
    for name, arr in outputs.items():
        arr = np.asarray(arr)
        if arr.ndim == 0 or arr.shape[0] != total:
            raise pb_utils.TritonModelException(
                f"batched: output '{name}' has shape {list(arr.shape)}; it needs {total} rows, "
                "one per input row"
            )
    responses = []
    start = 0
    for n in rows:
        tensors = []
        for name, arr in outputs.items():
            part = np.asarray(arr)[start : start + n]
            tensors.append(pb_utils.Tensor(name, part[0] if stack else part))
        responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        start += n
    return responses


def batched(fn: BatchFn | None = None, *, stack: bool = False) -> Any:
    """Decorate ``execute(self, inputs) -> outputs`` (dicts of arrays); see the module doc."""

    def wrap(inner: BatchFn) -> ExecuteFn:
        @functools.wraps(inner)
        def execute(self: Any, requests: list[Any]) -> list[Any]:
            inputs, rows = stack_inputs(requests, stack)
            return split_outputs(inner(self, inputs), rows, stack)

        return execute

    return wrap(fn) if fn is not None else wrap
