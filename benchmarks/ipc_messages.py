"""Cost of the server <-> worker messages: the typed messages (issue 15) against the positional
tuples they replaced, for the frequent kinds.

For each kind, one round trip through the code each side runs: the sender builds the message
and frames it; the receiver takes the frame out of its read buffer, decodes it and dispatches
it to the code that handles its kind (which reads every field). "old" is the pre-#15 code
(ipc.py, stub.py and worker.py at 623ac8d), reproduced below; "new" calls the modules in
src/. Tensors are packed once beforehand (the same in both: tensor_pool.pack is unchanged).
Rounds alternate old and new; the table gives the minimum and median per message over rounds.

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
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from modelyard.backends.python.protocol import framing
from modelyard.backends.python.protocol.messages import (
    Bls,
    BlsResponse,
    Execute,
    Executed,
    Free,
    Result,
    Send,
    from_wire,
    to_wire,
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


def new_worker_recv(buf: bytearray) -> tuple[Any, ...]:
    """framing.BlockingChannel.recv without its socket reads."""
    (n,) = _HEADER.unpack_from(buf)
    with memoryview(buf) as view:
        wire: tuple[Any, ...] = pickle.loads(view[4 : 4 + n])
    del buf[: 4 + n]
    return wire


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
        SINK.take(msg[1], msg[2], msg[3])  # BlsClient.deliver, BlsStream.__next__
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


def new_worker_dispatch(wire: tuple[Any, ...]) -> None:
    msg = from_wire(wire)
    if type(msg) is Free:
        SINK.take(msg.segments)
    elif type(msg) is BlsResponse:
        SINK.take(msg.call_id, msg.response, msg.final)
    elif type(msg) is Execute:
        SINK.take(msg.call_id)
        for item in msg.requests:
            key, req_id, corr_id, flags, inputs, output_names, params, timeout_us, dests = item
            SINK.take(key, req_id, corr_id, flags, inputs, output_names, params, timeout_us, dests)


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


def new_server_dispatch(wire: tuple[Any, ...]) -> None:
    msg = from_wire(wire)
    if type(msg) is Executed:
        SINK.take(msg.call_id, msg.responses, msg.rescheduled, msg.error)
    elif type(msg) is Result:
        SINK.take(msg.call_id, msg.value, msg.error)
    elif type(msg) is Send:
        SINK.take(msg.key, msg.response, msg.flags)
    elif type(msg) is Free:
        SINK.take(msg.segments)
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


# -- the messages, as each version builds them --------------------------------------------------

X = np.arange(16, dtype=np.float32)


def packed(name: str) -> tuple[str, str, tuple[int, ...], bytes]:
    return (name, "FP32", (16,), X.tobytes())


IN = [packed("INPUT0"), packed("INPUT1")]
OUT = [packed("OUTPUT0"), packed("OUTPUT1")]


def old_execute() -> tuple[Any, ...]:
    item: tuple[Any, ...] = (7, "", 0, 0, IN, None, {}, 0, "add_sub", "", None)
    return ("execute", 3, [item])


def new_execute() -> tuple[Any, ...]:
    return to_wire(Execute(3, [(7, "", 0, 0, IN, None, {}, 0, None)]))


def old_result() -> tuple[Any, ...]:
    return ("result", 3, True, [("ok", OUT, None)])


def new_result() -> tuple[Any, ...]:
    return to_wire(Executed(3, [(OUT, None, None)], (), None))


def old_send() -> tuple[Any, ...]:
    return ("send", 7, ("ok", OUT[:1], None), 0)


def new_send() -> tuple[Any, ...]:
    return to_wire(Send(7, (OUT[:1], None, None), 0))


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


def new_bls() -> tuple[Any, ...]:
    return to_wire(
        Bls(5, False, "add_sub", "", "", 0, 0, IN, ["OUTPUT0", "OUTPUT1"], {}, 0, True, (7,))
    )


def old_bls_response() -> tuple[Any, ...]:
    return ("bls_response", 5, ("ok", OUT, {}), True)


def new_bls_response() -> tuple[Any, ...]:
    return to_wire(BlsResponse(5, (OUT, {}, None), True))


# Each case: (build the message, the receiver's read of a frame, the receiver's dispatch).
Case = tuple[Callable[[], tuple[Any, ...]], Callable[[bytearray], Any], Callable[[Any], None]]
CASES: dict[str, tuple[Case, Case]] = {
    "EXECUTE, one small request (server -> worker)": (
        (old_execute, old_worker_recv, old_worker_dispatch),
        (new_execute, new_worker_recv, new_worker_dispatch),
    ),
    "RESULT / Executed, one response (worker -> server)": (
        (old_result, server_recv, old_server_dispatch),
        (new_result, server_recv, new_server_dispatch),
    ),
    "SEND, a decoupled response (worker -> server)": (
        (old_send, server_recv, old_server_dispatch),
        (new_send, server_recv, new_server_dispatch),
    ),
    "BLS request (worker -> server)": (
        (old_bls, server_recv, old_server_dispatch),
        (new_bls, server_recv, new_server_dispatch),
    ),
    "BLS response (server -> worker)": (
        (old_bls_response, old_worker_recv, old_worker_dispatch),
        (new_bls_response, new_worker_recv, new_worker_dispatch),
    ),
}


def round_trip(case: Case, encode: Callable[[tuple[Any, ...]], bytes]) -> Callable[[], None]:
    build, recv, dispatch = case
    buf = bytearray()

    def once() -> None:
        buf.extend(encode(build()))
        dispatch(recv(buf))

    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20000, help="messages per round")
    args = parser.parse_args()
    timings: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in CASES}
    for _ in range(args.rounds):
        for name, (old, new) in CASES.items():
            for case, encode, out in (
                (old, old_encode, timings[name][0]),
                (new, framing.encode, timings[name][1]),
            ):
                seconds = timeit.timeit(round_trip(case, encode), number=args.number)
                out.append(seconds / args.number * 1e6)
    print(
        f"µs per message (build + frame + read + decode + dispatch), {args.rounds} rounds of "
        f"{args.number}; old = pre-#15 tuples, new = typed messages"
    )
    print()
    print(
        "| message | old min | new min | new/old (min) | old median | new median | new/old (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (old_t, new_t) in timings.items():
        o_min, n_min = min(old_t), min(new_t)
        o_med, n_med = statistics.median(old_t), statistics.median(new_t)
        print(
            f"| {name} | {o_min:.2f} | {n_min:.2f} | {n_min / o_min:.2f} | {o_med:.2f} | "
            f"{n_med:.2f} | {n_med / o_med:.2f} |"
        )


if __name__ == "__main__":
    main()
