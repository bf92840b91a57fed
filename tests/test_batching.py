"""modelyard.batching: unit tests on pb_utils objects, and a served model under a dynamic
batcher with concurrent clients."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio

import triton_python_backend_utils as pb_utils
from modelyard.batching import batched
from tests.conftest import Serving
from tests.helpers import grpc_input
from tests.serverproc import ServerProcess


def _request(**arrays: np.ndarray) -> pb_utils.InferenceRequest:
    tensors = [pb_utils.Tensor(name, arr) for name, arr in arrays.items()]
    return pb_utils.InferenceRequest(model_name="m", inputs=tensors, requested_output_names=[])


class Doubler:
    @batched
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert inputs["X"].shape == (3, 2)
        return {"Y": inputs["X"] * 2, "S": inputs["X"].sum(axis=1)}


def test_batched_stacks_and_splits() -> None:
    reqs = [_request(X=np.ones((1, 2), np.float32)), _request(X=np.full((2, 2), 3, np.float32))]
    first, second = Doubler().execute(reqs)
    y, s = (
        pb_utils.get_output_tensor_by_name(first, "Y"),
        pb_utils.get_output_tensor_by_name(second, "S"),
    )
    assert y is not None and s is not None
    np.testing.assert_array_equal(y.as_numpy(), [[2, 2]])
    np.testing.assert_array_equal(s.as_numpy(), [6, 6])


def test_stack_mode_and_row_errors() -> None:
    class Summer:
        @batched(stack=True)  # type: ignore[untyped-decorator]  # batched() returns Any
        def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {"S": inputs["X"].sum(axis=1), "BAD": np.zeros(5)}

    with pytest.raises(
        pb_utils.TritonModelException, match="output 'BAD' has shape \\[5\\]; it needs 2 rows"
    ):
        Summer().execute([_request(X=np.ones(4, np.float32)), _request(X=np.ones(4, np.float32))])


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["batch_helper"]) as srv:
        yield srv


async def test_served_model_gets_the_dynamic_batch_stacked(server: ServerProcess) -> None:
    client = grpcaio.InferenceServerClient(server.grpc_url)
    try:
        sizes = [1, 2, 1, 3, 1]

        async def one(i: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            x = np.full((n, 2), i, np.float32)
            res = await client.infer("batch_helper", [grpc_input("IN", x)])
            return x, res.as_numpy("OUT"), res.as_numpy("ROWS")

        results = await asyncio.wait_for(
            asyncio.gather(*(one(i, n) for i, n in enumerate(sizes))), 30
        )
        for (x, out, rows), n in zip(results, sizes, strict=True):
            np.testing.assert_array_equal(out, x * 2)
            assert rows.shape == (n, 1)
        # The queue delay holds the requests until their 8 rows fill one execute call.
        assert max(int(rows[0, 0]) for _, _, rows in results) > max(sizes)
    finally:
        await client.close()
