"""Checks of ``sequence_batching`` (Triton's ``ValidateModelConfig`` and
``Get{Boolean,Typed}SequenceControlProperties``), with Triton's messages."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelSequenceBatching

from modelyard.errors import ConfigError

__all__ = ["validate_sequence_batching"]

_CORRID_TYPES = frozenset(
    {
        DataType.TYPE_UINT64,
        DataType.TYPE_INT64,
        DataType.TYPE_UINT32,
        DataType.TYPE_INT32,
        DataType.TYPE_STRING,
    }
)
_Control = ModelSequenceBatching.Control


def validate_sequence_batching(cfg: ModelConfig) -> None:
    """Raise ConfigError if the sequence batcher's controls or strategy are invalid."""
    name, sb = cfg.name, cfg.sequence_batching
    if cfg.response_cache.enable:
        raise ConfigError(
            f"Response Cache does not currently support model {name} with sequence batching "
            "scheduler. Please disable the response cache."
        )
    for kind in (
        _Control.CONTROL_SEQUENCE_START,
        _Control.CONTROL_SEQUENCE_END,
        _Control.CONTROL_SEQUENCE_READY,
    ):
        _check_control(sb, name, kind, boolean=True)
    dtype = _check_control(sb, name, _Control.CONTROL_SEQUENCE_CORRID, boolean=False)
    if dtype is not None and dtype not in _CORRID_TYPES:
        raise ConfigError(
            "unexpected data type for control CONTROL_SEQUENCE_CORRID for "
            f"{name}. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, "
            "TYPE_INT32 and TYPE_STRING"
        )
    if sb.HasField("oldest"):
        for size in sb.oldest.preferred_batch_size:
            if size <= 0:
                raise ConfigError(
                    f"sequence batching preferred batch size must be positive for {name}"
                )
            if size > cfg.max_batch_size:
                raise ConfigError(
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    if sb.HasField("direct"):
        util = sb.direct.minimum_slot_utilization
        if util < 0.0 or util > 1.0:
            raise ConfigError(
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
            )


def _check_control(sb: Any, name: str, kind: int, *, boolean: bool) -> int | None:
    """Triton's Get{Boolean,Typed}SequenceControlProperties checks for one control kind.

    Returns the control's data type when the kind is present (None when absent).
    """
    kind_name = _Control.Kind.Name(kind)
    seen_tensors: set[str] = set()
    found: int | None = None
    for control_input in sb.control_input:
        if not control_input.name:
            raise ConfigError(f"sequence batching control tensor must have a name for {name}")
        if control_input.name in seen_tensors:
            raise ConfigError(
                f"sequence batching control tensor '{control_input.name}' is specified for "
                f"multiple control kinds for {name}"
            )
        seen_tensors.add(control_input.name)
        for c in control_input.control:
            if c.kind != kind:
                continue
            if found is not None:
                raise ConfigError(
                    f"sequence batching specifies multiple {kind_name} tensors for {name}"
                )
            found = _check_control_values(c, name, kind_name, boolean=boolean)
    return found


def _check_control_values(c: Any, name: str, kind_name: str, *, boolean: bool) -> int:
    lists = [
        ("int32_false_true", DataType.TYPE_INT32),
        ("fp32_false_true", DataType.TYPE_FP32),
        ("bool_false_true", DataType.TYPE_BOOL),
    ]
    given = [(field, dtype) for field, dtype in lists if len(getattr(c, field)) != 0]
    if not boolean:
        if given:
            raise ConfigError(
                "sequence batching must not specify either 'int32_false_true', "
                f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {name}"
            )
        return int(c.data_type)
    if not given:
        raise ConfigError(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind_name} for {name}"
        )
    if len(given) > 1:
        raise ConfigError(
            "sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}"
        )
    field, dtype = given[0]
    if len(getattr(c, field)) != 2:
        raise ConfigError(
            f"sequence batching control '{field}' must have exactly 2 entries for {kind_name} "
            f"for {name}"
        )
    return int(dtype)
