"""The default scheduler's staging: a busy worker takes one more queued request so it starts
the moment the running one ends. Scheduling logic with fake instances, then the real server
with a worker model (``stage_probe``) through tritonclient's grpc.aio client."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from modelyard.backends.instance import Instance
from modelyard.scheduling.default import DefaultScheduler
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse, Tensor
from tests.conftest import Serving
from tests.helpers import (
    MODELS,
    grpc_input,
    metric_value,
    read_metrics,
    settle,
    wait_until_async,
)
from tests.serverproc import ServerProcess


class CountingInstance(Instance):
    """Answers each request after ``delay``; records how many batches it held at once."""

    def __init__(self, name: str, can_stage: bool, delay: float = 0.05):
        self.name = name
        self.can_stage = can_stage
        self.delay = delay
        self.held = 0
        self.most_held = 0
        self.order: list[str] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def execute(self, batch: list[RequestContext]) -> None:
        self.held += 1
        self.most_held = max(self.most_held, self.held)
        self.order += [c.request.id for c in batch]
        await asyncio.sleep(self.delay)
        for c in batch:
            r = c.request
            c.send(InferResponse(r.model_name, "1", r.id))
        self.held -= 1


class SometimesHealthy(CountingInstance):
    """A CountingInstance whose health the test sets (a worker restarting or backing off)."""

    def __init__(self, name: str, healthy: bool):
        super().__init__(name, can_stage=False)
        self.is_healthy = healthy

    @property
    def healthy(self) -> bool:
        return self.is_healthy


async def test_requests_go_to_healthy_instances_and_wait_for_one() -> None:
    """An instance that is not healthy gets no request while another is healthy, even when it
    is the idle one (the requests wait for the busy healthy one); once healthy again it
    takes the waiting ones. Only when none is healthy does it get them (and answer at once)."""
    down = SometimesHealthy("m_0", healthy=False)
    up = SometimesHealthy("m_1", healthy=True)
    sched = DefaultScheduler("m", [down, up])
    first = [_ctx(f"a{i}") for i in range(3)]
    for ctx, _ in first:
        sched.submit(ctx)
    await asyncio.wait_for(asyncio.gather(*(f for _, f in first)), 5)
    assert (down.order, up.order) == ([], ["a0", "a1", "a2"])
    up.delay = 60.0  # busy for good: the next request waits, though m_0 idles
    busy, _ = _ctx("busy")
    sched.submit(busy)
    waiting, answered = _ctx("waiting")
    sched.submit(waiting)
    await asyncio.sleep(0)
    assert sched.pending == 1 and down.order == []
    down.is_healthy = True
    assert down.health_listener is not None
    down.health_listener()  # the worker restarted
    await asyncio.wait_for(answered, 5)
    assert down.order == ["waiting"]
    up.is_healthy = down.is_healthy = False
    nobody, last = _ctx("nobody")
    sched.submit(nobody)  # no instance is healthy: the idle one takes it
    await asyncio.wait_for(last, 5)
    assert down.order == ["waiting", "nobody"]


def _ctx(rid: str, caller: str = "") -> tuple[RequestContext, asyncio.Future[InferResponse]]:
    fut: asyncio.Future[InferResponse] = asyncio.get_running_loop().create_future()
    req = InferRequest("m", [Tensor("IN", "FP32", (1,), np.zeros(1, np.float32))], id=rid)
    ctx = RequestContext(req, None, settle(fut), caller=caller)
    return ctx, fut


async def _run(sched: DefaultScheduler, ctxs: list[tuple[RequestContext, Any]]) -> None:
    for ctx, _ in ctxs:
        sched.submit(ctx)
    await asyncio.wait_for(asyncio.gather(*(f for _, f in ctxs)), 5)


async def test_a_busy_stageable_instance_takes_one_more_request() -> None:
    inst = CountingInstance("m_0", can_stage=True)
    sched = DefaultScheduler("m", [inst])
    await _run(sched, [_ctx(f"r{i}") for i in range(4)])
    assert inst.most_held == 2
    assert inst.order == ["r0", "r1", "r2", "r3"]  # still first come, first served


async def test_an_instance_that_cannot_stage_runs_one_at_a_time() -> None:
    inst = CountingInstance("m_0", can_stage=False)
    sched = DefaultScheduler("m", [inst])
    await _run(sched, [_ctx(f"r{i}") for i in range(3)])
    assert inst.most_held == 1


async def test_an_idle_instance_is_preferred_to_staging() -> None:
    a, b = CountingInstance("m_0", True), CountingInstance("m_1", True)
    sched = DefaultScheduler("m", [a, b])
    await _run(sched, [_ctx(f"r{i}") for i in range(2)])
    assert (a.order, b.order) == (["r0"], ["r1"])
    assert a.most_held == b.most_held == 1


async def test_bls_calls_are_never_staged() -> None:
    """A caller waits on a BLS request: staged behind a long batch it could wait for nothing."""
    inst = CountingInstance("m_0", can_stage=True)
    sched = DefaultScheduler("m", [inst])
    await _run(sched, [_ctx("client"), _ctx("bls1", caller="x_0"), _ctx("bls2", caller="x_0")])
    assert inst.most_held == 1


async def test_nothing_is_staged_behind_a_bls_call() -> None:
    inst = CountingInstance("m_0", can_stage=True)
    sched = DefaultScheduler("m", [inst])
    await _run(sched, [_ctx("bls", caller="x_0"), _ctx("c1"), _ctx("c2")])
    assert inst.order == ["bls", "c1", "c2"]
    assert inst.most_held == 2  # c2 staged behind c1, never c1 behind the BLS call


# -- through the server -------------------------------------------------------------------------


WORK_S = 1.0  # what a held request still works once its gate opens
DEADLINE_S = 2.0  # a client deadline: long enough for the request to reach the server


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    repo = serving.repo()
    shutil.copytree(MODELS / "stage_probe", repo / "stage_probe")
    off = repo / "stage_probe_off"
    shutil.copytree(MODELS / "stage_probe", off)
    config = (off / "config.pbtxt").read_text().replace('"stage_probe"', '"stage_probe_off"')
    config += 'parameters { key: "MODELYARD_PIPELINE" value { string_value: "false" } }\n'
    (off / "config.pbtxt").write_text(config)
    with serving.server(repo, endpoints=("grpc", "metrics")) as srv:
        yield srv


async def _infer(client: Any, model: str, rid: str, sleep_ms: int, timeout: float | None = None,
                 crash: bool = False, gate: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """One request to ``model``; with ``gate`` it creates ``<gate>.started`` when it starts and
    waits until the gate file exists."""
    params: dict[str, Any] = {"sleep_ms": sleep_ms}
    if crash:
        params["crash"] = True
    if gate is not None:
        params.update(started=f"{gate}.started", gate=str(gate))
    result = await client.infer(model, [grpc_input("IN", np.array([1.0], np.float32))],
                                request_id=rid, client_timeout=timeout, parameters=params)  # fmt: skip
    echo: dict[str, Any] = json.loads(result.as_numpy("ECHO")[0])
    return echo


async def _started(gate: Path) -> None:
    started = Path(f"{gate}.started")
    await wait_until_async(started.exists, what="the gated request to run")


def _pending(server: ServerProcess, model: str) -> float | None:
    """Requests of ``model`` waiting to run: queued in the server or staged in the worker."""
    text = read_metrics(server.metrics_url)
    return metric_value(text, "nv_inference_pending_request_count", model=model)


async def test_staged_requests_are_timed_as_queued_not_as_computing(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Six requests on one instance: compute time counts only the model's own work; the time a
    staged request waits in the worker is queue time. The first request holds the instance
    until the other five have arrived (four wait in the server, one is staged in the worker);
    once let go it works WORK_S more, which its staged follower waits on."""
    gate = tmp_path / "gate"
    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        first = asyncio.ensure_future(
            _infer(client, "stage_probe", "s0", int(WORK_S * 1000), gate=gate)
        )
        await _started(gate)
        rest = [asyncio.ensure_future(_infer(client, "stage_probe", f"s{i}", 100))
                for i in range(1, 6)]  # fmt: skip
        await wait_until_async(lambda: _pending(server, "stage_probe") == 5,
                               what="four requests queued, one staged")  # fmt: skip
        opened = time.monotonic()
        gate.touch()
        echoes = await asyncio.wait_for(asyncio.gather(first, *rest), 60)
        stats = await client.get_inference_statistics("stage_probe", as_json=True)
    spans = sorted((e["start"], e["end"]) for e in echoes)
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))  # one at a time
    s = stats["model_stats"][0]
    assert int(s["execution_count"]) == int(s["inference_count"]) == 6
    infer = s["inference_stats"]
    compute_s = int(infer["compute_infer"]["ns"]) / 1e9
    queue_s = int(infer["queue"]["ns"]) / 1e9
    # The model's own work, measured inside execute (the first request's includes its gate).
    work_s = sum(end - start for start, end in spans)
    # Compute covers the model's work; counting the staged request's wait in the worker as
    # compute would add at least WORK_S (it was staged before the gate opened).
    assert work_s - 0.01 <= compute_s < work_s + WORK_S / 2, (compute_s, work_s)
    # The five others arrived before the gate opened: each waited at least from then until
    # it started, the staged one included (WORK_S of it in the worker).
    waited_s = sum(start - opened for start, _ in spans[1:])
    assert queue_s > waited_s - WORK_S / 2, (queue_s, waited_s)


