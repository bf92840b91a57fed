"""Cost of the server <-> worker messages for the frequent kinds: the positional pickled
tuples of before issue 15 ("old"), the same as pickled NamedTuples ("namedtuple", the first
design of issue 15, reproduced here), and the msgspec Structs in src/ ("new").

For each kind, one round trip through the code each side runs: the sender builds the message
and frames it; the receiver takes the frame out of its read buffer, decodes it and dispatches
it to the code that handles its kind (which reads every field). "old" is the pre-#15 code
(ipc.py, stub.py and worker.py at 623ac8d), reproduced below; "new" calls the modules in
src/. Tensors are packed once beforehand (the same in all: the tensor pool is unchanged).
Rounds alternate the variants; the table gives the minimum and the median per message.

    python benchmarks/ipc_messages.py --rounds 15 --number 20000
"""

# ruff: noqa: SIM114 - the old dispatch chains are kept as they were, comparison by comparison

from __future__ import annotations

import argparse
import pickle
import statistics
import struct
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from modelyard.backends.python.protocol import framing
from modelyard.backends.python.protocol.messages import (
    Bls,
    BlsResponse,
    Execute,
    Executed,
    Free,
    RequestItem,
    Response,
    Result,
    Send,
    decode_server_message,
    decode_worker_message,
)

_HEADER = struct.Struct("<I")


# -- the pre-#15 framing: ipc.encode, BlockingChannel.recv, FrameProtocol._process ------------


def old_encode(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, protocol=5)
    return _HEADER.pack(len(body)) + body


def old_worker_recv(buf: bytearray) -> tuple[Any, ...]:
    """BlockingChannel.recv: two exact reads (each a copy and a shift), then loads."""
    header = bytes(buf[:4])
    del buf[:4]
    (n,) = _HEADER.unpack(header)
    body = bytes(buf[:n])
    del buf[:n]
    msg: tuple[Any, ...] = pickle.loads(body)
    return msg


def new_recv(decode: Callable[[Any], Any]) -> Callable[[bytearray], Any]:
    """framing.BlockingChannel.recv (FrameProtocol._process alike) without socket reads."""

    def recv(buf: bytearray) -> Any:
        (n,) = _HEADER.unpack_from(buf)
        with memoryview(buf) as view:
            value = decode(view[4 : 4 + n])
        del buf[: 4 + n]
        return value

    return recv


def server_recv(buf: bytearray) -> tuple[Any, ...]:
    """FrameProtocol._process for one frame (unchanged by #15)."""
    (n,) = _HEADER.unpack_from(buf, 0)
    wire: tuple[Any, ...] = pickle.loads(memoryview(buf)[4 : 4 + n])
    del buf[: 4 + n]
    return wire


# -- the receivers' dispatch ------------------------------------------------------------------


class Sink:
    """Stands for the handlers: reads every field it is given."""

    def __init__(self) -> None:
        self.seen = 0

    def take(self, *fields: Any) -> None:
        self.seen += len(fields)


SINK = Sink()


def old_worker_dispatch(msg: tuple[Any, ...]) -> None:
    """Stub._dispatch, then (for a command) the main loop's unpacking and the item's fields."""
    kind = msg[0]
    if kind == "free":
        SINK.take(msg[1])
    elif kind == "forget-regions":
        SINK.take(msg[1])
    elif kind == "metrics":
        SINK.take(msg[1])
    elif kind == "is-ready":
        SINK.take(msg[1])
    elif kind in ("bls_response", "control_result", "cancel"):
        SINK.take(msg[1], msg[2], msg[3])  # BlsClient.deliver, _StreamedCall.next
    else:
        kind, call_id, payload = msg
        SINK.take(call_id)
        for item in payload:
            (
                key,
                req_id,
                corr_id,
                flags,
                inputs,
                output_names,
                params,
                timeout_us,
                _model_name,
                _model_version,
                dests,
            ) = item
            SINK.take(key, req_id, corr_id, flags, inputs, output_names, params, timeout_us, dests)


def new_worker_dispatch(msg: Any) -> None:
    """Stub._dispatch (Execute is queued for the main thread, which reads every field)."""
    if type(msg) is Execute:
        SINK.take(msg.call_id)
        for item in msg.requests:
            SINK.take(
                item.key,
                item.request_id,
                item.correlation_id,
                item.flags,
                item.inputs,
                item.output_names,
                item.parameters,
                item.timeout_us,
                item.destinations,
            )
    elif type(msg) is Free:
        SINK.take(msg.segments)
    elif type(msg) is BlsResponse:
        SINK.take(msg.call_id, msg.response, msg.final)


