"""The ONNX Runtime backend (``backend: "onnxruntime"``, platform ``onnxruntime_onnx``).

As Triton's onnxruntime backend: the config's inputs and outputs are auto-completed from
the model file when either list is empty (``max_batch_size`` from a variable first dimension,
``dynamic_batching`` turned on when batching above 1), the config is then checked against
the model with Triton's messages, and each instance of ``instance_group`` gets its own
session. Session options come from the config ``parameters`` Triton reads
(``intra_op_thread_count``, ``inter_op_thread_count``, ``execution_mode``,
``enable_mem_arena``, ``enable_mem_pattern``, ``memory.enable_memory_arena_shrinkage``,
``session.*`` entries) and from ``optimization.graph.level``.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelyard.backends.instance import Instance
from modelyard.backends.tensor_runtime import Arrays, Layout, ModelRunner, TensorRuntimeInstance
from modelyard.config.auto_complete import autocomplete_max_batch_size
from modelyard.config.normalize import normalize_model_config
from modelyard.config.placement import instance_placements
from modelyard.errors import ConfigError, InvalidArgument, ModelyardError

log = logging.getLogger("modelyard")

# ONNX element type (as onnxruntime names it) -> Triton config datatype.
_ORT_TYPES = {
    "tensor(float)": "TYPE_FP32",
    "tensor(float16)": "TYPE_FP16",
    "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(bool)": "TYPE_BOOL",
    "tensor(string)": "TYPE_STRING",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    data_type: str  # "TYPE_FP32"; "" for a type Triton cannot serve
    dims: tuple[int, ...]  # -1 for a dynamic dimension


def model_path(cfg: Any, model_dir: str, version: int) -> str:
    return os.path.join(model_dir, str(version), cfg.default_model_filename or "model.onnx")


def _ort() -> Any:
    import onnxruntime

    return onnxruntime


def _infos(args: Any) -> list[TensorInfo]:
    return [
        TensorInfo(
            a.name,
            _ORT_TYPES.get(a.type, ""),
            tuple(d if isinstance(d, int) and d >= 0 else -1 for d in a.shape),
        )
        for a in args
    ]


def _providers(cfg: Any, device_id: int | None) -> list[Any]:
    """CPU, or on a KIND_GPU instance CUDA on its device. An onnxruntime without CUDA (the
    plain wheel; onnxruntime-gpu has it) runs the instance on the CPU and says so."""
    if device_id is None:
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in _ort().get_available_providers():
        log.warning(
            "model '%s': onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu); "
            "its KIND_GPU instance on GPU %d runs on the CPU",
            cfg.name,
            device_id,
        )
        return ["CPUExecutionProvider"]
    return [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]


def _open_session(
    cfg: Any, path: str, options: Any | None = None, device_id: int | None = None
) -> Any:
    if not os.path.exists(path):
        raise ModelyardError(f"unable to find '{path}' for model instance '{cfg.name}'")
    try:
        return _ort().InferenceSession(
            path, sess_options=options, providers=_providers(cfg, device_id)
        )
    except Exception as e:
        raise ModelyardError(
            f"onnx runtime error: failed to load model '{cfg.name}': {e}"
        ) from None


def inspect(cfg: Any, path: str) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The model file's inputs and outputs, in the model's order."""
    session = _open_session(cfg, path)
    return _infos(session.get_inputs()), _infos(session.get_outputs())


