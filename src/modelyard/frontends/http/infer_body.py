"""Pure HTTP inference codec: request body -> InferRequest, InferResponse -> body, compression.

Request bodies follow Triton's binary tensor extension (protocol.md §2): a JSON header,
optionally followed by the binary tensors of the inputs that carry ``binary_data_size``, in
``inputs`` order; ``Inference-Header-Content-Length`` gives the JSON length. Binary inputs
become ``Tensor.raw`` memoryview slices of the body (no copy); the core decodes and checks
their sizes. Error statuses and messages are Triton's (§5.3): the JSON layer reports
INTERNAL (500), request-shape problems INVALID_ARG (400).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from modelyard import tensor_bytes
from modelyard.errors import InternalError, InvalidArgument, ModelyardError
from modelyard.frontends.http import jsondata
from modelyard.frontends.http.limits import (
    DEFAULT_MAX_INPUT_SIZE,
    json_input_too_large,
    json_too_large,
)
from modelyard.types import (
    ELEMENT_SIZE,
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InferResponse,
    ParamValue,
    RequestedOutput,
    Tensor,
    numpy_dtype,
)

Body = bytes | bytearray | memoryview

_U64_MAX = (1 << 64) - 1
_SHM_KEYS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


@dataclass(slots=True)
class OutputPlan:
    """How each output goes back: binary or JSON, classification, shared memory."""

    default_binary: bool = False  # outputs the request did not list
    binary: dict[str, bool] = field(default_factory=dict)
    classification: dict[str, int] = field(default_factory=dict)
    shm: frozenset[str] = frozenset()

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


# -- JSON helpers ------------------------------------------------------------------------------


def parse_json(data: Body) -> Any:
    """Parse a JSON document with Triton's error (INTERNAL, 500)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise InternalError(f"failed to parse the request JSON buffer: {e}") from None


def _type_error(what: str, member: str | None = None) -> InternalError:
    prefix = f"Unable to parse '{member}': " if member else ""
    return InternalError(f"{prefix}attempt to access JSON {what}")


def as_uint(value: Any, member: str | None = None) -> int:
    if type(value) is not int or not 0 <= value <= _U64_MAX:
        raise _type_error("non-unsigned-integer as unsigned-integer", member)
    return value


def as_bool(value: Any, member: str | None = None) -> bool:
    if type(value) is not bool:
        raise _type_error("non-boolean as boolean", member)
    return value


def as_str(value: Any, member: str | None = None) -> str:
    if type(value) is not str:
        raise _type_error("non-string as string", member)
    return value


def as_object(value: Any, member: str | None = None) -> dict[str, Any]:
    if type(value) is not dict:
        raise _type_error("non-object as object", member)
    return value


def as_array(value: Any, member: str | None = None) -> list[Any]:
    if type(value) is not list:
        raise _type_error("non-array as array", member)
    return value


def json_param(key: str, value: Any) -> ParamValue:
    """A custom request parameter: string, int, bool or double (Triton's types)."""
    if type(value) in (str, int, bool, float):
        return value  # type: ignore[no-any-return]
    raise InvalidArgument(
        f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
    )


# -- request -----------------------------------------------------------------------------------


def header_length_of(value: str | None, body_length: int) -> int | None:
    """The JSON length from ``Inference-Header-Content-Length`` (None when absent)."""
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise InvalidArgument(
            f"Unable to parse Inference-Header-Content-Length, got: {value}"
        ) from None
    if n < 0 or n > body_length:
        raise InvalidArgument(
            f"inference header size should be in range (0, {body_length}), got: {value}"
        )
    return n


