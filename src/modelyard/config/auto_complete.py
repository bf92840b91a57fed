"""Auto-complete helpers: the config a model's ``auto_complete_config`` sees and what Triton
keeps of what it returns.

Triton's Python backend builds ``pb_utils.ModelConfig`` from the JSON of the current
(normalized) config, the same JSON the config endpoint serves, and reads back
``json.dumps(model_config._model_config)``. Triton then keeps only ``max_batch_size``,
``input``, ``output``, the scheduling choice when the config had none, and
``model_transaction_policy`` (``TritonModel::UpdateModelConfig``) and re-normalizes.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config.normalize import normalize_model_config
from modelyard.config.pbtxt import config_from_obj
from modelyard.config.render import config_to_dict
from modelyard.errors import ConfigError

__all__ = [
    "autocomplete_max_batch_size",
    "config_from_autocomplete_dict",
    "config_to_autocomplete_dict",
    "merge_autocompleted_config",
]

# Field numbers of the scheduling_choice oneof, as Triton prints them in its error.
_SCHEDULING_CASE = {
    None: 0,
    "dynamic_batching": 11,
    "sequence_batching": 13,
    "ensemble_scheduling": 15,
}


def config_to_autocomplete_dict(cfg: ModelConfig) -> dict[str, Any]:
    """The dict ``pb_utils.ModelConfig(...).as_dict()`` holds for ``cfg``.

    ``input``, ``output`` and ``max_batch_size`` are always present; dims are ints; enums are
    names such as "TYPE_FP32".
    """
    d = config_to_dict(cfg)
    d.setdefault("max_batch_size", 0)
    d.setdefault("input", [])
    d.setdefault("output", [])
    return d


def config_from_autocomplete_dict(d: Any, base: ModelConfig | None = None) -> ModelConfig:
    """The config after a model's ``auto_complete_config`` returned dict ``d``.

    Without ``base`` this is ``d`` parsed as Triton parses backend-updated configs (unknown
    fields rejected, enum names in any case). With ``base`` (the config auto-complete started
    from) it is Triton's result: only the fields a backend may change are taken from ``d``
    (see merge_autocompleted_config). Raises ConfigError naming the model.
    """
    model = base.name if base is not None else (d.get("name", "") if isinstance(d, dict) else "")
    try:
        updated = config_from_obj(d)
    except ConfigError as exc:
        raise ConfigError(
            f"auto-complete of model '{model}' returned an invalid configuration: {exc.message}"
        ) from None
    if base is None:
        return updated
    return merge_autocompleted_config(base, updated)


def merge_autocompleted_config(base: ModelConfig, updated: ModelConfig) -> ModelConfig:
    """Triton's ``UpdateModelConfig``: a copy of ``base`` with ``updated``'s max_batch_size,
    inputs, outputs, scheduling choice (only when ``base`` has none) and transaction policy,
    then normalized again."""
    out = ModelConfig()
    out.CopyFrom(base)
    out.max_batch_size = updated.max_batch_size
    del out.input[:]
    out.input.extend(updated.input)
    del out.output[:]
    out.output.extend(updated.output)
    base_choice = base.WhichOneof("scheduling_choice")
    new_choice = updated.WhichOneof("scheduling_choice")
    if base_choice is None:
        if new_choice is not None:
            getattr(out, new_choice).CopyFrom(getattr(updated, new_choice))
    elif base_choice != new_choice:
        # Triton prints the original case twice; we name both.
        raise ConfigError(
            f"Cannot update scheduling choice from {_SCHEDULING_CASE[base_choice]} to "
            f"{_SCHEDULING_CASE[new_choice]} when auto-completing model '{base.name}'."
        )
    if updated.HasField("model_transaction_policy"):
        out.model_transaction_policy.decoupled = updated.model_transaction_policy.decoupled
    normalize_model_config(out)
    return out


def autocomplete_max_batch_size(
    cfg: ModelConfig, *, can_support_batching: bool, default_max_batch_size: int = 4
) -> None:
    """File-based auto-complete of ``max_batch_size`` (Triton's ONNX Runtime backend), in place.

    ``can_support_batching``: every model input and output has a variable first dimension.
    Then an unset ``max_batch_size`` becomes ``default_max_batch_size``
    (``--backend-config=default-max-batch-size``, default 4) and, when above 1, dynamic
    batching is enabled unless a scheduler is configured. A model that cannot batch with a
    non-zero ``max_batch_size`` raises ConfigError.
    """
    if can_support_batching:
        if cfg.max_batch_size == 0:
            cfg.max_batch_size = max(default_max_batch_size, 0)
        if cfg.max_batch_size > 1 and cfg.WhichOneof("scheduling_choice") is None:
            cfg.dynamic_batching.SetInParent()
    elif cfg.max_batch_size != 0:
        raise ConfigError(
            f"autofill failed for model '{cfg.name}': model does not support batching while "
            "non-zero max_batch_size is specified"
        )
