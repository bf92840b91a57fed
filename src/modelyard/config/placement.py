"""Where a model's instances run: Triton 2.51's instance-group rules, given the GPUs there are.

Pure functions of a config and a :class:`SupportedGpus` (the device ids the CUDA runtime
numbers, those at or above ``--min-supported-compute-capability``); ``modelyard.devices``
finds them on the machine, tests pass their own. With no GPUs every text is the one a
GPU-capable Triton gives on a machine without GPUs, which is what modelyard always said.

- :func:`normalize_instance_groups` is core's ``NormalizeInstanceGroup``: a model without
  groups gets one named after it; unnamed groups become ``<model>_<index>``; ``KIND_AUTO``
  becomes ``KIND_GPU`` when there are GPUs and every listed id is one of them, else
  ``KIND_CPU``; a ``KIND_GPU`` group without ``gpus`` gets every supported GPU; a count below
  1 becomes 1 (2 for ONNX Runtime and TensorFlow on CPU).
- :func:`validate_instance_groups` is ``ValidateInstanceGroup``, with Triton's texts.
- :func:`instance_placements` is ``TritonModel::SetConfiguredScheduler``'s loop: for each
  group, ``count`` instances named ``<group>_<c>``, and on a ``KIND_GPU`` group each of them
  once per listed GPU (same name, another device), so ``count: 2, gpus: [0, 1]`` is four.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelyard.errors import ConfigError

__all__ = [
    "DEFAULT_MIN_COMPUTE_CAPABILITY",
    "NO_GPUS",
    "InstancePlacement",
    "SupportedGpus",
    "instance_placements",
    "meets_compute_capability",
    "normalize_instance_groups",
    "validate_instance_groups",
]

# Triton's build default (TRITON_MIN_COMPUTE_CAPABILITY), the default of the flag.
DEFAULT_MIN_COMPUTE_CAPABILITY = 6.0

_TENSORRT_PLATFORM = "tensorrt_plan"
# Backends whose CPU instance groups default to two instances (SetDefaultInstanceCount).
_TWO_CPU_INSTANCES = frozenset({"tensorflow", "onnxruntime"})
_KIND_NAMES = {
    ModelInstanceGroup.KIND_AUTO: "AUTO",
    ModelInstanceGroup.KIND_GPU: "GPU",
    ModelInstanceGroup.KIND_CPU: "CPU",
    ModelInstanceGroup.KIND_MODEL: "MODEL",
}


@dataclass(frozen=True)
class SupportedGpus:
    """The GPUs models may be placed on: CUDA device ids in ascending order, and the minimum
    compute capability that chose them (Triton's messages quote it)."""

    ids: tuple[int, ...] = ()
    min_compute_capability: float = DEFAULT_MIN_COMPUTE_CAPABILITY

    def __contains__(self, device_id: object) -> bool:
        return device_id in self.ids


NO_GPUS = SupportedGpus()


def meets_compute_capability(major: int, minor: int, minimum: float) -> bool:
    """Triton's ``CheckGPUCompatibility``: ``major + minor / 10`` at least ``minimum``
    (within 0.01)."""
    capability = major + minor / 10.0
    return capability > minimum or abs(capability - minimum) < 0.01


@dataclass(frozen=True)
class InstancePlacement:
    """One instance to create: Triton's instance name, its kind as the Python backend's
    ``model_instance_kind`` says it (``CPU``, ``GPU``, ``MODEL``), its device id (0 unless
    ``GPU``), and a name unique within the model (``name``, or ``<name>_gpu<id>`` when its
    group places the same name on several GPUs) for what must tell them apart."""

    name: str
    kind: str
    device_id: int
    key: str


def normalize_instance_groups(cfg: ModelConfig, gpus: SupportedGpus = NO_GPUS) -> None:
    """Triton's ``NormalizeInstanceGroup`` (no backend-preferred groups), in place."""
    if cfg.HasField("ensemble_scheduling"):
        return
    if len(cfg.instance_group) == 0:
        group = cfg.instance_group.add()
        group.name = cfg.name
        group.kind = ModelInstanceGroup.KIND_AUTO  # resolved below, as Triton leaves it
    for index, group in enumerate(cfg.instance_group):
        if not group.name:
            group.name = f"{cfg.name}_{index}"
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            on_gpus = bool(gpus.ids) and all(g in gpus for g in group.gpus)
            group.kind = ModelInstanceGroup.KIND_GPU if on_gpus else ModelInstanceGroup.KIND_CPU
        if group.count < 1:
            two = group.kind == ModelInstanceGroup.KIND_CPU and cfg.backend in _TWO_CPU_INSTANCES
            group.count = 2 if two else 1
        if group.kind == ModelInstanceGroup.KIND_GPU and len(group.gpus) == 0:
            group.gpus.extend(gpus.ids)


def validate_instance_groups(cfg: ModelConfig, gpus: SupportedGpus = NO_GPUS) -> None:
    """Triton's ``ValidateInstanceGroup`` on a GPU-capable server with ``gpus``."""
    if cfg.HasField("ensemble_scheduling"):
        return
    name = cfg.name
    if len(cfg.instance_group) == 0:
        raise ConfigError(f"must specify one or more 'instance group's for {name}")
    for group in cfg.instance_group:
        prefix = f"instance group {group.name} of model {name}"
        if group.kind == ModelInstanceGroup.KIND_MODEL:
            if len(group.gpus) > 0:
                raise ConfigError(f"{prefix} has kind KIND_MODEL but specifies one or more GPUs")
        elif group.kind == ModelInstanceGroup.KIND_GPU:
            if len(group.gpus) == 0:
                if not gpus.ids:
                    raise ConfigError(f"{prefix} has kind KIND_GPU but no GPUs are available")
                raise ConfigError(f"{prefix} has kind KIND_GPU but specifies no GPUs")
            for gid in group.gpus:
                if gid not in gpus:
                    raise ConfigError(
                        f"{prefix} specifies invalid or unsupported gpu id {gid}. GPUs with at "
                        "least the minimum required CUDA compute compatibility of "
                        f"{gpus.min_compute_capability:f} are: "
                        + ", ".join(str(i) for i in gpus.ids)
                    )
        elif group.kind == ModelInstanceGroup.KIND_CPU:
            if len(group.gpus) > 0:
                raise ConfigError(f"{prefix} has kind KIND_CPU but specifies one or more GPUs")
        else:
            raise ConfigError(f"{prefix} has unexpected kind KIND_AUTO")
        if len(group.profile) > 0 and cfg.platform != _TENSORRT_PLATFORM:
            raise ConfigError(
                f"{prefix} and platform {cfg.platform}specifies profile field which is only "
                "supported for TensorRT models"
            )


def instance_placements(cfg: ModelConfig) -> list[InstancePlacement]:
    """Every instance of a normalized, validated config, in Triton's creation order."""
    out: list[InstancePlacement] = []
    for group in cfg.instance_group:
        kind = _KIND_NAMES.get(group.kind, "CPU")
        devices = list(group.gpus) if group.kind == ModelInstanceGroup.KIND_GPU else [0]
        for c in range(max(1, int(group.count))):
            name = f"{group.name}_{c}"
            for device in devices:
                key = f"{name}_gpu{device}" if len(devices) > 1 else name
                out.append(InstancePlacement(name, kind, device, key))
    return out
