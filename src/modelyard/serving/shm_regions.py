"""Client shared-memory regions: the system (POSIX) extension, and the one table of names
that system and CUDA regions (``cuda_regions.py``) share.

Clients create a POSIX shared-memory object (``shm_open`` name such as ``/input0``), register
it by name, and then name the region in an inference request instead of sending tensor bytes.
Inputs are read as zero-copy, read-only numpy views of the mapping; outputs are written straight
into the client's region. A CUDA region's bytes are copied instead: inputs into a host tensor
when the request is bound, outputs into the region when the response comes. Error texts and
codes follow Triton's ``SharedMemoryManager``.

Security: a key must be a plain POSIX shm name (only leading slashes, no other '/', no '.'/'..',
no NUL), is opened under /dev/shm without following symlinks, must be a regular file, and may not
name the segments modelyard or Triton's Python backend create for themselves.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import stat
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelyard import tensor_bytes
from modelyard.errors import (
    AlreadyExists,
    InternalError,
    InvalidArgument,
    NotFound,
    Unsupported,
)
from modelyard.serving import cuda_runtime
from modelyard.serving.cuda_regions import (
    CudaRegion,
    CudaRuntime,
    CudaSlice,
    cuda_unsupported,
    open_region,
)
from modelyard.types import InferRequest, InferResponse, Tensor, host_data, numpy_dtype

log = logging.getLogger("modelyard")

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"

SHM_ROOT = "/dev/shm"  # where Linux keeps POSIX shared-memory objects (glibc's shm_open)
# Segments servers create for themselves; a client may not map them (they hold other requests'
# tensors). Triton reserves the first; modelyard's worker pool uses the second.
RESERVED_PREFIXES = ("triton_python_backend_shm_region_", "modelyard-")
DISABLED_MESSAGE = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
_NAME_MAX = 255
_tokens = itertools.count(1)  # one per registration, unique in this process
# Callbacks told the token of every region unregistered (Python workers drop their mappings).
_release_listeners: list[weakref.WeakMethod[Callable[[int], None]]] = []


@dataclass(eq=False)
class Region:
    """A registered region: ``view`` covers exactly [offset, offset + byte_size) of the key."""

    name: str
    key: str
    offset: int
    byte_size: int
    mm: mmap.mmap
    view: memoryview
    token: int = 0
    file_id: tuple[int, int] = (0, 0)  # (st_dev, st_ino): a worker maps this very object

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def release(self) -> None:
        """Unmap now if no request still views the region; otherwise the mapping goes away
        with the last view (a region in use is freed after its requests finish)."""
        try:
            self.view.release()
            self.mm.close()
        except BufferError:
            pass
        for ref in list(_release_listeners):
            callback = ref()
            if callback is None:
                _release_listeners.remove(ref)
            else:
                callback(self.token)

    def info(self) -> tuple[Any, ...]:
        """What another process needs to map this region itself (see ClientRef):
        ``(token, key, (st_dev, st_ino), offset, byte_size)``."""
        return (self.token, self.key, self.file_id, self.offset, self.byte_size)


def on_region_released(callback: Callable[[int], None]) -> None:
    """Call ``callback(token)`` (a bound method, held weakly) when a region is unregistered."""
    _release_listeners.append(weakref.WeakMethod(callback))


@dataclass(slots=True)
class ClientRef:
    """Bytes [offset, offset + byte_size) of a registered region, for a Python worker that maps
    the region itself instead of receiving a copy. ``view`` keeps the server's mapping (and so
    the address ``addr``) alive while the request lives."""

    region: str
    info: tuple[Any, ...]  # Region.info()
    offset: int
    byte_size: int
    view: memoryview
    addr: int

    @property
    def token(self) -> int:
        """The registration this slice belongs to (the first item of ``info``)."""
        token: int = self.info[0]
        return token


@dataclass(slots=True)
class OutputTarget:
    """Where one output of a request goes: a writable slice of a system region, or a CUDA
    region's slice (held open while the request lives)."""

    region: str
    byte_size: int
    ref: ClientRef | CudaSlice


def shm_path(name: str, key: str) -> str:
    """The file under /dev/shm for ``key``, or InvalidArgument if the server may not open it."""
    base = key.lstrip("/")
    bad = not base or "/" in base or base in (".", "..") or "\0" in base or len(base) > _NAME_MAX
    if bad:
        raise InvalidArgument(
            f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )
    for prefix in RESERVED_PREFIXES:
        if base.startswith(prefix):
            raise InvalidArgument(
                f"cannot register shared memory region '{name}' with key '{key}' as the key "
                f"contains the reserved prefix '{prefix}'"
            )
    return os.path.join(SHM_ROOT, base)


