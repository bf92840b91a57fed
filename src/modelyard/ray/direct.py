"""A data path of modelyard's own between processes Ray placed: each replica listens on a TCP
port of its node, and frontends and other replicas send it requests over connections of their
own, with no Ray call per request (benchmarks/RESULTS.md: 0.2 ms a call on the development
machine, where Ray's cheapest call costs 2.8 ms and Serve's handle 5).

Serve still places, replaces and scales the replicas; a caller learns their endpoints by
asking every replica where it runs (Serve's ``broadcast``). What crosses a connection:

- first, from the caller, the replica's token (from that answer: only a process of the Ray
  cluster can learn it);
- then frames of a 4-byte length and a pickle: ``(REQUEST, id, InferRequest)`` or
  ``(CANCEL, id, None)`` from the caller, ``(id, InferResponse)`` from the replica (every
  response of a decoupled model, as it comes; the last one final).

A connection that breaks ends each of its requests with an error response (the replica died:
retry, as Ray's own path says) and its endpoint is dropped until the replicas are asked again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pickle
import secrets
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from modelyard.errors import ModelyardError, Unavailable
from modelyard.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer
    from modelyard.serving.context import RequestContext

log = logging.getLogger("modelyard")

REQUEST, CANCEL = 0, 1
_LENGTH = struct.Struct("!I")
TOKEN_BYTES = 16


def frame(value: Any) -> bytes:
    body = pickle.dumps(value, protocol=5)
    return _LENGTH.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> Any:
    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(size))


# -- the replica's side -------------------------------------------------------------------


class DirectServer:
    """A replica's port: runs each request a connection sends through the replica's core."""

    def __init__(self, core: InferenceServer) -> None:
        self.core = core
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.served = 0  # requests taken on this path (the dashboard's, the tests')
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self, host: str) -> None:
        self._server = await asyncio.start_server(self._connection, host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop_listening(self) -> None:
        """No new connections (the open ones still send requests: the core refuses them once
        it stops, and answers those under way)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def close(self) -> None:
        """No new connections, and the open ones closed (their requests cancelled)."""
        self.stop_listening()
        for writer in list(self._writers):
            writer.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        running: dict[int, RequestContext] = {}
        self._writers.add(writer)
        try:
            if await reader.readexactly(TOKEN_BYTES) != self.token:
                return
            while True:
                kind, rid, value = await read_frame(reader)
                if kind == CANCEL:
                    ctx = running.get(rid)
                    if ctx is not None:
                        ctx.cancel()
                    continue
                self.served += 1
                self._run(rid, value, writer, running)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:  # a caller that speaks something else: drop it
            log.exception("a direct connection to this replica failed")
        finally:
            for ctx in list(running.values()):  # the caller is gone: so are its requests
                if not ctx.done:
                    ctx.cancel()
            self._writers.discard(writer)
            writer.close()

    def _run(
        self,
        rid: int,
        request: InferRequest,
        writer: asyncio.StreamWriter,
        running: dict[int, RequestContext],
    ) -> None:
        def send(resp: InferResponse) -> None:
            if resp.final:
                running.pop(rid, None)
            if not writer.is_closing():
                writer.write(frame((rid, resp)))

        try:
            running[rid] = self.core.submit(request, send)
        except ModelyardError as e:  # refused before it ran: the core's words for it
            send(InferResponse(request.model_name, request.model_version, request.id, error=e))


# -- the caller's side --------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where one replica takes requests directly: its node, address, port and token."""

    node: str
    ip: str
    port: int
    token: bytes


@dataclass
class _Pending:
    on_response: Callable[[InferResponse], None]
    request: InferRequest


