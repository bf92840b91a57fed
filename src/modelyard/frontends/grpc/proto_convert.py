"""Protobuf <-> core values for GRPCInferenceService, with Triton's messages. Pure functions.

Inputs: ``raw_input_contents`` entries become ``Tensor.raw`` (zero-copy views; the core
decodes and checks sizes); typed ``contents`` are converted as Triton does; shared-memory
inputs keep their parameters. Outputs always go to ``raw_output_contents``, one entry per
output in order (see ``wire.EncodedResponse``).
"""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

from modelyard import tensor_bytes
from modelyard.errors import ErrorCode, InvalidArgument, ModelyardError
from modelyard.frontends.grpc.wire import (
    Buffer,
    EncodedResponse,
    WireInferRequest,
    output_entry,
    response_id,
    response_names,
)
from modelyard.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InferResponse,
    ParamValue,
    RequestedOutput,
    Tensor,
    numpy_dtype,
)

# Triton's GrpcStatusUtil::CodeToStatus.
GRPC_STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
}


def grpc_status(code: ErrorCode) -> grpc.StatusCode:
    return GRPC_STATUS.get(code, grpc.StatusCode.UNKNOWN)


FINAL_RESPONSE_KEY = "triton_final_response"
EMPTY_FINAL_KEY = "triton_enable_empty_final_response"
_ALLOWED_TRITON_KEYS = (EMPTY_FINAL_KEY,)

_SHM_REGION = "shared_memory_region"
_SHM_OFFSET = "shared_memory_offset"
_SHM_SIZE = "shared_memory_byte_size"


# -- versions ------------------------------------------------------------------------------


def check_version(version: str) -> str:
    """The version string a request names, read as Triton's gRPC frontend reads it
    (``std::stol``: leading digits count, the rest is ignored); "" means the latest.

    Raises InvalidArgument with Triton's message when no integer >= 0 can be read.
    """
    if not version or (version.isascii() and version.isdigit()):
        return version
    text = version.lstrip(" \t\n\r\f\v")
    sign = text[:1] if text[:1] in ("-", "+") else ""
    digits = text[len(sign) :]
    n = 0
    while n < len(digits) and digits[n] in "0123456789":
        n += 1
    if n == 0:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' "
            "(details: stol), version should be an integral value > 0"
        )
    value = int(sign + digits[:n])
    if value < 0:
        raise InvalidArgument(
            f"invalid model version specified '{version}' , version should be an integral value > 0"
        )
    return str(value)


# -- parameters ----------------------------------------------------------------------------


def param_value(param: Any) -> ParamValue | None:
    """The python value of an InferParameter (None when no oneof member is set)."""
    which = param.WhichOneof("parameter_choice")
    if which is None:
        return None
    return getattr(param, which)  # type: ignore[no-any-return]


def set_param(param: Any, value: ParamValue) -> None:
    """Store a python value into an InferParameter, as Triton types response parameters."""
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    else:
        param.string_param = str(value)


