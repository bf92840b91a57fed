"""Long and concurrent gRPC streams from decoupled models, through tritonclient.grpc's callback
stream API and grpc.aio ``stream_infer``: 1,000-response streams, 20 streams at once, an
error in the middle of a stream, and a cancelled aio stream seen by the model.

Models: grpc_decoupled (IN[0] = n responses 0..n-1, then a flag-only final) and grpc_script
(plays a JSON script; see tests/models/grpc_script/config.pbtxt).
"""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from tests.conftest import Serving
from tests.helpers import grpc_input, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

TIMEOUT = 10.0  # one response
N = 1000


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["grpc_decoupled", "grpc_script"], endpoints=("grpc",)) as proc:
        yield proc


def _count(n: int) -> list[Any]:
    return [grpc_input("IN", np.array([n], np.int32))]


def _script(*steps: dict[str, Any]) -> list[Any]:
    return [grpc_input("SCRIPT", np.array([json.dumps(steps).encode()], dtype=np.object_))]


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def test_1000_responses_over_the_callback_stream(server: ServerProcess) -> None:
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("grpc_decoupled", _count(N), request_id="k",
                                  enable_empty_final_response=True)  # fmt: skip
        items = [got.get(timeout=TIMEOUT) for _ in range(N + 1)]
        client.stop_stream()
    assert all(error is None for _, error in items)
    assert [int(r.as_numpy("OUT")[0]) for r, _ in items[:N]] == list(range(N))
    assert [_final(r) for r, _ in items] == [False] * N + [True]
    assert {r.get_response().id for r, _ in items} == {"k"}
    assert got.empty()


async def _aio_stream(url: str, n: int, rid: str) -> list[int]:
    """One grpc.aio stream of a single request for ``n`` responses: the OUT values in the
    order they came, up to the final response."""
    async with aioclient.InferenceServerClient(url) as client:

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": "grpc_decoupled", "inputs": _count(n),
                   "request_id": rid, "enable_empty_final_response": True}  # fmt: skip

        out: list[int] = []
        async for result, error in client.stream_infer(requests(), stream_timeout=60):
            assert error is None and result.get_response().id == rid
            if _final(result):
                break
            out.append(int(result.as_numpy("OUT")[0]))
        return out


async def test_1000_responses_over_aio_stream_infer(server: ServerProcess) -> None:
    assert await asyncio.wait_for(_aio_stream(server.grpc_url, N, "a"), 60) == list(range(N))


async def test_20_concurrent_streams_each_in_order(server: ServerProcess) -> None:
    counts = [100 + 7 * i for i in range(20)]
    runs = (_aio_stream(server.grpc_url, n, f"s{i}") for i, n in enumerate(counts))
    results = await asyncio.wait_for(asyncio.gather(*runs), 60)
    for n, out in zip(counts, results, strict=True):
        assert out == list(range(n))


def test_an_error_in_the_middle_keeps_the_stream_open(server: ServerProcess) -> None:
    """The model sends an error response and goes on: the client gets the error in order,
    then the rest, and the stream serves the next request."""
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer(
            "grpc_script",
            _script({"out": 0}, {"error": "halfway", "code": "INVALID_ARG"}, {"out": 1},
                    {"out": 2, "final": True}),
            request_id="e",
        )  # fmt: skip
        items = [got.get(timeout=TIMEOUT) for _ in range(4)]
        client.async_stream_infer("grpc_decoupled", _count(2), request_id="next")
        after = [got.get(timeout=TIMEOUT) for _ in range(2)]
        client.stop_stream()
    (r0, e0), (r1, e1), (r2, e2), (r3, e3) = items
    assert (e0, e2, e3) == (None, None, None) and r1 is None
    assert e1.message() == "halfway"
    assert [int(r.as_numpy("OUT")[0]) for r in (r0, r2, r3)] == [0, 1, 2]
    assert [_final(r) for r in (r0, r2, r3)] == [False, False, True]
    assert [int(r.as_numpy("OUT")[0]) for r, _ in after] == [0, 1]


def _cancelled_ids(url: str, expected: str) -> set[str]:
    """The request ids grpc_script saw cancelled, once ``expected`` is among them (bounded)."""

    def report() -> set[str] | None:
        got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        with grpcclient.InferenceServerClient(url) as client:
            client.start_stream(callback=lambda result, error, q=got: q.put((result, error)))
            client.async_stream_infer("grpc_script", _script({"report": True, "final": True}))
            result, error = got.get(timeout=TIMEOUT)
            client.stop_stream()
        assert error is None
        ids = set(result.as_numpy("IDS")[0].decode().split(",")) - {""}
        return ids if expected in ids else None

    return wait_until(report, 3 * TIMEOUT, 0.05, what=f"grpc_script to see {expected} cancelled")


async def test_cancelling_an_aio_stream_is_seen_by_the_model(server: ServerProcess) -> None:
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        first = asyncio.Event()

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": "grpc_script", "request_id": "aio-x",
                   "inputs": _script({"out": 5}, {"wait_cancel_ms": 8000})}  # fmt: skip
            await asyncio.sleep(30)  # keep the stream open until it is cancelled

        async def consume() -> None:
            async for _result, _error in client.stream_infer(requests(), stream_timeout=60):
                first.set()

        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(first.wait(), TIMEOUT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    ids = await asyncio.to_thread(_cancelled_ids, server.grpc_url, "aio-x")
    assert "aio-x" in ids
