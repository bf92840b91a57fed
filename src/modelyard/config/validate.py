"""Checks Triton 2.51 applies to a model configuration before serving it.

The messages are Triton's (``model_config_utils.cc``: ``ValidateModelConfig``,
``ValidateInstanceGroup``, ``ValidateModelIOConfig``, ``ValidateBatchIO``), so a user moving
between Triton and modelyard sees the same text. Each one names the field and the model.
Everything raises :class:`~modelyard.errors.ConfigError`.

Beyond Triton (which accepts them and then fails requests): duplicate input names and
duplicate output names are rejected.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc.model_config_pb2 import (
    BatchInput,
    BatchOutput,
    DataType,
    ModelConfig,
    ModelInput,
    ModelQueuePolicy,
)

from modelyard.config.ensemble import validate_ensemble_scheduling
from modelyard.config.placement import NO_GPUS, SupportedGpus, validate_instance_groups
from modelyard.config.validate_sequence import validate_sequence_batching
from modelyard.errors import ConfigError

__all__ = [
    "validate_config",
    "validate_instance_groups",
    "validate_io_config",
    "validate_model_config",
]

ENSEMBLE_PLATFORM = "ensemble"
TENSORRT_PLATFORM = "tensorrt_plan"

# Known backends and the platforms that belong to them (GetBackendType / ...FromPlatform).
_BACKEND_TYPE = {"tensorflow": "tf", "tensorrt": "trt", "onnxruntime": "ort", "pytorch": "pt"}
_PLATFORM_TYPE = {
    "tensorflow_graphdef": "tf",
    "tensorflow_savedmodel": "tf",
    "tensorrt_plan": "trt",
    "onnxruntime_onnx": "ort",
    "pytorch_libtorch": "pt",
}


def validate_config(cfg: ModelConfig, gpus: SupportedGpus = NO_GPUS) -> None:
    """Everything Triton checks before a model is served: the model-level checks, instance
    groups (placed on ``gpus``), inputs and outputs, batch inputs/outputs and the ensemble
    graph."""
    validate_model_config(cfg)
    validate_instance_groups(cfg, gpus)
    validate_io_config(cfg)


def validate_model_config(cfg: ModelConfig) -> None:
    """Triton's ``ValidateModelConfig``: everything but instance groups and tensors."""
    name = cfg.name
    if not name:
        raise ConfigError("model configuration must specify 'name'")
    if not cfg.backend:
        if cfg.platform != ENSEMBLE_PLATFORM:
            raise ConfigError(f"unexpected platform type '{cfg.platform}' for {name}")
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise ConfigError(
            f"Ensemble model '{name}' must have platform type '{cfg.platform}' and empty "
            "backend type"
        )
    backend_type = _BACKEND_TYPE.get(cfg.backend)
    if backend_type is not None and backend_type != _PLATFORM_TYPE.get(cfg.platform):
        raise ConfigError(
            f"unexpected 'platform' and 'backend' pair, got:{cfg.platform}, {cfg.backend}"
        )
    if cfg.max_batch_size < 0:
        raise ConfigError(f"'max_batch_size' must be non-negative value for {name}")
    if not cfg.HasField("version_policy"):
        raise ConfigError(f"must specify 'version policy' for {name}")
    if cfg.HasField("dynamic_batching"):
        _validate_dynamic_batching(cfg)
    if cfg.HasField("sequence_batching"):
        validate_sequence_batching(cfg)
    if cfg.HasField("ensemble_scheduling"):
        validate_ensemble_scheduling(cfg)
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise ConfigError(
            f"ensemble scheduling must be set for ensemble {name} whose platform is "
            f"{ENSEMBLE_PLATFORM}"
        )
    if cfg.model_transaction_policy.decoupled and cfg.response_cache.enable:
        raise ConfigError(
            f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )


def _validate_dynamic_batching(cfg: ModelConfig) -> None:
    name, db = cfg.name, cfg.dynamic_batching
    for size in db.preferred_batch_size:
        if size <= 0:
            raise ConfigError(f"dynamic batching preferred size must be positive for {name}")
        if size > cfg.max_batch_size:
            raise ConfigError(
                f"dynamic batching preferred size must be <= max batch size for {name}"
            )
    levels = db.priority_levels
    if levels != 0:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            raise ConfigError(f"default priority level must be in range [1, {levels}] for {name}")
        for level in db.priority_queue_policy:
            if level == 0 or level > levels:
                raise ConfigError(
                    f"priority queue policy must have priority level in range [1, {levels}] "
                    f"for {name}"
                )
    if db.preserve_ordering:
        if levels > 1:
            raise ConfigError(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
            )
        policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
        for policy in policies:
            if (
                policy.default_timeout_microseconds != 0
                and policy.timeout_action == ModelQueuePolicy.DELAY
            ):
                raise ConfigError(
                    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' "
                    f"is true for {name}"
                )


