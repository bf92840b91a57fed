"""``model_warmup``: samples run on each instance before the model reports ready, the model
sees them, and a failing sample fails the load with Triton's message."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from modelyard.config.pbtxt import parse_config_text
from modelyard.core.warmup import _sample_inputs
from modelyard.errors import InvalidArgument
from tests.conftest import Serving
from tests.helpers import http_input, wait_until
from tests.reference import reference_available, start_reference
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("probe")


@pytest.fixture(scope="module")
def server(serving: Serving, probe_dir: Path) -> Iterator[ServerProcess]:
    with serving.server(None, "--model-control-mode", "explicit",
                        models=["warmup_probe", "warmup_fail", "onnx_add_sub"],
                        env={"WARMUP_PROBE_DIR": str(probe_dir)}) as srv:  # fmt: skip
        yield srv


def test_model_is_not_ready_until_warmup_finished(server: ServerProcess, probe_dir: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            httpclient.InferenceServerClient(server.http_url, network_timeout=60).load_model(
                "warmup_probe"
            )
        except BaseException as e:
            errors.append(e)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        # The first warmup batch runs, and waits for "release".
        wait_until((probe_dir / "warming").exists, what="the warmup to start")
        assert not client.is_model_ready("warmup_probe")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["warmup_probe"]["state"] == "LOADING"
    finally:
        (probe_dir / "release").touch()
    loader.join(30)
    assert not loader.is_alive() and not errors
    assert client.is_model_ready("warmup_probe")

    res = client.infer("warmup_probe", [http_input("X", np.ones((1, 3), np.float32))])
    # 'zeros': 3 runs of a batch of 2 requests; 'from_file': 1 request; 'skipped': batch 0.
    assert res.as_numpy("SEEN")[0, 0] == 7
    batches = json.loads(res.as_numpy("LOG")[0, 0])
    assert batches == [[[[0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]]]] * 3 + [[[[1.5, 2.5, 3.5]]]]


def test_failing_warmup_fails_the_load(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    with pytest.raises(InferenceServerException) as exc:
        client.load_model("warmup_fail")
    expected = "failed to run warmup sample 'boom': warmup refused; "
    assert expected in exc.value.message()
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["warmup_fail"]["state"] == "UNAVAILABLE"
    assert index["warmup_fail"]["reason"] == "Invalid argument: " + expected
    assert not client.is_model_ready("warmup_fail")


def test_onnx_model_warms_up(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    client.load_model("onnx_add_sub")
    assert client.is_model_ready("onnx_add_sub")
    stats = client.get_inference_statistics("onnx_add_sub")["model_stats"][0]
    assert stats["inference_count"] == 0  # warmup is not counted, as in Triton


def _sample(text: str, max_batch_size: int = 0) -> tuple[model_config_pb2.ModelConfig, object]:
    cfg = parse_config_text(
        f'name: "m" max_batch_size: {max_batch_size} '
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ] model_warmup [ { '
        + text
        + " } ]",
        "config.pbtxt",
    )
    return cfg, cfg.model_warmup[0]


def test_sample_errors_are_tritons(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    cfg, s = _sample('name: "v" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 '
                     "dims: [ -1 ] zero_data: true } }")  # fmt: skip
    with pytest.raises(InvalidArgument, match="warmup setting expects all variable-size "
                       "dimensions are specified for input 'X'"):  # fmt: skip
        _sample_inputs(cfg, s, str(tmp_path), rng)
    cfg, s = _sample('name: "t" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 '
                     "dims: [ 2 ] } }")  # fmt: skip
    with pytest.raises(InvalidArgument, match="expects input 'X' to have input_data_type set"):
        _sample_inputs(cfg, s, str(tmp_path), rng)
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "short.bin").write_bytes(b"\0" * 4)
    cfg, s = _sample('name: "f" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 '
                     'dims: [ 2 ] input_data_file: "short.bin" } }')  # fmt: skip
    with pytest.raises(InvalidArgument, match=r"warmup setting expects 8 bytes, but the data "
                       r"provided from short\.binonly has 4 bytes"):  # fmt: skip
        _sample_inputs(cfg, s, str(tmp_path), rng)


def test_sample_shapes_and_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    cfg, s = _sample('name: "r" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 '
                     "dims: [ 3 ] random_data: true } }", max_batch_size=2)  # fmt: skip
    (t,) = _sample_inputs(cfg, s, str(tmp_path), rng)
    assert t.shape == (1, 3) and t.data is not None and t.data.dtype == np.float32
    cfg, s = _sample('name: "s" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_STRING '
                     "dims: [ 2 ] random_data: true } }")  # fmt: skip
    (t,) = _sample_inputs(cfg, s, str(tmp_path), rng)
    assert t.datatype == "BYTES" and t.data is not None and t.data.tolist() == [b"", b""]


# What Triton 2.51 (the reference build) answers when warmup_fail is loaded explicitly
# (observed with tests/reference.py; the reference crashed when it warmed up warmup_probe and
# warmup_fail side by side, so this one is recorded rather than run each time).
TRITON_LOAD_ERROR = (
    "load failed for model 'warmup_fail': version 1 is at UNAVAILABLE state: Invalid argument: "
    "failed to run warmup sample 'boom': warmup refused; ;\n"
)
TRITON_INDEX = [{"name": "warmup_fail", "version": "1", "state": "UNAVAILABLE",
                 "reason": "Invalid argument: failed to run warmup sample 'boom': warmup refused; "}]  # fmt: skip


def test_failing_warmup_renders_as_triton(serving: Serving) -> None:
    with serving.server(None, "--model-control-mode", "explicit", models=["warmup_fail"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url, network_timeout=60)
        with pytest.raises(InferenceServerException) as exc:
            client.load_model("warmup_fail")
        assert (exc.value.message(), client.get_model_repository_index()) == (
            TRITON_LOAD_ERROR, TRITON_INDEX)  # fmt: skip


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_warmup_requests_match_reference(serving: Serving) -> None:
    """The model sees the same warmup requests under both servers, and the config JSON
    (model_warmup included) is the same."""
    repo = serving.repo(["warmup_probe"])

    def observe(url: str) -> tuple[object, object, object]:
        client = httpclient.InferenceServerClient(url, network_timeout=60)
        res = client.infer("warmup_probe", [http_input("X", np.ones((1, 3), np.float32))])
        config = client.get_model_config("warmup_probe")
        return res.as_numpy("SEEN").tolist(), res.as_numpy("LOG").tolist(), config

    ref = start_reference(repo)
    try:
        expected = observe(ref.http_url)
    finally:
        ref.stop()
    with serving.server(repo) as mine:
        assert observe(mine.http_url) == expected
