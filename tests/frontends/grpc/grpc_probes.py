"""Observations of a server's gRPC behaviour, made the same way against modelyard and the
reference Triton (see test_grpc_differential.py). Each probe returns plain JSON-able data:
``["ok", ...]`` with what came back, or ``["err", status, message]``."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any, TypeAlias

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

TIMEOUT = 30.0
# How long a probe keeps trying while the server's port refuses connections: under load the
# reference Triton's gRPC port has refused connections for seconds after it answered ready.
UNREACHABLE_S = 60.0
Alive: TypeAlias = Callable[[], bool]  # whether the server's process still runs
Stub: TypeAlias = Any  # a GRPCInferenceServiceStub (the generated module has no types)


def unreachable(observed: list[Any]) -> bool:
    """A connection failure: never the server's answer, so the probe is tried again."""
    return (
        len(observed) == 3
        and observed[0] == "err"
        and observed[1] == str(grpc.StatusCode.UNAVAILABLE)
        and "failed to connect" in str(observed[2]).lower()
    )


def _until_reached(probe: Callable[[], list[Any]], alive: Alive) -> list[Any]:
    """``probe`` again while the port refuses and the server's process still runs."""
    deadline = time.monotonic() + UNREACHABLE_S
    observed = probe()
    while unreachable(observed) and alive() and time.monotonic() < deadline:
        time.sleep(0.5)
        observed = probe()
    return observed


def _client_call(
    url: str, fn: Callable[[grpcclient.InferenceServerClient], Any], alive: Alive
) -> list[Any]:
    """``fn`` on a fresh client (a channel that failed to connect backs off for seconds)."""

    def once() -> list[Any]:
        with grpcclient.InferenceServerClient(url) as c:
            try:
                return ["ok", fn(c)]
            except Exception as e:
                status = e.status() if hasattr(e, "status") else None
                message = e.message() if hasattr(e, "message") else str(e)
                return ["err", str(status), message]

    return _until_reached(once, alive)


def _count(n: int) -> list[Any]:
    inp = grpcclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([n], np.int32))
    return [inp]


def _ones() -> list[Any]:
    inp = grpcclient.InferInput("IN", [1], "FP32")
    inp.set_data_from_numpy(np.ones(1, np.float32))
    return [inp]


def client_probes(url: str, alive: Alive = lambda: True) -> dict[str, list[Any]]:
    probes: dict[str, Callable[[grpcclient.InferenceServerClient], Any]] = {
        "ready_unknown": lambda c: c.is_model_ready("nosuch"),
        "ready_bad_version": lambda c: c.is_model_ready("grpc_slow", "abc"),
        "ready_negative_version": lambda c: c.is_model_ready("grpc_slow", "-1"),
        "ready_version_digits_then_text": lambda c: c.is_model_ready("grpc_slow", "1abc"),
        "metadata_bad_version": lambda c: c.get_model_metadata("grpc_slow", "x1"),
        "statistics_bad_version": lambda c: c.get_inference_statistics("grpc_slow", "x1"),
        "statistics_unknown": lambda c: c.get_inference_statistics("nosuch"),
        "infer_decoupled": lambda c: c.infer("grpc_decoupled", _count(1)),
        "log_settings": lambda c: c.get_log_settings(as_json=True),
        "log_bad_type": lambda c: c.update_log_settings({"log_info": 1}),
        "log_file": lambda c: c.update_log_settings({"log_file": "x"}),
        "trace_settings": lambda c: c.get_trace_settings(as_json=True),
        "trace_model": lambda c: c.get_trace_settings(model_name="grpc_slow", as_json=True),
        "trace_update": lambda c: c.update_trace_settings(
            "grpc_slow", {"trace_rate": "5"}, as_json=True
        ),
        "trace_clear": lambda c: c.update_trace_settings(
            "grpc_slow", {"trace_rate": None}, as_json=True
        ),
        "trace_unknown_model": lambda c: c.get_trace_settings(model_name="nosuch"),
        "trace_file": lambda c: c.update_trace_settings(settings={"trace_file": "x"}),
        "shm_status": lambda c: c.get_system_shared_memory_status(as_json=True),
        "shm_status_unknown": lambda c: c.get_system_shared_memory_status("nope"),
        "shm_unregister_unknown": lambda c: c.unregister_system_shared_memory("nope"),
        "cuda_status": lambda c: c.get_cuda_shared_memory_status(as_json=True),
        "cuda_status_unknown": lambda c: c.get_cuda_shared_memory_status("nope"),
        "cuda_unregister_unknown": lambda c: c.unregister_cuda_shared_memory("nope"),
        "index_ready": lambda c: c.get_model_repository_index(as_json=True),
        "unload_unknown": lambda c: c.unload_model("nosuch"),
    }
    return {name: _client_call(url, fn, alive) for name, fn in probes.items()}


