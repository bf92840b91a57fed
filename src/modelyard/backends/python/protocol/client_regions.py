"""Zero-copy client shared memory for process-mode Python workers.

A request whose input views a client-registered system shared-memory region reaches the worker
as a reference to that region instead of a copy in the worker pool; an output the client wants
in a region is written there by the worker, straight from the model's array. Both sides use:

- region info ``(token, key, (st_dev, st_ino), offset, byte_size)``: one registration (token)
  of a key; the worker maps [offset, offset + byte_size) of ``/dev/shm/<key>`` itself, once per
  token (read-only for inputs, read-write for outputs), checks it is the very object the server
  registered, and drops the mapping when the server says the region was unregistered;
- an input payload ``(INPUT, info, offset, nbytes)`` and an output destination
  ``(info, offset, byte_size)``, offsets relative to the region.

The worker never writes outside a destination and only opens keys the server sent it (which
the server validated at registration).
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from modelyard.serving.shm_regions import SHM_ROOT, ClientRef
from modelyard.types import numpy_dtype

INPUT = "@region"  # an input payload that names a client region (never a segment name)
WRITTEN = "@written"  # an output the worker wrote into its client region: (WRITTEN, nbytes)
MAX_CACHED = 32  # mappings kept per worker (per kind); the oldest goes first


class RegionError(Exception):
    """A client region the server passed can no longer be mapped (removed or replaced)."""


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
    try:
        st = os.stat(os.path.join(SHM_ROOT, str(info[1]).lstrip("/")), follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == tuple(info[2])


def direct_outputs(config_json: str) -> bool:
    """Whether the worker may write outputs into client regions: not when the model's
    responses are cached (a cached response must carry its data)."""
    try:
        cache = json.loads(config_json or "{}").get("response_cache") or {}
    except (ValueError, AttributeError):
        return False
    return not cache.get("enable")


def output_destination(ref: ClientRef) -> tuple[Any, ...]:
    return (ref.info, ref.offset, ref.byte_size)


class ClientRegions:
    """The worker's mappings of client regions, by registration token. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[bool, OrderedDict[int, tuple[mmap.mmap, memoryview]]] = {
            False: OrderedDict(), True: OrderedDict()}  # fmt: skip
        # Unregistered while a request used them: mapped per use from then on, never cached.
        self._forgotten: set[int] = set()

    def _region(self, info: tuple[Any, ...], writable: bool) -> memoryview:
        token = info[0]
        maps = self._maps[writable]
        with self._lock:
            entry = maps.get(token)
            if entry is not None:
                maps.move_to_end(token)
                return entry[1]
        mm, view = _map(info, writable)
        with self._lock:
            if token in self._forgotten:
                return view  # unmapped with the last view of it
            maps[token] = (mm, view)
            while len(maps) > MAX_CACHED:
                _close(*maps.popitem(last=False)[1])
        return view

    def input(self, payload: tuple[Any, ...], datatype: str,
              shape: tuple[int, ...]) -> np.ndarray[Any, Any]:  # fmt: skip
        """A read-only view of the input's bytes in the client's region."""
        _, info, offset, nbytes = payload
        try:
            view = self._region(info, writable=False)
        except OSError as e:
            raise RegionError(
                f"Unable to map shared memory region with key '{info[1]}' for an input: {e}"
            ) from None
        if offset < 0 or offset + nbytes > len(view):
            raise RegionError(f"input of {nbytes} bytes at {offset} is outside its region")
        dtype = numpy_dtype(datatype)
        arr = np.frombuffer(view, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
        return arr.reshape(shape)

    def write(self, dest: tuple[Any, ...], array: np.ndarray[Any, Any]) -> int | None:
        """Copy ``array`` into its destination; the bytes written, or None when it cannot go
        there (too large, BYTES, region gone): the server then writes it, or fails, as before."""
        info, offset, byte_size = dest
        nbytes = int(array.nbytes)
        if array.dtype.hasobject or nbytes > byte_size:
            return None
        try:
            view = self._region(info, writable=True)
        except OSError:
            return None
        if offset < 0 or offset + byte_size > len(view):
            return None
        if nbytes:
            out = np.frombuffer(view, dtype=np.uint8, count=nbytes, offset=offset)
            np.copyto(out.view(array.dtype).reshape(array.shape), array, casting="no")
            del out  # a region mapped for this write only goes now
        return nbytes

    def forget(self, tokens: list[int]) -> None:
        """Drop the mappings of unregistered regions (views still in use keep theirs alive)."""
        with self._lock:
            gone = [m.pop(t) for m in self._maps.values() for t in tokens if t in m]
            self._forgotten.update(tokens)
        for mm, view in gone:
            _close(mm, view)


def _map(info: tuple[Any, ...], writable: bool) -> tuple[mmap.mmap, memoryview]:
    """Map [offset, offset + byte_size) of the region's object; OSError when it is not the
    object the server registered any more (unlinked and recreated, shrunk)."""
    _token, key, file_id, offset, byte_size = info
    base = str(key).lstrip("/")
    if not base or "/" in base or base in (".", "..") or "\0" in base:
        raise OSError(f"invalid shm key '{key}'")
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(SHM_ROOT, base), flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != tuple(file_id):
            raise OSError(f"shared memory key '{key}' is not the object registered")
        if offset + byte_size > st.st_size:
            raise OSError(f"shared memory key '{key}' is smaller than its region")
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        mm = mmap.mmap(fd, offset + byte_size - start, mmap.MAP_SHARED, prot, offset=start)
    finally:
        os.close(fd)
    return mm, memoryview(mm)[offset - start : offset - start + byte_size]


def _close(mm: mmap.mmap, view: memoryview) -> None:
    try:
        view.release()
        mm.close()
    except BufferError:
        pass  # a request's array still views it: unmapped with the last view
