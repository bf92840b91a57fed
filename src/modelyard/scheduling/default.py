"""The default scheduler: each request runs alone on the next free instance.

Requests wait in a bounded FIFO when every instance is busy. Each batch runs in its own task
so a caller that goes away cannot interrupt an instance halfway through a batch.

Under load, an instance that can stage (a worker process) takes one more queued request while
it runs one: the worker starts it the moment the running one ends, instead of idling until
this process has read the result and dispatched again, which on a busy machine takes a while.
Only requests nothing else waits on are staged (not BLS calls), so staging never makes a
caller wait behind the request it waits for.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
import time
from collections.abc import Callable

from modelyard.backends.instance import Instance
from modelyard.errors import Unavailable
from modelyard.scheduling.base import (
    BatchTasks,
    DeadlockCheck,
    listen_for_health,
    pick_instance,
    run_batch,
)
from modelyard.scheduling.rate_limiter import Gate
from modelyard.serving.context import RequestContext
from modelyard.serving.stats import ModelStats


def _stands_alone(batch: list[RequestContext]) -> bool:
    """No BLS caller waits on these requests."""
    return not any(ctx.chain or ctx.caller for ctx in batch)


class DefaultScheduler(DeadlockCheck, BatchTasks):
    def __init__(self, model_name: str, instances: list[Instance], max_queue_size: int = 0):
        self.model_name = model_name
        self._instances = instances
        self._idle: collections.deque[Instance] = collections.deque(instances)
        # Instances running one batch that may take a staged one; batches in flight per instance.
        self._stageable: collections.deque[Instance] = collections.deque()
        self._load: dict[int, int] = {id(i): 0 for i in instances}
        self._staged = 0  # instances waiting for the rate limiter to let them run
        self._queue: collections.deque[RequestContext] = collections.deque()
        self._max_queue = max_queue_size or 1_000_000
        self.stats: ModelStats | None = None  # set by the core; executions counted per batch
        self._init_tasks()
        # Idle instances may also be claimed from in-process model threads (direct BLS calls),
        # so the idle set and the queue change under this lock.
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        listen_for_health(instances, self._dispatch)

    @property
    def pending(self) -> int:
        """Requests accepted and not yet running (Triton's pending count): those queued here
        (less any cancelled meanwhile) and those staged in a busy worker."""
        with self._lock:
            queued = sum(1 for ctx in self._queue if not (ctx.cancelled or ctx.done))
            staged = sum(load - 1 for load in self._load.values() if load > 1)
        return queued + staged

    @property
    def inflight(self) -> int:
        return len(self._tasks) + len(self._queue)

    def submit(self, ctx: RequestContext) -> None:
        """Hand a validated request over; its responses arrive through ``ctx.send``."""
        if self._closed:
            self._check_open(ctx)
        ctx.t_queued = time.monotonic_ns()
        ctx.scheduler = self
        self._loop = asyncio.get_running_loop()
        if self.gate is None:
            with self._lock:
                instance = pick_instance(self._idle, self._instances) if not self._queue else None
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
        if self.gate is not None:
            self._stage_instances(self.gate)
            return
        while True:
            with self._lock:
                if not self._queue:
                    return
                ctx = self._queue[0]
                if ctx.cancelled or ctx.done:
                    self._queue.popleft()
                    continue
                instance = pick_instance(self._idle, self._instances)
                if instance is not None:
                    pass
                elif self._stageable and _stands_alone([ctx]):
                    instance = self._stageable.popleft()
                else:
                    return
                self._queue.popleft()
            self._start(instance, [ctx])

    def try_claim(self, accept: Callable[[Instance], bool]) -> Instance | None:
        """From any thread: take an idle instance that ``accept`` allows, if nothing is queued."""
        if self.gate is not None:  # the limiter decides when an instance runs
            return None
        with self._lock:
            if self._closed or self._queue:
                return None
            for instance in self._idle:
                if accept(instance):
                    self._idle.remove(instance)
                    self._load[id(instance)] = 1
                    return instance
        return None

    def release_claimed(self, instance: Instance) -> None:
        """From any thread: give back an instance taken with ``try_claim``."""
        with self._lock:
            self._load[id(instance)] = 0
            self._idle.append(instance)
            waiting = bool(self._queue)
        if waiting and self._loop is not None:
            self._loop.call_soon_threadsafe(self._dispatch)

    def _start(self, instance: Instance, batch: list[RequestContext]) -> None:
        self._loop = asyncio.get_running_loop()
        with self._lock:
            load = self._load[id(instance)] = self._load.get(id(instance), 0) + 1
            # Stage only behind a batch nothing waits on either: a BLS call made by the staged
            # batch must never count the running one's callers as waiting on it.
            if (
                load == 1
                and self.gate is None  # (a staged batch would run without its resources)
                and getattr(instance, "can_stage", False)
                and _stands_alone(batch)
            ):
                self._stageable.append(instance)
        self._spawn(self._run(instance, batch), batch)

    def _finish(self, instance: Instance) -> None:
        with self._lock:
            load = self._load[id(instance)] = self._load[id(instance)] - 1
            if load == 1 and self.gate is None:
                self._stageable.append(instance)
            elif load == 0:
                if instance in self._stageable:
                    self._stageable.remove(instance)
                self._idle.append(instance)

    def _take_queued(self) -> list[RequestContext]:
        with self._lock:
            taken = list(self._queue)
            self._queue.clear()
        return taken

    def _queued(self) -> int:
        return len(self._queue)

    async def _run(self, instance: Instance, batch: list[RequestContext]) -> None:
        try:
            await run_batch(instance, batch, self.stats)
        finally:
            if self.gate is None:
                self._finish(instance)
                self._dispatch()
            else:
                with self.gate.released(instance):
                    self._finish(instance)
                    self._dispatch()

    # -- with the rate limiter: an idle instance is staged for each queued request, and the
    # request at the head of the queue goes to whichever staged instance the limiter lets run.

    def _stage_instances(self, gate: Gate) -> None:
        while True:
            with self._lock:
                queue = self._queue
                while queue and (queue[0].cancelled or queue[0].done):
                    queue.popleft()
                if len(queue) <= self._staged or not self._idle:
                    return
                if len(self._idle) > 1:  # the instance the limiter would serve first
                    self._idle = collections.deque(sorted(self._idle, key=gate.preference))
                instance = pick_instance(self._idle, self._instances)
                if instance is None:
                    return
                self._staged += 1
            gate.request(instance, functools.partial(self._granted, gate, instance))

    def _granted(self, gate: Gate, instance: Instance) -> None:
        with self._lock:
            self._staged -= 1
            ctx = None
            while self._queue and ctx is None:
                head = self._queue.popleft()
                if not (head.cancelled or head.done):
                    ctx = head
        if ctx is not None:
            self._start(instance, [ctx])
            return
        # Nothing left to run (the lock is let go before the limiter serves the next one).
        with gate.released(instance, executed=False), self._lock:
            self._idle.append(instance)
