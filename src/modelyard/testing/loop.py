"""The harness's event loop (the server's loop, on a thread of its own) and the process-wide
pb_utils runtime that threads a model starts use while harnesses are open."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import triton_python_backend_utils as pb


class LoopThread:
    """The harness's event loop (the server's loop, in a thread of its own)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name=f"modelyard-testing-{name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self.loop.close()


class Runtimes:
    """Threads a model starts have no runtime of their own; pb_utils gives them the process's
    (see pb_utils' _runtime.py). While handles are open it is the latest one's; once all are
    closed it is what it was before."""

    _lock = threading.Lock()
    _open: list[tuple[object, Any]] = []
    _before: Any = None

    @classmethod
    def push(cls, handle: object, runtime: Any) -> None:
        with cls._lock:
            if not cls._open:
                cls._before = pb.get_runtime()
            cls._open.append((handle, runtime))
            pb.set_runtime(runtime)

    @classmethod
    def pop(cls, handle: object) -> None:
        with cls._lock:
            cls._open = [(h, rt) for h, rt in cls._open if h is not handle]
            pb.set_runtime(cls._open[-1][1] if cls._open else cls._before)
