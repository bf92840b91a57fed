"""Small ASGI helpers shared by the HTTP handlers: the request view, body reading, responses.

Headers are ASGI's: lower-case byte names and byte values. A response is sent as one
``http.response.start`` (pre-built header tuples plus ``content-length``) and one
``http.response.body`` (or one per part for large zero-copy bodies).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import orjson

from modelyard.errors import ModelyardError
from modelyard.frontends.http.errors import error_body, http_status

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]
Buffer = bytes | bytearray | memoryview

# Scope keys shared with the connection (connection.py): the task to cancel when the client
# disconnects, and the mark that it was cancelled for that reason.
CANCEL_TASK_KEY = "modelyard.cancel_on_disconnect"
CLIENT_GONE_KEY = "modelyard.client_gone"

JSON_HEADERS: Headers = [(b"content-type", b"application/json")]
TEXT_HEADERS: Headers = [(b"content-type", b"text/plain")]


class ClientGone(Exception):
    """The client disconnected before its request was answered: there is no one to reply to."""


class Request:
    """One HTTP request: the ASGI scope and channels, and header lookup by lower-case name."""

    __slots__ = ("_headers", "method", "receive", "scope", "send", "started")

    def __init__(self, scope: Scope, receive: Receive, send: Send):
        self.scope = scope
        self.receive = receive
        self.send = send
        self.method: str = scope["method"]
        self.started = False  # set once a handler has sent http.response.start itself
        self._headers: dict[bytes, bytes] | None = None

    def cancel_on_disconnect(self) -> None:
        """Cancel the running handler if the client disconnects before its response is
        complete (for inference: the core then cancels the request, queued or running)."""
        self.scope[CANCEL_TASK_KEY] = asyncio.current_task()

    def client_gone(self) -> bool:
        """True once the handler was cancelled because its client disconnected."""
        return bool(self.scope.get(CLIENT_GONE_KEY))

    def header(self, name: bytes) -> str | None:
        """A request header's value (``name`` lower-case), or None."""
        headers = self._headers
        if headers is None:
            headers = self._headers = dict(self.scope["headers"])
        value = headers.get(name)
        return None if value is None else value.decode("latin-1")


async def read_body(request: Request) -> bytes:
    """The whole request body, joined once from the ASGI chunks (no copy for one chunk).

    Memory follows the bytes actually received (a client cannot reserve memory by announcing
    a huge Content-Length). ``Expect: 100-continue`` is answered by the server on the first
    ``receive()``. A client that disconnects mid-body raises ClientGone.
    """
    receive = request.receive
    message = await receive()
    if message["type"] != "http.request":
        raise ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class Response:
    """A complete response: status, headers (without content-length) and body.

    ``body`` is one buffer, or a list of buffers sent one ``http.response.body`` each (large
    binary outputs: zero-copy views, never joined).
    """

    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        body: Buffer | Sequence[Buffer] = b"",
        status: int = 200,
        headers: Headers = TEXT_HEADERS,
    ):
        self.body = body
        self.status = status
        self.headers = headers

    async def send(self, send: Send) -> None:
        body = self.body
        if isinstance(body, (bytes, bytearray)):
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status,
                    "headers": [*self.headers, (b"content-length", b"%d" % len(body))],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        # The server counts len() of each part against content-length: byte-format views only.
        parts = [_bytes_view(p) for p in ((body,) if isinstance(body, memoryview) else body)]
        length = sum(len(p) for p in parts)
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [*self.headers, (b"content-length", b"%d" % length)],
            }
        )
        last = len(parts) - 1
        for i, part in enumerate(parts):
            await send({"type": "http.response.body", "body": part, "more_body": i < last})
        if last < 0:
            await send({"type": "http.response.body", "body": b""})


def _bytes_view(part: Buffer) -> Buffer:
    return part.cast("B") if isinstance(part, memoryview) and part.format != "B" else part


def json_response(body: bytes | str, status: int = 200) -> Response:
    data = body.encode("utf-8") if isinstance(body, str) else body
    return Response(data, status, JSON_HEADERS)


def json_value_response(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status, JSON_HEADERS)


def empty_response(status: int = 200, json: bool = False) -> Response:
    """An empty body; Triton labels it application/json on the JSON APIs."""
    return Response(b"", status, JSON_HEADERS if json else TEXT_HEADERS)


def error_response(error: ModelyardError, headers: Headers | None = None) -> Response:
    h = [*JSON_HEADERS, *headers] if headers else JSON_HEADERS
    return Response(error_body(error.message), http_status(error), h)


def message_response(message: str, status: int, json: bool = True) -> Response:
    return Response(error_body(message), status, JSON_HEADERS if json else TEXT_HEADERS)