def _map(
    name: str, key: str, path: str, offset: int, byte_size: int
) -> tuple[mmap.mmap, int, tuple[int, int]]:
    """Map the pages covering [offset, offset + byte_size); return the map and where the region
    starts in it (mmap offsets must be page aligned; Triton refuses unaligned ones)."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        raise InternalError(f"Unable to open shared memory region: '{key}'") from None
    try:
        st = os.fstat(fd)
        # Triton 2.51's answers (checked against it): a region beyond the object's end is
        # "invalid args"; an empty one fails its mmap (in Python a length 0 maps everything).
        if not stat.S_ISREG(st.st_mode) or offset + byte_size > st.st_size:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        if byte_size == 0:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': unable to process address "
                "spaceInvalid argument"
            )
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            mm = mmap.mmap(
                fd,
                offset + byte_size - start,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
                offset=start,
            )
        except (OSError, ValueError) as e:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': unable to process address "
                f"space{e.strerror if isinstance(e, OSError) else e}"
            ) from None
        return mm, offset - start, (st.st_dev, st.st_ino)
    finally:
        os.close(fd)


class SharedMemoryManager:
    """Registered client regions by name, system and CUDA alike (one namespace, as Triton's).
    Thread-safe (BLS threads may infer). ``cuda`` loads the CUDA runtime at the first CUDA
    registration (default: cuda-python's, or None without a GPU)."""

    def __init__(
        self, enabled: bool = True, cuda: Callable[[], CudaRuntime | None] | None = None
    ) -> None:
        self.enabled = enabled
        self._regions: dict[str, Region | CudaRegion] = {}
        self._lock = threading.Lock()
        self._load_cuda = cuda or cuda_runtime.load
        self._cuda: CudaRuntime | None = None
        self._cuda_loaded = False  # (the runtime is looked for once, when first needed)

    # -- the extensions' API -----------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_enabled()
        path = shm_path(name, key)
        with self._lock:
            self._check_new(name)
            mm, start, file_id = _map(name, key, path, offset, byte_size)
            view = memoryview(mm)[start : start + byte_size]
            self._regions[name] = Region(
                name, key, offset, byte_size, mm, view, next(_tokens), file_id
            )
        log.debug(
            "registered system shared memory region '%s' (key '%s', offset %d, %d bytes)",
            name,
            key,
            offset,
            byte_size,
        )

    def cuda_register(self, name: str, handle: bytes, device_id: int, byte_size: int) -> None:
        """Open a client's CUDA IPC ``handle`` as region ``name``. Without a GPU (or the CUDA
        runtime): Triton's CPU-only answer, once the name is known to be free."""
        self._check_enabled()
        with self._lock:
            self._check_new(name)
            if not self._cuda_loaded:
                self._cuda, self._cuda_loaded = self._load_cuda(), True
            if self._cuda is None:
                raise cuda_unsupported(name)
            self._regions[name] = open_region(self._cuda, name, handle, device_id, byte_size)
        log.debug(
            "registered CUDA shared memory region '%s' (device %d, %d bytes)",
            name,
            device_id,
            byte_size,
        )

    def unregister(self, name: str = "") -> None:
        """Forget ``name`` ("" = every system region); unknown names are not an error, nor
        is a CUDA region's name (Triton)."""
        self._unregister(Region, name)

    def cuda_unregister(self, name: str = "") -> None:
        self._unregister(CudaRegion, name)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        return self._status(Region, name)

    def cuda_status(self, name: str = "") -> list[dict[str, Any]]:
        return self._status(CudaRegion, name)

    def close(self) -> None:
        with self._lock:
            gone, self._regions = list(self._regions.values()), {}
        for region in gone:
            region.release()

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise Unsupported(DISABLED_MESSAGE)

    def _check_new(self, name: str) -> None:
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' already in manager")

    def _unregister(self, kind: type[Region | CudaRegion], name: str) -> None:
        self._check_enabled()
        with self._lock:
            named = [name] if name else list(self._regions)
            gone = [self._regions.pop(n) for n in named if isinstance(self._regions.get(n), kind)]
        for region in gone:
            region.release()

    def _status(self, kind: type[Region | CudaRegion], name: str) -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                regions = self._regions
                return [
                    regions[n].status() for n in sorted(regions) if isinstance(regions[n], kind)
                ]
            region = self._regions.get(name)
        this, other = ("system", "CUDA") if kind is Region else ("CUDA", "system")
        if region is None:
            raise NotFound(f"Unable to find {this.lower()} shared memory region: '{name}'")
        if not isinstance(region, kind):
            raise NotFound(
                f"The region named '{name}' is registered as {other} shared memory, "
                f"not {this} shared memory"
            )
        return [region.status()]

    # -- inference ---------------------------------------------------------------------------

    def _slice(self, name: str, offset: int, byte_size: int) -> ClientRef | CudaSlice:
        """The bytes [offset, offset + byte_size) of a region, with Triton's checks."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find shared memory region: '{name}'")
            size = region.byte_size
            if offset < 0 or offset >= size:
                raise InvalidArgument(f"Invalid offset for shared memory region: '{name}'")
            if byte_size < 0 or offset + byte_size > size:
                raise InvalidArgument(
                    f"Invalid offset + byte size for shared memory region: '{name}'"
                )
            if isinstance(region, CudaRegion):
                return region.lease(offset, byte_size)
            part = region.view[offset : offset + byte_size]
            info = region.info()
        addr = np.frombuffer(part, np.uint8).ctypes.data if byte_size else 0
        return ClientRef(name, info, offset, byte_size, part, addr)

    def bind(self, request: InferRequest) -> dict[str, OutputTarget] | None:
        """Point every input that names a region at its bytes (``raw``: the core's validation
        turns it into a numpy array): a read-only view of a system region, a host copy of a
        CUDA one. Look up the outputs' regions; return the outputs to write after inference
        (None when there are none)."""
        for t in request.inputs:
            params = t.parameters
            if params and REGION in params:
                region = str(params[REGION])
                ref = self._slice(region, _int(params.get(OFFSET, 0)), _int(params[BYTE_SIZE]))
                t.data = None
                if isinstance(ref, CudaSlice):
                    with ref:
                        t.raw = ref.read().data
                    continue
                t.raw = ref.view.toreadonly()
                if request.shm_inputs is None:
                    request.shm_inputs = {}
                request.shm_inputs[t.name] = ref
        targets: dict[str, OutputTarget] | None = None
        for out in request.outputs or ():
            params = out.parameters
            if params and REGION in params:
                region = str(params[REGION])
                size = _int(params[BYTE_SIZE])
                ref = self._slice(region, _int(params.get(OFFSET, 0)), size)
                if targets is None:
                    targets = {}
                targets[out.name] = OutputTarget(region, size, ref)
        # (a Python worker maps system regions itself; CUDA ones only the server copies to)
        system = {n: t.ref for n, t in (targets or {}).items() if isinstance(t.ref, ClientRef)}
        request.shm_outputs = system or None
        return targets

    @staticmethod
    def write_outputs(response: InferResponse, targets: dict[str, OutputTarget]) -> None:
        """Copy each output bound to a region into it; the response then carries no data for
        it. An output larger than its region fails the request (INTERNAL, as Triton)."""
        outputs = response.outputs
        for i, tensor in enumerate(outputs):
            target = targets.get(tensor.name)
            if target is None or _written(tensor):
                continue
            nbytes = _write(tensor, target)
            outputs[i] = Tensor(
                tensor.name,
                tensor.datatype,
                tensor.shape,
                parameters={REGION: target.region, BYTE_SIZE: nbytes},
            )


def uses_shared_memory(request: InferRequest) -> bool:
    for t in request.inputs:
        if t.parameters and REGION in t.parameters:
            return True
    return any(out.parameters and REGION in out.parameters for out in request.outputs or ())


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"shared memory offset and byte size must be integers, got {value!r}")
    return value


def _written(tensor: Tensor) -> bool:
    """A Python worker already wrote this output into the client's region."""
    return tensor.data is None and tensor.raw is None and REGION in tensor.parameters


def _write(tensor: Tensor, target: OutputTarget) -> int:
    """Write one output into its target; return the bytes written."""
    if tensor.data is not None:
        array = tensor.data
        if tensor.datatype == "BYTES":
            payload: Any = np.frombuffer(tensor_bytes.serialize_bytes(array), np.uint8)
        else:
            payload = np.asarray(array, dtype=numpy_dtype(tensor.datatype))
    elif tensor.raw is not None:
        payload = np.frombuffer(tensor.raw, np.uint8)
    elif tensor.device is not None:  # (a GPU tensor not yet copied to the host)
        payload = np.asarray(host_data(tensor), dtype=numpy_dtype(tensor.datatype))
    else:
        payload = np.empty(0, np.uint8)
    nbytes = int(payload.nbytes)
    if nbytes > target.byte_size:
        raise InternalError(
            f"shared memory size specified with the request for output '{tensor.name}' "
            f"({target.byte_size} bytes) should be at least {nbytes} bytes to hold the results"
        )
    ref = target.ref
    if isinstance(ref, CudaSlice):
        ref.write(payload)
    elif nbytes:
        dest = np.frombuffer(ref.view, dtype=payload.dtype, count=payload.size)
        np.copyto(dest.reshape(payload.shape), payload)
    return nbytes
