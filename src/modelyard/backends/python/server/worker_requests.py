"""The requests of a worker-process instance: a batch goes out in one Execute (plus at most one
staged batch behind the running one), each request is tracked by key until its final
response, and responses come back from Executed, AsyncExecuted and the response senders' Send.

A base of :class:`~.process_instance.PythonWorker`, which owns the process and the channel
these methods use.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

from modelyard.backends.instance import Instance
from modelyard.backends.python.protocol import framing, tensor_pool
from modelyard.backends.python.protocol.messages import (
    AsyncExecuted,
    Cancel,
    ErrorReply,
    Execute,
    Executed,
    PackedTensor,
    RequestItem,
    Response,
    ServerMessage,
    SpanEnd,
)
from modelyard.backends.python.server import packing
from modelyard.backends.python.server.reschedule import reschedule
from modelyard.backends.python.server.restart import Supervisor
from modelyard.errors import InternalError, ModelyardError
from modelyard.serving.context import RequestContext
from modelyard.types import InferResponse, Tensor


class WorkerRequests(Instance):
    spec: Any  # process_instance.WorkerSpec
    mapper: tensor_pool.ShmMapper
    _pool: tensor_pool.ShmPool
    _proto: framing.FrameProtocol | None
    _loop: asyncio.AbstractEventLoop | None
    _sup: Supervisor
    _alive: bool
    _calls: dict[int, asyncio.Future[Any]]
    _call_ids: itertools.count[int]
    _running: list[RequestContext]
    _staged: list[RequestContext] | None  # sent while another batch runs (see can_stage)
    _inflight: int
    _live: dict[int, RequestContext]  # request key -> context, while a response may come
    _async_batches: dict[int, list[int]]  # execute call id -> request keys
    _batch_keys: dict[int, list[int]]  # execute call id -> request keys, while it runs
    _early_results: dict[int, AsyncExecuted]  # read before their Executed
    _keys: itertools.count[int]
    _region_tokens: set[int]
    _direct_outputs: tuple[str, bool]

    def send(self, message: ServerMessage) -> None:
        raise NotImplementedError

    def release_export(self, name: str) -> None:
        """A worker's GPU export (cuda_ipc.py) is no longer used here: free it."""
        raise NotImplementedError

    def _answer(self, call_id: int, value: Any, error: ErrorReply | None) -> None:
        raise NotImplementedError

    def waiting_chain(self) -> frozenset[str]:
        """This instance plus every instance waiting on the batch it is running."""
        chain = {self.name}
        for ctx in self._running:
            chain |= ctx.chain
        return frozenset(chain)

    def pack_tensor(self, t: Tensor) -> PackedTensor:
        return packing.pack_tensor(t, self._pool)

    async def execute(self, batch: list[RequestContext]) -> None:
        """Run ``batch``. At most one more batch may be staged while one runs (the scheduler
        stages only requests no other instance waits on); the worker runs them in order."""
        if not self.healthy:
            # Handed over only when no instance of the model is healthy. A restart under way
            # (bounded by the start and init timeouts) is waited for; while the restarts back
            # off, the requests fail at once with the reason: initialize never ran on this
            # process, so execute must not either.
            attempt = self._sup.attempting
            if attempt is not None:
                await asyncio.shield(attempt)
            if not self.healthy:
                err = InternalError(self.not_ready_reason)
                for ctx in batch:
                    ctx.send(error_response(ctx, err))
                return
        staged = self._inflight > 0
        if staged:
            if self._staged is not None:
                raise InternalError(f"instance '{self.name}' already has a staged batch")
            self._staged = batch
            for ctx in batch:
                ctx.t_start = 0  # still queued (in the worker): starts when the running one ends
        else:
            self._running = batch
        self._inflight += 1
        items = []
        keys = []
        for ctx in batch:
            key = next(self._keys)
            keys.append(key)
            self._live[key] = ctx
            ctx.on_cancel = lambda k=key: self._send_cancel(k)
            if ctx.cancelled:  # e.g. a rescheduled request: the model must see it
                self._send_cancel(key)
            items.append(self._pack_request(key, ctx))
        try:
            done = await self._execute_call(items, keys)
        except ModelyardError as e:
            self._fail(keys, e)
            return
        finally:
            self._inflight -= 1
            self._finished(batch)
            if self._alive:  # the worker lived through a batch: its next crash is news
                self._sup.served = True
        if done.responses is None:
            # `async def execute`: the coroutine runs on in the worker and this instance
            # takes the next batch; results come later in an AsyncExecuted frame (which may
            # have been read already, in the same chunk as the Executed frame).
            early = self._early_results.pop(done.call_id, None)
            self._async_batches[done.call_id] = keys
            if early is not None:
                self._on_async_results(early)
        # (otherwise on_executed has delivered the responses)

    def on_executed(self, msg: Executed) -> None:
        """A batch's answer: its responses go out right here, so the handlers waiting for
        them resume before the task that sent the batch (and the scheduler's bookkeeping
        after it) does."""
        keys = self._batch_keys.pop(msg.call_id, None)
        staged = self._staged
        if staged is not None:
            # The worker runs batches in order: the staged one starts as this one ends, which
            # may be before the task that sent this one resumes (both frames read at once).
            _started(staged, time.monotonic_ns())
        if keys is not None and msg.error is None and msg.responses is not None:
            self._deliver(keys, msg.responses, msg.rescheduled, msg.direct)
        self._answer(msg.call_id, msg, msg.error)

    def _finished(self, batch: list[RequestContext]) -> None:
        """``batch`` left the worker: a staged batch is the running one now."""
        if self._staged is batch:  # failed before the one ahead of it finished
            self._staged = None
            return
        self._running = []
        if self._staged is not None:
            self._running, self._staged = self._staged, None
            _started(self._running, time.monotonic_ns())

    def live_requests(self, keys: Any) -> list[RequestContext]:
        """The requests still in flight among ``keys`` (a BLS call's parent batch)."""
        live = self._live
        return [ctx for ctx in (live.get(k) for k in keys) if ctx is not None]

    def _deliver(
        self,
        keys: list[int],
        results: list[Response | None],
        again: tuple[int, ...],
        direct: tuple[int, ...] = (),
    ) -> None:
        """One response (or none yet) per request; ``again``: the requests (indices) the
        model rescheduled; ``direct``: those whose response the worker sent to their BLS
        caller itself (only the outcome is here)."""
        for i, (key, result) in enumerate(zip(keys, results, strict=False)):
            ctx = self._live.get(key)
            if ctx is None:
                continue
            if result is not None:
                resp = self._unpack_response(ctx, result, final=True)
                resp.delivered = i in direct
                ctx.send(resp)
            # A request not answered yet stays live: its response sender may still answer.
            if ctx.done:
                self._live.pop(key, None)
        for i in again:
            ctx = self._live.pop(keys[i], None)
            if ctx is not None:
                reschedule(ctx)

    def _send_cancel(self, key: int) -> None:
        if key in self._live and self._proto is not None:
            with contextlib.suppress(ConnectionError):
                self._proto.send(Cancel([key]))

    def _fail(self, keys: list[int], err: ModelyardError) -> None:
        for key in keys:
            ctx = self._live.pop(key, None)
            if ctx is not None:
                ctx.send(error_response(ctx, err))

    def _on_async_results(self, msg: AsyncExecuted) -> None:
        keys = self._async_batches.pop(msg.call_id, None)
        if keys is None:
            if msg.call_id in self._calls:  # execute's Executed is not consumed yet
                self._early_results[msg.call_id] = msg
            return
        if msg.error is not None:
            self._fail(keys, ModelyardError(*msg.error))
        else:
            self._deliver(keys, msg.responses or [], msg.rescheduled, msg.direct)

    def _pack_request(self, key: int, ctx: RequestContext) -> RequestItem:
        return packing.pack_request(
            key, ctx, self._pool, self._region_tokens, self._may_write_outputs()
        )

    def _may_write_outputs(self) -> bool:
        # The spec's config may change after __init__ (a worker spawned for auto-complete).
        config, ok = self._direct_outputs
        if config is not self.spec.config_json:
            ok = packing.direct_outputs(self.spec.config_json)
            self._direct_outputs = (self.spec.config_json, ok)
        return ok

    def _unpack_response(
        self, ctx: RequestContext, payload: Response, final: bool
    ) -> InferResponse:
        return packing.unpack_response(
            ctx, payload, final, str(self.spec.version), self.mapper, self.release_export
        )

    def _on_send(self, key: int, payload: Response | None, flags: int) -> None:
        ctx = self._live.get(key)
        if ctx is None:
            return
        final = bool(flags & 1)
        if payload is None:
            if final:
                self._live.pop(key, None)
                ctx.send(
                    InferResponse(
                        ctx.request.model_name,
                        str(self.spec.version),
                        ctx.request.id,
                        final=True,
                        flag_only=True,
                    )
                )
            return
        resp = self._unpack_response(ctx, payload, final)
        if final:
            self._live.pop(key, None)
        ctx.send(resp)

    def _on_span(self, msg: SpanEnd) -> None:
        """A span the model opened in a traced request: into the request's trace."""
        ctx = self._live.get(msg.key)
        if ctx is not None and ctx.trace is not None:
            ctx.trace.model_span(
                msg.span_id, msg.parent_id, msg.name, msg.start_ns, msg.end_ns, msg.attributes
            )

    async def _execute_call(self, items: list[RequestItem], keys: list[int]) -> Executed:
        # No timer on the hot path: a worker that dies fails this call through _on_lost, and
        # a hung model is bounded by the caller's timeout (client deadline, BLS timeout).
        assert self._loop is not None
        call_id = next(self._call_ids)
        fut: asyncio.Future[Executed] = self._loop.create_future()
        self._calls[call_id] = fut
        self._batch_keys[call_id] = keys
        try:
            self.send(Execute(call_id, items))
            return await fut
        finally:
            self._calls.pop(call_id, None)
            self._batch_keys.pop(call_id, None)


def error_response(ctx: RequestContext, err: ModelyardError) -> InferResponse:
    r = ctx.request
    return InferResponse(r.model_name, r.model_version, r.id, error=err, final=True)


def _started(batch: list[RequestContext], now: int) -> None:
    """A staged batch began running in the worker (its requests' compute starts now)."""
    for ctx in batch:
        if not ctx.t_start and not ctx.done:
            ctx.t_start = now
