"""ReadBaton over a real socket pair: the waiting thread reads its own frames, the reader
thread steps in only when it must, and every wait is bounded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from modelyard.backends.python.protocol import framing as ipc
from modelyard.backends.python.worker import baton as baton_mod
from modelyard.backends.python.worker.baton import ReadBaton


class Rig:
    def __init__(self) -> None:
        self.ours, self.peer = socket.socketpair()
        self.chan = ipc.BlockingChannel(self.ours)
        self.seen: list[tuple[Any, int]] = []  # (message, ident of the thread that read it)
        self.lock = threading.Lock()
        self.baton = ReadBaton(self.chan, self.ours.fileno(), self.dispatch)
        self.reader: threading.Thread | None = None

    def dispatch(self, msg: tuple[Any, ...] | None) -> bool:
        with self.lock:
            self.seen.append((msg, threading.get_ident()))
        return msg is not None

    def start_reader(self) -> threading.Thread:
        self.reader = threading.Thread(target=self.baton.run_reader, daemon=True)
        self.reader.start()
        return self.reader

    def send(self, *msg: Any) -> None:
        self.peer.sendall(ipc.encode(msg))

    def got(self, tag: str) -> bool:
        with self.lock:
            return any(m is not None and m[0] == tag for m, _ in self.seen)

    def waiter(self, tag: str) -> tuple[threading.Thread, list[bool]]:
        """A thread waiting (5 s at most) for the frame ``tag``; wait_for's result lands in
        the list."""
        result: list[bool] = []
        thread = threading.Thread(
            target=lambda: result.append(self.baton.wait_for(lambda: self.got(tag), 5))
        )
        thread.start()
        return thread, result

    def send_to(self, waiter: tuple[threading.Thread, list[bool]], tag: str) -> int:
        """Send ``tag`` once the waiter waits; the ident of the thread that read it."""
        time.sleep(0.05)
        self.send(tag)
        waiter[0].join(5)
        assert waiter[1] == [True]
        return self.reader_of(tag)

    def reader_of(self, tag: str) -> int:
        with self.lock:
            return next(t for m, t in self.seen if m is not None and m[0] == tag)


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


def wait_until(cond: Callable[[], bool], limit: float = 5.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.001)
    return cond()


def test_the_waiting_thread_reads_its_own_frame(rig: Rig) -> None:
    rig.start_reader()
    waiter = rig.waiter("a")
    assert rig.send_to(waiter, "a") == waiter[0].ident  # no hand-off from the reader thread


def test_the_reader_thread_stays_out_while_the_main_thread_is_briefly_busy(rig: Rig) -> None:
    rig.start_reader()
    rig.baton.busy()
    rig.send("early")
    time.sleep(baton_mod.LONG_RUN_S / 4)
    assert not rig.got("early")  # left in the socket for the main thread
    # ... but a long run lets the reader thread read (cancellations, metrics requests).
    assert wait_until(lambda: rig.got("early"))
    assert rig.reader is not None and rig.reader_of("early") == rig.reader.ident


def test_a_waiter_takes_the_baton_from_the_reader_thread(rig: Rig) -> None:
    rig.start_reader()
    rig.baton.busy()
    rig.send("x")
    assert wait_until(lambda: rig.got("x"))  # the reader thread holds the baton now
    rig.baton.idle()
    waiter = rig.waiter("y")  # the reader thread steps aside before "y" is sent
    assert rig.send_to(waiter, "y") == waiter[0].ident


def test_urgent_waiters_make_the_reader_thread_read_at_once(rig: Rig) -> None:
    rig.start_reader()
    rig.baton.urgent(1)
    t0 = time.monotonic()
    rig.send("reply")
    assert wait_until(lambda: rig.got("reply"))
    assert rig.reader is not None and rig.reader_of("reply") == rig.reader.ident
    assert time.monotonic() - t0 < 2.0
    rig.baton.urgent(-1)


def test_a_follower_wakes_when_the_reader_delivers_its_frame(rig: Rig) -> None:
    holder_done = threading.Event()
    holder = threading.Thread(target=lambda: rig.baton.wait_for(holder_done.is_set, 5))
    holder.start()
    time.sleep(0.05)  # the holder reads; the follower must wait for it
    assert rig.send_to(rig.waiter("f"), "f") == holder.ident
    holder_done.set()
    rig.send("wake")  # the holder checks done() after each frame
    holder.join(5)
    assert not holder.is_alive()


def test_wait_for_times_out(rig: Rig) -> None:
    t0 = time.monotonic()
    assert rig.baton.wait_for(lambda: False, 0.05) is False
    assert time.monotonic() - t0 < 2.0


def test_the_end_of_the_stream_ends_every_wait(rig: Rig) -> None:
    reader = rig.start_reader()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(rig.baton.wait_for(lambda: False, 10)))
    waiter.start()
    time.sleep(0.05)
    rig.peer.close()
    waiter.join(5)
    reader.join(5)
    assert results == [False]
    assert not reader.is_alive()
    assert any(m is None for m, _ in rig.seen)  # dispatch heard of the end of the stream


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
