"""BLS (a Python model calling other models from ``execute``) through the real server and the
unmodified tritonclient, in both execution modes: models in worker processes (``process``)
and models inside the server process (``in-process``).

Most calls go through ``bls_driver``, a sync model steered by a JSON SPEC input that says
which model to call and how; it answers with RESULT, a JSON report of what the BLS call
returned (see tests/models/bls_driver/1/model.py).
"""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from modelyard.scheduling.default import DefaultScheduler
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse
from tests.conftest import Serving
from tests.helpers import MODES, Served, grpc_input, http_input, wait_until, wait_until_async

pytestmark = pytest.mark.timeout(60)

BLS_MODELS = [
    "bls_echo", "bls_driver", "bls_relay", "bls_passthrough", "bls_versioned", "bls_fail",
    "bls_slow", "bls_square", "bls_async_fanout", "bls_async_iter", "bls_async_decoupled",
    "bls_self_pair", "bls_async_relay",
]  # fmt: skip
TIMEOUT_S = 10.0  # every client call is bounded by this
PREFIX = "Model {} - Error when running inference: "


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[Served]:
    with serving.server(models=BLS_MODELS, mode=request.param) as server:
        yield Served(server, request.param, TIMEOUT_S)


# -- helpers --------------------------------------------------------------------------------


def spec_array(spec: dict[str, Any]) -> np.ndarray:
    return np.array([json.dumps(spec).encode()], dtype=np.object_)


X = np.arange(4, dtype=np.float32)


def drive(client: httpclient.InferenceServerClient, spec: dict[str, Any],
          x: np.ndarray = X) -> tuple[dict[str, Any], np.ndarray]:  # fmt: skip
    """Run one bls_driver request over HTTP; returns (RESULT, OUTPUT0)."""
    res = client.infer(
        "bls_driver",
        [http_input("SPEC", spec_array(spec), "BYTES"), http_input("INPUT0", x, "FP32")],
    )
    return json.loads(res.as_numpy("RESULT")[0]), res.as_numpy("OUTPUT0")


async def drive_grpc_aio(url: str, spec: dict[str, Any], x: np.ndarray = X) -> dict[str, Any]:
    async with grpcaio.InferenceServerClient(url) as client:
        res = await client.infer(
            "bls_driver", [grpc_input("SPEC", spec_array(spec), "BYTES"), grpc_input("INPUT0", x, "FP32")],
            client_timeout=TIMEOUT_S,
        )  # fmt: skip
    result: dict[str, Any] = json.loads(res.as_numpy("RESULT")[0])
    return result


def meta(result: dict[str, Any]) -> dict[str, Any]:
    """bls_echo's META output, as the driver received it."""
    out: dict[str, Any] = json.loads(result["outputs"]["META"][0])
    return out


ECHO_META = {"model": "bls_echo", "outputs": ["OUTPUT0", "META"]}


# -- sync, async, decoupled -----------------------------------------------------------------


def test_sync_exec_outputs_go_straight_into_the_response(served: Served) -> None:
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    res = served.http().infer("bls_passthrough", [http_input("INPUT0", x, "FP32")])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x)
    callee = json.loads(res.as_numpy("META")[0])
    assert callee["parameters"] == "{}" and callee["correlation_id"] == 0


async def test_async_execute_gathers_eight_async_exec_calls(served: Served) -> None:
    x = np.arange(5, dtype=np.float32)
    inp = httpaio.InferInput("INPUT0", [5], "FP32")
    inp.set_data_from_numpy(x)
    async with httpaio.InferenceServerClient(served.server.http_url, conn_timeout=TIMEOUT_S) as c:
        res = await asyncio.wait_for(c.infer("bls_async_fanout", [inp]), TIMEOUT_S)
    np.testing.assert_array_equal(
        res.as_numpy("OUTPUT0"), np.concatenate([x + i for i in range(8)])
    )


