"""One HTTP connection: uvicorn's httptools protocol with the frontend's limits enforced.

Everything here happens before or beside the ASGI application, where uvicorn itself puts no
bound (see ``limits.py`` for the limits and their messages):

* more open connections than ``max_connections``: the new one is answered 503 at once, its
  write side shut, and it is closed when the client closes (or after a short linger);
* a request head over ``max_header_size``: 431, whether it is still arriving (counted in
  raw bytes) or complete (request line and header fields);
* a body over ``max_body_size``: 413, from ``Content-Length`` before any of it is read, or
  while a chunked body arrives;
* no bytes for ``read_timeout`` seconds while a request is being received, or before a new
  connection's first request: 408. A body the application has not read yet (uvicorn pauses
  reading) does not count against the client;
* ``idle_timeout``: uvicorn's keep-alive timeout between requests.

With ``keep_header_case`` (``--http-header-forward-pattern``), a request's header names as
the client wrote them are kept beside uvicorn's lower-cased ones (``HEADER_NAMES_KEY``).

Each answer is ``{"error": ...}`` with ``connection: close``, then the server shuts its side
and drops what the client still sends until the client closes (at most REJECT_LINGER_S): a
client still sending a refused body reads the answer rather than a reset. A response the
application has started already is never interleaved with one. When the
client goes away while its request runs, the task a handler registered with
``Request.cancel_on_disconnect`` is cancelled (an inference then ends CANCELLED in the core).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from modelyard.frontends.header_forward import HEADER_NAMES_KEY
from modelyard.frontends.http import limits as msg
from modelyard.frontends.http.errors import error_body
from modelyard.frontends.http.limits import HttpLimits
from modelyard.frontends.http.request_response import CANCEL_TASK_KEY, CLIENT_GONE_KEY

log = logging.getLogger("modelyard")

# How long a refused connection stays open, its write side shut, dropping what the client
# still sends, so that the client reads the answer instead of a reset (it is closed sooner
# when the client closes).
REJECT_LINGER_S = 2.0
_HEAD = b"HTTP/1."


class _CoalescingTransport:
    """A transport that holds a response head back until the write that follows it.

    uvicorn writes a response's head (``http.response.start``) and its body in two
    ``write()`` calls, and uvloop sends each at once: two syscalls and two segments, and the
    client wakes up for a head without its body. Here a head is kept until the next write in
    the same loop iteration and both go out in one ``writelines()`` (one ``writev``); a
    ``call_soon`` flushes a head that nothing follows. Everything else is delegated.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: Any) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif data[:7] == _HEAD:
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def is_closing(self) -> bool:  # called once per request: not through __getattr__
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Reject(Exception):
    """Raised from a parser callback: answer ``status`` with ``message`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error_response(status: int, message: str) -> bytes:
    body = error_body(message)
    head = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    return STATUS_LINE[status] + head % len(body) + body


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with ``limits`` (a class attribute: see protocol_class)."""

    limits: HttpLimits = HttpLimits()
    keep_header_case = False
    # Per server (see protocol_class): True while connections are being refused, so that a
    # flood logs one warning, not one per connection.
    refusing: list[bool] = [False]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused: asyncio.TimerHandle | None = None  # over the cap: never accepted
        self._lingering: asyncio.TimerHandle | None = None  # answered: closes after a linger
        self._reading = True  # a request (or a new connection's first) is being received
        self._in_head = True  # the parser waits for (the rest of) a request head
        self._head_bytes = 0  # raw bytes received for an incomplete head
        self._body_bytes = 0
        self._last_read = 0.0
        self._read_timer: asyncio.TimerHandle | None = None
        self._active: RequestResponseCycle | None = None  # the cycle whose task runs

    # -- connections -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._refuse(transport)
            return
        self.refusing[0] = False
        super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self._last_read = self.loop.time()
        self._read_timer = self.loop.call_later(self.limits.read_timeout, self._check_read)

    def _refuse(self, transport: asyncio.Transport) -> None:
        """Over the connection limit: answer 503 without reading the request (it is read and
        dropped, so closing sends FIN rather than a reset that could destroy the answer)."""
        self.transport = transport
        if not self.refusing[0]:
            self.refusing[0] = True
            log.warning(
                "HTTP connections refused: the limit of %d open connections is reached "
                "(--http-max-connections)",
                self.limits.max_connections,
            )
        transport.write(_error_response(503, msg.too_many_connections(self.limits.max_connections)))
        self._refused = self._linger(transport)

    def _linger(self, transport: Any) -> asyncio.TimerHandle | None:
        """Shut the write side after an answer and close after REJECT_LINGER_S (data_received
        drops what arrives meanwhile); close at once where half-closing is not possible."""
        if not transport.can_write_eof():
            transport.close()
            return None
        transport.write_eof()
        return self.loop.call_later(REJECT_LINGER_S, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused is not None:
            self._refused.cancel()
            return
        if self._lingering is not None:
            self._lingering.cancel()
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        active = self._active
        super().connection_lost(exc)
        if active is not None and not active.response_complete:
            active.disconnected = True
            active.message_event.set()
            task = active.scope.pop(CANCEL_TASK_KEY, None)  # type: ignore[misc]
            if task is not None and not task.done():
                active.scope[CLIENT_GONE_KEY] = True  # type: ignore[literal-required]
                task.cancel()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._active = cycle
        super()._start_asgi_task(cycle, app)

    # -- reading ---------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refused is not None or self._lingering is not None:
            return  # answered already: drop what the client still sends
        self._unset_keepalive_if_required()
        self._last_read = self.loop.time()
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, _Reject):
                self._reject(e.__context__.status, e.__context__.message)
                return
            message = "Invalid HTTP request received."
            log.debug("%s: %s", message, e)
            self.send_400_response(message)
            return
        if self._in_head and self._head_bytes > self.limits.max_header_size:
            self._reject(431, msg.header_too_large(self.limits.max_header_size))
        elif self._reading and self._read_timer is None:
            self._read_timer = self.loop.call_later(self.limits.read_timeout, self._check_read)

    def _check_read(self) -> None:
        self._read_timer = None
        if not self._reading or self._lingering is not None or self.transport.is_closing():
            return
        timeout = self.limits.read_timeout
        now = self.loop.time()
        if self.flow.read_paused:  # the application has not taken the body yet
            self._last_read = now
        waited = now - self._last_read
        if waited >= timeout:
            self._reject(408, msg.read_timed_out(timeout))
        else:
            self._read_timer = self.loop.call_later(timeout - waited, self._check_read)

    def _reject(self, status: int, message: str) -> None:
        """Answer ``status`` unless a response to this request has started; then close."""
        cycle = self.cycle
        if self._in_head:  # no cycle for this request yet: the previous one must be done
            can_write = cycle is None or cycle.response_complete
        else:
            can_write = cycle is not None and not cycle.response_started
        for running in (cycle, self._active):
            if running is not None and not running.response_complete:
                running.disconnected = True
                running.message_event.set()
        log.debug("HTTP request refused (%d): %s", status, message)
        if can_write:
            self.transport.write(_error_response(status, message))
            self._lingering = self._linger(self.transport)
            self.flow.resume_reading()  # drain what the client still sends
        else:
            self.transport.close()

    # -- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reading = True
        super().on_message_begin()
        if self.keep_header_case:
            self._names: list[bytes] = []
            self.scope[HEADER_NAMES_KEY] = self._names  # type: ignore[literal-required]

    def on_headers_complete(self) -> None:
        limits = self.limits
        size = len(self.url)
        length = -1
        for name, value in self.headers:
            size += len(name) + len(value) + 4  # ": " and CRLF
            if name == b"content-length" and value.isdigit():
                length = int(value)
        if size > limits.max_header_size:
            raise _Reject(431, msg.header_too_large(limits.max_header_size))
        if length > limits.max_body_size:
            raise _Reject(413, msg.body_too_large(limits.max_body_size, length))
        self._in_head = False
        self._body_bytes = 0
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_size:  # chunked: no Content-Length
            raise _Reject(413, msg.body_too_large(self.limits.max_body_size))
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._reading = False
        self._in_head = True
        self._head_bytes = 0
        super().on_message_complete()


class _CaseKeepingProtocol(LimitedProtocol):
    """Records each header's name as the client wrote it (a subclass of its own: the parser
    calls ``on_header`` for every header of every request, and most servers need no names)."""

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._names.append(name)


def protocol_class(limits: HttpLimits, keep_header_case: bool = False) -> type[LimitedProtocol]:
    """A protocol class bound to ``limits`` (uvicorn instantiates it per connection)."""
    attributes = {"limits": limits, "refusing": [False], "keep_header_case": keep_header_case}
    base = _CaseKeepingProtocol if keep_header_case else LimitedProtocol
    return type("HttpProtocol", (base,), attributes)
