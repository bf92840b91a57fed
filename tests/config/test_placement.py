"""Instance placement (config/placement.py) with given GPU lists: Triton 2.51's normalization,
validation texts and instance order, and the device discovery's pure parts (devices.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.config import normalize_config, parse_config_text
from modelyard.config.placement import (
    NO_GPUS,
    InstancePlacement,
    SupportedGpus,
    instance_placements,
    meets_compute_capability,
)
from modelyard.devices import GpuDevice, supported_gpus, visible_devices
from modelyard.errors import ConfigError

TWO = SupportedGpus((0, 1))
PYTHON = 'backend: "python"\n'


def placed(text: str, gpus: SupportedGpus = NO_GPUS, name: str = "m") -> list[InstancePlacement]:
    cfg = normalize_config(parse_config_text(PYTHON + text, "config.pbtxt"), name, gpus=gpus)
    return instance_placements(cfg)


def refused(text: str, gpus: SupportedGpus = NO_GPUS) -> str:
    with pytest.raises(ConfigError) as e:
        normalize_config(parse_config_text(PYTHON + text, "config.pbtxt"), "m", gpus=gpus)
    return e.value.message


def test_no_groups_is_one_cpu_instance_without_gpus() -> None:
    assert placed("") == [InstancePlacement("m_0", "CPU", 0, "m_0")]


def test_no_groups_is_one_instance_per_gpu_with_gpus() -> None:
    # The Python backend prefers KIND_GPU; Triton fills in every supported GPU.
    cfg = normalize_config(parse_config_text(PYTHON, "config.pbtxt"), "m", gpus=TWO)
    group = cfg.instance_group[0]
    assert (group.name, group.kind, list(group.gpus), group.count) == ("m", 1, [0, 1], 1)
    assert placed("", TWO) == [
        InstancePlacement("m_0", "GPU", 0, "m_0_gpu0"),
        InstancePlacement("m_0", "GPU", 1, "m_0_gpu1"),
    ]


def test_kind_gpu_without_gpus_listed_takes_every_supported_gpu() -> None:
    text = "instance_group [{ kind: KIND_GPU }]"
    assert [(p.name, p.device_id) for p in placed(text, TWO)] == [("m_0_0", 0), ("m_0_0", 1)]
    assert [p.device_id for p in placed(text, SupportedGpus((3,)))] == [3]


def test_count_is_per_listed_gpu_in_tritons_order() -> None:
    text = "instance_group [{ name: 'g' count: 2 kind: KIND_GPU gpus: [1, 0] }]"
    assert [(p.name, p.kind, p.device_id) for p in placed(text, TWO)] == [
        ("g_0", "GPU", 1),
        ("g_0", "GPU", 0),
        ("g_1", "GPU", 1),
        ("g_1", "GPU", 0),
    ]
    keys = [p.key for p in placed(text, TWO)]
    assert len(set(keys)) == 4


def test_one_gpu_keeps_tritons_name_as_key() -> None:
    text = "instance_group [{ count: 2 kind: KIND_GPU gpus: [1] }]"
    assert placed(text, TWO) == [
        InstancePlacement("m_0_0", "GPU", 1, "m_0_0"),
        InstancePlacement("m_0_1", "GPU", 1, "m_0_1"),
    ]


def test_groups_mixed() -> None:
    text = (
        "instance_group [{ kind: KIND_CPU count: 2 }, { kind: KIND_GPU gpus: [0] },"
        " { kind: KIND_MODEL }]"
    )
    assert [(p.name, p.kind, p.device_id) for p in placed(text, TWO)] == [
        ("m_0_0", "CPU", 0),
        ("m_0_1", "CPU", 0),
        ("m_1_0", "GPU", 0),
        ("m_2_0", "MODEL", 0),
    ]


def test_kind_auto() -> None:
    assert placed("instance_group [{ kind: KIND_AUTO }]")[0].kind == "CPU"
    assert [p.kind for p in placed("instance_group [{ kind: KIND_AUTO }]", TWO)] == ["GPU"] * 2
    assert placed("instance_group [{ kind: KIND_AUTO gpus: [1] }]", TWO)[0].device_id == 1
    # A listed id that is not a supported GPU makes it KIND_CPU, which then refuses the list.
    assert refused("instance_group [{ kind: KIND_AUTO gpus: [5] }]", TWO) == (
        "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs"
    )


def test_kind_gpu_refused_without_gpus_with_todays_texts() -> None:
    assert refused("instance_group [{ kind: KIND_GPU }]") == (
        "instance group m_0 of model m has kind KIND_GPU but no GPUs are available"
    )
    assert refused("instance_group [{ kind: KIND_GPU gpus: [0] }]") == (
        "instance group m_0 of model m specifies invalid or unsupported gpu id 0. GPUs with at "
        "least the minimum required CUDA compute compatibility of 6.000000 are: "
    )


def test_invalid_gpu_id_names_the_supported_ones() -> None:
    gpus = SupportedGpus((0, 1), 7.5)
    assert refused("instance_group [{ name: 'g' kind: KIND_GPU gpus: [0, 2] }]", gpus) == (
        "instance group g of model m specifies invalid or unsupported gpu id 2. GPUs with at "
        "least the minimum required CUDA compute compatibility of 7.500000 are: 0, 1"
    )


def test_gpus_on_cpu_and_model_groups_refused() -> None:
    assert refused("instance_group [{ kind: KIND_CPU gpus: [0] }]", TWO) == (
        "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs"
    )
    assert refused("instance_group [{ kind: KIND_MODEL gpus: [0] }]", TWO) == (
        "instance group m_0 of model m has kind KIND_MODEL but specifies one or more GPUs"
    )


def test_default_counts() -> None:
    onnx = 'backend: "onnxruntime"\ninstance_group [{ kind: KIND_GPU }]'
    cfg = normalize_config(parse_config_text(onnx, "config.pbtxt"), "m", gpus=TWO)
    assert cfg.instance_group[0].count == 1  # two only on CPU
    cpu = normalize_config(parse_config_text('backend: "onnxruntime"', "config.pbtxt"), "m")
    assert cpu.instance_group[0].count == 2


def test_normalizing_twice_changes_nothing() -> None:
    once = normalize_config(parse_config_text(PYTHON, "config.pbtxt"), "m", gpus=TWO)
    assert normalize_config(once, "m", gpus=TWO) == once


@pytest.mark.parametrize(
    ("major", "minor", "minimum", "ok"),
    [(6, 0, 6.0, True), (5, 2, 6.0, False), (8, 0, 6.0, True), (7, 5, 7.5, True),
     (7, 0, 7.5, False), (9, 0, 9.0, True)],
)  # fmt: skip
def test_compute_capability_as_triton_compares_it(
    major: int, minor: int, minimum: float, ok: bool
) -> None:
    assert meets_compute_capability(major, minor, minimum) is ok


def gpu(index: int, cc: tuple[int, int] = (8, 0), uuid: str = "") -> GpuDevice:
    return GpuDevice(index, f"GPU {index}", cc, 1 << 30, uuid or f"GPU-{index:08d}")


def test_supported_gpus_filters_by_compute_capability() -> None:
    devices = [gpu(0, (9, 0)), gpu(1, (5, 2)), gpu(2, (7, 0))]
    assert supported_gpus(6.0, devices) == SupportedGpus((0, 2), 6.0)
    assert supported_gpus(7.5, devices) == SupportedGpus((0,), 7.5)
    assert supported_gpus(6.0, []) == NO_GPUS


def test_cuda_visible_devices_applied_to_nvml_order() -> None:
    found = [gpu(0, uuid="GPU-aaaa"), gpu(1, uuid="GPU-bbbb"), gpu(2, uuid="GPU-cccc")]
    assert visible_devices(found, None) == found
    assert visible_devices(found, "") == []
    picked = visible_devices(found, "2,0")
    assert [(d.index, d.uuid) for d in picked] == [(0, "GPU-cccc"), (1, "GPU-aaaa")]
    assert [d.uuid for d in visible_devices(found, "GPU-bb")] == ["GPU-bbbb"]
    # The driver stops at the first entry that names no device.
    assert [d.uuid for d in visible_devices(found, "1,7,0")] == ["GPU-bbbb"]
    assert visible_devices(found, "-1") == []


def test_no_driver_node_means_no_gpus_without_asking_cuda(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On Linux, a machine without the NVIDIA driver's device nodes has no GPUs: neither
    library is imported to find that out, and the reason names the nodes."""
    import sys

    from modelyard import devices

    if sys.platform != "linux":
        pytest.skip("the device nodes are Linux's")
    monkeypatch.setattr(devices, "_DRIVER_NODES", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setattr(devices, "_runtime_module", lambda: pytest.fail("CUDA was asked"))
    devices.discover_gpus.cache_clear()
    try:
        found = devices.discover_gpus()
    finally:
        devices.discover_gpus.cache_clear()
    assert found.devices == ()
    assert found.reason == f"no NVIDIA driver (none of {tmp_path / 'nvidiactl'})"