def old_server_dispatch(msg: tuple[Any, ...]) -> None:
    """PythonWorker._on_message, and the handlers' reads of the payload."""
    kind = msg[0]
    if kind == "send":
        SINK.take(msg[1], msg[2], msg[3])
    elif kind == "result":
        ok, payload = msg[2], msg[3]
        SINK.take(msg[1], ok, payload)
    elif kind == "ready":
        SINK.take()
    elif kind == "free":
        SINK.take(msg[1])
    elif kind == "responses":
        SINK.take(msg[1], msg[2], msg[3])
    elif kind == "log":
        SINK.take(msg[1], msg[2], msg[3], msg[4])
    elif kind == "bls":
        spec, decoupled = msg[2]
        SINK.take(
            msg[1],
            decoupled,
            spec["inputs"],
            spec["outputs"],
            spec["model_name"],
            spec["model_version"],
            spec["id"],
            spec["parameters"],
            spec["correlation_id"],
            spec["flags"],
            spec["timeout_us"],
            spec.get("blocking"),
            spec.get("parents"),
        )


def new_server_dispatch(msg: Any) -> None:
    """PythonWorker._on_frame, and the handlers' reads of the fields."""
    if type(msg) is Executed:
        SINK.take(msg.call_id, msg.responses, msg.rescheduled, msg.error)
    elif type(msg) is Send:
        SINK.take(msg.key, msg.response, msg.flags)
    elif type(msg) is Bls:
        SINK.take(
            msg.call_id,
            msg.decoupled,
            msg.inputs,
            msg.outputs,
            msg.model_name,
            msg.model_version,
            msg.request_id,
            msg.parameters,
            msg.correlation_id,
            msg.flags,
            msg.timeout_us,
            msg.blocking,
            msg.parents,
        )
    elif type(msg) is Free:
        SINK.take(msg.segments)
    elif type(msg) is Result:
        SINK.take(msg.call_id, msg.value, msg.error)


# -- the NamedTuple design: the same fields, pickled as (tag, *fields) -------------------------


class NtExecute(NamedTuple):
    call_id: int
    requests: list[tuple[Any, ...]]


class NtExecuted(NamedTuple):
    call_id: int
    responses: list[Any] | None
    rescheduled: tuple[int, ...]
    error: Any


class NtSend(NamedTuple):
    key: int
    response: Any
    flags: int


class NtBls(NamedTuple):
    call_id: int
    decoupled: bool
    model_name: str
    model_version: str
    request_id: str
    correlation_id: int | str
    flags: int
    inputs: list[Any]
    outputs: list[str]
    parameters: dict[str, Any]
    timeout_us: int
    blocking: bool
    parents: tuple[int, ...]


class NtBlsResponse(NamedTuple):
    call_id: int
    response: Any
    final: bool


class NtFree(NamedTuple):
    segments: list[str]


NT_KINDS: tuple[type[Any], ...] = (NtExecute, NtExecuted, NtSend, NtBls, NtBlsResponse, NtFree)
NT_TAGS = {kind: tag for tag, kind in enumerate(NT_KINDS)}


def nt_encode(message: Any) -> bytes:
    return old_encode((NT_TAGS[type(message)], *message))


def nt_recv(buf: bytearray) -> Any:
    (n,) = _HEADER.unpack_from(buf)
    with memoryview(buf) as view:
        wire = pickle.loads(view[4 : 4 + n])
    del buf[: 4 + n]
    return tuple.__new__(NT_KINDS[wire[0]], wire[1:])


def nt_worker_dispatch(msg: Any) -> None:
    if type(msg) is NtExecute:
        SINK.take(msg.call_id)
        for item in msg.requests:
            key, req_id, corr_id, flags, inputs, output_names, params, timeout_us, dests = item
            SINK.take(key, req_id, corr_id, flags, inputs, output_names, params, timeout_us, dests)
    elif type(msg) is NtFree:
        SINK.take(msg.segments)
    elif type(msg) is NtBlsResponse:
        SINK.take(msg.call_id, msg.response, msg.final)


def nt_server_dispatch(msg: Any) -> None:
    if type(msg) is NtExecuted:
        SINK.take(msg.call_id, msg.responses, msg.rescheduled, msg.error)
    elif type(msg) is NtSend:
        SINK.take(msg.key, msg.response, msg.flags)
    elif type(msg) is NtBls:
        SINK.take(*msg)
    elif type(msg) is NtFree:
        SINK.take(msg.segments)


# -- the messages, as each version builds them --------------------------------------------------

X = np.arange(16, dtype=np.float32)


def packed(name: str) -> tuple[str, str, tuple[int, ...], bytes]:
    return (name, "FP32", (16,), X.tobytes())


IN = [packed("INPUT0"), packed("INPUT1")]
OUT = [packed("OUTPUT0"), packed("OUTPUT1")]


def old_execute() -> tuple[Any, ...]:
    item: tuple[Any, ...] = (7, "", 0, 0, IN, None, {}, 0, "add_sub", "", None)
    return ("execute", 3, [item])


def old_result() -> tuple[Any, ...]:
    return ("result", 3, True, [("ok", OUT, None)])


def old_send() -> tuple[Any, ...]:
    return ("send", 7, ("ok", OUT[:1], None), 0)


def old_bls() -> tuple[Any, ...]:
    spec = {
        "model_name": "add_sub",
        "model_version": "",
        "id": "",
        "correlation_id": 0,
        "flags": 0,
        "inputs": IN,
        "outputs": ["OUTPUT0", "OUTPUT1"],
        "parameters": {},
        "timeout_us": 0,
        "caller": "bls_sync_0",
        "blocking": True,
        "caller_model": "bls_sync",
        "parents": (7,),
    }
    return ("bls", 5, (spec, False))


