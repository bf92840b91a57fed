"""GPU tensors between processes through CUDA IPC (process mode), never through host memory.

The sender keeps the tensor's device memory alive under a name of its pool
(``ShmPool.keep``) and sends the memory's IPC handle: ``[IPC, device id, name, handle,
offset]`` in place of a tensor's bytes. The receiver maps that memory (no copy) and, when its
last reference goes, unmaps it and tells the sender, with a FREE for the name routed as a
shared-memory segment's is; the sender then lets the memory go. A worker that dies takes its
memory with it (its CUDA context goes), so nothing leaks on the device.

On the server a passing tensor is an :class:`IpcTensor`: handed on to the next worker as it
is, or read here when something needs its elements on the host. Without cuda-python (or with
``MODELYARD_CUDA_IPC=0``) GPU tensors travel as host copies (``tensor_pool.on_gpu``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

log = logging.getLogger("modelyard")

IPC = "@ipc"
_DISABLED = os.environ.get("MODELYARD_CUDA_IPC", "") == "0"
_warned = False


def is_ipc(data: Any) -> bool:
    """Whether a packed tensor's data is an IPC reference."""
    return type(data) is list and len(data) == 5 and data[0] == IPC


def export(memory: Any, keep: Callable[[Any], str]) -> list[Any] | None:
    """The IPC reference of ``memory`` (a ``pb_utils`` DeviceMemory), kept alive by ``keep``
    (the sender's ``ShmPool.keep``: the name a FREE gives back) until the receiver frees it;
    None where IPC cannot be used (the caller sends a copy)."""
    global _warned
    if _DISABLED:
        return None
    from triton_python_backend_utils import _cuda

    rt = _cuda.ipc()
    if rt is None:
        return None
    try:
        try:
            handle, offset = rt.ipc_export(memory.data, memory.device_id)
        except Exception:
            # Memory this process maps from another (a model passing on a tensor it got)
            # cannot be exported again: a copy on the device can.
            memory = _device_copy(rt, memory)
            handle, offset = rt.ipc_export(memory.data, memory.device_id)
    except Exception as e:  # e.g. memory that cannot be shared (managed, host-registered)
        if not _warned:
            _warned = True
            log.warning("CUDA IPC unavailable (%s); GPU tensors travel as host copies", e)
        return None
    return [IPC, memory.device_id, keep(memory), handle, offset]


def _device_copy(rt: Any, memory: Any) -> Any:
    torch = sys.modules.get("torch")  # (the model's own allocator, whose blocks come again)
    if torch is not None:
        owner = torch.empty(memory.nbytes, dtype=torch.uint8, device=f"cuda:{memory.device_id}")
        address = int(owner.data_ptr())
    else:
        address, owner = rt.allocate(memory.nbytes, memory.device_id)
    rt.copy_on_device(memory.data, address, memory.nbytes, memory.device_id)
    return dataclasses.replace(memory, data=address, owner=owner)


class _Maps:
    """The other processes' allocations mapped here, each once, counted by their users.

    Mapping costs milliseconds, and allocators such as torch's hand out the same blocks again
    and again: a mapping nobody uses stays open (the last ``IDLE`` of them) for the next
    tensor in the same allocation. A handle names one allocation for good, so a cached
    mapping is never taken for other memory."""

    IDLE = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[bytes, list[int]] = {}  # handle -> [base, users, device]
        self._idle: OrderedDict[bytes, None] = OrderedDict()

    def open(self, rt: Any, handle: bytes, device_id: int) -> int:
        with self._lock:
            entry = self._maps.get(handle)
            if entry is None:
                entry = self._maps[handle] = [rt.ipc_open(handle, device_id), 0, device_id]
            self._idle.pop(handle, None)
            entry[1] += 1
            return entry[0]

    def close(self, rt: Any, handle: bytes) -> None:
        closing = []
        with self._lock:
            entry = self._maps.get(handle)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            self._idle[handle] = None
            while len(self._idle) > self.IDLE:
                old, _ = self._idle.popitem(last=False)
                closing.append(self._maps.pop(old))
        for base, _users, device in closing:
            rt.ipc_close(base, device)


_MAPS = _Maps()


class _Mapping:
    """The owner of mapped memory: its finalizer unmaps it and frees the export."""

    __slots__ = ("__weakref__",)


def imported(
    data: list[Any], shape: tuple[int, ...], datatype: str, release: Callable[[str], None]
) -> Any:
    """The sender's memory itself, mapped here (a ``pb_utils`` DeviceMemory); ``release``
    gets the export's name when the last reference to it goes."""
    from triton_python_backend_utils import _cuda
    from triton_python_backend_utils._errors import TritonModelException
    from triton_python_backend_utils._memory import DeviceMemory
    from triton_python_backend_utils._types import TRITON_NAME_TO_CODE

    _, device_id, name, handle, offset = data
    rt = _cuda.ipc()
    if rt is None:
        release(name)
        raise TritonModelException(
            "a GPU tensor from another process needs cuda-python here (pip install "
            "'modelyard[gpu]')"
        )
    handle = bytes(handle)
    base = _MAPS.open(rt, handle, device_id)
    owner = _Mapping()
    weakref.finalize(owner, _unmap, rt, handle, name, release)
    return DeviceMemory(
        base + offset, device_id, tuple(shape), TRITON_NAME_TO_CODE[datatype], owner
    )


def _unmap(rt: Any, handle: bytes, name: str, release: Any) -> None:
    _MAPS.close(rt, handle)
    release(name)


def host_copy(
    data: list[Any], shape: tuple[int, ...], datatype: str, release: Callable[[str], None]
) -> np.ndarray[Any, Any]:
    """The elements of an IPC reference in host memory (the export is freed at once)."""
    host: np.ndarray[Any, Any] = imported(data, shape, datatype, release).to_host()
    return host


class IpcTensor:
    """A worker's exported GPU tensor on its way through the server (``Tensor.device``): the
    next worker gets the reference itself (:meth:`hand_on`, once); anything else that needs
    the elements reads them here (:meth:`to_host`). An export nobody took over is freed when
    this goes."""

    def __init__(
        self,
        data: list[Any],
        shape: tuple[int, ...],
        datatype: str,
        release: Callable[[str], None],
    ) -> None:
        self.device_id = int(data[1])
        self._data = data
        self._shape = shape
        self._datatype = datatype
        self._finalizer = weakref.finalize(self, release, data[2])

    def hand_on(self) -> list[Any] | None:
        """The reference, for the one worker that takes over freeing it; None after that."""
        if not self._finalizer.alive:
            return None
        self._finalizer.detach()
        return self._data

    def to_host(self) -> np.ndarray[Any, Any]:
        return host_copy(self._data, self._shape, self._datatype, lambda _name: None)
