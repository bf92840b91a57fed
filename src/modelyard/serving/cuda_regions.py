"""CUDA shared-memory extension: regions of a client's GPU memory, registered by IPC handle.

A client allocates device memory, exports a ``cudaIpcMemHandle_t`` for it and registers the
handle under a name (system shared memory's names too: ``shm_regions.py`` keeps both kinds in
one table). The server opens the handle once, on the region's device, and copies per request:
an input from the region into a host tensor, an output from host memory into the region. The
CUDA calls are behind :class:`CudaRuntime` (``cuda_runtime.py`` makes them with cuda-python).
A region stays open while a request still holds a slice of it, even once unregistered. Texts
and codes follow Triton 2.51 (``shared_memory_manager.cc``, ``http_server.cc``).
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import Any, Protocol

import numpy as np

from modelyard.errors import InternalError, InvalidArgument

log = logging.getLogger("modelyard")

HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)
BAD_HANDLE = "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
_OPEN_FAILED = "failed to register shared memory region: invalid args"
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/]")
# cudaError_t names that say this machine cannot do CUDA IPC at all (no usable driver or
# device; a platform without IPC, such as WSL): the register is answered as by a server without
# GPUs. Any other failure to open says the handle is bad (Triton's "invalid args").
_UNUSABLE = frozenset(
    {
        "cudaErrorInitializationError",
        "cudaErrorInsufficientDriver",
        "cudaErrorCallRequiresNewerDriver",
        "cudaErrorNoDevice",
        "cudaErrorDevicesUnavailable",
        "cudaErrorStubLibrary",
        "cudaErrorOperatingSystem",
        "cudaErrorNotPermitted",
        "cudaErrorNotSupported",
        "cudaErrorSystemNotReady",
        "cudaErrorSystemDriverMismatch",
        "cudaErrorCompatNotSupportedOnDevice",
    }
)


class CudaFailure(Exception):
    """A CUDA call failed: ``call`` is the function, ``error`` the cudaError_t's name."""

    def __init__(self, call: str, error: str) -> None:
        super().__init__(f"{call}: {error}")
        self.call = call
        self.error = error

    @property
    def unusable(self) -> bool:
        return self.error in _UNUSABLE


class CudaRuntime(Protocol):
    """The CUDA calls client regions need; each raises :class:`CudaFailure`. Addresses are
    integers: device addresses from ``open``, host ones of numpy buffers."""

    def device_count(self) -> int: ...

    def open(self, handle: bytes, device_id: int) -> int:
        """The device address of the memory ``handle`` exports, opened on ``device_id``."""
        ...

    def span(self, ptr: int, device_id: int) -> int:
        """The bytes from ``ptr`` to the end of the allocation it is in."""
        ...

    def to_host(self, dst: int, src: int, nbytes: int, device_id: int) -> None: ...

    def to_device(self, dst: int, src: int, nbytes: int, device_id: int) -> None: ...

    def close(self, ptr: int, device_id: int) -> None: ...


def cuda_unsupported(name: str) -> InvalidArgument:
    """Triton's answer to a CUDA registration on a server without GPU support."""
    return InvalidArgument(
        f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
    )


def decode_handle(text: str) -> bytes:
    """A base64 handle's bytes as Triton decodes them (libb64): characters outside the
    alphabet, '=' included, are skipped, and a last lone character adds nothing."""
    digits = _NOT_BASE64.sub("", text)
    if len(digits) % 4 == 1:
        digits = digits[:-1]
    return base64.b64decode(digits + "=" * (-len(digits) % 4))


def open_region(
    runtime: CudaRuntime, name: str, handle: bytes, device_id: int, byte_size: int
) -> CudaRegion:
    """Open ``handle`` on ``device_id`` as region ``name``, with Triton's checks and texts."""
    # A handle of another size cannot be one (Triton would read past it); a device the
    # runtime does not have would open the memory on whichever device is current.
    if len(handle) != HANDLE_SIZE or not 0 <= device_id < runtime.device_count():
        raise InvalidArgument(_OPEN_FAILED)
    try:
        ptr = runtime.open(handle, device_id)
    except CudaFailure as e:
        if e.unusable:
            log.warning("CUDA shared memory is not available here: %s", e)
            raise cuda_unsupported(name) from None
        log.error("failed to open CUDA IPC handle: %s", e)  # the client gets Triton's text
        raise InvalidArgument(_OPEN_FAILED) from None
    region = CudaRegion(name, device_id, byte_size, ptr, runtime)
    try:
        span = runtime.span(ptr, device_id)
    except CudaFailure as e:
        log.error("failed to get the size of CUDA shared memory region '%s': %s", name, e)
        span = -1
    if byte_size > span:
        region.release()
        raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
    return region


class CudaRegion:
    """A registered CUDA region: ``byte_size`` bytes of device ``device_id`` at ``ptr``."""

    def __init__(
        self, name: str, device_id: int, byte_size: int, ptr: int, runtime: CudaRuntime
    ) -> None:
        self.name = name
        self.device_id = device_id
        self.byte_size = byte_size
        self.ptr = ptr
        self.runtime = runtime
        self._users = 0  # slices requests hold
        self._released = False
        self._closed = False
        self._lock = threading.Lock()

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def lease(self, offset: int, byte_size: int) -> CudaSlice:
        """Bytes [offset, offset + byte_size), held open until the slice is released. The
        caller holds the registry's lock, so no unregistration comes between its lookup and
        this."""
        with self._lock:
            self._users += 1
        return CudaSlice(self, offset, byte_size)

    def release(self) -> None:
        """Unregistered: close the handle now, or when the last slice is let go."""
        with self._lock:
            self._released = True
            close = self._users == 0
        if close:
            self._close()

    def leave(self) -> None:
        """A slice is let go."""
        with self._lock:
            self._users -= 1
            close = self._released and self._users == 0
        if close:
            self._close()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.runtime.close(self.ptr, self.device_id)
        except CudaFailure as e:
            log.error("failed to close CUDA IPC handle of region '%s': %s", self.name, e)


class CudaSlice:
    """A request's hold on bytes [offset, offset + byte_size) of a CUDA region: the region
    stays open until :meth:`release` (or until the slice is garbage)."""

    __slots__ = ("_held", "byte_size", "offset", "region")

    def __init__(self, region: CudaRegion, offset: int, byte_size: int) -> None:
        self.region = region
        self.offset = offset
        self.byte_size = byte_size
        self._held = True

    def read(self) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """A host copy of the slice's bytes."""
        out = np.empty(self.byte_size, np.uint8)
        if self.byte_size:
            r = self.region
            self._copy(r.runtime.to_host, out.ctypes.data, r.ptr + self.offset, out.nbytes)
        return out

    def write(self, payload: np.ndarray[Any, Any]) -> None:
        """Copy ``payload`` (at most ``byte_size`` bytes) to the start of the slice."""
        data = np.ascontiguousarray(payload)
        if data.nbytes:
            r = self.region
            self._copy(r.runtime.to_device, r.ptr + self.offset, data.ctypes.data, data.nbytes)

    def _copy(self, how: Any, dst: int, src: int, nbytes: int) -> None:
        try:
            how(dst, src, nbytes, self.region.device_id)
        except CudaFailure as e:
            raise InternalError(
                f"failed to copy CUDA shared memory region '{self.region.name}': {e}"
            ) from None

    def release(self) -> None:
        if self._held:
            self._held = False
            self.region.leave()

    def __enter__(self) -> CudaSlice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # (at interpreter exit the runtime may be gone)
            pass
