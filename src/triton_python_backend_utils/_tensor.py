"""pb_utils.Tensor: a named tensor in host memory (a numpy array) or in GPU memory (held for
the DLPack producer it came from), with DLPack import and export as Triton's ``PbTensor``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import _cuda, _dlpack
from ._errors import TritonModelException
from ._memory import DeviceMemory, dl_dtype, host_array, is_bf16, triton_code
from ._types import _DTYPE_TO_CODE, BF16_CODE, BYTES_CODE, dtype_code

__all__ = ["Tensor"]

_NOT_SUPPORTED = (
    "Provided tensor is not supported. Tensor must be a DLPack capsule         or have "
    "`__dlpack__` and `__dlpack_device__` attributes"
)
_NOT_CONTIGUOUS = (
    "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
    "C-Order are supported."
)
_ON_GPU = "Tensor is stored in GPU and cannot be converted to NumPy."
_BF16 = (
    "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() "
    "instead."
)
# The stream a CUDA producer is asked to make its work visible on (the legacy default
# stream); it is then synchronized, so the tensor never has pending work (as Triton's proxy
# stream, synchronized in PbTensor::FromDLPack).
_LEGACY_DEFAULT_STREAM = 1


class Tensor:
    """A named tensor. ``Tensor(name, array)`` takes both arguments positionally.

    A C-contiguous array is held as it is (no copy: later changes to the array show through
    ``as_numpy()``); other arrays are made contiguous with one copy. BYTES tensors hold an
    object (or ``bytes_``) array; elements that are not ``bytes`` are sent as ``str(x)``.
    ``Tensor.from_dlpack`` of a GPU tensor keeps its device memory (``is_cpu()`` is False).
    """

    __slots__ = ("__weakref__", "_array", "_code", "_gpu", "_name")

    _name: str
    _array: npt.NDArray[Any]
    _code: int
    _gpu: DeviceMemory | None

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
        self._gpu = None

    @classmethod
    def _from_server(cls, name: str, array: npt.NDArray[Any], code: int | None = None) -> Tensor:
        """Server-side constructor: no checks. ``array`` must be C-contiguous with a supported
        dtype (object arrays of ``bytes`` for BYTES, ml_dtypes' bfloat16 for BF16); ``code``
        is its Triton type code."""
        t = cls.__new__(cls)
        t._name = name
        t._array = array
        if code is None:
            dtype = array.dtype
            code = _DTYPE_TO_CODE.get(dtype)  # (the usual types: one lookup, per tensor)
            if code is None:
                code = BF16_CODE if is_bf16(dtype) else (dtype_code(dtype) or BYTES_CODE)
        t._code = code
        t._gpu = None
        return t

    @classmethod
    def _from_device(cls, name: str, memory: DeviceMemory) -> Tensor:
        t = cls.__new__(cls)
        t._name = name
        t._array = np.empty(0, dtype=np.uint8)  # (never shown: as_numpy() refuses)
        t._code = memory.code
        t._gpu = memory
        return t

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        """The tensor's array (the same object on every call; it shares the tensor's memory)."""
        if self._gpu is not None:
            raise TritonModelException(_ON_GPU)
        if self._code == BF16_CODE:
            raise TritonModelException(_BF16)
        return self._array

    def triton_dtype(self) -> int:
        """The Triton type code (BOOL=1 ... FP64=12, BYTES=13, BF16=14). Real Triton's binding
        of this method is broken (TypeError), so portable models do not use it."""
        return self._code

    def shape(self) -> list[int]:
        return list(self._gpu.shape if self._gpu is not None else self._array.shape)

    def is_cpu(self) -> bool:
        return self._gpu is None

    def _host_array(self) -> npt.NDArray[Any]:
        """The elements in host memory, for the runtime that sends them on: the array itself
        (BF16 as ml_dtypes' bfloat16), or a copy of GPU memory."""
        if self._gpu is not None:
            return self._gpu.to_host()
        return self._array

    def _on_host(self) -> Tensor:
        """This tensor in host memory (a GPU tensor's copy)."""
        if self._gpu is None:
            return self
        return Tensor._from_server(self._name, self._gpu.to_host(), self._code)

    def _to_device(self, device_id: int) -> Tensor:
        """This tensor on GPU ``device_id``: itself when it is there, else a copy. BYTES
        tensors stay on the host, and so does everything where no GPU can be used (Triton
        then falls back to CPU memory)."""
        gpu = self._gpu
        if gpu is not None and gpu.device_id == device_id:
            return self
        if self._code == BYTES_CODE or not _cuda.available():
            return self
        memory = DeviceMemory.upload(self._host_array(), self._code, device_id)
        return Tensor._from_device(self._name, memory)

    # -- DLPack ----------------------------------------------------------------------------

    def to_dlpack(self) -> Any:
        """A DLPack capsule ("dltensor") sharing this tensor's memory; it holds a reference to
        the tensor until its consumer releases it."""
        if self._code == BYTES_CODE:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._gpu is not None:
            gpu = self._gpu
            return _dlpack.make_capsule(
                gpu.data, _dlpack.KDL_CUDA, gpu.device_id, gpu.shape, dl_dtype(gpu.code), self
            )
        arr = self._array
        keep: Any = self
        if not arr.flags.writeable:
            # A read-only view (a frame's bytes) is exported as a copy: consumers may write.
            arr = np.array(arr, copy=True)
            keep = (self, arr)
        return _dlpack.make_capsule(
            arr.ctypes.data, _dlpack.KDL_CPU, 0, tuple(arr.shape), dl_dtype(self._code), keep
        )

    def __dlpack__(
        self,
        stream: Any = None,
        *,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """``to_dlpack()``. The tensor has no pending work (a GPU producer's was waited for on
        import), so it is ready on any ``stream`` the consumer names. The capsule is the
        unversioned kind whatever ``max_version`` allows, as DLPack lets a producer answer."""
        del stream, max_version
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(
                f"the tensor is on device {self.__dlpack_device__()}, not {dl_device}"
            )
        if copy:
            raise BufferError("the tensor can only be exported without a copy")
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._gpu is not None:
            return (_dlpack.KDL_CUDA, self._gpu.device_id)
        return (_dlpack.KDL_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A Tensor sharing the memory of a DLPack capsule or of an object with ``__dlpack__``
        and ``__dlpack_device__`` (CPU, CUDA host or CUDA memory)."""
        name = _check_name(name)
        if isinstance(tensor, Tensor):
            if tensor._gpu is not None:
                return Tensor._from_device(name, tensor._gpu)
            if tensor._code == BYTES_CODE:
                raise TritonModelException("DLPack does not have support for string tensors.")
            return Tensor._from_server(name, tensor._array, tensor._code)
        if _dlpack.is_capsule(tensor):
            return _import(name, tensor)
        if not (hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__")):
            raise TritonModelException(_NOT_SUPPORTED)
        device_type, device_id = (int(v) for v in tensor.__dlpack_device__())
        if device_type == _dlpack.KDL_CUDA:
            cuda = _cuda.runtime()
            with cuda.on_device(device_id):
                capsule = tensor.__dlpack__(stream=_LEGACY_DEFAULT_STREAM)
                cuda.synchronize(device_id)
            return _import(name, capsule)
        if device_type not in (_dlpack.KDL_CPU, _dlpack.KDL_CUDA_HOST):
            raise TritonModelException(
                f"DLDevice type {device_type} is not support by Python backend."
            )
        return _import(name, tensor.__dlpack__(stream=None))

    def __repr__(self) -> str:
        where = "" if self._gpu is None else f" device=cuda:{self._gpu.device_id}"
        return (
            f"<triton_python_backend_utils.Tensor name={self._name!r} "
            f"shape={self.shape()} dtype={_dtype_name(self)}{where}>"
        )


def _dtype_name(t: Tensor) -> str:
    from ._types import TRITON_CODE_TO_NAME

    return TRITON_CODE_TO_NAME.get(t._code, str(t._code))


def _import(name: str, capsule: Any) -> Tensor:
    """Triton's ``FromDLPackCapsule``: the capsule's memory, without a copy."""
    try:
        view, owner = _dlpack.take(capsule)
    except (ValueError, TypeError) as e:
        raise TritonModelException(f"Failed to import DLPack tensor: {e}") from None
    if not view.c_contiguous():
        raise TritonModelException(_NOT_CONTIGUOUS)
    if view.device_type not in (_dlpack.KDL_CPU, _dlpack.KDL_CUDA, _dlpack.KDL_CUDA_HOST):
        raise TritonModelException(
            f"DLDevice type {view.device_type} is not support by Python backend."
        )
    code = triton_code(view.dtype)
    if view.device_type == _dlpack.KDL_CUDA:
        memory = DeviceMemory(view.data, view.device_id, view.shape, code, owner)
        return Tensor._from_device(name, memory)
    return Tensor._from_server(name, host_array(view, code, owner), code)


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
