"""Fixtures for the HTTP frontend tests: the real server (``python -m modelyard serve``) on the
``tests/models/http_*`` models in explicit mode, a raw aiohttp session and a
tritonclient.http.aio client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
import tritonclient.http.aio as aioclient
from multidict import CIMultiDict

from tests.conftest import Serving
from tests.serverproc import ServerProcess

# Loaded at start; py_init_error (fails to initialize) is in the repository but not loaded.
LOADED = ["http_add", "http_echo", "http_text", "http_stream", "http_raise", "http_decoupled"]
UNLOADED = ["py_init_error"]


@pytest.fixture(scope="module")
def frontend(serving: Serving) -> Iterator[ServerProcess]:
    repo = serving.repo([*LOADED, *UNLOADED])
    load = [f"--load-model={m}" for m in LOADED]
    with serving.server(repo, "--model-control-mode=explicit", *load, endpoints=("http",)) as srv:
        yield srv


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        yield s


@pytest.fixture
async def client(frontend: ServerProcess) -> AsyncIterator[aioclient.InferenceServerClient]:
    c = aioclient.InferenceServerClient(frontend.http_url)
    yield c
    await c.close()


async def call(
    session: aiohttp.ClientSession,
    server: ServerProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, CIMultiDict[str], bytes]:
    """One raw request: (status, case-insensitive headers, body as received)."""
    url = f"http://{server.http_url}{path}"
    headers = {"Accept-Encoding": "identity", **(headers or {})}
    async with session.request(method, url, data=body, headers=headers) as r:
        return r.status, CIMultiDict(r.headers), await r.read()
