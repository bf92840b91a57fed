"""Model configuration and metadata as Triton 2.51 renders them.

``config_to_json`` gives the exact bytes of ``GET /v2/models/{m}/config`` (Triton's
``ModelConfigToJson``: protobuf's JSON printer with snake_case names and every field of every
present message, then its int64 fix-ups, written by rapidjson):

- keys in ``.proto`` declaration order; a set scalar member of a ``oneof`` comes last in its
  object (where protobuf's printer puts it); unset sub-messages are left out;
- enums by name; int32/uint32 as numbers; int64/uint64 as strings, except the fields Triton
  turns back into numbers (``_NUMERIC_INT64``); floats as protobuf then rapidjson print them;
- strings escaped as rapidjson does (UTF-8 kept, control characters escaped);
- an all-default config is the empty string.

Triton iterates protobuf maps in hash order, which changes from run to run; maps are written
here with their keys sorted (numerically for integer keys), which is one of Triton's orders.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

from google.protobuf import descriptor
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from modelyard.config.pbtxt import is_repeated

__all__ = ["config_to_dict", "config_to_json", "model_metadata"]

_FD = descriptor.FieldDescriptor

# int64/uint64 fields that Triton's ModelConfigToJson rewrites as JSON numbers; "*" stands for
# a map value. Every other 64-bit field stays a string, including
# sequence_batching.state.initial_state.dims (a lookup bug in Triton).
_NUMERIC_INT64 = frozenset(
    {
        "input.dims",
        "input.reshape.shape",
        "output.dims",
        "output.reshape.shape",
        "version_policy.specific.versions",
        "dynamic_batching.max_queue_delay_microseconds",
        "dynamic_batching.priority_levels",
        "dynamic_batching.default_priority_level",
        "dynamic_batching.default_queue_policy.default_timeout_microseconds",
        "dynamic_batching.priority_queue_policy.*.default_timeout_microseconds",
        "sequence_batching.max_sequence_idle_microseconds",
        "sequence_batching.oldest.max_queue_delay_microseconds",
        "sequence_batching.direct.max_queue_delay_microseconds",
        "sequence_batching.state.dims",
        "ensemble_scheduling.step.model_version",
        "model_warmup.inputs.*.dims",
    }
)
# Fields newer than Triton 2.51's model_config.proto: 2.51 cannot print them, so they are
# written only when set (as a newer Triton would), keeping 2.51's bytes for 2.51's configs.
_NEWER_THAN_251 = frozenset({"ensemble_scheduling.max_inflight_requests"})
_INT64_TYPES = frozenset(
    {_FD.TYPE_INT64, _FD.TYPE_UINT64, _FD.TYPE_SINT64, _FD.TYPE_FIXED64, _FD.TYPE_SFIXED64}
)
_INT_KEY_TYPES = _INT64_TYPES | {
    _FD.TYPE_INT32,
    _FD.TYPE_UINT32,
    _FD.TYPE_SINT32,
    _FD.TYPE_FIXED32,
    _FD.TYPE_SFIXED32,
}


class _Number(str):
    """A JSON number already formatted (floats, printed as Triton does)."""

    __slots__ = ()


def config_to_json(cfg: ModelConfig) -> str:
    """The body Triton 2.51 returns for ``GET /v2/models/{m}/config`` ("" for an empty config)."""
    if cfg.ByteSize() == 0:
        return ""
    return _dumps(_message(cfg, ""))


def config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    """``json.loads(config_to_json(cfg))``: the config as a client of Triton sees it, and the
    dict Triton's Python backend hands to models (``args["model_config"]`` parsed)."""
    if cfg.ByteSize() == 0:
        return {}
    return dict(_plain(_message(cfg, "")))


def model_metadata(cfg: ModelConfig, versions: list[str]) -> dict[str, Any]:
    """Triton's model metadata: ``{"name", "versions", "platform", "inputs", "outputs"}``.

    ``platform`` is the config's platform, or its backend when the platform is empty;
    datatypes use protocol names (TYPE_STRING -> "BYTES"); shapes are the config dims with a
    leading -1 when ``max_batch_size`` > 0.
    """
    batch = [-1] if cfg.max_batch_size >= 1 else []

    def tensors(ios: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": io.name,
                "datatype": _protocol_datatype(io.data_type),
                "shape": batch + [int(d) for d in io.dims],
            }
            for io in ios
        ]

    return {
        "name": cfg.name,
        "versions": [str(v) for v in versions],
        "platform": cfg.platform or cfg.backend,
        "inputs": tensors(cfg.input),
        "outputs": tensors(cfg.output),
    }


def _protocol_datatype(data_type: int) -> str:
    if data_type == DataType.TYPE_STRING:
        return "BYTES"
    if data_type == DataType.TYPE_INVALID or data_type not in DataType.values():
        return "<invalid>"
    return str(DataType.Name(data_type)).removeprefix("TYPE_")


