"""Unit tests of the example models, written the way a model author writes them: with
``modelyard.testing``, no server and no ports. Each model runs exactly as the server runs it
(its config, auto-complete, initialize, its scheduler, finalize when the handle closes).

    python -m pytest examples/tests
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from modelyard.testing import LoadError, ModelHandle, Request, load_model

REPO = Path(__file__).resolve().parents[1] / "model_repository"


def _input(request: Any, name: str) -> np.ndarray[Any, Any]:
    """Input ``name`` of a request, as numpy."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    assert tensor is not None, name
    array: np.ndarray[Any, Any] = tensor.as_numpy()
    return array


@pytest.fixture(scope="module")
def add_sub() -> Iterator[ModelHandle]:
    with load_model(REPO / "add_sub") as model:
        yield model


def test_add_sub(add_sub: ModelHandle) -> None:
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([4, 3, 2, 1], np.float32)
    responses = add_sub.infer({"INPUT0": a, "INPUT1": b})
    assert len(responses) == 1 and responses.final
    np.testing.assert_array_equal(responses.output("OUTPUT0"), a + b)
    np.testing.assert_array_equal(responses.output("OUTPUT1"), a - b)


def test_add_sub_sends_only_the_outputs_asked_for(add_sub: ModelHandle) -> None:
    ones = np.ones(4, np.float32)
    [response] = add_sub.infer({"INPUT0": ones, "INPUT1": ones}, requested_outputs=["OUTPUT1"])
    assert [t.name() for t in response.output_tensors()] == ["OUTPUT1"]


def test_add_sub_refuses_what_its_config_does_not_take(add_sub: ModelHandle) -> None:
    # The server's own validation answers, with Triton's text and code, as a client sees it.
    [response] = add_sub.infer({"INPUT0": np.ones(4, np.int32), "INPUT1": np.ones(4, np.int32)})
    assert response.has_error()
    assert response.error().code() == pb_utils.TritonError.INVALID_ARG
    assert "data-type is 'INT32', but model 'add_sub' expects 'FP32'" in response.error().message()


def test_add_sub_batch_of_requests_in_one_execute(add_sub: ModelHandle) -> None:
    batch = [
        {"INPUT0": np.full(4, i, np.float32), "INPUT1": np.ones(4, np.float32)} for i in range(3)
    ]
    results = add_sub.infer_batch(batch)
    assert [r.output("OUTPUT0")[0] for r in results] == [1.0, 2.0, 3.0]


def test_string_upper() -> None:
    with load_model(REPO / "string_upper") as model:
        responses = model.infer({"INPUT0": np.array([b"hello", b"triton"], dtype=object)})
        assert responses.output("OUTPUT0").tolist() == [b"HELLO", b"TRITON"]
        # str arrays travel as UTF-8 bytes, as a client sends them
        assert model.infer({"INPUT0": np.array(["abc"])}).output("OUTPUT0").tolist() == [b"ABC"]


def test_scale_batched_takes_the_scale_from_its_config() -> None:
    with load_model(REPO / "scale_batched") as model:
        assert model.config["parameters"]["scale"]["string_value"] == "2.0"
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(model.infer({"INPUT0": x}).output("OUTPUT0"), x * 2)
        # Three requests in one execute: the model concatenates and splits them.
        rows = [Request({"INPUT0": np.full((n, 4), n, np.float32)}) for n in (1, 2, 3)]
        results = model.infer_batch(rows)
        assert [r.output("OUTPUT0").shape for r in results] == [(1, 4), (2, 4), (3, 4)]
        assert [float(r.output("OUTPUT0")[0, 0]) for r in results] == [2.0, 4.0, 6.0]


