"""The GPU metrics (``--allow-gpu-metrics``), read through NVML where Triton reads DCGM.

For every GPU ``modelyard.devices`` finds (the CUDA-visible ones, as Triton's), labelled
``gpu_uuid="GPU-..."``, in Triton's units:

- ``nv_gpu_utilization``: NVML's GPU utilization percentage times 0.01 (Triton's
  arithmetic), a fraction of 1;
- ``nv_gpu_memory_total_bytes`` / ``_used_bytes``: NVML's memory info, in bytes (Triton's
  DCGM counts whole MiB);
- ``nv_gpu_power_usage`` / ``nv_gpu_power_limit``: NVML's milliwatts as watts (the power
  management limit, DCGM's ``POWER_MGMT_LIMIT``);
- ``nv_energy_consumption`` (a counter): joules since the first poll after the server
  started, from NVML's millijoules since the driver loaded; a reading below the last one
  (the driver reloaded) adds nothing, as prometheus-cpp ignores a negative increment.

A value NVML cannot give (power on a GPU without a sensor, say) leaves that one series out;
after three failures in a row it is no longer asked for (Triton's ``fail_threshold_``).

NVML calls block, for milliseconds and sometimes more, so they run on a thread of their own:
it opens NVML, polls every half ``--metrics-interval-ms`` (Triton's poll loop), and closes it
when stopped; a scrape reads the last poll. ``pynvml`` is imported only when GPUs were found.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from modelyard.devices import GpuDevice

__all__ = [
    "ENERGY",
    "FAIL_THRESHOLD",
    "GAUGES",
    "GpuReading",
    "GpuSampler",
    "Nvml",
    "start_gpu_sampler",
]

log = logging.getLogger("modelyard")

FAIL_THRESHOLD = 3  # failures in a row after which a value is no longer asked for
STOP_WAIT_S = 5.0  # how long shutdown waits for an NVML call in flight

T = TypeVar("T")


@dataclass(frozen=True)
class GpuReading:
    """One GPU's last poll; None where NVML could not give the value."""

    uuid: str
    utilization: float | None = None  # [0.0, 1.0]
    memory_total: int | None = None  # bytes
    memory_used: int | None = None  # bytes
    power_usage: float | None = None  # watts
    power_limit: float | None = None  # watts
    energy: float | None = None  # joules since the first poll


# Triton 2.51's families (name, HELP text, value), gauges in the order it registers them.
GAUGES: list[tuple[str, str, Callable[[GpuReading], float | None]]] = [
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", lambda r: r.utilization),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", lambda r: r.memory_total),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", lambda r: r.memory_used),
    ("nv_gpu_power_usage", "GPU power usage in watts", lambda r: r.power_usage),
    ("nv_gpu_power_limit", "GPU power management limit in watts", lambda r: r.power_limit),
]
ENERGY = (
    "nv_energy_consumption",
    "GPU energy consumption in joules since the Triton Server started",
)


