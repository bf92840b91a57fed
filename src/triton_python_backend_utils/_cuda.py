"""The little of CUDA a GPU ``pb_utils.Tensor`` needs: wait for a producer's work on a
device, copy device memory to and from the host, and allocate device memory that is freed
when its owner goes.

Through ``cuda-python``'s runtime bindings when they can talk to the driver, else through
torch (``torch.cuda``); a process with neither has no way to touch a GPU, and a GPU tensor is
refused there with Triton's text. :func:`runtime` picks once; tests of the GPU paths on a
machine without one replace it with a stand-in for the device (see tests/gpu).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from ._errors import TritonModelException

__all__ = ["CudaRuntime", "available", "runtime"]

NO_GPU_TEXT = (
    "DLPack capsule passed pointer to memory allocated on GPU device,           when GPU is "
    "not available"
)


class CudaRuntime(Protocol):
    """What GPU tensors ask of CUDA."""

    def on_device(self, device_id: int) -> AbstractContextManager[None]:
        """Make ``device_id`` the calling thread's current device for a while (producers such
        as torch export only tensors of the current device, as Triton's ScopedSetDevice)."""

    def synchronize(self, device_id: int) -> None:
        """Wait until work queued on ``device_id``'s legacy default stream is done."""

    def copy_to_host(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        """Copy ``nbytes`` of device memory at ``src`` to host memory at ``dst``."""

    def copy_to_device(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        """Copy ``nbytes`` of host memory at ``src`` to device memory at ``dst``."""

    def allocate(self, nbytes: int, device_id: int) -> tuple[int, Any]:
        """``nbytes`` of memory on ``device_id``: (address, owner); freed when the owner goes."""


class _CudaPython:
    """cuda-python's runtime bindings (``cuda.bindings.runtime`` or ``cuda.cudart``)."""

    def __init__(self, rt: Any):
        self._rt = rt

    def _check(self, result: Any, what: str) -> Any:
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            raise TritonModelException(f"{what}: {err}")
        return result[1] if isinstance(result, tuple) and len(result) > 1 else None

    @contextmanager
    def on_device(self, device_id: int) -> Iterator[None]:
        rt = self._rt
        current = self._check(rt.cudaGetDevice(), "Failed to get current CUDA device id.")
        if current != device_id:
            self._check(rt.cudaSetDevice(device_id), f"Failed to set CUDA device {device_id}")
        try:
            yield
        finally:
            if current != device_id:
                rt.cudaSetDevice(current)

    def synchronize(self, device_id: int) -> None:
        with self.on_device(device_id):
            self._check(
                self._rt.cudaStreamSynchronize(0),
                f"Failed to synchronize CUDA device with id {device_id}",
            )

    def copy_to_host(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        kind = self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        with self.on_device(device_id):  # (no context made on another device for the copy)
            self._check(
                self._rt.cudaMemcpy(dst, src, nbytes, kind), "cudaMemcpy to the host failed"
            )

    def copy_to_device(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        kind = self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        with self.on_device(device_id):
            self._check(
                self._rt.cudaMemcpy(dst, src, nbytes, kind), "cudaMemcpy to the device failed"
            )

    # -- CUDA IPC (process mode: GPU tensors between worker processes) -------------------

    def ipc_export(self, address: int, device_id: int) -> tuple[bytes, int]:
        """The IPC handle of the allocation holding ``address``, and the offset of
        ``address`` in it (an allocator such as torch's hands out parts of larger blocks)."""
        driver = _driver()
        with self.on_device(device_id):
            err, base, _size = driver.cuMemGetAddressRange(address)
            if int(err) != 0:
                raise TritonModelException(f"cuMemGetAddressRange failed: {err}")
            handle = self._check(self._rt.cudaIpcGetMemHandle(int(base)), "cudaIpcGetMemHandle")
        return _handle_bytes(handle), address - int(base)

    def ipc_open(self, handle: bytes, device_id: int) -> int:
        """Map another process's allocation here; its base address."""
        rt = self._rt
        h = rt.cudaIpcMemHandle_t()
        if hasattr(h, "reserved"):  # (cuda-python before 13.4)
            h.reserved = handle
        else:  # the struct's 64 bytes, behind getPtr()
            ctypes.memmove(h.getPtr(), handle, _IPC_HANDLE_SIZE)
        flags = rt.cudaIpcMemLazyEnablePeerAccess
        with self.on_device(device_id):
            return int(self._check(rt.cudaIpcOpenMemHandle(h, flags), "cudaIpcOpenMemHandle"))

    def copy_on_device(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        kind = self._rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        with self.on_device(device_id):
            self._check(self._rt.cudaMemcpy(dst, src, nbytes, kind), "cudaMemcpy on the device")

    def ipc_close(self, base: int, device_id: int) -> None:
        with self.on_device(device_id):
            self._rt.cudaIpcCloseMemHandle(base)

    def allocate(self, nbytes: int, device_id: int) -> tuple[int, Any]:
        with self.on_device(device_id):
            address = int(
                self._check(
                    self._rt.cudaMalloc(max(nbytes, 1)),
                    f"Failed to allocate {nbytes} bytes on CUDA device {device_id}",
                )
            )
        owner = _Allocation()
        weakref.finalize(owner, self._free, address, device_id)
        return address, owner

    def _free(self, address: int, device_id: int) -> None:
        with self.on_device(device_id):
            self._rt.cudaFree(address)


class _Torch:
    """torch.cuda: a device-wide synchronize, and copies through a DLPack view."""

    def __init__(self, torch: Any):
        self._torch = torch

    def on_device(self, device_id: int) -> AbstractContextManager[None]:
        manager: AbstractContextManager[None] = self._torch.cuda.device(device_id)
        return manager

    def synchronize(self, device_id: int) -> None:
        self._torch.cuda.synchronize(device_id)

    def copy_to_host(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        from . import _dlpack

        torch = self._torch
        capsule = _dlpack.make_capsule(
            src, _dlpack.KDL_CUDA, device_id, (nbytes,), (_dlpack.KDL_UINT, 8, 1), None
        )
        with self.on_device(device_id):
            source = torch.utils.dlpack.from_dlpack(capsule)
            host = torch.from_numpy(_host_bytes(dst, nbytes))
            host.copy_(source)

    def copy_to_device(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        from . import _dlpack

        torch = self._torch
        capsule = _dlpack.make_capsule(
            dst, _dlpack.KDL_CUDA, device_id, (nbytes,), (_dlpack.KDL_UINT, 8, 1), None
        )
        with self.on_device(device_id):
            target = torch.utils.dlpack.from_dlpack(capsule)
            target.copy_(torch.from_numpy(_host_bytes(src, nbytes)))
            torch.cuda.synchronize(device_id)

    def allocate(self, nbytes: int, device_id: int) -> tuple[int, Any]:
        torch = self._torch
        owner = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device_id}")
        return int(owner.data_ptr()), owner


class _Allocation:
    """The owner of memory ``_CudaPython.allocate`` made (its finalizer frees it)."""

    __slots__ = ("__weakref__",)


def _host_bytes(address: int, nbytes: int) -> Any:
    import numpy as np

    buffer = (ctypes.c_char * nbytes).from_address(address)
    return np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8)


@functools.cache
def _detect() -> CudaRuntime | None:
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            rt = importlib.import_module(name)
        except ImportError:
            continue
        err, count = rt.cudaGetDeviceCount()
        if int(err) == 0 and count > 0:
            return _CudaPython(rt)
        break
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None
    if torch.cuda.is_available():
        return _Torch(torch)
    return None


_IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)


def _handle_bytes(handle: Any) -> bytes:
    if hasattr(handle, "reserved"):  # (cuda-python before 13.4)
        return bytes(handle.reserved)
    return ctypes.string_at(handle.getPtr(), _IPC_HANDLE_SIZE)


def _driver() -> Any:
    try:
        return importlib.import_module("cuda.bindings.driver")
    except ImportError:  # cuda-python before 12.6
        return importlib.import_module("cuda.cuda")


def ipc() -> _CudaPython | None:
    """The runtime that can share device memory with other processes (cuda-python), or None:
    GPU tensors then travel between processes as host copies."""
    found = _detect()
    return found if isinstance(found, _CudaPython) else None


def available() -> bool:
    """Whether this process can use a GPU (cuda-python or torch, a driver and a device)."""
    return _detect() is not None


def runtime() -> CudaRuntime:
    """The process's CUDA, or Triton's "when GPU is not available" error."""
    found = _detect()
    if found is None:
        raise TritonModelException(NO_GPU_TEXT)
    return found
