"""Framing for the server <-> worker channel (a Unix socket pair).

A frame is a 4-byte little-endian length and a MessagePack body: a message (messages.py), or
any value MessagePack encodes. Each side decodes with the decoder it is given (the kinds it
expects, checked), or a plain one. Large tensor payloads never travel in frames: they go
through the shared-memory pool (tensor_pool.py) and the frame carries a reference.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from modelyard.backends.python.protocol.messages import enc_hook, ext_hook

log = logging.getLogger("modelyard")

_HEADER = struct.Struct("<I")
BURST = 32  # frames handled per turn of the server's event loop (see FrameProtocol)
MAX_FRAME = 1 << 31

Decode = Callable[[Any], Any]  # a frame's body (bytes or a memoryview) -> what it holds
decode_any: Decode = msgspec.msgpack.Decoder(ext_hook=ext_hook).decode  # lists for arrays


def new_encoder() -> msgspec.msgpack.Encoder:
    """An encoder for :func:`frame`. It keeps per-call state in itself: one per channel, used
    by one thread at a time (its enc_hook runs Python code, so another thread could run
    meanwhile)."""
    return msgspec.msgpack.Encoder(enc_hook=enc_hook)


def frame(encoder: msgspec.msgpack.Encoder, value: Any) -> bytearray:
    """A frame holding ``value``."""
    out = bytearray(4)
    encoder.encode_into(value, out, 4)
    _HEADER.pack_into(out, 0, len(out) - 4)
    return out


# What encoding a value MessagePack cannot hold raises (a str no UTF-8 can hold, an int past
# 64 bits, an object the enc_hook cannot pickle).
ENCODE_ERRORS = (msgspec.EncodeError, TypeError, ValueError, OverflowError)

_shared_encoder = new_encoder()
_shared_lock = threading.Lock()


def encode(value: Any) -> bytearray:
    """A frame holding ``value`` (from any thread)."""
    with _shared_lock:
        return frame(_shared_encoder, value)


def _undecodable(e: Exception) -> None:
    # A bug, never the model's doing: the frame is dropped and the channel goes on.
    log.error("dropped a frame of the worker channel that does not decode: %s", e)


class FrameProtocol(asyncio.Protocol):
    """Server side: decodes frames from the worker and hands what each holds to a callback."""

    def __init__(
        self,
        on_frame: Callable[[Any], None],
        on_lost: Callable[[], None],
        decode: Decode = decode_any,
    ):
        self._on_frame = on_frame
        self._decode = decode
        self._encoder = new_encoder()  # (the event loop's thread only)
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
            try:
                value = self._decode(memoryview(buf)[pos + 4 : pos + 4 + n])
            except (msgspec.DecodeError, ValueError) as e:
                _undecodable(e)
                pos += 4 + n
                continue
            pos += 4 + n
            done += 1
            self._on_frame(value)
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

    def send(self, value: Any) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("worker channel is closed")
        self.transport.write(frame(self._encoder, value))


class BlockingChannel:
    """Worker side: blocking reads on one thread, thread-safe writes from any thread."""

    def __init__(self, sock: socket.socket, decode: Decode = decode_any):
        self._sock = sock
        self._decode = decode  # (one thread reads at a time: see worker/baton.py)
        self._encoder = new_encoder()  # (under the write lock)
        self._wlock = threading.Lock()
        self._rbuf = bytearray()

    def send(self, value: Any) -> None:
        with self._wlock:
            self._sock.sendall(frame(self._encoder, value))

    def decode_datagram(self, data: bytes) -> Any:
        """What a datagram holding one frame holds (None when it does not decode)."""
        try:
            with memoryview(data) as view:
                return self._decode(view[4:])
        except (msgspec.DecodeError, ValueError) as e:
            _undecodable(e)
            return None

    def has_frame(self) -> bool:
        """Whether a whole frame is already buffered (poll would not report it)."""
        buf = self._rbuf
        return len(buf) >= 4 and len(buf) - 4 >= _HEADER.unpack_from(buf)[0]

    def recv(self) -> Any:
        """What the next frame holds, or None when the server closed the channel."""
        buf = self._rbuf
        while True:
            if not self._fill(4):
                return None
            (n,) = _HEADER.unpack_from(buf)
            if not self._fill(4 + n):
                return None
            try:
                with memoryview(buf) as view:  # decoded in place: no copy of the frame
                    return self._decode(view[4 : 4 + n])
            except (msgspec.DecodeError, ValueError) as e:
                _undecodable(e)
            finally:
                del buf[: 4 + n]

    def _fill(self, n: int) -> bool:
        """Read until ``n`` bytes are buffered; False at the end of the stream."""
        buf = self._rbuf
        while len(buf) < n:
            chunk = self._sock.recv(max(65536, n - len(buf)))
            if not chunk:
                return False
            buf += chunk
        return True
