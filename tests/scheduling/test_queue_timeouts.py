"""Queue timeouts bound waiting, through the real server and tritonclient: with the dynamic
batcher's REJECT policy a request whose timeout (the policy's default, or the request's own
``timeout`` where the policy allows overriding it) expires is answered then, with Triton's
"Request timeout expired" (UNAVAILABLE), while the only instance is still hung."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.healthmodels import GATED, write_model
from tests.helpers import inputs, wait_until_async
from tests.serverproc import ServerProcess

WAIT_S = 90.0  # guards against hanging only
POLICIES = {
    # the request's own timeout shortens an allowed 60 s default
    "gated_override": "dynamic_batching { default_queue_policy { timeout_action: REJECT "
    "default_timeout_microseconds: 60000000 allow_timeout_override: true } }",
    # the policy's default timeout
    "gated_default": "dynamic_batching { default_queue_policy { timeout_action: REJECT "
    "default_timeout_microseconds: 200000 } }",
}


@pytest.fixture(scope="module")
def served(serving: Serving) -> Iterator[tuple[ServerProcess, Path]]:
    root = serving.repo()
    for name, policy in POLICIES.items():
        write_model(root, name, GATED, max_batch_size=1, extra=policy)
    with serving.server(root) as server:
        yield server, root


def _in(mod: ModuleType, value: float) -> list[object]:
    return inputs(mod, IN=np.full((1, 1), value, np.float32))


@pytest.mark.parametrize("model", list(POLICIES))
async def test_a_queued_request_times_out_while_the_instance_is_hung(
    served: tuple[ServerProcess, Path], model: str
) -> None:
    server, root = served
    folder = root / model
    (folder / "hold").touch()
    timeout_us = 200_000 if model == "gated_override" else None
    try:
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            held = asyncio.ensure_future(client.infer(model, _in(grpcaio, 1)))
            await wait_until_async((folder / "started").exists, WAIT_S, what="the first request")
            with pytest.raises(InferenceServerException) as grpc_err:
                await client.infer(model, _in(grpcaio, 2), timeout=timeout_us)
            assert grpc_err.value.status() == "StatusCode.UNAVAILABLE"
            assert grpc_err.value.message() == "Request timeout expired"
            http = httpclient.InferenceServerClient(server.http_url)
            with pytest.raises(InferenceServerException) as http_err:
                await asyncio.to_thread(http.infer, model, _in(httpclient, 3), timeout=timeout_us)
            assert http_err.value.status() == "503"
            assert http_err.value.message() == "Request timeout expired"
            assert not held.done()  # the instance was hung all along
            (folder / "hold").unlink()
            result = await asyncio.wait_for(held, WAIT_S)
            assert result.as_numpy("OUT")[0][0] == 1
    finally:
        (folder / "hold").unlink(missing_ok=True)
        (folder / "started").unlink(missing_ok=True)