def auto_complete(cfg: Any, model_dir: str, version: int, default_max_batch_size: int) -> Any:
    """Triton's ``AutoCompleteConfig``: fill ``max_batch_size``, inputs and outputs from the
    model file unless the config already lists both inputs and outputs. Returns a copy."""
    n_inputs = len(cfg.input) + len(cfg.batch_input)
    if n_inputs > 0 and len(cfg.output) > 0:
        return cfg
    inputs, outputs = inspect(cfg, model_path(cfg, model_dir, version))
    out = type(cfg)()
    out.CopyFrom(cfg)
    batchable = all(len(t.dims) > 0 and t.dims[0] == -1 for t in (*inputs, *outputs))
    autocomplete_max_batch_size(
        out, can_support_batching=batchable, default_max_batch_size=default_max_batch_size
    )
    if len(cfg.input) == 0:
        _fill(out.input, inputs, out.max_batch_size)
    if len(cfg.output) == 0:
        _fill(out.output, outputs, out.max_batch_size)
    normalize_model_config(out)
    return out


def _fill(field: Any, infos: list[TensorInfo], max_batch_size: int) -> None:
    from tritonclient.grpc import model_config_pb2

    for info in infos:
        io = field.add()
        io.name = info.name
        if info.data_type:
            io.data_type = model_config_pb2.DataType.Value(info.data_type)
        dims = info.dims[1:] if max_batch_size > 0 else info.dims
        io.dims.extend(dims or (1,))
        if not dims and max_batch_size > 0:
            io.reshape.SetInParent()  # a scalar per batch element: dims [1], reshape []


def _shape(dims: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def check_against_model(cfg: Any, path: str) -> None:
    """Triton's ``ValidateInputs`` / ``ValidateOutputs``: names, datatypes and shapes of the
    config must fit the model. Raises InvalidArgument with Triton's messages."""
    from tritonclient.grpc import model_config_pb2

    inputs, outputs = inspect(cfg, path)
    name, mbs = cfg.name, int(cfg.max_batch_size)
    if len(inputs) != len(cfg.input):
        raise InvalidArgument(
            f"unable to load model '{name}', configuration expects "
            f"{len(cfg.input)} inputs, model provides {len(inputs)}"
        )
    for kind, ios, infos, exact in (
        ("input", cfg.input, inputs, False),
        ("output", cfg.output, outputs, True),
    ):
        by_name = {t.name: t for t in infos}
        for io in ios:
            info = by_name.get(io.name)
            if info is None:
                allowed = ", ".join(sorted(by_name))
                raise InvalidArgument(
                    f"unexpected inference {kind} '{io.name}', allowed {kind}s are: {allowed}"
                )
            dtype = model_config_pb2.DataType.Name(io.data_type)
            if dtype != info.data_type:
                raise InvalidArgument(
                    f"unable to load model '{name}', configuration expects datatype {dtype} for "
                    f"{kind} '{io.name}', model provides {info.data_type or 'an unsupported type'}"
                )
            dims = tuple(io.reshape.shape) if io.HasField("reshape") else tuple(io.dims)
            if info.dims:
                _compare_dims(name, io.name, info.dims, dims, mbs, exact)
            elif any(d != 1 for d in dims):
                raise InvalidArgument(
                    f"unable to load model '{name}', scalar tensor '{io.name}', should only "
                    "provide 1 in the model configuration when the model doesn't support "
                    f"batching. Model configuration provided: {_shape(dims)}."
                )


def _compare_dims(
    model: str,
    tensor: str,
    model_shape: tuple[int, ...],
    dims: tuple[int, ...],
    mbs: int,
    exact: bool,
) -> None:
    prefix = f"model '{model}', tensor '{tensor}': "
    full = (-1, *dims) if mbs > 0 else dims
    if mbs > 0 and (len(model_shape) == 0 or model_shape[0] != -1):
        raise InvalidArgument(
            prefix + "for the model to support batching the shape should have at least 1 "
            "dimension and the first dimension must be -1; but shape expected by the model is "
            + _shape(model_shape)
        )
    ok = len(model_shape) == len(full) and all(
        m == f for m, f in zip(model_shape, full, strict=True) if exact or m != -1
    )
    if ok:
        return
    specified = (
        f"{len(full)} dimensions (an initial batch dimension because max_batch_size > 0 "
        f"followed by the explicit tensor shape, making complete shape {_shape(full)})"
        if mbs > 0
        else f"{len(dims)} dimensions (shape {_shape(dims)})"
    )
    raise InvalidArgument(
        prefix + f"the model expects {len(model_shape)} dimensions (shape "
        f"{_shape(model_shape)}) but the model configuration specifies {specified}"
    )


def _param(cfg: Any, key: str) -> str | None:
    p = cfg.parameters.get(key) if cfg.parameters else None
    return p.string_value if p is not None else None


def _int_param(cfg: Any, key: str) -> int:
    text = _param(cfg, key)
    if text is None or text == "":
        return 0
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"failed to convert '{key}' value '{text}' to an integer for model '{cfg.name}'"
        ) from None


