"""What the OpenAI frontend's tests share: raw HTTP for the error cases (the official client
for everything else), and the flags that start the frontend on a free port."""

from __future__ import annotations

import http.client
import json
from typing import Any

from tests.serverproc import ServerProcess

OPENAI_FLAGS = ("--openai-port", "0", "--openai-address", "127.0.0.1")
BOUND_S = 30.0


def raw(
    server: ServerProcess,
    method: str,
    path: str,
    body: bytes | dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request to the OpenAI port."""
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["openai"], timeout=BOUND_S)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def error_of(body: bytes) -> dict[str, Any]:
    """The ``error`` object of an OpenAI error body (checked to have its four fields)."""
    doc = json.loads(body)
    assert set(doc) == {"error"}, doc
    error: dict[str, Any] = doc["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error
