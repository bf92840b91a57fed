"""Batch formation in the dynamic batcher (pure scheduling logic, no server)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from modelyard.backends.instance import Instance
from modelyard.errors import Unavailable
from modelyard.scheduling.dynamic import BatcherConfig, DynamicBatcher, QueuePolicy
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse, Tensor
from tests.helpers import settle


class RecordingInstance(Instance):
    """Answers every request after ``delay`` and records the batch sizes it was given."""

    def __init__(self, name: str, delay: float = 0.05):
        self.name = name
        self.delay = delay
        self.batches: list[list[str]] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def execute(self, batch: list[RequestContext]) -> None:
        self.batches.append([c.request.id for c in batch])
        await asyncio.sleep(self.delay)
        for c in batch:
            r = c.request
            c.send(InferResponse(r.model_name, "1", r.id))


def _ctx(rid: str, batch: int = 1, priority: int = 0, timeout_us: int = 0,
         width: int = 4) -> tuple[RequestContext, asyncio.Future[InferResponse]]:  # fmt: skip
    fut: asyncio.Future[InferResponse] = asyncio.get_running_loop().create_future()
    t = Tensor("IN", "FP32", (batch, width), np.zeros((batch, width), np.float32))
    req = InferRequest("m", [t], id=rid, priority=priority, timeout_us=timeout_us)
    return RequestContext(req, None, settle(fut)), fut


async def test_requests_queued_while_busy_form_one_batch() -> None:
    inst = RecordingInstance("m_0")
    b = DynamicBatcher("m", [inst], BatcherConfig(max_batch_size=8))
    futs = []
    for i in range(5):
        ctx, fut = _ctx(f"r{i}")
        b.submit(ctx)
        futs.append(fut)
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert inst.batches == [["r0"], ["r1", "r2", "r3", "r4"]]


async def test_max_batch_size_caps_batches() -> None:
    inst = RecordingInstance("m_0")
    b = DynamicBatcher("m", [inst], BatcherConfig(max_batch_size=4))
    futs = []
    for i in range(6):
        ctx, fut = _ctx(f"r{i}", batch=2)
        b.submit(ctx)
        futs.append(fut)
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert [len(x) for x in inst.batches] == [1, 2, 2, 1]


async def test_queue_delay_waits_for_a_preferred_size() -> None:
    inst = RecordingInstance("m_0", delay=0.0)
    # A delay far beyond the test's bound: the batch can only go out by reaching size 4.
    cfg = BatcherConfig(
        max_batch_size=8, preferred_batch_sizes=(4,), max_queue_delay_us=600_000_000
    )
    b = DynamicBatcher("m", [inst], cfg)
    futs = []
    for i in range(4):
        ctx, fut = _ctx(f"r{i}")
        b.submit(ctx)
        futs.append(fut)
        await asyncio.sleep(0.01)
    await asyncio.wait_for(asyncio.gather(*futs), 30)
    assert inst.batches == [["r0", "r1", "r2", "r3"]]  # one batch, sent when it reached 4


async def test_queue_delay_expires_and_sends_a_partial_batch() -> None:
    inst = RecordingInstance("m_0", delay=0.0)
    cfg = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(4,), max_queue_delay_us=50_000)
    b = DynamicBatcher("m", [inst], cfg)
    ctx, fut = _ctx("only")
    b.submit(ctx)
    await asyncio.wait_for(fut, 5)
    assert inst.batches == [["only"]]


async def test_priorities_go_first() -> None:
    inst = RecordingInstance("m_0")
    cfg = BatcherConfig(max_batch_size=1, priority_levels=2, default_priority_level=2)
    b = DynamicBatcher("m", [inst], cfg)
    futs = []
    for rid, prio in [("busy", 2), ("low", 2), ("high", 1)]:
        ctx, fut = _ctx(rid, priority=prio)
        b.submit(ctx)
        futs.append(fut)
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert inst.batches == [["busy"], ["high"], ["low"]]


async def test_out_of_range_priority_takes_the_default_level() -> None:
    inst = RecordingInstance("m_0")
    cfg = BatcherConfig(max_batch_size=1, priority_levels=2, default_priority_level=2)
    b = DynamicBatcher("m", [inst], cfg)
    futs = []
    for rid, prio in [("busy", 2), ("bogus", 7), ("high", 1)]:
        ctx, fut = _ctx(rid, priority=prio)
        b.submit(ctx)
        futs.append(fut)
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert inst.batches == [["busy"], ["high"], ["bogus"]]  # 7 ran at the default level 2


async def test_queue_timeout_rejects() -> None:
    inst = RecordingInstance("m_0", delay=0.2)
    policy = QueuePolicy(default_timeout_us=50_000)
    b = DynamicBatcher("m", [inst], BatcherConfig(max_batch_size=1, default_policy=policy))
    first, f1 = _ctx("first")
    late, f2 = _ctx("late")
    b.submit(first)
    b.submit(late)
    r2 = await asyncio.wait_for(f2, 5)
    assert r2.error is not None and r2.error.message == "Request timeout expired"
    assert (await asyncio.wait_for(f1, 5)).error is None


class HungInstance(Instance):
    """Runs nothing until ``release`` is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def execute(self, batch: list[RequestContext]) -> None:
        self.started.set()
        await self.release.wait()
        for c in batch:
            r = c.request
            c.send(InferResponse(r.model_name, "1", r.id))