def _bool_param(cfg: Any, key: str) -> bool | None:
    text = _param(cfg, key)
    if text is None:
        return None
    low = text.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"failed to convert '{key}' value '{text}' to a bool for model '{cfg.name}'")


def session_options(cfg: Any) -> Any:
    """SessionOptions from the config, as Triton's backend reads them."""
    ort = _ort()
    so = ort.SessionOptions()
    level = int(cfg.optimization.graph.level) if cfg.optimization.HasField("graph") else 0
    so.graph_optimization_level = {
        -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    mode = _int_param(cfg, "execution_mode")
    if mode not in (0, 1):
        raise ConfigError(
            "Invalid configuration value provided. Expected values for  execution_mode are 0 "
            f"or 1 but got {mode} ."
        )
    so.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if mode == 1 else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    intra, inter = (
        _int_param(cfg, "intra_op_thread_count"),
        _int_param(cfg, "inter_op_thread_count"),
    )
    if intra > 0:
        so.intra_op_num_threads = intra
    if inter > 0:
        so.inter_op_num_threads = inter
    arena = _bool_param(cfg, "enable_mem_arena")
    if arena is not None:
        so.enable_cpu_mem_arena = arena
    pattern = _bool_param(cfg, "enable_mem_pattern")
    if pattern is not None:
        so.enable_mem_pattern = pattern
    for key in cfg.parameters:
        if key.startswith("session.") or key == "memory.enable_memory_arena_shrinkage":
            so.add_session_config_entry(key, cfg.parameters[key].string_value)
    return so


class OrtRunner(ModelRunner):
    def __init__(self, session: Any):
        self.session = session
        self._string_inputs = {i.name for i in session.get_inputs() if i.type == "tensor(string)"}

    def run(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        feed = {k: _ort_input(v) if k in self._string_inputs else v for k, v in inputs.items()}
        values = self.session.run(output_names, feed)
        return dict(zip(output_names, values, strict=True))

    def close(self) -> None:
        self.session = None


def _ort_input(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """BYTES (bytes objects) -> the str objects ONNX Runtime wants for string tensors."""
    flat = [
        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)
    ]
    out = np.empty(len(flat), dtype=np.object_)
    out[:] = flat
    return out.reshape(arr.shape)


def create_instances(cfg: Any, model_dir: str, version: int) -> list[Instance]:
    """One session per instance (``config/placement.py``), named as Triton names them; a
    KIND_GPU instance's session runs on its device through CUDA."""
    path = model_path(cfg, model_dir, version)
    check_against_model(cfg, path)
    session_options(cfg)  # configuration errors fail the load before any session exists
    layout = Layout.from_config(cfg)
    instances: list[Instance] = []
    for p in instance_placements(cfg):
        device_id = p.device_id if p.kind == "GPU" else None
        instances.append(
            TensorRuntimeInstance(
                p.key,
                cfg.name,
                layout,
                functools.partial(_open_runner, cfg, path, device_id),
                "onnx runtime error",
            )
        )
    return instances


def _open_runner(cfg: Any, path: str, device_id: int | None) -> OrtRunner:
    return OrtRunner(_open_session(cfg, path, session_options(cfg), device_id))
