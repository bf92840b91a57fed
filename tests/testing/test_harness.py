"""``modelyard.testing.load_model``: the test models driven without a server, as the server
runs them (BLS to fakes and to repository models loaded on first use, decoupled models and
their sender threads, async execute, sequences, errors, initialize and finalize), and the
errors compared with what the real server answers a client."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import triton_python_backend_utils as pb_utils
from modelyard.testing import LoadError, ModelHandle, Request, Responses, load_model
from tests.conftest import Serving
from tests.helpers import MODELS, http_input


def _input(request: Any, name: str) -> np.ndarray[Any, Any]:
    """Input ``name`` of a request, as numpy."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    assert tensor is not None, name
    array: np.ndarray[Any, Any] = tensor.as_numpy()
    return array


def _drive(model: ModelHandle, spec: Mapping[str, Any], in0: Any = (1.0, 2.0)) -> dict[str, Any]:
    """Run bls_driver with ``spec``; its RESULT (what the BLS call got)."""
    responses = model.infer(
        {
            "SPEC": np.array([json.dumps(spec).encode()], dtype=object),
            "INPUT0": np.array(in0, np.float32),
        }
    )
    result: dict[str, Any] = json.loads(responses.output("RESULT")[0])
    return result


def _echo_fake(calls: list[Any]) -> Any:
    def fake(request: Any) -> Any:
        calls.append(request)
        x = _input(request, "INPUT0")
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)])

    return fake


# -- BLS --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver() -> Iterator[ModelHandle]:
    calls: list[Any] = []

    def stream(request: Any) -> list[Any]:
        n = int(_input(request, "INPUT0")[0])
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([i], np.float32))])
            for i in range(n)
        ]

    def broken(request: Any) -> Any:
        raise ValueError("the fake broke")

    fakes = {"echo": _echo_fake(calls), "stream": stream, "broken": broken}
    with load_model(MODELS / "bls_driver", repository=MODELS, bls=fakes) as model:
        model.calls = calls  # type: ignore[attr-defined]
        yield model


def test_a_fake_gets_the_request_as_a_model_receives_it(driver: ModelHandle) -> None:
    spec = {"model": "echo", "params": {"p": 1}, "correlation_id": 5, "request_id": "r1"}
    result = _drive(driver, spec, in0=(1.0, 2.0))
    assert result["has_error"] is False
    assert result["outputs"]["OUTPUT0"] == [2.0, 4.0]
    request = driver.calls[-1]  # type: ignore[attr-defined]
    assert request.model_name() == "echo"
    assert json.loads(request.parameters()) == {"p": 1}
    assert (request.correlation_id(), request.request_id()) == (5, "r1")


def test_a_fake_answers_from_a_thread_the_model_starts(driver: ModelHandle) -> None:
    # The thread has no runtime of its own: the harness's process-wide one routes its call.
    result = _drive(driver, {"model": "echo", "how": "thread"}, in0=(3.0,))
    assert result["outputs"]["OUTPUT0"] == [6.0]


def test_a_fake_streams_to_a_decoupled_call(driver: ModelHandle) -> None:
    result = _drive(driver, {"model": "stream", "decoupled": True}, in0=(3.0,))
    assert [r["OUTPUT0"] for r in result["responses"] if r] == [[0.0], [1.0], [2.0]]


def test_a_fake_that_raises_is_an_error_response(driver: ModelHandle) -> None:
    result = _drive(driver, {"model": "broken"})
    assert result["has_error"] is True
    assert result["message"] == "BLS fake for model 'broken' failed: ValueError: the fake broke"


def test_a_call_to_no_model_is_an_error_naming_it(driver: ModelHandle) -> None:
    result = _drive(driver, {"model": "nowhere"})
    assert result["has_error"] is True
    assert result["message"].startswith(
        "Model nowhere - Error when running inference: Failed for execute the inference "
        "request. Model 'nowhere' is not ready. (the test gave no BLS fake"
    )
    decoupled = _drive(driver, {"model": "nowhere", "decoupled": True})
    assert "Model 'nowhere' is not ready." in decoupled["message"]