def _typed(dt: str, field: str, values: list[Any], shape: list[int]) -> Any:
    request = pb.ModelInferRequest(model_name="grpc_identity_all")
    t = request.inputs.add(name=f"IN_{dt}", datatype=dt, shape=shape)
    getattr(t.contents, field).extend(values)
    return request


def _with_raw(request: Any, *raw: bytes) -> Any:
    request.raw_input_contents.extend(raw)
    return request


def raw_probes(url: str, alive: Alive = lambda: True) -> dict[str, list[Any]]:
    """Requests tritonclient does not build: typed contents, odd parameters."""

    def slow(**params: pb.InferParameter) -> Any:
        r = pb.ModelInferRequest(model_name="grpc_slow")
        r.inputs.add(name="IN", datatype="FP32", shape=[1])
        for key, value in params.items():
            r.parameters[key].CopyFrom(value)
        return _with_raw(r, b"\0\0\0\0")

    bad_version = slow()
    bad_version.model_version = "1abc"
    requests = {
        "typed_int8": _typed("INT8", "int_contents", [1, 300, -1], [3]),
        "typed_uint16": _typed("UINT16", "uint_contents", [1, 65537], [2]),
        "typed_bool": _typed("BOOL", "bool_contents", [True, False], [2]),
        "typed_bytes": _typed("BYTES", "bytes_contents", [b"a", b""], [2]),
        "typed_wrong_field": _typed("FP32", "int_contents", [1, 2], [2]),
        "typed_fp16": _typed("FP16", "fp32_contents", [1.0], [1]),
        "typed_count": _typed("FP32", "fp32_contents", [1.0, 2.0], [3]),
        "typed_with_raw": _with_raw(_typed("INT32", "int_contents", [1], [1]), b"\0\0\0\0"),
        "no_data": pb.ModelInferRequest(
            model_name="grpc_slow",
            inputs=[pb.ModelInferRequest.InferInputTensor(name="IN", datatype="FP32", shape=[1])],
        ),
        "extra_raw": _with_raw(slow(), b"\0\0\0\0"),
        "reserved_param": slow(triton_x=pb.InferParameter(bool_param=True)),
        "uint64_custom_param": slow(k=pb.InferParameter(uint64_param=1)),
        "sequence_id_uint64": slow(sequence_id=pb.InferParameter(uint64_param=1)),
        "priority_negative": slow(priority=pb.InferParameter(int64_param=-1)),
        "timeout_wrong_type": slow(timeout=pb.InferParameter(uint64_param=1)),
        "empty_final_wrong_type": slow(
            triton_enable_empty_final_response=pb.InferParameter(int64_param=1)
        ),
        "headers_param": slow(headers=pb.InferParameter(string_param="x")),
        "version_digits_then_text": bad_version,
        # Which check comes first: model, transaction policy, parameters, inputs.
        "unknown_model_bad_param": slow(timeout=pb.InferParameter(uint64_param=1)),
        "decoupled_bad_param": pb.ModelInferRequest(
            model_name="grpc_decoupled",
            parameters={"timeout": pb.InferParameter(uint64_param=1)},
        ),
        "decoupled_no_data": pb.ModelInferRequest(
            model_name="grpc_decoupled",
            inputs=[pb.ModelInferRequest.InferInputTensor(name="IN", datatype="INT32", shape=[1])],
        ),
    }
    requests["unknown_model_bad_param"].model_name = "nosuch"

    def infer(request: Any) -> Callable[[Stub], list[Any]]:
        def call(stub: Stub) -> list[Any]:
            reply = stub.ModelInfer(request, timeout=TIMEOUT)
            result = grpcclient.InferResult(reply)
            outputs = {o.name: result.as_numpy(o.name).tolist() for o in reply.outputs}
            return ["ok", reply.model_version, reply.id, outputs]

        return call

    def load(**params: pb.ModelRepositoryParameter) -> Callable[[Stub], list[Any]]:
        req = pb.RepositoryModelLoadRequest(model_name="grpc_slow")
        for key, value in params.items():
            req.parameters[key].CopyFrom(value)
        return lambda stub: _ok(stub.RepositoryModelLoad(req, timeout=60))

    probes: dict[str, Callable[[Stub], list[Any]]] = {
        name: infer(request) for name, request in requests.items()
    }
    probes["load_unrecognized_param"] = load(foo=pb.ModelRepositoryParameter(string_param="x"))
    probes["load_config_wrong_type"] = load(config=pb.ModelRepositoryParameter(bytes_param=b"x"))
    probes["load_repository_name"] = lambda stub: _ok(
        stub.RepositoryModelLoad(
            pb.RepositoryModelLoadRequest(repository_name="r", model_name="m"), timeout=60
        )
    )
    probes["index_repository_name"] = lambda stub: _ok(
        stub.RepositoryIndex(pb.RepositoryIndexRequest(repository_name="r"), timeout=60)
    )
    probes["unload_wrong_type"] = lambda stub: _ok(
        stub.RepositoryModelUnload(
            pb.RepositoryModelUnloadRequest(
                model_name="nosuch",
                parameters={"unload_dependents": pb.ModelRepositoryParameter(int64_param=1)},
            ),
            timeout=60,
        )
    )
    return {name: _stub_call(url, probe, alive) for name, probe in probes.items()}


