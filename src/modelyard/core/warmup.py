"""``model_warmup``: sample requests each instance runs before its model reports ready.

As Triton (``TritonModelInstance::GenerateWarmupData`` / ``WarmUp``): a sample with
``batch_size`` 0 is skipped; otherwise ``batch_size`` requests of batch 1 (a leading 1 is
added to ``dims`` when the model batches) run together as one batch on the instance itself,
bypassing the scheduler, ``count`` times (at least once). Inputs are zeros, random bytes
(BYTES: empty strings for both) or the contents of ``<model>/warmup/<input_data_file>``.
A failing sample fails the version's load (VersionLoadError, as a failing instance
initialization does) with ``failed to run warmup sample '<name>': <errors>; ``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import numpy as np

from modelyard import tensor_bytes
from modelyard.backends.instance import Instance
from modelyard.errors import InvalidArgument, ModelyardError, VersionLoadError
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse, Tensor, config_datatype, numpy_dtype

log = logging.getLogger("modelyard")

WARMUP_FOLDER = "warmup"
_RID = "[request id: <id_unknown>] "
WARMUP_TIMEOUT_S = 600.0  # a sample that never answers fails the load instead of hanging it


def _sample_inputs(cfg: Any, sample: Any, model_dir: str, rng: np.random.Generator) -> list[Tensor]:
    """The inputs of one request of ``sample`` (Triton's two passes, folded into one)."""
    inputs = []
    names = {i.name for i in cfg.input}
    for name in sample.inputs:
        meta = sample.inputs[name]
        dims = tuple(int(d) for d in meta.dims)
        if any(d < 0 for d in dims):
            raise InvalidArgument(
                "warmup setting expects all variable-size dimensions are specified for input "
                f"'{name}'"
            )
        datatype = config_datatype(meta.data_type)
        shape = ((1,) if cfg.max_batch_size != 0 and name in names else ()) + dims
        count = int(np.prod(dims, dtype=np.int64))
        which = meta.WhichOneof("input_data_type")
        if which is None:
            raise InvalidArgument(
                f"{_RID}warmup setting expects input '{name}' to have input_data_type set"
            )
        if which == "input_data_file":
            data = _from_file(model_dir, meta.input_data_file, datatype, count, shape)
        elif datatype == "BYTES":
            data = np.full(shape, b"", dtype=np.object_)
        elif which == "zero_data":
            data = np.zeros(shape, dtype=numpy_dtype(datatype))
        else:
            size = count * numpy_dtype(datatype).itemsize
            raw = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            data = np.frombuffer(raw, dtype=numpy_dtype(datatype)).reshape(shape)
        inputs.append(Tensor(name, datatype, shape, data))
    return inputs


def _from_file(
    model_dir: str, filename: str, datatype: str, count: int, shape: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    path = os.path.join(model_dir, WARMUP_FOLDER, filename)
    try:
        with open(path, "rb") as f:
            content = f.read()
    except OSError as e:
        raise InvalidArgument(f"failed to open text file for read {path}: {e.strerror}") from None
    if datatype == "BYTES":
        try:
            elements = tensor_bytes.deserialize_bytes(content)
        except ValueError as e:
            raise InvalidArgument(
                f"warmup data file {filename} holds malformed BYTES: {e}"
            ) from None
        if len(elements) != count:
            raise InvalidArgument(
                f"warmup data file {filename} holds {len(elements)} strings, expected {count}"
            )
        return tensor_bytes.bytes_array(elements, shape)
    dtype = numpy_dtype(datatype)
    size = count * dtype.itemsize
    if size > len(content):
        raise InvalidArgument(
            f"{_RID}warmup setting expects {size} bytes, but the data provided from "
            f"{filename}only has {len(content)} bytes"
        )
    return np.frombuffer(content[:size], dtype=dtype).reshape(shape)


async def _run_sample(
    cfg: Any, version: int, instance: Instance, sample: Any, inputs: list[list[Tensor]]
) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(max(1, int(sample.count))):
        errors: list[str] = []
        futures: list[asyncio.Future[None]] = []
        batch = []
        for tensors in inputs:
            fut: asyncio.Future[None] = loop.create_future()
            futures.append(fut)

            def on_response(
                resp: InferResponse, fut: asyncio.Future[None] = fut, errors: list[str] = errors
            ) -> None:
                if resp.error is not None:
                    errors.append(resp.error.message)
                if resp.final and not fut.done():
                    fut.set_result(None)

            request = InferRequest(cfg.name, list(tensors), model_version=str(version))
            batch.append(RequestContext(request, None, on_response))
        log.debug(
            "model '%s' instance %s is running warmup sample '%s'",
            cfg.name,
            instance.name,
            sample.name,
        )
        try:
            await instance.execute(batch)
            await asyncio.wait_for(asyncio.gather(*futures), WARMUP_TIMEOUT_S)
        except asyncio.TimeoutError:
            errors.append(f"no response within {WARMUP_TIMEOUT_S:.0f} s")
        except ModelyardError as e:
            errors.append(e.message)
        if errors:
            text = "".join(f"{e}; " for e in errors)
            raise InvalidArgument(f"failed to run warmup sample '{sample.name}': {text}")


async def warm_up(cfg: Any, model_dir: str, version: int, instances: list[Instance]) -> None:
    """Run every ``model_warmup`` sample on every instance (instances in parallel, as each
    Triton instance warms up on its own thread). Raises ModelyardError on the first failure."""
    samples = [s for s in cfg.model_warmup if s.batch_size > 0]
    if not samples:
        return
    rng = np.random.default_rng()
    try:
        prepared = [
            (s, [_sample_inputs(cfg, s, model_dir, rng) for _ in range(int(s.batch_size))])
            for s in samples
        ]
    except ModelyardError as e:
        raise VersionLoadError(version, e.message, e.code) from None

    async def one(instance: Instance) -> None:
        for sample, inputs in prepared:
            await _run_sample(cfg, version, instance, sample, inputs)

    results = await asyncio.gather(*(one(i) for i in instances), return_exceptions=True)
    for r in results:
        if isinstance(r, ModelyardError):  # the version fails, as an instance's init would
            raise VersionLoadError(version, r.message, r.code) from None
        if isinstance(r, BaseException):
            raise r
