"""Model files written against pb_utils import and run without a server (unit-testable)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_python_backend_utils as pb

from .fakes import FakeRuntime, RecordingDeliver

MODELS = Path(__file__).parent / "models"


def _load(name: str) -> Any:
    path = MODELS / name / "1" / "model.py"
    spec = importlib.util.spec_from_file_location(f"pbtest_{name}_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(name: str, config: dict[str, Any]) -> dict[str, str]:
    return {
        "model_config": json.dumps(config),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{name}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(MODELS / name),
        "model_version": "1",
        "model_name": name,
    }


def _add_sub_config() -> dict[str, Any]:
    mc = pb.ModelConfig(
        json.dumps({"name": "add_sub", "max_batch_size": 0, "input": [], "output": []})
    )
    completed = _load("add_sub").TritonPythonModel.auto_complete_config(mc)
    assert isinstance(completed, pb.ModelConfig)
    config: dict[str, Any] = completed.as_dict()
    return config


def _add_sub_model() -> Any:
    model = _load("add_sub").TritonPythonModel()
    model.initialize(_args("add_sub", _add_sub_config()))
    return model


def test_auto_complete_config() -> None:
    config = _add_sub_config()
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert [o["name"] for o in config["output"]] == ["OUTPUT0", "OUTPUT1"]


def test_execute_directly(capsys: pytest.CaptureFixture[str]) -> None:
    model = _add_sub_model()
    assert model.model_dir == str(MODELS / "add_sub" / "1")
    assert "initialized add_sub" in capsys.readouterr().err
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([4, 3, 2, 1], dtype=np.float32)
    good = pb.InferenceRequest(
        inputs=[pb.Tensor("INPUT0", a), pb.Tensor("INPUT1", b)],
        requested_output_names=["OUTPUT0", "OUTPUT1"],
        model_name="add_sub",
    )
    bad = pb.InferenceRequest(
        inputs=[pb.Tensor("INPUT0", a), pb.Tensor("INPUT1", b[:2])],
        requested_output_names=[],
        model_name="add_sub",
    )
    responses = model.execute([good, bad])
    assert len(responses) == 2
    np.testing.assert_array_equal(
        pb.get_output_tensor_by_name(responses[0], "OUTPUT0").as_numpy(), a + b
    )
    np.testing.assert_array_equal(
        pb.get_output_tensor_by_name(responses[0], "OUTPUT1").as_numpy(), a - b
    )
    assert responses[1].has_error()
    assert responses[1].error().message() == "shape mismatch"
    assert responses[1].error().code() == pb.TritonError.INVALID_ARG
    model.finalize()


def _repeat_model() -> Any:
    model = _load("repeat").TritonPythonModel()
    model.initialize(
        _args("repeat", {"name": "repeat", "model_transaction_policy": {"decoupled": True}})
    )
    return model


def _server_request(
    name: str, inputs: list[pb.Tensor], sender: pb.InferenceResponseSender
) -> pb.InferenceRequest:
    return pb.InferenceRequest._from_server(
        request_id="1",
        correlation_id=0,
        model_name=name,
        model_version=1,
        flags=0,
        inputs=inputs,
        requested_output_names=["OUT"],
        parameters=None,
        timeout=0,
        response_sender=sender,
    )


def test_decoupled_model_with_recording_sender() -> None:
    model = _repeat_model()
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=True)
    request = _server_request(
        "repeat", [pb.Tensor("IN", np.array([5, 6, 7], dtype=np.int32))], sender
    )
    assert model.execute([request]) is None
    model.finalize()
    values = [int(r.output_tensors()[0].as_numpy()[0]) for r, _ in deliver.sent[:-1] if r]
    assert values == [5, 6, 7]
    assert deliver.sent[-1] == (None, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_decoupled_model_sees_cancellation() -> None:
    model = _repeat_model()
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=True, is_cancelled=lambda: True)
    request = _server_request("repeat", [pb.Tensor("IN", np.array([1, 2], dtype=np.int32))], sender)
    model.execute([request])
    model.finalize()
    first, _ = deliver.sent[0]
    assert first is not None and first.error().code() == pb.TritonError.CANCELLED
    assert deliver.sent[-1] == (None, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_uninitialized_decoupled_check() -> None:
    model = _load("repeat").TritonPythonModel()
    with pytest.raises(pb.TritonModelException, match="must be decoupled"):
        model.initialize(_args("repeat", {"name": "repeat"}))


class _Models(FakeRuntime):
    """Routes BLS calls to model objects, as a server would (for this test only)."""

    def __init__(self, models: dict[str, Any]) -> None:
        super().__init__()
        self.models = models

    def exec(self, request: pb.InferenceRequest, decoupled: bool) -> Any:
        model = self.models[request.model_name()]
        if not decoupled:
            return model.execute([request])[0]
        deliver = RecordingDeliver()
        done = threading.Event()

        def record(response: pb.InferenceResponse | None, flags: int) -> None:
            deliver(response, flags)
            if flags:
                done.set()

        sender = pb.InferenceResponseSender(record, decoupled=True)
        model.execute([_server_request(request.model_name(), request.inputs(), sender)])
        done.wait(5)
        return iter(r if r is not None else pb.InferenceResponse([]) for r, _ in deliver.sent)


def test_bls_model_against_other_models() -> None:
    runtime = _Models({"repeat": _repeat_model(), "add_sub": _add_sub_model()})
    pb.set_runtime(runtime)
    model = _load("bls_sum").TritonPythonModel()
    request = pb.InferenceRequest(
        inputs=[pb.Tensor("IN", np.array([1, 2, 3], dtype=np.int32))],
        requested_output_names=["OUTPUT0"],
        model_name="bls_sum",
    )
    responses = asyncio.run(model.execute([request]))
    out = pb.get_output_tensor_by_name(responses[0], "OUTPUT0").as_numpy()
    np.testing.assert_array_equal(out, np.full(4, 7, dtype=np.float32))


def test_bls_model_without_server_fails_clearly() -> None:
    model = _load("bls_sum").TritonPythonModel()
    request = pb.InferenceRequest(
        inputs=[pb.Tensor("IN", np.array([1], dtype=np.int32))],
        requested_output_names=[],
        model_name="bls_sum",
    )
    with pytest.raises(pb.TritonModelException, match="needs a running modelyard server"):
        asyncio.run(model.execute([request]))
    assert os.path.isdir(MODELS)
