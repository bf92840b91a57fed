"""The GPU metrics' pure parts, with a stand-in for NVML (this machine has no GPU; the real
thing is tests/gpu/test_gpu_metrics.py): Triton's families, HELP texts, types, label and
units in the exposition, energy as the increase since the first poll, a value NVML cannot
give left out (and no longer asked for after three failures), the polling thread's start and
stop, and nothing loaded on a machine without GPUs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from modelyard.devices import GpuDevice, discover_gpus
from modelyard.metrics.exposition import render_stats
from modelyard.metrics.gpu_gauges import FAIL_THRESHOLD, GpuReading, GpuSampler, start_gpu_sampler
from modelyard.serving.metrics_settings import MetricsSettings
from modelyard.serving.stats import ModelStats
from tests.helpers import wait_until

A = "GPU-8d1d8b0e-2c3a-4a7f-9e55-0f6a1b2c3d4e"
B = "GPU-11111111-2222-3333-4444-555555555555"
GIB = 1 << 30


class NvmlError(Exception):
    """What the stand-in raises, as pynvml raises NVMLError (NOT_SUPPORTED and the like)."""


@dataclass
class FakeGpu:
    """One GPU as the stand-in reports it, in NVML's units; names in ``failing`` raise."""

    utilization: int = 0  # percent
    total: int = 0  # bytes
    used: int = 0
    power: int = 0  # milliwatts
    limit: int = 0
    energy: int = 0  # millijoules since the driver loaded
    failing: set[str] = field(default_factory=set)


class FakeNvml:
    """The functions GpuSampler calls of pynvml, over FakeGpus found by UUID."""

    def __init__(self, gpus: dict[str, FakeGpu], init_fails: bool = False):
        self.gpus = gpus
        self.init_fails = init_fails
        self.calls: dict[str, int] = {}
        self.open = 0  # nvmlInit calls not yet shut down

    def _value(self, name: str, handle: str) -> FakeGpu:
        self.calls[name] = self.calls.get(name, 0) + 1
        gpu = self.gpus[handle]
        if name in gpu.failing:
            raise NvmlError("Not Supported")
        return gpu

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise NvmlError("Driver Not Loaded")
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.gpus:
            raise NvmlError("Not Found")
        return uuid

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return SimpleNamespace(gpu=self._value("utilization", handle).utilization, memory=3)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        gpu = self._value("memory", handle)
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return self._value("power", handle).power

    def nvmlDeviceGetPowerManagementLimit(self, handle: str) -> int:
        return self._value("limit", handle).limit

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        return self._value("energy", handle).energy


def _devices(*uuids: str) -> list[GpuDevice]:
    return [GpuDevice(i, "NVIDIA H200", (9, 0), 141 * GIB, u) for i, u in enumerate(uuids)]


def _sampler(gpus: dict[str, FakeGpu], *uuids: str) -> tuple[GpuSampler, FakeNvml]:
    nvml = FakeNvml(gpus)
    sampler = GpuSampler(nvml, _devices(*(uuids or tuple(gpus))))
    assert sampler.open()
    return sampler, nvml


def _text(readings: tuple[GpuReading, ...], **settings: Any) -> str:
    return render_stats([], None, MetricsSettings(cpu=False, **settings), readings).decode()


# -- the exposition -------------------------------------------------------------------------


