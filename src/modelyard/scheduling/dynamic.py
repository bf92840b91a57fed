"""Triton's dynamic batcher: requests queue (per priority level, each with its queue policy)
and a free instance takes the largest batch that fits ``max_batch_size``.

A batch goes out at once when it reaches a preferred size (or the maximum); otherwise it
waits up to ``max_queue_delay_microseconds`` from its oldest request for more to arrive.
With no delay configured (the default) whatever is queued when an instance frees up goes.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from dataclasses import dataclass, field
from typing import Any

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
from modelyard.types import InferResponse


@dataclass(frozen=True)
class QueuePolicy:
    timeout_action_delay: bool = False  # REJECT (False) or DELAY
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0 = unbounded (bounded by the scheduler's hard cap)


@dataclass(frozen=True)
class BatcherConfig:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_policy: QueuePolicy = field(default_factory=QueuePolicy)
    priority_policies: dict[int, QueuePolicy] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: Any) -> BatcherConfig:
        db = cfg.dynamic_batching

        def policy(p: Any) -> QueuePolicy:
            return QueuePolicy(
                timeout_action_delay=int(p.timeout_action) == 1,
                default_timeout_us=int(p.default_timeout_microseconds),
                allow_timeout_override=bool(p.allow_timeout_override),
                max_queue_size=int(p.max_queue_size),
            )

        return cls(
            max_batch_size=max(1, int(cfg.max_batch_size)),
            preferred_batch_sizes=tuple(sorted(int(s) for s in db.preferred_batch_size)),
            max_queue_delay_us=int(db.max_queue_delay_microseconds),
            preserve_ordering=bool(db.preserve_ordering),
            priority_levels=int(db.priority_levels),
            default_priority_level=int(db.default_priority_level),
            default_policy=policy(db.default_queue_policy)
            if db.HasField("default_queue_policy")
            else QueuePolicy(),
            priority_policies={int(k): policy(v) for k, v in db.priority_queue_policy.items()},
        )


HARD_QUEUE_CAP = 100_000


@dataclass(eq=False, slots=True)
class _Queued:
    ctx: RequestContext
    size: int  # batch size this request contributes
    shape_key: tuple[Any, ...]
    deadline_ns: int  # 0 = none
    delay_on_timeout: bool


class DynamicBatcher(DeadlockCheck, BatchTasks):
    def __init__(self, model_name: str, instances: list[Instance], config: BatcherConfig):
        self.model_name = model_name
        self.config = config
        self._instances = instances
        self._idle: collections.deque[Instance] = collections.deque(instances)
        levels = max(1, config.priority_levels)
        self._queues: list[collections.deque[_Queued]] = [
            collections.deque() for _ in range(levels)
        ]
        self._count = 0
        self._timer: asyncio.TimerHandle | None = None
        self._staged = 0  # instances waiting for the rate limiter to let them run
        self.stats: ModelStats | None = None  # set by the core; executions counted per batch
        self._init_tasks()
        listen_for_health(instances, self._schedule)

    @property
    def pending(self) -> int:
        return self._count

    # -- admission ------------------------------------------------------------------------

    def _level(self, priority: int) -> int:
        """Queue index for a request priority (1 = highest). 0 and out-of-range values take the
        default level, as Triton 2.51 does."""
        cfg = self.config
        if cfg.priority_levels == 0:
            return 0
        if priority < 1 or priority > cfg.priority_levels:
            priority = cfg.default_priority_level or cfg.priority_levels
        return priority - 1

    def _policy(self, level: int) -> QueuePolicy:
        return self.config.priority_policies.get(level + 1, self.config.default_policy)

    def submit(self, ctx: RequestContext) -> None:
        if self._closed:
            self._check_open(ctx)
        if ctx.chain and all(i.name in ctx.chain for i in self._instances):
            raise Unavailable(
                f"BLS deadlock: every instance of model '{self.model_name}' is waiting on this request; "
                "it could never run"
            )
        req = ctx.request
        level = self._level(req.priority)
        policy = self._policy(level)
        limit = policy.max_queue_size or HARD_QUEUE_CAP
        if len(self._queues[level]) >= limit:
            raise Unavailable(
                f"[request id: {req.id or '<id_unknown>'}] Exceeds maximum queue size"
            )
        ctx.scheduler = self
        if not self._idle:
            self._check_deadlock(ctx)
        now = time.monotonic_ns()
        ctx.t_queued = now
        # As Triton's PolicyQueue: a request's own timeout may only shorten the default one.
        timeout_us = policy.default_timeout_us
        if policy.allow_timeout_override and 0 < req.timeout_us < timeout_us:
            timeout_us = req.timeout_us
        deadline = now + timeout_us * 1000 if timeout_us else 0
        first = req.inputs[0] if req.inputs else None
        size = first.shape[0] if first is not None and first.shape else 1
        shape_key = tuple((t.name, t.shape[1:]) for t in req.inputs)
        self._queues[level].append(
            _Queued(ctx, size, shape_key, deadline, policy.timeout_action_delay)
        )
        self._count += 1
        self._drained.clear()
        self._schedule()

    # -- batch formation --------------------------------------------------------------------

    def _expire(self, now: int) -> None:
        for q in self._queues:
            if not q:
                continue
            kept: collections.deque[_Queued] = collections.deque()
            for item in q:
                if item.ctx.cancelled or item.ctx.done:
                    self._count -= 1
                    continue
                if item.deadline_ns and now >= item.deadline_ns and not item.delay_on_timeout:
                    self._count -= 1
                    r = item.ctx.request
                    item.ctx.send(
                        InferResponse(
                            r.model_name,
                            r.model_version,
                            r.id,
                            error=Unavailable("Request timeout expired"),
                        )
                    )
                    continue
                kept.append(item)
            q.clear()
            q.extend(kept)

    def _ordered(self) -> list[tuple[int, _Queued]]:
        """Queued requests in dispatch order: priority level, then (for DELAY-timed-out) last."""
        now = time.monotonic_ns()
        out: list[tuple[int, _Queued]] = []
        delayed: list[tuple[int, _Queued]] = []
        for level, q in enumerate(self._queues):
            for item in q:
                if item.deadline_ns and now >= item.deadline_ns:
                    delayed.append((level, item))
                else:
                    out.append((level, item))
        return out + delayed

    def _take_batch(self, force: bool, take: bool = True) -> list[_Queued] | None:
        """The next batch, if one is due (``force``: whatever is queued is); ``take``: remove
        it from the queues."""
        cfg = self.config
        ordered = self._ordered()
        if not ordered:
            return None
        head = ordered[0][1]
        batch: list[_Queued] = []
        total = 0
        for _, item in ordered:
            if item.shape_key != head.shape_key:
                break  # requests of another shape wait for the next batch
            if total + item.size > cfg.max_batch_size:
                break
            batch.append(item)
            total += item.size
        if not batch:  # a single request bigger than max_batch_size cannot happen (validated)
            batch, total = [head], head.size
        full = total >= cfg.max_batch_size or total in cfg.preferred_batch_sizes
        if not (force or full or cfg.max_queue_delay_us == 0):
            waited = time.monotonic_ns() - head.ctx.t_queued
            if waited < cfg.max_queue_delay_us * 1000:
                return None
        if cfg.preferred_batch_sizes and not full:
            # Prefer the largest preferred size that fits what is queued.
            fitting = [s for s in cfg.preferred_batch_sizes if s <= total]
            if fitting:
                target, acc, cut = fitting[-1], 0, 0
                for i, item in enumerate(batch):
                    acc += item.size
                    if acc >= target:
                        cut = i + 1
                        break
                if cut:
                    batch = batch[:cut]
        if not take:
            return batch
        taken = {id(item) for item in batch}
        for q in self._queues:
            kept = [item for item in q if id(item) not in taken]
            if len(kept) != len(q):
                q.clear()
                q.extend(kept)
        self._count -= len(batch)
        return batch

    def _schedule(self, force: bool = False) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._expire(time.monotonic_ns())
        can_run = False  # an instance is free but the batch waits (max_queue_delay)
        if self.gate is not None:
            can_run = self._stage_instances(self.gate, force)
        while self._count and self.gate is None:
            instance = pick_instance(self._idle, self._instances)
            if instance is None:
                break
            batch = self._take_batch(force)
            if batch is None:
                self._idle.appendleft(instance)
                can_run = True
                break
            self._start(instance, [item.ctx for item in batch])
        if self._count:
            self._arm_timer(can_run)
        if not self._count and not self._tasks:
            self._drained.set()

    def _arm_timer(self, can_run: bool) -> None:
        """Wake when the waiting batch is due (an instance is free), and in any case when a
        queued request's timeout expires, so REJECT answers on time even while every
        instance is busy (or hung)."""
        if self._timer is not None:  # (a grant inside _schedule may have armed one)
            self._timer.cancel()
            self._timer = None
        now = time.monotonic_ns()
        items = [item for q in self._queues for item in q]
        due: int | None = None
        if can_run:
            due = min(item.ctx.t_queued for item in items) + self.config.max_queue_delay_us * 1000
            deadlines = [item.deadline_ns for item in items if item.deadline_ns]
        else:
            deadlines = [
                item.deadline_ns
                for item in items
                if item.deadline_ns > now and not item.delay_on_timeout
            ]
        if deadlines:
            due = min(deadlines) if due is None else min(due, min(deadlines))
        if due is not None:
            delay = max(0.0, (due - now) / 1e9)
            self._timer = asyncio.get_running_loop().call_later(delay, self._schedule, True)

    def _start(self, instance: Instance, batch: list[RequestContext]) -> None:
        self._spawn(self._run(instance, batch), batch)

    def _take_queued(self) -> list[RequestContext]:
        taken = [item.ctx for q in self._queues for item in q]
        for q in self._queues:
            q.clear()
        self._count = 0
        return taken

    def _queued(self) -> int:
        return self._count

    async def _run(self, instance: Instance, batch: list[RequestContext]) -> None:
        try:
            await run_batch(instance, batch, self.stats)
        finally:
            if self.gate is None:
                self._idle.append(instance)
                self._schedule()
            else:
                with self.gate.released(instance):
                    self._idle.append(instance)
                    self._schedule()

    # -- with the rate limiter: a due batch stages an idle instance, and the batch is formed
    # when the limiter lets the instance run, taking what arrived meanwhile (as Triton's open
    # payload keeps filling while it waits for resources).

    def _stage_instances(self, gate: Gate, force: bool) -> bool:
        """Stage instances for what is queued; True when one is free but the batch not due."""
        while self._count:
            if self._staged:  # stage another only for more than the staged ones will take
                queued = sum(item.size for q in self._queues for item in q)
                if queued <= self._staged * self.config.max_batch_size:
                    return False
            if len(self._idle) > 1:  # the instance the limiter would serve first
                self._idle = collections.deque(sorted(self._idle, key=gate.preference))
            instance = pick_instance(self._idle, self._instances)
            if instance is None:
                return False
            if self._take_batch(force, take=False) is None:
                self._idle.appendleft(instance)
                return True
            self._staged += 1
            gate.request(instance, functools.partial(self._granted, gate, instance))
        return False

    def _granted(self, gate: Gate, instance: Instance) -> None:
        self._staged -= 1
        self._expire(time.monotonic_ns())
        batch = self._take_batch(force=True) if self._count else None
        if batch:
            self._start(instance, [item.ctx for item in batch])
            self._schedule()  # what the batch left may need another instance
            return
        with gate.released(instance, executed=False):  # nothing left to run
            self._idle.append(instance)
            if not self._count and not self._tasks:
                self._drained.set()
