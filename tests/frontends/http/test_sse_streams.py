"""Long and concurrent server-sent-event streams from ``/generate_stream`` (http_stream: COUNT
responses OUT = 0..COUNT-1), read incrementally with aiohttp as an SSE client would."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

STREAM = "/v2/models/http_stream/generate_stream"


async def _events(session: aiohttp.ClientSession, server: ServerProcess, count: int) -> list[Any]:
    """The events of one stream, parsed as they arrive (``data: <json>`` blocks)."""
    url = f"http://{server.http_url}{STREAM}"
    events: list[Any] = []
    buf = b""
    async with session.post(url, data=json.dumps({"COUNT": count}).encode()) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        async for chunk in r.content.iter_any():
            buf += chunk
            *blocks, buf = buf.split(b"\n\n")
            for block in blocks:
                assert block.startswith(b"data: ")
                events.append(json.loads(block[len(b"data: ") :]))
    assert buf == b""
    return events


async def test_1000_events_in_order(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    events = await asyncio.wait_for(_events(session, frontend, 1000), 60)
    assert [e["OUT"] for e in events] == list(range(1000))
    assert {e["model_name"] for e in events} == {"http_stream"}


async def test_20_concurrent_sse_streams(frontend: ServerProcess) -> None:
    counts = [50 + 5 * i for i in range(20)]
    async with aiohttp.ClientSession() as session:
        results = await asyncio.wait_for(
            asyncio.gather(*(_events(session, frontend, n) for n in counts)), 60
        )
    for n, events in zip(counts, results, strict=True):
        assert [e["OUT"] for e in events] == list(range(n))