def old_bls_response() -> tuple[Any, ...]:
    return ("bls_response", 5, ("ok", OUT, {}), True)


def nt_execute() -> Any:
    return NtExecute(3, [(7, "", 0, 0, IN, None, {}, 0, None)])


def new_execute() -> Any:
    return Execute(3, [RequestItem(7, "", 0, 0, IN, None, {}, 0, None)])


def nt_result() -> Any:
    return NtExecuted(3, [(OUT, None, None)], (), None)


def new_result() -> Any:
    return Executed(3, [Response(OUT, None, None)], (), None)


def nt_send() -> Any:
    return NtSend(7, (OUT[:1], None, None), 0)


def new_send() -> Any:
    return Send(7, Response(OUT[:1], None, None), 0)


def nt_bls() -> Any:
    return NtBls(5, False, "add_sub", "", "", 0, 0, IN, ["OUTPUT0", "OUTPUT1"], {}, 0, True, (7,))


def new_bls() -> Any:
    return Bls(5, False, "add_sub", "", "", 0, 0, IN, ["OUTPUT0", "OUTPUT1"], {}, 0, True, (7,))


def nt_bls_response() -> Any:
    return NtBlsResponse(5, (OUT, {}, None), True)


def new_bls_response() -> Any:
    return BlsResponse(5, Response(OUT, {}, None), True)


# Each case: (build the message, frame it, the receiver's read of a frame, its dispatch).
Case = tuple[
    Callable[[], Any],
    Callable[[Any], bytes | bytearray],
    Callable[[bytearray], Any],
    Callable[[Any], None],
]
VARIANTS = ("old", "namedtuple", "new")
# Each channel frames with its own encoder (framing.FrameProtocol, BlockingChannel).
_ENCODER = framing.new_encoder()


def new_encode(message: Any) -> bytearray:
    return framing.frame(_ENCODER, message)


TO_WORKER = new_recv(decode_server_message)
TO_SERVER = new_recv(decode_worker_message)
CASES: dict[str, tuple[Case, Case, Case]] = {
    "Execute, one small request (server -> worker)": (
        (old_execute, old_encode, old_worker_recv, old_worker_dispatch),
        (nt_execute, nt_encode, nt_recv, nt_worker_dispatch),
        (new_execute, new_encode, TO_WORKER, new_worker_dispatch),
    ),
    "Executed, one response (worker -> server)": (
        (old_result, old_encode, server_recv, old_server_dispatch),
        (nt_result, nt_encode, nt_recv, nt_server_dispatch),
        (new_result, new_encode, TO_SERVER, new_server_dispatch),
    ),
    "Send, a decoupled response (worker -> server)": (
        (old_send, old_encode, server_recv, old_server_dispatch),
        (nt_send, nt_encode, nt_recv, nt_server_dispatch),
        (new_send, new_encode, TO_SERVER, new_server_dispatch),
    ),
    "Bls request (worker -> server)": (
        (old_bls, old_encode, server_recv, old_server_dispatch),
        (nt_bls, nt_encode, nt_recv, nt_server_dispatch),
        (new_bls, new_encode, TO_SERVER, new_server_dispatch),
    ),
    "BlsResponse (server -> worker)": (
        (old_bls_response, old_encode, old_worker_recv, old_worker_dispatch),
        (nt_bls_response, nt_encode, nt_recv, nt_worker_dispatch),
        (new_bls_response, new_encode, TO_WORKER, new_worker_dispatch),
    ),
}


def round_trip(case: Case) -> Callable[[], None]:
    build, encode, recv, dispatch = case
    buf = bytearray()

    def once() -> None:
        buf.extend(encode(build()))
        dispatch(recv(buf))

    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20000, help="messages per round")
    args = parser.parse_args()
    timings: dict[str, list[list[float]]] = {name: [[], [], []] for name in CASES}
    for _ in range(args.rounds):
        for name, cases in CASES.items():
            for case, out in zip(cases, timings[name], strict=True):
                seconds = timeit.timeit(round_trip(case), number=args.number)
                out.append(seconds / args.number * 1e6)
    print(
        f"µs per message (build + frame + read + decode + dispatch), {args.rounds} rounds of "
        f"{args.number}; ratios against old"
    )
    print()
    print("| message | old | namedtuple | new (msgspec) | namedtuple / old | new / old |")
    print("|---|---|---|---|---|---|")
    for name, (old_t, nt_t, new_t) in timings.items():
        o, n, m = min(old_t), min(nt_t), min(new_t)
        mo, mn, mm = (statistics.median(t) for t in (old_t, nt_t, new_t))
        print(
            f"| {name} | {o:.2f} ({mo:.2f}) | {n:.2f} ({mn:.2f}) | {m:.2f} ({mm:.2f}) | "
            f"{n / o:.2f} | {m / o:.2f} |"
        )
    print()
    print("Cells: minimum over rounds (median in parentheses); ratios of the minimums.")


if __name__ == "__main__":
    main()