def _ok(_reply: Any) -> list[Any]:
    return ["ok"]


def _stub_call(url: str, fn: Callable[[Stub], list[Any]], alive: Alive) -> list[Any]:
    """``fn`` on a fresh channel; a gRPC error status is the observation."""

    def once() -> list[Any]:
        with grpc.insecure_channel(url) as channel:
            try:
                return fn(service_pb2_grpc.GRPCInferenceServiceStub(channel))
            except grpc.RpcError as e:
                return ["err", str(e.code()), e.details()]

    return _until_reached(once, alive)


class Incomplete(Exception):
    """A stream probe got fewer responses than expected in time."""


def _stream(
    url: str,
    requests: list[tuple[str, list[Any], dict[str, Any]]],
    expect: int,
    headers: dict[str, str] | None = None,
    settle: float = 0.5,
    ordered: bool = True,
) -> list[list[Any]]:
    """Send ``requests`` on one stream; collect ``expect`` results, then whatever else comes
    within ``settle`` seconds, then cancel the stream (half-closing it can hang the reference
    Triton). ``ordered=False`` sorts what came, for streams whose order is not defined."""
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    out: list[list[Any]] = []
    try:
        client.start_stream(callback=lambda result, error: got.put((result, error)),
                            headers=headers)  # fmt: skip
        for model, inputs, kwargs in requests:
            client.async_stream_infer(model, inputs, **kwargs)
        deadline = time.monotonic() + TIMEOUT
        while len(out) < expect and time.monotonic() < deadline:
            try:
                result, error = got.get(timeout=0.1)
            except queue.Empty:
                continue
            out.append(_describe(result, error))
        end = time.monotonic() + settle
        while time.monotonic() < end:
            try:
                out.append(_describe(*got.get(timeout=0.05)))
            except queue.Empty:
                pass
        try:
            client.stop_stream(cancel_requests=True)
        except Exception as e:  # a stream the server ended with an error status
            out.append(["stop", str(e)])
    finally:
        client.close()
    if len(out) < expect:
        raise Incomplete(f"{len(out)} of {expect} responses: {out}")
    return out if ordered else sorted(out, key=repr)


