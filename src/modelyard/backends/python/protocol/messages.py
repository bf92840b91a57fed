"""The messages between the server and a worker process: one typed class per kind.

Each kind is a ``msgspec.Struct`` (built by position or keyword, read by name, typed for
mypy) encoded as a MessagePack array ``[tag, *fields]`` (framing.py): building, encoding and
decoding one costs about half what the positional pickled tuples they replaced cost, where
NamedTuples would have cost a quarter more (benchmarks/ipc_messages.py). A decoder checks each
frame against the kinds the receiving side expects.

What a model puts into a message (parameters, configs, a call's value, a BYTES tensor's object
array) is typed ``Any`` and crosses as it is; values MessagePack has no type for (numpy
arrays and scalars, for one) travel pickled inside an extension (``ext_hook``). Error codes
cross as :class:`modelyard.errors.ErrorCode` members (re-exported here: the worker part
imports the protocol only).
"""

from __future__ import annotations

import pickle
from typing import Any, TypeAlias

import msgspec

from modelyard.errors import ErrorCode

__all__ = ["ErrorCode"]

# -- what the messages carry ---------------------------------------------------------------

# A tensor: (name, datatype, shape, data). data is the bytes (inline), the object array
# (BYTES), [segment, nbytes] in the sender's pool (tensor_pool.py), or a client region
# reference (client_regions.py): [INPUT, region, offset, nbytes] for an input,
# [WRITTEN, nbytes] for an output the worker wrote into its region.
PackedTensor: TypeAlias = tuple[str, str, tuple[int, ...], Any]
# A registered client region: (token, key, (st_dev, st_ino), offset, byte_size).
RegionInfo: TypeAlias = tuple[int, str, tuple[int, int], int, int]
# Where the worker writes an output the client wants in its region: (region, offset, size).
OutputDestination: TypeAlias = tuple[RegionInfo, int, int]
# An error: (message, code).
ErrorReply: TypeAlias = tuple[str, ErrorCode]


class _Payload(msgspec.Struct, array_like=True, gc=False):
    """A typed part of a message, encoded as an array of its fields."""


class Response(_Payload):
    """One response of a model. A flag-only final response (the model sent only the FINAL
    flag) travels as None instead."""

    tensors: list[PackedTensor]
    parameters: dict[str, Any] | None
    error: ErrorReply | None


class RequestItem(_Payload):
    """One request of a batch."""

    key: int  # the server's key for the request while it is in flight
    request_id: str
    correlation_id: int | str
    flags: int
    inputs: list[PackedTensor]
    output_names: list[str] | None  # None: every output of the model
    parameters: dict[str, Any]
    timeout_us: int
    destinations: dict[str, OutputDestination] | None  # outputs to write into client regions
    # A traced request: (its trace context for request.trace(), "" in Triton mode; the id
    # of the span the model's own spans and BLS calls hang under). None: not traced.
    trace: tuple[str, int] | None = None
    # A BLS call from another worker: (the caller's inbox, its call id). The worker may send
    # the final response there itself (inbox.py) and tell the server only its outcome.
    reply_to: tuple[str, int] | None = None
    # GPU outputs may stay on their device (a BLS call: CUDA IPC, cuda_ipc.py); else the
    # worker copies them to the host for the server.
    gpu_outputs: bool = False


class ModelSetup(_Payload):
    """What a worker needs to import and initialize its model."""

    model_name: str
    version: int
    model_dir: str  # <repo>/<model>
    model_file: str  # <repo>/<model>/<version>/model.py
    instance_name: str
    instance_kind: str
    device_id: int
    config_json: str  # the complete config, Triton's JSON ("{}" for auto-complete)
    decoupled: bool
    shm: bool


class _Message(msgspec.Struct, array_like=True, gc=False):
    """A message: encoded as ``[tag, *fields]``."""


# -- server -> worker ------------------------------------------------------------------------


class Autocomplete(_Message, tag=1):
    """Run the model's ``auto_complete_config`` on ``config``; a :class:`Result` answers."""

    call_id: int
    setup: ModelSetup
    config: dict[str, Any]


class Init(_Message, tag=2):
    """Import the model and run its ``initialize``; a :class:`Result` answers (the value: whether
    the model has ``is_ready``)."""

    call_id: int
    setup: ModelSetup


class Execute(_Message, tag=3):
    """Run one batch; an :class:`Executed` answers."""

    call_id: int
    requests: list[RequestItem]


class Finalize(_Message, tag=4):
    """Run the model's ``finalize`` and exit; a :class:`Result` answers."""

    call_id: int


class BlsResponse(_Message, tag=5):
    """A response to the BLS call ``call_id`` (None: a flag-only final)."""

    call_id: int
    response: Response | None
    final: bool


class ControlResult(_Message, tag=6):
    """The answer to a model-control call: ``error`` is "" on success; ``ready`` answers
    :class:`QueryModelReady`."""

    call_id: int
    error: str
    ready: bool


class Cancel(_Message, tag=7):
    """The clients of these requests went away: their models see ``is_cancelled()``."""

    keys: list[int]


