"""Where a ``pb_utils.Tensor``'s elements live: DLPack dtypes <-> Triton type codes, host
memory of an imported DLPack tensor as a numpy array, and GPU memory held for a producer."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _cuda, _dlpack
from ._errors import TritonModelException
from ._types import _CODE_TYPES, BF16_CODE, BYTES_CODE

__all__ = [
    "DeviceMemory",
    "bf16_dtype",
    "dl_dtype",
    "host_array",
    "is_bf16",
    "numpy_dtype",
    "triton_code",
]

# Triton type code -> (DLPack type code, bits), as triton_to_dlpack_type.
_DL_OF_CODE: dict[int, tuple[int, int]] = {
    1: (_dlpack.KDL_BOOL, 8),
    2: (_dlpack.KDL_UINT, 8),
    3: (_dlpack.KDL_UINT, 16),
    4: (_dlpack.KDL_UINT, 32),
    5: (_dlpack.KDL_UINT, 64),
    6: (_dlpack.KDL_INT, 8),
    7: (_dlpack.KDL_INT, 16),
    8: (_dlpack.KDL_INT, 32),
    9: (_dlpack.KDL_INT, 64),
    10: (_dlpack.KDL_FLOAT, 16),
    11: (_dlpack.KDL_FLOAT, 32),
    12: (_dlpack.KDL_FLOAT, 64),
    BF16_CODE: (_dlpack.KDL_BFLOAT, 16),
}
_CODE_OF_DL = {dl: code for code, dl in _DL_OF_CODE.items()}
# The numeric types (BYTES has no DLPack form), from _types' one table of codes.
_NUMPY_OF_CODE: dict[int, np.dtype[Any]] = {
    code: np.dtype(t) for code, t in _CODE_TYPES if code != BYTES_CODE
}


@functools.cache
def bf16_dtype() -> np.dtype[Any]:
    """How BF16 elements are held on the host: ml_dtypes' bfloat16 (what the server's tensors
    use), or their raw 16 bits where ml_dtypes is missing."""
    try:
        import ml_dtypes

        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    except ImportError:  # pragma: no cover - ml_dtypes comes with tritonclient
        return np.dtype(np.uint16)


def is_bf16(dtype: np.dtype[Any]) -> bool:
    # (Every tensor the server hands a model asks this: the cheap test first.)
    return dtype.kind == "V" and dtype == bf16_dtype()


def numpy_dtype(code: int) -> np.dtype[Any]:
    return bf16_dtype() if code == BF16_CODE else _NUMPY_OF_CODE[code]


def dl_dtype(code: int) -> tuple[int, int, int]:
    dl_code, bits = _DL_OF_CODE[code]
    return (dl_code, bits, 1)


def triton_code(dtype: tuple[int, int, int]) -> int:
    """Triton's ``dlpack_to_triton_type``; unsupported types raise."""
    code, bits, lanes = dtype
    if lanes == 1:
        if code == _dlpack.KDL_BFLOAT and bits != 16:
            raise TritonModelException(f"Expected BF16 tensor to have 16 bits, but had: {bits}")
        found = _CODE_OF_DL.get((code, bits))
        if found is not None:
            return found
    raise TritonModelException(
        f"DLPack tensor dtype (code {code}, bits {bits}, lanes {lanes}) is not supported."
    )


class _Exposed:
    """Host memory as numpy sees it; keeps the DLPack owner alive as the array's base."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, view: _dlpack.View, dtype: np.dtype[Any], owner: Any):
        self.owner = owner
        self.__array_interface__ = {
            "version": 3,
            "shape": view.shape,
            "typestr": dtype.str,
            "descr": dtype.descr,
            "data": (view.data, False),
            "strides": None,
        }


def host_array(view: _dlpack.View, code: int, owner: Any) -> npt.NDArray[Any]:
    """The elements of an imported host tensor (compact, C order), without a copy."""
    dtype = numpy_dtype(code)
    if view.nbytes == 0 or not view.data:
        return np.empty(view.shape, dtype=dtype)
    if is_bf16(dtype):  # numpy's array interface knows no bfloat16: view the raw bits
        raw = np.asarray(_Exposed(view, np.dtype(np.uint16), owner))
        return raw.view(dtype)
    return np.asarray(_Exposed(view, dtype, owner))


@dataclass(frozen=True)
class DeviceMemory:
    """GPU memory a tensor refers to: compact, C order, kept alive by ``owner`` (the imported
    DLPack tensor, whose deleter frees or releases it)."""

    data: int
    device_id: int
    shape: tuple[int, ...]
    code: int
    owner: Any

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * (_DL_OF_CODE[self.code][1] // 8)

    def to_host(self) -> npt.NDArray[Any]:
        """A host copy (the runtime sends GPU outputs to clients this way)."""
        out = np.empty(self.shape, dtype=numpy_dtype(self.code))
        if self.nbytes:
            _cuda.runtime().copy_to_host(self.data, out.ctypes.data, self.nbytes, self.device_id)
        return out

    @classmethod
    def upload(cls, array: npt.NDArray[Any], code: int, device_id: int) -> DeviceMemory:
        """A copy of a host array in new memory on ``device_id`` (freed with the copy)."""
        array = np.ascontiguousarray(array)
        cuda = _cuda.runtime()
        address, owner = cuda.allocate(array.nbytes, device_id)
        if array.nbytes:
            cuda.copy_to_device(array.ctypes.data, address, array.nbytes, device_id)
        return cls(address, device_id, tuple(array.shape), code, owner)