def parse_request_parameters(params: dict[str, Any], request: InferRequest) -> bool | None:
    """Fill sequence/priority/timeout/custom parameters; return ``binary_data_output``."""
    binary_output: bool | None = None
    flags = 0
    for key, value in params.items():
        if key == "sequence_id":
            if type(value) is int and 0 <= value <= _U64_MAX:
                request.correlation_id = value
            else:
                request.correlation_id = as_str(value, "sequence_id")
        elif key == "sequence_start":
            if as_bool(value, "sequence_start"):
                flags |= SEQUENCE_START
        elif key == "sequence_end":
            if as_bool(value, "sequence_end"):
                flags |= SEQUENCE_END
        elif key == "priority":
            request.priority = as_uint(value, "priority")
        elif key == "timeout":
            request.timeout_us = as_uint(value, "timeout")
        elif key == "binary_data_output":
            binary_output = as_bool(value, "binary_data_output")
        elif key.startswith("triton_"):
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
        else:
            request.parameters[key] = json_param(key, value)
    request.flags = flags
    return binary_output


def _content_kind_error(has_data: bool, has_binary: bool, has_shm: bool) -> InvalidArgument:
    message = (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But"
    )
    if not (has_data or has_binary or has_shm):
        message += " no field is set"
    else:
        message += " set"
        if has_data:
            message += " 'data'"
        if has_binary:
            message += " 'binary_data_size'"
        if has_shm:
            message += " 'shared_memory_region'"
    return InvalidArgument(message)


def _shm_params(params: dict[str, Any]) -> dict[str, ParamValue]:
    out: dict[str, ParamValue] = {
        "shared_memory_region": as_str(params["shared_memory_region"], "shared_memory_region")
    }
    for key in ("shared_memory_byte_size", "shared_memory_offset"):
        if key in params:
            out[key] = as_uint(params[key], key)
    return out


def _parse_input(
    item: Any, model_name: str, binary: memoryview, offset: int, max_input_size: int
) -> tuple[Tensor, int]:
    """One entry of ``inputs``; returns the tensor and the new offset into ``binary``.

    On the hot path: type checks are inlined rather than calling the ``as_*`` helpers.
    """
    if type(item) is not dict:
        raise _type_error("non-object as object")
    params = item.get("parameters")
    has_data = "data" in item
    has_binary = has_shm = False
    if params is not None:
        if type(params) is not dict:
            raise _type_error("non-object as object", "parameters")
        has_binary = "binary_data_size" in params
        has_shm = "shared_memory_region" in params
    if has_data + has_binary + has_shm != 1:
        raise _content_kind_error(has_data, has_binary, has_shm)
    name = item.get("name")
    if type(name) is not str:
        raise _type_error("non-string as string", "name")
    datatype = item.get("datatype")
    if type(datatype) is not str:
        raise _type_error("non-string as string", "datatype")
    shape_json = item.get("shape")
    if type(shape_json) is not list:
        raise _type_error("non-array as array", "shape")
    for d in shape_json:
        if type(d) is not int or not 0 <= d <= _U64_MAX:
            raise _type_error("non-unsigned-integer as unsigned-integer", "shape")
    shape = tuple(shape_json)

    if has_binary:
        assert params is not None
        size = params["binary_data_size"]
        if type(size) is not int or not 0 <= size <= _U64_MAX:
            raise _type_error("non-unsigned-integer as unsigned-integer", "binary_data_size")
        end = offset + size
        if end > len(binary):
            raise InvalidArgument(
                f"unexpected size for input '{name}', expecting {end - len(binary)} "
                f"additional bytes for model '{model_name}'"
            )
        return Tensor(name, datatype, shape, raw=binary[offset:end]), end
    if has_shm:
        assert params is not None
        return Tensor(name, datatype, shape, parameters=_shm_params(params)), offset
    count = jsondata.element_count(shape)
    if count == 0 and datatype not in ("FP16", "BF16"):
        # Triton ignores 'data' for an empty tensor.
        dtype = np.dtype(object) if datatype == "BYTES" else _np_dtype(name, datatype)
        array = np.empty(shape, dtype=dtype)
        return Tensor(name, datatype, shape, data=array), offset
    byte_size = count * ELEMENT_SIZE.get(datatype, 0)  # Triton checks it before the data
    if byte_size > max_input_size:
        raise InvalidArgument(json_input_too_large(name, byte_size, max_input_size))
    data = as_array(item["data"], "data")
    return Tensor(
        name, datatype, shape, data=jsondata.array_from_json(name, datatype, shape, data)
    ), offset


