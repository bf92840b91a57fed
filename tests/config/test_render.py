"""Rendering: Triton's /config JSON bytes and model metadata.

``data/triton251/<model>/`` holds a config.pbtxt and what the reference Triton 2.51 answered for
it: ``expected_config.json`` (GET /v2/models/<model>/config) and ``expected_metadata.json``
(GET /v2/models/<model>). The configs are shared/bench's models plus probes of every part of
the format (batching, sequences, floats, maps, oneofs, warmup, ensembles, ...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config import (
    config_to_dict,
    config_to_json,
    load_config_file,
    model_metadata,
    normalize_config,
    parse_config_text,
)
from modelyard.config.render import _rapidjson_double

DATA = Path(__file__).parent / "data" / "triton251"
CASES = sorted(p.name for p in DATA.iterdir() if p.is_dir())
# Map fields: Triton prints map entries in protobuf's hash order, which changes between runs.
MAP_FIELDS = {"parameters", "metric_tags", "cc_model_filenames", "priority_queue_policy"}


def served_config(name: str, tmp_path: Path) -> ModelConfig:
    """The config modelyard serves for data/triton251/<name> (Triton's model folders also held
    1/model.py, which is how folders without a backend were found to be Python models)."""
    d = tmp_path / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text("")
    path = DATA / name / "config.pbtxt"
    cfg = load_config_file(path) if path.exists() else ModelConfig()
    cfg = normalize_config(cfg, name, model_dir=d)
    if cfg.platform == "ensemble":
        # Set by the ensemble loader from its steps (none of them is decoupled here).
        cfg.model_transaction_policy.decoupled = False
    return cfg


def sort_maps(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        if key in MAP_FIELDS:
            items = sorted(items, key=lambda kv: int(kv[0]) if kv[0].isdigit() else kv[0])
        return {k: sort_maps(v, k) for k, v in items}
    if isinstance(value, list):
        return [sort_maps(v) for v in value]
    return value


@pytest.mark.parametrize("name", CASES)
def test_config_json_is_tritons_bytes(name: str, tmp_path: Path) -> None:
    expected = (DATA / name / "expected_config.json").read_text()
    ours = config_to_json(served_config(name, tmp_path))
    if name == "p_dyn_full":  # several multi-entry maps: compare with entries in key order
        canonical = sort_maps(json.loads(expected))
        expected = json.dumps(canonical, separators=(",", ":"), ensure_ascii=False)
    assert ours == expected


@pytest.mark.parametrize("name", CASES)
def test_config_dict_is_the_parsed_json(name: str, tmp_path: Path) -> None:
    cfg = served_config(name, tmp_path)
    assert config_to_dict(cfg) == json.loads(config_to_json(cfg))


@pytest.mark.parametrize(
    "name", [n for n in CASES if (DATA / n / "expected_metadata.json").exists()]
)
def test_metadata_is_tritons(name: str, tmp_path: Path) -> None:
    expected = json.loads((DATA / name / "expected_metadata.json").read_text())
    ours = model_metadata(served_config(name, tmp_path), expected["versions"])
    assert json.dumps(ours, separators=(",", ":")) == json.dumps(expected, separators=(",", ":"))


# The real example of protocol.md §8.3 (observed on 2.51); "..." elides input/output details.
EXAMPLE_HEAD = (
    '{"name":"batched","platform":"","backend":"python","runtime":"","version_policy":'
    '{"specific":{"versions":[1]}},"max_batch_size":8,"input":[{"name":"INPUT0","data_type":'
    '"TYPE_FP32","format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,'
    '"allow_ragged_batch":false,"optional":false,"is_non_linear_format_io":false}],'
)
EXAMPLE_TAIL = (
    ',"dynamic_batching":{"preferred_batch_size":[2,4],"max_queue_delay_microseconds":100,'
    '"preserve_ordering":false,"priority_levels":0,"default_priority_level":0,'
    '"default_queue_policy":{"timeout_action":"DELAY","default_timeout_microseconds":5000000,'
    '"allow_timeout_override":false,"max_queue_size":0},"priority_queue_policy":{}},'
    '"instance_group":[{"name":"batched_0","kind":"KIND_CPU","count":2,"gpus":[],'
    '"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],'
    '"default_model_filename":"model.py","cc_model_filenames":{},"metric_tags":{},'
    '"parameters":{"foo":{"string_value":"bar"}},"model_warmup":[]}'
)
EXAMPLE_PBTXT = """
name: "batched"
backend: "python"
max_batch_size: 8
version_policy: { specific: { versions: [1] } }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching {
  preferred_batch_size: [ 2, 4 ]
  max_queue_delay_microseconds: 100
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000000 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "foo" value: { string_value: "bar" } }
"""


def test_protocol_md_example_byte_for_byte() -> None:
    cfg = normalize_config(parse_config_text(EXAMPLE_PBTXT, "config.pbtxt"), "batched")
    ours = config_to_json(cfg)
    assert ours.startswith(EXAMPLE_HEAD)
    assert ours.endswith(EXAMPLE_TAIL)
    # The full body, as 2.51 returned it for this config.pbtxt:
    assert ours == (DATA / "batched" / "expected_config.json").read_text()


def test_empty_config_renders_as_empty_body() -> None:
    assert config_to_json(ModelConfig()) == ""
    assert config_to_dict(ModelConfig()) == {}


def test_int64_fields_numbers_or_strings_as_triton(tmp_path: Path) -> None:
    cfg = served_config("p_seq_oldest", tmp_path)
    d = config_to_dict(cfg)
    state = d["sequence_batching"]["state"][0]
    assert state["dims"] == [-1, 2]
    assert state["initial_state"][0]["dims"] == ["1", "2"]  # Triton's lookup bug, kept
    assert list(state["initial_state"][0])[-1] == "zero_data"  # scalar oneof member last
    sec = config_to_dict(served_config("p_secondary", tmp_path))
    assert sec["instance_group"][0]["secondary_devices"][0]["device_id"] == "3"
    spec = config_to_dict(served_config("q_graphspec", tmp_path))["optimization"]["cuda"][
        "graph_spec"
    ][0]
    assert spec["input"]["IN"]["dim"] == ["4", "5"]


def test_unset_messages_are_omitted_and_scalars_always_printed(tmp_path: Path) -> None:
    d = config_to_dict(served_config("add_sub", tmp_path))
    assert "dynamic_batching" not in d and "model_transaction_policy" not in d
    assert d["instance_group"][0]["host_policy"] == ""
    assert d["output"][0]["label_filename"] == ""


def test_newer_fields_are_written_only_when_set() -> None:
    # ensemble_scheduling.max_inflight_requests and model_metrics postdate 2.51.
    text = (
        'platform: "ensemble" ensemble_scheduling { step [{ model_name: "a" '
        'input_map { key: "i" value: "X" } output_map { key: "o" value: "Y" } }] %s }'
    )
    plain = config_to_dict(parse_config_text(text % "", "c"))
    assert "max_inflight_requests" not in plain["ensemble_scheduling"]
    assert "model_metrics" not in plain
    limited = config_to_dict(parse_config_text(text % "max_inflight_requests: 3", "c"))
    assert limited["ensemble_scheduling"]["max_inflight_requests"] == 3


def test_maps_are_written_in_key_order() -> None:
    cfg = parse_config_text(
        'parameters { key: "z" value {} } parameters { key: "a" value {} } '
        "dynamic_batching { priority_queue_policy { key: 10 value {} } "
        "priority_queue_policy { key: 2 value {} } }",
        "c",
    )
    d = config_to_dict(cfg)
    assert list(d["parameters"]) == ["a", "z"]
    assert list(d["dynamic_batching"]["priority_queue_policy"]) == ["2", "10"]


def test_strings_are_escaped_as_rapidjson_does() -> None:
    cfg = ModelConfig(name='q"\\/é\t\x01\x7f<>')
    assert config_to_json(cfg).startswith('{"name":"q\\"\\\\/é\\t\\u0001\x7f<>",')


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"), (0.5, "0.5"), (-3.25, "-3.25"), (1e-6, "0.000001"), (1e-7, "1e-7"),
        (2.5e20, "250000000000000000000.0"), (1e21, "1e21"), (123.0, "123.0"),
        (1.5e-300, "1.5e-300"), (0.0, "0.0"), (-0.0, "-0.0"), (1234.5678, "1234.5678"),
    ],
)  # fmt: skip
def test_rapidjson_double_format(value: float, text: str) -> None:
    assert _rapidjson_double(value) == text


def test_float_fields_as_triton_prints_them(tmp_path: Path) -> None:
    # Observed on 2.51 (data/triton251/p_seq_float): float32 values go through protobuf's
    # SimpleFtoa and then rapidjson.
    sb = config_to_dict(served_config("p_seq_float", tmp_path))["sequence_batching"]
    controls = {c["name"]: c["control"][0]["fp32_false_true"] for c in sb["control_input"]}
    assert controls == {
        "START": [1000000.0, 0.000001],
        "END": [1e-7, 123456792],
        "READY": [2.5e20, -3.25],
    }
    assert sb["direct"]["minimum_slot_utilization"] == 0.1


def test_metadata_shapes_and_names() -> None:
    cfg = parse_config_text(
        'name: "m" backend: "python" max_batch_size: 4 '
        'input [{name: "S" data_type: TYPE_STRING dims: [-1]}] '
        'output [{name: "B" data_type: TYPE_BF16 dims: [2, 3]}]',
        "c",
    )
    assert model_metadata(cfg, ["1", "3"]) == {
        "name": "m",
        "versions": ["1", "3"],
        "platform": "python",
        "inputs": [{"name": "S", "datatype": "BYTES", "shape": [-1, -1]}],
        "outputs": [{"name": "B", "datatype": "BF16", "shape": [-1, 2, 3]}],
    }
    cfg.max_batch_size = 0
    cfg.platform = "onnxruntime_onnx"
    meta = model_metadata(cfg, [])
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"][0]["shape"] == [-1]
    assert list(meta) == ["name", "versions", "platform", "inputs", "outputs"]
