"""The messages between the server and a worker: every kind survives a frame, each side
decodes only the kinds it may receive, and values MessagePack has no type for travel intact."""

from __future__ import annotations

import socket
from typing import Any

import msgspec
import numpy as np
import pytest

from modelyard.backends.python.protocol import framing
from modelyard.backends.python.protocol.messages import (
    AsyncExecuted,
    Autocomplete,
    Bls,
    BlsCancel,
    BlsResponse,
    Cancel,
    ControlResult,
    ErrorCode,
    Execute,
    Executed,
    Finalize,
    ForgetRegions,
    Free,
    Init,
    IsReady,
    LoadModel,
    Log,
    Message,
    Metrics,
    ModelSetup,
    QueryModelReady,
    Ready,
    RequestItem,
    Response,
    Result,
    Send,
    UnloadModel,
    decode_server_message,
    decode_worker_message,
)

SETUP = ModelSetup("m", 1, "/r/m", "/r/m/1/model.py", "m_0", "CPU", 0, "{}", False, True)
TENSOR = ("Y", "FP32", (2,), np.ones(2, np.float32).tobytes())
REGION = (3, "/key", (1, 2), 0, 64)

TO_WORKER: list[Message] = [
    Autocomplete(1, SETUP, {"max_batch_size": 0, "input": [{"name": "X", "dims": [2]}]}),
    Init(2, SETUP),
    Execute(
        3,
        [
            RequestItem(7, "id", 5, 1, [TENSOR], ["Y"], {"p": True, "q": 1.5}, 10, None),
            RequestItem(8, "", "seq", 0, [], None, {}, 0, {"Y": (REGION, 0, 64)}),
        ],
    ),
    Finalize(4),
    BlsResponse(5, Response([TENSOR], {"a": "b"}, None), False),
    BlsResponse(5, None, True),
    ControlResult(6, "", True),
    Cancel([7, 8]),
    Metrics(9),
    IsReady(10),
    ForgetRegions([3]),
    Free(["seg-1"]),
]
TO_SERVER: list[Message] = [
    Ready(),
    Result(1, {"any": ["value", 1]}, None),
    Result(2, None, ("boom", ErrorCode.INVALID_ARG)),
    Executed(3, [Response([TENSOR], None, None), None], (1,), None),
    Executed(3, None, (), ("failed", ErrorCode.INTERNAL)),
    AsyncExecuted(3, [None], (), None),
    Send(7, Response([], None, ("model error", ErrorCode.NOT_FOUND)), 1),
    Send(7, None, 1),
    Log(0, "hello", "/r/m/1/model.py", 12),
    Bls(11, False, "add_sub", "", "rid", 0, 0, [TENSOR], ["OUT"], {}, 0, True, (7,)),
    BlsCancel(11),
    LoadModel(12, "m2", "", {"file:1/model.py": b"..."}),
    UnloadModel(13, "m2", True),
    QueryModelReady(14, "m2", "1"),
    Free(["seg-2"]),
]


def _through(message: Message, decode: framing.Decode) -> Any:
    frame = framing.encode(message)
    (n,) = framing._HEADER.unpack_from(frame)
    assert n == len(frame) - 4
    return decode(memoryview(frame)[4:])


@pytest.mark.parametrize("message", TO_WORKER, ids=lambda m: type(m).__name__)
def test_every_kind_reaches_the_worker(message: Message) -> None:
    assert _through(message, decode_server_message) == message


@pytest.mark.parametrize("message", TO_SERVER, ids=lambda m: type(m).__name__)
def test_every_kind_reaches_the_server(message: Message) -> None:
    assert _through(message, decode_worker_message) == message


def test_each_side_decodes_only_what_it_may_receive() -> None:
    with pytest.raises(msgspec.ValidationError):
        _through(Execute(1, []), decode_worker_message)
    with pytest.raises(msgspec.ValidationError):
        _through(Bls(1, False, "m", "", "", 0, 0, [], [], {}, 0, False, ()), decode_server_message)


def test_error_codes_cross_as_the_one_table() -> None:
    got = _through(Result(2, None, ("boom", ErrorCode.UNAVAILABLE)), decode_worker_message)
    assert got.error is not None and got.error[1] is ErrorCode.UNAVAILABLE


def test_values_without_a_messagepack_type_travel_pickled() -> None:
    strings = np.array([b"a", b"bc", "d"], dtype=object)
    message = Send(1, Response([("S", "BYTES", (3,), strings)], None, None), 1)
    got = _through(message, decode_worker_message)
    data = got.response.tensors[0][3]
    assert isinstance(data, np.ndarray) and data.dtype == object
    assert data.tolist() == [b"a", b"bc", "d"]
    value = _through(Result(1, np.bool_(True), None), decode_worker_message).value
    assert type(value) is np.bool_  # the server sees what is_ready() returned (not a bool)


def test_what_cannot_be_encoded_is_refused_at_the_sender() -> None:
    with pytest.raises(framing.ENCODE_ERRORS):
        framing.encode(Log(0, "\ud800", "f.py", 1))
    with pytest.raises(framing.ENCODE_ERRORS):
        framing.encode(Result(1, 2**70, None))


def test_a_channel_drops_a_frame_it_cannot_decode_and_reads_on() -> None:
    ours, peer = socket.socketpair()
    try:
        chan = framing.BlockingChannel(ours, decode_server_message)
        peer.sendall(framing.encode(Bls(1, False, "m", "", "", 0, 0, [], [], {}, 0, False, ())))
        peer.sendall(framing.encode(Free(["seg"])))
        assert chan.recv() == Free(["seg"])
        peer.close()
        assert chan.recv() is None
    finally:
        ours.close()
