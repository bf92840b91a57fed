"""ray/direct.py's two sides without Ray: a replica's ``DirectServer`` over a real core with
the example add_sub and repeat and the test model http_stream loaded (in-process), and callers' ``Connection``s over real
sockets: answers, a decoupled stream, cancellation, a wrong token, a replica that goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from modelyard.core.api import InferenceServer
from modelyard.core.options import LoadOptions, ServerOptions
from modelyard.errors import ErrorCode
from modelyard.ray.direct import DirectServer, Endpoint, connect
from modelyard.types import InferRequest, InferResponse, Tensor
from tests.helpers import EXAMPLES, make_repo

WAIT_S = 30.0


@pytest.fixture
async def replica(tmp_path: Path) -> AsyncIterator[tuple[DirectServer, Endpoint]]:
    repo = make_repo(make_repo(tmp_path / "repo", ["add_sub", "repeat"], EXAMPLES), ["http_stream"])
    backend = {"python": {"execution-mode": "in-process"}}
    core = InferenceServer(
        ServerOptions(repositories=[str(repo)], load=LoadOptions(backend_settings=backend))
    )
    assert not await core.start()
    server = DirectServer(core)
    await server.start("127.0.0.1")
    try:
        yield server, Endpoint("n", "127.0.0.1", server.port, server.token)
    finally:
        await server.close()
        await core.stop()


def add_sub(a: list[float]) -> InferRequest:
    x = np.array(a, dtype=np.float32)
    return InferRequest("add_sub", [Tensor.from_numpy("INPUT0", x), Tensor.from_numpy("INPUT1", x)])


class Responses:
    """The responses to one request as they come; ``ended`` once the final one is in."""

    def __init__(self) -> None:
        self.got: list[InferResponse] = []
        self.ended = asyncio.Event()

    def __call__(self, resp: InferResponse) -> None:
        self.got.append(resp)
        if resp.final:
            self.ended.set()


async def answers(conn_send: object, request: InferRequest) -> list[InferResponse]:
    """Every response to ``request`` until the final one (bounded)."""
    responses = Responses()
    conn_send(request, responses)  # type: ignore[operator]
    await asyncio.wait_for(responses.ended.wait(), WAIT_S)
    return responses.got


async def test_requests_and_a_stream_come_back(replica: tuple[DirectServer, Endpoint]) -> None:
    server, ep = replica
    conn = await connect(ep, WAIT_S)
    [resp] = await answers(conn.send, add_sub([1, 2, 3, 4]))
    assert resp.error is None
    out = {t.name: t.data for t in resp.outputs}
    np.testing.assert_array_equal(out["OUTPUT0"], np.array([2, 4, 6, 8], dtype=np.float32))
    # Two requests at once on one connection, answered by their ids.
    r1, r2 = await asyncio.gather(
        answers(conn.send, add_sub([1, 1, 1, 1])), answers(conn.send, add_sub([5, 5, 5, 5]))
    )
    assert [t.data[0] for t in r1[0].outputs if t.name == "OUTPUT0"] == [2.0]
    assert [t.data[0] for t in r2[0].outputs if t.name == "OUTPUT0"] == [10.0]
    # A decoupled model's responses, each as it comes, the last one final.
    count = Tensor.from_numpy("COUNT", np.array([3], dtype=np.int32))
    stream = await answers(conn.send, InferRequest("repeat", [count]))
    assert [r.final for r in stream][-1] and all(r.error is None for r in stream)
    assert sum(1 for r in stream if r.outputs) == 3
    assert server.served == 4
    conn.writer.close()


async def test_a_refused_request_gets_the_core_s_error(
    replica: tuple[DirectServer, Endpoint],
) -> None:
    _, ep = replica
    conn = await connect(ep, WAIT_S)
    [resp] = await answers(conn.send, InferRequest("nope", []))
    assert resp.error is not None and resp.error.code == ErrorCode.NOT_FOUND
    assert "nope" in resp.error.message
    conn.writer.close()


async def test_a_wrong_token_is_hung_up_on(replica: tuple[DirectServer, Endpoint]) -> None:
    server, ep = replica
    conn = await connect(Endpoint(ep.node, ep.ip, ep.port, b"x" * len(ep.token)), WAIT_S)
    try:  # hung up on before or after the request went out
        [resp] = await answers(conn.send, add_sub([1, 2, 3, 4]))
        assert resp.error is not None and resp.error.code == ErrorCode.UNAVAILABLE
    except ConnectionError:
        pass
    await asyncio.wait_for(_until(lambda: conn.broken), WAIT_S)
    assert server.served == 0


async def test_a_replica_that_goes_away_ends_its_requests(
    replica: tuple[DirectServer, Endpoint], tmp_path: Path
) -> None:
    """A stream under way when the connection breaks ends with an error response on the
    caller's side, and the replica cancels it (its model sees ``is_cancelled()``); a cancel
    of a finished request tells nobody."""
    _, ep = replica
    conn = await connect(ep, WAIT_S)
    [done] = await answers(conn.send, add_sub([1, 2, 3, 4]))
    assert done.error is None and not conn.cancel(0)  # answered already
    responses = Responses()
    got = responses.got
    marker = tmp_path / "cancelled"
    count = Tensor.from_numpy("COUNT", np.array([100_000], dtype=np.int32))
    params = {"delay_ms": 5, "marker": str(marker)}
    conn.send(InferRequest("http_stream", [count], parameters=params), responses)
    await asyncio.wait_for(_until(lambda: len(got) >= 2), WAIT_S)
    conn.writer.transport.abort()  # as if the replica's process died
    await asyncio.wait_for(responses.ended.wait(), WAIT_S)
    last = got[-1]
    assert last.final and last.error is not None and "went away" in last.error.message
    await asyncio.wait_for(_until(lambda: marker.exists() and marker.read_text()), WAIT_S)
    assert marker.read_text().startswith("cancelled after")


async def _until(check: object) -> None:
    while not check():  # type: ignore[operator]
        await asyncio.sleep(0.01)