class Nvml(Protocol):
    """What the sampler calls of ``pynvml`` (the unit tests pass a stand-in)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # .gpu: percent
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # .total, .used: bytes
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # milliwatts
    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int: ...  # milliwatts
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...  # millijoules


@dataclass
class _Gpu:
    """What the poll keeps of one GPU between polls."""

    device: GpuDevice
    handle: Any
    failures: dict[str, int] = field(default_factory=dict)
    energy_last_mj: int | None = None
    energy_mj: int = 0


class GpuSampler:
    """The last NVML readings of ``devices``; :meth:`start` polls them on a thread."""

    def __init__(self, nvml: Nvml, devices: Sequence[GpuDevice]):
        self._nvml = nvml
        self._devices = [d for d in devices if d.uuid]
        self._gpus: list[_Gpu] = []
        self._readings: tuple[GpuReading, ...] = ()
        self._opened = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> tuple[GpuReading, ...]:
        """The last poll's readings, one per GPU being polled (none before the first)."""
        return self._readings

    def open(self) -> bool:
        """Initialize NVML and find each GPU by its UUID; False (NVML closed again) when
        no GPU can be polled."""
        try:
            self._nvml.nvmlInit()
        except Exception as e:  # (pynvml.NVMLError, or the library failing to load)
            log.warning("error initializing NVML, GPU metrics will not be available: %s", e)
            return False
        self._opened = True
        for device in self._devices:
            try:
                handle = self._nvml.nvmlDeviceGetHandleByUUID(device.uuid)
            except Exception as e:
                log.warning("GPU metrics will not be available for device %d: %s", device.index, e)
                continue
            log.info("Collecting metrics for GPU %d: %s", device.index, device.name)
            self._gpus.append(_Gpu(device, handle))
        if not self._gpus:
            self.close()
        return bool(self._gpus)

    def close(self) -> None:
        if self._opened:
            self._opened = False
            try:
                self._nvml.nvmlShutdown()
            except Exception as e:
                log.debug("NVML shutdown: %s", e)

    def poll(self) -> None:
        """Read every GPU once (NVML calls: blocking) and publish the readings."""
        self._readings = tuple(self._read(gpu) for gpu in self._gpus)

    def _read(self, gpu: _Gpu) -> GpuReading:
        # (each value converted inside its call: an odd answer loses that value only)
        nvml, h, ask = self._nvml, gpu.handle, self._ask
        util = ask(gpu, "GPU utilization", lambda: int(nvml.nvmlDeviceGetUtilizationRates(h).gpu))
        memory = ask(gpu, "memory usage", lambda: _memory(nvml.nvmlDeviceGetMemoryInfo(h)))
        usage = ask(gpu, "power usage", lambda: int(nvml.nvmlDeviceGetPowerUsage(h)))
        limit = ask(gpu, "power limit", lambda: int(nvml.nvmlDeviceGetPowerManagementLimit(h)))
        mj = ask(
            gpu, "energy consumption", lambda: int(nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        )
        energy = None
        if mj is not None:
            if gpu.energy_last_mj is not None and mj > gpu.energy_last_mj:
                gpu.energy_mj += mj - gpu.energy_last_mj
            gpu.energy_last_mj = mj
            energy = gpu.energy_mj * 0.001
        return GpuReading(
            uuid=gpu.device.uuid,
            utilization=None if util is None else util * 0.01,  # (Triton's arithmetic)
            memory_total=None if memory is None else memory[0],
            memory_used=None if memory is None else memory[1],
            power_usage=None if usage is None else usage / 1000.0,
            power_limit=None if limit is None else limit / 1000.0,
            energy=energy,
        )

    def _ask(self, gpu: _Gpu, what: str, call: Callable[[], T]) -> T | None:
        """``call()``, or None when it fails or has failed too often in a row."""
        failed = gpu.failures.get(what, 0)
        if failed >= FAIL_THRESHOLD:
            return None
        try:
            value = call()
        except Exception as e:
            gpu.failures[what] = failed + 1
            given_up = "; no longer polled" if failed + 1 >= FAIL_THRESHOLD else ""
            log.warning("Unable to get %s for GPU %d: %s%s", what, gpu.device.index, e, given_up)
            return None
        gpu.failures[what] = 0
        return value

    def start(self, interval_ms: float) -> None:
        """Open NVML and poll at once, then every ``interval_ms / 2``, on a thread of its
        own (daemon: an NVML call that never returns does not hold the process)."""
        self._thread = threading.Thread(
            target=self._run, args=(max(interval_ms, 1.0) / 2000.0,), name="modelyard-gpu-metrics"
        )
        self._thread.daemon = True
        self._thread.start()

    def _run(self, every_s: float) -> None:
        if not self.open():
            return
        try:
            while not self._stop.is_set():
                try:
                    self.poll()
                except Exception:  # (_ask catches NVML's errors: this is a bug; keep the server)
                    log.exception("polling GPU metrics")
                self._stop.wait(every_s)
        finally:
            self.close()

    async def stop(self) -> None:
        """End the polling thread (NVML closed by it) without blocking the event loop."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(thread.join, STOP_WAIT_S)


def _memory(info: Any) -> tuple[int, int]:
    """(total, used) bytes of NVML's memory info."""
    return int(info.total), int(info.used)


def start_gpu_sampler(devices: Sequence[GpuDevice], interval_ms: float) -> GpuSampler | None:
    """A running sampler of ``devices`` (those with a UUID), or None when there are none or
    nvidia-ml-py is not installed (``pip install modelyard[gpu]``)."""
    if not any(d.uuid for d in devices):
        return None
    try:
        import pynvml
    except ImportError:
        log.info("no GPU metrics: nvidia-ml-py is not installed (pip install modelyard[gpu])")
        return None
    sampler = GpuSampler(pynvml, devices)
    sampler.start(interval_ms)
    return sampler