@pytest.mark.parametrize(("model", "reaches_model"),
                         [("stage_probe", True), ("stage_probe_off", False)])  # fmt: skip
async def test_a_cancelled_staged_request_ends_at_once(
    server: ServerProcess, model: str, reaches_model: bool, tmp_path: Path
) -> None:
    """The request behind the running one is cancelled by its deadline: the server ends it at
    once (its failure is counted while the first one still runs), not when the instance frees
    up. Staged (the default), the model is still handed it, already cancelled, as with any
    cancelled request; with MODELYARD_PIPELINE false it waited in the server and never reaches
    the model. The first request runs until the test opens its gate."""
    gate = tmp_path / "gate"
    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        before = await _failures(client, model)
        first = asyncio.ensure_future(_infer(client, model, f"{model}-first", 0, gate=gate))
        try:
            await _started(gate)
            with pytest.raises(InferenceServerException) as err:
                await _infer(client, model, f"{model}-late", 0, timeout=DEADLINE_S)
            assert "Deadline" in str(err.value) or "DEADLINE" in str(err.value)

            async def counted() -> bool:
                return await _failures(client, model) > before

            await wait_until_async(counted, what="the late request's failure to be counted")
            assert await _failures(client, model) == before + 1
            assert not first.done()  # ended while the first one still ran
        finally:
            gate.touch()
        await asyncio.wait_for(first, 30)
        after = await asyncio.wait_for(_infer(client, model, f"{model}-after", 0), 30)
    assert (f"{model}-late" in after["cancelled"]) is reaches_model


