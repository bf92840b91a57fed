"""The CUDA calls of client CUDA shared memory (``cuda_regions.CudaRuntime``), through
cuda-python's runtime bindings (``cuda.bindings.runtime``; ``cuda.cudart`` before 12.6).

Nothing here imports CUDA until :func:`load` is called, at a server's first CUDA registration,
and :func:`load` asks ``modelyard.devices`` first: a machine without GPUs imports nothing.
Every call makes the region's device current for its duration (``cudaSetDevice``), because
requests come on any thread and the current device is per thread (an in-process model's torch
on that thread finds its own device again after). Copies go through one non-blocking stream
per device and are waited for, so an output is in device memory before the client is answered
and no model's own work on the default stream is waited on.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Iterator
from typing import Any

from modelyard.devices import cuda_bindings, discover_gpus
from modelyard.serving.cuda_regions import HANDLE_SIZE, CudaFailure, CudaRuntime

log = logging.getLogger("modelyard")


def load() -> CudaRuntime | None:
    """cuda-python's runtime when this machine has a GPU it can use, else None."""
    found = discover_gpus()
    if not found.devices:
        return None
    rt, driver = cuda_bindings("runtime"), cuda_bindings("driver")
    if rt is None or driver is None:
        log.info("CUDA shared memory needs cuda-python (pip install modelyard[gpu])")
        return None
    try:
        (count,) = _call("cudaGetDeviceCount", rt.cudaGetDeviceCount)
    except CudaFailure as e:  # a driver too old for cuda-python, a broken installation
        log.warning("CUDA shared memory: the CUDA runtime cannot be used (%s)", e)
        return None
    if not count:
        return None
    return CudaPython(rt, driver, int(count))


def _name(err: Any) -> str:
    return str(getattr(err, "name", err))


class CudaPython:
    """:class:`~modelyard.serving.cuda_regions.CudaRuntime` with cuda-python's bindings."""

    def __init__(self, rt: Any, driver: Any, count: int) -> None:
        self._rt = rt
        self._driver = driver
        self._count = count
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()

    def device_count(self) -> int:
        return self._count

    def open(self, handle: bytes, device_id: int) -> int:
        rt = self._rt
        ipc = rt.cudaIpcMemHandle_t()
        if hasattr(ipc, "reserved"):  # (cuda-python before 13.4)
            ipc.reserved = handle
        else:  # the struct's bytes, behind getPtr()
            ctypes.memmove(ipc.getPtr(), handle, HANDLE_SIZE)
        flags = rt.cudaIpcMemLazyEnablePeerAccess
        with self._on(device_id):
            (ptr,) = _call("cudaIpcOpenMemHandle", rt.cudaIpcOpenMemHandle, ipc, flags)
        return int(ptr)

    def span(self, ptr: int, device_id: int) -> int:
        with self._on(device_id):
            base, size = _call("cuMemGetAddressRange", self._driver.cuMemGetAddressRange, ptr)
        return int(base) + int(size) - ptr

    def to_host(self, dst: int, src: int, nbytes: int, device_id: int) -> None:
        self._copy(dst, src, nbytes, self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, device_id)

    def to_device(self, dst: int, src: int, nbytes: int, device_id: int) -> None:
        self._copy(dst, src, nbytes, self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice, device_id)

    def close(self, ptr: int, device_id: int) -> None:
        with self._on(device_id):
            _call("cudaIpcCloseMemHandle", self._rt.cudaIpcCloseMemHandle, ptr)

    # -- helpers -----------------------------------------------------------------------------

    def _copy(self, dst: int, src: int, nbytes: int, kind: Any, device_id: int) -> None:
        rt = self._rt
        with self._on(device_id):
            stream = self._stream(device_id)
            _call("cudaMemcpyAsync", rt.cudaMemcpyAsync, dst, src, nbytes, kind, stream)
            _call("cudaStreamSynchronize", rt.cudaStreamSynchronize, stream)

    def _stream(self, device_id: int) -> Any:
        """The device's stream for copies (the device is current)."""
        with self._lock:
            stream = self._streams.get(device_id)
            if stream is None:
                rt = self._rt
                create = rt.cudaStreamCreateWithFlags
                (stream,) = _call("cudaStreamCreateWithFlags", create, rt.cudaStreamNonBlocking)
                self._streams[device_id] = stream
        return stream

    @contextlib.contextmanager
    def _on(self, device_id: int) -> Iterator[None]:
        """``device_id`` current on this thread for the block, then the one before again
        where that one has a context (as torch's device guard does: restoring a device that
        has none would create one, on a GPU nothing here uses)."""
        rt = self._rt
        (before,) = _call("cudaGetDevice", rt.cudaGetDevice)
        if before == device_id:
            yield
            return
        _call("cudaSetDevice", rt.cudaSetDevice, device_id)
        try:
            yield
        finally:
            if self._has_context(before):
                _call("cudaSetDevice", rt.cudaSetDevice, before)

    def _has_context(self, device_id: int) -> bool:
        driver = self._driver
        try:
            (device,) = _call("cuDeviceGet", driver.cuDeviceGet, device_id)
            _flags, active = _call(
                "cuDevicePrimaryCtxGetState", driver.cuDevicePrimaryCtxGetState, device
            )
        except CudaFailure:
            return False
        return bool(active)


def _call(name: str, fn: Any, *args: Any) -> tuple[Any, ...]:
    """The values after the status in a binding's ``(err, *values)`` answer; CudaFailure when
    the status is not success, or when the binding itself fails (no driver library)."""
    try:
        err, *values = fn(*args)
    except Exception as e:
        raise CudaFailure(name, f"{type(e).__name__}: {e}") from None
    if int(err) != 0:  # (the runtime's cudaError_t and the driver's CUresult alike)
        raise CudaFailure(name, _name(err))
    return tuple(values)
