"""Core values shared by every layer: datatypes, tensors, requests, responses.

Protocol-neutral: frontends translate their wire formats to and from these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from modelyard.errors import ModelyardError

ParamValue = bool | int | float | str

# Sequence flags, as Triton's TRITONSERVER_RequestFlag.
SEQUENCE_START = 1
SEQUENCE_END = 2

# Protocol datatype name -> numpy dtype. BYTES is an object array of `bytes`.
_NP_BY_DATATYPE: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}

try:  # BF16 needs ml_dtypes (a tritonclient dependency); optional for the server.
    import ml_dtypes

    _NP_BY_DATATYPE["BF16"] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on environment
    pass

DATATYPES: frozenset[str] = frozenset([*_NP_BY_DATATYPE, "BF16"])

# Element sizes in bytes for fixed-size datatypes.
ELEMENT_SIZE: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 1,
    "UINT16": 2,
    "UINT32": 4,
    "UINT64": 8,
    "INT8": 1,
    "INT16": 2,
    "INT32": 4,
    "INT64": 8,
    "FP16": 2,
    "BF16": 2,
    "FP32": 4,
    "FP64": 8,
}


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype for a protocol datatype name ("FP32" -> float32)."""
    try:
        return _NP_BY_DATATYPE[datatype]
    except KeyError:
        raise ValueError(f"unknown datatype '{datatype}'") from None


_DATATYPE_BY_NP: dict[np.dtype[Any], str] = {
    dt: name for name, dt in _NP_BY_DATATYPE.items() if name != "BYTES"
}


def datatype_of(dtype: np.dtype[Any] | type) -> str:
    """The protocol datatype name for a numpy dtype (object/bytes_/str_ -> BYTES)."""
    name = _DATATYPE_BY_NP.get(dtype)  # type: ignore[arg-type]  # hot path: exact dtypes
    if name is not None:
        return name
    dt = np.dtype(dtype)
    if dt.kind in ("O", "S", "U"):
        return "BYTES"
    name = (
        _DATATYPE_BY_NP.get(dt.newbyteorder("="))
        if dt.byteorder != "|"
        else _DATATYPE_BY_NP.get(dt)
    )
    if name is None:
        raise ValueError(f"numpy dtype {dt} has no Triton datatype")
    return name


def config_datatype(data_type: int | str) -> str:
    """Protocol name for a model-config DataType ("TYPE_FP32" or its enum value).

    TYPE_STRING becomes "BYTES", as Triton reports it.
    """
    from tritonclient.grpc import model_config_pb2

    name = data_type if isinstance(data_type, str) else model_config_pb2.DataType.Name(data_type)
    name = name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


class DeviceTensor(Protocol):
    """GPU memory a tensor's elements are in (``Tensor.device``): a Python model's GPU tensor
    passed through BLS. ``to_host()`` gives a host copy."""

    @property
    def device_id(self) -> int: ...

    def to_host(self) -> np.ndarray[Any, Any]: ...


@dataclass(frozen=True, slots=True)
class StagedOnHost:
    """A GPU tensor a worker process copied to host memory on its way through the server
    (process mode): ``to_host()`` is that copy; ``device_id`` is where it was made, and where
    a model receiving it as a GPU tensor gets it again."""

    device_id: int
    array: np.ndarray[Any, Any]

    def to_host(self) -> np.ndarray[Any, Any]:
        return self.array


@dataclass(slots=True)
class Tensor:
    """A named tensor.

    ``data`` is a numpy array of ``shape`` (BYTES: object array of ``bytes``). Frontends that
    receive raw bytes set ``raw`` instead and leave ``data`` as None; the core decodes ``raw``
    (a zero-copy view where possible) while validating, so size errors name the model.
    ``device`` is set for a GPU tensor a model passed through BLS; ``data`` may then stay None
    until something needs the elements on the host (:func:`host_data`).
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any] | None = None
    raw: bytes | bytearray | memoryview | None = None
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    device: DeviceTensor | None = None

    @classmethod
    def from_numpy(cls, name: str, array: np.ndarray[Any, Any]) -> Tensor:
        return cls(name, datatype_of(array.dtype), tuple(array.shape), array)


def host_data(t: Tensor) -> np.ndarray[Any, Any]:
    """The tensor's elements in host memory: ``data``, or, for a GPU tensor that has none yet,
    a copy of its device memory (made once, then kept in ``data``)."""
    if t.data is None:
        if t.device is None:
            raise ValueError(f"tensor '{t.name}' has no data")
        t.data = t.device.to_host().reshape(t.shape)
    return t.data


# InferRequest.output_device: every output in host memory, or a GPU output where it was made.
HOST_OUTPUTS = -2
AS_PRODUCED = -1


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its frontend-level options."""

    name: str
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    model_name: str
    inputs: list[Tensor]
    model_version: str = ""  # "" = the latest ready version
    id: str = ""
    outputs: list[RequestedOutput] | None = None  # None = every output of the model
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    correlation_id: int | str = 0
    flags: int = 0  # SEQUENCE_START | SEQUENCE_END
    priority: int = 0
    timeout_us: int = 0
    # Where GPU outputs go (a BLS call's preferred memory): HOST_OUTPUTS, the default, gives
    # every output in host memory (what frontends send); AS_PRODUCED leaves a GPU output on its
    # device (Tensor.device); a GPU id >= 0 asks for every output on that device.
    output_device: int = HOST_OUTPUTS
    # Inputs / outputs bound to client shared-memory regions (serving/shm_regions.ClientRef by
    # tensor name): a Python worker maps those regions itself instead of copying.
    shm_inputs: dict[str, Any] | None = None
    shm_outputs: dict[str, Any] | None = None
    # Tracing (modelyard.tracing): the sampled trace of a client request (frontends), or
    # where a request a traced request makes hangs (BLS calls, ensemble steps). None: untraced.
    trace: Any = None
    # Where the instance that runs the request may send its final response itself (a BLS
    # call's caller; opaque to the core, which still gets the response's outcome).
    reply_to: Any = None


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    error: ModelyardError | None = None
    final: bool = True
    # The model sent only the FINAL flag (send(flags=FINAL)): no response of its own.
    flag_only: bool = False
    # The model itself answered with this error response; Triton's statistics count the
    # request as a success (only a failed execution, queueing or scheduling is a failure).
    model_error: bool = False
    # The instance already sent this response to the request's ``reply_to``: what passes
    # through the core is its outcome only (no outputs), for statistics and bookkeeping.
    delivered: bool = False