def test_repository_models_load_on_first_use(driver: ModelHandle) -> None:
    # sync exec (the direct path), a decoupled call and a call with a timeout (the loop):
    # each target loads in-process on its first call, then serves the later ones.
    for _ in range(2):
        result = _drive(driver, {"model": "bls_echo", "outputs": ["OUTPUT0", "META"]}, in0=(7.0,))
        assert result["outputs"]["OUTPUT0"] == [7.0]
        echo_pid = json.loads(result["outputs"]["META"][0])["pid"]
        assert echo_pid == result["pid"] == os.getpid()  # all in this process
    streamed = _drive(driver, {"model": "http_decoupled", "decoupled": True,
                               "inputs": {"COUNT": {"data": [2], "dtype": "int32"}},
                               "outputs": ["OUT"]})  # fmt: skip
    assert [r["OUT"] for r in streamed["responses"] if r] == [[0], [1]]
    timed = _drive(driver, {"model": "py_identity", "timeout": 10_000_000}, in0=(4.0,))
    assert timed["outputs"]["OUTPUT0"] == [4.0], timed


def test_a_repository_model_that_does_not_load_answers_with_the_servers_error(
    driver: ModelHandle,
) -> None:
    result = _drive(driver, {"model": "py_init_error", "inputs": {"IN": {"data": [1.0]}}})
    assert result["has_error"] is True
    # Triton's text for a BLS call to a model that is not ready (it failed to load).
    assert result["message"] == (
        "Model py_init_error - Error when running inference: Failed for execute the inference "
        "request. Model 'py_init_error' is not ready."
    )


def test_async_execute_calls_a_repository_model() -> None:
    with load_model(MODELS / "bls_async_fanout", repository=MODELS) as model:
        out = model.infer({"INPUT0": np.array([1.0], np.float32)}).output("OUTPUT0")
    np.testing.assert_array_equal(out, np.arange(1, 9, dtype=np.float32))


def test_async_execute_calls_a_fake() -> None:
    calls: list[Any] = []
    with load_model(MODELS / "bls_async_fanout", bls={"bls_echo": _echo_fake(calls)}) as model:
        out = model.infer({"INPUT0": np.array([1.0], np.float32)}).output("OUTPUT0")
    np.testing.assert_array_equal(out, 2 * np.arange(1, 9, dtype=np.float32))
    assert len(calls) == 8


def test_async_execute_serves_requests_together() -> None:
    # Both requests wait in execute until the other is there: async execute is concurrent.
    with load_model(MODELS / "bls_async_sleep") as model:
        requests = [
            Request({"INPUT0": np.array([i], np.float32)}, parameters={"together": 2})
            for i in range(2)
        ]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            results = list(
                pool.map(lambda r: model.infer(r.inputs, parameters=r.parameters), requests)
            )
    assert [float(r.output("OUTPUT0")[0]) for r in results] == [0.0, 1.0]


def test_an_async_decoupled_model_with_bls() -> None:
    with load_model(MODELS / "bls_async_decoupled", repository=MODELS) as model:
        responses = model.infer({"IN": np.array([3], np.int32)})
    assert responses.final
    assert [float(responses.output("OUT", i)[0]) for i in range(3)] == [0.0, 1.0, 2.0]


# -- decoupled ------------------------------------------------------------------------------


def test_decoupled_responses_and_the_final_flag() -> None:
    with load_model(MODELS / "http_decoupled") as model:
        responses = model.infer({"COUNT": np.array([3], np.int32)})
        assert responses.final and len(responses) == 3
        assert [r.output_tensors()[1].as_numpy()[0] for r in responses] == [
            b"tok0",
            b"tok1",
            b"tok2",
        ]
        [error] = model.infer({"COUNT": np.array([-1], np.int32)})
        assert error.error().message() == "negative count"


