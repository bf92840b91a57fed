"""JSON (non-binary) tensor data <-> numpy, per datatype, with Triton's rules and messages.

Input (protocol.md §3): ``data`` is row-major, flat or nested (nesting is only flattened, up
to depth 100); its element count must match ``shape``. Type errors come from Triton's JSON
layer and are INTERNAL (HTTP 500); FP16/BF16 are refused with INVALID_ARG (400).
Output: always a flat list; FP16/BF16 cannot be sent as JSON (400); BYTES become strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelyard.errors import InternalError, InvalidArgument
from modelyard.types import numpy_dtype

MAX_NESTING = 100

_UINT_TYPES = frozenset({"UINT8", "UINT16", "UINT32", "UINT64"})
_INT_TYPES = frozenset({"INT8", "INT16", "INT32", "INT64"})
_FLOAT_TYPES = frozenset({"FP32", "FP64"})
_HALF_TYPES = frozenset({"FP16", "BF16"})

_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


def _parse_error(what: str) -> InternalError:
    return InternalError(f"Unable to parse 'data': attempt to access JSON {what}")


def flatten(data: Any) -> list[Any]:
    """Row-major elements of a (possibly nested) JSON array; a scalar is one element."""
    if not isinstance(data, list):
        return [data]
    if not any(type(v) is list for v in data):
        return data  # the common case: already flat
    out: list[Any] = []
    _flatten_into(data, out, 0)
    return out


def _flatten_into(data: list[Any], out: list[Any], depth: int) -> None:
    if depth >= MAX_NESTING:
        raise InternalError(
            f"Unable to parse 'data': JSON array nesting is deeper than {MAX_NESTING}"
        )
    for v in data:
        if isinstance(v, list):
            _flatten_into(v, out, depth + 1)
        else:
            out.append(v)


def element_count(shape: list[int] | tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def array_from_json(
    name: str, datatype: str, shape: tuple[int, ...], data: Any
) -> np.ndarray[Any, Any]:
    """A numpy array of ``datatype`` and ``shape`` from an input's JSON ``data``."""
    if datatype in _HALF_TYPES:
        raise InvalidArgument(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data "
            f"format for input {name}"
        )
    values = flatten(data)
    if len(values) != element_count(shape):
        raise InternalError(
            "Unable to parse 'data': Shape does not match true shape of 'data' field"
        )
    if datatype == "BYTES":
        out = np.empty(len(values), dtype=np.object_)
        for i, v in enumerate(values):
            if type(v) is not str:
                raise InternalError(
                    "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
                )
            out[i] = v.encode("utf-8", "surrogatepass")
        return out.reshape(shape)
    if datatype == "BOOL":
        if not all(type(v) is bool for v in values):
            raise _parse_error("non-boolean as boolean")
        return np.array(values, dtype=np.bool_).reshape(shape)
    if datatype in _UINT_TYPES:
        if not all(type(v) is int and 0 <= v <= _U64_MAX for v in values):
            raise _parse_error("non-unsigned-integer as unsigned-integer")
        # Triton truncates to the width without a range check (UINT8 256 -> 0).
        wide = np.array(values, dtype=np.uint64)
        return wide.astype(numpy_dtype(datatype), copy=False).reshape(shape)
    if datatype in _INT_TYPES:
        if not all(type(v) is int and _I64_MIN <= v <= _I64_MAX for v in values):
            raise _parse_error("non-signed-integer as signed-integer")
        wide = np.array(values, dtype=np.int64)
        return wide.astype(numpy_dtype(datatype), copy=False).reshape(shape)
    if datatype in _FLOAT_TYPES:
        if not all(type(v) is float or type(v) is int for v in values):
            raise _parse_error("non-number as double")
        return np.array(values, dtype=numpy_dtype(datatype)).reshape(shape)
    raise InvalidArgument(f"invalid datatype for input {name}")


def bytes_to_str(name: str, item: Any) -> str:
    """One BYTES element as a JSON string; non-UTF-8 data cannot be sent as JSON."""
    if isinstance(item, str):
        return item
    if isinstance(item, (bytes, bytearray, memoryview, np.bytes_)):
        try:
            return bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(
                f"output '{name}' holds BYTES data that is not valid UTF-8, which cannot be "
                "sent as JSON. Please use the binary data format for output"
            ) from None
    return str(item)


def json_from_array(name: str, datatype: str, array: np.ndarray[Any, Any]) -> list[Any]:
    """An output's JSON ``data``: a flat row-major list."""
    if datatype in _HALF_TYPES:
        raise InvalidArgument(
            f"sending {datatype} data via JSON is not supported. Please use the binary data "
            "format for output"
        )
    if datatype == "BYTES":
        return [bytes_to_str(name, item) for item in array.reshape(-1)]
    result: list[Any] = array.reshape(-1).tolist()
    return result


def scalar_or_list(name: str, datatype: str, array: np.ndarray[Any, Any]) -> Any:
    """A generate-endpoint value: one element unwrapped, otherwise a flat list.

    Unlike ``/infer``, FP16/BF16 are converted (to float), as there is no binary choice here.
    """
    if datatype in _HALF_TYPES:
        flat: list[Any] = [float(v) for v in array.reshape(-1)]
    else:
        flat = json_from_array(name, datatype, array)
    return flat[0] if len(flat) == 1 else flat
