"""What Triton 2.51 does to a model configuration before serving it.

The order follows Triton's load path:

1. ``AutoCompleteBackendFields``: ``name`` from the directory; ``backend``, ``platform`` and
   ``default_model_filename`` from the config or the files of the first version directory
   (``model.py`` -> python, ``model.onnx`` -> onnxruntime / ``onnxruntime_onnx``,
   ``model.pt`` -> pytorch / ``pytorch_libtorch``, ``model.plan``, ``model.savedmodel``,
   ``model.graphdef``, ``model.xml``; a name ``x.<backend>`` names a custom backend).
2. ``NormalizeModelConfig``: ``version_policy`` -> ``latest { num_versions: 1 }``; empty
   ``dynamic_batching.preferred_batch_size`` -> ``[max_batch_size]`` (when batching); zero
   ``sequence_batching.max_sequence_idle_microseconds`` -> 1000000 and empty
   ``oldest.preferred_batch_size`` -> ``[max_batch_size]``; ``optimization.input_pinned_memory``
   / ``output_pinned_memory`` -> enabled (not for ensembles).
3. ``ValidateModelConfig`` (and, when auto-complete is off, the input/output checks), then the
   directory-name check and the "must specify 'backend'" check.
4. ``NormalizeInstanceGroup`` and ``ValidateInstanceGroup`` with the GPUs given
   (``config/placement.py``; without GPUs KIND_AUTO -> KIND_CPU and KIND_GPU is an error
   naming the group).
"""

from __future__ import annotations

import os
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config.placement import (
    NO_GPUS,
    SupportedGpus,
    normalize_instance_groups,
    validate_instance_groups,
)
from modelyard.config.validate import (
    ENSEMBLE_PLATFORM,
    validate_config,
    validate_io_config,
    validate_model_config,
)
from modelyard.errors import ConfigError

__all__ = [
    "SEQUENCE_IDLE_DEFAULT_MICROSECONDS",
    "autocomplete_backend_fields",
    "normalize_config",
    "normalize_instance_groups",
    "normalize_model_config",
    "validate_config",
]

SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000

# (platform, backend, default file) of the backends Triton knows by their files.
_TF_SAVEDMODEL = ("tensorflow_savedmodel", "tensorflow", "model.savedmodel")
_TF_GRAPHDEF = ("tensorflow_graphdef", "tensorflow", "model.graphdef")
_TENSORRT = ("tensorrt_plan", "tensorrt", "model.plan")
_ONNX = ("onnxruntime_onnx", "onnxruntime", "model.onnx")
_OPENVINO = ("", "openvino", "model.xml")
_PYTORCH = ("pytorch_libtorch", "pytorch", "model.pt")
_PYTHON = ("", "python", "model.py")

_MUST_BE_FILES = frozenset({"tensorrt", "pytorch"})


def normalize_config(
    cfg: ModelConfig,
    model_name: str,
    *,
    model_dir: str | os.PathLike[str] | None = None,
    backend_default_max_batch_size: int = 4,
    auto_complete: bool = True,
    gpus: SupportedGpus = NO_GPUS,
) -> ModelConfig:
    """A normalized copy of ``cfg`` for the model in directory ``model_name``.

    ``model_dir`` (the model's directory) lets the backend be found from the model files, as
    Triton does; without it only the config's own fields are used. With ``auto_complete``
    False (``--disable-auto-complete-config``) inputs and outputs are validated here, as
    Triton does for strict configs. ``backend_default_max_batch_size``
    (``--backend-config=default-max-batch-size``) is not used by the normalization itself;
    Triton's Python backend ignores it and file-based auto-complete applies it (see
    ``auto_complete.autocomplete_max_batch_size``).

    ``gpus`` are the GPUs instance groups may be placed on (``config/placement.py``); with
    none, a ``KIND_GPU`` group is refused as on a machine without GPUs.

    Raises ConfigError naming the model and field for what Triton rejects at this stage. The
    result is stable: normalizing it again changes nothing.
    """
    del backend_default_max_batch_size  # accepted for the backends' auto-complete; see above
    out = ModelConfig()
    out.CopyFrom(cfg)
    autocomplete_backend_fields(out, model_name, model_dir)
    normalize_model_config(out)
    validate_model_config(out)
    if not auto_complete:
        validate_io_config(out)
    if out.name != model_name:
        raise ConfigError(
            f"unexpected directory name '{model_name}' for model '{out.name}', directory name "
            "must equal model name"
        )
    if out.platform != ENSEMBLE_PLATFORM and not out.backend:
        raise ConfigError(f"must specify 'backend' for '{out.name}'")
    normalize_instance_groups(out, gpus)
    validate_instance_groups(out, gpus)
    return out