def test_decoupled_responses_from_threads_the_model_starts() -> None:
    script = [
        {"out": 1},
        {"sleep_ms": 20},
        {"out": 2},
        {"error": "halfway", "code": "INVALID_ARG"},
        {"out": 3, "final": True},
    ]
    with load_model(MODELS / "grpc_script") as model:
        responses = model.infer({"SCRIPT": np.array([json.dumps(script).encode()], object)})
        assert responses.final and len(responses) == 4
        assert [int(responses.output("OUT", i)[0]) for i in (0, 1, 3)] == [1, 2, 3]
        assert responses[2].error().message() == "halfway"
        assert responses[2].error().code() == pb_utils.TritonError.INVALID_ARG
        # Several requests at once, each with its thread: every request gets its own stream.
        scripts = [json.dumps([{"out": i}, {"final": True}]).encode() for i in range(3)]
        batch = model.infer_batch([{"SCRIPT": np.array([s], object)} for s in scripts])
        assert [int(r.output("OUT")[0]) for r in batch] == [0, 1, 2]


def test_no_final_response_is_a_timeout() -> None:
    with load_model(MODELS / "grpc_script") as model:
        model.timeout = 0.5  # the model below never ends its stream
        with pytest.raises(TimeoutError, match=r"sent no final response within 0.5 s \(1 res"):
            model.infer({"SCRIPT": np.array([json.dumps([{"out": 1}]).encode()], object)})


def test_a_request_parameter_reaches_the_model() -> None:
    with load_model(MODELS / "stream_until_cancelled") as model:
        responses = model.infer({"IN": np.array([0], np.int32)}, parameters={"max_responses": 4})
    assert responses.final and len(responses) == 4


# -- sequences, batches, instances ---------------------------------------------------------


def test_a_sequence_gets_the_control_inputs_of_its_batcher() -> None:
    start, end = 1, 2
    with load_model(MODELS / "seq_acc") as model:

        def step(value: int, corrid: str, flags: int = 0) -> int:
            x = np.array([[value]], np.int32)
            out = model.infer({"VALUE": x}, correlation_id=corrid, flags=flags).output("ACC")
            return int(out.item())

        assert step(5, "a", start) == 5
        assert step(1, "b", start) == 1
        assert step(5, "a") == 10
        assert step(2, "b", end) == 3
        assert step(5, "a", end) == 15
        # A sequence that never started is refused by the batcher, as the server refuses it.
        [refused] = model.infer({"VALUE": np.array([[1]], np.int32)}, correlation_id="c")
        assert refused.has_error()


def test_initialize_gets_tritons_arguments() -> None:
    with load_model(MODELS / "py_init_args") as model:
        args = json.loads(model.infer({"IN": np.array([1], np.int32)}).output("ARGS")[0])
    assert args["model_name"] == "py_init_args"
    assert args["model_version"] == "1"
    assert args["model_instance_name"] == "py_init_args_0"
    assert (args["model_instance_kind"], args["model_instance_device_id"]) == ("CPU", "0")
    assert args["model_repository"] == str(MODELS / "py_init_args")
    config = json.loads(args["model_config"])
    assert config["parameters"]["custom_key"]["string_value"] == "custom_value"


def test_one_version_of_several(tmp_path: Path) -> None:
    for version in (1, 2):
        with load_model(MODELS / "bls_versioned", version=version) as model:
            assert model.version == version
            out = model.infer({"INPUT0": np.zeros(2, np.float32)}).output("OUTPUT0")
            assert out.tolist() == [version, version]
    with load_model(MODELS / "bls_versioned") as latest:
        assert latest.version == 2


def test_every_instance_is_made() -> None:
    with load_model(MODELS / "py_instances") as model:
        assert [g["count"] for g in model.config["instance_group"]] == [3]
        assert model.infer({"IN": np.array([1.0], np.float32)}).output("PID") == [os.getpid()]


def test_a_batch_larger_than_the_model_takes_is_refused() -> None:
    with load_model(MODELS / "seq_acc") as model:
        rows = [Request({"VALUE": np.ones((3, 1), np.int32)}) for _ in range(2)]
        with pytest.raises(ValueError, match=r"6 items, more than model 'seq_acc' takes"):
            model.infer_batch(rows)


