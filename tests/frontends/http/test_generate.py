"""``/generate`` and ``/generate_stream`` on the real server (http_text, http_echo, http_stream)."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.frontends.http.conftest import call
from tests.helpers import wait_until_async
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)

STREAM = "/v2/models/http_stream/generate_stream"


async def test_generate(frontend: ServerProcess, session: aiohttp.ClientSession) -> None:
    body = json.dumps({"id": "g1", "text_input": "hi", "parameters": {"max_tokens": 3}}).encode()
    status, h, raw = await call(session, frontend, "POST", "/v2/models/http_text/generate", body)
    assert status == 200 and h["Content-Type"] == "application/json"
    # Keys in sorted order; the model echoes the request parameters it got ("id" is one, as
    # every key that names no input) and the shape of its input as response parameters.
    assert raw == (
        b'{"id":"g1","input_shape":"[1]","max_tokens":3,"model_name":"http_text",'
        b'"model_version":"1","text_output":"HI"}'
    )


async def test_generate_fills_shapes_from_metadata(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    body = json.dumps({"IN": [1, 2, 3]}).encode()
    status, _, raw = await call(session, frontend, "POST", "/v2/models/http_echo/generate", body)
    assert (status, json.loads(raw)["OUT"]) == (200, [1.0, 2.0, 3.0])


async def test_generate_stream(frontend: ServerProcess, session: aiohttp.ClientSession) -> None:
    status, h, raw = await call(session, frontend, "POST", STREAM, b'{"COUNT":3}')
    assert status == 200 and h["Content-Type"] == "text/event-stream; charset=utf-8"
    assert h["Transfer-Encoding"] == "chunked"
    events = [json.loads(e.removeprefix(b"data: ")) for e in raw.split(b"\n\n") if e]
    assert [e["OUT"] for e in events] == [0, 1, 2]
    status, _, raw = await call(session, frontend, "POST", STREAM, b'{"COUNT":0}')
    assert (status, raw) == (200, b"")
    status, _, raw = await call(session, frontend, "POST", STREAM, b'{"COUNT":-1}')
    assert (status, raw) == (400, b'data: {"error":"negative count"}\n\n')


async def test_generate_stream_sends_each_response_as_it_comes(
    frontend: ServerProcess, tmp_path: Path
) -> None:
    # The model sends its later responses only once the gate opens: the first event can only
    # arrive before that if it is not buffered to the end.
    gate = tmp_path / "gate"
    body = json.dumps({"COUNT": 3, "parameters": {"gate": str(gate)}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", frontend.ports["http"])
    try:
        writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                     % (STREAM.encode(), len(body), body))  # fmt: skip
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200")
        first = await asyncio.wait_for(reader.readuntil(b"\n\n"), 30)
        assert b'"OUT":0' in first
        gate.touch()
        rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 30)
        assert rest.count(b"data: ") == 2
    finally:
        gate.touch()
        writer.close()


async def test_client_disconnect_cancels_the_stream(
    frontend: ServerProcess, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled"
    body = json.dumps({"COUNT": 10_000, "parameters": {"delay_ms": 20, "marker": str(marker)}})
    reader, writer = await asyncio.open_connection("127.0.0.1", frontend.ports["http"])
    writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (STREAM.encode(), len(body), body.encode()))  # fmt: skip
    await asyncio.wait_for(reader.readuntil(b"data: "), 10)
    writer.close()  # the client goes away after the first event
    await wait_until_async(marker.exists, what="the model to see the cancellation")
    assert marker.read_text().startswith("cancelled after")  # the model saw the cancellation
    status, _, raw = await call(session, frontend, "POST", STREAM, b'{"COUNT":2}')
    assert status == 200 and raw.count(b"data: ") == 2


@pytest.mark.parametrize(
    ("path", "body", "status", "expected"),
    [
        ("/v2/models/http_stream/generate", b'{"COUNT":1}', 200, {"OUT": 0}),
        ("/v2/models/http_stream/generate", b'{"COUNT":2}', 200, {"error": "generate expects "
         "model to produce exactly 1 response, use generate stream for model that generates "
         "various number of responses"}),
        ("/v2/models/http_stream/generate", b'{"COUNT":-1}', 400, {"error": "negative count"}),
        ("/v2/models/nosuch/generate", b"{}", 404,
         {"error": "Request for unknown model: 'nosuch' is not found"}),
        ("/v2/models/nosuch/generate_stream", b"{}", 404,
         {"error": "Request for unknown model: 'nosuch' is not found"}),
        ("/v2/models/http_echo/generate", b'{"IN":[1,2],"parameters":5}', 500, {"error":
         "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as "
         "object"}),
        ("/v2/models/http_echo/generate", b'{"IN":[1],"x":{}}', 400, {"error": "parameter 'x' "
         "has invalid type. It should be either 'int', 'bool', or 'string'."}),
    ],
)  # fmt: skip
async def test_generate_results_and_errors(
    frontend: ServerProcess, session: aiohttp.ClientSession, path: str, body: bytes,
    status: int, expected: dict[str, Any],
) -> None:  # fmt: skip
    got_status, _, raw = await call(session, frontend, "POST", path, body)
    doc = json.loads(raw)
    assert got_status == status
    assert {k: doc[k] for k in expected} == expected


async def test_generate_rejects_compressed_bodies(
    frontend: ServerProcess, session: aiohttp.ClientSession
) -> None:
    status, _, raw = await call(session, frontend, "POST", "/v2/models/http_echo/generate",
                                gzip.compress(b"{}"), {"Content-Encoding": "gzip"})  # fmt: skip
    assert status == 400
    assert json.loads(raw)["error"] == "Unsupported content-encoding, only 'identity' is supported."
