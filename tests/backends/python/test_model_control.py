"""pb_utils' model-control API from a model, through the real server in both execution modes:
failures raise TritonModelException with Triton's wording, every time."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.backends.python.test_bls import TIMEOUT_S
from tests.conftest import Serving
from tests.helpers import MODES, grpc_input, http_input, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

NOT_FOUND = (
    "TritonModelException: Failed to load model: Failed to process the request for model "
    "'control_probe_0', message: failed to load 'does_not_exist', failed to poll from model "
    "repository"
)


def control_http(url: str, op: str) -> str:
    """control_probe's answer to ``op`` over HTTP (``url``: the server's HTTP host:port)."""
    client = httpclient.InferenceServerClient(url, network_timeout=TIMEOUT_S)
    t = http_input("OP", np.array([op.encode()], dtype=np.object_))
    text = client.infer("control_probe", [t]).as_numpy("OUT")[0].decode()
    client.close()
    return str(text)


def control_grpc(url: str, op: str) -> str:
    with grpcclient.InferenceServerClient(url) as client:
        t = grpc_input("OP", np.array([op.encode()], dtype=np.object_))
        res = client.infer("control_probe", [t], client_timeout=TIMEOUT_S)
        return str(res.as_numpy("OUT")[0].decode())


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["control_probe"], mode=request.param) as server:
        yield server


def test_loading_a_model_the_repository_lacks_fails_every_time(served: ServerProcess) -> None:
    # Triton 2.51's text, each time it is tried (a failed attempt leaves nothing behind).
    assert control_http(served.http_url, "load:does_not_exist") == NOT_FOUND
    assert control_grpc(served.grpc_url, "load:does_not_exist") == NOT_FOUND
    assert control_http(served.http_url, "load:does_not_exist") == NOT_FOUND
    assert control_grpc(served.grpc_url, "ready:does_not_exist") == "False"
    index = httpclient.InferenceServerClient(served.http_url).get_model_repository_index()
    assert [m["name"] for m in index] == ["control_probe"]


def test_model_names_are_checked_before_anything_loads(served: ServerProcess) -> None:
    text = control_http(served.http_url, "load:../escape")
    assert text.startswith("TritonModelException: Failed to load model: ")
    assert "'../escape'" in text


def test_a_model_reloads_itself_from_execute(served: ServerProcess) -> None:
    # The call returns once the new version serves: the old one drains afterwards, and the
    # request making the call is one of those it drains (waiting for it would wait for itself).
    assert control_http(served.http_url, "load:control_probe") == "ok"
    assert control_grpc(served.grpc_url, "ready:control_probe") == "True"
    assert control_grpc(served.grpc_url, "load:control_probe") == "ok"
    assert control_http(served.http_url, "ready:control_probe") == "True"


@pytest.mark.parametrize("mode", MODES)
def test_a_model_unloads_itself_from_execute(serving: Serving, mode: str) -> None:
    with serving.server(models=["control_probe"], mode=mode) as server:
        assert control_http(server.http_url, "unload:control_probe") == "ok"
        client = httpclient.InferenceServerClient(server.http_url)

        def states() -> dict[str, str]:
            return {m["name"]: m.get("state") for m in client.get_model_repository_index()}

        wait_until(lambda: states() == {"control_probe": "UNAVAILABLE"}, what="the unload")
        assert not client.is_model_ready("control_probe")
        client.close()