@pytest.mark.parametrize(
    ("policy", "request_timeout_us"),
    [
        (QueuePolicy(default_timeout_us=50_000), 0),
        (QueuePolicy(default_timeout_us=60_000_000, allow_timeout_override=True), 50_000),
    ],
)
async def test_queue_timeout_rejects_while_the_instance_is_hung(
    policy: QueuePolicy, request_timeout_us: int
) -> None:
    """REJECT answers when the timeout expires, not when an instance frees up: the only
    instance stays hung until the late request has its answer."""
    inst = HungInstance("m_0")
    b = DynamicBatcher("m", [inst], BatcherConfig(max_batch_size=1, default_policy=policy))
    first, f1 = _ctx("first")
    b.submit(first)
    await asyncio.wait_for(inst.started.wait(), 5)
    late, f2 = _ctx("late", timeout_us=request_timeout_us)
    b.submit(late)
    r2 = await asyncio.wait_for(f2, 30)
    assert r2.error is not None and r2.error.message == "Request timeout expired"
    assert r2.error.code.name == "UNAVAILABLE"
    assert not f1.done() and b.pending == 0
    inst.release.set()
    assert (await asyncio.wait_for(f1, 5)).error is None


@pytest.mark.parametrize(
    ("policy", "request_timeout_us"),
    [
        (QueuePolicy(allow_timeout_override=True), 50_000),  # no default: nothing to shorten
        (QueuePolicy(default_timeout_us=60_000_000), 50_000),  # overriding not allowed
    ],
)
async def test_a_request_timeout_only_shortens_an_allowed_default(
    policy: QueuePolicy, request_timeout_us: int
) -> None:
    """Triton's PolicyQueue: the request's timeout applies only when the policy allows
    overriding and it is shorter than the default one."""
    inst = HungInstance("m_0")
    b = DynamicBatcher("m", [inst], BatcherConfig(max_batch_size=1, default_policy=policy))
    first, f1 = _ctx("first")
    b.submit(first)
    await asyncio.wait_for(inst.started.wait(), 5)
    late, f2 = _ctx("late", timeout_us=request_timeout_us)
    b.submit(late)
    # No deadline applies: the late request is still queued after its own timeout passed.
    assert b._queues[0][0].deadline_ns in (0, b._queues[0][0].ctx.t_queued + 60_000_000_000)
    inst.release.set()
    assert (await asyncio.wait_for(f1, 5)).error is None
    assert (await asyncio.wait_for(f2, 5)).error is None


async def test_max_queue_size() -> None:
    policy = QueuePolicy(max_queue_size=1)
    b = DynamicBatcher(
        "m", [RecordingInstance("m_0", 0.2)], BatcherConfig(max_batch_size=1, default_policy=policy)
    )
    for rid in ("running", "queued"):
        b.submit(_ctx(rid)[0])
    with pytest.raises(Unavailable, match="Exceeds maximum queue size"):
        b.submit(_ctx("over")[0])


async def test_different_shapes_are_not_mixed() -> None:
    inst = RecordingInstance("m_0")
    b = DynamicBatcher("m", [inst], BatcherConfig(max_batch_size=8))
    futs = []
    for rid, w in [("a0", 4), ("a1", 4), ("b0", 3), ("a2", 4)]:
        ctx, fut = _ctx(rid, width=w)
        b.submit(ctx)
        futs.append(fut)
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    # In arrival order, a batch ends at the first request of another shape.
    assert inst.batches == [["a0"], ["a1"], ["b0"], ["a2"]]
