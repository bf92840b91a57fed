"""The gRPC frontend's behaviour (servicer, stream handling, server) against the real server
(``python -m modelyard serve``) on the grpc_* test models, through the unmodified
tritonclient.grpc and tritonclient.grpc.aio.

Where these tests assert what Triton 2.51 does, it was checked against the reference Triton
on the same models (see test_grpc_differential.py). Models used (tests/models/):

* grpc_identity_all: echoes one optional input per datatype.
* grpc_slow: FP32 identity that sleeps for the parameter ``delay_ms``; two instances.
* grpc_decoupled: IN[0] = n responses [0] .. [n-1], then a flag-only FINAL; n < 0: an error.
* grpc_raise: execute raises.
* grpc_script: decoupled, plays the JSON script of its SCRIPT input in a thread of its own
  (data responses, error responses, flag-only or data finals, pauses, waiting for
  cancellation, reporting the requests it saw cancelled).
* grpc_echo: FP32 identity whose ECHO output tells what the request carried (parameters,
  correlation id, flags, timeout), the order the instance took requests in, and the requests
  it saw cancelled; one instance, dynamic batching with two priority levels.
* grpc_init_gate: initialize fails unless loaded with a config override (not loaded at start).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from modelyard.cli.grpc_environment import GRPC_ENVIRONMENT, apply_grpc_environment
from tests.conftest import Serving
from tests.helpers import grpc_input, metric_value, read_metrics, wait_until
from tests.serverproc import ServerProcess, start_server

pytestmark = pytest.mark.timeout(60)

LOADED = ["grpc_identity_all", "grpc_slow", "grpc_decoupled", "grpc_raise", "grpc_script",
          "grpc_echo"]  # fmt: skip
TIMEOUT = 10.0  # any one wait: a client call, one streamed response
STREAM_TIMEOUT = 30.0  # a whole stream
UNKNOWN = "Request for unknown model: 'nosuch' is not found"
DECOUPLED_UNSUPPORTED = "ModelInfer RPC doesn't support models with decoupled transaction policy"


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    """One server for the module: explicit mode, the LOADED models loaded; grpc_init_gate is in
    the repository but not loaded."""
    repo = serving.repo([*LOADED, "grpc_init_gate"])
    load = [a for name in LOADED for a in ("--load-model", name)]
    with serving.server(repo, "--model-control-mode", "explicit", *load) as proc:
        yield proc


# -- inputs and results --------------------------------------------------------------------


def _fp32(values: Any, name: str = "IN") -> list[Any]:
    return [grpc_input(name, np.asarray(values, dtype=np.float32), "FP32")]


def _echo_in(values: Any = (1.0,)) -> list[Any]:
    """grpc_echo's input: a batch of one."""
    return [grpc_input("IN", np.asarray([values], dtype=np.float32), "FP32")]


def _echo(result: Any) -> dict[str, Any]:
    """What grpc_echo says the request carried."""
    return dict(json.loads(result.as_numpy("ECHO")[0][0]))


def _count(n: int) -> list[Any]:
    return [grpc_input("IN", np.array([n], np.int32), "INT32")]


def _script(*steps: dict[str, Any]) -> list[Any]:
    """grpc_script's input: the steps it plays (see its config.pbtxt)."""
    text = np.array([json.dumps(steps).encode()], dtype=np.object_)
    return [grpc_input("SCRIPT", text, "BYTES")]


