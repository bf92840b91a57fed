"""Honest health of process-mode instances, through the real server and tritonclient: a
worker that dies is restarted; a restart whose initialize fails is retried with backoff while
the model reports not-ready with the reason (index, model and server readiness) and its
requests fail at once without reaching an uninitialized model; it recovers on its own; a
model that crashes on every request is held back without starving another."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.backends.python.server.restart import RestartPolicy, describe_exit
from tests.conftest import Serving
from tests.healthmodels import CRASHY, FLAKY, STEADY, write_model
from tests.helpers import grpc_input, http_input, wait_for_log, wait_until
from tests.serverproc import ServerProcess

BACKOFF = ("--backend-config", "python,restart-backoff-seconds=0.5",
           "--backend-config", "python,restart-backoff-max-seconds=2")  # fmt: skip
WAIT_S = 90.0  # guards against hanging only


def _until(what: str, check: Callable[[], Any], limit: float = WAIT_S) -> Any:
    return wait_until(check, limit, what=what)


def _in(mod: Any, value: float) -> list[Any]:
    """The models' input IN for ``mod`` (a tritonclient protocol module)."""
    make = http_input if mod is httpclient else grpc_input
    return [make("IN", np.array([value], np.float32))]


def _index_entry(http: httpclient.InferenceServerClient, name: str) -> dict[str, Any]:
    entries = [e for e in http.get_model_repository_index() if e["name"] == name]
    assert len(entries) == 1, entries
    entry: dict[str, Any] = entries[0]
    return entry


@pytest.fixture(scope="module")
def repo(serving: Serving) -> Path:
    root = serving.repo()
    write_model(root, "health_flaky", FLAKY)
    write_model(root, "health_crashy", CRASHY)
    write_model(root, "health_steady", STEADY)
    return root


@pytest.fixture(scope="module")
def server(serving: Serving, repo: Path) -> Iterator[ServerProcess]:
    with serving.server(repo, *BACKOFF) as srv:
        yield srv


def test_backoff_policy_and_exit_texts() -> None:
    policy = RestartPolicy(initial=1.0, maximum=8.0)
    assert [policy.delay(n) for n in range(1, 8)] == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-signal.SIGKILL) == "was killed by signal 9 (SIGKILL)"


def test_a_failed_restart_is_retried_until_initialize_succeeds(
    server: ServerProcess, repo: Path
) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    name = "health_flaky"
    assert http.infer(name, _in(httpclient, 1)).as_numpy("OUT")[0] == 2
    (repo / name / "broken").touch()
    try:
        with pytest.raises(InferenceServerException) as crash:
            http.infer(name, _in(httpclient, -1))
        assert crash.value.status() == "500"
        assert "Stub process 'health_flaky_0_0' is not healthy." in crash.value.message()

        # The restart's initialize fails: retried with backoff; the model is not ready and
        # the index tells why (the worker's exit code, the initialize error).
        entry = _until("a failed restart in the index", lambda: (
            e if "attempt 1 failed" in (e := _index_entry(http, name)).get("reason", "") else None))  # fmt: skip
        assert entry["state"] == "UNAVAILABLE"
        assert entry["reason"].startswith("Stub process 'health_flaky_0_0' is not healthy.")
        assert "exited with code 3" in entry["reason"]
        assert "RuntimeError: initialize refused: 'broken' is present" in entry["reason"]
        assert not http.is_model_ready(name) and not grpc.is_model_ready(name)
        assert not http.is_server_ready() and not grpc.is_server_ready()  # strict readiness
        assert {"name": name, "version": "1", "state": "READY"} not in (
            http.get_model_repository_index()
        )
        # Its requests fail at once with the reason; execute never runs uninitialized.
        for client, mod in ((http, httpclient), (grpc, grpcclient)):
            with pytest.raises(InferenceServerException) as refused:
                client.infer(name, _in(mod, 1))
            message = refused.value.message()
            assert message.startswith("Stub process 'health_flaky_0_0' is not healthy."), message
            assert "AttributeError" not in message
        # Other models serve meanwhile.
        assert http.infer("health_steady", _in(httpclient, 5)).as_numpy("OUT")[0] == 5
    finally:
        (repo / name / "broken").unlink()

    # The cause is fixed: the next attempt succeeds and the model serves again by itself.
    _until("the model to recover", lambda: http.is_model_ready(name))
    assert grpc.infer(name, _in(grpcclient, 4)).as_numpy("OUT")[0] == 8
    assert _index_entry(http, name) == {"name": name, "version": "1", "state": "READY"}
    assert http.is_server_ready() and grpc.is_server_ready()
    # (each line may not have been read from the server's output yet)
    wait_for_log(server, "worker process of model instance 'health_flaky_0_0' exited with code 3; ")
    wait_for_log(server, "restart of model instance 'health_flaky_0_0' failed (attempt 1; its "
                 "worker exited with code 3; next attempt in 0.5 s): RuntimeError: initialize "
                 "refused")  # fmt: skip
    wait_for_log(server, "model instance 'health_flaky_0_0' restarted")


