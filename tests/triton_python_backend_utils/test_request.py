"""pb_utils.InferenceRequest: the BLS constructor's checks, accessors, exec/async_exec."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

import triton_python_backend_utils as pb

from .fakes import FakeRuntime, RecordingDeliver


def _tensor(name: str = "IN", value: float = 1.0) -> pb.Tensor:
    return pb.Tensor(name, np.array([value], dtype=np.float32))


def test_positional_order_and_defaults() -> None:
    t = _tensor()
    r = pb.InferenceRequest("rid", 0, [t], ["OUT"], "m")
    assert r.request_id() == "rid"
    assert r.correlation_id() == 0
    assert r.inputs() == [t]
    assert r.requested_output_names() == {"OUT"}
    assert isinstance(r.requested_output_names(), set)
    assert r.model_name() == "m"
    assert r.model_version() == -1
    assert r.flags() == 0
    assert r.timeout() == 0
    assert r.parameters() == "{}"
    assert r.trace().get_context() is None
    assert isinstance(r.get_preferred_memory(), pb.PreferredMemory)
    assert r.is_cancelled() is False


def test_keyword_construction_and_values() -> None:
    r = pb.InferenceRequest(
        model_name=b"bytes_name",  # type: ignore[arg-type]
        inputs=(_tensor(),),
        requested_output_names=("A", b"B"),  # type: ignore[arg-type]
        request_id="x",
        correlation_id="seq-1",
        model_version=3,
        flags=pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
        | pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
        timeout=11_000_000_000,
        preferred_memory=pb.PreferredMemory(pb.TRITONSERVER_MEMORY_CPU, 0),
        parameters={"a": 1, "b": True, "c": "s"},
    )
    assert r.model_name() == "bytes_name"
    assert r.requested_output_names() == {"A", "B"}
    assert r.correlation_id() == "seq-1"
    assert r.model_version() == 3
    assert r.flags() == 3
    assert r.timeout() == 11_000_000_000
    assert r.parameters() == '{"a": 1, "b": true, "c": "s"}'
    r.set_flags(pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
    assert r.flags() == 2


def test_missing_required_arguments() -> None:
    for kwargs in (
        {"requested_output_names": [], "model_name": "m"},
        {"inputs": [], "model_name": "m"},
        {"inputs": [], "requested_output_names": []},
    ):
        with pytest.raises(TypeError, match="missing required argument"):
            pb.InferenceRequest(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "override",
    [
        {"inputs": None},
        {"inputs": [np.zeros(1)]},
        {"inputs": "abc"},
        {"model_name": None},
        {"model_name": 5},
        {"requested_output_names": None},
        {"requested_output_names": [None]},
        {"correlation_id": None},
        {"request_id": None},
        {"model_version": None},
        {"model_version": 1.5},
        {"flags": None},
        {"flags": -1},
        {"timeout": -1},
        {"preferred_memory": 1},
        {"trace": "t"},
    ],
)
def test_argument_type_errors(override: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {"inputs": [], "requested_output_names": [], "model_name": "m"}
    kwargs.update(override)
    with pytest.raises(TypeError):
        pb.InferenceRequest(**kwargs)


def test_triton_argument_errors() -> None:
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Input tensor for request with id 'r' and model name 'm' should not be empty\.$",
    ):
        pb.InferenceRequest("r", 0, [None], [], "m")  # type: ignore[list-item]
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Requested output name for request with id '' and model name 'm' should not be "
        r"empty\.$",
    ):
        pb.InferenceRequest(inputs=[], requested_output_names=[""], model_name="m")
    with pytest.raises(
        pb.TritonModelException, match=r"^Correlation ID must be integer or string$"
    ):
        pb.InferenceRequest(
            correlation_id=1.5,  # type: ignore[arg-type]
            inputs=[],
            requested_output_names=[],
            model_name="m",
        )
    with pytest.raises(RuntimeError, match="Unable to cast"):
        pb.InferenceRequest(correlation_id=-1, inputs=[], requested_output_names=[], model_name="m")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ([1], "Expect N8pybind114dictE, got <class 'list'>"),
        ({1: "a"}, "Expect parameters keys to have type str, found type <class 'int'>"),
        (
            {"a": 1.5},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
        (
            {"a": None},
            "Expect parameters values to have type bool/int/str, found type <class 'NoneType'>",
        ),
    ],
)
def test_parameter_errors(parameters: Any, message: str) -> None:
    with pytest.raises(pb.TritonModelException) as info:
        pb.InferenceRequest(
            inputs=[], requested_output_names=[], model_name="m", parameters=parameters
        )
    assert str(info.value) == message


def test_parameters_are_copied_at_construction() -> None:
    params: dict[str, bool | int | str] = {"a": 1}
    r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m", parameters=params)
    params["b"] = 2
    assert json.loads(r.parameters()) == {"a": 1}


def test_release_flags_positional_only() -> None:
    r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    assert r._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_ALL
    r.set_release_flags(pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert r._release_flags == 2
    with pytest.raises(TypeError):
        r.set_release_flags(flags=1)  # type: ignore[call-arg]


def test_preferred_memory_and_trace() -> None:
    with pytest.raises(TypeError):
        pb.PreferredMemory(1, 0)  # type: ignore[arg-type]
    pm = pb.PreferredMemory(pb.TRITONSERVER_MEMORY_GPU, 1)
    assert pm._memory_type == pb.TRITONSERVER_MEMORY_GPU
    assert pm._device_id == 1
    with pytest.raises(TypeError):
        pb.InferenceTrace()


def test_sender_of_user_built_request() -> None:
    r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    sender = r.get_response_sender()
    assert r.get_response_sender() is sender
    assert sender.is_cancelled() is False
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Unable to send response\. Response sender has no reference to the decoupled "
        r"state of the model\.$",
    ):
        sender.send(pb.InferenceResponse([]))


def test_request_from_server() -> None:
    deliver = RecordingDeliver()
    cancelled = [False]
    sender = pb.InferenceResponseSender(deliver, decoupled=True)
    t = _tensor()
    r = pb.InferenceRequest._from_server(
        request_id="req-42",
        correlation_id=7,
        model_name="m",
        model_version=1,
        flags=1,
        inputs=[t],
        requested_output_names=["A", "B"],
        parameters={"pint": 3, "pfloat": 1.5, "pstr": "s", "pbool": True},
        timeout=5,
        response_sender=sender,
        is_cancelled=lambda: cancelled[0],
        trace_context='{"traceparent": "x"}',
    )
    assert r.inputs()[0] is t
    assert r.parameters() == '{"pint":3,"pfloat":1.5,"pstr":"s","pbool":true}'
    assert r.parameters() is r.parameters()
    assert r.requested_output_names() == {"A", "B"}
    assert r.trace().get_context() == '{"traceparent": "x"}'
    assert r.get_response_sender() is sender
    assert r.is_cancelled() is False
    cancelled[0] = True
    assert r.is_cancelled() is True
    assert sender.is_cancelled() is True
    cancelled[0] = False
    assert r.is_cancelled() is True  # cached once true
    r._server_key = 12  # the server may attach its own attributes
    empty = pb.InferenceRequest._from_server(
        request_id="",
        correlation_id=0,
        model_name="m",
        model_version=1,
        flags=0,
        inputs=[],
        requested_output_names=[],
        parameters=None,
        timeout=0,
        response_sender=pb.InferenceResponseSender(deliver),
    )
    assert empty.parameters() == "{}"
    assert empty.is_cancelled() is False


def test_exec_without_runtime() -> None:
    r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    with pytest.raises(pb.TritonModelException, match="needs a running modelyard server"):
        r.exec()
    with pytest.raises(pb.TritonModelException, match="needs a running modelyard server"):
        r.exec(decoupled=True)


def test_async_exec_needs_running_loop(runtime: FakeRuntime) -> None:
    r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    with pytest.raises(RuntimeError, match="no running event loop"):
        r.async_exec()
    assert runtime.calls == []


def test_exec_goes_through_runtime(runtime: FakeRuntime) -> None:
    out = pb.Tensor("OUT", np.array([2.0]))
    runtime.handler = lambda request: [pb.InferenceResponse([out])]
    r = pb.InferenceRequest(inputs=[_tensor()], requested_output_names=["OUT"], model_name="m")
    response = r.exec()
    assert isinstance(response, pb.InferenceResponse)
    assert pb.get_output_tensor_by_name(response, "OUT") is out
    assert runtime.calls == [(r, False)]
    # the same request can be executed again
    assert r.exec().output_tensors() == [out]


def test_decoupled_exec_iterator_semantics(runtime: FakeRuntime) -> None:
    responses = [pb.InferenceResponse([pb.Tensor("OUT", np.array([i]))]) for i in range(3)]
    responses.append(pb.InferenceResponse([]))
    runtime.handler = lambda request: responses
    r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    it = r.exec(decoupled=True)
    assert isinstance(it, pb.ResponseIterator)
    assert next(it) is responses[0]
    assert list(it) == responses[1:]
    assert list(it) == responses  # a finished iterator restarts
    with pytest.raises(StopIteration):
        next(it)
    it.cancel()  # no-op once finished


def test_runtime_context_overrides_process_runtime(runtime: FakeRuntime) -> None:
    other = FakeRuntime()
    r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    with pb.runtime_context(other):
        assert pb.get_runtime() is other
        r.exec()
    assert pb.get_runtime() is runtime
    assert len(other.calls) == 1
    assert runtime.calls == []


def test_async_exec(runtime: FakeRuntime) -> None:
    def handler(request: pb.InferenceRequest) -> list[pb.InferenceResponse]:
        value = request.inputs()[0].as_numpy() * 2
        return [pb.InferenceResponse([pb.Tensor("OUT", value)])]

    runtime.handler = handler

    async def main() -> list[float]:
        requests = [
            pb.InferenceRequest(
                inputs=[_tensor(value=i)], requested_output_names=["OUT"], model_name="m"
            )
            for i in range(3)
        ]
        futures = [req.async_exec() for req in requests]
        assert all(isinstance(f, asyncio.Future) for f in futures)
        results = await asyncio.gather(*futures)
        return [float(res.output_tensors()[0].as_numpy()[0]) for res in results]

    assert asyncio.run(main()) == [0.0, 2.0, 4.0]


def test_async_exec_decoupled(runtime: FakeRuntime) -> None:
    responses = [pb.InferenceResponse([pb.Tensor("OUT", np.array([i]))]) for i in range(2)]
    runtime.handler = lambda request: responses

    async def main() -> tuple[list[Any], list[Any]]:
        r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
        it = await r.async_exec(decoupled=True)
        assert isinstance(it, pb.ResponseIterator)
        plain = list(it)  # Triton models iterate with a plain for loop
        collected = [resp async for resp in it]
        return plain, collected

    plain, collected = asyncio.run(main())
    assert plain == responses
    assert collected == responses


def test_async_exec_decoupled_rejects_bad_runtime_result(runtime: FakeRuntime) -> None:
    async def agen() -> Any:
        yield pb.InferenceResponse([])

    runtime.async_exec = lambda request, decoupled: agen()  # type: ignore[method-assign]

    async def main() -> None:
        r = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
        await r.async_exec(decoupled=True)

    with pytest.raises(pb.TritonModelException, match="must return an awaitable"):
        asyncio.run(main())
