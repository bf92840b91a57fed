"""Triton's iterative sequence batcher (``sequence_batching { iterative_sequence: true }``).

A model may release a request with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``: it is then
executed again, on the same instance, in a later batch (Triton's iterative-sequence example:
a decoupled model sends one response per execution). As in Triton:

* a request without a correlation id starts a sequence of its own (an id is assigned and the
  START flag set); one with an id follows the usual START rules;
* each instance has ``max(1, max_batch_size)`` sequence slots; a sequence holds its slot until
  its request is released without RESCHEDULE, so the model may keep per-instance state
  between executions; sequences beyond the slots wait in a FIFO backlog;
* a rescheduled request runs with flags 0 (neither START nor END), control inputs updated.

A new request cancelled while it waits ends at once with a CANCELLED error; a rescheduled
one runs once more, with ``is_cancelled()`` true (see ``_reschedule``).
"""

from __future__ import annotations

import collections
import functools
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from modelyard.backends.instance import Instance
from modelyard.errors import Cancelled, InvalidArgument, Unavailable
from modelyard.scheduling.base import BatchTasks, run_batch
from modelyard.scheduling.sequence import control_tensors, controls_from_config
from modelyard.serving.context import RequestContext
from modelyard.serving.stats import ModelStats
from modelyard.types import SEQUENCE_START, InferResponse

_START, _READY, _END, _CORRID = 0, 1, 2, 3  # ModelSequenceBatching.Control.Kind


@dataclass(eq=False)
class _Seq:
    corr_id: int | str
    instance: int = -1  # -1: in the backlog
    queue: collections.deque[RequestContext] = field(default_factory=collections.deque)
    running: bool = False