def validate_io_config(cfg: ModelConfig) -> None:
    """Triton's ``ValidateModelIOConfig`` (inputs, outputs, batch inputs/outputs), plus
    duplicate tensor names. Messages end with " for <model>" as Triton's do."""
    name = cfg.name
    try:
        for inp in cfg.input:
            _validate_io(inp, cfg.max_batch_size, cfg.platform, "model input ")
            if (
                inp.format in (ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW)
                and len(inp.dims) != 3
            ):
                raise ConfigError("model input NHWC/NCHW require 3 dims")
        for out in cfg.output:
            _validate_io(out, cfg.max_batch_size, cfg.platform, "model output ")
        _validate_batch_io(cfg)
        _reject_duplicates([i.name for i in cfg.input], "input")
        _reject_duplicates([o.name for o in cfg.output], "output")
    except ConfigError as exc:
        raise ConfigError(f"{exc.message} for {name}") from None


def _validate_io(io: Any, max_batch_size: int, platform: str, prefix: str) -> None:
    if not io.name:
        raise ConfigError(f"{prefix}must specify 'name'")
    who = f"{prefix}'{io.name}' "
    if io.data_type == DataType.TYPE_INVALID:
        raise ConfigError(f"{who}must specify 'data_type'")
    if len(io.dims) == 0:
        raise ConfigError(f"{who}must specify 'dims'")
    has_reshape = io.HasField("reshape")
    if has_reshape and len(io.reshape.shape) == 0 and max_batch_size == 0:
        raise ConfigError(
            f"{who}cannot have empty reshape for non-batching model as scalar tensors are not "
            "supported"
        )
    for dim in io.dims:
        if dim < 1 and dim != -1:
            raise ConfigError(
                f"{who}dimension must be integer >= 1, or -1 to indicate a variable-size dimension"
            )
    if has_reshape:
        _validate_reshape(list(io.dims), list(io.reshape.shape), who)
    if io.is_shape_tensor and platform != TENSORRT_PLATFORM:
        raise ConfigError("shape tensors are only supported for TensorRT platform")
    if io.is_non_linear_format_io:
        if platform != TENSORRT_PLATFORM:
            raise ConfigError("Non-linear IO format is only supported for the TensorRT platform")
        if len(io.dims) != 3:
            kind = "input" if prefix.startswith("model input") else "output"
            raise ConfigError(f"Non-linear IO format {kind} requires 3 dims")


def _element_count(dims: list[int]) -> int:
    count = 1
    for d in dims:
        if d == -1:
            return -1
        count *= d
    return count


def _validate_reshape(dims: list[int], shape: list[int], who: str) -> None:
    for dim in shape:
        if dim < 1 and dim != -1:
            raise ConfigError(
                f"{who}reshape dimensions must be integer >= 1, or -1 to indicate a "
                "variable-size dimension"
            )
    dims_size, reshape_size = _element_count(dims), _element_count(shape)
    # Special case: an empty reshape (a scalar) needs dims with one element.
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        raise ConfigError(f"{who}has different size for dims and reshape")
    if dims_size == -1:
        # Compare the element counts of the pieces between variable-size dimensions.
        dims_chunks, shape_chunks = _chunks(dims), _chunks(shape)
        if len(dims_chunks) != len(shape_chunks):
            raise ConfigError(
                f"{who}has different number of variable-size dimensions for dims and reshape"
            )
        if dims_chunks != shape_chunks:
            raise ConfigError(f"{who}has different size for dims and reshape")


def _chunks(dims: list[int]) -> list[int]:
    counts, current = [], 1
    for d in dims:
        if d == -1:
            counts.append(current)
            current = 1
        else:
            current *= d
    counts.append(current)
    return counts


def _validate_batch_io(cfg: ModelConfig) -> None:
    inputs = {i.name for i in cfg.input}
    outputs = {o.name for o in cfg.output}
    for bi in cfg.batch_input:
        if bi.kind not in BatchInput.Kind.values():
            raise ConfigError(f"unknown batch input kind '{bi.kind}'")
        if len(bi.source_input) != 1:
            raise ConfigError(
                f"batch input kind '{BatchInput.Kind.Name(bi.kind)}' expects 1 source input, "
                f"got {len(bi.source_input)}"
            )
        if bi.data_type not in (DataType.TYPE_INT32, DataType.TYPE_FP32):
            raise ConfigError("batch input data type must be TYPE_INT32 or TYPE_FP32")
        _check_sources(bi.source_input, inputs)
    for bo in cfg.batch_output:
        if bo.kind not in BatchOutput.Kind.values():
            raise ConfigError(f"unknown batch output kind '{bo.kind}'")
        if len(bo.source_input) != 1:
            raise ConfigError(
                f"batch output kind '{BatchOutput.Kind.Name(bo.kind)}' expects 1 source input, "
                f"got {len(bo.source_input)}"
            )
        _check_sources(bo.source_input, inputs)
        targets: set[str] = set()
        for target in bo.target_name:
            if target not in outputs:
                raise ConfigError(f"unknown target output name '{target}'")
            if target in targets:
                raise ConfigError(f"target output name '{target}' can only be specified once")
            targets.add(target)


def _check_sources(sources: Any, inputs: set[str]) -> None:
    for src in sources:
        if src not in inputs:
            raise ConfigError(f"unknown source input name '{src}'")


def _reject_duplicates(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ConfigError(f"model {what} '{n}' is specified more than once")
        seen.add(n)