def _np_dtype(name: str, datatype: str) -> np.dtype[Any]:
    try:
        return numpy_dtype(datatype)
    except ValueError:
        raise InvalidArgument(f"invalid datatype for input {name}") from None


def _parse_outputs(items: Any, plan: OutputPlan) -> list[RequestedOutput]:
    outputs: list[RequestedOutput] = []
    shm: set[str] = set()
    for item in as_array(items, "outputs"):
        out = as_object(item)
        params = out.get("parameters")
        params = {} if params is None else as_object(params, "parameters")
        name = as_str(out.get("name"), "name")
        kept: dict[str, ParamValue] = {}
        if "shared_memory_region" in params:
            if "classification" in params:
                raise InvalidArgument(
                    "Output can't set both 'shared_memory_region' and 'classification'"
                )
            if "binary_data" in params and as_bool(params["binary_data"], "binary_data"):
                raise InvalidArgument(
                    "Output can't set both 'shared_memory_region' and 'binary_data'"
                )
            kept.update(_shm_params(params))
            shm.add(name)
        else:
            if "classification" in params:
                count = params["classification"]
                if type(count) is not int or not 0 <= count <= _U64_MAX:
                    raise InternalError(
                        "Unable to set 'classification': attempt to access JSON "
                        "non-unsigned-integer as unsigned-integer"
                    )
                kept["classification"] = count
                if count > 0:
                    plan.classification[name] = count
            binary = False
            if "binary_data" in params:
                binary = as_bool(params["binary_data"], "binary_data")
                kept["binary_data"] = binary
            plan.binary[name] = binary
        outputs.append(RequestedOutput(name, kept))
    plan.shm = frozenset(shm)
    return outputs


def parse_infer_request(
    model_name: str,
    model_version: str,
    body: Body,
    header_length: int | None,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
) -> tuple[InferRequest, OutputPlan]:
    """Parse an ``/infer`` body (JSON, or JSON + binary tensors).

    ``header_length`` is the parsed ``Inference-Header-Content-Length`` (None when absent);
    0 (a raw binary request) is handled by :func:`raw_infer_request`. The JSON part and
    each JSON-encoded input may not exceed ``max_input_size`` bytes (binary inputs may).
    """
    mv = body if isinstance(body, memoryview) else memoryview(body)
    if header_length is None or header_length == len(mv):
        header, binary = mv, mv[len(mv) :]
    else:
        header, binary = mv[:header_length], mv[header_length:]
    if len(header) > max_input_size:
        raise InvalidArgument(json_too_large(len(header), max_input_size))
    doc = as_object(parse_json(header))

    request = InferRequest(model_name, [], model_version)
    if "id" in doc:
        request.id = as_str(doc["id"], "id")
    plan = OutputPlan()
    params = doc.get("parameters")
    if params is not None:
        binary_output = parse_request_parameters(as_object(params, "parameters"), request)
        plan.default_binary = bool(binary_output)

    if "inputs" not in doc:
        raise InternalError(
            "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"
        )
    offset = 0
    inputs = request.inputs
    for item in as_array(doc["inputs"], "inputs"):
        tensor, offset = _parse_input(item, model_name, binary, offset, max_input_size)
        inputs.append(tensor)
    if offset != len(binary):
        raise InvalidArgument(f"unexpected additional input data for model '{model_name}'")

    if "outputs" in doc:
        request.outputs = _parse_outputs(doc["outputs"], plan)
    return request, plan


_LEN = struct.Struct("<I")