def _square(n: int, **extra: Any) -> dict[str, Any]:
    return {"model": "bls_square", "inputs": {"IN": {"data": [n], "dtype": "int32"}},
            "outputs": ["OUT"], "decoupled": True, **extra}  # fmt: skip


def test_exec_decoupled_yields_every_response_then_the_empty_final(served: Served) -> None:
    client = served.http()
    result, _ = drive(client, _square(3))
    # The callee ends with a flag-only FINAL: the iterator yields one last empty response.
    assert result["responses"] == [{"OUT": [0]}, {"OUT": [1]}, {"OUT": [2]}, {}]
    assert result["has_error"] is False
    result, _ = drive(client, _square(0))
    assert result["responses"] == [{}]


def test_exec_decoupled_on_a_non_decoupled_model_yields_its_one_response(served: Served) -> None:
    result, _ = drive(served.http(), {"model": "bls_echo", "decoupled": True})
    assert result["responses"] == [{"OUTPUT0": X.tolist()}]


def test_exec_without_decoupled_on_a_decoupled_model_is_an_error_response(served: Served) -> None:
    result, _ = drive(served.http(), _square(2, decoupled=False))
    assert result["has_error"] is True
    assert result["message"].startswith(PREFIX.format("bls_square"))
    assert "Please use 'decoupled=True' argument" in result["message"]


def _async_iter(client: httpclient.InferenceServerClient, n: int, **params: Any) -> tuple[int, int]:
    res = client.infer("bls_async_iter", [http_input("IN", np.array([n], np.int32), "INT32")],
                       parameters=params or None)  # fmt: skip
    return int(res.as_numpy("COUNT")[0]), int(res.as_numpy("SUM")[0])


def test_await_async_exec_decoupled_then_plain_for(served: Served, serving: Serving) -> None:
    """Triton's bls_decoupled async example: ``await async_exec(decoupled=True)`` and a plain
    ``for`` over the responses on the event loop's thread."""
    if served.mode == "in-process":
        # This once wedged the server's event loop, so it keeps a server of its own.
        with serving.server(models=["bls_async_iter", "bls_square"], mode="in-process",
                            stop_timeout=1) as server:  # fmt: skip
            client = httpclient.InferenceServerClient(
                server.http_url, connection_timeout=2, network_timeout=2
            )
            assert _async_iter(client, 3, delay_ms=20) == (4, 3)
        return
    client = served.http()
    assert _async_iter(client, 3, delay_ms=20) == (4, 0 + 1 + 2)
    assert _async_iter(client, 0) == (1, 0)


def test_await_async_exec_decoupled_then_async_for(served: Served) -> None:
    """modelyard's ResponseIterator also supports ``async for``, which never blocks the loop."""
    client = served.http()
    assert _async_iter(client, 3, delay_ms=20, iterate="async_for") == (4, 3)
    assert _async_iter(client, 0, iterate="async_for") == (1, 0)


def _stream_sync(url: str, n: int) -> list[Any]:
    client = grpcclient.InferenceServerClient(url)
    got: queue.Queue[Any] = queue.Queue()
    client.start_stream(
        callback=lambda result, error: got.put(error or result), stream_timeout=TIMEOUT_S
    )
    try:
        client.async_stream_infer("bls_async_decoupled", [grpc_input("IN", np.array([n], np.int32), "INT32")],
                                  enable_empty_final_response=True)  # fmt: skip
        items = []
        while True:
            item = got.get(timeout=TIMEOUT_S)
            items.append(item)
            if isinstance(item, InferenceServerException):
                return items
            if item.get_response().parameters["triton_final_response"].bool_param:
                return items
    finally:
        client.stop_stream()
        client.close()


async def _stream_aio(url: str, n: int) -> list[Any]:
    async def requests() -> Any:
        yield {
            "model_name": "bls_async_decoupled",
            "inputs": [grpc_input("IN", np.array([n], np.int32), "INT32")],
        }

    items = []
    async with grpcaio.InferenceServerClient(url) as client:
        # The server ends the stream once the requests are sent and every one got its FINAL.
        async for result, error in client.stream_infer(requests(), stream_timeout=TIMEOUT_S):
            items.append(error or result)
    return items