def _status(e: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(e.value.status())


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def _summary(item: tuple[Any, Any]) -> tuple[Any, ...]:
    """A streamed response as (id, OUT, final), or ("error", message, status)."""
    result, error = item
    if error is not None:
        assert result is None
        return ("error", error.message(), error.status())
    response = result.get_response()
    out = result.as_numpy("OUT")
    return (response.id, None if out is None else int(out.flatten()[0]), _final(result))


class Collector:
    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def take(self, n: int) -> list[tuple[Any, Any]]:
        return [self.items.get(timeout=TIMEOUT) for _ in range(n)]

    def none_after(self, seconds: float) -> bool:
        """True when nothing more arrives within ``seconds``."""
        try:
            self.items.get(timeout=seconds)
        except queue.Empty:
            return True
        return False


@contextmanager
def _stream(client: Any, **kwargs: Any) -> Iterator[Collector]:
    """A stream whose responses go to a Collector; half-closed (stop_stream) on exit."""
    got = Collector()
    client.start_stream(callback=got, stream_timeout=STREAM_TIMEOUT, **kwargs)
    try:
        yield got
    finally:
        client.stop_stream()


# -- startup -------------------------------------------------------------------------------


def test_logs_bound_port_and_a_taken_port_fails(server: ServerProcess, tmp_path: Path) -> None:
    """The server logs the port it bound (port 0 picks one); a second server asked for that
    port fails to start with an error naming it (the port is not silently shared)."""
    port = server.ports["grpc"]
    assert port > 0
    assert f"Started GRPCInferenceService at 127.0.0.1:{port}" in server.output()
    with pytest.raises(RuntimeError) as e:
        start_server(tmp_path, "--grpc-port", str(port), timeout=60.0)
    assert "server exited before binding its ports" in str(e.value)
    assert (
        f"failed to start a frontend: the gRPC service cannot listen on 127.0.0.1:{port}: "
        "address already in use"
    ) in str(e.value)
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        assert c.is_server_live(client_timeout=TIMEOUT)  # the first one is unaffected


def test_grpc_environment(server: ServerProcess) -> None:
    """``modelyard serve`` sets grpc's environment (docs/reference/serving.md): grpcio knows
    the experiments it turns off (an unknown one is logged at startup), and a value the user
    set wins."""
    assert "Unknown experiment" not in server.output()
    env: dict[str, str] = {}
    apply_grpc_environment(env)
    assert env == GRPC_ENVIRONMENT
    env = {"GRPC_EXPERIMENTS": ""}
    apply_grpc_environment(env)
    assert env == {**GRPC_ENVIRONMENT, "GRPC_EXPERIMENTS": ""}


GRPC_SEEN = """
import importlib.abc, os, sys

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "grpc" and "seen" not in globals():
            globals()["seen"] = os.environ.get("GRPC_EXPERIMENTS")
        return None

sys.meta_path.insert(0, Watch())
sys.argv = ["modelyard", sys.argv[1], "--help"]
from modelyard.cli.entry import run
try:
    run()
except SystemExit:
    pass
print(repr(globals().get("seen", "never imported")))
"""


@pytest.mark.parametrize("command", ["serve", "dev"])
def test_grpc_reads_its_environment_when_first_imported(command: str) -> None:
    """The command line's modules import grpc (tritonclient's model configuration): the
    `modelyard` entry point sets the environment before it imports them, or grpc would run
    with its EventEngine I/O threads after all (one thread hop more per request)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    run = subprocess.run(
        [sys.executable, "-c", GRPC_SEEN, command],
        capture_output=True, text=True, env=env, timeout=TIMEOUT * 6,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == repr(GRPC_ENVIRONMENT["GRPC_EXPERIMENTS"])


# -- health and metadata -------------------------------------------------------------------


def test_health_and_metadata(client: Any) -> None:
    assert client.is_server_live(client_timeout=TIMEOUT)
    assert client.is_server_ready(client_timeout=TIMEOUT)
    assert client.is_model_ready("grpc_echo")
    assert client.is_model_ready("grpc_echo", "1")
    assert not client.is_model_ready("nosuch")  # OK/false, as Triton 2.51
    assert not client.is_model_ready("grpc_echo", "2")
    assert not client.is_model_ready("grpc_init_gate")  # in the repository, not loaded
    with pytest.raises(InferenceServerException) as e:
        client.is_model_ready("grpc_echo", "abc")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == (
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0"
    )

    md = client.get_server_metadata(as_json=True)
    assert md["name"] == "triton" and md["version"] == "2.51.0"
    assert {"sequence", "logging", "model_repository", "statistics"} <= set(md["extensions"])
    mm = client.get_model_metadata("grpc_echo", as_json=True)
    assert mm["name"] == "grpc_echo" and mm["versions"] == ["1"] and mm["platform"] == "python"
    assert mm["inputs"] == [{"name": "IN", "datatype": "FP32", "shape": ["-1", "-1"]}]
    assert mm["outputs"] == [
        {"name": "OUT", "datatype": "FP32", "shape": ["-1", "-1"]},
        {"name": "ECHO", "datatype": "BYTES", "shape": ["-1", "1"]},
    ]
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("nosuch")
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == UNKNOWN

    cfg = client.get_model_config("grpc_script").config
    assert cfg.name == "grpc_script" and cfg.model_transaction_policy.decoupled
    assert [i.name for i in cfg.input] == ["SCRIPT"]
    cfg = client.get_model_config("grpc_echo").config
    assert not cfg.model_transaction_policy.decoupled
    assert cfg.max_batch_size == 8 and cfg.dynamic_batching.priority_levels == 2
    with pytest.raises(InferenceServerException) as e:
        client.get_model_config("nosuch")
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == UNKNOWN


# -- unary inference -----------------------------------------------------------------------


def test_infer(client: Any) -> None:
    a = np.arange(16, dtype=np.float32)
    b = np.arange(16, dtype=np.int32) - 8
    inputs = [grpc_input("IN_FP32", a, "FP32"), grpc_input("IN_INT32", b, "INT32")]
    result = client.infer("grpc_identity_all", inputs, request_id="r-1", client_timeout=TIMEOUT)
    np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), a)
    np.testing.assert_array_equal(result.as_numpy("OUT_INT32"), b)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (
        "grpc_identity_all", "1", "r-1",
    )  # fmt: skip
    assert "triton_final_response" not in response.parameters  # unary: no final flag
    assert [o.name for o in response.outputs] == ["OUT_INT32", "OUT_FP32"]  # model's order

    outputs = [grpcclient.InferRequestedOutput("OUT_INT32")]
    result = client.infer("grpc_identity_all", inputs, outputs=outputs, model_version="1",
                          client_timeout=TIMEOUT)  # fmt: skip
    assert result.as_numpy("OUT_FP32") is None
    np.testing.assert_array_equal(result.as_numpy("OUT_INT32"), b)
    assert result.get_response().model_version == "1"


def test_infer_large_and_bytes(client: Any) -> None:
    big = np.random.default_rng(0).random(4 << 20, dtype=np.float32)  # 16 MiB
    strings = np.array([b"a", b"", "\u00e9".encode(), b"\x00" * 5], dtype=np.object_)
    inputs = [grpc_input("IN_FP32", big, "FP32"), grpc_input("IN_BYTES", strings, "BYTES")]
    result = client.infer("grpc_identity_all", inputs, client_timeout=60)
    np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), big)
    np.testing.assert_array_equal(result.as_numpy("OUT_BYTES"), strings)
    assert result.as_numpy("OUT_BYTES").shape == (4,)


def test_response_parameters_are_typed(client: Any) -> None:
    """Parameters a model sets on its response (InferenceResponse(parameters=...)) travel as
    bool_param / int64_param / string_param."""
    params = {"b": True, "n": 3, "s": "x", "response_parameters": True}
    result = client.infer("grpc_echo", _echo_in(), parameters=params, client_timeout=TIMEOUT)
    got = result.get_response().parameters
    assert got["b"].bool_param is True and got["b"].WhichOneof("parameter_choice") == "bool_param"
    assert got["n"].int64_param == 3 and got["n"].WhichOneof("parameter_choice") == "int64_param"
    assert got["s"].string_param == "x"
    assert "triton_final_response" not in got


def test_infer_passes_request_fields_to_the_model(client: Any) -> None:
    result = client.infer(
        "grpc_echo", _echo_in([1.0, 2.0]), request_id="p", sequence_id=9, sequence_start=True,
        priority=1, timeout=100, parameters={"k": "v", "i": -4, "on": False},
        client_timeout=TIMEOUT,
    )  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("OUT"), [[1.0, 2.0]])
    echo = _echo(result)
    assert {k: echo[k] for k in ("request_id", "correlation_id", "flags", "timeout_us")} == {
        "request_id": "p", "correlation_id": 9, "flags": 1, "timeout_us": 100,
    }  # fmt: skip
    assert (echo["k"], echo["i"], echo["on"]) == ("v", -4, False)
    # A string correlation id, and the END flag.
    result = client.infer("grpc_echo", _echo_in(), sequence_id="abc", sequence_end=True,
                          client_timeout=TIMEOUT)  # fmt: skip
    echo = _echo(result)
    assert (echo["correlation_id"], echo["flags"], echo["request_id"]) == ("abc", 2, "")


def test_priority_reaches_the_scheduler(client: Any, server: ServerProcess, tmp_path: Path) -> None:
    """While grpc_echo's one instance is busy, a priority-1 request sent after a priority-2
    one is taken first (the frontend passes ``priority`` on; default level is 2). The busy
    request holds the instance until both wait in the queue, then the test cancels it."""
    done: queue.Queue[tuple[str, Any, Any]] = queue.Queue()

    def send(rid: str, **kwargs: Any) -> Any:
        return client.async_infer(
            "grpc_echo", _echo_in(), request_id=rid, client_timeout=STREAM_TIMEOUT,
            callback=lambda result, error: done.put((rid, result, error)), **kwargs,
        )  # fmt: skip

    started = tmp_path / "busy-started"
    busy = send("busy", parameters={"wait_cancel_ms": 30_000, "started_file": str(started)})
    wait_until(started.exists, what="the busy request to run")
    send("low", priority=2)
    send("high", priority=1)
    wait_until(lambda: _pending(server, "grpc_echo") == 2, what="low and high to queue")
    busy.cancel()
    seq, errors = {}, {}
    for _ in range(3):
        rid, result, error = done.get(timeout=STREAM_TIMEOUT)
        if error is not None:
            errors[rid] = error
        else:
            seq[rid] = _echo(result)["seq"]
    assert list(errors) == ["busy"], errors  # cancelled by the test
    assert seq["high"] < seq["low"]


def _pending(server: ServerProcess, model: str) -> float | None:
    text = read_metrics(server.metrics_url)
    return metric_value(text, "nv_inference_pending_request_count", model=model)


def test_priority_out_of_range_uses_the_default_level(client: Any) -> None:
    result = client.infer("grpc_echo", _echo_in(), request_id="p3", priority=3,
                          client_timeout=TIMEOUT)  # fmt: skip
    assert _echo(result)["request_id"] == "p3"


def test_infer_errors(client: Any) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("nosuch", _echo_in(), client_timeout=TIMEOUT)
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == UNKNOWN

    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_script", _script({"final": True}), client_timeout=TIMEOUT)
    assert _status(e) == "StatusCode.UNIMPLEMENTED"
    assert e.value.message() == DECOUPLED_UNSUPPORTED

    # An error response from the model: INTERNAL with the model's text, as it is.
    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_echo", _echo_in(), parameters={"error": "model says no"},
                     client_timeout=TIMEOUT)  # fmt: skip
    assert _status(e) == "StatusCode.INTERNAL" and e.value.message() == "model says no"

    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_echo", _echo_in(), model_version="v1", client_timeout=TIMEOUT)
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == (
        "failed to get model version from specified version string 'v1' (details: stol), "
        "version should be an integral value > 0"
    )
    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_echo", _echo_in(), model_version="7", client_timeout=TIMEOUT)
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == "Request for unknown model: 'grpc_echo' version 7 is not found"

    # The model keeps serving.
    result = client.infer("grpc_echo", _echo_in([5.0]), client_timeout=TIMEOUT)
    np.testing.assert_array_equal(result.as_numpy("OUT"), [[5.0]])


def test_reserved_parameter_and_typed_contents_over_the_wire(server: ServerProcess) -> None:
    """Requests tritonclient cannot build: a triton_* key, and typed contents."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="grpc_identity_all")
        request.parameters["triton_nope"].bool_param = True
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(request, timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == (
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
            "following keys starting with 'triton_' are allowed: "
            "triton_enable_empty_final_response"
        )

        request = service_pb2.ModelInferRequest(model_name="grpc_identity_all", id="t")
        t = request.inputs.add(name="IN_INT16", datatype="INT16", shape=[3])
        t.contents.int_contents.extend([1, -2, 70000])
        reply = stub.ModelInfer(request, timeout=TIMEOUT)
        assert reply.id == "t" and list(reply.outputs[0].shape) == [3]
        assert reply.outputs[0].datatype == "INT16"
        # Outputs always travel in raw_output_contents; 70000 wraps to int16, as in Triton.
        assert not reply.outputs[0].HasField("contents")
        assert np.frombuffer(reply.raw_output_contents[0], np.int16).tolist() == [1, -2, 4464]


def test_async_infer_callback(client: Any) -> None:
    done: queue.Queue[Any] = queue.Queue()
    client.async_infer("grpc_echo", _echo_in([3.0, 4.0]), request_id="cb",
                       callback=lambda result, error: done.put((result, error)),
                       client_timeout=TIMEOUT)  # fmt: skip
    result, error = done.get(timeout=TIMEOUT)
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUT"), [[3.0, 4.0]])
    assert result.get_response().id == "cb" and _echo(result)["request_id"] == "cb"
    # An error comes to the callback too.
    client.async_infer(
        "nosuch",
        _echo_in(),
        lambda result, error: done.put((result, error)),
        client_timeout=TIMEOUT,
    )
    result, error = done.get(timeout=TIMEOUT)
    assert result is None and error.message() == UNKNOWN
    assert str(error.status()) == "StatusCode.NOT_FOUND"


# -- streaming -----------------------------------------------------------------------------


def test_stream_decoupled_flag_only_final(client: Any) -> None:
    """A flag-only FINAL is not sent by default (the last data response is not final); with
    ``enable_empty_final_response`` it comes as an empty final response."""
    with _stream(client) as got:
        client.async_stream_infer("grpc_decoupled", _count(3), request_id="d")
        results = got.take(3)
        assert [_summary(r) for r in results] == [("d", 0, False), ("d", 1, False), ("d", 2, False)]
        response = results[0][0].get_response()
        assert (response.model_name, response.model_version) == ("grpc_decoupled", "1")

        client.async_stream_infer("grpc_decoupled", _count(1), request_id="e",
                                  enable_empty_final_response=True)  # fmt: skip
        (first, _), (last, error) = got.take(2)
        assert error is None and _summary((first, None)) == ("e", 0, False)
        empty = last.get_response()
        assert _final(last) is True and empty.id == "e" and empty.model_name == "grpc_decoupled"
        assert len(empty.outputs) == 0 and len(empty.raw_output_contents) == 0
        assert empty.model_version == ""  # as Triton sends it
        assert set(empty.parameters) == {"triton_final_response"}

        # No data at all: nothing by default, the empty final when asked for.
        client.async_stream_infer("grpc_decoupled", _count(0), request_id="z0")
        client.async_stream_infer("grpc_decoupled", _count(0), request_id="z1",
                                  enable_empty_final_response=True)  # fmt: skip
        assert [_summary(r) for r in got.take(1)] == [("z1", None, True)]
        assert got.none_after(0.3)


def test_stream_decoupled_data_final(client: Any) -> None:
    """A response sent with the FINAL flag is final itself: no extra empty response, even when
    ``enable_empty_final_response`` asks for one."""
    with _stream(client) as got:
        client.async_stream_infer("grpc_script", _script({"out": 1}, {"out": 2, "final": True}),
                                  request_id="df")  # fmt: skip
        assert [_summary(r) for r in got.take(2)] == [("df", 1, False), ("df", 2, True)]
        client.async_stream_infer("grpc_script", _script({"out": 3}, {"out": 4, "final": True}),
                                  request_id="de", enable_empty_final_response=True)  # fmt: skip
        assert [_summary(r) for r in got.take(2)] == [("de", 3, False), ("de", 4, True)]
        assert got.none_after(0.3)
        # The flag-only FINAL after data, for contrast.
        client.async_stream_infer("grpc_script", _script({"out": 5}, {"final": True}),
                                  request_id="fo", enable_empty_final_response=True)  # fmt: skip
        assert [_summary(r) for r in got.take(2)] == [("fo", 5, False), ("fo", None, True)]


def test_stream_decoupled_responses_as_produced(client: Any) -> None:
    """Decoupled responses are written as the model produces them: a later request's come
    first when it is faster, and requests interleave (at 0, 300, 600 and 900 ms)."""
    with _stream(client) as got:
        client.async_stream_infer(
            "grpc_script",
            _script({"sleep_ms": 300}, {"out": 1}, {"sleep_ms": 600}, {"out": 2, "final": True}),
            request_id="slow",
        )
        client.async_stream_infer(
            "grpc_script",
            _script({"out": 10}, {"sleep_ms": 600}, {"out": 11}, {"final": True}),
            request_id="fast",
        )
        results = [_summary(r) for r in got.take(4)]
    assert results == [("fast", 10, False), ("slow", 1, False), ("fast", 11, False),
                       ("slow", 2, True)]  # fmt: skip


def test_stream_non_decoupled_in_request_order(client: Any) -> None:
    """Non-decoupled responses come back in request order (each final) however long each
    takes; a decoupled request's responses are not held behind them."""
    with _stream(client) as got:
        for rid, delay in (("s400", 400), ("s200", 200), ("s0", 0)):
            client.async_stream_infer("grpc_slow", _fp32([1.0]), request_id=rid,
                                      parameters={"delay_ms": delay})  # fmt: skip
        client.async_stream_infer("grpc_script", _script({"out": 7, "final": True}),
                                  request_id="dec")  # fmt: skip
        results = [_summary(r) for r in got.take(4)]
    assert results[0] == ("dec", 7, True)
    assert results[1:] == [("s400", 1, True), ("s200", 1, True), ("s0", 1, True)]


def test_stream_errors_keep_stream_open(client: Any) -> None:
    with _stream(client) as got:
        client.async_stream_infer("nosuch", _count(1), request_id="x")
        client.async_stream_infer("grpc_decoupled", _count(-1), request_id="neg")
        client.async_stream_infer("grpc_echo", _echo_in(), request_id="f",
                                  parameters={"error": "model says no"})  # fmt: skip
        client.async_stream_infer("grpc_raise", _fp32([1.0]), request_id="r")
        errors = {}
        for result, error in got.take(4):
            assert result is None and error is not None
            assert error.status() is None  # an error_message on the stream, not a status
            errors[error.message().split("\n")[0]] = error
        assert set(errors) == {
            UNKNOWN,
            "negative count",
            "model says no",
            "Failed to process the request(s) for model 'grpc_raise_0', message: "
            "RuntimeError: grpc model failure",
        }

        # An error response in the middle of a decoupled request: the rest still comes.
        client.async_stream_infer(
            "grpc_script",
            _script({"out": 1}, {"error": "mid"}, {"out": 2}, {"error": "end", "final": True}),
            request_id="m",
        )
        assert [_summary(r) for r in got.take(4)] == [
            ("m", 1, False), ("error", "mid", None), ("m", 2, False), ("error", "end", None),
        ]  # fmt: skip

        # Still open.
        client.async_stream_infer("grpc_echo", _echo_in(), request_id="ok")
        ((result, error),) = got.take(1)
        assert error is None and result.get_response().id == "ok" and _final(result)


def test_stream_error_responses_over_the_wire(server: ServerProcess) -> None:
    """What each kind of error carries on the stream (as Triton 2.51): errors the model sent
    have the request id, model name, the version as requested and the final flag; errors
    found before inference have the request id only."""

    def request(model: str, rid: str, *steps: dict[str, Any]) -> Any:
        msg = service_pb2.ModelInferRequest(model_name=model, id=rid)
        t = msg.inputs.add(name="SCRIPT", datatype="BYTES", shape=[1])
        t.contents.bytes_contents.append(json.dumps(steps).encode())
        return msg

    requests = [
        request("grpc_script", "a", {"out": 1}, {"error": "mid"}, {"error": "last", "final": True}),
        request("nosuch", "u"),
    ]
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        replies = list(stub.ModelStreamInfer(iter(requests), timeout=STREAM_TIMEOUT))
    by_id: dict[str, list[Any]] = {}
    for reply in replies:
        by_id.setdefault(reply.infer_response.id, []).append(reply)
    data, mid, last = by_id["a"]
    assert data.error_message == "" and data.infer_response.model_version == "1"
    for reply, text, final in ((mid, "mid", False), (last, "last", True)):
        assert reply.error_message == text
        r = reply.infer_response
        assert (r.model_name, r.model_version, len(r.outputs)) == ("grpc_script", "", 0)
        assert r.parameters["triton_final_response"].bool_param is final
    ((unknown,),) = [by_id["u"]]
    assert unknown.error_message == UNKNOWN
    assert unknown.infer_response == service_pb2.ModelInferResponse(id="u")


def test_stream_many_in_flight(client: Any) -> None:
    with _stream(client) as got:
        for i in range(50):
            client.async_stream_infer("grpc_decoupled", _count(2), request_id=f"d{i}",
                                      parameters={"delay_ms": 5})  # fmt: skip
            if i % 5 == 0:
                client.async_stream_infer("grpc_slow", _fp32([i]), request_id=f"s{i}")
        results = [_summary(r) for r in got.take(110)]
        assert got.none_after(0.2)
    by_id: dict[str, list[int]] = {}
    for rid, out, _final_flag in results:
        by_id.setdefault(rid, []).append(out)
    assert {k: v for k, v in by_id.items() if k.startswith("d")} == {
        f"d{i}": [0, 1] for i in range(50)
    }
    assert all(not final for rid, _, final in results if rid.startswith("d"))
    # The non-decoupled ones in request order among themselves, each final.
    assert [(rid, out) for rid, out, _ in results if rid.startswith("s")] == [
        (f"s{i}", i) for i in range(0, 50, 5)
    ]
    assert all(final for rid, _, final in results if rid.startswith("s"))


def test_stream_grpc_error_header_ends_stream(server: ServerProcess) -> None:
    """With ``triton_grpc_error: true`` the first error a model returns ends the stream with
    its status; errors found before inference (unknown model) do not, as in Triton 2.51."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    headers = {"triton_grpc_error": "true"}
    try:
        got = Collector()
        client.start_stream(callback=got, headers=headers, stream_timeout=STREAM_TIMEOUT)
        client.async_stream_infer("nosuch", _count(1))
        ((result, error),) = got.take(1)
        assert result is None and error.status() is None and error.message() == UNKNOWN
        client.async_stream_infer("grpc_echo", _echo_in(), request_id="ok")
        ((result, error),) = got.take(1)
        assert error is None and result.get_response().id == "ok"
        client.async_stream_infer("grpc_echo", _echo_in(), parameters={"error": "model says no"})
        ((result, error),) = got.take(1)
        assert result is None
        assert str(error.status()) == "StatusCode.INTERNAL"
        assert error.message() == "model says no"
        with pytest.raises(InferenceServerException):  # the stream is over
            client.async_stream_infer("grpc_echo", _echo_in())
        client.stop_stream()

        # A decoupled model's error response mid-stream ends it with that error's code; what
        # the model sends afterwards is not delivered.
        got = Collector()
        client.start_stream(callback=got, headers=headers, stream_timeout=STREAM_TIMEOUT)
        client.async_stream_infer(
            "grpc_script",
            _script({"out": 1}, {"error": "bad", "code": "INVALID_ARG"}, {"out": 2},
                    {"final": True}),
            request_id="g",
        )  # fmt: skip
        (first, (result, error)) = got.take(2)
        assert _summary(first) == ("g", 1, False)
        assert result is None and str(error.status()) == "StatusCode.INVALID_ARGUMENT"
        assert error.message() == "bad"
        assert got.none_after(0.3)
        client.stop_stream()
    finally:
        client.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as again:
        assert again.is_server_live(client_timeout=TIMEOUT)


# -- aio client ----------------------------------------------------------------------------


async def test_aio_client(server: ServerProcess) -> None:
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        assert await client.is_server_live()
        assert await client.is_model_ready("grpc_echo")
        result = await client.infer("grpc_echo", _echo_in([1.0, 2.0]), request_id="a",
                                    client_timeout=TIMEOUT)  # fmt: skip
        np.testing.assert_array_equal(result.as_numpy("OUT"), [[1.0, 2.0]])
        assert _echo(result)["request_id"] == "a"
        with pytest.raises(InferenceServerException) as e:
            await client.infer("grpc_script", _script({"final": True}))
        assert _status(e) == "StatusCode.UNIMPLEMENTED"

        async def requests() -> Any:
            yield {"model_name": "grpc_script", "request_id": "s1",
                   "inputs": _script({"out": 1}, {"sleep_ms": 100}, {"out": 2, "final": True})}  # fmt: skip
            yield {"model_name": "grpc_echo", "inputs": _echo_in(), "request_id": "s2"}
            yield {"model_name": "nosuch", "inputs": _echo_in(), "request_id": "s3"}
            yield {
                "model_name": "grpc_decoupled",
                "inputs": _count(1),
                "request_id": "s4",
            }

        seen: list[tuple[Any, ...]] = []
        async for result, error in client.stream_infer(requests(), stream_timeout=STREAM_TIMEOUT):
            seen.append(_summary((result, error)))
    assert sorted(s for s in seen if s[0] == "s1") == [("s1", 1, False), ("s1", 2, True)]
    assert [s for s in seen if s[0] == "s2"] == [("s2", 1, True)]
    # (The aio client does not send enable_empty_final_response: no empty final for s4.)
    assert [s for s in seen if s[0] == "s4"] == [("s4", 0, False)]
    assert [s for s in seen if s[0] == "error"] == [("error", UNKNOWN, None)]
    assert len(seen) == 5


# -- statistics, repository, settings, shared memory ---------------------------------------


def _stats(client: Any, model: str) -> dict[str, Any]:
    (s,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return dict(s)


def _n(stats: dict[str, Any], key: str) -> int:
    return int(stats["inference_stats"][key].get("count", 0))


def test_statistics(client: Any) -> None:
    before = _stats(client, "grpc_echo")
    for _ in range(2):
        client.infer("grpc_echo", _echo_in(), client_timeout=TIMEOUT)
    after = client.get_inference_statistics("grpc_echo", "1", as_json=True)["model_stats"][0]
    assert after["name"] == "grpc_echo" and after["version"] == "1"
    assert _n(after, "success") == _n(before, "success") + 2
    assert _n(after, "fail") == _n(before, "fail")
    assert int(after["inference_count"]) == int(before.get("inference_count", 0)) + 2
    assert int(after["execution_count"]) >= int(before.get("execution_count", 0)) + 1
    assert int(after["inference_stats"]["success"]["ns"]) > int(
        before["inference_stats"]["success"].get("ns", 0)
    )
    assert int(after["last_inference"]) > 0
    assert any(b["batch_size"] == "1" for b in after["batch_stats"])

    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert sorted(s["name"] for s in every) == sorted(LOADED)
    with pytest.raises(InferenceServerException) as e:
        client.get_inference_statistics("nosuch")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == "requested model 'nosuch' is not available"


def test_statistics_unknown_version_message(client: Any) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.get_inference_statistics("grpc_echo", "2")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == "requested model version is not available for model 'grpc_echo'"


def test_error_responses_count_as_failures(client: Any) -> None:
    # Beyond Triton 2.51, which counts a request the model answers with an error response as
    # a success.
    before = _stats(client, "grpc_echo")
    with pytest.raises(InferenceServerException):
        client.infer("grpc_echo", _echo_in(), parameters={"error": "no"}, client_timeout=TIMEOUT)
    after = _stats(client, "grpc_echo")
    assert _n(after, "success") == _n(before, "success")
    assert _n(after, "fail") == _n(before, "fail") + 1
    assert int(after["inference_count"]) == int(before.get("inference_count", 0))


def test_repository(client: Any) -> None:
    index = client.get_model_repository_index(as_json=True)["models"]
    for name in LOADED:
        assert {"name": name, "version": "1", "state": "READY"} in index
    assert {"name": "grpc_init_gate"} in index  # present, never loaded

    with pytest.raises(InferenceServerException) as e:
        client.load_model("nosuch")
    assert _status(e) == "StatusCode.INTERNAL"
    assert e.value.message() == "failed to load 'nosuch', failed to poll from model repository"
    # File overrides that would escape the model folder are refused before anything is
    # written, with Triton's status and text, then the reason.
    for bad in ("file:../x", "file:/../etc/x", "file:1/../../x"):
        with pytest.raises(InferenceServerException) as e:
            client.load_model("grpc_echo", config="{}", files={bad: b"x"})
        assert _status(e) == "StatusCode.INTERNAL"
        assert e.value.message().startswith(
            "failed to load 'grpc_echo', failed to poll from model repository: "
            f"invalid file override path '{bad[5:]}' in load parameter '{bad}'"
        )
    assert client.is_model_ready("grpc_echo")

    # Reload (same config) and unload with unload_dependents; then load it back.
    client.load_model("grpc_raise")
    assert client.is_model_ready("grpc_raise")
    client.unload_model("grpc_raise", unload_dependents=True)
    assert not client.is_model_ready("grpc_raise")
    (entry,) = [m for m in client.get_model_repository_index(as_json=True)["models"]
                if m["name"] == "grpc_raise"]  # fmt: skip
    assert (entry["state"], entry["reason"]) == ("UNAVAILABLE", "unloaded")
    client.load_model("grpc_raise")
    assert client.is_model_ready("grpc_raise")
    client.unload_model("nosuch")  # unknown: OK, as Triton


def _gate_config(**extra: Any) -> str:
    return json.dumps({
        "name": "grpc_init_gate", "backend": "python", "max_batch_size": 0,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}],
        **extra,
    })  # fmt: skip


def test_load_with_file_overrides(client: Any) -> None:
    doubled = (
        b"import triton_python_backend_utils as pb_utils\n"
        b"class TritonPythonModel:\n"
        b"    def execute(self, requests):\n"
        b"        return [pb_utils.InferenceResponse([pb_utils.Tensor('OUT', 2 * pb_utils."
        b"get_input_tensor_by_name(r, 'IN').as_numpy())]) for r in requests]\n"
    )
    try:
        client.load_model("grpc_init_gate", config=_gate_config(),
                          files={"file:1/model.py": doubled})  # fmt: skip
        result = client.infer("grpc_init_gate", _fp32([1.0, 2.5]), client_timeout=TIMEOUT)
        np.testing.assert_array_equal(result.as_numpy("OUT"), [2.0, 5.0])
    finally:
        client.unload_model("grpc_init_gate")


def test_unloaded_model_keeps_its_version_in_the_index(client: Any) -> None:
    client.unload_model("grpc_raise")
    try:

        def unloaded() -> list[dict[str, Any]] | None:  # Triton unloads in the background
            index: list[dict[str, Any]] = client.get_model_repository_index(as_json=True)["models"]
            (entry,) = [m for m in index if m["name"] == "grpc_raise"]
            return None if entry["state"] == "UNLOADING" else index

        index = wait_until(unloaded, TIMEOUT, 0.05, what="the unload")
        assert {"name": "grpc_raise", "version": "1", "state": "UNAVAILABLE",
                "reason": "unloaded"} in index  # fmt: skip
    finally:
        client.load_model("grpc_raise")


def test_log_and_trace_settings(client: Any) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"] == {"bool_param": True}
    assert settings["log_format"] == {"string_param": "default"}
    assert settings["log_verbose_level"] == {"uint32_param": 0}
    try:
        updated = client.update_log_settings({"log_verbose_level": 1, "log_info": False},
                                             as_json=True)["settings"]  # fmt: skip
        assert updated["log_verbose_level"] == {"uint32_param": 1}
        assert updated["log_info"] == {"bool_param": False}
        assert client.get_log_settings(as_json=True)["settings"] == updated
    finally:
        client.update_log_settings({"log_info": True, "log_verbose_level": 0})
    with pytest.raises(InferenceServerException) as e:
        client.update_log_settings({"log_file": "/tmp/x"})
    assert _status(e) == "StatusCode.UNIMPLEMENTED"
    assert e.value.message() == "log file location can not be updated through network protocol"
    with pytest.raises(InferenceServerException) as e:
        client.update_log_settings({"log_format": "json"})
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == "invalid argument for log_format, got: json"
    assert client.get_log_settings(as_json=True)["settings"]["log_info"] == {"bool_param": True}

    trace = client.get_trace_settings(as_json=True)["settings"]
    assert trace["trace_level"] == {"value": ["OFF"]}
    assert trace["trace_rate"] == {"value": ["1000"]}
    try:
        trace = client.update_trace_settings(settings={"trace_rate": "7"}, as_json=True)
        assert trace["settings"]["trace_rate"] == {"value": ["7"]}
        model = client.get_trace_settings(model_name="grpc_echo", as_json=True)["settings"]
        assert model["trace_rate"] == {"value": ["7"]}  # models follow the global setting
    finally:
        client.update_trace_settings(settings={"trace_rate": "1000"})
    with pytest.raises(InferenceServerException) as e:
        client.get_trace_settings(model_name="nosuch")
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == "Request for unknown model : nosuch"
    with pytest.raises(InferenceServerException) as e:
        client.update_trace_settings(settings={"trace_file": "x"})
    assert _status(e) == "StatusCode.UNIMPLEMENTED"


def test_shared_memory_status_and_cuda(client: Any) -> None:
    assert client.get_system_shared_memory_status(as_json=True) == {}
    with pytest.raises(InferenceServerException) as e:
        client.get_system_shared_memory_status("nope")
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == "Unable to find system shared memory region: 'nope'"
    client.unregister_system_shared_memory()
    client.unregister_system_shared_memory("nope")
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    client.unregister_cuda_shared_memory()
    with pytest.raises(InferenceServerException) as e:
        client.register_cuda_shared_memory("r", b"\0" * 64, 0, 16)
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert (
        e.value.message() == "failed to register CUDA shared memory region: 'r', GPUs not supported"
    )


def test_advertised_system_shared_memory_registers(client: Any) -> None:
    assert "system_shared_memory" in client.get_server_metadata(as_json=True)["extensions"]
    region = shared_memory.SharedMemory(create=True, size=64)
    try:
        client.register_system_shared_memory("r", "/" + region.name, 64)
        status = client.get_system_shared_memory_status("r", as_json=True)
        assert status["regions"]["r"]["byte_size"] == "64"
        client.unregister_system_shared_memory("r")
    finally:
        region.close()
        region.unlink()


def test_health_service(server: ServerProcess) -> None:
    """grpc.health.v1.Health is always served: Check answers SERVING (whatever the service
    name); Watch is not served, as in Triton."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService", "anything"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Watch(health_pb2.HealthCheckRequest(), timeout=TIMEOUT))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_classification(client: Any) -> None:
    outputs = [grpcclient.InferRequestedOutput("OUT", class_count=2)]
    result = client.infer("grpc_slow", _fp32([0.5, 3.0, 1.0, 2.0]), outputs=outputs,
                          client_timeout=TIMEOUT)  # fmt: skip
    assert result.as_numpy("OUT").tolist() == [b"3.000000:1", b"2.000000:3"]
    assert result.get_response().outputs[0].datatype == "BYTES"


def test_shared_memory_region_unknown(client: Any) -> None:
    inp = grpcclient.InferInput("IN", [4], "FP32")
    inp.set_shared_memory("nope", 16)
    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_slow", [inp], client_timeout=TIMEOUT)
    assert _status(e) == "StatusCode.NOT_FOUND"
    assert e.value.message() == "Unable to find shared memory region: 'nope'"


def test_compressed_requests(client: Any) -> None:
    a = np.arange(1000, dtype=np.float32)
    for algorithm in ("gzip", "deflate"):
        result = client.infer("grpc_slow", _fp32(a), compression_algorithm=algorithm,
                              client_timeout=TIMEOUT)  # fmt: skip
        np.testing.assert_array_equal(result.as_numpy("OUT"), a)


# -- cancellation and half-close -----------------------------------------------------------


def test_deadline_cancels_the_request(client: Any) -> None:
    """A client deadline ends the call with DEADLINE_EXCEEDED and cancels the request: the
    model sees ``is_cancelled()`` (else grpc_echo would wait 5 s), and keeps serving."""
    with pytest.raises(InferenceServerException) as e:
        client.infer("grpc_echo", _echo_in(), request_id="late",
                     parameters={"wait_cancel_ms": 5000}, client_timeout=1.0)  # fmt: skip
    assert _status(e) == "StatusCode.DEADLINE_EXCEEDED"
    # The next request runs once grpc_echo's one instance is free: it saw "late" cancelled.
    result = client.infer("grpc_echo", _echo_in(), request_id="next", client_timeout=TIMEOUT)
    assert "late" in _echo(result)["cancelled"]


def _cancelled_by_script(client: Any, expected: set[str]) -> set[str]:
    """The requests grpc_script saw cancelled, once ``expected`` are among them."""

    def report() -> set[str] | None:
        with _stream(client) as got:
            client.async_stream_infer("grpc_script", _script({"report": True, "final": True}))
            ((result, error),) = got.take(1)
        assert error is None
        ids = set(result.as_numpy("IDS")[0].decode().split(",")) - {""}
        return ids if expected <= ids else None

    return wait_until(report, STREAM_TIMEOUT, 0.05, what=f"grpc_script to see {expected} cancelled")


def test_stream_cancel_with_requests_in_flight(server: ServerProcess, tmp_path: Path) -> None:
    """Cancelling the stream cancels every request in flight on it, decoupled or not: the
    models see ``is_cancelled()``; the server keeps serving."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got = Collector()
    ids = [f"c{i}" for i in range(5)]
    started = tmp_path / "ce-started"
    try:
        client.start_stream(callback=got, stream_timeout=STREAM_TIMEOUT)
        client.async_stream_infer("grpc_echo", _echo_in(), request_id="ce",
                                  parameters={"wait_cancel_ms": 8000,
                                              "started_file": str(started)})  # fmt: skip
        for i, rid in enumerate(ids):
            client.async_stream_infer(
                "grpc_script",
                _script({"out": i}, {"wait_cancel_ms": 8000}, {"out": -1, "final": True}),
                request_id=rid,
            )
        assert sorted(_summary(r) for r in got.take(5)) == [(rid, i, False) for i, rid in
                                                            enumerate(ids)]  # fmt: skip
        wait_until(started.exists, what='grpc_echo to start "ce"')
        client.stop_stream(cancel_requests=True)
    finally:
        client.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as again:
        assert set(ids) <= _cancelled_by_script(again, set(ids))
        # grpc_echo's one instance is free again at once (not after 8 s), having seen it.
        result = again.infer("grpc_echo", _echo_in(), client_timeout=TIMEOUT)
        assert "ce" in _echo(result)["cancelled"]
        with _stream(again) as got2:
            again.async_stream_infer("grpc_decoupled", _count(2), request_id="after")
            assert [_summary(r) for r in got2.take(2)] == [("after", 0, False),
                                                           ("after", 1, False)]  # fmt: skip
    # After the cancellation the old stream got only the client's own CANCELLED notice.
    assert [_summary(r) for r in got.take(1)] == [
        ("error", "Locally cancelled by application!", "StatusCode.CANCELLED")
    ]
    assert got.none_after(0.2)


def test_stream_half_close_waits_for_in_flight(server: ServerProcess) -> None:
    """stop_stream() half-closes: the call ends only after in-flight requests are answered."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got = Collector()
    try:
        client.start_stream(callback=got, stream_timeout=STREAM_TIMEOUT)
        client.async_stream_infer(
            "grpc_script",
            _script({"sleep_ms": 100}, {"out": 0}, {"sleep_ms": 100}, {"out": 1},
                    {"sleep_ms": 100}, {"out": 2}, {"final": True}),
            request_id="h", enable_empty_final_response=True,
        )  # fmt: skip
        client.async_stream_infer("grpc_slow", _fp32([4.0]), request_id="hs",
                                  parameters={"delay_ms": 200})  # fmt: skip
        client.stop_stream()  # returns when the server has finished the call
        assert got.items.qsize() == 5
        results = [_summary(r) for r in got.take(5)]
    finally:
        client.close()
    assert [r for r in results if r[0] == "h"] == [
        ("h", 0, False), ("h", 1, False), ("h", 2, False), ("h", None, True),
    ]  # fmt: skip
    assert [r for r in results if r[0] == "hs"] == [("hs", 4, True)]


# -- readiness and load failures (these change the server's readiness: keep them last) -----


def test_load_failure_is_reported_as_triton_does(client: Any) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.load_model("grpc_init_gate")
    message = e.value.message()
    assert _status(e) == "StatusCode.INVALID_ARGUMENT"
    assert message.startswith(
        "load failed for model 'grpc_init_gate': version 1 is at UNAVAILABLE state: Internal: "
        "TritonModelException: grpc_init_gate: initialize refused"
    )
    assert message.endswith(";\n")
    (entry,) = [m for m in client.get_model_repository_index(as_json=True)["models"]
                if m["name"] == "grpc_init_gate"]  # fmt: skip
    assert entry["reason"].startswith(
        "Internal: TritonModelException: grpc_init_gate: initialize refused"
    )


def test_readiness_follows_model_loads(client: Any) -> None:
    """A model that fails to load makes the server not ready (strict readiness) and shows as
    UNAVAILABLE with the reason; loading it successfully (config override) makes the server
    ready again; unloading it leaves the server ready."""
    with pytest.raises(InferenceServerException) as e:
        client.load_model("grpc_init_gate")
    assert "grpc_init_gate: initialize refused" in e.value.message()
    assert client.is_server_live()
    assert not client.is_server_ready()
    assert not client.is_model_ready("grpc_init_gate")
    (entry,) = [m for m in client.get_model_repository_index(as_json=True)["models"]
                if m["name"] == "grpc_init_gate"]  # fmt: skip
    assert entry["state"] == "UNAVAILABLE"
    assert "TritonModelException: grpc_init_gate: initialize refused" in entry["reason"]
    assert client.is_model_ready("grpc_echo")  # the others are unaffected

    client.load_model("grpc_init_gate", config=_gate_config())
    assert client.is_server_ready() and client.is_model_ready("grpc_init_gate")
    result = client.infer("grpc_init_gate", _fp32([1.5]), client_timeout=TIMEOUT)
    np.testing.assert_array_equal(result.as_numpy("OUT"), [1.5])

    client.unload_model("grpc_init_gate", unload_dependents=True)
    assert not client.is_model_ready("grpc_init_gate")
    assert client.is_server_ready()
