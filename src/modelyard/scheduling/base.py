"""What the core needs of a scheduler."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from modelyard.backends.base import Instance, RequestContext
from modelyard.core.stats import ModelStats
from modelyard.errors import InternalError, Unavailable
from modelyard.scheduling.deadlock import can_progress
from modelyard.types import InferResponse


class Scheduler(Protocol):
    @property
    def pending(self) -> int:
        """Requests queued, not yet running."""

    def submit(self, ctx: RequestContext) -> None:
        """Queue a validated request; raise ModelyardError to refuse it."""

    async def drain(self, timeout: float) -> bool:
        """Stop taking requests; wait (bounded) until queued and running ones finish."""


async def run_batch(
    instance: Instance, batch: list[RequestContext], stats: ModelStats | None
) -> None:
    """Run one batch on an instance: timing, per-batch statistics, and an error response for
    every request if the instance itself fails (a bug there must not strand the callers)."""
    if any(ctx.done for ctx in batch):  # cancelled after it left the queue: already answered
        batch = [ctx for ctx in batch if not ctx.done]
        if not batch:
            return
    now = time.monotonic_ns()
    for ctx in batch:
        ctx.t_start = now
    try:
        await instance.execute(batch)
        if stats is not None:
            # An instance that staged the batch behind another moved t_start to when it began.
            start = batch[0].t_start or now
            stats.record_execution(
                sum(ctx.batch_size for ctx in batch), time.monotonic_ns() - start
            )
    except Exception as e:
        err = InternalError(f"model instance '{instance.name}' failed: {e}")
        for ctx in batch:
            r = ctx.request
            ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=err))


class DeadlockCheck:
    """For schedulers over a fixed set of instances with an idle pool."""

    model_name: str
    _instances: list[Instance]
    _idle: Any

    def instances_busy(self) -> list[tuple[Instance, bool]]:
        idle = {id(i) for i in self._idle}
        return [(i, id(i) not in idle) for i in self._instances]

    def _check_deadlock(self, ctx: RequestContext) -> None:
        """A blocking BLS call that must queue: refuse it if it could never run."""
        if ctx.caller and not can_progress(ctx, self):
            raise Unavailable(
                f"BLS deadlock: every instance of model '{self.model_name}' "
                f"({', '.join(sorted(i.name for i in self._instances))}) is blocked, directly or "
                f"through other models, on calls that wait for this request from '{ctx.caller}'; "
                "it could never run"
            )


class BatchTasks:
    """Batches run as tasks (so a caller that goes away cannot interrupt an instance halfway);
    ``drain`` stops new requests and waits, bounded, until nothing is queued or running."""

    def _init_tasks(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._closed = False

    def _queued(self) -> int:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._drained.clear()
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks and not self._queued():
            self._drained.set()

    async def drain(self, timeout: float) -> bool:
        self._closed = True
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
