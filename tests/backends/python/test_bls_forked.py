"""A BLS or model-control call made in a process the model forked (a ``multiprocessing`` pool)
ends at once with an error, in both execution modes: such a process has none of the threads
that answer the calls (the worker's readers, the server's event loop), so the call could never
be answered, and its frames would mix with the worker's on the shared channel. The model's own
process goes on calling as before. Through the real server and tritonclient."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.conftest import Serving
from tests.helpers import MODES, grpc_input
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)

CLIENT_TIMEOUT_S = 60.0  # the model bounds its pool's tasks by 30 s
FORKED = (
    "BLS is not supported in a process the model forked (pid {}): only the model's own "
    "process (pid {}) can reach the server; make the call there"
)
UNSUPPORTED = 5


@pytest.fixture(scope="module", params=MODES)
def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["bls_forked", "bls_echo"], mode=request.param) as srv:
        yield srv


def run(server: ServerProcess, x: np.ndarray) -> dict[str, Any]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        res = client.infer(
            "bls_forked", [grpc_input("INPUT0", x, "FP32")], client_timeout=CLIENT_TIMEOUT_S
        )
    result: dict[str, Any] = json.loads(res.as_numpy("RESULT")[0])
    return result


def test_calls_from_a_forked_process_end_with_an_error_at_once(server: ServerProcess) -> None:
    x = np.arange(3, dtype=np.float32)
    result = run(server, x)
    owner = result["pid"]
    assert len(result["children"]) == 2
    for child in result["children"]:
        assert child["pid"] != owner
        error = {"error": FORKED.format(child["pid"], owner), "code": UNSUPPORTED}
        assert child["exec"] == error
        assert child["stream"] == [error]
        assert child["async_exec"] == error
        assert FORKED.format(child["pid"], owner) in child["ready"]


def test_the_model_process_calls_on_after_its_children_did(server: ServerProcess) -> None:
    for n in (2, 5):  # twice: the channel is in order after the children's calls
        x = np.arange(n, dtype=np.float32)
        after = run(server, x)["after"]
        out = {"output": x.tolist()}
        assert after == {"pid": after["pid"], "exec": out, "stream": [out], "async_exec": out,
                         "ready": True}  # fmt: skip