def test_scale_batched_with_another_config() -> None:
    config = (REPO / "scale_batched" / "config.pbtxt").read_text()
    config = config.replace('string_value: "2.0"', 'string_value: "-1.5"')
    with load_model(REPO / "scale_batched", config=config) as model:
        np.testing.assert_array_equal(
            model.infer({"INPUT0": np.ones((1, 4), np.float32)}).output("OUTPUT0"),
            np.full((1, 4), -1.5, np.float32),
        )


def test_square_auto_completes_its_config() -> None:
    with load_model(REPO / "square_auto") as model:
        assert [i["name"] for i in model.config["input"]] == ["INPUT0"]
        assert model.config["max_batch_size"] == 4
        x = np.array([[1, 2, 3]], np.int32)
        np.testing.assert_array_equal(model.infer({"INPUT0": x}).output("OUTPUT0"), x * x)


def test_bls_add_sub_calls_the_real_add_sub() -> None:
    # add_sub is loaded from the repository, in this process, on the first call.
    with load_model(REPO / "bls_add_sub", repository=REPO) as model:
        a, b = np.full(4, 5, np.float32), np.full(4, 2, np.float32)
        responses = model.infer({"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(responses.output("OUTPUT0"), a + b)
        np.testing.assert_array_equal(responses.output("OUTPUT1"), a - b)


def test_bls_add_sub_with_a_fake_add_sub() -> None:
    seen: list[list[str]] = []  # what add_sub was asked for

    def fake_add_sub(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        seen.append(sorted(request.requested_output_names()))
        x = _input(request, "INPUT0")
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUTPUT0", x * 10), pb_utils.Tensor("OUTPUT1", x * 0)]
        )

    with load_model(REPO / "bls_add_sub", bls={"add_sub": fake_add_sub}) as model:
        ones = np.ones(4, np.float32)
        responses = model.infer({"INPUT0": ones, "INPUT1": ones})
        np.testing.assert_array_equal(responses.output("OUTPUT0"), ones * 10)
    assert seen == [["OUTPUT0", "OUTPUT1"]]


def test_bls_add_sub_passes_an_error_on() -> None:
    def failing(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        return pb_utils.InferenceResponse(error=pb_utils.TritonError("add_sub is down"))

    with load_model(REPO / "bls_add_sub", bls={"add_sub": failing}) as model:
        ones = np.ones(4, np.float32)
        [response] = model.infer({"INPUT0": ones, "INPUT1": ones})
        assert response.has_error() and response.error().message() == "add_sub is down"


def test_bls_add_sub_alone_gets_an_error_naming_add_sub() -> None:
    with load_model(REPO / "bls_add_sub") as model:
        ones = np.ones(4, np.float32)
        [response] = model.infer({"INPUT0": ones, "INPUT1": ones})
        assert response.has_error()
        assert (
            response.error()
            .message()
            .startswith(
                "Model add_sub - Error when running inference: Failed for execute the "
                "inference request. Model 'add_sub' is not ready."
            )
        )


def test_repeat_streams_its_responses() -> None:
    with load_model(REPO / "repeat") as model:
        responses = model.infer({"COUNT": np.array([3], np.int32)})
        assert responses.final
        assert [int(responses.output("OUT", i)[0]) for i in range(len(responses))] == [0, 1, 2]
        # Zero responses, then the final flag alone.
        none = model.infer({"COUNT": np.array([0], np.int32)})
        assert none.final and len(none) == 0


def test_accumulate_keeps_a_sum_per_sequence() -> None:
    start, end = 1, 2  # Triton's sequence flags
    with load_model(REPO / "accumulate") as model:

        def add(value: int, corrid: int, flags: int = 0) -> int:
            x = np.array([[value]], np.int32)
            responses = model.infer({"VALUE": x}, correlation_id=corrid, flags=flags)
            return int(responses.output("SUM").item())

        assert add(1, 7, start) == 1
        assert add(10, 8, start) == 10
        assert add(2, 7) == 3
        assert add(3, 7, end) == 6
        assert add(5, 8, end) == 15


def test_ensemble_add_sub() -> None:
    with load_model(REPO / "ensemble_add_sub", repository=REPO) as model:
        a, b = np.full(4, 3, np.float32), np.full(4, 1, np.float32)
        responses = model.infer({"INPUT0": a, "INPUT1": b})
        # add_sub gives (4, 2); bls_add_sub of those gives (6, 2)
        np.testing.assert_array_equal(responses.output("OUTPUT0"), np.full(4, 6, np.float32))
        np.testing.assert_array_equal(responses.output("OUTPUT1"), np.full(4, 2, np.float32))


def test_signal_features() -> None:
    with load_model(REPO / "signal_features") as model:
        signal = np.array([1, 2, 3, 4], np.float32)
        features = model.infer({"SIGNAL": signal}).output("FEATURES")
        np.testing.assert_allclose(features, [2.5, signal.std(), 1, 4])
        [empty] = model.infer({"SIGNAL": np.zeros(0, np.float32)})
        assert empty.error().message() == "SIGNAL must hold at least one sample"


def test_signal_classifier_onnx() -> None:
    with load_model(REPO / "signal_classifier") as model:
        scores = model.infer({"FEATURES": np.zeros((1, 4), np.float32)}).output("SCORES")
        assert scores.shape == (1, 3) and abs(float(scores.sum()) - 1.0) < 1e-5


@pytest.mark.parametrize(
    ("signal", "label", "rounds"),
    [
        (np.zeros(16, np.float32), b"low", 1),
        (np.ones(16, np.float32), b"high", 1),
        (np.tile(np.array([1, -1], np.float32), 8), b"low", 2),
        (np.full(16, 0.5, np.float32), b"undecided", 4),
    ],
)
def test_signal_pipeline_with_the_real_models(
    signal: np.ndarray, label: bytes, rounds: int
) -> None:
    with load_model(REPO / "signal_pipeline", repository=REPO) as model:
        responses = model.infer({"SIGNAL": signal})
        assert responses.output("LABEL").tolist() == [label]
        assert int(responses.output("STEPS")[0]) == rounds


def test_signal_pipeline_smooths_until_the_classifier_is_sure() -> None:
    # Fakes stand in for both models it calls: the classifier is unsure twice.
    answers = iter([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [0.1, 0.05, 0.85]])

    def features(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        return pb_utils.InferenceResponse([pb_utils.Tensor("FEATURES", np.zeros(4, np.float32))])

    def classifier(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        scores = np.array([next(answers)], np.float32)
        return pb_utils.InferenceResponse([pb_utils.Tensor("SCORES", scores)])

    fakes = {"signal_features": features, "signal_classifier": classifier}
    with load_model(REPO / "signal_pipeline", bls=fakes) as model:
        responses = model.infer({"SIGNAL": np.ones(8, np.float32)})
        assert responses.output("LABEL").tolist() == [b"high"]
        assert int(responses.output("STEPS")[0]) == 3


def test_a_broken_model_does_not_load(tmp_path: Path) -> None:
    broken = tmp_path / "add_sub"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text((REPO / "add_sub" / "config.pbtxt").read_text())
    source = (REPO / "add_sub" / "1" / "model.py").read_text()
    (broken / "1" / "model.py").write_text(
        source.replace("def execute(self, requests):", "def execute(self, requests)")
    )
    with pytest.raises(LoadError) as failed:
        load_model(broken)
    # Triton's text first, then where: the file, the line and the line itself.
    assert failed.value.reason.startswith("Internal: SyntaxError: expected ':'")
    assert f"{broken / '1' / 'model.py'}(" in failed.value.reason
    assert "    def execute(self, requests)\n" in failed.value.reason


def test_every_example_model_is_tested_here() -> None:
    source = Path(__file__).read_text()
    names = sorted(p.name for p in REPO.iterdir() if (p / "config.pbtxt").is_file())
    assert [n for n in names if f'load_model(REPO / "{n}"' not in source] == []
