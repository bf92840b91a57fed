"""Tensor transport between the server and its Python workers.

Small tensors travel inline in the pickled frame. Tensors of at least ``INLINE_LIMIT`` bytes
are copied once into a shared-memory segment that the sender owns; the frame carries the
segment's name. Segments are files in /dev/shm, one tensor each, pooled by power-of-two size
class so steady traffic creates none. The receiver maps a segment once, hands out numpy views,
and tells the owner (a FREE message) when the last view is gone, so the owner can reuse it.

When /dev/shm is missing, full or too small, the pool degrades to inline transfer with a
warning instead of failing the model (Triton's users hit "failed to increase shm size").
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from modelyard.backends.python.protocol import cuda_ipc
from modelyard.backends.python.protocol.messages import PackedTensor
from modelyard.types import datatype_of, numpy_dtype

log = logging.getLogger("modelyard")

INLINE_LIMIT = 64 * 1024
MIN_SEGMENT = 64 * 1024
# MODELYARD_SHM_DIR points elsewhere (a bigger tmpfs; or a missing folder to force inline).
SHM_DIR = os.environ.get("MODELYARD_SHM_DIR", "/dev/shm")


class _Segment:
    __slots__ = ("mm", "name", "size")

    def __init__(self, name: str, size: int, mm: mmap.mmap):
        self.name = name
        self.size = size
        self.mm = mm


class ShmPool:
    """Segments this side writes into. Thread-safe: FREE messages arrive on another thread."""

    def __init__(self, prefix: str, enabled: bool = True, limit_bytes: int = 4 << 30):
        self.prefix = prefix
        self._limit = limit_bytes
        self._lock = threading.Lock()
        self._free: dict[int, list[_Segment]] = {}
        self._by_name: dict[str, _Segment] = {}
        self._owned_bytes = 0
        self._count = 0
        self._kept: dict[str, Any] = {}  # GPU memory exported to other processes, by name
        self.enabled = enabled and os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)
        if enabled and not self.enabled:
            log.warning("%s is not usable; tensors travel inline through the socket", SHM_DIR)

    def alloc(self, nbytes: int) -> _Segment | None:
        """A free segment of at least nbytes, or None: send inline."""
        if not self.enabled:
            return None
        size = max(MIN_SEGMENT, 1 << (nbytes - 1).bit_length())
        with self._lock:
            free = self._free.get(size)
            if free:
                return free.pop()
            if self._owned_bytes + size > self._limit:
                return None
            self._count += 1
            name = f"{self.prefix}-{self._count}"
            self._owned_bytes += size
        seg = self._create(name, size)
        with self._lock:
            if seg is None:
                self._owned_bytes -= size
                return None
            self._by_name[name] = seg
        return seg

    def _create(self, name: str, size: int) -> _Segment | None:
        path = os.path.join(SHM_DIR, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            self._disable(f"cannot create {path}: {e}")
            return None
        try:
            # Reserve the pages now: a tmpfs that is too small fails here with ENOSPC instead
            # of killing a process with SIGBUS when the page is first touched.
            os.posix_fallocate(fd, 0, size)
            mm = mmap.mmap(fd, size)
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            self._disable(f"cannot reserve {size} bytes in {SHM_DIR}: {e}")
            return None
        os.close(fd)
        return _Segment(name, size, mm)

    def _disable(self, why: str) -> None:
        if self.enabled:
            log.warning("shared memory unavailable (%s); large tensors now travel inline", why)
        self.enabled = False

    def keep(self, memory: Any) -> str:
        """Hold ``memory`` (GPU memory another process maps: cuda_ipc.py) under a name of
        this pool until a FREE for that name comes back."""
        with self._lock:
            self._count += 1
            name = f"{self.prefix}-g{self._count}"
            self._kept[name] = memory
        return name

    def free_bytes(self) -> int:
        """Bytes still to hand out: the limit less the segments a live tensor holds."""
        with self._lock:
            idle = sum(size * len(segs) for size, segs in self._free.items())
            return self._limit - self._owned_bytes + idle

    def release(self, names: list[str]) -> None:
        with self._lock:
            for name in names:
                seg = self._by_name.get(name)
                if seg is not None:
                    self._free.setdefault(seg.size, []).append(seg)
                elif self._kept:
                    self._kept.pop(name, None)

    def close(self) -> None:
        with self._lock:
            segments = list(self._by_name.values())
            self._by_name.clear()
            self._free.clear()
            self._kept.clear()
        for seg in segments:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(SHM_DIR, seg.name))
            try:
                seg.mm.close()
            except BufferError:
                pass  # a view is still alive; the mapping goes with the process


class ShmMapper:
    """Maps segments the other side owns, by name, once each."""

    def __init__(self, on_release: Callable[[str], None]):
        self._maps: dict[str, mmap.mmap] = {}
        self._on_release = on_release

    def released(self, name: str) -> None:
        """Tell the owner that ``name`` (a segment or a GPU export) is no longer used here."""
        self._on_release(name)

    def view(
        self, name: str, datatype: str, shape: tuple[int, ...], nbytes: int
    ) -> np.ndarray[Any, Any]:
        mm = self._maps.get(name)
        if mm is None:
            fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
            try:
                mm = mmap.mmap(fd, 0)
            finally:
                os.close(fd)
            self._maps[name] = mm
        base = flat_view(mm, datatype, nbytes)
        weakref.finalize(base, self._on_release, name)
        return base.reshape(shape)

    def forget_prefix(self, prefix: str) -> None:
        for name in [n for n in self._maps if n.startswith(prefix)]:
            self._maps.pop(name)


def flat_view(buffer: Any, datatype: str, nbytes: int, offset: int = 0) -> np.ndarray[Any, Any]:
    """A 1-D numpy view of ``nbytes`` of ``buffer`` at ``offset`` (a fixed-size datatype)."""
    dtype = numpy_dtype(datatype)
    return np.frombuffer(buffer, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)


def pack_array(name: str, array: np.ndarray[Any, Any], pool: ShmPool) -> PackedTensor:
    """:func:`pack` with the datatype of the array's dtype (a model's own array)."""
    return pack(name, datatype_of(array.dtype), array, pool)


def pack(name: str, datatype: str, array: np.ndarray[Any, Any], pool: ShmPool) -> PackedTensor:
    """Describe a tensor for a frame, copying it into shared memory when it is large.

    Inline tensors travel as raw bytes (pickling an ndarray costs several times more);
    BYTES tensors travel as their object arrays.
    """
    shape = tuple(array.shape)
    if datatype == "BYTES":
        return (name, datatype, shape, array)
    if array.nbytes < INLINE_LIMIT:
        return (name, datatype, shape, array.tobytes())
    seg = pool.alloc(array.nbytes)
    if seg is None:
        return (name, datatype, shape, array.tobytes())
    dst: np.ndarray[Any, Any] = np.ndarray(shape, dtype=array.dtype, buffer=seg.mm)
    np.copyto(dst, array, casting="no")
    return (name, datatype, shape, (seg.name, array.nbytes))


# A GPU tensor travels as a host copy wrapped with the device it came from, [ON_GPU, device id,
# payload], so the model receiving it can get it on that device again (process mode).
ON_GPU = "@gpu"


def _marked(data: Any) -> bool:
    """Whether a packed tensor's data is :func:`on_gpu`'s mark."""
    return type(data) is list and len(data) == 3 and data[0] == ON_GPU


def on_gpu(packed: PackedTensor, device_id: int) -> PackedTensor:
    """``packed`` marked as the host copy of a tensor made on GPU ``device_id``."""
    name, datatype, shape, data = packed
    return (name, datatype, shape, [ON_GPU, device_id, data])


def pack_model_tensor(tensor: Any, pool: ShmPool, ipc: bool = False) -> PackedTensor:
    """A model's ``pb_utils.Tensor`` for a frame: a GPU tensor as an IPC reference to its
    memory where ``ipc`` allows and CUDA can (cuda_ipc.py), else as its host copy, marked."""
    gpu = tensor._gpu
    if gpu is not None and ipc:
        ref = cuda_ipc.export(gpu, pool.keep)
        if ref is not None:
            from triton_python_backend_utils._types import TRITON_CODE_TO_NAME

            return (tensor.name(), TRITON_CODE_TO_NAME[gpu.code], tuple(gpu.shape), ref)
    packed = pack_array(tensor.name(), tensor._host_array(), pool)
    return packed if gpu is None else on_gpu(packed, gpu.device_id)


def model_tensor(pb: Any, packed: PackedTensor, mapper: ShmMapper, device: int | None) -> Any:
    """A packed tensor as the ``pb_utils.Tensor`` a model gets: on GPU ``device`` (an IPC
    reference: the sender's memory itself), or in host memory for None."""
    name, datatype, shape, data = packed
    if device is not None and cuda_ipc.is_ipc(data):
        memory = cuda_ipc.imported(data, tuple(shape), datatype, mapper.released)
        return pb.Tensor._from_device(name, memory)._to_device(device)
    _, _, arr = unpack(packed, mapper)
    tensor = pb.Tensor._from_server(name, arr)
    return tensor if device is None else tensor._to_device(device)


def from_gpu(data: Any) -> bool:
    """Whether a packed tensor's data is a GPU tensor's: :func:`on_gpu`'s mark or an IPC
    reference (host data is bytes, an array, or a segment's ``[name, nbytes]``)."""
    return type(data) is list and len(data) > 2 and (_marked(data) or cuda_ipc.is_ipc(data))


def gpu_of(packed: PackedTensor) -> int | None:
    """The GPU a packed tensor came from (:func:`on_gpu`, or an IPC reference), or None for
    a host tensor."""
    data = packed[3]
    return int(data[1]) if from_gpu(data) else None


def unpack(packed: PackedTensor, mapper: ShmMapper) -> tuple[str, str, np.ndarray[Any, Any]]:
    """Name, datatype and array of a packed tensor (a view of the frame's bytes or the
    segment; a GPU tensor's host copy)."""
    name, datatype, shape, data = packed
    if type(data) is bytes:
        return name, datatype, np.frombuffer(data, dtype=numpy_dtype(datatype)).reshape(shape)
    if isinstance(data, np.ndarray):
        return name, datatype, data
    if _marked(data):
        return unpack((name, datatype, shape, data[2]), mapper)
    if cuda_ipc.is_ipc(data):  # (where a host copy is what is wanted)
        return name, datatype, cuda_ipc.host_copy(data, tuple(shape), datatype, mapper.released)
    segment, nbytes = data
    return name, datatype, mapper.view(segment, datatype, shape, nbytes)


def segments(tensors: list[PackedTensor]) -> list[str]:
    """The names of the pool segments ``tensors`` refer to."""
    out = []
    for _, _, _, data in tensors:
        if _marked(data):
            data = data[2]
        elif cuda_ipc.is_ipc(data):
            out.append(data[2])  # (an export: freed the same way)
            continue
        # [segment, nbytes] (a client region's output is [WRITTEN, nbytes]: not a segment)
        if type(data) is list and len(data) == 2 and type(data[0]) is str and data[0][:1] != "@":
            out.append(data[0])
    return out


def owner(segment: str) -> str:
    """The prefix of the pool that made ``segment`` (ShmPool names are ``<prefix>-<n>``)."""
    return segment.rpartition("-")[0]


_swept_dead = False


def sweep_dead_servers() -> None:
    """Remove the segments of servers that are gone (``modelyard-<server pid>-...``): a
    server killed with SIGKILL cleans up nothing, and its segments hold memory (/dev/shm is
    RAM) until someone does. Once per process; a pid still in use is left alone."""
    global _swept_dead
    if _swept_dead:
        return
    _swept_dead = True
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    dead: dict[str, bool] = {}
    for name in names:
        pid = name.split("-")[1] if name.startswith("modelyard-") else ""
        if not pid.isdigit():
            continue
        if pid not in dead:
            dead[pid] = not process_alive(int(pid))
        if dead[pid]:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(SHM_DIR, name))


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a process now (another user's counts), for sweeping what dead
    servers left."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def sweep(prefix: str) -> None:
    """Remove segments a dead process left behind."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(SHM_DIR, name))
