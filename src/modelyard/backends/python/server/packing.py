"""Requests into and responses out of a worker's frames: tensors go through the worker's
shared-memory pool, or by reference to a client's registered region (protocol/client_regions.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from modelyard.backends.python.protocol import client_regions, cuda_ipc, tensor_pool
from modelyard.backends.python.protocol.client_regions import INPUT
from modelyard.backends.python.protocol.messages import (
    OutputDestination,
    PackedTensor,
    RequestItem,
    Response,
)
from modelyard.errors import ModelyardError
from modelyard.serving import shm_regions
from modelyard.serving.context import RequestContext
from modelyard.serving.shm_regions import SHM_ROOT, ClientRef
from modelyard.types import HOST_OUTPUTS, InferResponse, StagedOnHost, Tensor, host_data


def pack_request(
    key: int,
    ctx: RequestContext,
    pool: tensor_pool.ShmPool,
    region_tokens: set[int],
    may_write_outputs: bool,
) -> RequestItem:
    """The Execute item for one request; ``region_tokens`` collects the client regions the
    worker may map because of it. ``may_write_outputs``: the response may bypass the server
    (outputs into client regions, replies straight to a BLS caller)."""
    r = ctx.request
    refs = r.shm_inputs
    inputs = [
        _pack_input(t, refs.get(t.name) if refs else None, pool, region_tokens) for t in r.inputs
    ]
    dests = None
    if r.shm_outputs and may_write_outputs:
        dests = {}
        for name, ref in r.shm_outputs.items():
            region_tokens.add(ref.token)
            dests[name] = output_destination(ref)
    return RequestItem(
        key,
        r.id,
        r.correlation_id,
        r.flags,
        inputs,
        ctx.output_names,
        r.parameters,
        r.timeout_us,
        dests,
        None if ctx.trace is None else ctx.trace.worker_info(),
        r.reply_to if may_write_outputs else None,
        r.output_device != HOST_OUTPUTS,
    )


def _pack_input(
    t: Tensor, ref: ClientRef | None, pool: tensor_pool.ShmPool, region_tokens: set[int]
) -> PackedTensor:
    """A reference to the client's region when the input is exactly a view of it (the
    worker maps the region itself), else a copy into the pool."""
    if t.device is not None:
        return pack_tensor(t, pool)
    assert t.data is not None
    payload = input_payload(ref, t.data) if ref is not None else None
    if payload is not None:
        assert ref is not None
        token = ref.token
        # On first use, make sure the key still names the object the server registered.
        if token in region_tokens or still_registered_object(ref.info):
            region_tokens.add(token)
            return (t.name, t.datatype, tuple(t.data.shape), payload)
    return tensor_pool.pack(t.name, t.datatype, t.data, pool)


def pack_tensor(t: Tensor, pool: tensor_pool.ShmPool) -> PackedTensor:
    """A server tensor for a worker's frame; a GPU tensor (a model's, passed through BLS) as
    the CUDA IPC reference it came with (to one worker), else as its host copy marked with
    its device (tensor_pool.on_gpu)."""
    device = t.device
    if isinstance(device, cuda_ipc.IpcTensor):
        ref = device.hand_on()
        if ref is not None:
            return (t.name, t.datatype, t.shape, ref)
    packed = tensor_pool.pack(t.name, t.datatype, host_data(t), pool)
    return packed if device is None else tensor_pool.on_gpu(packed, device.device_id)


def unpack_tensor(
    packed: PackedTensor, mapper: tensor_pool.ShmMapper, release: Callable[[str], None]
) -> Tensor:
    """A tensor from a worker's frame as the server's: a GPU tensor as an IpcTensor (no
    copy; ``release`` frees its export unless a worker takes it over) or a StagedOnHost."""
    name, datatype, shape, data = packed
    if type(data) is not list or not tensor_pool.from_gpu(data):  # (bytes: no call)
        name, datatype, arr = tensor_pool.unpack(packed, mapper)
        return Tensor(name, datatype, tuple(arr.shape), arr)
    if cuda_ipc.is_ipc(data):
        shape = tuple(shape)
        ipc = cuda_ipc.IpcTensor(data, shape, datatype, release)
        return Tensor(name, datatype, shape, device=ipc)
    name, datatype, arr = tensor_pool.unpack(packed, mapper)  # (a marked host copy)
    return Tensor(name, datatype, tuple(arr.shape), arr, device=StagedOnHost(int(data[1]), arr))


def unpack_response(
    ctx: RequestContext,
    payload: Response,
    final: bool,
    version: str,
    mapper: tensor_pool.ShmMapper,
    release: Callable[[str], None],
) -> InferResponse:
    req = ctx.request
    resp = InferResponse(req.model_name, version, req.id, final=final)
    if payload.error is not None:
        resp.error = ModelyardError(*payload.error)
        resp.model_error = True
        return resp
    for packed in payload.tensors:
        name, datatype, shape, data = packed
        if type(data) is list and data[0] == client_regions.WRITTEN:  # (arrays decode as lists)
            _, nbytes = data
            region = req.shm_outputs[name].region if req.shm_outputs else ""
            written = {shm_regions.REGION: region, shm_regions.BYTE_SIZE: nbytes}
            resp.outputs.append(Tensor(name, datatype, shape, parameters=written))
            continue
        resp.outputs.append(unpack_tensor(packed, mapper, release))
    if payload.parameters:
        resp.parameters = payload.parameters
    return resp


# -- client shared-memory regions passed by reference (protocol/client_regions.py) ------------


def input_payload(ref: ClientRef, array: np.ndarray[Any, Any]) -> tuple[Any, ...] | None:
    """The reference that replaces a copy of ``array``, or None when ``array`` is not exactly
    the region bytes the request bound (the core may have replaced or converted it)."""
    if array.dtype.hasobject or not array.flags.c_contiguous or array.nbytes == 0:
        return None
    if array.ctypes.data != ref.addr or array.nbytes > ref.byte_size:
        return None
    return (INPUT, ref.info, ref.offset, int(array.nbytes))


def still_registered_object(info: tuple[Any, ...]) -> bool:
    """Whether the key still names the object the server mapped at registration (a client may
    unlink and recreate it; the server then reads the old object, as Triton does)."""
    _token, key, file_id, _offset, _size = info
    try:
        st = os.stat(os.path.join(SHM_ROOT, str(key).lstrip("/")), follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == tuple(file_id)


def direct_outputs(config_json: str) -> bool:
    """Whether the worker may write outputs into client regions: not when the model's
    responses are cached (a cached response must carry its data)."""
    try:
        cache = json.loads(config_json or "{}").get("response_cache") or {}
    except (ValueError, AttributeError):
        return False
    return not cache.get("enable")


def output_destination(ref: ClientRef) -> OutputDestination:
    return (ref.info, ref.offset, ref.byte_size)
