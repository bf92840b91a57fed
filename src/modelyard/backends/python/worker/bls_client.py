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
import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from modelyard.backends.python.protocol import framing, tensor_pool

if TYPE_CHECKING:
    from modelyard.backends.python.worker.runtime import StubRuntime


# The request keys of the batch whose execute is running in this context (thread or task).
PARENTS: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "modelyard_bls_parents", default=()
)

# Waiting for a BLS reply is bounded even when the request sets no timeout: the server's
# deadlock detection answers cycles at once, so this only guards against a lost server.
DEFAULT_WAIT_S = 3600.0


class BlsClient:
    def __init__(self, runtime: StubRuntime):
        self.rt = runtime
        self._ids = itertools.count(1)
        self._waiters: dict[int, Callable[[tuple[Any, ...]], None]] = {}
        self._lock = threading.Lock()

    # -- plumbing ------------------------------------------------------------------------------

    def deliver(self, msg: tuple[Any, ...]) -> None:
        with self._lock:
            waiter = self._waiters.get(msg[1])
        if waiter is not None:
            waiter(msg)

    def _register(self, waiter: Callable[[tuple[Any, ...]], None]) -> int:
        call_id = next(self._ids)
        with self._lock:
            self._waiters[call_id] = waiter
        return call_id

    def _unregister(self, call_id: int) -> None:
        with self._lock:
            self._waiters.pop(call_id, None)

    def _pack(self, request: Any) -> dict[str, Any]:
        inputs = []
        for t in request.inputs():
            arr = t.as_numpy()
            inputs.append(tensor_pool.pack_array(t.name(), arr, self.rt.stub.pool))
        params = request._params
        if params is None:
            text = request.parameters()
            params = json.loads(text) if text else {}
        version = request.model_version()
        return {
            "model_name": request.model_name(),
            "model_version": "" if version is None or int(version) < 0 else str(version),
            "id": request.request_id(),
            "correlation_id": request.correlation_id(),
            "flags": request.flags(),
            "inputs": inputs,
            "outputs": list(request.requested_output_names()),
            "parameters": params or {},
            "timeout_us": int(request.timeout() or 0),
            "caller": self.rt.spec["instance_name"],
            # Only a call made by a blocked sync execute holds this instance while it waits.
            "blocking": self.rt.stub.executing and threading.get_ident() == self.rt.stub.main_ident,
            "caller_model": self.rt.spec["model_name"],
            "parents": PARENTS.get(),
        }

    def _response(self, payload: Any) -> Any:
        pb = self.rt.pb
        if payload is None:  # a flag-only final
            return pb.InferenceResponse._from_server([], flag_only=True)
        if payload[0] == "err":
            error = pb.TritonError._from_server(payload[1], payload[2])
            return pb.InferenceResponse._from_server([], error)
        _, outputs, params = payload
        tensors = []
        for packed in outputs:
            name, _dt, arr = tensor_pool.unpack(packed, self.rt.stub.mapper)
            tensors.append(pb.Tensor._from_server(name, arr))
        return pb.InferenceResponse._from_server(tensors, None, params or None)

    def _send(self, call_id: int, request: Any, decoupled: bool) -> None:
        self.rt.stub.send(framing.BLS, call_id, (self._pack(request), decoupled))

    @staticmethod
    def _wait_s(request: Any) -> float:
        t = int(request.timeout() or 0)
        return t / 1e6 + 5.0 if t > 0 else DEFAULT_WAIT_S

    def _next_reply(
        self, replies: queue.SimpleQueue[tuple[Any, ...]], wait_s: float
    ) -> tuple[Any, ...]:
        """The next reply for a blocked caller, reading the channel while no other thread
        does; raises queue.Empty after ``wait_s``."""
        self.rt.stub.baton.wait_for(lambda: not replies.empty(), wait_s)
        return replies.get_nowait()

    def control(self, op: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        """A model-control call (load/unload/ready); blocks for the server's answer."""
        replies: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        call_id = self._register(replies.put)
        try:
            self.rt.stub.send(framing.CONTROL, call_id, (op, args))
            msg = self._next_reply(replies, DEFAULT_WAIT_S)
        except queue.Empty:
            return False, f"model control '{op}' got no answer from the server"
        finally:
            self._unregister(call_id)
        return bool(msg[2]), msg[3]

    # -- exec -----------------------------------------------------------------------------

    def exec(self, request: Any, decoupled: bool) -> Any:
        replies: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        call_id = self._register(replies.put)
        try:
            self._send(call_id, request, decoupled)
        except BaseException:
            self._unregister(call_id)
            raise
        wait_s = self._wait_s(request)
        if not decoupled:
            try:
                msg = self._next_reply(replies, wait_s)
            except queue.Empty:
                return self._timeout_response()
            finally:
                self._unregister(call_id)
            return self._response(msg[2])
        return BlsStream(self, call_id, replies, wait_s)

    def _timeout_response(self) -> Any:
        pb = self.rt.pb
        return pb.InferenceResponse(
            output_tensors=[],
            error=pb.TritonError("BLS request timed out waiting for a response", 4),
        )

    # -- async_exec -------------------------------------------------------------------------

    def async_exec(self, request: Any, decoupled: bool) -> Any:
        """An awaitable: the response, or (decoupled) a blocking iterator whose first response
        has already arrived, as Triton gives it."""
        loop = asyncio.get_running_loop()
        first: asyncio.Future[tuple[Any, ...]] = loop.create_future()
        rest: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        got_first = threading.Event()

        def put(msg: tuple[Any, ...]) -> None:
            if got_first.is_set():
                rest.put(msg)
                return
            got_first.set()
            loop.call_soon_threadsafe(_resolve, first, msg)

        call_id = self._register(put)
        baton = self.rt.stub.baton
        baton.urgent(1)  # the loop cannot read for itself: the reader thread must
        try:
            self._send(call_id, request, decoupled)
        except BaseException:
            self._unregister(call_id)
            baton.urgent(-1)
            raise
        return self._await_first(call_id, first, rest, decoupled, self._wait_s(request))

    async def _await_first(self, call_id: int, first: asyncio.Future[tuple[Any, ...]],
                           rest: queue.SimpleQueue[tuple[Any, ...]], decoupled: bool,
                           wait_s: float) -> Any:  # fmt: skip
        try:
            msg = await asyncio.wait_for(first, wait_s)
        except asyncio.TimeoutError:
            self._unregister(call_id)
            timeout = self._timeout_response()
            return iter([timeout]) if decoupled else timeout
        finally:
            self.rt.stub.baton.urgent(-1)
        if not decoupled:
            self._unregister(call_id)
            return self._response(msg[2])
        return BlsStream(self, call_id, rest, wait_s, first=msg)


class BlsStream:
    """The responses of a decoupled BLS call, as they arrive (``exec``/``async_exec`` with
    ``decoupled=True``); ``cancel()`` asks the server to cancel the call (Triton 25.04):
    the callee sees ``is_cancelled()``, and the stream still ends with the callee's final
    response (a call still queued ends with a CANCELLED error)."""

    def __init__(
        self,
        client: BlsClient,
        call_id: int,
        replies: queue.SimpleQueue[tuple[Any, ...]],
        wait_s: float,
        first: tuple[Any, ...] | None = None,
    ) -> None:
        self._client = client
        self._call_id = call_id
        self._replies = replies
        self._wait_s = wait_s
        self._first = first
        self._ended = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        msg = self._first
        self._first = None
        if msg is None:
            try:
                msg = self._client._next_reply(self._replies, self._wait_s)
            except queue.Empty:
                self._end()
                return self._client._timeout_response()
        if msg[3]:
            self._end()
        return self._client._response(msg[2])

    def cancel(self) -> None:
        if not self._ended:
            self._client.rt.stub.send(framing.BLS_CANCEL, self._call_id)

    def _end(self) -> None:
        self._ended = True
        self._client._unregister(self._call_id)

    def __del__(self) -> None:
        if not self._ended:  # dropped before its end: stop routing its replies here
            self._client._unregister(self._call_id)


def _resolve(fut: asyncio.Future[tuple[Any, ...]], msg: tuple[Any, ...]) -> None:
    if not fut.done():
        fut.set_result(msg)