def raw_infer_request(
    model_name: str,
    model_version: str,
    body: Body,
    config_input: tuple[str, str, tuple[int, ...]],
    max_batch_size: int,
    input_count: int,
) -> tuple[InferRequest, OutputPlan]:
    """A raw binary request (``Inference-Header-Content-Length: 0``): the whole body is the
    data of the model's only input, batch 1; every output comes back binary.

    ``config_input`` is (name, datatype, dims) of the model's input.
    """
    if input_count != 1:
        raise InvalidArgument(
            "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be "
            f"deduced but got "
            f"{input_count} inputs in '{model_name}' model configuration"
        )
    name, datatype, dims = config_input
    shape = [1] if max_batch_size > 0 else []
    dynamic_axis = -1
    fixed = 1
    for d in dims:
        if d == -1:
            if dynamic_axis != -1:
                raise InvalidArgument(
                    "[request id: <id_unknown>] "
                    f"The shape of the raw input '{name}' can not be deduced because there are "
                    "more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
        else:
            fixed *= d
        shape.append(d)
    mv = body if isinstance(body, memoryview) else memoryview(body)
    tensor = Tensor(name, datatype, ())
    if datatype == "BYTES":
        if dynamic_axis != -1 or fixed != 1:
            raise InvalidArgument(
                "[request id: <id_unknown>] "
                f"For BYTE datatype raw input '{name}', the model must have input shape [1]"
            )
        tensor.data = tensor_bytes.bytes_array([bytes(mv)], tuple(shape))
    else:
        if dynamic_axis != -1:
            element_size = ELEMENT_SIZE.get(datatype, 1)
            shape[dynamic_axis] = len(mv) // max(fixed * element_size, 1)
        tensor.raw = mv
    tensor.shape = tuple(shape)
    request = InferRequest(model_name, [tensor], model_version)
    return request, OutputPlan(default_binary=True)


# -- response ----------------------------------------------------------------------------------


def _binary_of(tensor: Tensor) -> Body:
    """A tensor's wire bytes: the received raw bytes, or a zero-copy view of its array."""
    if tensor.data is None:
        raw = tensor.raw
        if raw is None:
            return b""
        if isinstance(raw, memoryview) and (raw.ndim != 1 or raw.itemsize != 1):
            return raw.cast("B")
        return raw
    array = tensor.data
    if tensor.datatype == "BYTES":
        return tensor_bytes.serialize_bytes(array)
    if array.size == 0:
        return b""
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    # uint8 view: also works for dtypes the buffer protocol cannot export (bfloat16).
    return array.reshape(-1).view(np.uint8).data


def _array_of(tensor: Tensor) -> np.ndarray[Any, Any]:
    if tensor.data is not None:
        return tensor.data
    raw = tensor.raw if tensor.raw is not None else b""
    return tensor_bytes.array_from_raw(tensor.datatype, tensor.shape, raw)


def _response_parameters(params: dict[str, ParamValue]) -> dict[str, ParamValue]:
    for key, value in params.items():
        if type(value) not in (str, int, bool, float):
            raise ModelyardError(
                f"Response parameter '{key}' has a type that is not currently supported",
            )
    return params


def encode_infer_response(
    response: InferResponse, plan: OutputPlan
) -> tuple[bytes, list[Body], int]:
    """Encode a response as (JSON header, binary parts, binary byte count).

    Binary parts follow the header in ``outputs`` order; the caller sends the
    ``Inference-Header-Content-Length`` header only when the byte count is non-zero.
    """
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = _response_parameters(response.parameters)
    outputs: list[dict[str, Any]] = []
    parts: list[Body] = []
    total = 0
    for tensor in response.outputs:
        name = tensor.name
        entry: dict[str, Any] = {
            "name": name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if name in plan.shm or "shared_memory_region" in tensor.parameters:
            outputs.append(entry)  # written to shared memory: no data, no parameters
            continue
        if plan.is_binary(name):
            raw = _binary_of(tensor)
            size = len(raw) if not isinstance(raw, memoryview) else raw.nbytes
            entry["parameters"] = {"binary_data_size": size}
            if size:
                parts.append(raw)
                total += size
        else:
            entry["data"] = jsondata.json_from_array(name, tensor.datatype, _array_of(tensor))
        outputs.append(entry)
    doc["outputs"] = outputs
    return orjson.dumps(doc), parts, total
