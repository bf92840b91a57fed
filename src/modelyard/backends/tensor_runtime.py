"""What the ONNX Runtime and TorchScript backends share: an instance that runs a batch of
requests as one tensor call on its own thread and splits the outputs back per request.

Requests of a batch are concatenated along the first dimension when the model batches
(``max_batch_size > 0``); requests whose non-batch shapes differ run as separate calls.
``reshape`` in the config is applied on the way in and undone on the way out, as Triton does.
The runtime call happens on one thread per instance (ONNX Runtime and torch release the GIL
while they compute), so the event loop keeps serving.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelyard.backends.instance import Instance
from modelyard.errors import InternalError, ModelyardError
from modelyard.serving.context import RequestContext
from modelyard.types import InferResponse, Tensor, config_datatype, host_data, numpy_dtype

Arrays = dict[str, np.ndarray[Any, Any]]


class ModelRunner(abc.ABC):
    """The runtime-specific part: one loaded model (an ORT session, a TorchScript module)."""

    @abc.abstractmethod
    def run(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        """Run the model on numpy inputs; return numpy outputs by name (called off the loop)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release the runtime's resources."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # protocol name, "FP32"
    dims: tuple[int, ...]  # as the client sees them, without the batch dimension
    reshape: tuple[int, ...] | None  # as the model sees them, when the config reshapes


@dataclass(frozen=True)
class Layout:
    """A model's tensors as its (normalized) config declares them."""

    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @classmethod
    def from_config(cls, cfg: Any) -> Layout:
        def spec(io: Any) -> TensorSpec:
            reshape = tuple(int(d) for d in io.reshape.shape) if io.HasField("reshape") else None
            return TensorSpec(
                io.name, config_datatype(io.data_type), tuple(int(d) for d in io.dims), reshape
            )

        return cls(
            int(cfg.max_batch_size),
            tuple(spec(i) for i in cfg.input),
            tuple(spec(o) for o in cfg.output),
        )


class TensorRuntimeInstance(Instance):
    """One model instance of a tensor runtime: its own runner and its own thread."""

    def __init__(
        self,
        name: str,
        model_name: str,
        layout: Layout,
        open_runner: Callable[[], ModelRunner],
        error_prefix: str,
    ):
        self.name = name
        self.model_name = model_name
        self.layout = layout
        self._open = open_runner
        self._error_prefix = error_prefix  # e.g. "onnx runtime error"
        self._runner: ModelRunner | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._runner = await loop.run_in_executor(self._pool, self._open)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            try:
                await asyncio.get_running_loop().run_in_executor(self._pool, runner.close)
            except Exception:
                pass
        self._pool.shutdown(wait=False)

    async def execute(self, batch: list[RequestContext]) -> None:
        loop = asyncio.get_running_loop()
        for group in self._groups(batch):
            results = await loop.run_in_executor(self._pool, self._run_group, group)
            for ctx, resp in zip(group, results, strict=True):
                ctx.send(resp)

    def _groups(self, batch: list[RequestContext]) -> list[list[RequestContext]]:
        """Requests that can run as one call: same non-batch shapes (batching models only)."""
        if self.layout.max_batch_size == 0:
            return [[ctx] for ctx in batch]
        groups: dict[tuple[Any, ...], list[RequestContext]] = {}
        for ctx in batch:
            key = tuple(sorted((t.name, t.shape[1:]) for t in ctx.request.inputs))
            groups.setdefault(key, []).append(ctx)
        return list(groups.values())

    def _run_group(self, group: list[RequestContext]) -> list[InferResponse]:
        """On the instance thread: one runtime call for the group, one response per request."""
        try:
            outputs = self._call(group)
        except ModelyardError as e:
            return [self._error(ctx, e) for ctx in group]
        except Exception as e:
            err = InternalError(f"{self._error_prefix}: {e}")
            return [self._error(ctx, err) for ctx in group]
        responses = []
        offset = 0
        for ctx in group:
            n = ctx.batch_size if self.layout.max_batch_size > 0 else 0
            wanted = ctx.output_names
            tensors = []
            for spec in self.layout.outputs:
                if wanted is not None and spec.name not in wanted:
                    continue
                arr = outputs[spec.name]
                part = arr[offset : offset + n] if n else arr
                tensors.append(Tensor.from_numpy(spec.name, part))
            offset += n
            r = ctx.request
            responses.append(InferResponse(self.model_name, r.model_version, r.id, tensors))
        return responses

    def _call(self, group: list[RequestContext]) -> Arrays:
        runner = self._runner
        if runner is None:
            raise InternalError(f"model instance '{self.name}' is not loaded")
        batching = self.layout.max_batch_size > 0
        total = sum(ctx.batch_size for ctx in group) if batching else 0
        inputs: Arrays = {}
        for spec in self.layout.inputs:
            parts = [_input(ctx, spec.name) for ctx in group]
            present = [p for p in parts if p is not None]
            if not present:
                continue  # an optional input no request gave
            arr = present[0] if len(present) == 1 else np.concatenate(present, axis=0)
            if spec.reshape is not None:
                arr = arr.reshape(((total,) if batching else ()) + spec.reshape)
            inputs[spec.name] = arr
        raw = runner.run(inputs, [o.name for o in self.layout.outputs])
        outputs: Arrays = {}
        for spec in self.layout.outputs:
            if spec.name not in raw:
                raise InternalError(
                    f"model '{self.model_name}' did not produce output '{spec.name}'"
                )
            arr = _to_protocol(raw[spec.name], spec.datatype)
            if spec.reshape is not None:
                arr = arr.reshape(((total,) if batching else ()) + spec.dims)
            if batching and (arr.ndim == 0 or arr.shape[0] != total):
                raise InternalError(
                    f"model '{self.model_name}' output '{spec.name}' has shape "
                    f"{list(arr.shape)}; expected a first (batch) dimension of {total}"
                )
            outputs[spec.name] = arr
        return outputs

    def _error(self, ctx: RequestContext, err: ModelyardError) -> InferResponse:
        r = ctx.request
        return InferResponse(self.model_name, r.model_version, r.id, error=err)


def _input(ctx: RequestContext, name: str) -> np.ndarray[Any, Any] | None:
    for t in ctx.request.inputs:
        if t.name == name:
            return host_data(t) if t.device is not None else t.data
    return None


def _to_protocol(arr: Any, datatype: str) -> np.ndarray[Any, Any]:
    """A runtime output as the protocol datatype the config declares (strings -> bytes)."""
    arr = np.asarray(arr)
    if datatype == "BYTES":
        flat = [v.encode() if isinstance(v, str) else bytes(v) for v in arr.reshape(-1)]
        out = np.empty(len(flat), dtype=np.object_)
        out[:] = flat
        return out.reshape(arr.shape)
    want = numpy_dtype(datatype)
    cast: np.ndarray[Any, Any] = arr if arr.dtype == want else arr.astype(want)
    return cast