@dataclass
class Connection:
    """One connection to one replica; requests on it are told apart by id."""

    endpoint: Endpoint
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pending: dict[int, _Pending] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    reading: asyncio.Task[None] | None = None
    broken: bool = False
    closing: bool = False  # no new requests: closed once the last one is answered

    def send(self, request: InferRequest, on_response: Callable[[InferResponse], None]) -> int:
        """Send ``request``; its id. Raises (nothing sent) when the connection is broken or
        the request cannot be pickled."""
        if self.broken or self.writer.is_closing():
            raise ConnectionError("the connection to the replica is closed")
        rid = next(self.ids)
        data = frame((REQUEST, rid, request))
        self.pending[rid] = _Pending(on_response, request)
        self.writer.write(data)
        return rid

    def retire(self) -> None:
        """No new requests; closed once those under way are answered."""
        self.closing = True
        if not self.pending:
            self.writer.close()

    def cancel(self, rid: int) -> bool:
        """Tell the replica; True when the request was still under way (its responses from
        now on are dropped: the caller answers it as cancelled)."""
        if self.pending.pop(rid, None) is None:
            return False
        if not self.broken:
            self.writer.write(frame((CANCEL, rid, None)))
        if self.closing and not self.pending:
            self.writer.close()
        return True

    async def read(self) -> None:
        try:
            while True:
                rid, resp = await read_frame(self.reader)
                waiting = self.pending.get(rid)
                if waiting is None:
                    continue
                if resp.final:
                    del self.pending[rid]
                waiting.on_response(resp)
                if self.closing and not self.pending:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.broken = True
            self.writer.close()
            pending, self.pending = self.pending, {}
            for waiting in pending.values():
                r = waiting.request
                err = Unavailable(
                    f"model '{r.model_name}': the replica running the request went away "
                    "(Ray replaces it); retry the request"
                )
                waiting.on_response(InferResponse(r.model_name, r.model_version, r.id, error=err))


async def connect(endpoint: Endpoint, timeout: float) -> Connection:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(endpoint.ip, endpoint.port), timeout
    )
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    writer.write(endpoint.token)
    conn = Connection(endpoint, reader, writer)
    conn.reading = asyncio.get_running_loop().create_task(conn.read())
    return conn


# How often a caller that uses a deployment asks its replicas again where they take requests
# (replicas Serve added or replaced are found this late; a broken one is dropped at once).
REFRESH_S = 5.0
ASK_TIMEOUT_S = 5.0


class Routes:
    """The direct endpoints of one deployment's replicas, as its caller knows them: asked of
    the replicas (``endpoint``, Serve's broadcast) when used and older than ``REFRESH_S``;
    one connection per replica, opened in the background (until then calls take Serve's
    handle)."""

    def __init__(self, ask: Callable[[], Any], node: str) -> None:
        self._ask = ask  # () -> awaitable list of the replicas' endpoint() answers
        self.node = node  # the caller's Ray node: its replicas first
        self.conns: dict[Endpoint, Connection] = {}
        self._connecting: set[Endpoint] = set()
        self._endpoints: list[Endpoint] = []
        self._asked_at = -REFRESH_S
        self._asking: asyncio.Task[None] | None = None
        self._closed = False

    def pick(self) -> Connection | None:
        """A connection to a replica on this node if there is one, else any; the one with
        the fewest requests under way. None: none open yet (one is being set up)."""
        if self._closed:
            return None
        loop = asyncio.get_running_loop()
        if loop.time() - self._asked_at >= REFRESH_S and self._asking is None:
            self._asking = loop.create_task(self._refresh())
        best: Connection | None = None
        for local in (True, False):
            for ep in self._endpoints:
                if (ep.node == self.node) != local:
                    continue
                conn = self.conns.get(ep)
                if conn is None or conn.broken:
                    self._open(ep)
                elif best is None or len(conn.pending) < len(best.pending):
                    best = conn
            if best is not None:
                return best
        return None

    def _open(self, ep: Endpoint) -> None:
        if ep in self._connecting or self._closed:
            return
        self._connecting.add(ep)

        async def opening() -> None:
            try:
                self.conns[ep] = await connect(ep, ASK_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as e:
                log.debug("no direct connection to %s:%d: %s", ep.ip, ep.port, e)
                if ep in self._endpoints:
                    self._endpoints.remove(ep)
            finally:
                self._connecting.discard(ep)

        asyncio.get_running_loop().create_task(opening())

    async def _refresh(self) -> None:
        try:
            answers = await self._ask()
            found = [Endpoint(**a) for a in answers if isinstance(a, dict)]
            self._endpoints = found
            for ep in [ep for ep in self.conns if ep not in found]:  # gone from Serve's set
                self.conns.pop(ep).retire()
        except Exception as e:  # the deployment is going away; the handle still serves
            log.debug("asking the replicas for their endpoints failed: %s", e)
        finally:
            self._asked_at = asyncio.get_running_loop().time()
            self._asking = None

    def close(self) -> None:
        """No new requests; each connection closes once its requests are answered."""
        self._closed = True
        for conn in self.conns.values():
            conn.retire()
        self.conns.clear()