def normalize_model_config(cfg: ModelConfig) -> None:
    """Triton's ``NormalizeModelConfig``, in place (also re-applied after auto-complete)."""
    if not cfg.HasField("version_policy"):
        cfg.version_policy.latest.num_versions = 1
    if cfg.HasField("dynamic_batching"):
        db = cfg.dynamic_batching
        if len(db.preferred_batch_size) == 0 and cfg.max_batch_size > 0:
            db.preferred_batch_size.append(cfg.max_batch_size)
    if cfg.HasField("sequence_batching"):
        sb = cfg.sequence_batching
        if sb.max_sequence_idle_microseconds == 0:
            sb.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if (
            sb.HasField("oldest")
            and len(sb.oldest.preferred_batch_size) == 0
            and cfg.max_batch_size > 0
        ):
            sb.oldest.preferred_batch_size.append(cfg.max_batch_size)
    if not cfg.HasField("ensemble_scheduling"):
        opt = cfg.optimization
        if not opt.HasField("input_pinned_memory"):
            opt.input_pinned_memory.enable = True
        if not opt.HasField("output_pinned_memory"):
            opt.output_pinned_memory.enable = True


def autocomplete_backend_fields(
    cfg: ModelConfig, model_name: str, model_dir: str | os.PathLike[str] | None = None
) -> None:
    """Triton's ``AutoCompleteBackendFields``, in place: fill ``name``, and ``backend``,
    ``platform`` and ``default_model_filename`` from the config or the model's files."""
    first = _first_subdir(Path(model_dir)) if model_dir is not None else None
    has_version = first is not None
    # File name in the first version directory -> whether it is a directory.
    files = _contents(first) if first is not None else {}
    if not cfg.name:
        cfg.name = model_name

    # TensorFlow: the platform says which format.
    if not cfg.platform and cfg.backend in ("", "tensorflow"):
        if cfg.default_model_filename == _TF_SAVEDMODEL[2]:
            cfg.platform = _TF_SAVEDMODEL[0]
        elif cfg.default_model_filename == _TF_GRAPHDEF[2]:
            cfg.platform = _TF_GRAPHDEF[0]
        elif not cfg.default_model_filename and has_version:
            if files.get(_TF_SAVEDMODEL[2]) is True:
                cfg.platform = _TF_SAVEDMODEL[0]
            if files.get(_TF_GRAPHDEF[2]) is False:
                cfg.platform = _TF_GRAPHDEF[0]
    if cfg.platform in (_TF_SAVEDMODEL[0], _TF_GRAPHDEF[0]):
        if not cfg.backend:
            cfg.backend = "tensorflow"
        if not cfg.default_model_filename:
            tf = _TF_SAVEDMODEL if cfg.platform == _TF_SAVEDMODEL[0] else _TF_GRAPHDEF
            cfg.default_model_filename = tf[2]
        return

    for platform, backend, filename in (_TENSORRT, _ONNX, _OPENVINO, _PYTORCH, _PYTHON):
        if not cfg.backend:
            if (platform and cfg.platform == platform) or cfg.default_model_filename == filename:
                cfg.backend = backend
            elif not cfg.platform and not cfg.default_model_filename and has_version:
                is_dir = files.get(filename)
                # TensorRT plans and TorchScript files must be files; the others may not be.
                if is_dir is not None and not (is_dir and backend in _MUST_BE_FILES):
                    cfg.backend = backend
        if cfg.backend == backend:
            if platform and not cfg.platform:
                cfg.platform = platform
            skip_file = backend == "pytorch" and cfg.runtime == _PYTHON[2]
            if not cfg.default_model_filename and not skip_file:
                cfg.default_model_filename = filename
            return

    # A custom backend named by the model name: "model.<backend>".
    if not cfg.backend and not cfg.platform and not cfg.default_model_filename:
        if "." not in model_name:
            raise ConfigError(
                f"Invalid model name: Could not determine backend for model '{model_name}' with "
                "no backend in model configuration. Expected model name of the form "
                "'model.<backend_name>'."
            )
        backend = model_name.split(".", 1)[1]
        cfg.backend = backend
        cfg.default_model_filename = f"model.{backend}"


def _first_subdir(model_dir: Path) -> Path | None:
    """Triton inspects the first sub-directory in byte order (any name, like Triton)."""
    try:
        names = sorted(e.name for e in os.scandir(model_dir) if _is_dir(e))
    except OSError:
        return None
    return model_dir / names[0] if names else None


def _contents(directory: Path) -> dict[str, bool]:
    try:
        return {e.name: _is_dir(e) for e in os.scandir(directory)}
    except OSError:
        return {}


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