@pytest.mark.parametrize("client", ["grpc", "grpc.aio"])
async def test_async_bls_inside_a_decoupled_model(served: Served, client: str) -> None:
    url = served.server.grpc_url
    if client == "grpc":
        items = await asyncio.to_thread(_stream_sync, url, 3)
        assert items[-1].as_numpy("OUT") is None  # the flag-only FINAL, as an empty response
        items = items[:-1]
    else:
        items = await asyncio.wait_for(_stream_aio(url, 3), TIMEOUT_S)
    errors = [i for i in items if isinstance(i, InferenceServerException)]
    assert not errors, errors
    assert [i.as_numpy("OUT").tolist() for i in items] == [[0.0], [1.0], [2.0]]


# -- errors ---------------------------------------------------------------------------------


# (spec, code, start, part): the message starts with `start` and contains `part`. Errors
# raised before the callee ran carry Triton's BLS prefix; the callee's own come unchanged.
ERRORS: dict[str, tuple[dict[str, Any], int, str, str]] = {
    "unknown-model": ({"model": "no_such_model"}, 1, PREFIX.format("no_such_model"),
                      "Failed for execute the inference request. Model 'no_such_model' is not "
                      "ready."),
    "bad-input": ({"model": "bls_echo", "inputs": {"WRONG": {"data": [1.0]}}}, 3,
                  PREFIX.format("bls_echo"), "unexpected inference input 'WRONG' for model 'bls_echo'"),
    "bad-output": ({"model": "bls_echo", "outputs": ["NOPE"]}, 3, PREFIX.format("bls_echo"),
                   "unexpected inference output 'NOPE' for model 'bls_echo'"),
    "bad-version": ({"model": "bls_versioned", "version": 7}, 1, PREFIX.format("bls_versioned"),
                    "Model 'bls_versioned' is not ready."),
    "callee-raises": ({"model": "bls_fail", "params": {"mode": "raise"}}, 1,
                      "Failed to process the request(s) for model 'bls_fail_0_0', message: ",
                      "ValueError: plain value error"),
    "triton-error-not-found": ({"model": "bls_fail", "params": {"mode": "not_found"}}, 2,
                               "custom not_found", ""),
    "triton-error-unavailable": ({"model": "bls_fail", "params": {"mode": "unavailable"}}, 4,
                                 "custom unavailable", ""),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ERRORS))
async def test_errors_come_back_as_error_responses(served: Served, case: str) -> None:
    spec, code, start, part = ERRORS[case]
    result = await drive_grpc_aio(served.server.grpc_url, spec)
    # exec() did not raise: the driver got a response with has_error() and no outputs.
    assert result["has_error"] is True
    assert result["outputs"] == {}
    assert result["message"].startswith(start), result["message"]
    assert part in result["message"]
    assert result["code"] == code  # the callee's TritonError code is preserved (Triton 25.04+)


@pytest.mark.parametrize("case", ["bad-input", "bad-output"])
def test_validation_messages_are_triton_2_51s(served: Served, case: str) -> None:
    spec, _code, start, part = ERRORS[case]
    result, _ = drive(served.http(), spec)
    # Observed on Triton 2.51 with these models: no "[request id: ...]" prefix.
    assert result["message"] == start + part


def test_timeout_gives_request_timeout_expired(served: Served, tmp_path: Path) -> None:
    # The callee waits until the test opens its gate (30 s at most, beyond the client's own
    # timeout): the call can only have ended by its 100 ms timeout.
    gate = tmp_path / "gate"
    spec = {"model": "bls_slow", "params": {"delay_ms": 30_000, "gate": str(gate)},
            "timeout": 100_000}  # fmt: skip
    try:
        result, _ = drive(served.http(), spec)
    finally:
        gate.touch()  # lets the callee go
    assert result["has_error"] is True
    assert result["message"] == "Request timeout expired"


