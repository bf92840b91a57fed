"""BLS from inside a worker: a model's InferenceRequest.exec()/async_exec() become BLS frames
to the server, which runs them through its core like any other request.

A thread blocked in exec() reads the channel itself while no other thread does (see
baton.py); replies are handed to whoever waits: a blocked thread for exec(), the instance's
event loop for async_exec(). Decoupled calls stream responses as they arrive.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from modelyard.backends.python.protocol import tensor_pool
from modelyard.backends.python.protocol.messages import (
    Bls,
    BlsCancel,
    BlsResponse,
    ControlResult,
    LoadModel,
    QueryModelReady,
    Response,
    UnloadModel,
)
from modelyard.backends.python.protocol.model_calls import (
    DEFAULT_WAIT_S,
    ResponseStream,
    bls_call,
    error_response,
    forked_response,
    forked_text,
    output_placement,
    reply_wait_s,
    resolved,
    target_device,
    timeout_response,
)
from modelyard.backends.python.worker.spans import CURRENT

if TYPE_CHECKING:
    from modelyard.backends.python.worker.runtime import StubRuntime


# The request keys of the batch whose execute is running in this context (thread or task).
PARENTS: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "modelyard_bls_parents", default=()
)

Reply = BlsResponse | ControlResult


class BlsClient:
    def __init__(self, runtime: StubRuntime):
        self.rt = runtime
        self._ids = itertools.count(1)
        self._waiters: dict[int, Callable[[Reply], None]] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()  # the process that owns the channel to the server

    # -- plumbing ------------------------------------------------------------------------------

    def deliver(self, msg: Reply) -> None:
        with self._lock:
            waiter = self._waiters.get(msg.call_id)
        if waiter is not None:
            waiter(msg)
        elif type(msg) is BlsResponse and msg.response is not None:
            # Nobody waits any more (the call timed out): its segments go back to their owner.
            for segment in tensor_pool.segments(msg.response.tensors):
                self.rt.stub.released(segment)

    def next_id(self) -> int:
        return next(self._ids)

    def _register(self, waiter: Callable[[Reply], None], call_id: int = 0) -> int:
        call_id = call_id or next(self._ids)
        with self._lock:
            self._waiters[call_id] = waiter
        return call_id

    def _unregister(self, call_id: int) -> None:
        with self._lock:
            self._waiters.pop(call_id, None)

    def _request(self, call_id: int, request: Any, decoupled: bool) -> Bls:
        call = bls_call(request)
        stub = self.rt.stub
        return Bls(
            call_id,
            decoupled,
            call.model_name,
            call.version,
            call.request_id,
            call.correlation_id,
            call.flags,
            [
                tensor_pool.pack_array(t.name(), t._array, stub.pool)  # (a host tensor)
                if t._gpu is None
                else tensor_pool.pack_model_tensor(t, stub.pool, ipc=True)
                for t in call.inputs
            ],
            call.outputs,
            call.parameters,
            call.timeout_us,
            # Only a call made by a blocked sync execute holds this instance while it waits.
            stub.executing and threading.get_ident() == stub.main_ident,
            PARENTS.get(),
            CURRENT.get(),
        )

    def _response(self, response: Response | None, placement: int) -> Any:
        """A reply as the model gets it, its outputs where ``placement`` (the call's
        preferred memory, model_calls.output_placement) puts them."""
        pb = self.rt.pb
        if response is None:  # a flag-only final
            return pb.InferenceResponse._from_server([], flag_only=True)
        if response.error is not None:
            message, code = response.error
            return error_response(pb, message, code)
        tensors = []
        mapper = self.rt.stub.mapper
        host_stays = placement < 0  # (AS_PRODUCED or HOST_OUTPUTS: a host output stays one)
        for packed in response.tensors:
            if host_stays and type(packed[3]) is bytes:  # (model_tensor's usual case, inline)
                name, _, arr = tensor_pool.unpack(packed, mapper)
                tensors.append(pb.Tensor._from_server(name, arr))
                continue
            device = target_device(placement, tensor_pool.gpu_of(packed))
            tensors.append(tensor_pool.model_tensor(pb, packed, mapper, device))
        return pb.InferenceResponse._from_server(tensors, None, response.parameters or None)

    def _next_reply(self, replies: queue.SimpleQueue[Reply], wait_s: float) -> Reply:
        """The next reply for a blocked caller, reading the channel while no other thread
        does; raises queue.Empty after ``wait_s``."""
        self.rt.stub.baton.wait_for(lambda: not replies.empty(), wait_s)
        return replies.get_nowait()

    def control(
        self, op: str, request: LoadModel | UnloadModel | QueryModelReady
    ) -> tuple[str, bool]:
        """A model-control call (op: load/unload/ready); blocks for the server's answer:
        (error text, "" on success; whether the model is ready)."""
        forked = forked_text(self._pid)
        if forked:
            return forked, False
        replies: queue.SimpleQueue[Reply] = queue.SimpleQueue()
        call_id = self._register(replies.put, request.call_id)
        try:
            self.rt.stub.send(request)
            msg = self._next_reply(replies, DEFAULT_WAIT_S)
        except queue.Empty:
            return f"model control '{op}' got no answer from the server", False
        finally:
            self._unregister(call_id)
        assert type(msg) is ControlResult
        return msg.error, msg.ready

    # -- exec -----------------------------------------------------------------------------

    def exec(self, request: Any, decoupled: bool) -> Any:
        forked = forked_text(self._pid)
        if forked:
            return forked_response(self.rt.pb, forked, decoupled)
        replies: queue.SimpleQueue[Reply] = queue.SimpleQueue()
        call_id = self._register(replies.put)
        try:
            self.rt.stub.send(self._request(call_id, request, decoupled))
        except BaseException:
            self._unregister(call_id)
            raise
        wait_s = reply_wait_s(int(request.timeout() or 0))
        placement = output_placement(request._preferred_memory)
        if not decoupled:
            try:
                msg = self._next_reply(replies, wait_s)
            except queue.Empty:
                return timeout_response(self.rt.pb)
            finally:
                self._unregister(call_id)
            return self._response(_bls_response(msg).response, placement)
        call = _StreamedCall(self, call_id, replies, wait_s, placement)
        return ResponseStream(call.next, call.cancel)

    # -- async_exec -------------------------------------------------------------------------

    def async_exec(self, request: Any, decoupled: bool) -> Any:
        """An awaitable: the response, or (decoupled) a blocking iterator whose first response
        has already arrived, as Triton gives it."""
        forked = forked_text(self._pid)
        if forked:
            return resolved(forked_response(self.rt.pb, forked, decoupled))
        loop = asyncio.get_running_loop()
        first: asyncio.Future[Reply] = loop.create_future()
        rest: queue.SimpleQueue[Reply] = queue.SimpleQueue()
        got_first = threading.Event()

        def put(msg: Reply) -> None:
            if got_first.is_set():
                rest.put(msg)
                return
            got_first.set()
            loop.call_soon_threadsafe(_resolve, first, msg)

        call_id = self._register(put)
        baton = self.rt.stub.baton
        baton.urgent(1)  # the loop cannot read for itself: the reader thread must
        try:
            self.rt.stub.send(self._request(call_id, request, decoupled))
        except BaseException:
            self._unregister(call_id)
            baton.urgent(-1)
            raise
        return self._await_first(
            call_id,
            first,
            rest,
            decoupled,
            reply_wait_s(int(request.timeout() or 0)),
            output_placement(request._preferred_memory),
        )

    async def _await_first(
        self,
        call_id: int,
        first: asyncio.Future[Reply],
        rest: queue.SimpleQueue[Reply],
        decoupled: bool,
        wait_s: float,
        placement: int,
    ) -> Any:
        try:
            msg = await asyncio.wait_for(first, wait_s)
        except asyncio.TimeoutError:
            self._unregister(call_id)
            timeout = timeout_response(self.rt.pb)
            return iter([timeout]) if decoupled else timeout
        finally:
            self.rt.stub.baton.urgent(-1)
        if not decoupled:
            self._unregister(call_id)
            return self._response(_bls_response(msg).response, placement)
        call = _StreamedCall(self, call_id, rest, wait_s, placement, first=msg)
        return ResponseStream(call.next, call.cancel)


class _StreamedCall:
    """A decoupled call's replies as they arrive, for its ``ResponseStream``
    (model_calls.py): ``next`` reads them, ``cancel`` asks the server to cancel the call.
    The stream holds it through those bound methods: dropping the stream drops the call."""

    def __init__(
        self,
        client: BlsClient,
        call_id: int,
        replies: queue.SimpleQueue[Reply],
        wait_s: float,
        placement: int,
        first: Reply | None = None,
    ) -> None:
        self._client = client
        self._call_id = call_id
        self._replies = replies
        self._wait_s = wait_s
        self._placement = placement
        self._first = first
        self._ended = False

    def next(self) -> tuple[Any, bool]:
        msg = self._first
        self._first = None
        if msg is None:
            try:
                msg = self._client._next_reply(self._replies, self._wait_s)
            except queue.Empty:
                self._end()
                return timeout_response(self._client.rt.pb), True
        reply = _bls_response(msg)
        if reply.final:
            self._end()
        return self._client._response(reply.response, self._placement), reply.final

    def cancel(self) -> None:
        self._client.rt.stub.send(BlsCancel(self._call_id))

    def _end(self) -> None:
        self._ended = True
        self._client._unregister(self._call_id)

    def __del__(self) -> None:
        if not self._ended:  # its stream was dropped before its end: stop routing its replies
            self._client._unregister(self._call_id)


def _resolve(fut: asyncio.Future[Reply], msg: Reply) -> None:
    if not fut.done():
        fut.set_result(msg)


def _bls_response(msg: Reply) -> BlsResponse:
    assert type(msg) is BlsResponse  # a BLS call's id is answered by BLS responses only
    return msg
