"""pb_utils.Tensor: a named numpy array (CPU only), with DLPack import/export."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import TritonModelException
from ._types import BYTES_CODE, dtype_code

__all__ = ["Tensor"]

_DL_CPU = 1
_DL_CUDA_HOST = 3

_NOT_SUPPORTED = (
    "Provided tensor is not supported. Tensor must be a DLPack capsule         or have "
    "`__dlpack__` and `__dlpack_device__` attributes"
)
_NOT_CONTIGUOUS = (
    "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
    "C-Order are supported."
)


class _CapsuleSource:
    """Presents a raw DLPack capsule to ``np.from_dlpack``, which wants an object."""

    __slots__ = ("_capsule",)

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CPU, 0)


class Tensor:
    """A named tensor. ``Tensor(name, array)`` takes both arguments positionally.

    A C-contiguous array is held as it is (no copy: later changes to the array show through
    ``as_numpy()``); other arrays are made contiguous with one copy. BYTES tensors hold an
    object (or ``bytes_``) array; elements that are not ``bytes`` are sent as ``str(x)``.
    """

    __slots__ = ("__weakref__", "_array", "_code", "_name")

    _name: str
    _array: npt.NDArray[Any]
    _code: int

    def __init__(self, name: str, array: npt.NDArray[Any], /) -> None:
        # As Triton's binding: both argument types are checked first (TypeError, pybind11's
        # text), then the name's value.
        if not isinstance(name, (str, bytes)) or not isinstance(array, np.ndarray):
            raise TypeError(_incompatible(name, array))
        self._name = _check_name(name)
        code = dtype_code(array.dtype)
        if code is None:
            dt = array.dtype
            if dt.kind in "biuf" and not dt.isnative:
                array = array.astype(dt.newbyteorder("="))
                code = dtype_code(array.dtype)
            if code is None:
                raise TritonModelException("NumPy dtype is not supported.")
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._array = array
        self._code = code

    @classmethod
    def _from_server(cls, name: str, array: npt.NDArray[Any], code: int | None = None) -> Tensor:
        """Server-side constructor: no checks. ``array`` must be C-contiguous with a supported
        dtype (object arrays of ``bytes`` for BYTES); ``code`` is its Triton type code."""
        t = cls.__new__(cls)
        t._name = name
        t._array = array
        t._code = code if code is not None else (dtype_code(array.dtype) or BYTES_CODE)
        return t

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        """The tensor's array (the same object on every call; it shares the tensor's memory)."""
        return self._array

    def triton_dtype(self) -> int:
        """The Triton type code (BOOL=1 ... FP64=12, BYTES=13). Real Triton's binding of this
        method is broken (TypeError), so portable models do not use it."""
        return self._code

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    # -- DLPack ----------------------------------------------------------------------------

    def _dlpack_array(self) -> npt.NDArray[Any]:
        if self._code == BYTES_CODE:
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self._array

    def to_dlpack(self) -> Any:
        """A DLPack capsule ("dltensor") sharing this tensor's memory.

        A read-only array cannot be exported unversioned, so it is exported from a copy."""
        arr = self._dlpack_array()
        try:
            return arr.__dlpack__()
        except BufferError as e:
            if arr.flags.writeable:
                raise TritonModelException(str(e)) from None
        try:
            return np.array(arr, copy=True).__dlpack__()
        except BufferError as e:
            raise TritonModelException(str(e)) from None

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        arr = self._dlpack_array()
        if kwargs:
            # Newer consumers ask for a versioned capsule; numpy 1.x arrays only take `stream`
            # and the resulting TypeError tells the consumer to retry without the keywords.
            return arr.__dlpack__(stream=stream, **kwargs)
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A Tensor sharing the memory of a DLPack capsule or a ``__dlpack__`` object (CPU)."""
        name = _check_name(name)
        if isinstance(tensor, Tensor):
            arr = tensor._dlpack_array()
            return Tensor._from_server(name, arr, tensor._code)
        if type(tensor).__name__ == "PyCapsule":
            source: Any = _CapsuleSource(tensor)
        elif hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__"):
            device_type = int(tensor.__dlpack_device__()[0])
            if device_type not in (_DL_CPU, _DL_CUDA_HOST):
                raise TritonModelException(
                    f"DLDevice type {device_type} is not support by Python backend."
                )
            source = tensor
        else:
            raise TritonModelException(_NOT_SUPPORTED)
        try:
            arr = np.from_dlpack(source)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            raise TritonModelException(f"Failed to import DLPack tensor: {e}") from None
        if not arr.flags.c_contiguous:
            raise TritonModelException(_NOT_CONTIGUOUS)
        code = dtype_code(arr.dtype)
        if code is None or code == BYTES_CODE:
            raise TritonModelException(f"DLPack tensor dtype {arr.dtype} is not supported.")
        return Tensor._from_server(name, arr, code)

    def __repr__(self) -> str:
        return (
            f"<triton_python_backend_utils.Tensor name={self._name!r} "
            f"shape={list(self._array.shape)} dtype={self._array.dtype}>"
        )


def _incompatible(*args: Any) -> str:
    """pybind11's TypeError text for ``Tensor(...)`` called with arguments it cannot take."""
    return (
        "__init__(): incompatible constructor arguments. The following argument types are "
        "supported:\n    1. c_python_backend_utils.Tensor(arg0: str, arg1: numpy.ndarray)\n\n"
        f"Invoked with: {', '.join(repr(a) for a in args)}"
    )


def _check_name(name: Any) -> str:
    if isinstance(name, bytes):
        name = name.decode("utf-8")
    if not isinstance(name, str):
        raise TypeError(f"Tensor name must be str, got {type(name).__name__}")
    if not name:
        raise TritonModelException("Tensor name cannot be an empty string.")
    return name