def _request_parameters(msg: Any, request: InferRequest) -> bool:
    """Apply ModelInferRequest.parameters to ``request``; return enable_empty_final_response."""
    empty_final = False
    flags = 0
    custom: dict[str, ParamValue] = {}
    for key, param in msg.parameters.items():
        which = param.WhichOneof("parameter_choice")
        if key == "sequence_id":
            if which == "int64_param":
                request.correlation_id = param.int64_param
            elif which == "string_param":
                request.correlation_id = param.string_param
            else:
                raise InvalidArgument(
                    "invalid value type for 'sequence_id' parameter, expected "
                    "int64_param or string_param."
                )
        elif key == "sequence_start" or key == "sequence_end":
            if which != "bool_param":
                raise InvalidArgument(
                    f"invalid value type for '{key}' parameter, expected bool_param."
                )
            if param.bool_param:
                flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
        elif key == "priority":
            if which == "int64_param":
                if param.int64_param < 0:
                    raise InvalidArgument("invalid value for 'priority', expected value >= 0.")
                request.priority = param.int64_param
            elif which == "uint64_param":
                request.priority = param.uint64_param
            else:
                raise InvalidArgument(
                    "invalid value type for 'priority' parameter, expected "
                    "int64_param or uint64_param."
                )
        elif key == "timeout":
            if which != "int64_param":
                raise InvalidArgument(
                    "invalid value type for 'timeout' parameter, expected int64_param."
                )
            request.timeout_us = param.int64_param
        elif key.startswith("triton_"):
            if key not in _ALLOWED_TRITON_KEYS:
                raise InvalidArgument(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. "
                    "Only the following keys starting with 'triton_' are allowed: "
                    + " ".join(_ALLOWED_TRITON_KEYS)
                )
            if which != "bool_param":
                raise InvalidArgument(
                    f"invalid value type for '{key}' parameter, expected bool_param."
                )
            empty_final = param.bool_param
        elif which in ("int64_param", "bool_param", "string_param", "double_param"):
            custom[key] = getattr(param, which)
        else:
            raise InvalidArgument(
                f"invalid value type for '{key}' parameter, expected "
                "int64_param, bool_param, or string_param."
            )
    request.flags = flags
    if custom:
        request.parameters = custom
    return empty_final


def _shm_parameters(tensor: Any) -> dict[str, ParamValue]:
    """Triton's ParseSharedMemoryParams: region (string), offset and byte size (int64)."""
    params = tensor.parameters
    out: dict[str, ParamValue] = {}
    name = tensor.name
    has_region = _SHM_REGION in params
    if has_region:
        p = params[_SHM_REGION]
        if p.WhichOneof("parameter_choice") != "string_param":
            raise InvalidArgument(
                f"invalid value type for '{_SHM_REGION}' parameter for tensor '{name}', "
                "expected string_param."
            )
        out[_SHM_REGION] = p.string_param
    for key in (_SHM_OFFSET, _SHM_SIZE):
        if key not in params:
            continue
        if not has_region:
            raise InvalidArgument(
                f"'{key}' can not be specified without '{_SHM_REGION}' parameter for tensor "
                f"'{name}'"
            )
        p = params[key]
        if p.WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgument(
                f"invalid value type for '{key}' parameter for tensor '{name}', "
                "expected int64_param."
            )
        out[key] = p.int64_param
    if has_region and _SHM_SIZE not in out:
        raise InvalidArgument(
            f"'{_SHM_SIZE}' must be specified along with '{_SHM_REGION}' parameter for tensor "
            f"'{name}'"
        )
    return out


def _other_parameters(params: Any, skip: tuple[str, ...]) -> dict[str, ParamValue]:
    out: dict[str, ParamValue] = {}
    for key, p in params.items():
        if key in skip:
            continue
        value = param_value(p)
        if value is not None:
            out[key] = value
    return out


# -- typed contents ------------------------------------------------------------------------

# InferTensorContents field -> (the datatype it carries, numpy dtype of the field's values).
_CONTENT_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("bool_contents", "BOOL", np.bool_),
    ("int_contents", "INT32", np.int32),
    ("int64_contents", "INT64", np.int64),
    ("uint_contents", "UINT32", np.uint32),
    ("uint64_contents", "UINT64", np.uint64),
    ("fp32_contents", "FP32", np.float32),
    ("fp64_contents", "FP64", np.float64),
    ("bytes_contents", "BYTES", None),
)
# Narrow integer types travel in the 32-bit fields; Triton keeps the low bytes.
_NARROW = {"int_contents": ("INT8", "INT16"), "uint_contents": ("UINT8", "UINT16")}