def test_tritons_families_help_types_label_and_units() -> None:
    gpus = {
        A: FakeGpu(57, 150_754_820_096, 549_453_824, 71_234, 700_000, 5_000_000),
        B: FakeGpu(0, 80 * GIB, 0, 30_500, 350_000, 9_000, failing={"power"}),
    }
    sampler, nvml = _sampler(gpus)
    sampler.poll()
    gpus[A].energy += 12_345  # 12.345 J since the first poll
    gpus[B].energy += 1
    sampler.poll()
    assert _text(sampler.current()) == "\n".join(
        [
            "# HELP nv_energy_consumption GPU energy consumption in joules since the Triton "
            "Server started",
            "# TYPE nv_energy_consumption counter",
            f'nv_energy_consumption{{gpu_uuid="{A}"}} 12.345',
            f'nv_energy_consumption{{gpu_uuid="{B}"}} 0.001',
            "# HELP nv_pinned_memory_pool_total_bytes Pinned memory pool total memory size, in bytes",
            "# TYPE nv_pinned_memory_pool_total_bytes gauge",
            "nv_pinned_memory_pool_total_bytes 0",
            "# HELP nv_pinned_memory_pool_used_bytes Pinned memory pool used memory size, in bytes",
            "# TYPE nv_pinned_memory_pool_used_bytes gauge",
            "nv_pinned_memory_pool_used_bytes 0",
            "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
            "# TYPE nv_gpu_utilization gauge",
            f'nv_gpu_utilization{{gpu_uuid="{A}"}} 0.5700000000000001',  # 57 * 0.01, as Triton
            f'nv_gpu_utilization{{gpu_uuid="{B}"}} 0',
            "# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes",
            "# TYPE nv_gpu_memory_total_bytes gauge",
            f'nv_gpu_memory_total_bytes{{gpu_uuid="{A}"}} 150754820096',
            f'nv_gpu_memory_total_bytes{{gpu_uuid="{B}"}} 85899345920',
            "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes",
            "# TYPE nv_gpu_memory_used_bytes gauge",
            f'nv_gpu_memory_used_bytes{{gpu_uuid="{A}"}} 549453824',
            f'nv_gpu_memory_used_bytes{{gpu_uuid="{B}"}} 0',
            "# HELP nv_gpu_power_usage GPU power usage in watts",
            "# TYPE nv_gpu_power_usage gauge",
            # 71234 mW / 1000 at 16 digits, as prometheus-cpp writes it (B's failed: left out)
            f'nv_gpu_power_usage{{gpu_uuid="{A}"}} 71.23399999999999',
            "# HELP nv_gpu_power_limit GPU power management limit in watts",
            "# TYPE nv_gpu_power_limit gauge",
            f'nv_gpu_power_limit{{gpu_uuid="{A}"}} 700',
            f'nv_gpu_power_limit{{gpu_uuid="{B}"}} 350',
            "",
        ]
    )
    assert nvml.open == 1
    sampler.close()
    assert nvml.open == 0


def test_the_gpu_families_sit_where_triton_registers_them() -> None:
    sampler, _ = _sampler({A: FakeGpu(10, GIB, 1, 1, 1, 1)})
    sampler.poll()
    stats = ModelStats("m", "1", cache_enabled=True)
    settings = MetricsSettings()
    text = render_stats([(stats, 0)], None, settings, sampler.current()).decode()
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    # counters (the cache's last, then the energy), then gauges (pinned, GPU, then CPU)
    assert names.index("nv_cache_miss_duration_per_model") + 1 == names.index(
        "nv_energy_consumption"
    )
    assert names.index("nv_energy_consumption") + 1 == names.index(
        "nv_inference_pending_request_count"
    )
    assert names[names.index("nv_pinned_memory_pool_used_bytes") + 1 :] == [
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
    ]


def test_no_gpu_families_without_allow_gpu_metrics_or_readings() -> None:
    sampler, _ = _sampler({A: FakeGpu(10, GIB, 1, 1, 1, 1)})
    assert _text(sampler.current()) == _text(())  # before the first poll: none
    sampler.poll()
    assert "nv_gpu" in _text(sampler.current())
    assert _text(sampler.current(), gpu=False) == _text(())
    assert "gpu" not in _text(()) and "energy" not in _text(())


# -- what NVML cannot give ------------------------------------------------------------------


def test_a_failing_value_is_left_out_and_no_longer_asked_after_three_failures() -> None:
    gpu = FakeGpu(5, GIB, 1, 2_000, 3_000, 7, failing={"memory", "energy"})
    sampler, nvml = _sampler({A: gpu})
    for _ in range(FAIL_THRESHOLD + 2):
        sampler.poll()
    [reading] = sampler.current()
    assert reading == GpuReading(A, utilization=0.05, power_usage=2.0, power_limit=3.0)
    text = _text(sampler.current())
    assert "nv_gpu_memory" not in text and "nv_energy_consumption" not in text
    assert f'nv_gpu_power_usage{{gpu_uuid="{A}"}} 2' in text.splitlines()
    assert nvml.calls["memory"] == FAIL_THRESHOLD == nvml.calls["energy"]
    assert nvml.calls["utilization"] == FAIL_THRESHOLD + 2


