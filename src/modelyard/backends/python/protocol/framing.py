"""Framing for the server <-> worker channel (a Unix socket pair).

A frame is a 4-byte little-endian length and a pickle (protocol 5) of a plain tuple, a
message's wire form (messages.py). Large tensor payloads never travel in frames: they go
through the shared-memory pool (tensor_pool.py) and the frame carries a reference.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct("<I")
BURST = 32  # frames handled per turn of the server's event loop (see FrameProtocol)
MAX_FRAME = 1 << 31


def encode(wire: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(wire, protocol=5)
    return _HEADER.pack(len(body)) + body


class FrameProtocol(asyncio.Protocol):
    """Server side: decodes frames from the worker and hands each one (a message's wire form)
    to a callback."""

    def __init__(self, on_frame: Callable[[tuple[Any, ...]], None], on_lost: Callable[[], None]):
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._buf = bytearray()
        self._paused = False  # frames wait in _buf for the next turn of the loop
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if not self._paused:
            self._process(BURST)

    def _process(self, limit: int) -> None:
        """Handle up to ``limit`` complete frames. A model that streams fast fills one read
        with hundreds of frames: handling them all at once would hold the first response back
        until the last is decoded, so the rest wait a turn of the loop (reading paused)."""
        buf = self._buf
        pos = 0
        end = len(buf)
        done = 0
        while end - pos >= 4:
            (n,) = _HEADER.unpack_from(buf, pos)
            if end - pos - 4 < n:
                break
            if done == limit:
                del buf[:pos]
                if not self._paused and self.transport is not None:
                    self._paused = True
                    self.transport.pause_reading()
                asyncio.get_running_loop().call_soon(self._resume)
                return
            wire = pickle.loads(memoryview(buf)[pos + 4 : pos + 4 + n])
            pos += 4 + n
            done += 1
            self._on_frame(wire)
        if pos:
            del buf[:pos]
        if self._paused:
            self._paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

    def _resume(self) -> None:
        if self._paused:
            self._process(BURST)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._paused = False
        self._process(-1)  # what the worker wrote before it went away
        self._on_lost()

    def send(self, wire: tuple[Any, ...]) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("worker channel is closed")
        self.transport.write(encode(wire))


class BlockingChannel:
    """Worker side: blocking reads on one thread, thread-safe writes from any thread."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._wlock = threading.Lock()
        self._rbuf = bytearray()

    def send(self, wire: tuple[Any, ...]) -> None:
        data = encode(wire)
        with self._wlock:
            self._sock.sendall(data)

    def has_frame(self) -> bool:
        """Whether a whole frame is already buffered (poll would not report it)."""
        buf = self._rbuf
        return len(buf) >= 4 and len(buf) - 4 >= _HEADER.unpack_from(buf)[0]

    def recv(self) -> tuple[Any, ...] | None:
        """The next frame's content, or None when the server closed the channel."""
        if not self._fill(4):
            return None
        buf = self._rbuf
        (n,) = _HEADER.unpack_from(buf)
        if not self._fill(4 + n):
            return None
        with memoryview(buf) as view:  # decoded in place: no copy of the frame
            wire: tuple[Any, ...] = pickle.loads(view[4 : 4 + n])
        del buf[: 4 + n]
        return wire

    def _fill(self, n: int) -> bool:
        """Read until ``n`` bytes are buffered; False at the end of the stream."""
        buf = self._rbuf
        while len(buf) < n:
            chunk = self._sock.recv(max(65536, n - len(buf)))
            if not chunk:
                return False
            buf += chunk
        return True