def test_a_blocking_exec_inside_async_execute(served: Served) -> None:
    """As under Triton's stub, an `async def execute` may call the blocking exec(): in both
    modes it waits on the model's own loop while the server delivers the callee's response
    (bls_slow at 20 ms: the callee runs on its own instance, not inline)."""
    inputs = [http_input("INPUT0", X, "FP32")]
    for callee in ("bls_echo", "bls_slow"):
        res = served.http().infer(
            "bls_async_relay", inputs,
            parameters={"model": callee, "blocking": True, "delay_ms": 20},
        )  # fmt: skip
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), X)


def test_an_async_exec_callee_that_waits_does_not_hold_up_the_server(
    served: Served, tmp_path: Path
) -> None:
    # In-process, async_exec() runs a quick leaf callee inline on the event loop. Here the
    # callee is quick, then takes 20 ms once (inline: it held the loop that long), is quick
    # again, then waits for the test's gate: the server must answer meanwhile.
    def relay(client: httpclient.InferenceServerClient, **params: Any) -> np.ndarray:
        inputs = [http_input("INPUT0", X, "FP32")]
        res = client.infer("bls_async_relay", inputs, parameters={"model": "bls_slow", **params})
        out: np.ndarray = res.as_numpy("OUTPUT0")
        return out

    client = served.http()
    for delay in [0] * 5 + [20] + [0] * 20:
        np.testing.assert_array_equal(relay(client, delay_ms=delay), X)
    gate, entered = tmp_path / "gate", tmp_path / "entered"
    with ThreadPoolExecutor(1) as pool:  # (a tritonclient.http client serves one thread)
        params = {"delay_ms": 30_000, "gate": str(gate), "entered": str(entered)}
        waiting = pool.submit(lambda: relay(served.http(), **params))
        try:
            wait_until(entered.exists, what="the callee to start")
            assert client.is_server_live()  # (the client gives up after TIMEOUT_S)
        finally:
            gate.touch()
        np.testing.assert_array_equal(waiting.result(TIMEOUT_S), X)


def test_generous_timeout_succeeds_and_reaches_the_callee(served: Served) -> None:
    result, out = drive(served.http(), {**ECHO_META, "timeout": 11_000_000_000})
    assert result["has_error"] is False
    np.testing.assert_array_equal(out, X)
    assert meta(result)["timeout"] == 11_000_000_000


# -- what a BLS request carries ---------------------------------------------------------------


@pytest.mark.parametrize(("version", "expected"), [(1, 1.0), (2, 2.0), (-1, 2.0)])
def test_model_version_selects_the_version(served: Served, version: int, expected: float) -> None:
    result, out = drive(served.http(), {"model": "bls_versioned", "version": version})
    assert result["has_error"] is False, result
    np.testing.assert_array_equal(out, np.full(4, expected, np.float32))


def test_request_parameters_reach_the_callee(served: Served) -> None:
    params = {"int_p": 3, "bool_p": True, "str_p": "value"}
    result, _ = drive(served.http(), {**ECHO_META, "params": params})
    # The callee's request.parameters() is compact JSON text, as Triton 2.51 gives it.
    assert meta(result)["parameters"] == '{"int_p":3,"bool_p":true,"str_p":"value"}'


@pytest.mark.parametrize(("correlation_id", "flags"), [(42, 1), (42, 0), (42, 2), ("seq-x", 3)])
def test_correlation_id_and_flags_pass_through(
    served: Served, correlation_id: int | str, flags: int
) -> None:
    spec = {**ECHO_META, "correlation_id": correlation_id, "flags": flags, "request_id": "r-1"}
    callee = meta(drive(served.http(), spec)[0])
    assert (callee["correlation_id"], callee["flags"]) == (correlation_id, flags)
    assert callee["request_id"] == "r-1"


# -- deadlocks and threads ------------------------------------------------------------------