def test_an_answer_that_is_not_a_number_loses_that_value_only() -> None:
    nvml = FakeNvml({A: FakeGpu(5, GIB, 1, 2_000, 3_000, 7)})
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: SimpleNamespace(total=GIB)  # type: ignore[method-assign]
    sampler = GpuSampler(nvml, _devices(A))
    assert sampler.open()
    sampler.poll()
    assert sampler.current() == (
        GpuReading(A, utilization=0.05, power_usage=2.0, power_limit=3.0, energy=0.0),
    )


def test_a_passing_failure_resets_the_count() -> None:
    gpu = FakeGpu(5, GIB, 1, 2_000, 3_000, 7)
    sampler, nvml = _sampler({A: gpu})
    for _ in range(3):
        for failing in ({"power"}, {"power"}, set()):  # two failures, then a success
            gpu.failing = failing
            sampler.poll()
            assert (sampler.current()[0].power_usage is None) == bool(failing)
    assert nvml.calls["power"] == 9


def test_a_gpu_nvml_cannot_find_is_skipped_and_no_gpu_closes_nvml() -> None:
    nvml = FakeNvml({A: FakeGpu(1, GIB, 1, 1, 1, 1)})
    sampler = GpuSampler(nvml, [*_devices(B, A), GpuDevice(2, "no uuid", (9, 0), GIB)])
    assert sampler.open()
    sampler.poll()
    assert [r.uuid for r in sampler.current()] == [A]
    lost = FakeNvml({})
    assert not GpuSampler(lost, _devices(A)).open()
    assert lost.open == 0  # opened, then shut down again
    broken = GpuSampler(FakeNvml({A: FakeGpu()}, init_fails=True), _devices(A))
    assert not broken.open()
    broken.poll()
    assert broken.current() == ()


# -- energy ---------------------------------------------------------------------------------


def test_energy_counts_the_increase_since_the_first_poll_and_never_goes_down() -> None:
    gpu = FakeGpu(energy=987_654_321)  # since the driver loaded: not this server's
    sampler, _ = _sampler({A: gpu})
    seen = []
    for step in (0, 1_500, 2_500, -10_000, 4_000):  # a drop (driver reloaded) adds nothing
        gpu.energy += step
        sampler.poll()
        seen.append(sampler.current()[0].energy)
    assert seen == [0.0, 1.5, 4.0, 4.0, 8.0]


def test_energy_after_failed_reads_counts_from_the_last_good_one() -> None:
    gpu = FakeGpu(energy=1_000)
    sampler, _ = _sampler({A: gpu})
    sampler.poll()
    gpu.failing = {"energy"}
    gpu.energy += 2_000
    sampler.poll()
    assert sampler.current()[0].energy is None
    gpu.failing = set()
    gpu.energy += 1_000
    sampler.poll()
    assert sampler.current()[0].energy == 3.0


# -- the polling thread ---------------------------------------------------------------------


def test_the_thread_polls_on_the_interval_and_stops_with_nvml_closed() -> None:
    nvml = FakeNvml({A: FakeGpu(50, GIB, 1, 1, 1, 1)})
    sampler = GpuSampler(nvml, _devices(A))
    sampler.start(20.0)  # every 10 ms
    try:
        wait_until(lambda: nvml.calls.get("utilization", 0) >= 3, timeout=10.0)
        assert sampler.current()[0].utilization == 0.5
    finally:
        asyncio.run(sampler.stop())
    assert nvml.open == 0  # the thread shut NVML down as it ended: no poll comes after


def test_stopping_a_sampler_whose_nvml_failed_returns_at_once() -> None:
    sampler = GpuSampler(FakeNvml({}, init_fails=True), _devices(A))
    sampler.start(2000.0)
    asyncio.run(asyncio.wait_for(sampler.stop(), 5.0))
    assert sampler.current() == ()


def test_no_sampler_without_gpus_and_nothing_imported() -> None:
    """A machine without GPUs (this one): no sampler, no NVML bindings loaded."""
    code = (
        "import sys\n"
        "from modelyard.devices import discover_gpus\n"
        "from modelyard.metrics.gpu_gauges import start_gpu_sampler\n"
        "assert start_gpu_sampler(discover_gpus().devices, 2000.0) is None\n"
        "assert 'pynvml' not in sys.modules, 'pynvml imported'\n"
    )
    if discover_gpus().devices:
        pytest.skip("this machine has GPUs")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_no_sampler_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if it were not installed
    assert start_gpu_sampler(_devices(A), 2000.0) is None
    assert start_gpu_sampler([GpuDevice(0, "no uuid", (9, 0), GIB)], 2000.0) is None
