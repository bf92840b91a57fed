"""The Python backend through the real server and tritonclient: the TritonPythonModel
contract, worker processes, errors, crashes and the shared-memory transport."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import http_input, wait_for_log, wait_until
from tests.serverproc import ServerProcess

PY_MODELS = ["py_init_args", "py_init_error", "py_exec_error", "py_wrong_count", "py_siblings",
             "py_instances", "py_identity", "py_per_request_error", "py_autocomplete", "py_crash"]  # fmt: skip


@pytest.fixture(scope="module")
def repo(serving: Serving) -> Path:
    return serving.repo(PY_MODELS)


@pytest.fixture(scope="module")
def server(serving: Serving, repo: Path) -> Iterator[ServerProcess]:
    with serving.server(repo) as srv:
        yield srv


@pytest.fixture()
def http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


@pytest.fixture()
def grpc(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


def test_initialize_gets_tritons_seven_args(
    http: httpclient.InferenceServerClient, repo: Path
) -> None:
    res = http.infer("py_init_args", [http_input("IN", np.array([1], np.int32), "INT32")])
    args = json.loads(res.as_numpy("ARGS")[0])
    assert sorted(args) == sorted([
        "model_config", "model_instance_kind", "model_instance_name", "model_instance_device_id",
        "model_repository", "model_version", "model_name",
    ])  # fmt: skip
    assert args["model_name"] == "py_init_args"
    assert args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    # No instance_group in the config: Triton names the group after the model.
    assert args["model_instance_name"] == "py_init_args_0"
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(repo / "py_init_args")
    cfg = json.loads(args["model_config"])
    assert cfg["name"] == "py_init_args"
    assert cfg["input"][0]["dims"] == [1]
    assert cfg["parameters"] == {"custom_key": {"string_value": "custom_value"}}


def test_initialize_error_fails_only_that_model(
    http: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    assert not http.is_model_ready("py_init_error")
    assert http.is_model_ready("py_identity")
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["py_init_error"]["state"] == "UNAVAILABLE"
    assert "name 'lorem_ipsum' is not defined" in index["py_init_error"]["reason"]
    assert "name 'lorem_ipsum' is not defined" in server.output()
    # Strict readiness: a model that failed to load makes the server not ready, as in Triton.
    assert not http.is_server_ready()
    assert http.is_server_live()


def test_execute_exception_is_a_500_with_tritons_text(http: httpclient.InferenceServerClient,
                                                      grpc: grpcclient.InferenceServerClient) -> None:  # fmt: skip
    with pytest.raises(InferenceServerException) as e:
        http.infer("py_exec_error", [http_input("IN", np.array([1], np.float32), "FP32")])
    assert e.value.status() == "500"
    msg = e.value.message()
    assert msg.startswith(
        "Failed to process the request(s) for model 'py_exec_error_0_0', message: "
    )
    assert "TritonModelException: model says no" in msg
    assert "model.py(6): execute" in msg
    g = grpcclient.InferInput("IN", [1], "FP32")
    g.set_data_from_numpy(np.array([1], np.float32))
    with pytest.raises(InferenceServerException) as ge:
        grpc.infer("py_exec_error", [g])
    assert ge.value.status() == "StatusCode.INTERNAL"
    # The model stays loaded and keeps answering.
    assert http.is_model_ready("py_exec_error")


def test_wrong_number_of_responses(http: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        http.infer("py_wrong_count", [http_input("IN", np.array([1], np.float32), "FP32")])
    assert e.value.status() == "500"
    assert ("Number of InferenceResponse objects do not match the number of InferenceRequest "
            "objects. InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0") in e.value.message()  # fmt: skip


def test_per_request_error_keeps_code_and_text(http: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        http.infer("py_per_request_error", [http_input("IN", np.array([1], np.float32), "FP32")])
    assert e.value.status() == "400"
    assert e.value.message() == "bad value"


def test_sibling_modules_import_both_ways(http: httpclient.InferenceServerClient) -> None:
    res = http.infer("py_siblings", [http_input("IN", np.array([1, 2], np.float32), "FP32")])
    np.testing.assert_array_equal(res.as_numpy("OUT"), [3, 6])


def test_instance_count_gives_separate_processes(server: ServerProcess, tmp_path: Path) -> None:
    # Each request waits in execute until all three are in it at once (and fails otherwise).
    params = {"barrier": str(tmp_path), "parties": 3}

    def call(_: int) -> int:
        # Closed on its own thread: a tritonclient HTTP client collected on another thread
        # fails in gevent (an "exception ignored" warning).
        c = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        try:
            out = c.infer("py_instances", [http_input("IN", np.array([1], np.float32), "FP32")],
                          parameters=params)  # fmt: skip
            return int(out.as_numpy("PID")[0])
        finally:
            c.close()

    with ThreadPoolExecutor(3) as pool:
        pids = set(pool.map(call, range(3)))
    assert len(pids) == 3  # three instances, three processes, used at once
    assert server.proc.pid not in pids


def test_auto_complete_config_fills_the_model(http: httpclient.InferenceServerClient) -> None:
    cfg = http.get_model_config("py_autocomplete")
    assert cfg["max_batch_size"] == 4
    assert [i["name"] for i in cfg["input"]] == ["X"]
    meta = http.get_model_metadata("py_autocomplete")
    assert meta["inputs"] == [{"name": "X", "datatype": "INT32", "shape": [-1, 2]}]
    res = http.infer("py_autocomplete", [http_input("X", np.array([[1, 2]], np.int32), "INT32")])
    np.testing.assert_array_equal(res.as_numpy("Y"), [[2, 3]])


@pytest.mark.parametrize("size", [16, 300_000, 4_000_000])
def test_tensors_small_and_large_round_trip(http: httpclient.InferenceServerClient,
                                            grpc: grpcclient.InferenceServerClient, size: int) -> None:  # fmt: skip
    data = np.random.default_rng(size).random(size, dtype=np.float32)
    res = http.infer("py_identity", [http_input("INPUT0", data, "FP32")])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), data)
    g = grpcclient.InferInput("INPUT0", [size], "FP32")
    g.set_data_from_numpy(data)
    np.testing.assert_array_equal(grpc.infer("py_identity", [g]).as_numpy("OUTPUT0"), data)


def test_shared_memory_is_reused_not_leaked(
    http: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    import os

    data = np.ones(1_000_000, np.float32)
    for _ in range(3):
        http.infer("py_identity", [http_input("INPUT0", data, "FP32")])
    before = {n for n in os.listdir("/dev/shm") if n.startswith(f"modelyard-{server.proc.pid}-")}
    for _ in range(20):
        http.infer("py_identity", [http_input("INPUT0", data, "FP32")])
    after = {n for n in os.listdir("/dev/shm") if n.startswith(f"modelyard-{server.proc.pid}-")}
    assert before and after == before  # steady traffic creates no new segments


def test_crashed_worker_fails_its_request_and_comes_back(
    http: httpclient.InferenceServerClient,
) -> None:
    ok = np.array([1], np.float32)
    np.testing.assert_array_equal(
        http.infer("py_crash", [http_input("IN", ok, "FP32")]).as_numpy("OUT"), ok
    )
    with pytest.raises(InferenceServerException) as e:
        http.infer("py_crash", [http_input("IN", np.array([-1], np.float32), "FP32")])
    assert e.value.status() == "500"
    assert "Stub process 'py_crash_0' is not healthy." in e.value.message()
    wait_until(lambda: http.is_model_ready("py_crash"), 30, what="the worker to restart")
    np.testing.assert_array_equal(
        http.infer("py_crash", [http_input("IN", ok, "FP32")]).as_numpy("OUT"), ok
    )


def test_without_dev_shm_large_tensors_travel_inline(repo: Path, serving: Serving) -> None:
    with serving.server(repo, env={"MODELYARD_SHM_DIR": "/nonexistent-shm"}) as srv:
        c = httpclient.InferenceServerClient(srv.http_url)
        data = np.arange(500_000, dtype=np.float32)
        np.testing.assert_array_equal(
            c.infer("py_identity", [http_input("INPUT0", data, "FP32")]).as_numpy("OUTPUT0"), data
        )
        wait_for_log(srv, "tensors travel inline")