# -- errors, logs, lifetime ---------------------------------------------------------------


def test_errors_come_back_as_the_server_sends_them(serving: Serving) -> None:
    """The same texts and codes through the harness as through the real server."""
    repo = serving.repo(["py_exec_error", "py_identity"])  # the same paths on both sides
    harness: dict[str, Responses] = {}
    with load_model(repo / "py_exec_error") as raising:
        harness["raise"] = raising.infer({"IN": np.ones(1, np.float32)})
    with load_model(repo / "py_identity") as identity:
        harness["dtype"] = identity.infer({"INPUT0": np.ones(2, np.int32)})
    served: dict[str, str] = {}
    with serving.server(repo, mode="in-process", endpoints=("http",)) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        for key, model, array in (
            ("raise", "py_exec_error", np.ones(1, np.float32)),
            ("dtype", "py_identity", np.ones(2, np.int32)),
        ):
            name = "IN" if key == "raise" else "INPUT0"
            with pytest.raises(InferenceServerException) as e:
                client.infer(model, [http_input(name, array)])
            served[key] = e.value.message()
    for key, text in served.items():
        [response] = harness[key]
        assert response.error().message() == text
    assert (
        harness["raise"][0]
        .error()
        .message()
        .startswith(
            "Failed to process the request(s) for model 'py_exec_error_0_0', message: "
            "TritonModelException: model says no"
        )
    )


def test_a_model_that_does_not_load_says_why_as_the_server_does(serving: Serving) -> None:
    repo = serving.repo(["py_init_error"])  # the same paths on both sides
    with pytest.raises(LoadError) as failed:
        load_model(repo / "py_init_error")
    with serving.server(repo, mode="in-process", endpoints=("http",)) as srv:
        index = httpclient.InferenceServerClient(srv.http_url).get_model_repository_index()
    assert failed.value.reason == index[0]["reason"]
    assert failed.value.reason.startswith("Internal: NameError: name 'lorem_ipsum' is not defined")


def test_model_logs_and_finalize(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="modelyard.model")
    logger = logging.getLogger("modelyard")
    propagate, logger.propagate = logger.propagate, True  # (a test may have configured it)
    try:
        with load_model(MODELS / "log_lines") as model:
            model.infer({"TAG": np.array([b"t1"], object)})
        messages = [r.getMessage() for r in caplog.records if r.name == "modelyard.model"]
    finally:
        logger.propagate = propagate
    assert messages[0] == "init-info"
    assert {"t1 info", "t1 warn", "t1 error", "t1 thread"} <= set(messages)
    assert messages[-1] == "fini-info"  # finalize ran when the handle closed
    where = next(r for r in caplog.records if r.getMessage() == "t1 info")
    assert where.pathname == str(MODELS / "log_lines" / "1" / "model.py")


def test_a_closed_handle_refuses_requests() -> None:
    model = load_model(MODELS / "py_identity")
    model.close()
    model.close()  # twice is fine
    with pytest.raises(RuntimeError, match="model 'py_identity' is closed"):
        model.infer({"INPUT0": np.ones(2, np.float32)})


def test_a_config_given_as_a_dict() -> None:
    config = {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
    }
    with load_model(MODELS / "py_identity", config=config) as model:
        assert model.config["input"][0]["dims"] == [2]
        out = model.infer({"INPUT0": np.array([1.0, 2.0], np.float32)}).output("OUTPUT0")
        assert out.tolist() == [1.0, 2.0]
        [refused] = model.infer({"INPUT0": np.ones(3, np.float32)})
        assert "unexpected shape for input 'INPUT0'" in refused.error().message()


def test_a_missing_model_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(LoadError) as e:
        load_model(tmp_path / "no_such_model")
    assert str(e.value) == (
        f"model 'no_such_model' failed to load: there is no model folder {tmp_path}/no_such_model"
    )