def test_a_crash_loop_is_held_back_without_starving_another_model(
    server: ServerProcess,
) -> None:
    """Every request kills the crashy model's worker: after the first immediate restart the
    restarts back off and its requests fail at once meanwhile, while another model serves all
    of its requests."""
    requests = 30

    def crashy() -> list[str]:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        messages = []
        for _ in range(requests):
            with pytest.raises(InferenceServerException) as e:
                client.infer("health_crashy", _in(grpcclient, 1))
            messages.append(e.value.message())
        return messages

    def steady() -> list[float]:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        return [float(client.infer("health_steady", _in(grpcclient, i)).as_numpy("OUT")[0])
                for i in range(2 * requests)]  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        crashed, served = pool.submit(crashy), pool.submit(steady)
        messages, values = crashed.result(WAIT_S), served.result(WAIT_S)
    assert values == [float(i) for i in range(2 * requests)]
    assert all(m.startswith("Stub process 'health_crashy_0_0' is not healthy.") for m in messages)
    held = [m for m in messages if "backing off" in m]
    assert held, messages  # answered at once while the restarts backed off
    crash = "model instance 'health_crashy_0_0' exited with code 7"
    wait_until(lambda: server.output().count(crash) >= 2, what="two crashes in the log")
    assert server.output().count(crash) < requests


@pytest.mark.parametrize("strict", [True, False])
def test_server_readiness_during_a_restart(serving: Serving, strict: bool) -> None:
    """The only instance is restarting (its initialize held up): not ready, and the server
    not ready with strict readiness; a request sent meanwhile waits for the restart."""
    repo = serving.repo()
    folder = write_model(repo, "health_flaky", FLAKY)
    with serving.server(repo, "--strict-readiness", str(strict).lower(),
                        "--log-verbose", "1") as server:  # fmt: skip
        http = httpclient.InferenceServerClient(server.http_url)
        name = "health_flaky"
        assert http.infer(name, _in(httpclient, 1)).as_numpy("OUT")[0] == 2
        worker = _worker_pid(server.proc.pid)
        (folder / "hold").touch()
        os.kill(worker, signal.SIGKILL)
        entry = _until("the restart in the index", lambda: (
            e if "restarting it" in (e := _index_entry(http, name)).get("reason", "") else None))  # fmt: skip
        assert entry["state"] == "UNAVAILABLE"
        assert "was killed by signal 9 (SIGKILL)" in entry["reason"]
        assert not http.is_model_ready(name)
        assert http.is_server_ready() is (not strict)
        # Triton 26's text, logged at verbose level 1 (its QA greps it).
        line = ("Model 'health_flaky' version 1 is not ready: Stub process 'health_flaky_0_0' "
                "is not healthy.")  # fmt: skip
        _until("the not-ready line in the log", lambda: line in server.output())

        async def waiting_request() -> float:
            async with grpcaio.InferenceServerClient(server.grpc_url) as client:
                result = await client.infer(name, _in(grpcaio, 3))
                return float(result.as_numpy("OUT")[0])

        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(asyncio.run, waiting_request())
            (folder / "hold").unlink()
            assert pending.result(WAIT_S) == 6
        _until("the model to be ready", lambda: http.is_model_ready(name))
        assert http.is_server_ready()


def _worker_pid(server_pid: int) -> int:
    """The one model worker the server runs."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ppid == server_pid and b"modelyard.backends.python.worker" in cmdline:
            found.append(int(entry))
    assert len(found) == 1, found
    return found[0]
