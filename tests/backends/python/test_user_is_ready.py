"""A model's own ``is_ready()`` (Triton's Python backend since 26.03), in both execution
modes, through the real server and tritonclient: called when model (and strict server)
readiness is queried, sync or ``async def``; False, an exception or a non-bool result make the
model not ready (Triton's texts, logged at verbose level 1); a check that does not answer
within 5 s times out, and while it runs, other queries share it instead of calling again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.healthmodels import IS_READY, IS_READY_ASYNC, STEADY, write_model
from tests.helpers import MODES, http_input, wait_until
from tests.serverproc import ServerProcess

WAIT_S = 90.0  # guards against hanging only


def _until(what: str, check: Callable[[], Any], limit: float = WAIT_S) -> Any:
    return wait_until(check, limit, what=what)


def _until_logged(server: ServerProcess, line: str) -> None:
    _until(f"the log line {line!r}", lambda: line in server.output())


@pytest.fixture(scope="module", params=MODES)
def served(
    request: pytest.FixtureRequest, serving: Serving
) -> Iterator[tuple[ServerProcess, Path]]:
    root = serving.repo()
    for name, source in (("ready_sync", IS_READY), ("ready_async", IS_READY_ASYNC)):
        folder = write_model(root, name, source)
        (folder / "mode").write_text("true")
    write_model(root, "plain", STEADY)
    with serving.server(root, "--log-verbose", "1", mode=request.param) as server:
        yield server, root


def _set_mode(root: Path, model: str, mode: str) -> None:
    (root / model / "mode").write_text(mode)


def _calls(root: Path, model: str) -> int:
    path = root / model / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("model", ["ready_sync", "ready_async"])
def test_is_ready_variants(served: tuple[ServerProcess, Path], model: str) -> None:
    server, root = served
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    instance = f"{model}_0_0"
    cases = [
        ("true", True, None),
        ("false", False, f"Model '{instance}' is not ready (user-defined check failed)."),
        ("raise", False, "ValueError: not today"),
        ("nonbool", False, "is_ready() must return a boolean value"),
    ]
    for mode, ready, text in cases:
        _set_mode(root, model, mode)
        before = _calls(root, model)
        assert http.is_model_ready(model) is ready, mode
        assert grpc.is_model_ready(model) is ready, mode
        assert http.is_server_ready() is ready, mode  # strict readiness asks the models too
        assert _calls(root, model) >= before + 3  # each query called it
        if text is not None:
            _until_logged(server, f"Model '{model}' version 1 is not ready: {text}")
    # Readiness does not gate inference (as Triton): the model serves whatever it says.
    x = http_input("IN", np.array([7], np.float32))
    assert http.infer(model, [x]).as_numpy("OUT")[0] == 7
    _set_mode(root, model, "true")
    assert http.is_model_ready(model) and http.is_server_ready()


def test_a_model_without_is_ready_is_never_asked(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    assert httpclient.InferenceServerClient(server.http_url).is_model_ready("plain")


def test_a_check_that_does_not_answer_times_out_and_is_shared(
    served: tuple[ServerProcess, Path],
) -> None:
    """is_ready() blocks: the first query waits 5 s and reports the timeout; queries while it
    still runs wait for it (again at most 5 s) instead of calling is_ready() once more."""
    server, root = served
    model = "ready_sync"
    grpc_url = server.grpc_url
    release = root / model / "release"
    _set_mode(root, model, "block")
    before = _calls(root, model)
    try:
        assert not grpcclient.InferenceServerClient(grpc_url).is_model_ready(model)
        _until_logged(server, f"Model '{model}' version 1 is not ready: Timed out waiting for "
                      "user-defined is_ready() response")  # fmt: skip
        assert _calls(root, model) == before + 1

        def query(_: int) -> bool:
            ready: bool = grpcclient.InferenceServerClient(grpc_url).is_model_ready(model)
            return ready

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(query, range(4))) == [False] * 4
        _until_logged(server, "is not ready: Timed out waiting for in-flight is_ready() response")
        assert _calls(root, model) == before + 1  # one check in flight, shared
    finally:
        release.touch()
    http = httpclient.InferenceServerClient(server.http_url)
    _until("the check to answer again", lambda: http.is_model_ready(model))
    _set_mode(root, model, "true")
    release.unlink()
