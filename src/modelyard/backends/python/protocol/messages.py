"""The messages between the server and a worker process: one NamedTuple per kind.

A frame (framing.py) carries one message as the plain tuple ``(tag, *fields)``: pickling a
NamedTuple itself costs several times a plain tuple (its class is looked up by name on both
sides), so :func:`to_wire` and :func:`from_wire` convert at the channel. For the same reason
the tensors, requests and responses inside the frequent messages are plain tuples, read by
unpacking into names (their layouts are the type aliases below); rare payloads (a worker's
setup) are NamedTuples.

Error codes cross the boundary as :class:`modelyard.errors.ErrorCode` members (re-exported
here: the worker part imports the protocol only).
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeAlias

from modelyard.errors import ErrorCode

__all__ = ["ErrorCode"]

# -- what the messages carry ---------------------------------------------------------------

# A tensor: (name, datatype, shape, data) where data is the bytes (inline), the object array
# (BYTES), (segment, nbytes) in the sender's pool (tensor_pool.py), or a client region
# reference (client_regions.py): (INPUT, region, offset, nbytes) for an input,
# (WRITTEN, nbytes) for an output the worker wrote into its region.
PackedTensor: TypeAlias = tuple[str, str, tuple[int, ...], Any]
# A registered client region: (token, key, (st_dev, st_ino), offset, byte_size).
RegionInfo: TypeAlias = tuple[int, str, tuple[int, int], int, int]
# Where the worker writes an output the client wants in its region: (region, offset, size).
OutputDestination: TypeAlias = tuple[RegionInfo, int, int]
Parameters: TypeAlias = dict[str, bool | int | float | str]
# An error: (message, code).
ErrorReply: TypeAlias = tuple[str, ErrorCode]
# One response: (tensors, parameters or None, error or None). A flag-only final response (the
# model sent only the FINAL flag) travels as None instead.
Response: TypeAlias = tuple[list[PackedTensor], Parameters | None, ErrorReply | None]
# One request of a batch: (key, request id, correlation id, flags, inputs, requested output
# names or None for all, parameters, timeout in microseconds, output destinations or None).
RequestItem: TypeAlias = tuple[
    int,
    str,
    int | str,
    int,
    list[PackedTensor],
    list[str] | None,
    Parameters,
    int,
    dict[str, OutputDestination] | None,
]


class ModelSetup(NamedTuple):
    """What a worker needs to import and initialize its model (rare: a NamedTuple)."""

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


# -- server -> worker ------------------------------------------------------------------------


class Autocomplete(NamedTuple):
    """Run the model's ``auto_complete_config`` on ``config``; a :class:`Result` answers."""

    call_id: int
    setup: ModelSetup
    config: dict[str, Any]


class Init(NamedTuple):
    """Import the model and run its ``initialize``; a :class:`Result` answers (the value: whether
    the model has ``is_ready``)."""

    call_id: int
    setup: ModelSetup


class Execute(NamedTuple):
    """Run one batch; an :class:`Executed` answers."""

    call_id: int
    requests: list[RequestItem]


class Finalize(NamedTuple):
    """Run the model's ``finalize`` and exit; a :class:`Result` answers."""

    call_id: int


class BlsResponse(NamedTuple):
    """A response to the BLS call ``call_id`` (None: a flag-only final)."""

    call_id: int
    response: Response | None
    final: bool


class ControlResult(NamedTuple):
    """The answer to a model-control call: ``error`` is "" on success; ``ready`` answers
    :class:`QueryModelReady`."""

    call_id: int
    error: str
    ready: bool


class Cancel(NamedTuple):
    """The clients of these requests went away: their models see ``is_cancelled()``."""

    keys: list[int]


class Metrics(NamedTuple):
    """Send the model's custom metrics (a :class:`Result`)."""

    call_id: int


class IsReady(NamedTuple):
    """Run the model's own ``is_ready()`` (a :class:`Result`)."""

    call_id: int


class ForgetRegions(NamedTuple):
    """These client shared-memory regions were unregistered: drop their mappings."""

    tokens: list[int]


class Free(NamedTuple):
    """Both ways: shared-memory segments of the receiver's pool the sender no longer views."""

    segments: list[str]


# -- worker -> server ------------------------------------------------------------------------


class Ready(NamedTuple):
    """The worker process is up (the answer to its start)."""


class Result(NamedTuple):
    """The answer to a call (autocomplete, init, finalize, metrics, is_ready)."""

    call_id: int
    value: Any
    error: ErrorReply | None


class Executed(NamedTuple):
    """The answer to :class:`Execute`: one response (or None) per request, and the indices of
    the requests the model rescheduled. ``responses`` is None when the model's
    ``async def execute`` runs on: the instance may take the next batch, and the outcome comes
    later as :class:`AsyncExecuted`."""

    call_id: int
    responses: list[Response | None] | None
    rescheduled: tuple[int, ...]
    error: ErrorReply | None


class AsyncExecuted(NamedTuple):
    """The late outcome of an ``async def execute`` (fields as :class:`Executed`)."""

    call_id: int
    responses: list[Response | None] | None
    rescheduled: tuple[int, ...]
    error: ErrorReply | None


class Send(NamedTuple):
    """A response from a request's response sender (None: the FINAL flag alone)."""

    key: int
    response: Response | None
    flags: int


class Log(NamedTuple):
    """A log line of the model (level 0=INFO 1=WARNING 2=ERROR 3=VERBOSE)."""

    level: int
    message: str
    filename: str
    line: int


class Bls(NamedTuple):
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
    parameters: Parameters
    timeout_us: int
    # Made by a sync execute blocked on it: the instance is held while the call waits.
    blocking: bool
    # The request keys of the batch whose execute made the call (cancelled with them).
    parents: tuple[int, ...]


class BlsCancel(NamedTuple):
    """The model cancelled its decoupled BLS call (``ResponseIterator.cancel()``)."""

    call_id: int


class LoadModel(NamedTuple):
    """``pb_utils.load_model``; a :class:`ControlResult` answers."""

    call_id: int
    name: str
    config: str
    files: dict[str, bytes]


class UnloadModel(NamedTuple):
    """``pb_utils.unload_model``; a :class:`ControlResult` answers."""

    call_id: int
    name: str
    unload_dependents: bool


class QueryModelReady(NamedTuple):
    """``pb_utils.is_model_ready``; a :class:`ControlResult` answers."""

    call_id: int
    name: str
    version: str


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
)
Message: TypeAlias = ServerMessage | WorkerMessage

# -- the wire form ---------------------------------------------------------------------------

# A message's tag is its index here (both sides run the same code).
KINDS: tuple[type[Message], ...] = (
    Autocomplete,
    Init,
    Execute,
    Finalize,
    BlsResponse,
    ControlResult,
    Cancel,
    Metrics,
    IsReady,
    ForgetRegions,
    Free,
    Ready,
    Result,
    Executed,
    AsyncExecuted,
    Send,
    Log,
    Bls,
    BlsCancel,
    LoadModel,
    UnloadModel,
    QueryModelReady,
)
TAGS: dict[type[Message], int] = {kind: tag for tag, kind in enumerate(KINDS)}
_new = tuple.__new__


def to_wire(message: Message) -> tuple[Any, ...]:
    """The plain tuple a frame carries: ``(tag, *fields)``."""
    return (TAGS[type(message)], *message)


def from_wire(wire: tuple[Any, ...]) -> Message:
    """The message a frame carried (see :func:`to_wire`)."""
    message: Message = _new(KINDS[wire[0]], wire[1:])
    return message