def _describe(result: Any, error: Any) -> list[Any]:
    if error is not None:
        return ["err", str(error.status()), error.message()]
    r = result.get_response()
    params = {k: str(v).strip() for k, v in r.parameters.items()}
    outputs = {o.name: result.as_numpy(o.name).tolist() for o in r.outputs}
    return ["ok", r.id, r.model_name, r.model_version, params, outputs, len(r.raw_output_contents)]


def stream_probes(url: str, attempts: int = 1) -> dict[str, list[list[Any]]]:
    """Stream behaviour. ``attempts`` > 1 retries a probe that fails or comes back short (the
    reference Triton 2.51 now and then drops a decoupled error response or refuses a request on
    a fresh stream after earlier streams were cancelled)."""
    one = _ones()
    probes: dict[str, Callable[[], list[list[Any]]]] = {
        "decoupled": lambda: _stream(url, [("grpc_decoupled", _count(2), {"request_id": "a"})], 2),
        "decoupled_empty_final": lambda: _stream(
            url,
            [
                (
                    "grpc_decoupled",
                    _count(1),
                    {"request_id": "b", "enable_empty_final_response": True},
                )
            ],
            2,
        ),
        "decoupled_zero": lambda: _stream(
            url, [("grpc_decoupled", _count(0), {"request_id": "z"})], 0
        ),
        "decoupled_zero_empty_final_version": lambda: _stream(
            url,
            [
                (
                    "grpc_decoupled",
                    _count(0),
                    {"request_id": "z", "enable_empty_final_response": True, "model_version": "1"},
                )
            ],
            1,
        ),
        "non_decoupled": lambda: _stream(url, [("grpc_slow", one, {"request_id": "n"})], 1),
        "non_decoupled_empty_final": lambda: _stream(
            url, [("grpc_slow", one, {"request_id": "n", "enable_empty_final_response": True})], 1
        ),
        "errors": lambda: _stream(
            url,
            [
                ("nosuch", _count(1), {"request_id": "u"}),
                ("grpc_decoupled", _count(-1), {"request_id": "neg"}),
                ("grpc_slow", one, {"request_id": "ok"}),
            ],
            3,
            ordered=False,  # decoupled and non-decoupled responses do not wait for each other
        ),
        "grpc_error_mode_unknown_model": lambda: _stream(
            url,
            [("nosuch", _count(1), {"request_id": "u"}), ("grpc_slow", one, {"request_id": "ok"})],
            2,
            headers={"triton_grpc_error": "true"},
        ),
        "grpc_error_mode_model_error": lambda: _stream(
            url,
            [("grpc_decoupled", _count(-1), {"request_id": "neg"})],
            1,
            headers={"triton_grpc_error": "true"},
        ),
        "order": lambda: _stream(
            url,
            [
                ("grpc_slow", one, {"request_id": "slow", "parameters": {"delay_ms": 500}}),
                ("grpc_slow", one, {"request_id": "fast"}),
            ],
            2,
        ),
        "bad_version": lambda: _stream(
            url, [("grpc_slow", one, {"request_id": "v", "model_version": "abc"})], 1
        ),
    }
    out: dict[str, list[list[Any]]] = {}
    for name, probe in probes.items():
        for attempt in range(attempts):
            try:
                out[name] = probe()
                break
            except Exception as e:
                if attempt == attempts - 1:
                    out[name] = [["probe failed", f"{type(e).__name__}: {e}"]]
                else:
                    time.sleep(1.0)  # a port that refused a moment ago may take a while
    return out