class Metrics(_Message, tag=8):
    """Send the model's custom metrics (a :class:`Result`)."""

    call_id: int


class IsReady(_Message, tag=9):
    """Run the model's own ``is_ready()`` (a :class:`Result`)."""

    call_id: int


class ForgetRegions(_Message, tag=10):
    """These client shared-memory regions were unregistered: drop their mappings."""

    tokens: list[int]


class Free(_Message, tag=11):
    """Both ways: shared-memory segments of the receiver's pool the sender no longer views."""

    segments: list[str]


# -- worker -> server ------------------------------------------------------------------------


class Ready(_Message, tag=12):
    """The worker process is up (the answer to its start)."""


class Result(_Message, tag=13):
    """The answer to a call (autocomplete, init, finalize, metrics, is_ready)."""

    call_id: int
    value: Any
    error: ErrorReply | None


class Executed(_Message, tag=14):
    """The answer to :class:`Execute`: one response (or None) per request, and the indices of
    the requests the model rescheduled. ``responses`` is None when the model's
    ``async def execute`` runs on: the instance may take the next batch, and the outcome comes
    later as :class:`AsyncExecuted`. ``direct``: the indices of the requests whose response
    went straight to their caller (``RequestItem.reply_to``); theirs here carry only the
    error, if any."""

    call_id: int
    responses: list[Response | None] | None
    rescheduled: tuple[int, ...]
    error: ErrorReply | None
    direct: tuple[int, ...] = ()


class AsyncExecuted(_Message, tag=15):
    """The late outcome of an ``async def execute`` (fields as :class:`Executed`)."""

    call_id: int
    responses: list[Response | None] | None
    rescheduled: tuple[int, ...]
    error: ErrorReply | None
    direct: tuple[int, ...] = ()


class Send(_Message, tag=16):
    """A response from a request's response sender (None: the FINAL flag alone)."""

    key: int
    response: Response | None
    flags: int


class Log(_Message, tag=17):
    """A log line of the model (level 0=INFO 1=WARNING 2=ERROR 3=VERBOSE)."""

    level: int
    message: str
    filename: str
    line: int


class Bls(_Message, tag=18):
    """A BLS request of the model; :class:`BlsResponse` messages answer."""

    call_id: int
    decoupled: bool
    model_name: str
    model_version: str
    request_id: str
    correlation_id: int | str
    flags: int
    inputs: list[PackedTensor]
    outputs: list[str]
    parameters: dict[str, Any]
    timeout_us: int
    # Made by a sync execute blocked on it: the instance is held while the call waits.
    blocking: bool
    # The request keys of the batch whose execute made the call (cancelled with them).
    parents: tuple[int, ...]
    # Made inside a traced request: (its key, the span the call hangs under).
    span: tuple[int, int] | None = None


class BlsCancel(_Message, tag=19):
    """The model cancelled its decoupled BLS call (``ResponseIterator.cancel()``)."""

    call_id: int


class LoadModel(_Message, tag=20):
    """``pb_utils.load_model``; a :class:`ControlResult` answers."""

    call_id: int
    name: str
    config: str
    files: dict[str, bytes]


class UnloadModel(_Message, tag=21):
    """``pb_utils.unload_model``; a :class:`ControlResult` answers."""

    call_id: int
    name: str
    unload_dependents: bool


class QueryModelReady(_Message, tag=22):
    """``pb_utils.is_model_ready``; a :class:`ControlResult` answers."""

    call_id: int
    name: str
    version: str


class SpanEnd(_Message, tag=23):
    """A span the model opened (``modelyard.tracing.span``) ended, in the traced request
    ``key``: ids, name, monotonic times and attributes."""

    key: int
    span_id: int
    parent_id: int
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


ServerMessage: TypeAlias = (
    Autocomplete
    | Init
    | Execute
    | Finalize
    | BlsResponse
    | ControlResult
    | Cancel
    | Metrics
    | IsReady
    | ForgetRegions
    | Free
)
WorkerMessage: TypeAlias = (
    Ready
    | Result
    | Executed
    | AsyncExecuted
    | Send
    | Log
    | Bls
    | BlsCancel
    | LoadModel
    | UnloadModel
    | QueryModelReady
    | Free
    | SpanEnd
)
Message: TypeAlias = ServerMessage | WorkerMessage

# -- values MessagePack has no type for ------------------------------------------------------

_PICKLED = 1  # the extension code of a pickled value


def enc_hook(value: Any) -> Any:
    """A value of a type MessagePack does not know (numpy arrays and scalars, ...): pickled."""
    return msgspec.msgpack.Ext(_PICKLED, pickle.dumps(value, protocol=5))


def ext_hook(code: int, data: memoryview) -> Any:
    if code != _PICKLED:
        raise ValueError(f"unknown MessagePack extension {code}")
    return pickle.loads(data)


# What each side decodes a frame into (the kinds it may receive, checked).
decode_server_message = msgspec.msgpack.Decoder(ServerMessage, ext_hook=ext_hook).decode
decode_worker_message = msgspec.msgpack.Decoder(WorkerMessage, ext_hook=ext_hook).decode
