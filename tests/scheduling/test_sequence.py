"""The sequence batcher through the real server and tritonclient: interleaved int and string
sequences, control inputs, Triton's errors, idle expiry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import inputs
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["seq_acc"]) as srv:
        yield srv


def _value(v: int, mod: ModuleType = httpclient) -> Any:
    return inputs(mod, VALUE=np.array([[v]], np.int32))[0]


async def test_interleaved_sequences_keep_their_own_state(server: ServerProcess) -> None:
    client = grpcaio.InferenceServerClient(server.grpc_url)

    async def run(seq_id: int | str, values: list[int]) -> list[int]:
        accs = []
        for i, v in enumerate(values):
            res = await client.infer(
                "seq_acc", [_value(v, grpcaio)], sequence_id=seq_id,
                sequence_start=i == 0, sequence_end=i == len(values) - 1,
            )  # fmt: skip
            accs.append(int(res.as_numpy("ACC")[0, 0]))
        return accs

    results = await asyncio.wait_for(
        asyncio.gather(run(1, [1, 2, 3, 4]), run("abc", [10, 20, 30]), run(7, [5, 5, 5, 5, 5])), 30
    )
    assert list(results) == [[1, 3, 6, 10], [10, 30, 60], [5, 10, 15, 20, 25]]
    await client.close()


async def test_concurrent_sequences_are_batched_together(server: ServerProcess) -> None:
    client = grpcaio.InferenceServerClient(server.grpc_url)

    async def run(seq_id: int) -> list[int]:
        sizes = []
        for i in range(6):
            res = await client.infer("seq_acc", [_value(1, grpcaio)], sequence_id=seq_id,
                                     sequence_start=i == 0, sequence_end=i == 5)  # fmt: skip
            sizes.append(int(res.as_numpy("BATCH")[0, 0]))
        return sizes

    sizes = await asyncio.wait_for(asyncio.gather(*(run(100 + k) for k in range(8))), 30)
    assert max(max(s) for s in sizes) > 1  # requests of different sequences shared batches
    assert max(max(s) for s in sizes) <= 4  # never over max_batch_size
    await client.close()


def test_sequence_errors(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as e:
        client.infer("seq_acc", [_value(1)])
    assert e.value.status() == "400"
    assert "must specify a non-zero or non-empty correlation ID" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.infer("seq_acc", [_value(1)], sequence_id=4242)
    assert e.value.message() == (
        "inference request for sequence 4242 to model 'seq_acc' must specify the START flag on "
        "the first request of the sequence"
    )


def test_idle_sequences_expire(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.infer("seq_acc", [_value(1)], sequence_id=555, sequence_start=True)
    res = client.infer("seq_acc", [_value(2)], sequence_id=555)
    assert res.as_numpy("ACC")[0, 0] == 3
    time.sleep(1.2)  # at least max_sequence_idle_microseconds (0.5 s): longer changes nothing
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        client.infer("seq_acc", [_value(3)], sequence_id=555)
