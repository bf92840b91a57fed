"""protocol/model_calls.py: what both execution modes share when calling a model, with
Triton's texts (the worker process and the in-process instance both use these)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import triton_python_backend_utils as pb
from modelyard.backends.python.protocol import model_calls
from modelyard.backends.python.protocol.model_calls import Failure, ResponseStream
from modelyard.devices import discover_gpus
from modelyard.errors import ErrorCode
from modelyard.testing import load_model


def _request(flags: int = 0) -> Any:
    return SimpleNamespace(_release_flags=flags)


def test_initialize_gets_tritons_seven_string_args() -> None:
    m = SimpleNamespace(
        model_name="m",
        version=3,
        model_dir="/r/m",
        model_file="/r/m/3/model.py",
        instance_name="m_0",
        instance_kind="CPU",
        device_id=0,
        config_json="{}",
    )
    assert model_calls.initialize_args(m) == {
        "model_config": "{}",
        "model_instance_kind": "CPU",
        "model_instance_name": "m_0",
        "model_instance_device_id": "0",
        "model_repository": "/r/m",
        "model_version": "3",
        "model_name": "m",
    }


def test_a_module_without_the_class_is_tritons_error() -> None:
    with pytest.raises(Failure) as e:
        model_calls.model_class(SimpleNamespace(), "/r/m/1/model.py")
    assert e.value.code is ErrorCode.INTERNAL
    assert e.value.message == "Python model '/r/m/1/model.py' has no class 'TritonPythonModel'"


def test_auto_complete_must_return_a_model_config() -> None:
    class Bad:
        @staticmethod
        def auto_complete_config(config: Any) -> Any:
            return {}

    with pytest.raises(Failure) as e:
        model_calls.auto_complete(pb, Bad, "m", {"name": "m"})
    assert e.value.message == (
        "auto_complete_config function in model 'm' must return a valid pb.ModelConfig object."
    )
    assert model_calls.auto_complete(pb, None, "m", {"name": "m"}) == {"name": "m"}


@pytest.mark.parametrize(
    ("decoupled", "returned", "text"),
    [
        (
            True,
            [],
            "Python model 'm_0' is using the decoupled mode and the execute function "
            "must return None.",
        ),
        (False, (), "Expected a list in the execute return, found type '<class 'tuple'>'."),
        (
            False,
            [],
            "Number of InferenceResponse objects do not match the number of "
            "InferenceRequest objects. InferenceRequest(s) size is:1, and InferenceResponse(s) "
            "size is:0\n",
        ),
        (
            False,
            [1],
            "Expected an 'InferenceResponse' object in the execute function return "
            "list, found type '<class 'int'>'.",
        ),
    ],
)
def test_what_execute_returned_is_checked_as_triton_checks_it(
    decoupled: bool, returned: Any, text: str
) -> None:
    with pytest.raises(Failure) as e:
        model_calls.check_returned(pb, decoupled, "m_0", [_request()], returned)
    assert e.value.message == text


def test_good_returns_pass() -> None:
    resp = pb.InferenceResponse([])
    assert model_calls.check_returned(pb, False, "m", [_request()], [resp]) == [resp]
    assert model_calls.check_returned(pb, False, "m", [_request()], None) is None
    assert model_calls.check_returned(pb, True, "m", [_request()], None) is None


def test_a_response_for_a_rescheduled_request_is_an_error() -> None:
    with pytest.raises(Failure) as e:
        model_calls.check_returned(pb, False, "m", [_request(2)], [pb.InferenceResponse([])])
    assert "for reschduled request" in e.value.message


def test_an_iterative_model_gets_its_rescheduled_requests_back() -> None:
    requests = [_request(1), _request(2)]
    assert model_calls.release_rescheduled(pb, True, requests) == (1,)
    assert model_calls.release_rescheduled(pb, True, [_request(1)]) == ()


def test_bls_error_responses() -> None:
    timeout = model_calls.timeout_response(pb)
    assert timeout.error().message() == "BLS request timed out waiting for a response"
    assert timeout.error().code() == pb.TritonError.UNAVAILABLE
    assert timeout.parameters() == ""  # as every BLS error response
    assert model_calls.forked_text(os.getpid()) == ""
    forked = model_calls.forked_text(os.getpid() + 1)
    stream = model_calls.forked_response(pb, forked, True)
    (only,) = list(stream)
    assert only.error().code() == pb.TritonError.UNSUPPORTED
    assert model_calls.reply_wait_s(0) == model_calls.DEFAULT_WAIT_S
    assert model_calls.reply_wait_s(2_000_000) == 2.0 + model_calls.TIMEOUT_GRACE_S
    assert model_calls.version_text(-1) == model_calls.version_text(None) == ""


def test_a_stream_ends_with_its_final_response_and_cancels_until_then() -> None:
    replies = iter([("a", False), ("b", True)])
    cancels: list[int] = []
    stream = ResponseStream(lambda: next(replies), lambda: cancels.append(1))
    assert next(stream) == "a"
    stream.cancel()
    assert list(stream) == ["b"]
    stream.cancel()  # ended: nothing left to cancel
    assert cancels == [1]


def test_a_model_without_execute_gets_tritons_error_in_process(tmp_path: Path) -> None:
    """(The worker answers with the same text: stub.py uses no_execute_text too.)"""
    model = tmp_path / "noexec"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    (model / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    with load_model(model) as handle:
        responses = handle.infer({"IN": np.ones(1, np.float32)})
    assert responses.final
    error = responses[0].error()
    assert error is not None
    expected = model_calls.no_execute_text(str(model / "1" / "model.py"))
    assert error.message() == expected
    assert expected.endswith("does not implement `execute` method.")


# -- GPU tensors through BLS: Triton's placement rules --------------------------------------


def test_a_bls_output_goes_where_preferred_memory_says() -> None:
    cpu = pb.PreferredMemory(pb.TRITONSERVER_MEMORY_CPU, 3)
    gpu = pb.PreferredMemory(pb.TRITONSERVER_MEMORY_GPU, 1)
    none = pb.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
    placements = [model_calls.output_placement(p) for p in (none._preferred_memory, cpu, gpu)]
    assert placements == [model_calls.AS_PRODUCED, model_calls.HOST_OUTPUTS, 1]
    # (placement, where the output was made) -> the GPU it goes to, None for host memory
    cases = {
        (model_calls.AS_PRODUCED, None): None,
        (model_calls.AS_PRODUCED, 2): 2,
        (model_calls.HOST_OUTPUTS, 2): None,
        (1, None): 1,
        (1, 0): 1,
    }
    for (placement, made_on), device in cases.items():
        assert model_calls.target_device(placement, made_on) == device


def test_force_cpu_only_input_tensors_takes_yes_or_no() -> None:
    def config(value: str | None) -> dict[str, Any]:
        params = {} if value is None else {model_calls.FORCE_CPU_ONLY: {"string_value": value}}
        return {"parameters": params}

    assert [model_calls.gpu_inputs(config(v)) for v in (None, "yes", "no")] == [
        False,
        False,
        True,
    ]
    with pytest.raises(Failure) as e:
        model_calls.gpu_inputs(config("No"))
    assert (e.value.code, e.value.message) == (
        ErrorCode.UNSUPPORTED,
        "Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: No'",
    )


@pytest.mark.skipif(bool(discover_gpus().devices), reason="this machine has a GPU")
def test_host_tensors_stay_on_the_host_without_a_gpu() -> None:
    # preferred_memory GPU on a machine without one: Triton falls back to CPU memory.
    t = pb.Tensor("x", np.arange(3, dtype=np.float32))
    assert model_calls.placed(t, None) is t
    assert model_calls.placed(t, 0).is_cpu()
