"""Serve a raw ASGI callable with uvicorn (httptools) inside the running event loop.

The HTTP frontend and the metrics endpoint both use this. We bind the listening sockets
ourselves (port 0 works; the bound port is read back from the socket) and drive
``uvicorn.Server.startup`` directly instead of ``serve()``: no signal handlers (the
composition root owns signals), no logging configuration, no lifespan, and no 100 ms
housekeeping tick (it only refreshes the Date header, which Triton does not send either).
``close()`` drains in-flight requests event-driven, without polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Idle keep-alive connections stay open (tritonclient reuses its connections).
KEEP_ALIVE_S = 3630
_BACKLOG = 1024


class _Server(uvicorn.Server):
    """A uvicorn server that never touches signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass


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

    def is_closing(self) -> bool:  # called once per request: not through __getattr__
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Protocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        wrapped: Any = _CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(wrapped)


def _bind(host: str, port: int) -> list[socket.socket]:
    """Listening-ready sockets for every address ``host`` resolves to, all on one port."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[Any] = set()
    try:
        for family, kind, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # every address on the first one's port
                addr = (addr[0], sockets[0].getsockname()[1], *addr[2:])
            try:
                sock.bind(addr)
            except OSError as e:
                raise OSError(
                    e.errno,
                    f"error while attempting to bind on address {addr!r}: "
                    f"{(e.strerror or str(e)).lower()}",
                ) from None
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class AsgiServer:
    """A running uvicorn server: ``port`` is the bound port; ``close()`` stops it."""

    def __init__(self, server: uvicorn.Server, sockets: list[socket.socket]):
        self._server = server
        self._sockets = sockets
        self.port = int(sockets[0].getsockname()[1])

    async def close(self, grace: float = 1.0) -> None:
        """Stop accepting, close idle connections, let in-flight requests finish for up to
        ``grace`` seconds, then cancel what is left."""
        server = self._server
        for listener in getattr(server, "servers", ()):
            listener.close()
        for sock in self._sockets:
            sock.close()
        state = server.server_state
        # Idle connections close now; busy ones close after their current response.
        for connection in list(state.connections):
            connection.shutdown()
        tasks = set(state.tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(grace, 0.0))
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for connection in list(state.connections):
            connection.shutdown()


async def serve_asgi(app: Any, host: str, port: int) -> AsgiServer:
    """Bind ``host:port`` and serve ``app`` (an ``async def app(scope, receive, send)``)."""
    config = uvicorn.Config(
        app,
        loop="none",
        http=_Protocol,
        ws="none",
        lifespan="off",
        interface="asgi3",
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        backlog=_BACKLOG,
    )
    config.load()
    server = _Server(config)
    server.lifespan = config.lifespan_class(config)
    sockets = _bind(host, port)
    try:
        await server.startup(sockets=sockets)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return AsgiServer(server, sockets)
