"""The default scheduler's staging: a busy worker takes one more queued request so it starts
the moment the running one ends. Scheduling logic with fake instances, then the real server
with a worker model (``stage_probe``) through tritonclient's grpc.aio client."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
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
from tests.serverproc import ServerProcess, start_server

MODELS = Path(__file__).parent.parent / "models"


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
    ctx = RequestContext(req, None, lambda r: fut.done() or fut.set_result(r), caller=caller)
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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("staging")
    shutil.copytree(MODELS / "stage_probe", repo / "stage_probe")
    off = repo / "stage_probe_off"
    shutil.copytree(MODELS / "stage_probe", off)
    config = (off / "config.pbtxt").read_text().replace('"stage_probe"', '"stage_probe_off"')
    config += 'parameters { key: "MODELYARD_PIPELINE" value { string_value: "false" } }\n'
    (off / "config.pbtxt").write_text(config)
    srv = start_server(repo, "--allow-metrics=false", "--allow-http=false",
                       timeout=120, expect=("grpc",))  # fmt: skip
    yield srv
    srv.stop()


def _input(value: float) -> list[grpcaio.InferInput]:
    inp = grpcaio.InferInput("IN", [1], "FP32")
    inp.set_data_from_numpy(np.array([value], dtype=np.float32))
    return [inp]


async def _infer(client: Any, model: str, rid: str, sleep_ms: int,
                 timeout: float | None = None, crash: bool = False) -> dict[str, Any]:  # fmt: skip
    params: dict[str, Any] = {"sleep_ms": sleep_ms}
    if crash:
        params["crash"] = True
    result = await client.infer(model, _input(1.0), request_id=rid, client_timeout=timeout,
                                parameters=params)  # fmt: skip
    echo: dict[str, Any] = json.loads(result.as_numpy("ECHO")[0])
    return echo


async def test_staged_requests_are_timed_as_queued_not_as_computing(
    server: ServerProcess,
) -> None:
    """Six 100 ms requests on one instance: compute time counts only the model's own work;
    the time a staged request waits in the worker is queue time."""
    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        echoes = await asyncio.gather(*(_infer(client, "stage_probe", f"s{i}", 100)
                                        for i in range(6)))  # fmt: skip
        stats = await client.get_inference_statistics("stage_probe", as_json=True)
    spans = sorted((e["start"], e["end"]) for e in echoes)
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))  # one at a time
    s = stats["model_stats"][0]
    assert int(s["execution_count"]) == int(s["inference_count"]) == 6
    infer = s["inference_stats"]
    compute_s = int(infer["compute_infer"]["ns"]) / 1e9
    queue_s = int(infer["queue"]["ns"]) / 1e9
    # Model work is 6 x 0.1 s; counting staged waits as compute would make it about 1.1 s.
    assert 0.55 < compute_s < 0.9, compute_s
    # Request k waits about k x 0.1 s before it starts: 1.5 s in all.
    assert queue_s > 1.0, queue_s


@pytest.mark.parametrize(("model", "reaches_model"),
                         [("stage_probe", True), ("stage_probe_off", False)])  # fmt: skip
async def test_a_cancelled_staged_request_ends_at_once(
    server: ServerProcess, model: str, reaches_model: bool
) -> None:
    """The request behind the running one is cancelled by its deadline: the server ends it at
    once (its failure is counted while the first one still runs), not when the instance frees
    up. Staged (the default), the model is still handed it, already cancelled, as with any
    cancelled request; with MODELYARD_PIPELINE false it waited in the server and never reaches
    the model."""
    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        before = await _failures(client, model)
        first = asyncio.ensure_future(_infer(client, model, f"{model}-first", 1500))
        await asyncio.sleep(0.2)  # running now
        with pytest.raises(InferenceServerException) as err:
            await _infer(client, model, f"{model}-late", 0, timeout=0.3)
        assert "Deadline" in str(err.value) or "DEADLINE" in str(err.value)
        deadline = asyncio.get_running_loop().time() + 0.6
        while await _failures(client, model) == before:
            assert asyncio.get_running_loop().time() < deadline, "not ended while queued"
            await asyncio.sleep(0.02)
        assert not first.done()  # ended while the first one still ran
        await asyncio.wait_for(first, 10)
        after = await asyncio.wait_for(_infer(client, model, f"{model}-after", 0), 10)
    assert (f"{model}-late" in after["cancelled"]) is reaches_model


async def _failures(client: Any, model: str) -> int:
    stats = await client.get_inference_statistics(model, as_json=True)
    return int(stats["model_stats"][0]["inference_stats"]["fail"].get("count", 0))


async def test_a_worker_that_dies_fails_its_running_and_staged_requests_only(
    server: ServerProcess,
) -> None:
    """The running request kills the worker: it and the request staged behind it fail; the
    one still queued in the server runs on the restarted worker."""
    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        model = "stage_probe"
        running = asyncio.ensure_future(_infer(client, model, "dies", 300, crash=True))
        await asyncio.sleep(0.1)
        staged = asyncio.ensure_future(_infer(client, model, "staged", 0))
        await asyncio.sleep(0.05)
        queued = asyncio.ensure_future(_infer(client, model, "queued", 0))
        results = await asyncio.wait_for(
            asyncio.gather(running, staged, queued, return_exceptions=True), 60
        )
        for failed in results[:2]:
            assert isinstance(failed, InferenceServerException), failed
            assert "Stub process 'stage_probe_0_0' is not healthy." in str(failed), failed
        assert isinstance(results[2], dict), results[2]
        again = await asyncio.wait_for(_infer(client, model, "again", 0), 30)
        assert "start" in again
