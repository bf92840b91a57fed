"""Triton's normalization of a configuration before it is served."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelyard.config import autocomplete_backend_fields, normalize_config, parse_config_text
from modelyard.errors import ConfigError

IO = (
    'input [{name: "IN" data_type: TYPE_FP32 dims: [4]}]\n'
    'output [{name: "OUT" data_type: TYPE_FP32 dims: [4]}]\n'
)


def cfg_of(text: str) -> ModelConfig:
    return parse_config_text(text, "config.pbtxt")


def model_dir(root: Path, name: str, *files: str, dirs: tuple[str, ...] = ()) -> Path:
    """A model directory with version 1 holding ``files`` (empty files) and ``dirs``."""
    d = root / name
    (d / "1").mkdir(parents=True)
    for f in files:
        (d / "1" / f).write_text("")
    for sub in dirs:
        (d / "1" / sub).mkdir()
    return d


def norm(text: str, name: str = "m", path: Path | None = None, **kw: bool) -> ModelConfig:
    return normalize_config(cfg_of(text), name, model_dir=path, **kw)


# --- name, backend, platform, default_model_filename ----------------------------------------


def test_python_model_is_found_by_model_py(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "m", "model.py")
    cfg = norm(IO, path=d)
    assert cfg.name == "m"
    assert cfg.backend == "python"
    assert cfg.platform == ""
    assert cfg.default_model_filename == "model.py"


def test_explicit_python_backend_without_files() -> None:
    cfg = norm('backend: "python"\n' + IO)
    assert (cfg.backend, cfg.default_model_filename) == ("python", "model.py")


def test_default_model_filename_model_py_means_python() -> None:
    assert norm('default_model_filename: "model.py"').backend == "python"


def test_custom_default_model_filename_is_kept() -> None:
    cfg = norm('backend: "python" default_model_filename: "other.py"')
    assert cfg.default_model_filename == "other.py"


def test_name_mismatch_is_triton_error() -> None:
    with pytest.raises(ConfigError) as info:
        norm('name: "other" backend: "python"', name="dir")
    assert info.value.message == (
        "unexpected directory name 'dir' for model 'other', directory name must equal model name"
    )


def test_empty_name_defaults_to_directory() -> None:
    assert norm('name: "" backend: "python"', name="d").name == "d"


@pytest.mark.parametrize(
    ("files", "dirs", "backend", "platform", "filename"),
    [
        (("model.onnx",), (), "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ((), ("model.onnx",), "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        (("model.pt",), (), "pytorch", "pytorch_libtorch", "model.pt"),
        (("model.plan",), (), "tensorrt", "tensorrt_plan", "model.plan"),
        ((), ("model.savedmodel",), "tensorflow", "tensorflow_savedmodel", "model.savedmodel"),
        (("model.graphdef",), (), "tensorflow", "tensorflow_graphdef", "model.graphdef"),
        (("model.xml",), (), "openvino", "", "model.xml"),
        (("model.py", "helper.py"), (), "python", "", "model.py"),
    ],
)
def test_backend_from_model_files(
    tmp_path: Path, files: tuple[str, ...], dirs: tuple[str, ...], backend: str, platform: str,
    filename: str,
) -> None:  # fmt: skip
    d = model_dir(tmp_path, "m", *files, dirs=dirs)
    cfg = cfg_of("")
    autocomplete_backend_fields(cfg, "m", d)
    assert cfg.name == "m"
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == (backend, platform, filename)


def test_only_the_first_version_directory_is_inspected(tmp_path: Path) -> None:
    d = tmp_path / "m"
    (d / "10").mkdir(parents=True)  # "10" sorts before "2", as in Triton
    (d / "2").mkdir()
    (d / "2" / "model.py").write_text("")
    with pytest.raises(ConfigError, match="Could not determine backend for model 'm'"):
        norm("", path=d)


def test_torchscript_directory_is_not_a_model(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "m", dirs=("model.pt",))
    with pytest.raises(ConfigError, match="Could not determine backend"):
        norm("", path=d)


def test_custom_backend_from_model_name(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "m.identity")
    cfg = cfg_of(IO)
    autocomplete_backend_fields(cfg, "m.identity", d)
    assert (cfg.backend, cfg.default_model_filename) == ("identity", "model.identity")


def test_no_backend_found_is_triton_error(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "plain", "weights.bin")
    with pytest.raises(ConfigError) as info:
        norm(IO, name="plain", path=d)
    assert info.value.message == (
        "Invalid model name: Could not determine backend for model 'plain' with no backend in "
        "model configuration. Expected model name of the form 'model.<backend_name>'."
    )


@pytest.mark.parametrize(
    ("text", "backend", "platform", "filename", "count"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime", "onnxruntime_onnx", "model.onnx", 2),
        ('backend: "onnxruntime"', "onnxruntime", "onnxruntime_onnx", "model.onnx", 2),
        ('platform: "pytorch_libtorch"', "pytorch", "pytorch_libtorch", "model.pt", 1),
        ('backend: "pytorch"', "pytorch", "pytorch_libtorch", "model.pt", 1),
        ('backend: "pytorch" runtime: "model.py"', "pytorch", "pytorch_libtorch", "", 1),
        ('platform: "tensorflow_savedmodel"', "tensorflow", "tensorflow_savedmodel",
         "model.savedmodel", 2),
        ('platform: "onnxruntime_onnx" backend: "python"', "python", "onnxruntime_onnx",
         "model.py", 1),
    ],
)  # fmt: skip
def test_platform_backend_mapping(
    text: str, backend: str, platform: str, filename: str, count: int
) -> None:
    cfg = norm(text)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == (backend, platform, filename)
    assert cfg.instance_group[0].count == count  # onnxruntime/tensorflow: 2 on CPU


# --- NormalizeModelConfig ----------------------------------------------------------------------


def test_defaults_of_a_minimal_python_config() -> None:
    cfg = norm('backend: "python"')
    assert cfg.version_policy.WhichOneof("policy_choice") == "latest"
    assert cfg.version_policy.latest.num_versions == 1
    assert cfg.optimization.input_pinned_memory.enable is True
    assert cfg.optimization.output_pinned_memory.enable is True
    assert not cfg.HasField("dynamic_batching")
    assert not cfg.HasField("model_transaction_policy")


def test_explicit_version_policy_is_kept() -> None:
    cfg = norm('backend: "python" version_policy { all {} }')
    assert cfg.version_policy.WhichOneof("policy_choice") == "all"


def test_pinned_memory_setting_is_kept() -> None:
    cfg = norm('backend: "python" optimization { input_pinned_memory { enable: false } }')
    assert cfg.optimization.input_pinned_memory.enable is False
    assert cfg.optimization.output_pinned_memory.enable is True


def test_dynamic_batching_preferred_size_defaults_to_max_batch_size() -> None:
    cfg = norm('backend: "python" max_batch_size: 8 dynamic_batching { }')
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
    kept = norm('backend: "python" max_batch_size: 8 dynamic_batching { preferred_batch_size: 2 }')
    assert list(kept.dynamic_batching.preferred_batch_size) == [2]
    unbatched = norm('backend: "python" dynamic_batching { }')
    assert list(unbatched.dynamic_batching.preferred_batch_size) == []


def test_sequence_batching_defaults() -> None:
    cfg = norm('backend: "python" max_batch_size: 4 sequence_batching { oldest { } }')
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(cfg.sequence_batching.oldest.preferred_batch_size) == [4]
    kept = norm(
        'backend: "python" sequence_batching { max_sequence_idle_microseconds: 5 direct { } }'
    )
    assert kept.sequence_batching.max_sequence_idle_microseconds == 5
    assert not norm('backend: "python" sequence_batching { }').sequence_batching.HasField("direct")


def test_ensemble_gets_no_optimization_and_no_instance_group() -> None:
    cfg = norm(
        'platform: "ensemble" input [{name: "A" data_type: TYPE_FP32 dims: [1]}] '
        'output [{name: "B" data_type: TYPE_FP32 dims: [1]}] '
        'ensemble_scheduling { step [{ model_name: "x" model_version: -1 '
        'input_map { key: "i" value: "A" } output_map { key: "o" value: "B" } }] }'
    )
    assert not cfg.HasField("optimization")
    assert len(cfg.instance_group) == 0
    assert cfg.backend == "" and cfg.default_model_filename == ""


# --- instance groups ------------------------------------------------------------------------


def test_default_instance_group_is_named_after_the_model() -> None:
    (group,) = norm('backend: "python"').instance_group
    assert group.name == "m"
    assert group.kind == ModelInstanceGroup.KIND_CPU
    assert group.count == 1


def test_instance_group_names_kinds_and_counts() -> None:
    cfg = norm(
        'backend: "python" instance_group [{kind: KIND_AUTO count: 0}, {name: "g" count: 3}, '
        "{kind: KIND_CPU count: -3}, {kind: KIND_MODEL}]"
    )
    got = [(g.name, ModelInstanceGroup.Kind.Name(g.kind), g.count) for g in cfg.instance_group]
    assert got == [
        ("m_0", "KIND_CPU", 1),
        ("g", "KIND_CPU", 3),
        ("m_2", "KIND_CPU", 1),
        ("m_3", "KIND_MODEL", 1),
    ]


def test_kind_gpu_is_an_error_naming_the_group() -> None:
    with pytest.raises(ConfigError) as info:
        norm('backend: "python" instance_group [{kind: KIND_GPU}]', name="g")
    assert info.value.message == (
        "instance group g_0 of model g has kind KIND_GPU but no GPUs are available"
    )
    with pytest.raises(ConfigError, match="instance group fast of model g specifies invalid"):
        norm('backend: "python" instance_group [{name: "fast" kind: KIND_GPU gpus: [0]}]', "g")


def test_kind_auto_with_gpus_becomes_cpu_and_is_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        norm('backend: "python" instance_group [{kind: KIND_AUTO gpus: [1]}]', name="a")
    assert info.value.message == (
        "instance group a_0 of model a has kind KIND_CPU but specifies one or more GPUs"
    )


# --- contract ---------------------------------------------------------------------------------


def test_normalize_is_stable_and_does_not_modify_its_argument(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "m", "model.py")
    original = cfg_of(IO + "max_batch_size: 4 dynamic_batching { }")
    snapshot = original.SerializeToString()
    once = normalize_config(original, "m", model_dir=d)
    twice = normalize_config(once, "m", model_dir=d)
    assert original.SerializeToString() == snapshot
    assert once == twice


def test_strict_mode_validates_inputs_and_outputs_at_normalization() -> None:
    text = 'backend: "python" input [{name: "IN" dims: [1]}]'
    norm(text)  # auto-complete may still fill the data type
    with pytest.raises(ConfigError, match="model input 'IN' must specify 'data_type' for m"):
        norm(text, auto_complete=False)


def test_model_level_checks_run_at_normalization() -> None:
    with pytest.raises(ConfigError, match="'max_batch_size' must be non-negative value for m"):
        norm('backend: "python" max_batch_size: -1')
    with pytest.raises(ConfigError, match="unexpected platform type 'python' for m"):
        norm('platform: "python"')
