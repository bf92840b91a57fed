"""Request rescheduling (iterative sequences) and the cancellation of BLS calls, through the
real server and tritonclient, in both execution modes.

Models (tests/models/): resched_countdown (decoupled iterative sequence, Triton's example),
resched_once (non-decoupled iterative sequence), resched_refused (reschedules without
iterative sequence batching), cancel_parent (async execute, two BLS calls at once),
cancel_parent_sync (one blocking BLS call), cancel_child (waits until cancelled).
"""

from __future__ import annotations

import asyncio
import json
import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tests.backends.python.test_bls import Served, drive
from tests.conftest import Serving
from tests.helpers import (
    MODES,
    grpc_input,
    wait_for_log,
    wait_until,
    wait_until_async,
)

pytestmark = pytest.mark.timeout(60)

MODELS = ["resched_countdown", "resched_once", "resched_refused", "cancel_parent",
          "cancel_parent_sync", "cancel_child", "bls_driver"]  # fmt: skip
TIMEOUT_S = 10.0
NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


@pytest.fixture(scope="module", params=MODES)
def served(
    request: pytest.FixtureRequest, serving: Serving, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    started = tmp_path_factory.mktemp("started")  # cancel_child marks the requests it runs
    with serving.server(models=MODELS, mode=request.param,
                        env={"CANCEL_CHILD_STARTED": str(started)}) as server:  # fmt: skip
        yield Started(server, request.param, TIMEOUT_S, started)


@dataclass
class Started(Served):
    # cancel_child creates a file named by a request's id when it starts it
    started: Path = Path()


def _int_in(n: int) -> list[Any]:
    return [grpc_input("IN", np.array([n], np.int32))]


def _fp32_in(values: Any) -> list[Any]:
    return [grpc_input("IN", np.asarray(values, np.float32))]


def _countdown(result: Any) -> tuple[int, int, bool]:
    final = result.get_response().parameters["triton_final_response"].bool_param
    return int(result.as_numpy("OUT")[0]), int(result.as_numpy("FLAGS")[0]), final


# -- rescheduling ----------------------------------------------------------------------------


def test_decoupled_iterative_sequence_over_a_stream(served: Served) -> None:
    """Triton's iterative-sequence example: one response per execution, the request
    rescheduled until the last; START on the first execution only (an id is assigned)."""
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("resched_countdown", _int_in(3), request_id="r3")
        items = [got.get(timeout=TIMEOUT_S) for _ in range(3)]
        client.stop_stream()
    assert [e for _, e in items] == [None, None, None]
    assert [_countdown(r) for r, _ in items] == [(2, 1, False), (1, 0, False), (0, 0, True)]
    assert {r.get_response().id for r, _ in items} == {"r3"}
    assert got.empty()


async def test_concurrent_iterative_sequences_keep_their_slots(served: Served) -> None:
    """Eight streams at once on two instances of one slot each: a sequence holds its
    instance until its request is released for good, so per-instance state stays intact."""

    async def one(n: int) -> list[tuple[int, int, bool]]:
        async with grpcaio.InferenceServerClient(served.server.grpc_url) as client:

            async def requests() -> Any:
                yield {"model_name": "resched_countdown", "inputs": _int_in(n)}

            out = []
            async for result, error in client.stream_infer(requests(), stream_timeout=30):
                assert error is None
                out.append(_countdown(result))
                if out[-1][2]:
                    break
            return out

    counts = [2, 5, 3, 6, 1, 4, 7, 2]
    results = await asyncio.wait_for(asyncio.gather(*(one(n) for n in counts)), 30)
    for n, got in zip(counts, results, strict=True):
        assert [o for o, _, _ in got] == list(range(n - 1, -1, -1))
        assert [f for _, f, _ in got] == [1] + [0] * (n - 1)
        assert [fin for _, _, fin in got] == [False] * (n - 1) + [True]


async def test_a_cancelled_iterative_request_lets_the_model_reset(served: Served) -> None:
    """Cancelling a long countdown: the rescheduled request runs once more with
    is_cancelled() true, the model resets its state, and the slot serves the next ones."""
    async with grpcaio.InferenceServerClient(served.server.grpc_url) as client:
        seen = 0

        async def requests() -> Any:
            yield {"model_name": "resched_countdown", "inputs": _int_in(10**7)}
            await asyncio.sleep(30)  # keep the stream open until it is cancelled

        async def consume() -> None:
            nonlocal seen
            async for _result, error in client.stream_infer(requests(), stream_timeout=60):
                assert error is None
                seen += 1

        task = asyncio.ensure_future(consume())
        await wait_until_async(lambda: seen >= 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await test_concurrent_iterative_sequences_keep_their_slots(served)

        async def executions() -> int:
            stats = await client.get_inference_statistics("resched_countdown")
            return int(stats.model_stats[0].execution_count)

        # Nothing runs any more: the cancelled countdown has stopped.
        before = await executions()
        await asyncio.sleep(0.3)
        assert await executions() == before


def test_bls_call_to_an_iterative_decoupled_model(served: Served) -> None:
    spec = {"model": "resched_countdown", "inputs": {"IN": {"data": [3], "dtype": "int32"}},
            "outputs": ["OUT"], "decoupled": True}  # fmt: skip
    result, _ = drive(served.http(), spec)
    assert not result["has_error"], result["message"]
    assert [r.get("OUT") for r in result["responses"]] == [[2], [1], [0]]


def test_non_decoupled_request_answers_after_its_second_execution(served: Served) -> None:
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        result = client.infer("resched_once", _fp32_in([1, 2, 3, 4]), client_timeout=TIMEOUT_S)
    assert result.as_numpy("OUT").tolist() == [1, 2, 3, 4]
    assert result.as_numpy("EXECS").tolist() == [2]


def test_a_response_for_a_rescheduled_request_is_an_error(served: Served) -> None:
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as e:
            client.infer("resched_once", _fp32_in([1, 2, 3, 4]), parameters={"wrong": True},
                         client_timeout=TIMEOUT_S)  # fmt: skip
        assert e.value.status() == "StatusCode.INTERNAL"
        assert e.value.message() == (
            "Failed to process the request(s) for model 'resched_once_0_0', message: Expected a "
            "None object in the execute function return list for reschduled request, found type "
            "'<class 'triton_python_backend_utils.InferenceResponse'>'."
        )
        # The model keeps serving.
        assert client.infer("resched_once", _fp32_in([0, 0, 0, 1])).as_numpy("EXECS")[0] == 2


def test_rescheduling_without_iterative_sequence_ends_the_request(served: Served) -> None:
    """Triton refuses the release (and logs it); modelyard also ends the request with that
    error, so the client is not left waiting for a final response that never comes."""
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("resched_refused", _int_in(7), request_id="no")
        (first, e1), (second, e2) = got.get(timeout=TIMEOUT_S), got.get(timeout=TIMEOUT_S)
        client.stop_stream()
    assert e1 is None and first.as_numpy("OUT").tolist() == [7]
    assert second is None and e2.message() == NOT_CONFIGURED
    wait_for_log(served.server, NOT_CONFIGURED)  # logged, as Triton logs it


# -- cancelling BLS calls ------------------------------------------------------------------


def _report(client: Any, model: str) -> str:
    result = client.infer(model, _fp32_in([0]), parameters={"report": True},
                          client_timeout=TIMEOUT_S)  # fmt: skip
    return str(result.as_numpy("OUT")[0].decode())


def _wait_report(client: Any, model: str, expected: str) -> str:
    """The report of ``model`` once it mentions ``expected`` (bounded)."""
    deadline = time.monotonic() + TIMEOUT_S
    text = _report(client, model)
    while expected not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text = _report(client, model)
    return text


DEADLINE_S = 2.0  # a client deadline: long enough for the calls to have started under load


def _child_started(served: Served, rid: str) -> bool:
    assert isinstance(served, Started)
    return (served.started / rid).exists()


def _cancel_with(how: str, served: Served, model: str, rid: str) -> None:
    """Start ``rid`` on ``model`` and cancel it the way ``how`` says: by a deadline, or once
    its first BLS call runs (cancel_parent makes both calls at once, so the second one has
    reached the server by then: it waits behind the first on cancel_child's one instance)."""
    url = served.server.grpc_url
    if how == "deadline":
        with grpcclient.InferenceServerClient(url) as client:
            with pytest.raises(InferenceServerException) as e:
                client.infer(model, _fp32_in([1]), request_id=rid, client_timeout=DEADLINE_S)
            assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    elif how == "aio-cancel":

        async def run() -> None:
            async with grpcaio.InferenceServerClient(url) as client:
                call = asyncio.ensure_future(client.infer(model, _fp32_in([1]),
                                                          request_id=rid))  # fmt: skip
                await wait_until_async(lambda: _child_started(served, f"{rid}-a"))
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call

        asyncio.run(run())
    else:  # the gRPC stream is cancelled
        client = grpcclient.InferenceServerClient(url)
        try:
            client.start_stream(callback=lambda result, error: None)
            client.async_stream_infer(model, _fp32_in([1]), request_id=rid)
            wait_until(lambda: _child_started(served, f"{rid}-a"))
            client.stop_stream(cancel_requests=True)
        finally:
            client.close()


@pytest.mark.parametrize("how", ["deadline", "aio-cancel", "stream-cancel"])
def test_cancelling_a_request_cancels_its_bls_calls(served: Served, how: str) -> None:
    """The running call sees is_cancelled(); the one still queued ends with CANCELLED."""
    rid = f"async-{how}"
    _cancel_with(how, served, "cancel_parent", rid)
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        assert f"{rid}-a" in _wait_report(client, "cancel_child", f"{rid}-a").split(",")
        report = json.loads(_wait_report(client, "cancel_parent", rid))
    assert report[rid] == [[False, 0, ""], [True, 7, "Request was cancelled"]]


def test_cancelling_a_sync_execute_cancels_its_blocking_bls_call(served: Served) -> None:
    rid = "sync-deadline"
    _cancel_with("deadline", served, "cancel_parent_sync", rid)
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        assert f"{rid}-s" in _wait_report(client, "cancel_child", f"{rid}-s").split(",")
        report = json.loads(_wait_report(client, "cancel_parent_sync", rid))
    assert report[rid] == [[False, ""]]  # the child answered once it saw the cancellation


# -- against the reference Triton -------------------------------------------------------------


def _observe_rescheduling(url: str) -> dict[str, Any]:
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("resched_countdown", _int_in(3), request_id="d")
        countdown = [_countdown(got.get(timeout=TIMEOUT_S)[0]) for _ in range(3)]
        client.stop_stream()
        once = client.infer("resched_once", _fp32_in([1, 2, 3, 4]), client_timeout=TIMEOUT_S)
        with pytest.raises(InferenceServerException) as e:
            client.infer("resched_once", _fp32_in([1, 2, 3, 4]), parameters={"wrong": True},
                         client_timeout=TIMEOUT_S)  # fmt: skip
    return {
        "countdown": countdown,
        "once": (once.as_numpy("OUT").tolist(), once.as_numpy("EXECS").tolist()),
        # Triton's pb_utils classes live in its C++ module c_python_backend_utils.
        "wrong": e.value.message().replace("c_python_backend_utils", "triton_python_backend_utils"),
    }


@pytest.mark.reference
@pytest.mark.timeout(180)
def test_rescheduling_matches_the_reference(served: Served, serving: Serving) -> None:
    from tests.reference import reference_available, start_reference

    if served.mode != "process" or not reference_available():
        pytest.skip("reference Triton is not installed (or already compared in process mode)")
    repo = serving.repo(["resched_countdown", "resched_once"])
    ref = start_reference(repo, timeout=120)
    try:
        expected = _observe_rescheduling(ref.grpc_url)
    finally:
        ref.stop()
    assert _observe_rescheduling(served.server.grpc_url) == expected
