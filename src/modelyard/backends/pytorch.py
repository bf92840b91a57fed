"""The TorchScript backend (``backend: "pytorch"``, platform ``pytorch_libtorch``).

Needs the optional ``torch`` extra (``pip install modelyard[torch]``). As Triton's pytorch
backend: ``model.pt`` is a TorchScript module run on CPU; the config cannot be auto-completed
(TorchScript keeps no tensor types), so inputs and outputs must be listed. Inputs map to
``forward``'s arguments by name when every config input names one, else by the
``<name>__<index>`` convention (``INPUT__0``), else in config order; outputs by
``<name>__<index>``, else in config order. ``parameters`` ``INTRA_OP_THREAD_COUNT`` /
``INTER_OP_THREAD_COUNT`` set torch's (process-wide) thread pools, and
``INFERENCE_MODE`` (default true) picks ``torch.inference_mode`` over ``torch.no_grad``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Any

import numpy as np

from modelyard.backends.instance import Instance
from modelyard.backends.tensor_runtime import Arrays, Layout, ModelRunner, TensorRuntimeInstance
from modelyard.config.placement import instance_placements
from modelyard.errors import ConfigError, InternalError, InvalidArgument, ModelyardError

log = logging.getLogger("modelyard")

_INDEXED = re.compile(r"^.*?__(\d+)$")


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ModelyardError(
            "the pytorch backend needs torch: pip install 'modelyard[torch]'"
        ) from None
    return torch


def model_path(cfg: Any, model_dir: str, version: int) -> str:
    return os.path.join(model_dir, str(version), cfg.default_model_filename or "model.pt")


def auto_complete(cfg: Any, model_dir: str, version: int, default_max_batch_size: int) -> Any:
    """Triton's pytorch backend does not auto-complete; it only says so."""
    del model_dir, version, default_max_batch_size
    log.warning(
        "skipping model configuration auto-complete for '%s': not supported for pytorch backend",
        cfg.name,
    )
    return cfg


def _index(name: str) -> int | None:
    m = _INDEXED.match(name)
    return int(m.group(1)) if m else None


def input_positions(names: list[str], forward_args: list[str]) -> dict[str, int]:
    """Where each config input goes in ``forward``'s arguments (Triton's naming rules)."""
    if all(n in forward_args for n in names):
        return {n: forward_args.index(n) for n in names}
    indexed = {n: _index(n) for n in names}
    if all(i is not None for i in indexed.values()):
        return {n: i for n, i in indexed.items() if i is not None}
    log.warning(
        "inputs of a pytorch model are neither arguments of forward nor follow the "
        "<name>__<index> naming convention; using the configuration order"
    )
    return {n: i for i, n in enumerate(names)}


def output_positions(names: list[str]) -> dict[str, int]:
    indexed = {n: _index(n) for n in names}
    if all(i is not None for i in indexed.values()):
        return {n: i for n, i in indexed.items() if i is not None}
    return {n: i for i, n in enumerate(names)}


def _forward_args(module: Any) -> list[str]:
    args = list(module.forward.schema.arguments)
    if args and args[0].name == "self":
        args = args[1:]
    return [a.name for a in args]


def _load(cfg: Any, path: str, device: str = "cpu") -> Any:
    torch = _torch()
    if not os.path.exists(path):
        raise ModelyardError(f"unable to find '{path}' for model instance '{cfg.name}'")
    try:
        module = torch.jit.load(path, map_location=device)
    except Exception as e:
        raise ModelyardError(f"failed to load model '{cfg.name}': {e}") from None
    module.eval()
    return module


def _check_config(cfg: Any) -> None:
    from tritonclient.grpc import model_config_pb2

    if len(cfg.input) == 0:
        raise ModelyardError(
            "model configuration must contain at least one input, none were specified."
        )
    if len(cfg.output) == 0:
        raise ModelyardError(
            "model configuration must contain at least one output, none were specified."
        )
    for kind, ios in (("input", cfg.input), ("output", cfg.output)):
        for io in ios:
            dtype = model_config_pb2.DataType.Name(io.data_type)
            if dtype in ("TYPE_STRING", "TYPE_INVALID"):
                raise ModelyardError(
                    f"unsupported datatype {dtype} for {kind} '{io.name}' for model '{cfg.name}'"
                )