class IterativeSequenceBatcher(BatchTasks):
    def __init__(
        self, model_name: str, instances: list[Instance], cfg: Any, max_queue_size: int = 0
    ):
        self.model_name = model_name
        self._instances = instances
        self._slots = max(1, int(cfg.max_batch_size))
        self._batched = int(cfg.max_batch_size) > 0
        self._controls = controls_from_config(cfg)
        self._max_queue = max_queue_size or 1_000_000
        self._ids = itertools.count(1)
        self._seqs: dict[int | str, _Seq] = {}
        self._bound: list[list[_Seq]] = [[] for _ in instances]
        self._backlog: collections.deque[_Seq] = collections.deque()
        self._busy = [False] * len(instances)
        self.stats: ModelStats | None = None
        self._init_tasks()

    @property
    def pending(self) -> int:
        return sum(len(s.queue) for s in self._seqs.values())

    def _take_queued(self) -> list[RequestContext]:
        taken = [ctx for seq in self._seqs.values() for ctx in seq.queue]
        for seq in self._seqs.values():
            seq.queue.clear()
        return taken

    def _queued(self) -> int:
        return self.pending

    def submit(self, ctx: RequestContext) -> None:
        if self._closed:
            self._check_open(ctx)
        req = ctx.request
        if req.correlation_id in (0, ""):
            req.correlation_id = next(self._ids)
            req.flags = SEQUENCE_START
        cid = req.correlation_id
        seq = self._seqs.get(cid)
        if seq is None and not req.flags & SEQUENCE_START:
            raise InvalidArgument(
                f"inference request for sequence {cid} to model '{self.model_name}' must "
                "specify the START flag on the first request of the sequence"
            )
        if self.pending >= self._max_queue:
            raise Unavailable(f"exceeds maximum queue size for model '{self.model_name}'")
        ctx.own_inputs = len(req.inputs)
        ctx.reschedule = self._reschedule
        self._enqueue(ctx)

    def _enqueue(self, ctx: RequestContext) -> None:
        req = ctx.request
        n = ctx.own_inputs
        req.inputs = [
            *req.inputs[:n],
            *control_tensors(self._controls, self._batched, req.flags, req.correlation_id),
        ]
        ctx.t_queued = time.monotonic_ns()
        self._drained.clear()
        seq = self._seqs.get(req.correlation_id)
        if seq is None:
            seq = self._seqs[req.correlation_id] = _Seq(req.correlation_id)
            seq.queue.append(ctx)
            self._backlog.append(seq)
            self._fill_slots()
            return
        seq.queue.append(ctx)
        if seq.instance >= 0:
            self._schedule(seq.instance)

    def _reschedule(self, ctx: RequestContext) -> None:
        """The model released ``ctx`` with RESCHEDULE: run it again with flags 0 (also while
        draining: the request is still in flight). A request cancelled meanwhile runs once
        more with ``is_cancelled()`` true, so the model can drop the sequence's state (beyond
        Triton, which drops it unseen); rescheduled again after that, it ends CANCELLED."""
        if ctx.cancelled and ctx.ran_cancelled:
            r = ctx.request
            err = Cancelled("Request was cancelled")
            ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=err))
            return
        ctx.request.flags = 0
        self._enqueue(ctx)

    def _fill_slots(self) -> None:
        """Bind backlogged sequences to free slots, least loaded instance first."""
        for i in range(len(self._instances)):
            self._prune(i)
        while self._backlog:
            free = [i for i in range(len(self._instances)) if len(self._bound[i]) < self._slots]
            if not free:
                return
            i = min(free, key=lambda k: (len(self._bound[k]), self._busy[k]))
            seq = self._backlog.popleft()
            seq.instance = i
            self._bound[i].append(seq)
            self._schedule(i)

    def _prune(self, i: int) -> None:
        """Forget requests cancelled while they waited (already answered), and free the slots
        of sequences with nothing left to run."""
        for seq in list(self._bound[i]):
            while seq.queue and seq.queue[0].done:
                seq.queue.popleft()
            if not seq.running and not seq.queue:
                self._release(seq)

    def _schedule(self, i: int) -> None:
        if self._busy[i]:
            return
        self._prune(i)
        if self.gate is not None:  # the batch forms when the limiter lets instance i run
            if any(seq.queue and not seq.running for seq in self._bound[i]):
                self._busy[i] = True
                self.gate.request(self._instances[i], functools.partial(self._granted, i))
            return
        self._start(i)

    def _granted(self, i: int) -> None:
        self._prune(i)
        if not self._start(i):
            assert self.gate is not None
            with self.gate.released(self._instances[i], executed=False):  # nothing to run
                self._busy[i] = False
                self._fill_slots()

    def _start(self, i: int) -> bool:
        """Run the next request of each sequence bound to instance i; False when none has."""
        batch: list[RequestContext] = []
        seqs: list[_Seq] = []
        for seq in self._bound[i]:
            if seq.queue and not seq.running:
                seq.running = True
                ctx = seq.queue.popleft()
                ctx.ran_cancelled = ctx.cancelled
                batch.append(ctx)
                seqs.append(seq)
        if not batch:
            return False
        self._busy[i] = True
        self._spawn(self._run(i, batch, seqs), batch)
        return True

    def _release(self, seq: _Seq) -> None:
        """The sequence's request was released for good: free its slot."""
        if self._seqs.get(seq.corr_id) is seq:
            del self._seqs[seq.corr_id]
        if seq.instance >= 0 and seq in self._bound[seq.instance]:
            self._bound[seq.instance].remove(seq)

    async def _run(self, i: int, batch: list[RequestContext], seqs: list[_Seq]) -> None:
        try:
            await run_batch(self._instances[i], batch, self.stats)
        finally:
            if self.gate is None:
                self._ran(i, seqs)
            else:
                with self.gate.released(self._instances[i]):
                    self._ran(i, seqs)

    def _ran(self, i: int, seqs: list[_Seq]) -> None:
        self._busy[i] = False
        for seq in seqs:
            seq.running = False
        self._schedule(i)
        self._fill_slots()
