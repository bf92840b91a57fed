"""The machine's NVIDIA GPUs, found through the CUDA runtime and NVML when they are installed.

Both are optional (``pip install modelyard[gpu]``: ``cuda-python`` and ``nvidia-ml-py``).
Device ids are the CUDA runtime's ordinals, what ``cuda:<n>`` and a model's
``model_instance_device_id`` mean; ``CUDA_VISIBLE_DEVICES`` is honoured as the user set it
and never changed. The runtime is asked first (Triton's ``cudaGetDeviceCount`` and
``cudaGetDeviceProperties``); NVML answers when cuda-python is missing or older drivers
refuse its runtime, with ``CUDA_VISIBLE_DEVICES`` applied to NVML's order by hand. No
library, no driver or no device: no GPUs, and every message is the one modelyard gives on a
machine without them. What was found, or why nothing was, is kept for ``tests/gpu`` and the
log.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from modelyard.config.placement import (
    DEFAULT_MIN_COMPUTE_CAPABILITY,
    SupportedGpus,
    meets_compute_capability,
)

__all__ = [
    "Discovery",
    "GpuDevice",
    "cuda_bindings",
    "discover_gpus",
    "supported_gpus",
    "visible_devices",
]

log = logging.getLogger("modelyard.devices")

# cudaError_t values Triton reads as "no GPUs" rather than as a failure (GetSupportedGPUs).
_CUDA_SUCCESS = 0
_CUDA_INSUFFICIENT_DRIVER = 35
_CUDA_NO_DEVICE = 100
# A Linux machine whose NVIDIA driver is loaded has one of these: the driver's control node,
# WSL 2's GPU node, or Tegra's (Jetson) memory node. Without any, there is nothing for CUDA
# or NVML to find, and importing their bindings (0.1 s of every server's start) is skipped.
_DRIVER_NODES = ("/dev/nvidiactl", "/dev/dxg", "/dev/nvmap")
# cuda-python >= 12.6 names them cuda.bindings.<part>; older releases cuda.cudart and cuda.cuda.
_BINDINGS = {
    "runtime": ("cuda.bindings.runtime", "cuda.cudart"),
    "driver": ("cuda.bindings.driver", "cuda.cuda"),
}


@dataclass(frozen=True)
class GpuDevice:
    """One GPU: its CUDA device id, name, compute capability, memory (bytes) and UUID."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    total_memory: int
    uuid: str = ""


@dataclass(frozen=True)
class Discovery:
    """What was found (``devices``, by whom: ``source`` is ``cuda-runtime`` or ``nvml``), or
    why nothing was (``reason``, naming the missing library, driver or device)."""

    devices: tuple[GpuDevice, ...] = ()
    source: str = ""
    reason: str = ""


def supported_gpus(
    min_compute_capability: float = DEFAULT_MIN_COMPUTE_CAPABILITY,
    devices: Sequence[GpuDevice] | None = None,
) -> SupportedGpus:
    """The ids of ``devices`` (default: this machine's) at or above the minimum compute
    capability, as Triton's ``GetSupportedGPUs`` chooses them."""
    found = discover_gpus().devices if devices is None else devices
    ids = tuple(
        sorted(
            d.index
            for d in found
            if meets_compute_capability(*d.compute_capability, min_compute_capability)
        )
    )
    return SupportedGpus(ids, min_compute_capability)


@functools.cache
def discover_gpus() -> Discovery:
    """This process's GPUs, asked once (neither library sees devices come and go)."""
    if sys.platform == "linux" and not any(os.path.exists(n) for n in _DRIVER_NODES):
        return Discovery(reason="no NVIDIA driver (none of " + ", ".join(_DRIVER_NODES) + ")")
    runtime = _from_cuda_runtime()
    if runtime.devices or runtime.source:
        found = runtime
    else:
        nvml = _from_nvml()
        found = nvml if nvml.devices else Discovery(reason=_why_none(runtime, nvml))
    for d in found.devices:
        log.info(
            "GPU %d: %s, compute capability %d.%d, %d MiB (%s)",
            d.index,
            d.name,
            *d.compute_capability,
            d.total_memory >> 20,
            found.source,
        )
    if not found.devices:
        log.debug("no GPUs: %s", found.reason)
    return found


