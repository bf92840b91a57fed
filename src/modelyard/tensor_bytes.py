"""Raw tensor bytes <-> numpy, shared by both frontends and the core.

Layout is Triton's binary tensor format: little-endian, row-major, no padding; BYTES
elements are a 4-byte little-endian length followed by the bytes.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from modelyard.types import ELEMENT_SIZE, numpy_dtype

_LEN = struct.Struct("<I")

# raw_from_array copies tensors up to this size: a copy of a few KiB costs less than building
# a zero-copy byte view (reshape, view, .data: ~6k instructions).
SMALL_COPY_BYTES = 16 * 1024


def serialize_bytes(array: np.ndarray[Any, Any]) -> bytes:
    """Length-prefixed concatenation of a BYTES tensor's elements, in row-major order."""
    if array.size == 0:
        return b""
    parts: list[bytes] = []
    for item in array.reshape(-1, order="C"):
        if isinstance(item, bytes):
            b = item
        elif isinstance(item, str):
            b = item.encode("utf-8")
        elif isinstance(item, (bytearray, memoryview, np.bytes_)):
            b = bytes(item)
        else:
            b = str(item).encode("utf-8")
        parts.append(_LEN.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def deserialize_bytes(buf: bytes | bytearray | memoryview) -> list[bytes]:
    """Split a length-prefixed BYTES buffer into its elements.

    Raises ValueError when the buffer is truncated.
    """
    mv = memoryview(buf)
    out: list[bytes] = []
    pos, end = 0, len(mv)
    while pos < end:
        if pos + 4 > end:
            raise ValueError("truncated length prefix in BYTES tensor data")
        (n,) = _LEN.unpack_from(mv, pos)
        pos += 4
        if pos + n > end:
            raise ValueError("BYTES element runs past the end of the tensor data")
        out.append(bytes(mv[pos : pos + n]))
        pos += n
    return out


def bytes_array(elements: list[bytes], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    arr = np.empty(len(elements), dtype=np.object_)
    arr[:] = elements
    return arr.reshape(shape)


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def expected_byte_size(datatype: str, shape: tuple[int, ...]) -> int | None:
    """Byte size a fixed-size tensor must have; None for BYTES (variable size)."""
    size = ELEMENT_SIZE.get(datatype)
    return None if size is None else size * element_count(shape)


def array_from_raw(
    datatype: str, shape: tuple[int, ...], raw: bytes | bytearray | memoryview
) -> np.ndarray[Any, Any]:
    """A numpy view of raw tensor bytes (a copy only for BYTES). Sizes must already match."""
    if datatype == "BYTES":
        return bytes_array(deserialize_bytes(raw), shape)
    return np.frombuffer(raw, dtype=numpy_dtype(datatype)).reshape(shape)


def raw_from_array(datatype: str, array: np.ndarray[Any, Any]) -> bytes | memoryview:
    """Wire bytes of a tensor: a copy for small ones, else a zero-copy view where the layout
    allows."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if array.nbytes <= SMALL_COPY_BYTES:
        return array.tobytes()  # C order whatever the layout; b"" when empty
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    # A byte view of any fixed-size dtype (memoryview cannot export e.g. bfloat16 itself).
    return array.reshape(-1).view(np.uint8).data
