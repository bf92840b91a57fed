"""The seam between the Python backend and the core: a backend instance driven with a fake
ModelHost and no core at all, in both execution modes. The model's BLS call, its model-control
query and its log line reach the host through the Protocol, and the host's answer reaches the
model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modelyard.backends.instance import Instance
from modelyard.backends.python.server.inprocess import InProcessInstance
from modelyard.backends.python.server.process_instance import PythonWorker, WorkerSpec
from modelyard.serving.context import RequestContext, ResponseCallback
from modelyard.serving.host import ModelHost, ModelLogRecord
from modelyard.tracing.tracer import Tracer
from modelyard.types import InferRequest, InferResponse, Tensor

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            pb_utils.Logger.log_info("asking double")
            call = pb_utils.InferenceRequest(
                model_name="double", requested_output_names=["Y"], inputs=[pb_utils.Tensor("X", x)]
            )
            answer = call.exec()
            if answer.has_error():
                raise RuntimeError(answer.error().message())
            y = pb_utils.get_output_tensor_by_name(answer, "Y").as_numpy()
            ready = pb_utils.is_model_ready("double")
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", y + 1),
                pb_utils.Tensor("READY", np.array([ready])),
            ]))
        return responses
"""


class FakeHost:
    """A ModelHost with one model, "double", answered on the spot; it records every call."""

    def __init__(self) -> None:
        self.submitted: list[InferRequest] = []
        self.direct_asked = 0
        self.ready_asked: list[str] = []
        self.logs: list[ModelLogRecord] = []
        self.tracer = Tracer()  # tracing off: BLS calls still count in its call graph
        self.execute_on_loop = False

    def submit(
        self,
        request: InferRequest,
        on_response: ResponseCallback,
        chain: frozenset[str] = frozenset(),
        caller: str = "",
    ) -> RequestContext:
        self.submitted.append(request)
        ctx = RequestContext(request, ["Y"], on_response, chain=chain)
        x = request.inputs[0].data
        assert x is not None
        ctx.send(InferResponse("double", "1", outputs=[Tensor.from_numpy("Y", x * 2)]))
        return ctx

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return False

    def run_direct(
        self,
        request: InferRequest,
        chain: frozenset[str],
        accept: Callable[[Any], bool],
        run: Callable[[Any, RequestContext], None],
    ) -> list[InferResponse] | None:
        self.direct_asked += 1
        return None  # no direct path here: the call takes the ordinary one (submit)

    async def load_model(
        self, name: str, config: str | None, files: dict[str, bytes] | None
    ) -> None:
        raise AssertionError("not used")

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        raise AssertionError("not used")

    def model_ready(self, name: str, version: str = "") -> bool:
        return True

    async def check_model_ready(self, name: str, version: str = "") -> bool:
        self.ready_asked.append(name)
        return True

    def log(self, record: ModelLogRecord) -> None:
        self.logs.append(record)


def _spec(
    tmp_path: Path, model: str = MODEL, outputs: tuple[str, ...] = ("Y", "READY")
) -> WorkerSpec:
    model_dir = tmp_path / "caller"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(model)
    config = {"name": "caller", "output": [{"name": o} for o in outputs]}
    return WorkerSpec(
        model_name="caller",
        version=1,
        model_dir=str(model_dir),
        model_file=str(model_dir / "1" / "model.py"),
        instance_name="caller_0",
        instance_kind="CPU",
        device_id=0,
        config_json=json.dumps(config),
        decoupled=False,
        shm_enabled=False,
        start_timeout=60.0,
    )


async def _run(instance: Instance) -> InferResponse:
    responses: list[InferResponse] = []
    x = np.array([1.0, 2.0], dtype=np.float32)
    request = InferRequest("caller", [Tensor.from_numpy("X", x)], model_version="1")
    await asyncio.wait_for(instance.execute([RequestContext(request, None, responses.append)]), 60)
    assert len(responses) == 1
    return responses[0]


