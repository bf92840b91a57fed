"""Data-type tables and the BYTES (length-prefixed) helpers of pb_utils."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "TRITON_STRING_TO_NUMPY",
    "deserialize_bytes_tensor",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]

# Config type strings -> numpy types. "TYPE_BOOL" maps to the builtin `bool` and there is no
# TYPE_BF16 entry, as in Triton.
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

BYTES_CODE = 13
BF16_CODE = 14

# Triton data-type codes (TRITONSERVER_DataType) <-> numpy scalar types, in code order.
_CODE_TYPES: tuple[tuple[int, Any], ...] = (
    (1, np.bool_),
    (2, np.uint8),
    (3, np.uint16),
    (4, np.uint32),
    (5, np.uint64),
    (6, np.int8),
    (7, np.int16),
    (8, np.int32),
    (9, np.int64),
    (10, np.float16),
    (11, np.float32),
    (12, np.float64),
    (13, np.object_),
)
_CODE_TO_TYPE: dict[int, Any] = dict(_CODE_TYPES)
_TYPE_TO_CODE: dict[Any, int] = {t: c for c, t in _CODE_TYPES}
_TYPE_TO_CODE[np.bytes_] = BYTES_CODE

# Exact dtypes a Tensor may hold (native byte order), and their codes.
_DTYPE_TO_CODE: dict[np.dtype[Any], int] = {np.dtype(t): c for c, t in _CODE_TYPES}

# Names used in Triton's protocol ("FP32", "BYTES", ...), indexed by code.
TRITON_CODE_TO_NAME: dict[int, str] = {
    1: "BOOL",
    2: "UINT8",
    3: "UINT16",
    4: "UINT32",
    5: "UINT64",
    6: "INT8",
    7: "INT16",
    8: "INT32",
    9: "INT64",
    10: "FP16",
    11: "FP32",
    12: "FP64",
    13: "BYTES",
    14: "BF16",
}

TRITON_NAME_TO_CODE: dict[str, int] = {name: code for code, name in TRITON_CODE_TO_NAME.items()}

_LEN = struct.Struct("<I")


def dtype_code(dtype: np.dtype[Any]) -> int | None:
    """The Triton code of a dtype a Tensor may hold, or None (unsupported or non-native)."""
    code = _DTYPE_TO_CODE.get(dtype)
    if code is None and dtype.kind == "S":
        return BYTES_CODE
    return code


def triton_to_numpy_type(data_type: Any) -> Any:
    """Triton type code -> numpy type (1 -> np.bool_ ... 13 -> np.object_); None otherwise."""
    try:
        return _CODE_TO_TYPE.get(data_type)
    except TypeError:  # unhashable: compare like Triton's chain of `==`
        for code, np_type in _CODE_TYPES:
            if data_type == code:
                return np_type
        return None


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy type (or dtype) -> Triton type code; np.object_ and np.bytes_ -> 13.

    Only numpy types match: the builtin ``bool`` gives None, as in Triton.
    """
    if type(data_type) is type:
        return _TYPE_TO_CODE.get(data_type)
    for code, np_type in _CODE_TYPES:
        if data_type == np_type:
            return code
    if data_type == np.bytes_:
        return BYTES_CODE
    return None


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """Config type string ("TYPE_FP32") -> numpy type; KeyError for unknown strings."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> Any:
    """Flatten a BYTES tensor (object or bytes_ dtype) in C order into length-prefixed bytes.

    Returns ``bytes``; ``()`` for an empty array and ``None`` for other dtypes (Triton's exact
    results). In object arrays, ``bytes`` elements are kept as they are and anything else is
    written as ``str(x).encode("utf-8")``.
    """
    if input_tensor.size == 0:
        return ()
    dtype = input_tensor.dtype
    if dtype == np.object_:
        parts: list[bytes] = []
        for item in input_tensor.ravel(order="C").tolist():
            s = item if type(item) is bytes else str(item).encode("utf-8")
            parts.append(_LEN.pack(len(s)))
            parts.append(s)
        return b"".join(parts)
    if dtype.type == np.bytes_:
        parts = []
        for s in input_tensor.ravel(order="C").tolist():
            parts.append(_LEN.pack(len(s)))
            parts.append(s)
        return b"".join(parts)
    return None


def deserialize_bytes_tensor(encoded_tensor: Any) -> npt.NDArray[np.object_]:
    """Parse length-prefixed elements into a 1-D object array of ``bytes``.

    A truncated buffer raises ``struct.error``.
    """
    view = memoryview(encoded_tensor)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    size = len(view)
    items: list[bytes] = []
    offset = 0
    unpack = _LEN.unpack_from
    while offset < size:
        (length,) = unpack(view, offset)
        offset += 4
        end = offset + length
        if end > size:
            raise struct.error(
                f"unpack_from requires a buffer of at least {end} bytes for unpacking "
                f"{length} bytes at offset {offset} (actual buffer size is {size})"
            )
        items.append(bytes(view[offset:end]))
        offset = end
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out
