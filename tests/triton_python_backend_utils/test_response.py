"""InferenceResponse, InferenceResponseSender (Triton's send rules), ResponseIterator."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

import triton_python_backend_utils as pb

from .fakes import RecordingDeliver

FINAL = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def test_response_accessors() -> None:
    t = pb.Tensor("OUT", np.zeros(2))
    r = pb.InferenceResponse([t])
    assert r.output_tensors() == [t]
    assert r.has_error() is False
    assert r.error() is None
    assert r.parameters() == "{}"
    empty = pb.InferenceResponse()
    assert empty.output_tensors() == []
    err = pb.TritonError("bad", pb.TritonError.NOT_FOUND)
    failed = pb.InferenceResponse([t], err)
    assert failed.has_error() is True
    assert failed.error() is err
    assert pb.InferenceResponse(output_tensors=(t,), error=None).output_tensors() == [t]


def test_response_parameters() -> None:
    r = pb.InferenceResponse([], parameters={"n": 1, "ok": False, "s": "x"})
    assert r.parameters() == '{"n": 1, "ok": false, "s": "x"}'
    assert r._params == {"n": 1, "ok": False, "s": "x"}
    with pytest.raises(pb.TritonModelException, match="bool/int/str"):
        pb.InferenceResponse([], parameters={"f": 0.5})  # type: ignore[dict-item]
    server = pb.InferenceResponse._from_server([], None, {"f": 0.5, "s": "\u00e9"})
    assert server.parameters() == '{"f":0.5,"s":"\u00e9"}'


def test_response_argument_errors() -> None:
    with pytest.raises(TypeError):
        pb.InferenceResponse(None)  # type: ignore[arg-type]
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Output tensor for inference response should not be empty\.$",
    ):
        pb.InferenceResponse([None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb.InferenceResponse([np.zeros(1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb.InferenceResponse([], "text")  # type: ignore[arg-type]


def test_response_list_is_copied() -> None:
    tensors = [pb.Tensor("A", np.zeros(1))]
    r = pb.InferenceResponse(tensors)
    tensors.append(pb.Tensor("B", np.zeros(1)))
    assert [t.name() for t in r.output_tensors()] == ["A"]


def test_sender_argument_errors() -> None:
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=True)
    with pytest.raises(
        pb.TritonModelException, match=r"^Unable to send response\. Unsupported flag provided\.$"
    ):
        sender.send(pb.InferenceResponse([]), flags=2)
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Inference Response object must be provided when the response flags is set to zero\.$",
    ):
        sender.send()
    with pytest.raises(TypeError):
        sender.send("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sender.send(None, None)  # type: ignore[arg-type]
    assert deliver.sent == []


def test_decoupled_sender() -> None:
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=True)
    r1, r2 = pb.InferenceResponse([]), pb.InferenceResponse([])
    sender.send(r1)
    sender.send(pb.InferenceResponse(error=pb.TritonError("oops")))  # errors do not close
    sender.send(r2, flags=FINAL)
    assert deliver.sent[0] == (r1, 0)
    assert deliver.sent[2] == (r2, FINAL)
    assert sender._closed
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Unable to send response\. Response sender has been closed\.$",
    ):
        sender.send(pb.InferenceResponse([]))
    with pytest.raises(pb.TritonModelException, match="has been closed"):
        sender.send(flags=FINAL)
    assert len(deliver.sent) == 3


def test_decoupled_flag_only_final() -> None:
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=True)
    sender.send(flags=FINAL)
    assert deliver.sent == [(None, FINAL)]


def test_default_mode_sender() -> None:
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=False)
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Unable to send response\. Non-decoupled model cannot send complete final before "
        r"sending a response\.$",
    ):
        sender.send(flags=FINAL)
    response = pb.InferenceResponse([])
    sender.send(response)
    with pytest.raises(
        pb.TritonModelException,
        match=r"^Unable to send response\. Non-decoupled model cannot send more than one "
        r"response\.$",
    ):
        sender.send(pb.InferenceResponse([]), flags=FINAL)
    sender.send(flags=FINAL)
    with pytest.raises(pb.TritonModelException, match="has been closed"):
        sender.send(flags=FINAL)
    assert deliver.sent == [(response, 0), (None, FINAL)]


def test_default_mode_return_path_accounting() -> None:
    """The server accounts for a returned response with _update_state, as Triton's stub does."""
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=False)
    sender.send(pb.InferenceResponse([]), flags=FINAL)
    with pytest.raises(pb.TritonModelException, match="more than one response"):
        sender._update_state(pb.InferenceResponse([]), FINAL)
    fresh = pb.InferenceResponseSender(deliver, decoupled=False)
    fresh._update_state(pb.InferenceResponse([]), FINAL)
    assert fresh._closed and fresh._sent == 1


def test_closed_by_server() -> None:
    sender = pb.InferenceResponseSender(RecordingDeliver(), decoupled=True)
    sender._close()
    with pytest.raises(pb.TritonModelException, match="has been closed"):
        sender.send(pb.InferenceResponse([]))


def test_delivery_errors_reach_the_model() -> None:
    def deliver(response: pb.InferenceResponse | None, flags: int) -> None:
        raise pb.TritonModelException("output allocation failed")

    sender = pb.InferenceResponseSender(deliver, decoupled=True)
    with pytest.raises(pb.TritonModelException, match="output allocation failed"):
        sender.send(pb.InferenceResponse([]))


def test_sender_cancellation() -> None:
    sender = pb.InferenceResponseSender(RecordingDeliver(), decoupled=True)
    assert sender.is_cancelled() is False
    sender._set_cancelled()
    assert sender.is_cancelled() is True


def test_sender_from_many_threads_keeps_final_last() -> None:
    deliver = RecordingDeliver()
    sender = pb.InferenceResponseSender(deliver, decoupled=True)

    def work() -> None:
        for _ in range(50):
            sender.send(pb.InferenceResponse([]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sender.send(flags=FINAL)
    assert len(deliver.sent) == 201
    assert deliver.sent[-1] == (None, FINAL)
    assert sender._sent == 201


def test_response_iterator_blocks_and_resumes() -> None:
    gate = threading.Event()
    responses = [pb.InferenceResponse([]) for _ in range(2)]

    def source() -> Iterator[pb.InferenceResponse]:
        yield responses[0]
        gate.wait(5)
        yield responses[1]

    it = pb.ResponseIterator(source())
    assert next(it) is responses[0]
    got: list[pb.InferenceResponse] = []
    th = threading.Thread(target=lambda: got.extend(it))
    th.start()
    gate.set()
    th.join(5)
    assert got == [responses[1]]


def test_response_iterator_cancel_forwards() -> None:
    class Source:
        cancelled = False

        def __iter__(self) -> Source:
            return self

        def __next__(self) -> pb.InferenceResponse:
            raise StopIteration

        def cancel(self) -> None:
            self.cancelled = True

    src = Source()
    it = pb.ResponseIterator(src)
    it.cancel()
    assert src.cancelled
