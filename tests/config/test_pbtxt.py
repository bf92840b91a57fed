"""Reading config.pbtxt (protobuf text format) and JSON configurations."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelInstanceGroup

from modelyard.config import config_from_json, config_from_obj, load_config_file, parse_config_text
from modelyard.errors import ConfigError, ErrorCode


def parse(text: str) -> ModelConfig:
    return parse_config_text(text, "repo/m/config.pbtxt")


def test_key_value_and_block_forms() -> None:
    cfg = parse(
        'name: "m"\nbackend: "python"\nmax_batch_size: 8\n'
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
        "model_transaction_policy: { decoupled: true }\n"
    )
    assert cfg.name == "m" and cfg.backend == "python" and cfg.max_batch_size == 8
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert cfg.model_transaction_policy.decoupled is True


def test_comments_and_list_shorthand_and_optional_commas() -> None:
    cfg = parse(
        "# a comment\n"
        "input [\n"
        '  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },  # trailing comment\n'
        '  { name: "B", data_type: TYPE_INT32, dims: [ 2, 3 ] }\n'
        "]\n"
        'output { name: "C"; data_type: TYPE_STRING; dims: -1 }\n'
    )
    assert [i.name for i in cfg.input] == ["A", "B"]
    assert list(cfg.input[1].dims) == [2, 3]
    assert cfg.output[0].data_type == DataType.TYPE_STRING
    assert list(cfg.output[0].dims) == [-1]


def test_repeated_scalar_repetition_and_angle_brackets() -> None:
    cfg = parse('input < name: "X" data_type: TYPE_FP32 dims: 3 dims: 4 >')
    assert list(cfg.input[0].dims) == [3, 4]


@pytest.mark.parametrize("literal", ["true", "True", "t", "1"])
def test_bool_spellings(literal: str) -> None:
    cfg = parse(f"model_transaction_policy {{ decoupled: {literal} }}")
    assert cfg.model_transaction_policy.decoupled is True


def test_enums_by_name_or_number_and_strings_in_single_quotes() -> None:
    cfg = parse("input [{ name: 'X' data_type: 11 dims: [1] }] instance_group [{ kind: KIND_CPU }]")
    assert cfg.input[0].name == "X"
    assert cfg.input[0].data_type == DataType.TYPE_FP32
    assert cfg.instance_group[0].kind == ModelInstanceGroup.KIND_CPU


def test_maps_parameters_and_sequence_controls() -> None:
    cfg = parse(
        'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/e.tar.gz" } }\n'
        'parameters: [{ key: "b" value { string_value: "2" } }]\n'
        'sequence_batching { control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [0, 1] }] }] }\n"
    )
    ens = parse(
        'ensemble_scheduling { step [{ model_name: "x" model_version: -1 '
        'input_map { key: "IN" value: "E" } output_map { key: "OUT" value: "F" } }] }\n'
    )
    assert cfg.parameters["EXECUTION_ENV_PATH"].string_value.endswith("e.tar.gz")
    assert cfg.parameters["b"].string_value == "2"
    assert list(cfg.sequence_batching.control_input[0].control[0].int32_false_true) == [0, 1]
    assert dict(ens.ensemble_scheduling.step[0].input_map) == {"IN": "E"}


def test_empty_text_is_an_empty_config() -> None:
    assert parse("").ByteSize() == 0
    assert parse("# nothing here\n").ByteSize() == 0


@pytest.mark.parametrize(
    ("text", "where", "detail"),
    [
        ("bogus_field: 1", ":1:1:", 'has no field named "bogus_field"'),
        ('input [{name: "IN"\n  data_type: TYPE_FP33 dims: [4]}]', ":2:14:",
         'Enum type "inference.DataType" has no value named TYPE_FP33'),
        ("max_batch_size: 1 max_batch_size: 2", ":1:", 'multiple "max_batch_size" fields'),
        ('max_batch_size: "a"', ":1:", "Couldn't parse integer"),
        ('input { name: "x" ', ":1:", 'Expected "}"'),
        ("version_policy { latest {} all {} }", ":1:", 'oneof "policy_choice"'),
        ("max_batch_size: 99999999999", ":1:", "Value out of range"),
    ],
)  # fmt: skip
def test_parse_errors_name_file_line_and_field(text: str, where: str, detail: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text)
    message = info.value.message
    assert "repo/m/config.pbtxt" + where in message
    assert detail in message
    assert info.value.code == ErrorCode.INVALID_ARG


def test_load_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m"\nbackend: "python"\n', encoding="utf-8")
    assert load_config_file(path).name == "m"
    assert load_config_file(str(path)).backend == "python"


def test_load_config_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.pbtxt"):
        load_config_file(tmp_path / "missing.pbtxt")
    bad = tmp_path / "bad.pbtxt"
    bad.write_bytes(b'name: "\xff"')
    with pytest.raises(ConfigError, match=r"bad\.pbtxt.*UTF-8"):
        load_config_file(bad)
    unknown = tmp_path / "config.pbtxt"
    unknown.write_text('name: "m"\n\nnot_a_field: 3\n')
    with pytest.raises(ConfigError, match=r"config\.pbtxt:3:1: .*not_a_field"):
        load_config_file(unknown)


# --- JSON (the repository load API's "config" parameter) ------------------------------------


def test_json_enum_names_are_case_insensitive() -> None:
    cfg = config_from_json(
        '{"backend":"python","input":[{"name":"IN","data_type":"type_fp32","dims":[4]},'
        '{"name":"J","data_type":"Type_Int32","dims":["2"]}],"instance_group":[{"kind":"kind_cpu"}],'
        '"dynamic_batching":{"default_queue_policy":{"timeout_action":"delay"}}}'
    )
    assert cfg.input[0].data_type == DataType.TYPE_FP32
    assert cfg.input[1].data_type == DataType.TYPE_INT32
    assert list(cfg.input[1].dims) == [2]
    assert cfg.instance_group[0].kind == ModelInstanceGroup.KIND_CPU
    assert cfg.dynamic_batching.default_queue_policy.timeout_action == 1


def test_json_accepts_camel_case_and_enum_numbers_and_map_keys() -> None:
    cfg = config_from_json(
        '{"maxBatchSize":2,"input":[{"name":"IN","dataType":11,"dims":[4]}],'
        '"dynamic_batching":{"priority_queue_policy":{"3":{"max_queue_size":1}}},'
        '"parameters":{"k":{"string_value":"v"}}}'
    )
    assert cfg.max_batch_size == 2
    assert cfg.input[0].data_type == DataType.TYPE_FP32
    assert cfg.dynamic_batching.priority_queue_policy[3].max_queue_size == 1
    assert cfg.parameters["k"].string_value == "v"


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ('{"backend":"python","bogus":1}', "bogus"),
        ('{"input":[{"name":"IN","data_type":"TYPE_FP33"}]}', "TYPE_FP33"),
        ('{"max_batch_size":"x"}', "max_batch_size"),
        ("{", "JSON"),
        ("[1]", "JSON object"),
    ],
)
def test_json_errors(text: str, detail: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_json(text)
    assert info.value.message.startswith("Invalid config override: ")
    assert detail in info.value.message
    assert "\n" not in info.value.message


def test_config_from_obj_rejects_non_objects() -> None:
    with pytest.raises(ConfigError, match="JSON object"):
        config_from_obj(["x"])
