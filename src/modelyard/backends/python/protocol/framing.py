"""Framing for the server <-> worker channel (a Unix socket pair).

A frame is a 4-byte little-endian length and a pickle (protocol 5) of a tuple whose first
item is the message kind. Large tensor payloads never travel in frames: they go through the
shared-memory pool (see shm.py) and the frame carries a reference.
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

# Message kinds, server -> worker.
AUTOCOMPLETE = "autocomplete"
INIT = "init"
EXECUTE = "execute"
FINALIZE = "finalize"
BLS_RESPONSE = "bls_response"  # a response (or error) for a BLS call the worker made
FREE = "free"  # shared-memory blocks the other side may reuse
CANCEL = "cancel"  # requests whose client went away
CONTROL_RESULT = "control_result"  # answer to a model-control call
METRICS = "metrics"  # (kind, call_id): the worker answers RESULT with its custom metrics
FORGET_REGIONS = "forget-regions"  # tokens of client shm regions unregistered (client_regions)
IS_READY = "is-ready"  # (kind, call_id): the worker answers RESULT with the model's is_ready()

# Message kinds, worker -> server.
READY = "ready"
RESULT = "result"  # answer to autocomplete / init / finalize: (kind, call_id, ok, payload)
RESPONSES = "responses"  # late results of an async execute: (kind, call_id, ok, payload)
ASYNC_ACCEPTED = "async-accepted"  # execute's RESULT when the model's coroutine runs on
SEND = "send"  # a response-sender response: (kind, request_key, payload, flags)
LOG = "log"
BLS = "bls"
BLS_CANCEL = "bls-cancel"  # (kind, call_id): ResponseIterator.cancel() of a decoupled BLS call
CONTROL = "control"  # load_model / unload_model / is_model_ready from a model


def encode(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, protocol=5)
    return _HEADER.pack(len(body)) + body


class FrameProtocol(asyncio.Protocol):
    """Server side: decodes frames from the worker and hands each message to a callback."""

    def __init__(self, on_message: Callable[[tuple[Any, ...]], None], on_lost: Callable[[], None]):
        self._on_message = on_message
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
            message = pickle.loads(memoryview(buf)[pos + 4 : pos + 4 + n])
            pos += 4 + n
            done += 1
            self._on_message(message)
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

    def send(self, message: tuple[Any, ...]) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("worker channel is closed")
        self.transport.write(encode(message))


class BlockingChannel:
    """Worker side: blocking reads on one thread, thread-safe writes from any thread."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._wlock = threading.Lock()
        self._rbuf = bytearray()

    def send(self, message: tuple[Any, ...]) -> None:
        data = encode(message)
        with self._wlock:
            self._sock.sendall(data)

    def has_frame(self) -> bool:
        """Whether a whole frame is already buffered (poll would not report it)."""
        buf = self._rbuf
        return len(buf) >= 4 and len(buf) - 4 >= _HEADER.unpack_from(buf)[0]

    def recv(self) -> tuple[Any, ...] | None:
        """Next message, or None when the server closed the channel."""
        header = self._read_exact(4)
        if header is None:
            return None
        (n,) = _HEADER.unpack(header)
        body = self._read_exact(n)
        if body is None:
            return None
        msg: tuple[Any, ...] = pickle.loads(body)
        return msg

    def _read_exact(self, n: int) -> bytes | bytearray | None:
        buf = self._rbuf
        while len(buf) < n:
            chunk = self._sock.recv(max(65536, n - len(buf)))
            if not chunk:
                return None
            buf += chunk
        out = bytes(buf[:n])
        del buf[:n]
        return out
