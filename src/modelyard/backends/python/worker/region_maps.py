"""The worker's side of zero-copy client shared memory (protocol/client_regions.py): it maps
the regions the server passes by reference, reads inputs from them and writes outputs into
them."""

from __future__ import annotations

import mmap
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from modelyard.backends.python.protocol.client_regions import SHM_ROOT
from modelyard.backends.python.protocol.messages import OutputDestination, RegionInfo
from modelyard.backends.python.protocol.tensor_pool import flat_view

MAX_CACHED = 32  # mappings kept per worker (per kind); the oldest goes first


class RegionError(Exception):
    """A client region the server passed can no longer be mapped (removed or replaced)."""


class ClientRegions:
    """The worker's mappings of client regions, by registration token. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[bool, OrderedDict[int, tuple[mmap.mmap, memoryview]]] = {
            False: OrderedDict(),
            True: OrderedDict(),
        }
        # Unregistered while a request used them: mapped per use from then on, never cached.
        self._forgotten: set[int] = set()

    def _region(self, info: RegionInfo, writable: bool) -> memoryview:
        token = info[0]  # (the registration: RegionInfo's first item)
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

    def input(
        self, payload: Sequence[Any], datatype: str, shape: tuple[int, ...]
    ) -> np.ndarray[Any, Any]:
        """A read-only view of the input's bytes in the client's region."""
        _, info, offset, nbytes = payload
        try:
            view = self._region(info, writable=False)
        except OSError as e:
            _token, key, *_ = info
            raise RegionError(
                f"Unable to map shared memory region with key '{key}' for an input: {e}"
            ) from None
        if offset < 0 or offset + nbytes > len(view):
            raise RegionError(f"input of {nbytes} bytes at {offset} is outside its region")
        return flat_view(view, datatype, nbytes, offset).reshape(shape)

    def write(self, dest: OutputDestination, array: np.ndarray[Any, Any]) -> int | None:
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


def _map(info: RegionInfo, writable: bool) -> tuple[mmap.mmap, memoryview]:
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
