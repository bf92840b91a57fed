"""Auto-complete: the dict a model's auto_complete_config receives, and what Triton keeps of
the dict it returns. ``data/autocomplete/<model>/expected_config.json`` is what Triton 2.51
served after running the auto_complete_config below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config import (
    autocomplete_max_batch_size,
    config_from_autocomplete_dict,
    config_to_autocomplete_dict,
    config_to_json,
    load_config_file,
    merge_autocompleted_config,
    normalize_config,
    parse_config_text,
    validate_config,
)
from modelyard.errors import ConfigError

DATA = Path(__file__).parent / "data" / "autocomplete"


def model_auto_complete(d: dict[str, Any]) -> dict[str, Any]:
    """What the probe model's auto_complete_config did to pb_utils.ModelConfig's dict."""
    d["input"].append({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    d["output"].append({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
    d["max_batch_size"] = 4
    d.setdefault("dynamic_batching", {})
    return d


def served_after_auto_complete(name: str, tmp_path: Path) -> ModelConfig:
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text("")
    path = DATA / name / "config.pbtxt"
    cfg = load_config_file(path) if path.exists() else ModelConfig()
    base = normalize_config(cfg, name, model_dir=model_dir)
    # The backend hands the model this dict, as JSON text, and reads JSON text back.
    sent = json.loads(json.dumps(config_to_autocomplete_dict(base)))
    returned = json.loads(json.dumps(model_auto_complete(sent)))
    completed = config_from_autocomplete_dict(returned, base)
    served = normalize_config(completed, name, model_dir=model_dir)
    validate_config(served)
    return served


@pytest.mark.parametrize("name", ["p_noconfig", "p_autoc_mbs"])
def test_auto_completed_config_is_tritons(name: str, tmp_path: Path) -> None:
    expected = (DATA / name / "expected_config.json").read_text()
    assert config_to_json(served_after_auto_complete(name, tmp_path)) == expected


def test_dict_given_to_auto_complete_config(tmp_path: Path) -> None:
    (tmp_path / "autoc" / "1").mkdir(parents=True)
    (tmp_path / "autoc" / "1" / "model.py").write_text("")
    base = normalize_config(ModelConfig(), "autoc", model_dir=tmp_path / "autoc")
    d = config_to_autocomplete_dict(base)
    # Observed on 2.51 for a model folder without config.pbtxt (research pb_api.md §1.2).
    assert list(d) == [
        "name", "platform", "backend", "runtime", "version_policy", "max_batch_size", "input",
        "output", "batch_input", "batch_output", "optimization", "instance_group",
        "default_model_filename", "cc_model_filenames", "metric_tags", "parameters",
        "model_warmup",
    ]  # fmt: skip
    assert d["name"] == "autoc" and d["backend"] == "python"
    assert d["version_policy"] == {"latest": {"num_versions": 1}}
    assert d["max_batch_size"] == 0 and d["input"] == [] and d["output"] == []
    assert d["instance_group"][0]["name"] == "autoc"
    assert d["instance_group"][0]["kind"] == "KIND_CPU"
    assert d["instance_group"][0]["count"] == 1
    assert d["default_model_filename"] == "model.py"


def test_ints_and_enums_in_the_dict() -> None:
    cfg = parse_config_text(
        'name: "m" max_batch_size: 2 input [{name: "A" data_type: TYPE_STRING dims: [-1, 3]}]', "c"
    )
    d = config_to_autocomplete_dict(cfg)
    assert d["input"][0]["dims"] == [-1, 3]
    assert d["input"][0]["data_type"] == "TYPE_STRING"
    assert config_to_autocomplete_dict(ModelConfig()) == {
        "max_batch_size": 0, "input": [], "output": []
    }  # fmt: skip


BASE = (
    'name: "m" backend: "python" max_batch_size: 2 '
    'parameters { key: "p" value { string_value: "orig" } } '
    'input [{name: "A" data_type: TYPE_FP32 dims: [1]}]'
)


def base_config(extra: str = "") -> ModelConfig:
    return normalize_config(parse_config_text(BASE + extra, "c"), "m")


def test_only_the_fields_a_backend_may_change_are_kept() -> None:
    base = base_config()
    d = config_to_autocomplete_dict(base)
    d["max_batch_size"] = 8
    d["input"] = [{"name": "B", "data_type": "type_int32", "dims": [2]}]  # any enum case
    d["output"] = [{"name": "C", "data_type": "TYPE_BOOL", "dims": [1]}]
    d["parameters"] = {"p": {"string_value": "changed"}}
    d["name"] = "renamed"
    d["model_transaction_policy"] = {"decoupled": True}
    d["sequence_batching"] = {}
    out = config_from_autocomplete_dict(d, base)
    assert out.name == "m"
    assert out.parameters["p"].string_value == "orig"
    assert out.max_batch_size == 8
    assert [i.name for i in out.input] == ["B"] and [o.name for o in out.output] == ["C"]
    assert out.model_transaction_policy.decoupled is True
    assert out.sequence_batching.max_sequence_idle_microseconds == 1_000_000  # re-normalized


def test_without_base_the_dict_is_parsed_as_is() -> None:
    d = config_to_autocomplete_dict(base_config())
    d["name"] = "renamed"
    assert config_from_autocomplete_dict(d).name == "renamed"


def test_scheduling_choice_cannot_change() -> None:
    base = base_config(" dynamic_batching { }")
    d = config_to_autocomplete_dict(base)
    del d["dynamic_batching"]
    d["sequence_batching"] = {}
    with pytest.raises(ConfigError, match="Cannot update scheduling choice from 11 to 13"):
        config_from_autocomplete_dict(d, base)


def test_preferred_batch_size_follows_the_new_max_batch_size() -> None:
    base = normalize_config(parse_config_text('backend: "python" dynamic_batching { }', "c"), "m")
    assert list(base.dynamic_batching.preferred_batch_size) == []
    d = config_to_autocomplete_dict(base)
    d["max_batch_size"] = 16
    out = config_from_autocomplete_dict(d, base)
    assert list(out.dynamic_batching.preferred_batch_size) == [16]


@pytest.mark.parametrize(
    "bad", [{"input": [{"name": "A", "bogus": 1}]}, {"max_batch_size": "many"}, ["not", "a dict"]]
)
def test_invalid_returned_dicts_name_the_model(bad: Any) -> None:
    with pytest.raises(ConfigError, match="auto-complete of model 'm' returned an invalid"):
        config_from_autocomplete_dict(bad, base_config())


def test_merge_does_not_modify_its_arguments() -> None:
    base = base_config()
    updated = ModelConfig(max_batch_size=4)
    snapshot = base.SerializeToString()
    merge_autocompleted_config(base, updated)
    assert base.SerializeToString() == snapshot


def test_autocomplete_max_batch_size_like_onnxruntime() -> None:
    cfg = ModelConfig(name="m")
    autocomplete_max_batch_size(cfg, can_support_batching=True)
    assert cfg.max_batch_size == 4 and cfg.HasField("dynamic_batching")

    one = ModelConfig(name="m")
    autocomplete_max_batch_size(one, can_support_batching=True, default_max_batch_size=1)
    assert one.max_batch_size == 1 and not one.HasField("dynamic_batching")

    seq = parse_config_text("sequence_batching { }", "c")
    autocomplete_max_batch_size(seq, can_support_batching=True, default_max_batch_size=8)
    assert seq.max_batch_size == 8 and not seq.HasField("dynamic_batching")

    kept = ModelConfig(name="m", max_batch_size=2)
    autocomplete_max_batch_size(kept, can_support_batching=True)
    assert kept.max_batch_size == 2

    fixed = ModelConfig(name="m")
    autocomplete_max_batch_size(fixed, can_support_batching=False)
    assert fixed.max_batch_size == 0

    with pytest.raises(ConfigError, match="model does not support batching while non-zero"):
        autocomplete_max_batch_size(kept, can_support_batching=False)