def _typed_contents(tensor: Any, model: str) -> Buffer:
    """The raw (wire-layout) bytes of an input given in typed ``contents``."""
    contents = tensor.contents
    datatype = tensor.datatype
    raw: Buffer = b""
    supplied = False
    for field, carried, np_type in _CONTENT_FIELDS:
        values = getattr(contents, field)
        if not values:
            continue
        if field in _NARROW and datatype in _NARROW[field]:
            carried = datatype
        if supplied:
            raise InvalidArgument(
                f"unexpected explicit tensor data for input tensor '{tensor.name}' for model "
                f"'{model}', binary data was already supplied."
            )
        if carried != datatype:
            raise InvalidArgument(
                f"unexpected explicit tensor data for input tensor '{tensor.name}' for model "
                f"'{model}' of type '{carried}', expected datatype '{datatype}'"
            )
        supplied = True
        if np_type is None:
            arr = np.empty(len(values), dtype=np.object_)
            arr[:] = list(values)
            raw = tensor_bytes.serialize_bytes(arr)
        else:
            arr = np.array(values, dtype=np_type)
            target = numpy_dtype(carried)
            if arr.dtype != target:
                arr = arr.astype(target)  # INT8/INT16/UINT8/UINT16: keep the low bytes
            raw = tensor_bytes.raw_from_array(carried, arr)
    return raw


# -- requests ------------------------------------------------------------------------------


class Decoded:
    """A decoded ModelInferRequest: the core request plus what only the frontend acts on."""

    __slots__ = ("classification", "empty_final", "request", "shm")

    def __init__(self, request: InferRequest) -> None:
        self.request = request
        self.empty_final = False  # triton_enable_empty_final_response
        self.classification: dict[str, int] | None = None  # output name -> top-k
        self.shm = False  # some input or output names a shared-memory region


def decode_infer_request(wire: WireInferRequest) -> Decoded:
    """A ModelInferRequest as a core InferRequest (``.request``), with the frontend-only
    settings beside it.

    Raises InvalidArgument with Triton's messages for malformed requests.
    """
    msg = wire.msg
    model = msg.model_name
    version = msg.model_version
    if version:
        version = check_version(version)
    request = InferRequest(model, [], version, msg.id)
    decoded = Decoded(request)
    if msg.parameters:
        decoded.empty_final = _request_parameters(msg, request)

    raw = wire.raw
    n_raw = len(raw)
    next_raw = 0
    inputs = request.inputs
    for t in msg.inputs:
        params: dict[str, ParamValue] = {}
        if t.parameters:
            params = _shm_parameters(t)
            if params:
                if t.HasField("contents"):
                    raise InvalidArgument(
                        "unexpected 'content' provided when using shared memory for input "
                        f"tensor '{t.name}' for model '{model}'"
                    )
                params.update(
                    _other_parameters(t.parameters, (_SHM_REGION, _SHM_OFFSET, _SHM_SIZE))
                )
                inputs.append(Tensor(t.name, t.datatype, tuple(t.shape[:]), parameters=params))
                decoded.shm = True
                continue
            params = _other_parameters(t.parameters, ())
        if t.HasField("contents"):
            if n_raw:
                raise InvalidArgument(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{t.name}' for model '{model}'"
                )
            data = _typed_contents(t, model)
        elif next_raw < n_raw:
            data = raw[next_raw]
            next_raw += 1
        else:
            raise InvalidArgument(
                f"unable to find data for input tensor '{t.name}' for model '{model}' in request."
            )
        # shape[:]: slicing a upb repeated field is about twice as fast as iterating it
        inputs.append(Tensor(t.name, t.datatype, tuple(t.shape[:]), None, data, params))
    if next_raw < n_raw:  # Triton ignores the extra buffers; they point at a client bug
        raise InvalidArgument(
            f"unexpected number of raw_input_contents for model '{model}': got {n_raw}, but "
            f"only {next_raw} input(s) take their data from raw_input_contents"
        )

    if msg.outputs:
        outputs: list[RequestedOutput] = []
        for o in msg.outputs:
            oparams: dict[str, ParamValue] = {}
            if o.parameters:
                oparams = _shm_parameters(o)
                if oparams:
                    decoded.shm = True
                if "classification" in o.parameters:
                    k = _classification(o.parameters["classification"])
                    oparams["classification"] = k
                    if decoded.classification is None:
                        decoded.classification = {}
                    decoded.classification[o.name] = k
                oparams.update(
                    _other_parameters(
                        o.parameters, (_SHM_REGION, _SHM_OFFSET, _SHM_SIZE, "classification")
                    )
                )
            outputs.append(RequestedOutput(o.name, oparams))
        request.outputs = outputs
    return decoded


