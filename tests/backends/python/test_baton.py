"""ReadBaton over a real socket pair: the waiting thread reads its own frames, the reader
thread steps in only when it must, and every wait is bounded.

The tests look at which thread holds the baton (``_holder``) to send a frame only once the
thread meant to read it holds it or waits for it: sending earlier would race."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from modelyard.backends.python.protocol import framing as ipc
from modelyard.backends.python.worker import baton as baton_mod
from modelyard.backends.python.worker.baton import ReadBaton
from tests.helpers import wait_until


class Rig:
    def __init__(self) -> None:
        self.ours, self.peer = socket.socketpair()
        self.chan = ipc.BlockingChannel(self.ours)
        # (message, ident of the thread that read it, monotonic time it was read)
        self.seen: list[tuple[Any, int, float]] = []
        self.lock = threading.Lock()
        self.baton = ReadBaton(self.chan, self.ours.fileno(), self.dispatch)
        self.reader: threading.Thread | None = None

    def dispatch(self, msg: tuple[Any, ...] | None) -> bool:
        with self.lock:
            self.seen.append((msg, threading.get_ident(), time.monotonic()))
        return msg is not None

    def start_reader(self) -> threading.Thread:
        self.reader = threading.Thread(target=self.baton.run_reader, daemon=True)
        self.reader.start()
        return self.reader

    def send(self, *msg: Any) -> None:
        self.peer.sendall(ipc.encode(msg))

    def got(self, tag: str) -> bool:
        with self.lock:
            return any(m is not None and m[0] == tag for m, _, _ in self.seen)

    def waiter(self, tag: str) -> tuple[threading.Thread, list[bool]]:
        """A thread waiting (5 s at most) for the frame ``tag``; wait_for's result lands in
        the list."""
        result: list[bool] = []
        thread = threading.Thread(
            target=lambda: result.append(self.baton.wait_for(lambda: self.got(tag), 5))
        )
        thread.start()
        return thread, result

    def holds(self, thread: threading.Thread) -> bool:
        return thread.ident is not None and self.baton._holder == thread.ident

    def send_to(
        self, waiter: tuple[threading.Thread, list[bool]], tag: str, following: bool = False
    ) -> int:
        """Send ``tag`` once the waiter holds the baton (or, ``following``, waits for another
        thread to hand it over); the ident of the thread that read it."""
        if following:
            wait_until(lambda: self.baton._followers > 0, what="the waiter to follow")
        else:
            wait_until(lambda: self.holds(waiter[0]), what="the waiter to hold the baton")
        self.send(tag)
        waiter[0].join(5)
        assert waiter[1] == [True]
        return self.reader_of(tag)

    def reader_of(self, tag: str) -> int:
        with self.lock:
            return next(t for m, t, _ in self.seen if m is not None and m[0] == tag)

    def read_at(self, tag: str) -> float:
        with self.lock:
            return next(at for m, _, at in self.seen if m is not None and m[0] == tag)


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.peer.close()
    r.baton.wait_for(lambda: False, 1.0)  # reads the end of the stream: the reader thread ends
    if r.reader is not None:
        r.reader.join(5)
        assert not r.reader.is_alive()
    r.ours.close()


def test_the_waiting_thread_reads_its_own_frame(rig: Rig) -> None:
    rig.start_reader()
    waiter = rig.waiter("a")
    assert rig.send_to(waiter, "a") == waiter[0].ident  # no hand-off from the reader thread


def test_the_reader_thread_stays_out_while_the_main_thread_is_briefly_busy(rig: Rig) -> None:
    rig.start_reader()
    before_busy = time.monotonic()
    rig.baton.busy()
    rig.send("early")
    # A long run lets the reader thread read (cancellations, metrics requests)...
    wait_until(lambda: rig.got("early"), interval=0.001)
    assert rig.reader is not None and rig.reader_of("early") == rig.reader.ident
    # ... but not before the main thread has been busy LONG_RUN_S: until then the frame was
    # left in the socket for the main thread (load can only make the reader later).
    assert rig.read_at("early") - before_busy >= baton_mod.LONG_RUN_S


def test_a_waiter_takes_the_baton_from_the_reader_thread(rig: Rig) -> None:
    rig.start_reader()
    rig.baton.busy()
    rig.send("x")
    wait_until(lambda: rig.got("x"), interval=0.001)  # the reader thread holds the baton now
    rig.baton.idle()
    waiter = rig.waiter("y")  # the reader thread steps aside before "y" is sent
    assert rig.send_to(waiter, "y") == waiter[0].ident


def test_urgent_waiters_make_the_reader_thread_read_at_once(rig: Rig) -> None:
    rig.start_reader()
    rig.baton.urgent(1)
    rig.send("reply")
    # Nobody else reads and the main thread is not busy: only urgency makes the reader read.
    wait_until(lambda: rig.got("reply"), interval=0.001)
    assert rig.reader is not None and rig.reader_of("reply") == rig.reader.ident
    rig.baton.urgent(-1)


def test_a_follower_wakes_when_the_reader_delivers_its_frame(rig: Rig) -> None:
    holder_done = threading.Event()
    holder = threading.Thread(target=lambda: rig.baton.wait_for(holder_done.is_set, 5))
    holder.start()
    wait_until(lambda: rig.holds(holder))  # the holder reads; the follower must wait for it
    assert rig.send_to(rig.waiter("f"), "f", following=True) == holder.ident
    holder_done.set()
    rig.send("wake")  # the holder checks done() after each frame
    holder.join(5)
    assert not holder.is_alive()


def test_wait_for_times_out(rig: Rig) -> None:
    results: list[bool] = []
    waiter = threading.Thread(
        target=lambda: results.append(rig.baton.wait_for(lambda: False, 0.05))
    )
    waiter.start()
    waiter.join(30)  # a guard: nothing else would end the wait
    assert results == [False]


def test_the_end_of_the_stream_ends_every_wait(rig: Rig) -> None:
    reader = rig.start_reader()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(rig.baton.wait_for(lambda: False, 10)))
    waiter.start()
    wait_until(lambda: rig.holds(waiter))
    rig.peer.close()
    waiter.join(5)
    reader.join(5)
    assert results == [False]
    assert not reader.is_alive()
    assert any(m is None for m, _, _ in rig.seen)  # dispatch heard of the end of the stream


def test_a_waiter_and_the_reader_thread_do_not_fight_over_the_baton(rig: Rig) -> None:
    """The main thread stays busy (so the reader thread may read) while another thread keeps
    waiting for frames: the reader thread hands the baton over once, instead of taking it back
    each time (a race that burnt a core)."""
    rig.start_reader()
    rig.baton.busy()
    time.sleep(baton_mod.LONG_RUN_S * 3)
    stop = threading.Event()

    def peer() -> None:
        i = 0
        while not stop.is_set():
            rig.send(f"m{i}")
            i += 1
            time.sleep(0.001)

    sender = threading.Thread(target=peer, daemon=True)
    wall0, cpu0 = time.monotonic(), time.process_time()
    sender.start()
    try:
        for i in range(300):
            tag = f"m{i}"
            assert rig.baton.wait_for(lambda: rig.got(tag), 5)  # noqa: B023 (used at once)
    finally:
        stop.set()
        sender.join(5)
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    assert cpu < 0.6 * wall, f"{cpu:.2f} s of CPU in {wall:.2f} s"
