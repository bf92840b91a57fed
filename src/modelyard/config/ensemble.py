"""Static checks of an ensemble's ``ensemble_scheduling`` (Triton's
``ValidateEnsembleSchedulingConfig``): every step is complete, tensors are written once, every
ensemble output is reachable from the ensemble inputs and no tensor is left unused.

Checks that need the composing models' configs (their tensor names, types, shapes and
whether they are decoupled) belong to whoever loads the ensemble.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.errors import ConfigError

__all__ = ["validate_ensemble_scheduling"]


@dataclass(eq=False)
class _Tensor:
    name: str
    is_output: bool
    ready: bool = False
    prev: list[_Tensor] = field(default_factory=list)
    next: list[_Tensor] = field(default_factory=list)


def validate_ensemble_scheduling(cfg: ModelConfig) -> None:
    """Raise ConfigError (Triton's wording) if the ensemble definition is inconsistent."""
    name = cfg.name
    if cfg.platform != "ensemble":
        raise ConfigError(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble"
        )
    if len(cfg.instance_group) != 0:
        raise ConfigError(f"instance group should not be specified for ensemble '{name}'")
    if cfg.HasField("optimization"):
        raise ConfigError(f"optimization should not be specified for ensemble '{name}'")
    if len(cfg.model_warmup) != 0:
        raise ConfigError(f"model_warmup can not be specified for ensemble '{name}'")
    if len(cfg.ensemble_scheduling.step) == 0:
        raise ConfigError(f"must specify 'step' for ensemble '{name}'")

    tensors = _build_graph(cfg)
    queue: deque[_Tensor] = deque()
    for inp in cfg.input:
        tensor = tensors.get(inp.name)
        if tensor is None:
            raise ConfigError(f"ensemble input '{inp.name}' for ensemble {name}' is not used")
        tensor.ready = True
        queue.append(tensor)
    while queue:
        node = queue.popleft()
        for nxt in node.next:
            if not nxt.ready and all(p.ready for p in nxt.prev):
                nxt.ready = True
                queue.append(nxt)

    outputs: set[str] = set()
    for out in cfg.output:
        tensor = tensors.get(out.name)
        if tensor is None:
            raise ConfigError(f"ensemble output '{out.name}' for ensemble {name}' is not used")
        if not tensor.ready:
            raise ConfigError(_not_written(tensor, out.name, name))
        outputs.add(out.name)
    for tname, tensor in tensors.items():
        if tname in outputs:
            continue
        if not tensor.ready or not tensor.next:
            raise ConfigError(f"ensemble tensor '{tname}' is unused in ensemble '{name}'")


def _build_graph(cfg: ModelConfig) -> dict[str, _Tensor]:
    name = cfg.name
    tensors: dict[str, _Tensor] = {}
    for idx, step in enumerate(cfg.ensemble_scheduling.step):
        where = f"in step {idx} of ensemble '{name}'"
        if not step.model_name:
            raise ConfigError(f"must specify 'model_name' {where}")
        if len(step.input_map) == 0:
            raise ConfigError(f"must specify 'input_map' {where}")
        if len(step.output_map) == 0:
            raise ConfigError(f"must specify 'output_map' {where}")
        written: list[_Tensor] = []
        for ens_name in step.output_map.values():
            tensor = tensors.get(ens_name)
            if tensor is None:
                tensor = tensors[ens_name] = _Tensor(ens_name, is_output=True)
            elif tensor.is_output:
                raise ConfigError(
                    f"ensemble tensor '{ens_name}' can appear in an output map only once for "
                    f"ensemble '{name}' step {idx}"
                )
            else:
                tensor.is_output = True
            written.append(tensor)
        # A map cannot hold one model input twice, so Triton's "mapped to multiple ensemble
        # tensors" error cannot arise from a parsed config.
        for ens_name in step.input_map.values():
            source = tensors.get(ens_name)
            if source is None:
                source = tensors[ens_name] = _Tensor(ens_name, is_output=False)
            for out in written:
                out.prev.append(source)
                source.next.append(out)
    return tensors


def _not_written(tensor: _Tensor, output: str, model: str) -> str:
    message = f"output '{output}' for ensemble '{model}' is not written"
    # Follow not-ready predecessors to the first disconnected tensor.
    last, seen = tensor, set()
    prev = tensor.prev
    while prev:
        nodes, prev = prev, []
        for node in nodes:
            if not node.ready and node.name not in seen:
                seen.add(node.name)
                last, prev = node, node.prev
                break
    if last is not tensor:
        message += f": at least one of its depending tensors, '{last.name}', is not connected"
    return message
