"""DLPack capsules read and made with ctypes, for any device (no numpy, torch or CUDA needed).

Reading (:func:`take`): a ``"dltensor"`` (or ``"dltensor_versioned"``) capsule's tensor as a
:class:`View` (pointer with the byte offset applied, device, shape, strides, dtype); the
capsule is renamed ``"used_dltensor"`` (so its producer's destructor leaves it alone) and the
returned :class:`Owner` calls the producer's deleter when the last reference to it goes.

Making (:func:`make_capsule`): a ``"dltensor"`` capsule over memory some Python object keeps
alive; that object is referenced until the consumer calls the deleter (or, if no one consumes
the capsule, until the capsule itself goes), as Triton's ``PbTensor::ToDLPack`` does.
"""

from __future__ import annotations

import ctypes
import itertools
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KDL_BFLOAT",
    "KDL_BOOL",
    "KDL_CPU",
    "KDL_CUDA",
    "KDL_CUDA_HOST",
    "KDL_FLOAT",
    "KDL_INT",
    "KDL_UINT",
    "Owner",
    "View",
    "is_capsule",
    "live_exports",
    "make_capsule",
    "take",
]

# DLDeviceType
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
# DLDataTypeCode
KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
KDL_BOOL = 6

_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    pass


_MANAGED_P = ctypes.POINTER(_Managed)
_DELETER = ctypes.CFUNCTYPE(None, _MANAGED_P)
_Managed._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    pass


_MANAGED_VERSIONED_P = ctypes.POINTER(_ManagedVersioned)
_DELETER_VERSIONED = ctypes.CFUNCTYPE(None, _MANAGED_VERSIONED_P)
_ManagedVersioned._fields_ = [
    ("version", _Version),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER_VERSIONED),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", _Tensor),
]

# The capsule C API. Capsules are passed as py_object where they are alive; the destructor
# gets a dying capsule, so there it is a bare address (no reference counting on it).
_api = ctypes.pythonapi
_is_valid = _api.PyCapsule_IsValid
_is_valid.argtypes, _is_valid.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
_get_pointer = _api.PyCapsule_GetPointer
_get_pointer.argtypes, _get_pointer.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
_set_name = _api.PyCapsule_SetName
_set_name.argtypes, _set_name.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_new = _api.PyCapsule_New
_new.argtypes, _new.restype = [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR], ctypes.py_object
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)


def is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


@dataclass(frozen=True)
class View:
    """What a DLPack tensor describes. ``data`` has the byte offset applied; ``strides`` is
    None for a compact row-major tensor; ``dtype`` is (code, bits, lanes)."""

    data: int
    device_type: int
    device_id: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dtype: tuple[int, int, int]

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * ((self.dtype[1] + 7) // 8) * max(1, self.dtype[2])

    def c_contiguous(self) -> bool:
        """Whether the elements lie in C order with no gaps (dims of size 1 have any stride)."""
        if self.strides is None:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


class Owner:
    """Holds an imported DLPack tensor; the producer's deleter runs when this goes."""

    __slots__ = ("_address", "_versioned")

    def __init__(self, address: int, versioned: bool):
        self._address = address
        self._versioned = versioned

    def __del__(
        self,
        cast: Any = ctypes.cast,
        managed: Any = _MANAGED_P,
        versioned: Any = _MANAGED_VERSIONED_P,
    ) -> None:
        # (Everything it uses is bound as a default: it may run while the interpreter exits.)
        address, self._address = self._address, 0
        if address:
            m = cast(address, versioned if self._versioned else managed)
            if m.contents.deleter:
                m.contents.deleter(m)


def take(capsule: Any) -> tuple[View, Owner]:
    """Consume a producer's capsule: what it describes, and the owner of its memory.

    Raises ValueError when the capsule is not an unused DLPack capsule."""
    if _is_valid(capsule, _NAME):
        address = _get_pointer(capsule, _NAME)
        tensor = ctypes.cast(address, ctypes.POINTER(_Managed)).contents.dl_tensor
        versioned = False
    elif _is_valid(capsule, _NAME_VERSIONED):
        address = _get_pointer(capsule, _NAME_VERSIONED)
        tensor = ctypes.cast(address, ctypes.POINTER(_ManagedVersioned)).contents.dl_tensor
        versioned = True
    else:
        raise ValueError("the capsule is not an unused DLPack tensor ('dltensor')")
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(ndim)) if tensor.strides else None
    view = View(
        data=int(tensor.data or 0) + int(tensor.byte_offset),
        device_type=int(tensor.device.device_type),
        device_id=int(tensor.device.device_id),
        shape=shape,
        strides=strides,
        dtype=(int(tensor.dtype.code), int(tensor.dtype.bits), int(tensor.dtype.lanes)),
    )
    _set_name(capsule, _USED_VERSIONED if versioned else _USED)
    return view, Owner(int(address), versioned)


# Exports alive: manager_ctx -> (the object keeping the memory, the struct, its shape array).
# No lock: a deleter may run from the garbage collector anywhere, even inside a locked block
# of this thread; single dict operations are atomic under the GIL.
_exports: dict[int, tuple[Any, _Managed, Any]] = {}
_keys = itertools.count(1)


def live_exports() -> int:
    """How many capsules made here have not been released yet (for tests)."""
    return len(_exports)


def _release(managed: Any, exports: dict[int, Any] = _exports) -> None:
    # (The dict is bound here: a consumer may free its tensor while the interpreter exits,
    # after this module's globals are gone.)
    exports.pop(int(managed.contents.manager_ctx or 0), None)


def _destroy_capsule(
    address: int | None,
    is_valid: Any = _raw_is_valid,
    get_pointer: Any = _raw_get_pointer,
    managed_pointer: Any = _MANAGED_P,
    cast: Any = ctypes.cast,
) -> None:
    # A capsule no consumer took: release what it references. (Consumers rename theirs.)
    if address and is_valid(address, _NAME):
        pointer = get_pointer(address, _NAME)
        if pointer:
            managed = cast(pointer, managed_pointer)
            managed.contents.deleter(managed)


_deleter = _DELETER(_release)
_capsule_destructor = _DESTRUCTOR(_destroy_capsule)
# C code may call these after the module is torn down at exit (a consumer's tensor or a capsule
# outliving it): one reference more each keeps their machine code from being freed.
for _callback in (_deleter, _capsule_destructor):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_callback))


def make_capsule(
    data: int,
    device_type: int,
    device_id: int,
    shape: tuple[int, ...],
    dtype: tuple[int, int, int],
    keep: Any,
) -> Any:
    """A ``"dltensor"`` capsule over ``data`` (compact, row-major), keeping ``keep`` alive
    until the consumer's deleter call."""
    ndim = len(shape)
    dims = (ctypes.c_int64 * max(1, ndim))(*shape)
    managed = _Managed()
    managed.dl_tensor.data = data or None
    managed.dl_tensor.device = _Device(device_type, device_id)
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype = _DataType(*dtype)
    managed.dl_tensor.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = ctypes.POINTER(ctypes.c_int64)()  # NULL: compact
    managed.dl_tensor.byte_offset = 0
    key = next(_keys)
    managed.manager_ctx = key
    managed.deleter = _deleter
    _exports[key] = (keep, managed, dims)
    return _new(ctypes.addressof(managed), _NAME, _capsule_destructor)