def _thread_params(cfg: Any) -> None:
    torch = _torch()
    for key, setter in (
        ("INTRA_OP_THREAD_COUNT", torch.set_num_threads),
        ("INTER_OP_THREAD_COUNT", torch.set_num_interop_threads),
    ):
        p = cfg.parameters.get(key) if cfg.parameters else None
        if p is None or not p.string_value:
            continue
        try:
            n = int(p.string_value)
        except ValueError:
            raise ConfigError(
                f"failed to convert '{key}' value '{p.string_value}' to an "
                f"integer for model '{cfg.name}'"
            ) from None
        if n > 0:
            try:
                setter(n)
            except RuntimeError:  # inter-op threads can be set once per process
                log.warning(
                    "model '%s': %s=%d not applied (torch already started its pool)",
                    cfg.name,
                    key,
                    n,
                )


def _inference_mode(cfg: Any) -> bool:
    p = cfg.parameters.get("INFERENCE_MODE") if cfg.parameters else None
    return p is None or p.string_value.strip().lower() not in ("false", "0", "no", "off")


class TorchRunner(ModelRunner):
    def __init__(self, cfg: Any, module: Any, device: str = "cpu"):
        self.module = module
        self.device = device  # "cuda:<id>" on a KIND_GPU instance: inputs go there
        names = [i.name for i in cfg.input]
        self.inputs = input_positions(names, _forward_args(module))
        self.n_args = len(names)
        self.outputs = output_positions([o.name for o in cfg.output])
        self.out_types = {o.name: o.data_type for o in cfg.output}
        self.inference_mode = _inference_mode(cfg)
        self.model = cfg.name

    def run(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        torch = _torch()
        args: list[Any] = [None] * self.n_args
        for name, arr in inputs.items():
            # torch tensors must own writable memory; received tensors may be read-only views
            tensor = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
            args[self.inputs[name]] = tensor if self.device == "cpu" else tensor.to(self.device)
        guard = torch.inference_mode() if self.inference_mode else torch.no_grad()
        with guard:
            result = self.module(*args)
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        out: Arrays = {}
        for name in output_names:
            pos = self.outputs[name]
            if pos >= len(values):
                raise InternalError(
                    f"model '{self.model}' returned {len(values)} outputs; output '{name}' "
                    f"expects index {pos}"
                )
            out[name] = self._numpy(name, values[pos])
        return out

    def _numpy(self, name: str, value: Any) -> np.ndarray[Any, Any]:
        from tritonclient.grpc import model_config_pb2

        arr: np.ndarray[Any, Any] = value.detach().cpu().numpy()
        from modelyard.types import config_datatype, datatype_of

        want = config_datatype(self.out_types[name])
        got = datatype_of(arr.dtype)
        if got != want:
            raise InvalidArgument(
                f"configuration expects datatype {model_config_pb2.DataType.Name(self.out_types[name])}"
                f" for output '{name}', model provides TYPE_{got}"
            )
        return arr

    def close(self) -> None:
        self.module = None


def _open(cfg: Any, path: str, device: str = "cpu") -> TorchRunner:
    """On the instance's thread (importing torch and loading take seconds): load, check."""
    _thread_params(cfg)
    module = _load(cfg, path, device)
    provided = len(_forward_args(module))
    if provided != len(cfg.input):
        raise InvalidArgument(
            f"unable to load model '{cfg.name}', configuration expects {len(cfg.input)} inputs, "
            f"model provides {provided}"
        )
    return TorchRunner(cfg, module, device)


def create_instances(cfg: Any, model_dir: str, version: int) -> list[Instance]:
    """One TorchScript module per instance (``config/placement.py``), on ``cuda:<id>`` for a
    KIND_GPU instance."""
    _check_config(cfg)
    path = model_path(cfg, model_dir, version)
    layout = Layout.from_config(cfg)
    instances: list[Instance] = []
    for p in instance_placements(cfg):
        device = f"cuda:{p.device_id}" if p.kind == "GPU" else "cpu"
        instances.append(
            TensorRuntimeInstance(
                p.key,
                cfg.name,
                layout,
                functools.partial(_open, cfg, path, device),
                "pytorch error",
            )
        )
    return instances
