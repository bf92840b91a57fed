"""Reading model configurations: ``config.pbtxt`` (protobuf text format) and JSON.

Triton parses ``config.pbtxt`` with protobuf's ``TextFormat`` into ``inference.ModelConfig``;
the Python ``text_format`` module accepts the same language (comments, ``key: value`` and
``key { }`` forms, ``[ ... ]`` list shorthand, optional separators, repeated scalars,
``True``/``true``, enum names or numbers), so every field and every parse error matches.

JSON configurations (the repository ``load`` API's ``config`` parameter, and the dict a Python
model's ``auto_complete_config`` returns) are read like Triton's ``JsonToModelConfig``: unknown
fields are rejected and enum names are accepted in any letter case.
"""

from __future__ import annotations

import json
import os
from typing import Any

from google.protobuf import descriptor, json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.errors import ConfigError

__all__ = ["config_from_json", "config_from_obj", "load_config_file", "parse_config_text"]


def parse_config_text(text: str, path: str) -> ModelConfig:
    """Parse protobuf text ``text`` (read from ``path``) into a ModelConfig.

    A syntax error, an unknown field or a bad value raises ConfigError naming the file, the line
    and column, and the field, e.g. ``.../config.pbtxt:3:1: Message type "inference.ModelConfig"
    has no field named "bogus".``
    """
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        detail = str(exc)
        # protobuf prefixes "line:col : "; we put the location after the file name instead.
        prefix = f"{line}:{column} : "
        if detail.startswith(prefix):
            detail = detail[len(prefix) :]
        where = f"{path}:{line}:{column}" if line is not None else path
        raise ConfigError(f"failed to parse model configuration {where}: {detail}") from None


def load_config_file(path: str | os.PathLike[str]) -> ModelConfig:
    """Read and parse a ``config.pbtxt`` file (see parse_config_text)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(
            f"failed to read model configuration {name}: {exc.strerror or exc}"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"failed to read model configuration {name}: not valid UTF-8 at byte {exc.start}"
        ) from None
    return parse_config_text(text, name)


def config_from_json(text: str | bytes) -> ModelConfig:
    """Parse a JSON model configuration, as the repository ``load`` API's ``config`` parameter.

    Unknown fields are rejected; enum names match in any letter case; 64-bit integers may be
    JSON numbers or strings; both ``snake_case`` and ``lowerCamelCase`` keys are accepted
    (protobuf's JSON mapping). Errors raise ConfigError "Invalid config override: ...", as
    Triton words them.
    """
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Invalid config override: failed to parse JSON: {exc}") from None
    try:
        return config_from_obj(obj)
    except ConfigError as exc:
        raise ConfigError(f"Invalid config override: {exc.message}") from None


def config_from_obj(obj: Any) -> ModelConfig:
    """Build a ModelConfig from an already-decoded JSON value (a dict), Triton's way.

    Raises ConfigError with protobuf's description of the first problem.
    """
    if not isinstance(obj, dict):
        raise ConfigError(f"model configuration must be a JSON object, got {type(obj).__name__}")
    fixed = _uppercase_enums(obj, ModelConfig.DESCRIPTOR)
    try:
        return json_format.ParseDict(fixed, ModelConfig(), ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        # Drop protobuf's long "Available Fields" listing that follows the first line.
        raise ConfigError(str(exc).split("\n", 1)[0]) from None


def _uppercase_enums(value: Any, desc: descriptor.Descriptor) -> Any:
    """Copy of a JSON object where enum names that only differ in case are upper-cased.

    This mirrors protobuf C++'s ``case_insensitive_enum_parsing`` (an unknown enum string is
    retried in upper case). Anything unexpected is left for json_format to report.
    """
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = desc.fields_by_name.get(key) if isinstance(key, str) else None
        if field is None and isinstance(key, str):
            field = _field_by_json_name(desc, key)
        out[key] = item if field is None else _fix_field(field, item)
    return out


def _field_by_json_name(desc: descriptor.Descriptor, key: str) -> Any:
    for field in desc.fields:
        if field.json_name == key:
            return field
    return None


def _fix_field(field: Any, item: Any) -> Any:
    if _is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        if not isinstance(item, dict):
            return item
        return {k: _fix_single(value_field, v) for k, v in item.items()}
    if is_repeated(field) and isinstance(item, list):
        return [_fix_single(field, v) for v in item]
    return _fix_single(field, item)


def _fix_single(field: Any, item: Any) -> Any:
    if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
        return _uppercase_enums(item, field.message_type)
    if field.type == descriptor.FieldDescriptor.TYPE_ENUM and isinstance(item, str):
        names = field.enum_type.values_by_name
        if item not in names and item.upper() in names:
            return item.upper()
    return item


def is_repeated(field: Any) -> bool:
    """Whether a field is repeated (``is_repeated`` in protobuf >= 5, ``label`` before)."""
    flag = getattr(field, "is_repeated", None)
    if flag is None:
        return bool(field.label == descriptor.FieldDescriptor.LABEL_REPEATED)
    return bool(flag() if callable(flag) else flag)


def _is_map(field: Any) -> bool:
    return bool(
        field.type == descriptor.FieldDescriptor.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )
