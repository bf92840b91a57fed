"""What the core needs of a scheduler."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from modelyard.backends.instance import Instance
from modelyard.errors import InternalError, ModelyardError, Unavailable
from modelyard.scheduling.rate_limiter import Gate
from modelyard.serving.context import RequestContext
from modelyard.serving.deadlock import can_progress
from modelyard.serving.stats import ModelStats
from modelyard.types import InferResponse


class Scheduler(Protocol):
    @property
    def pending(self) -> int:
        """Requests queued, not yet running."""

    def submit(self, ctx: RequestContext) -> None:
        """Queue a validated request; raise ModelyardError to refuse it."""

    def close(self, shutdown: bool = False) -> None:
        """Stop taking requests (``shutdown``: refuse them with Triton's text for a server
        that is stopping; otherwise the model is unloading)."""

    async def drain(self, timeout: float) -> bool:
        """Stop taking requests; wait (bounded) until queued and running ones finish."""

    def abort(self, queued: ModelyardError, running: ModelyardError) -> None:
        """Shutdown's deadline passed: answer every request still queued (``queued``) or
        running (``running``) at once."""


SHUTDOWN_REFUSAL = (
    "Server is stopping, scheduler for model has stopped accepting new inference requests"
)


def refusal(model_name: str, ctx: RequestContext, shutdown: bool) -> Unavailable:
    """The error for a request that arrives after the scheduler closed."""
    if shutdown:  # Triton: the request's log prefix, then the text
        return Unavailable(f"[request id: {ctx.request.id or '<id_unknown>'}] {SHUTDOWN_REFUSAL}")
    return Unavailable(f"model '{model_name}' is unloading")


def answer(contexts: Iterable[RequestContext], err: ModelyardError) -> None:
    """Send ``err`` as the final response of each request not answered yet."""
    for ctx in contexts:
        if not ctx.done:
            r = ctx.request
            ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=err))


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


def pick_instance(idle: collections.deque[Instance], instances: list[Instance]) -> Instance | None:
    """Take the idle instance the next batch goes to: the first healthy one. One that is not
    (its worker restarting) only while no instance of the model is healthy: it waits for a
    restart under way, or answers at once with the reason while restarts back off. None:
    wait for a busy healthy instance."""
    if not idle:
        return None
    first = idle[0]
    if first.healthy:
        return idle.popleft()
    for instance in idle:
        if instance.healthy:
            idle.remove(instance)
            return instance
    if any(i.healthy for i in instances):
        return None
    return idle.popleft()


def listen_for_health(instances: list[Instance], listener: Callable[[], None]) -> None:
    """Run ``listener`` when an instance is healthy again (requests may be waiting for it)."""
    for instance in instances:
        instance.health_listener = listener


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

    model_name: str

    def _init_tasks(self) -> None:
        # Running batch tasks and their requests (answered at once by ``abort``).
        self._tasks: dict[asyncio.Task[None], list[RequestContext]] = {}
        self._drained = asyncio.Event()
        self._drained.set()
        self._closed = False
        self._shutdown = False
        # The rate limiter's view of the instances (--rate-limit=execution_count), set by the
        # core after construction; None runs each batch as soon as an instance is free.
        self.gate: Gate | None = None

    def _queued(self) -> int:
        raise NotImplementedError

    def _take_queued(self) -> list[RequestContext]:
        """Remove and return every queued request."""
        raise NotImplementedError

    def _check_open(self, ctx: RequestContext) -> None:
        """Closed: refuse ``ctx``, unless the server is stopping and it was made by a request
        already accepted (a BLS call, an ensemble step), which it lets finish."""
        if self._closed and not (self._shutdown and ctx.nested):
            raise refusal(self.model_name, ctx, self._shutdown)

    def _spawn(self, coro: Coroutine[Any, Any, None], batch: list[RequestContext]) -> None:
        self._drained.clear()
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[task] = batch
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        if not self._tasks and not self._queued():
            self._drained.set()

    def close(self, shutdown: bool = False) -> None:
        if not self._closed:
            self._closed, self._shutdown = True, shutdown

    def abort(self, queued: ModelyardError, running: ModelyardError) -> None:
        self.close(shutdown=True)
        answer(self._take_queued(), queued)
        for batch in list(self._tasks.values()):
            # A batch staged in a worker behind the running one has not started (t_start 0).
            answer([ctx for ctx in batch if not ctx.t_start], queued)
            answer(batch, running)
        if not self._queued():
            self._drained.set()

    async def drain(self, timeout: float) -> bool:
        self.close()
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if self.gate is not None:  # the version stops: its instances leave the limiter
                self.gate.close()
