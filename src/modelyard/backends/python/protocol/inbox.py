"""Direct messages between worker processes.

A worker that runs a BLS request made by another worker sends the caller's reply to the
caller's inbox itself: the caller wakes one crossing sooner, and the server, which still
scheduled the request and gets its outcome (``Executed.direct``), relays nothing. An inbox is
a Unix datagram socket in a folder only the server's user may enter (``inbox_folder``); one
datagram holds one frame (framing.py). A reply that does not fit, or an inbox that cannot take
it now, goes the ordinary way, through the server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from typing import Any

import msgspec

from modelyard.backends.python.protocol import framing
from modelyard.backends.python.protocol.tensor_pool import process_alive

MAX_DATAGRAM = 64 * 1024  # larger replies travel through the server
_MAX_PATH = 100  # sun_path holds 108 bytes

_folder: str | None = None
_folder_lock = threading.Lock()


_PREFIX = "modelyard-inbox-"


def inbox_folder() -> str | None:
    """The server process's private folder for its workers' inboxes (made on first use,
    removed at exit, or by the next server when this one was killed); None when sockets
    cannot live there."""
    global _folder
    with _folder_lock:
        if _folder is None:
            _sweep()
            try:
                _folder = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")  # mode 0700
            except OSError:
                return None
            import atexit

            atexit.register(shutil.rmtree, _folder, True)
        return _folder


def remove_folder() -> None:
    """Remove this process's inbox folder now, for a process that may end without running
    its atexit handlers (a Ray replica is killed once its graceful shutdown is over)."""
    global _folder
    with _folder_lock:
        if _folder is not None:
            shutil.rmtree(_folder, ignore_errors=True)
            _folder = None


def _sweep() -> None:
    """Remove the inbox folders of servers that are gone."""
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if not name.startswith(_PREFIX):
                continue
            pid = name[len(_PREFIX) :].partition("-")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def inbox_path(name: str) -> str:
    """The inbox path for a worker named ``name`` ("" when there can be none)."""
    folder = inbox_folder()
    if folder is None:
        return ""
    path = os.path.join(folder, name)
    return path if len(path.encode()) <= _MAX_PATH else ""


class Inbox:
    """A worker's own inbox (read by whichever thread holds the read baton)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # left by a worker of this instance that died
        self._sock.bind(path)
        self._sock.setblocking(False)

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self) -> list[bytes]:
        """Every datagram waiting (none when there is none)."""
        out = []
        while True:
            try:
                out.append(self._sock.recv(MAX_DATAGRAM))
            except (BlockingIOError, InterruptedError):
                return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self._sock.close()


class Outbox:
    """Sends messages to other workers' inboxes, from any thread, never blocking."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._encoder = framing.new_encoder()
        self._lock = threading.Lock()

    def send(self, path: str, message: Any) -> bool:
        """Whether ``message`` went to the inbox at ``path`` (False: too large, the inbox is
        full or gone, or the message cannot be encoded: send it the ordinary way)."""
        try:
            with self._lock:
                data = framing.frame(self._encoder, message)
        except (msgspec.EncodeError, TypeError, ValueError, OverflowError):
            return False
        if len(data) > MAX_DATAGRAM:
            return False
        try:
            self._sock.sendto(data, path)
        except OSError:
            return False
        return True