def _classification(param: Any) -> int:
    if param.WhichOneof("parameter_choice") != "int64_param":
        raise InvalidArgument(
            "invalid value type for 'classification' parameter, expected int64_param"
        )
    count = int(param.int64_param)
    if count <= 0:
        raise InvalidArgument("invalid value for 'classification' parameter, expected >= 0")
    return count


# -- responses -----------------------------------------------------------------------------


def _output_bytes(tensor: Tensor) -> Buffer:
    if tensor.raw is not None:
        return tensor.raw
    if tensor.data is None or _SHM_REGION in tensor.parameters:
        return b""  # written to shared memory (or no data): an empty entry keeps alignment
    return tensor_bytes.raw_from_array(tensor.datatype, tensor.data)


def encode_infer_response(response: InferResponse, final: bool | None = None) -> EncodedResponse:
    """A successful core response as a ModelInferResponse. ``final`` (streams only) adds the
    ``triton_final_response`` parameter."""
    # Fields in protobuf's own order (1, 2, 3, 4, 5), so the bytes are what SerializeToString
    # of the whole message would give.
    head = [response_names(response.model_name, response.model_version)]
    if response.id:
        head.append(response_id(response.id))
    if response.parameters or final is not None:
        head.append(_response_parameters(response.parameters, final))
    raw: list[Buffer] = []
    for t in response.outputs:
        shape = t.shape if type(t.shape) is tuple else tuple(t.shape)
        head.append(output_entry(t.name, t.datatype, shape))
        raw.append(_output_bytes(t))
    return EncodedResponse(b"".join(head), raw)


def _response_parameters(parameters: dict[str, ParamValue], final: bool | None) -> bytes:
    """ModelInferResponse.parameters (field 4) on the wire."""
    msg = service_pb2.ModelInferResponse()
    params = msg.parameters
    for key, value in parameters.items():
        set_param(params[key], value)
    if final is not None:
        params[FINAL_RESPONSE_KEY].bool_param = final
    return msg.SerializeToString()  # type: ignore[no-any-return]


def encode_stream_error(
    error: ModelyardError | str,
    request_id: str,
    model_name: str | None = None,
    model_version: str = "",
    final: bool | None = None,
) -> EncodedResponse:
    """A ModelStreamInferResponse carrying an error: the text in ``error_message`` and an
    ``infer_response`` with the request id (plus model, version and the final flag for
    errors the model produced, as Triton sets them)."""
    header = service_pb2.ModelInferResponse(id=request_id)
    if model_name is not None:
        header.model_name = model_name
        header.model_version = model_version
    if final is not None:
        header.parameters[FINAL_RESPONSE_KEY].bool_param = final
    message = error.message if isinstance(error, ModelyardError) else error
    return EncodedResponse(header.SerializeToString(), None, message or "unknown error")


def encode_empty_final(request_id: str, model_name: str, model_version: str) -> EncodedResponse:
    """The empty final response of a decoupled request that asked for one."""
    header = service_pb2.ModelInferResponse(
        id=request_id, model_name=model_name, model_version=model_version
    )
    header.parameters[FINAL_RESPONSE_KEY].bool_param = True
    return EncodedResponse(header.SerializeToString())


def is_flag_only_final(response: InferResponse) -> bool:
    """A decoupled model's FINAL flag sent without a response (nothing to send by default)."""
    return response.flag_only
