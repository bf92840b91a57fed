"""An event loop on a thread of its own, where one in-process instance's ``async def execute``
runs.

Triton's stub runs a model's coroutines on the stub's loop, apart from whatever delivers
their BLS responses, and models rely on it: a plain ``for`` over the stream an
``await async_exec(decoupled=True)`` returned waits for each response as it comes, and a
blocking ``exec()`` inside ``async def execute`` works. On the server's own loop both would
wait forever for responses that loop can no longer deliver. Here they block only the
instance's loop, as they block the stub's, and the server goes on serving.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from modelyard.event_loops import new_event_loop

log = logging.getLogger("modelyard")

T = TypeVar("T")

# How long a stopping loop gives the tasks a model left behind to end once cancelled.
_STOP_S = 5.0


class ModelLoop:
    """A started event loop on a daemon thread; ``run`` awaits a coroutine on it from
    another loop; ``close`` cancels what is left and ends the thread."""

    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()  # (the server's kind: uvloop's wake-ups cost less)
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            if left:
                gathered = asyncio.gather(*left, return_exceptions=True)
                self.loop.run_until_complete(asyncio.wait_for(gathered, _STOP_S))
        except Exception:  # tasks that would not end: the loop is dropped with them
            log.debug("an in-process model's loop stopped with tasks left", exc_info=True)
        finally:
            self.loop.close()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this loop and await its result from the calling loop (cancelling
        the caller cancels it there)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # closed meanwhile
            return
        self._thread.join(_STOP_S * 2)
