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
import ssl
from collections.abc import Generator
from typing import Any

import uvicorn

from modelyard.frontends.http.connection import protocol_class
from modelyard.frontends.http.limits import HttpLimits

_BACKLOG = 1024


class _Server(uvicorn.Server):
    """A uvicorn server that never touches signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass


def _bind(host: str, port: int, reuse_port: bool = False) -> list[socket.socket]:
    """Listening-ready sockets for every address ``host`` resolves to, all on one port
    (``reuse_port``: SO_REUSEPORT, shared with other servers that set it)."""
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
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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


async def serve_asgi(
    app: Any,
    host: str,
    port: int,
    limits: HttpLimits | None = None,
    tls: ssl.SSLContext | None = None,
    reuse_port: bool = False,
    keep_header_case: bool = False,
) -> AsgiServer:
    """Bind ``host:port`` and serve ``app`` (an ``async def app(scope, receive, send)``),
    each connection within ``limits`` (connection.py); over TLS with ``tls``;
    ``keep_header_case``: see connection.py."""
    limits = limits or HttpLimits()
    config = uvicorn.Config(
        app,
        loop="none",
        http=protocol_class(limits, keep_header_case),
        ws="none",
        lifespan="off",
        interface="asgi3",
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_keep_alive=limits.idle_timeout,  # type: ignore[arg-type]
        backlog=_BACKLOG,
    )
    config.load()
    if tls is not None:
        config.ssl = tls  # (what load() makes of uvicorn's own ssl_* settings)
    server = _Server(config)
    server.lifespan = config.lifespan_class(config)
    sockets = _bind(host, port, reuse_port)
    try:
        await server.startup(sockets=sockets)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return AsgiServer(server, sockets)
