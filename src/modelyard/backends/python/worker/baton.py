"""Which of a worker's threads reads the server channel (leader/followers).

Handing every frame from a dedicated reader thread to the thread that waits for it cost a
thread wake-up (40-60 us here) on each request's critical path, and the reader waking while
the model ran competed with it for the GIL and the CPU. So the thread that waits reads:

- the main thread, while it waits for its next command, so a request reaches it straight
  from the socket;
- a thread blocked in a sync BLS call (``exec``), until its reply has come;
- the reader thread only when nobody else reads and something must be read meanwhile:
  replies for the asyncio loop (which cannot block to read), or anything at all once the main
  thread has been running one command for LONG_RUN_S (cancellations, metrics requests).

A thread that wants the baton while the reader thread holds it wakes that thread (blocked in
``poll``) through a pipe. Whoever reads hands each message to ``dispatch``, the replies other
workers send to this one's inbox (protocol/inbox.py) as well as the server's frames.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from modelyard.backends.python.protocol.framing import BlockingChannel
from modelyard.backends.python.protocol.inbox import Inbox
from modelyard.backends.python.protocol.messages import BlsResponse

LONG_RUN_S = 0.002  # the reader thread reads once the main thread has been busy this long
IDLE_CHECK_S = 0.02  # while the main thread waits, the reader thread checks in this often
LINGER_S = 0.1  # after this long idle it stops checking in (busy() wakes it)


class ReadBaton:
    def __init__(
        self,
        chan: BlockingChannel,
        sock_fd: int,
        dispatch: Callable[[Any], bool],
        inbox: Inbox | None = None,
    ):
        self._chan = chan
        self._dispatch = dispatch
        self._inbox = inbox
        self._inbox_fd = inbox.fileno() if inbox is not None else -1
        self._cv = threading.Condition(threading.Lock())
        self._holder = 0  # ident of the thread reading, 0 for none
        self._reader = -1  # ident of the reader thread
        self._yield_asked = False  # the reader thread was asked to hand the baton over
        self._followers = 0  # threads waiting in wait_for while another one reads
        self._urgent = 0  # waiters that cannot read for themselves (the asyncio loop)
        self._busy_since = 0.0  # the main thread runs commands since (monotonic); 0: waiting
        self._idle_since = time.monotonic()
        self._parked = False  # the reader thread waits without a timeout
        self._eof = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poll_sock = select.poll()
        self._poll_sock.register(sock_fd, select.POLLIN)
        self._poll_both = select.poll()
        self._poll_both.register(sock_fd, select.POLLIN)
        self._poll_both.register(self._wake_r, select.POLLIN)
        if inbox is not None:
            self._poll_sock.register(self._inbox_fd, select.POLLIN)
            self._poll_both.register(self._inbox_fd, select.POLLIN)

    # -- any thread -----------------------------------------------------------------------

    def wait_for(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Block until ``done()`` (True) or ``timeout`` seconds (False), reading the channel
        while no other thread does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while True:
                if done():
                    return True
                if self._eof:
                    return False
                if not self._holder:
                    self._holder = threading.get_ident()
                    break
                if self._holder == self._reader and not self._yield_asked:
                    self._yield_asked = True
                    os.write(self._wake_w, b"\0")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._followers += 1
                try:
                    self._cv.wait(remaining)
                finally:
                    self._followers -= 1
        try:
            return self._read_until(done, deadline)
        finally:
            self._release()

    def _read_until(self, done: Callable[[], bool], deadline: float | None) -> bool:
        chan = self._chan
        while not done():
            if not chan.has_frame():
                if deadline is None:
                    events = self._poll_sock.poll()
                else:
                    left = deadline - time.monotonic()
                    events = self._poll_sock.poll(left * 1000.0) if left > 0 else []
                    if not events:
                        return done()
                if not self._readable(events):
                    continue  # only the inbox had something
            if not self._handle(chan.recv()):
                return done()
        return True

    def _readable(self, events: list[tuple[int, int]]) -> bool:
        """Handle what the inbox holds; whether the channel has something to read."""
        channel = False
        for fd, _ in events:
            if fd == self._inbox_fd:
                self._read_inbox()
            else:
                channel = True
        return channel

    def _read_inbox(self) -> None:
        assert self._inbox is not None
        for data in self._inbox.read():
            msg = self._chan.decode_datagram(data)
            if type(msg) is BlsResponse:  # the only thing other workers send
                self._handle(msg)

    def _handle(self, msg: Any) -> bool:
        ok = self._dispatch(msg)
        with self._cv:  # under the lock: a follower checks done() and waits atomically
            if not ok:
                self._eof = True
            if self._followers or not ok:
                self._cv.notify_all()
        return ok

    def _release(self) -> None:
        with self._cv:
            self._holder = 0
            if self._followers or self._urgent or self._parked:
                self._cv.notify_all()

    def urgent(self, delta: int) -> None:
        """Count a waiter that cannot read for itself (+1 when it starts, -1 when done)."""
        with self._cv:
            self._urgent += delta
            if delta > 0:
                self._cv.notify_all()

    # -- the main thread ------------------------------------------------------------------

    def busy(self) -> None:
        """The main thread runs a command (it reads nothing meanwhile)."""
        if not self._busy_since:
            with self._cv:
                self._busy_since = time.monotonic()
                if self._parked:
                    self._cv.notify_all()

    def idle(self) -> None:
        """The main thread is about to wait for its next command."""
        self._busy_since = 0.0
        self._idle_since = time.monotonic()

    # -- the reader thread ----------------------------------------------------------------

    def _should_read(self) -> bool:
        if self._urgent:
            return True
        since = self._busy_since
        return bool(since) and time.monotonic() - since >= LONG_RUN_S

    def run_reader(self) -> None:
        """The reader thread's loop; returns at the end of the stream."""
        self._reader = threading.get_ident()
        while True:
            with self._cv:
                while True:
                    if self._eof:
                        return
                    # Not while another thread waits for the baton: it was handed over to
                    # that thread (taking it back would make the two race for it).
                    if not self._holder and not self._followers and self._should_read():
                        self._holder = self._reader
                        self._yield_asked = False
                        break
                    # Wake-ups cost the main thread the GIL: only when a long run may be due.
                    now = time.monotonic()
                    since = self._busy_since
                    if since:
                        timeout: float | None = max(since + LONG_RUN_S - now, 0.0005)
                    elif now - self._idle_since > LINGER_S:
                        timeout = None
                    else:
                        timeout = IDLE_CHECK_S
                    self._parked = timeout is None
                    self._cv.wait(timeout)
                    self._parked = False
            try:
                if not self._read_while_wanted():
                    return
            finally:
                self._release()

    def _read_while_wanted(self) -> bool:
        chan = self._chan
        while True:
            if not chan.has_frame():
                readable = False
                for fd, _ in self._poll_both.poll():
                    if fd == self._wake_r:
                        try:
                            os.read(self._wake_r, 64)
                        except BlockingIOError:
                            pass
                    elif fd == self._inbox_fd:
                        self._read_inbox()
                    else:
                        readable = True  # data, or a hang-up that recv reports as the end
                if self._yield_asked:
                    return True
                if not readable:
                    continue
            if not self._handle(chan.recv()):
                return False
