"""pb_utils.ModelConfig, the auto_complete_config helper, with Triton's ValueError texts."""

from __future__ import annotations

import json
from typing import Any

import pytest

import triton_python_backend_utils as pb


def _config(**fields: Any) -> pb.ModelConfig:
    base: dict[str, Any] = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    base.update(fields)
    return pb.ModelConfig(json.dumps(base))


def test_as_dict_is_live() -> None:
    mc = _config()
    d = mc.as_dict()
    d["max_batch_size"] = 4
    assert mc.as_dict()["max_batch_size"] == 4
    assert pb.ModelConfig({"name": "x"}).as_dict() == {"name": "x"}


def test_set_max_batch_size() -> None:
    mc = _config()
    mc.set_max_batch_size(8)
    assert mc.as_dict()["max_batch_size"] == 8
    mc = _config(max_batch_size=16)
    with pytest.raises(ValueError) as info:
        mc.set_max_batch_size(4)
    assert str(info.value) == (
        "configuration specified max_batch_size 16, but in auto-complete-config function for "
        "model 'm' specified max_batch_size 4"
    )


def test_set_dynamic_batching() -> None:
    mc = _config()
    mc.set_dynamic_batching()
    assert mc.as_dict()["dynamic_batching"] == {}
    mc.as_dict()["dynamic_batching"] = {"max_queue_delay_microseconds": 5}
    mc.set_dynamic_batching()
    assert mc.as_dict()["dynamic_batching"] == {"max_queue_delay_microseconds": 5}
    with pytest.raises(ValueError) as info:
        _config(sequence_batching={}).set_dynamic_batching()
    assert str(info.value) == (
        "Configuration specified scheduling_choice as 'sequence_batching', but "
        "auto-complete-config function for model 'm' tries to set scheduling_choice as "
        "'dynamic_batching'"
    )


def test_add_input_and_output() -> None:
    mc = _config()
    mc.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    mc.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
    assert mc.as_dict()["input"] == [
        {"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True}
    ]
    assert mc.as_dict()["output"] == [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}]
    # an existing entry is updated in place, not duplicated
    mc = _config(input=[{"name": "IN", "data_type": "TYPE_INVALID", "dims": []}])
    mc.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [2]})
    assert mc.as_dict()["input"] == [{"name": "IN", "data_type": "TYPE_INT32", "dims": [2]}]


@pytest.mark.parametrize(
    ("kind", "tensor", "message"),
    [
        (
            "input",
            {"name": "IN", "data_type": "TYPE_FP32", "dims": [1], "format": "x"},
            "input 'IN' in auto-complete-config function for model 'm' contains property other "
            "than 'name', 'data_type', 'dims' and 'optional'.",
        ),
        (
            "output",
            {"name": "OUT", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
            "output 'OUT' in auto-complete-config function for model 'm' contains property "
            "other than 'name', 'data_type' and 'dims'.",
        ),
        (
            "input",
            {"data_type": "TYPE_FP32", "dims": [1]},
            "input in auto-complete-config function for model 'm' is missing 'name' property.",
        ),
        (
            "output",
            {"name": "OUT", "dims": [1]},
            "output 'OUT' in auto-complete-config function for model 'm' is missing "
            "'data_type' property.",
        ),
        (
            "input",
            {"name": "IN", "data_type": "TYPE_FP32"},
            "input 'IN' in auto-complete-config function for model 'm' is missing 'dims' property.",
        ),
    ],
)
def test_add_tensor_property_errors(kind: str, tensor: dict[str, Any], message: str) -> None:
    mc = _config()
    with pytest.raises(ValueError) as info:
        getattr(mc, f"add_{kind}")(tensor)
    assert str(info.value) == message


def test_add_tensor_conflicts() -> None:
    mc = _config(
        input=[{"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": False}],
        output=[{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
    )
    with pytest.raises(ValueError) as info:
        mc.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [4]})
    assert str(info.value) == (
        "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'IN', "
        "model provides TYPE_INT32"
    )
    with pytest.raises(ValueError) as info:
        mc.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2, 2]})
    assert str(info.value) == (
        "model 'm', tensor 'OUT': the model expects dims [2, 2] but the model configuration "
        "specifies dims [4]"
    )
    with pytest.raises(ValueError) as info:
        mc.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    assert str(info.value) == (
        "model 'm', tensor 'IN': the model expects optional True but the model configuration "
        "specifies optional False"
    )


def test_set_model_transaction_policy() -> None:
    mc = _config()
    mc.set_model_transaction_policy({"decoupled": True})
    assert mc.as_dict()["model_transaction_policy"] == {"decoupled": True}
    assert pb.using_decoupled_model_transaction_policy(mc.as_dict())
    mc.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError) as info:
        mc.set_model_transaction_policy({"decoupled": False})
    assert str(info.value) == (
        "trying to change decoupled property in auto-complete-config for model 'm', which is "
        "already set to 'True'."
    )
    with pytest.raises(ValueError) as info:
        mc.set_model_transaction_policy({"streaming": True})
    assert str(info.value) == (
        "model transaction property in auto-complete-config function for model 'm' contains "
        "property other than 'decoupled'."
    )