# --- protobuf message -> JSON values -------------------------------------------------------


def _message(msg: Any, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    last: list[tuple[str, Any]] = []  # set scalar oneof members: printed after the others
    for field in msg.DESCRIPTOR.fields:
        name = field.name
        sub = f"{path}.{name}" if path else name
        oneof = field.containing_oneof
        if oneof is not None:
            if msg.WhichOneof(oneof.name) != name:
                continue
            if field.type != _FD.TYPE_MESSAGE:
                last.append((name, _scalar(field, getattr(msg, name), sub)))
                continue
        value = getattr(msg, name)
        if _is_map(field):
            out[name] = _map(field, value, sub)
        elif is_repeated(field):
            if field.type == _FD.TYPE_MESSAGE:
                out[name] = [_message(v, sub) for v in value]
            else:
                out[name] = [_scalar(field, v, sub) for v in value]
        elif field.type == _FD.TYPE_MESSAGE:
            if msg.HasField(name):
                out[name] = _message(value, sub)
        elif sub not in _NEWER_THAN_251 or value:
            out[name] = _scalar(field, value, sub)
    out.update(last)
    return out


def _map(field: Any, value: Any, path: str) -> dict[str, Any]:
    key_field = field.message_type.fields_by_name["key"]
    value_field = field.message_type.fields_by_name["value"]
    keys = sorted(value)
    sub = f"{path}.*"
    out: dict[str, Any] = {}
    for key in keys:
        text = str(key).lower() if key_field.type == _FD.TYPE_BOOL else str(key)
        item = value[key]
        if value_field.type == _FD.TYPE_MESSAGE:
            out[text] = _message(item, sub)
        else:
            out[text] = _scalar(value_field, item, sub)
    return out


def _scalar(field: Any, value: Any, path: str) -> Any:
    ftype = field.type
    if ftype == _FD.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else int(value)
    if ftype in _INT64_TYPES:
        return int(value) if path in _NUMERIC_INT64 else str(int(value))
    if ftype == _FD.TYPE_FLOAT:
        return _float_json(value, double=False)
    if ftype == _FD.TYPE_DOUBLE:
        return _float_json(value, double=True)
    if ftype == _FD.TYPE_BYTES:
        import base64

        return base64.b64encode(value).decode("ascii")
    return value


def _is_map(field: Any) -> bool:
    return bool(field.type == _FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry)


# --- numbers as protobuf (SimpleFtoa/SimpleDtoa) and then rapidjson print them -------------


def _float_json(value: float, *, double: bool) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if double:
        text = f"{value:.15g}"
        if float(text) != value:
            text = f"{value:.17g}"
    else:
        single = _to_f32(value)
        text = f"{single:.6g}"
        if _to_f32(float(text)) != single:
            text = f"{single:.9g}"
    if all(c.isdigit() or c == "-" for c in text):
        return _Number(str(int(text)))  # rapidjson reads it as an integer
    return _Number(_rapidjson_double(float(text)))


def _to_f32(value: float) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


def _rapidjson_double(x: float) -> str:
    """Format a double as rapidjson's Writer does (Grisu shortest digits, then Prettify)."""
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    mantissa, _, exp = repr(abs(x)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    k = (int(exp) if exp else 0) - len(frac_part)
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    kk = length + k  # 10^(kk-1) <= x < 10^kk
    if k >= 0 and kk <= 21:
        return f"{sign}{digits}{'0' * k}.0"
    if 0 < kk <= 21:
        return f"{sign}{digits[:kk]}.{digits[kk:]}"
    if -6 < kk <= 0:
        return f"{sign}0.{'0' * -kk}{digits}"
    if length == 1:
        return f"{sign}{digits}e{kk - 1}"
    return f"{sign}{digits[0]}.{digits[1:]}e{kk - 1}"


# --- JSON text as rapidjson writes it --------------------------------------------------------

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _quote(text: str) -> str:
    parts = ['"']
    for ch in text:
        if ch in _ESCAPES:
            parts.append(_ESCAPES[ch])
        elif ch < " ":
            parts.append(f"\\u{ord(ch):04X}")
        else:
            parts.append(ch)
    parts.append('"')
    return "".join(parts)


def _dumps(value: Any) -> str:
    if isinstance(value, _Number):
        return str.__str__(value)
    if isinstance(value, str):
        return _quote(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_quote(k)}:{_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    raise TypeError(f"cannot render {type(value).__name__}")  # pragma: no cover


def _plain(value: Any) -> Any:
    """Replace formatted numbers by the Python values json.loads would give."""
    if isinstance(value, _Number):
        return json.loads(str.__str__(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