def _why_none(runtime: Discovery, nvml: Discovery) -> str:
    # The most specific of the two reasons: a missing driver or device beats a missing library.
    for reason in (nvml.reason, runtime.reason):
        if "library" not in reason:
            return reason
    return "neither cuda-python nor nvidia-ml-py is installed (pip install modelyard[gpu])"


def cuda_bindings(part: str) -> Any:
    """cuda-python's ``"runtime"`` or ``"driver"`` bindings, or None when cuda-python is not
    installed. Importing them is what costs, so a caller asks :func:`discover_gpus` first."""
    for name in _BINDINGS[part]:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _runtime_module() -> Any:
    return cuda_bindings("runtime")


def _from_cuda_runtime() -> Discovery:
    """The runtime's devices. ``source`` is set when its answer is final (devices, or the
    runtime saying there are none); otherwise NVML is asked."""
    rt = _runtime_module()
    if rt is None:
        return Discovery(reason="cuda-python is not installed (no CUDA runtime library)")
    try:
        err, count = rt.cudaGetDeviceCount()
        code = int(err)
        if code == _CUDA_NO_DEVICE:
            return Discovery(source="cuda-runtime", reason="the CUDA runtime found no GPU")
        if code == _CUDA_INSUFFICIENT_DRIVER:
            return Discovery(reason="no NVIDIA driver, or one older than cuda-python's runtime")
        if code != _CUDA_SUCCESS:
            log.warning("unable to get number of CUDA devices: %s", err)
            return Discovery(reason=f"unable to get number of CUDA devices: {err}")
        devices = []
        for index in range(int(count)):
            err, props = rt.cudaGetDeviceProperties(index)
            if int(err) != _CUDA_SUCCESS:
                log.warning("unable to get CUDA device properties for GPU ID%d: %s", index, err)
                continue
            devices.append(
                GpuDevice(
                    index=index,
                    name=_text(props.name),
                    compute_capability=(int(props.major), int(props.minor)),
                    total_memory=int(props.totalGlobalMem),
                    uuid=_uuid(props.uuid),
                )
            )
    except Exception as e:  # a broken installation: no GPUs, and say why
        log.warning("the CUDA runtime could not list GPUs: %s", e)
        return Discovery(reason=f"the CUDA runtime could not list GPUs: {e}")
    reason = "" if devices else "the CUDA runtime found no GPU"
    return Discovery(tuple(devices), "cuda-runtime", reason)


def _from_nvml() -> Discovery:
    try:
        import pynvml
    except ImportError:
        return Discovery(reason="nvidia-ml-py is not installed (no NVML library)")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        missing = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        if getattr(e, "value", None) in missing:
            return Discovery(reason=f"no NVIDIA driver (NVML: {e})")
        return Discovery(reason=f"NVML failed: {e}")
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            found.append(
                GpuDevice(
                    index=index,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    compute_capability=(int(major), int(minor)),
                    total_memory=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                )
            )
    except pynvml.NVMLError as e:
        return Discovery(reason=f"NVML failed: {e}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    visible = visible_devices(found, os.environ.get("CUDA_VISIBLE_DEVICES"))
    reason = "" if visible else "NVML found no GPU visible to CUDA"
    return Discovery(tuple(visible), "nvml" if visible else "", reason)


def visible_devices(found: Sequence[GpuDevice], setting: str | None) -> list[GpuDevice]:
    """``found`` (NVML's order) as CUDA numbers them under ``CUDA_VISIBLE_DEVICES``:
    the listed indices or UUID prefixes in the order given, up to the first that names no
    device (as the driver reads it), renumbered from 0."""
    if setting is None:
        return list(found)
    chosen: list[GpuDevice] = []
    for item in (s.strip() for s in setting.split(",")):
        match = None
        if item.isdigit():
            match = next((d for d in found if d.index == int(item)), None)
        elif item.startswith("GPU-"):
            candidates = [d for d in found if d.uuid.startswith(item)]
            match = candidates[0] if len(candidates) == 1 else None
        if match is None or match in chosen:
            break
        chosen.append(match)
    return [
        GpuDevice(i, d.name, d.compute_capability, d.total_memory, d.uuid)
        for i, d in enumerate(chosen)
    ]


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value)


def _uuid(value: Any) -> str:
    raw = getattr(value, "bytes", value)
    if not isinstance(raw, bytes) or len(raw) < 16:
        return ""
    h = raw[:16].hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
