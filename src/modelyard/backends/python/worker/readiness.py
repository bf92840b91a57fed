"""Worker side of a model's own ``is_ready()``: run on a thread of its own (as Triton's stub
runs it on its message-queue thread), so a check is answered while ``execute`` runs; an
``async def is_ready`` runs on the model's event loop. The server bounds the wait (5 s) and
keeps one check in flight (readiness.py)."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from modelyard.backends.python.protocol.error_text import format_exception
from modelyard.backends.python.protocol.messages import ErrorCode, Result


class StubReadiness:
    def __init__(self, stub: Any):
        self._stub = stub
        self._asks: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def ask(self, call_id: int) -> None:
        """From whichever thread read the request."""
        self._asks.put(call_id)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="modelyard-is-ready", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            call_id = self._asks.get()
            try:
                ready = self._check()
            except BaseException as e:  # the model's code may raise anything
                error = (format_exception(e), ErrorCode.INTERNAL)
                self._stub.reply(Result(call_id, None, error))
                continue
            self._stub.reply(Result(call_id, ready, None))

    def _check(self) -> Any:
        """What ``is_ready()`` returned (the server checks that it is a bool)."""
        stub = self._stub
        model = stub.model
        if model is None or not hasattr(model, "is_ready"):
            return True
        result = model.is_ready()
        if asyncio.iscoroutine(result):
            result = asyncio.run_coroutine_threadsafe(result, stub.event_loop()).result()
        return result
