"""Reloads and unloads while the server serves, through the real HTTP and gRPC clients:
reloads under steady load fail no request, a failed reload leaves the old version serving,
and an unload lets a slow in-flight request finish."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.core.modelfiles import (
    config_json,
    executions,
    infer_grpc,
    infer_http,
    model_source,
    write_model,
)
from tests.helpers import grpc_input, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def repo(serving: Serving) -> Path:
    return serving.repo()


@pytest.fixture(scope="module")
def exec_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exec_log") / "executions.txt"


@pytest.fixture(scope="module")
def server(serving: Serving, repo: Path, exec_log: Path) -> Iterator[ServerProcess]:
    write_model(repo, "steady", k=0.0)
    write_model(repo, "fragile", k=1.0)
    write_model(repo, "slow", k=0.0, exec_sleep=1.5)
    with serving.server(repo, "--model-control-mode=explicit", "--load-model=*",
                        env={"MM_EXEC_LOG": str(exec_log)}) as srv:  # fmt: skip
        yield srv


def _http_load(url: str, stop: threading.Event, outcomes: list[float | str]) -> None:
    client = httpclient.InferenceServerClient(url)
    while not stop.is_set():
        try:
            outcomes.append(float(infer_http(client, "steady", [0.0])[0]))
        except Exception as e:  # every failure is recorded, and fails the test
            outcomes.append(f"http: {e}")


async def _grpc_aio_load(url: str, stop: threading.Event, outcomes: list[float | str]) -> None:
    client = grpcaio.InferenceServerClient(url)
    x = np.zeros(1, np.float32)

    async def one() -> None:
        inp = grpc_input("INPUT0", x)
        try:
            r = await client.infer("steady", [inp], client_timeout=60)
            outcomes.append(float(r.as_numpy("OUTPUT0")[0]))
        except Exception as e:
            outcomes.append(f"grpc: {e}")

    try:
        while not stop.is_set():
            await asyncio.gather(*(one() for _ in range(4)))  # 4 requests in flight at once
    finally:
        await client.close()


def test_reloads_under_steady_load_fail_no_request(server: ServerProcess, repo: Path) -> None:
    http_out: list[float | str] = []
    grpc_out: list[float | str] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=_http_load, args=(server.http_url, stop, http_out)),
        threading.Thread(
            target=lambda: asyncio.run(_grpc_aio_load(server.grpc_url, stop, grpc_out))
        ),
    ]
    for t in threads:
        t.start()
    admin = grpcclient.InferenceServerClient(server.grpc_url)

    def answered(value: float, http_from: int = 0, grpc_from: int = 0) -> bool:
        return value in http_out[http_from:] and value in grpc_out[grpc_from:]

    try:
        wait_until(lambda: answered(0.0), what="both loads to run on the first version")
        for k in (1.0, 2.0, 3.0):
            write_model(repo, "steady", k=k)  # new files, then a reload from them
            http_from, grpc_from = len(http_out), len(grpc_out)
            admin.load_model("steady")
            # Once load returns, every new request reaches the new version.
            assert infer_grpc(admin, "steady", [0.0])[0] == k
            wait_until(lambda: answered(k, http_from, grpc_from),  # noqa: B023 (used at once)
                       what=f"both loads to reach version k={k}")  # fmt: skip
        admin.load_model("steady", config=config_json("steady"))  # a config-override reload
        wait_until(lambda: len(http_out) > 10 and len(grpc_out) > 10, what="more requests")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    failures = [o for o in http_out + grpc_out if isinstance(o, str)]
    assert failures == []
    assert len(http_out) > 10 and len(grpc_out) > 10
    assert {0.0, 3.0} <= set(http_out + grpc_out)  # old and new versions both answered
    # Workers start with vfork: a fork() while gRPC threads ran could crash the child before
    # its exec (SIGSEGV, "Stub process ... is not healthy"); gRPC logs each such fork.
    assert "skipping fork() handlers" not in server.output()


def test_a_failed_reload_leaves_the_old_version_serving(server: ServerProcess, repo: Path) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    write_model(repo, "fragile", k=7.0, fail=True)
    try:
        for client in (http, grpc):
            with pytest.raises(InferenceServerException, match="broken on purpose"):
                client.load_model("fragile")
        with pytest.raises(InferenceServerException, match="Invalid config override"):
            http.load_model("fragile", config='{"max_batch_size": "x"}')
        # The old version still answers, READY in the index; the server stays ready.
        np.testing.assert_array_equal(infer_http(http, "fragile"), [2.0, 3.0])
        np.testing.assert_array_equal(infer_grpc(grpc, "fragile"), [2.0, 3.0])
        assert {"name": "fragile", "version": "1", "state": "READY"} in (
            http.get_model_repository_index()
        )
        assert http.is_model_ready("fragile") and http.is_server_ready()
    finally:
        write_model(repo, "fragile", k=4.0)
    grpc.load_model("fragile")  # fixed files: the reload goes through
    np.testing.assert_array_equal(infer_grpc(grpc, "fragile"), [5.0, 6.0])


def _slow_call_in_background(
    server: ServerProcess, exec_log: Path
) -> tuple[threading.Thread, list[object]]:
    """Start one HTTP request to ``slow`` on a thread, and return once it executes (it takes
    1.5 s); its result (or error) lands in the list."""
    result: list[object] = []
    before = executions(exec_log, "slow")

    def call() -> None:
        try:
            result.append(infer_http(httpclient.InferenceServerClient(server.http_url), "slow"))
        except Exception as e:
            result.append(e)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: executions(exec_log, "slow") > before, what="the request to execute")
    return caller, result


def test_a_reload_lets_a_slow_in_flight_request_finish_on_the_old_version(
    server: ServerProcess, repo: Path, exec_log: Path
) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    caller, result = _slow_call_in_background(server, exec_log)  # on the old version
    write_model(repo, "slow", k=100.0, exec_sleep=1.5)
    grpc.load_model("slow")
    caller.join(30)
    assert len(result) == 1 and not isinstance(result[0], Exception), result
    np.testing.assert_array_equal(result[0], [1.0, 2.0])  # answered by the old version
    np.testing.assert_array_equal(infer_grpc(grpc, "slow"), [101.0, 102.0])
    write_model(repo, "slow", k=0.0, exec_sleep=1.5)
    grpc.load_model("slow")


def test_unload_drains_a_slow_in_flight_request(server: ServerProcess, exec_log: Path) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    caller, result = _slow_call_in_background(server, exec_log)
    grpc.unload_model("slow")
    caller.join(30)
    assert len(result) == 1 and not isinstance(result[0], Exception), result
    np.testing.assert_array_equal(result[0], [1.0, 2.0])
    with pytest.raises(InferenceServerException, match="has no available versions"):
        infer_http(http, "slow")
    http.load_model("slow")
    assert http.is_model_ready("slow")


def test_execute_loads_and_unloads_a_model_from_files(server: ServerProcess, repo: Path) -> None:
    """A model's ``execute`` loads a model from files and unloads it (``pb_utils``)."""
    loader = """
import json
import triton_python_backend_utils as pb_utils
SRC = {src!r}
CFG = {cfg!r}
class TritonPythonModel:
    def execute(self, requests):
        pb_utils.load_model("child", config=CFG, files={{"file:1/model.py": SRC.encode()}})
        ready = pb_utils.is_model_ready("child")
        pb_utils.unload_model("child")
        gone = not pb_utils.is_model_ready("child")
        x = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 0 + ready + gone)])]
""".format(src=model_source(k=3), cfg=config_json("child"))
    write_model(repo, "loader")
    (repo / "loader" / "1" / "model.py").write_text(loader)
    http = httpclient.InferenceServerClient(server.http_url)
    http.load_model("loader")
    np.testing.assert_array_equal(infer_http(http, "loader"), [2.0, 2.0])