async def _failures(client: Any, model: str) -> int:
    stats = await client.get_inference_statistics(model, as_json=True)
    return int(stats["model_stats"][0]["inference_stats"]["fail"].get("count", 0))


async def test_a_worker_that_dies_fails_its_running_and_staged_requests_only(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The running request kills the worker: it and the request staged behind it fail; the
    one still queued in the server runs on the restarted worker. The running one waits at its
    gate until the other two have arrived (which of them is staged is whichever came first)."""
    gate = tmp_path / "gate"
    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        model = "stage_probe"
        running = asyncio.ensure_future(_infer(client, model, "dies", 0, crash=True, gate=gate))
        try:
            await _started(gate)
            later = [asyncio.ensure_future(_infer(client, model, rid, 0)) for rid in ("a", "b")]
            await wait_until_async(lambda: _pending(server, model) == 2,
                                   what="one request staged, one queued")  # fmt: skip
        finally:
            gate.touch()
        results = await asyncio.wait_for(
            asyncio.gather(running, *later, return_exceptions=True), 60
        )
        failed = [results[0], *(r for r in results[1:] if isinstance(r, BaseException))]
        assert len(failed) == 2, results  # the running one and the staged one
        for error in failed:
            assert isinstance(error, InferenceServerException), error
            assert "Stub process 'stage_probe_0_0' is not healthy." in str(error), error
        assert sum(isinstance(r, dict) for r in results[1:]) == 1, results  # the queued one
        again = await asyncio.wait_for(_infer(client, model, "again", 0), 30)
        assert "start" in again