async def _drive(instance: Instance) -> InferResponse:
    await instance.start()
    try:
        return await _run(instance)
    finally:
        await instance.stop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["process", "in-process"])
async def test_a_backend_runs_on_a_fake_host(tmp_path: Path, mode: str) -> None:
    host = FakeHost()
    _: ModelHost = host  # the fake fits the Protocol (mypy checks it)
    spec = _spec(tmp_path)
    instance: Instance = (
        PythonWorker(spec, host) if mode == "process" else InProcessInstance(spec, host)
    )
    response = await _drive(instance)
    assert response.error is None, response.error
    outputs = {t.name: t.data for t in response.outputs}
    np.testing.assert_array_equal(outputs["Y"], np.array([3.0, 5.0], dtype=np.float32))
    assert outputs["READY"] is not None and outputs["READY"].tolist() == [True]
    # The BLS call, the readiness query and the log line all went through the host.
    assert [r.model_name for r in host.submitted] == ["double"]
    assert host.ready_asked == ["double"]
    assert [(r.message, r.instance, r.level) for r in host.logs] == [
        ("asking double", "caller_0", 0)
    ]
    assert host.logs[0].filename == spec.model_file
    if mode == "in-process":
        assert host.direct_asked == 1  # the fast path was offered to the host first
    # The call counts in the host's BLS call graph (caller model -> callee).
    [edge] = host.tracer.call_graph.snapshot()
    assert (edge["caller"], edge["callee"], edge["calls"], edge["errors"]) == (
        spec.model_name,
        "double",
        1,
        0,
    )


LEAF = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        where = np.array([threading.get_ident()], dtype=np.uint64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("T", where)]) for _ in requests]
"""


# A sync execute that hands back a coroutine, which Triton's stub awaits.
DEFERRED = LEAF.replace(
    "    def execute(self, requests):\n",
    "    def execute(self, requests):\n        return self._later(requests)\n\n"
    "    async def _later(self, requests):\n",
)


async def _threads(
    tmp_path: Path, model: str, on_loop: bool, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """The thread each of three runs of ``model`` executed on, its host's loop serving it
    alone (``on_loop``) or not; every run must succeed."""
    from modelyard.backends.python.server import inprocess

    # "Short" whatever the machine's load (the thresholds are not what this tests).
    monkeypatch.setattr(inprocess, "INLINE_MAX_S", 60.0)
    monkeypatch.setattr(inprocess, "INLINE_NEVER_S", 60.0)
    host = FakeHost()
    host.execute_on_loop = on_loop
    instance = InProcessInstance(_spec(tmp_path, model, ("T",)), host)
    await instance.start()
    try:
        threads = []
        for _ in range(3):
            response = await _run(instance)
            assert response.error is None, response.error
            data = response.outputs[0].data
            assert data is not None
            threads.append(int(data[0]))
    finally:
        await instance.stop()
    return threads


@pytest.mark.timeout(120)
@pytest.mark.parametrize("on_loop", [True, False], ids=["one-model-loop", "shared-loop"])
async def test_a_short_leaf_runs_on_a_loop_that_serves_it_alone(
    tmp_path: Path, on_loop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ray replica's host (``execute_on_loop``): once a sync execute that names no server
    call has run short, it runs on the event loop itself, without the thread hop; on one
    server's shared loop it keeps its instance's thread."""
    import threading

    threads = await _threads(tmp_path, LEAF, on_loop, monkeypatch)
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread  # the first run shows how long it takes
    assert all((t == loop_thread) is on_loop for t in threads[1:])


@pytest.mark.timeout(120)
async def test_a_sync_execute_that_returns_a_coroutine_is_awaited_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never inline, where nothing could await what it returns: the coroutine runs on the
    loop that awaits it, each time."""
    import threading

    threads = await _threads(tmp_path, DEFERRED, True, monkeypatch)
    assert threads == [threading.get_ident()] * 3
