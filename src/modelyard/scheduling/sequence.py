"""Triton's sequence batcher for stateful models.

Each sequence (correlation id, int or string) is bound to one instance from its START until
its END or until it has been idle for ``max_sequence_idle_microseconds``; its requests run in
arrival order, one at a time. An instance's batch takes the next request of up to
``max_batch_size`` of its sequences. The configured control inputs (START, END, READY,
CORRID) are added to every request as tensors of the configured types, as Triton does.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from modelyard.backends.instance import Instance
from modelyard.errors import InvalidArgument
from modelyard.scheduling.base import BatchTasks, run_batch
from modelyard.serving.context import RequestContext
from modelyard.serving.stats import ModelStats
from modelyard.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    Tensor,
    config_datatype,
    numpy_dtype,
)

_START, _READY, _END, _CORRID = 0, 1, 2, 3  # ModelSequenceBatching.Control.Kind


@dataclass(frozen=True)
class _Control:
    name: str
    kind: int
    datatype: str
    false_true: tuple[Any, Any] = (0, 1)


def controls_from_config(cfg: Any) -> list[_Control]:
    out: list[_Control] = []
    for ci in cfg.sequence_batching.control_input:
        for c in ci.control:
            kind = int(c.kind)
            if kind == _CORRID:
                out.append(_Control(ci.name, kind, config_datatype(c.data_type)))
            elif len(c.int32_false_true) == 2:
                out.append(_Control(ci.name, kind, "INT32", tuple(c.int32_false_true)))
            elif len(c.fp32_false_true) == 2:
                out.append(_Control(ci.name, kind, "FP32", tuple(c.fp32_false_true)))
            elif len(c.bool_false_true) == 2:
                out.append(_Control(ci.name, kind, "BOOL", tuple(c.bool_false_true)))
    return out


def control_tensors(
    controls: list[_Control], batched: bool, flags: int, cid: int | str
) -> list[Tensor]:
    """The control inputs (START, END, READY, CORRID) a sequence request carries into the
    model, with the configured datatypes and true/false values."""
    shape = (1, 1) if batched else (1,)
    out = []
    for c in controls:
        if c.kind == _CORRID:
            if c.datatype == "BYTES":
                arr = np.array([str(cid).encode()], dtype=np.object_).reshape(shape)
            else:
                arr = np.array([cid], dtype=numpy_dtype(c.datatype)).reshape(shape)
        else:
            on = {_START: flags & SEQUENCE_START, _END: flags & SEQUENCE_END, _READY: 1}[c.kind]
            value = c.false_true[1 if on else 0]
            arr = np.array([value], dtype=numpy_dtype(c.datatype)).reshape(shape)
        out.append(Tensor(c.name, c.datatype, shape, arr))
    return out


@dataclass(eq=False)
class _Sequence:
    corr_id: int | str
    instance: int
    queue: collections.deque[RequestContext] = field(default_factory=collections.deque)
    running: bool = False
    ended: bool = False
    last_ns: int = 0


class SequenceBatcher(BatchTasks):
    def __init__(self, model_name: str, instances: list[Instance], cfg: Any):
        self.model_name = model_name
        self._instances = instances
        self._max_batch = max(1, int(cfg.max_batch_size))
        self._batched = int(cfg.max_batch_size) > 0
        self._idle_ns = (
            int(cfg.sequence_batching.max_sequence_idle_microseconds or 1_000_000) * 1000
        )
        self._controls = controls_from_config(cfg)
        self._seqs: dict[int | str, _Sequence] = {}
        self._busy = [False] * len(instances)
        self._load = [0] * len(instances)  # live sequences per instance
        self._sweeper: asyncio.TimerHandle | None = None
        self._init_tasks()
        self.stats: ModelStats | None = None

    @property
    def pending(self) -> int:
        return sum(len(s.queue) for s in self._seqs.values())

    def submit(self, ctx: RequestContext) -> None:
        if self._closed:
            self._check_open(ctx)
        req = ctx.request
        cid = req.correlation_id
        if cid == 0 or cid == "":
            raise InvalidArgument(
                f"inference request to model '{self.model_name}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        now = time.monotonic_ns()
        seq = self._seqs.get(cid)
        if (
            seq is not None
            and not seq.queue
            and not seq.running
            and now - seq.last_ns > self._idle_ns
        ):
            self._drop(seq)  # idle past its limit: the next request must START again
            seq = None
        if req.flags & SEQUENCE_START:
            if seq is None:
                seq = self._new(cid)
        elif seq is None:
            raise InvalidArgument(
                f"inference request for sequence {cid} to model '{self.model_name}' must specify "
                "the START flag on the first request of the sequence"
            )
        if isinstance(cid, str) and any(
            c.kind == _CORRID and c.datatype != "BYTES" for c in self._controls
        ):
            raise InvalidArgument(
                f"inference request to model '{self.model_name}' has string correlation ID "
                f"'{cid}', but the model's CORRID control input is not TYPE_STRING"
            )
        req.inputs = [*req.inputs, *control_tensors(self._controls, self._batched, req.flags, cid)]
        ctx.t_queued = now
        seq.last_ns = now
        seq.queue.append(ctx)
        if req.flags & SEQUENCE_END:
            seq.ended = True
        self._drained.clear()
        self._schedule(seq.instance)
        self._arm_sweeper()

    def _new(self, cid: int | str) -> _Sequence:
        instance = min(range(len(self._instances)), key=lambda i: (self._load[i], self._busy[i]))
        self._load[instance] += 1
        seq = self._seqs[cid] = _Sequence(cid, instance)
        return seq

    def _drop(self, seq: _Sequence) -> None:
        if self._seqs.get(seq.corr_id) is seq:
            del self._seqs[seq.corr_id]
            self._load[seq.instance] -= 1

    def _schedule(self, i: int) -> None:
        if self._busy[i]:
            return
        if self.gate is not None:  # the batch forms when the limiter lets instance i run
            if any(s.instance == i and s.queue and not s.running for s in self._seqs.values()):
                self._busy[i] = True
                self.gate.request(self._instances[i], functools.partial(self._granted, i))
            return
        self._start(i)

    def _granted(self, i: int) -> None:
        if not self._start(i):
            assert self.gate is not None
            with self.gate.released(self._instances[i], executed=False):  # nothing to run
                self._busy[i] = False

    def _start(self, i: int) -> bool:
        """Run instance i's next batch: the next request of up to max_batch_size of its
        sequences; False when there is none."""
        batch: list[RequestContext] = []
        seqs: list[_Sequence] = []
        for seq in self._seqs.values():
            if seq.instance != i or seq.running or not seq.queue:
                continue
            ctx = seq.queue.popleft()
            if ctx.cancelled or ctx.done:
                continue
            seq.running = True
            batch.append(ctx)
            seqs.append(seq)
            if len(batch) >= self._max_batch:
                break
        if not batch:
            return False
        self._busy[i] = True
        self._spawn(self._run(i, batch, seqs), batch)
        return True

    def _take_queued(self) -> list[RequestContext]:
        taken = [ctx for seq in self._seqs.values() for ctx in seq.queue]
        for seq in self._seqs.values():
            seq.queue.clear()
        return taken

    def _queued(self) -> int:
        return self.pending

    async def _run(self, i: int, batch: list[RequestContext], seqs: list[_Sequence]) -> None:
        try:
            await run_batch(self._instances[i], batch, self.stats)
        finally:
            if self.gate is None:
                self._ran(i, seqs)
            else:
                with self.gate.released(self._instances[i]):
                    self._ran(i, seqs)

    def _ran(self, i: int, seqs: list[_Sequence]) -> None:
        self._busy[i] = False
        for seq in seqs:
            seq.running = False
            seq.last_ns = time.monotonic_ns()
            if seq.ended and not seq.queue:
                self._drop(seq)
        self._schedule(i)

    def _arm_sweeper(self) -> None:
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(self._idle_ns / 1e9, self._sweep)

    def _sweep(self) -> None:
        """Forget sequences idle past max_sequence_idle_microseconds (their state is gone)."""
        self._sweeper = None
        now = time.monotonic_ns()
        for seq in list(self._seqs.values()):
            if not seq.queue and not seq.running and now - seq.last_ns > self._idle_ns:
                self._drop(seq)
        if self._seqs:
            self._arm_sweeper()

    async def drain(self, timeout: float) -> bool:
        if self._sweeper is not None:
            self._sweeper.cancel()
        return await super().drain(timeout)