@pytest.mark.parametrize("cycle", ["self", "a-b-a"])
def test_deadlock_is_an_error_response_and_the_server_keeps_serving(
    served: Served, cycle: str
) -> None:
    client = served.http()
    if cycle == "self":  # bls_driver (one instance) calls bls_driver
        spec = {"model": "bls_driver", "spec": {"model": "bls_echo"}}
    else:  # bls_driver -> bls_relay -> bls_driver
        spec = {
            "model": "bls_relay",
            "spec": {"model": "bls_driver", "spec": {"model": "bls_echo"}},
        }
    # No BLS timeout and one instance of bls_driver: only the deadlock check can end the call
    # (the client gives up after TIMEOUT_S otherwise).
    result, _ = drive(client, spec)
    assert result["has_error"] is True
    assert result["message"].startswith(PREFIX.format("bls_driver"))
    assert "deadlock" in result["message"] and "bls_driver" in result["message"]
    if cycle == "a-b-a":
        assert "bls_relay" in result["message"]
    for _ in range(3):  # still serving, the driver and its callees included
        result, out = drive(client, {"model": "bls_echo"})
        assert result["has_error"] is False
        np.testing.assert_array_equal(out, X)


def test_deadlock_across_two_instances_is_detected(served: Served, tmp_path: Path) -> None:
    """Two requests to bls_self_pair (2 instances) each call bls_self_pair while holding one
    instance (a barrier makes both hold one first): the inner calls wait on each other. The
    call that closes the cycle is refused at once, which frees its instance for the other
    one. The BLS timeout (5 s) only bounds the test: a call it ended would say "Request
    timeout expired", not "deadlock"."""
    params = {"depth": 1, "timeout_us": 5_000_000, "barrier": str(tmp_path), "parties": 2}

    def call(_: int) -> dict[str, Any]:
        res = served.http().infer("bls_self_pair", [http_input("INPUT0", X, "FP32")],
                                  parameters=params)  # fmt: skip
        result: dict[str, Any] = json.loads(res.as_numpy("RESULT")[0])
        return result

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(call, range(2)))
    # One more request, so that the scheduler sees itself drained again (see
    # test_scheduler_drains_after_batches_that_end_together) and the server stops at once.
    served.http().infer("bls_self_pair", [http_input("INPUT0", X, "FP32")])
    refused = [r for r in results if r["has_error"]]
    assert refused, results  # the cycle was broken by refusing a call...
    for result in refused:
        assert "deadlock" in result["message"], result["message"]  # ...not by the timeout
    assert len(refused) < len(results), results  # and the other call went through


def test_exec_from_a_thread_the_model_started(served: Served) -> None:
    result, out = drive(served.http(), {"model": "bls_echo", "how": "thread"})
    assert result["has_error"] is False, result
    np.testing.assert_array_equal(out, X)


# -- found while testing BLS ------------------------------------------------------------------


class _GatedInstance:
    healthy = True

    def __init__(self, name: str, gate: asyncio.Event):
        self.name = name
        self.gate = gate
        self.running = False

    async def execute(self, batch: list[RequestContext]) -> None:
        self.running = True
        await self.gate.wait()
        for ctx in batch:
            ctx.on_response(InferResponse("m", "1", ""))


async def test_scheduler_drains_after_batches_that_end_together() -> None:
    gate = asyncio.Event()
    instances = [_GatedInstance("m_0", gate), _GatedInstance("m_1", gate)]
    sched = DefaultScheduler("m", instances)  # type: ignore[arg-type]
    for _ in range(2):
        sched.submit(RequestContext(InferRequest(model_name="m", inputs=[]), None, lambda r: None))
    await wait_until_async(lambda: all(i.running for i in instances), what="both batches to run")
    gate.set()  # both batches end in the same event-loop iteration
    await wait_until_async(lambda: not sched._tasks and not sched.pending, what="the drain")
    assert await sched.drain(1.0)
