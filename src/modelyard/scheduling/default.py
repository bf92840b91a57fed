"""The default scheduler: each request runs alone on the next free instance.

Requests wait in a bounded FIFO when every instance is busy. Each batch runs in its own task
so a caller that goes away cannot interrupt an instance halfway through a batch.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable

from modelyard.backends.base import Instance, RequestContext
from modelyard.core.stats import ModelStats
from modelyard.errors import Unavailable
from modelyard.scheduling.base import BatchTasks, DeadlockCheck, run_batch


class DefaultScheduler(DeadlockCheck, BatchTasks):
    def __init__(self, model_name: str, instances: list[Instance], max_queue_size: int = 0):
        self.model_name = model_name
        self._instances = instances
        self._idle: collections.deque[Instance] = collections.deque(instances)
        self._queue: collections.deque[RequestContext] = collections.deque()
        self._max_queue = max_queue_size or 1_000_000
        self.stats: ModelStats | None = None  # set by the core; executions counted per batch
        self._init_tasks()
        # Idle instances may also be claimed from in-process model threads (direct BLS calls),
        # so the idle set and the queue change under this lock.
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pending(self) -> int:
        return len(self._queue)

    @property
    def inflight(self) -> int:
        return len(self._tasks) + len(self._queue)

    def submit(self, ctx: RequestContext) -> None:
        """Hand a validated request over; its responses arrive through ``ctx.send``."""
        if self._closed:
            raise Unavailable(f"model '{self.model_name}' is unloading")
        ctx.t_queued = time.monotonic_ns()
        ctx.scheduler = self
        self._loop = asyncio.get_running_loop()
        with self._lock:
            instance = self._idle.popleft() if self._idle and not self._queue else None
        if instance is not None:
            self._start(instance, [ctx])
            return
        if ctx.chain and all(i.name in ctx.chain for i in self._instances):
            raise Unavailable(
                f"BLS deadlock: every instance of model '{self.model_name}' "
                f"({', '.join(sorted(i.name for i in self._instances))}) is waiting on this request "
                f"(chain: {' -> '.join(sorted(ctx.chain))}); it could never run"
            )
        with self._lock:
            if len(self._queue) >= self._max_queue:
                raise Unavailable(f"exceeds maximum queue size for model '{self.model_name}'")
        self._check_deadlock(ctx)
        with self._lock:
            self._queue.append(ctx)
        self._dispatch()

    def _dispatch(self) -> None:
        while True:
            with self._lock:
                if not (self._idle and self._queue):
                    return
                ctx = self._queue.popleft()
                if ctx.cancelled or ctx.done:
                    continue
                instance = self._idle.popleft()
            self._start(instance, [ctx])

    def try_claim(self, accept: Callable[[Instance], bool]) -> Instance | None:
        """From any thread: take an idle instance that ``accept`` allows, if nothing is queued."""
        with self._lock:
            if self._closed or self._queue:
                return None
            for instance in self._idle:
                if accept(instance):
                    self._idle.remove(instance)
                    return instance
        return None

    def release_claimed(self, instance: Instance) -> None:
        """From any thread: give back an instance taken with ``try_claim``."""
        with self._lock:
            self._idle.append(instance)
            waiting = bool(self._queue)
        if waiting and self._loop is not None:
            self._loop.call_soon_threadsafe(self._dispatch)

    def _start(self, instance: Instance, batch: list[RequestContext]) -> None:
        self._loop = asyncio.get_running_loop()
        self._spawn(self._run(instance, batch))

    def _queued(self) -> int:
        return len(self._queue)

    async def _run(self, instance: Instance, batch: list[RequestContext]) -> None:
        try:
            await run_batch(instance, batch, self.stats)
        finally:
            with self._lock:
                self._idle.append(instance)
            self._dispatch()
