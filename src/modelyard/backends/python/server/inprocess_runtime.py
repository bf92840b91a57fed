"""pb_utils' runtime for in-process models: BLS through the host (a sync call to an idle
in-process model runs directly on the caller's thread, see ModelHost.run_direct), logging and
model control.

The thread-local chain and the parents context variable tell a BLS call which instances wait
on it and which requests cancel it (see bls.py); ``inprocess.py`` sets them around each
execute.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
import queue as queue_mod
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import triton_python_backend_utils as pb
from modelyard.backends.python.protocol.error_text import control_error_text
from modelyard.backends.python.protocol.model_calls import (
    ResponseStream,
    bls_call,
    check_bls,
    error_response,
    forked_response,
    forked_text,
    placed,
    reply_wait_s,
    resolved,
    target_device,
    timeout_response,
)
from modelyard.backends.python.server.bls import link_to_parents, start_bls
from modelyard.errors import InternalError, ModelyardError
from modelyard.serving.context import RequestContext
from modelyard.serving.host import ModelHost, ModelLogRecord
from modelyard.tracing.trace import RequestTrace, Span
from modelyard.types import (
    HOST_OUTPUTS,
    InferRequest,
    InferResponse,
    RequestedOutput,
    Tensor,
    datatype_of,
    host_data,
)
from triton_python_backend_utils._memory import DeviceMemory
from triton_python_backend_utils._types import TRITON_CODE_TO_NAME

if TYPE_CHECKING:
    from modelyard.backends.python.server.inprocess import InProcessInstance

log = logging.getLogger("modelyard")

# The chain of instances blocked on the batch this thread is running (see bls.py).
TLS = threading.local()
# The batch whose execute runs in this context (thread or task): BLS calls made from it are
# cancelled with it (see bls.py).
PARENTS: contextvars.ContextVar[tuple[RequestContext, ...]] = contextvars.ContextVar(
    "modelyard_inprocess_parents", default=()
)
# In a traced request: its trace and the span the model's own spans and BLS calls hang under
# (the compute span, or the innermost span the model opened).
CURRENT: contextvars.ContextVar[tuple[RequestTrace, int] | None] = contextvars.ContextVar(
    "modelyard_inprocess_span", default=None
)


class InProcessRuntime:
    """pb_utils' runtime for models running in the server process."""

    def __init__(
        self,
        host: ModelHost,
        loop: asyncio.AbstractEventLoop,
        model_dir: str = "",
        instance: InProcessInstance | None = None,
    ):
        self.host = host
        self.loop = loop
        self._model_dir = model_dir
        self.instance = instance
        self.package = ""  # the model's private module package (see _SiblingFinder)
        self.search_path = [model_dir, os.path.dirname(model_dir)] if model_dir else []
        self._tasks: set[asyncio.Task[None]] = set()
        self.model_name = instance.spec.model_name if instance is not None else ""
        self._pid = os.getpid()  # the server process, whose event loop runs the calls

    # BLS ---------------------------------------------------------------------------------

    def _core_request(self, request: Any) -> InferRequest:
        call = bls_call(request)
        current = CURRENT.get()
        return InferRequest(
            model_name=call.model_name,
            inputs=[core_tensor(t) for t in call.inputs],
            model_version=call.version,
            id=call.request_id,
            outputs=[RequestedOutput(n) for n in call.outputs] or None,
            parameters=call.parameters,
            correlation_id=call.correlation_id,
            flags=call.flags,
            timeout_us=call.timeout_us,
            trace=None if current is None else current[0].link(current[1]),
            output_device=call.placement,
        )

    @staticmethod
    def pb_response(resp: InferResponse, placement: int = HOST_OUTPUTS) -> Any:
        """The response a BLS caller gets, its outputs placed as it asked (``placement``: the
        request's ``output_device``)."""
        if resp.error is not None:
            return error_response(pb, resp.error.message, resp.error.code)
        if resp.flag_only:
            return pb.InferenceResponse._from_server([], flag_only=True)
        tensors = [pb_tensor(t, placement) for t in resp.outputs]
        return pb.InferenceResponse._from_server(tensors, None, resp.parameters or None)

    @property
    def _chain(self) -> frozenset[str]:
        chain: frozenset[str] = getattr(TLS, "chain", frozenset())
        return chain  # empty on threads that are not running a sync batch: they hold nothing

    def _direct(self, request: InferRequest, accept: Callable[[Any], bool] | None = None) -> Any:
        """A sync BLS call to an idle in-process instance with a sync execute runs right here,
        on the caller's thread: no event-loop hop, no thread switch, no copy. Returns None
        when the call must take the ordinary path (busy target, other backend, errors)."""
        t0 = time.monotonic_ns()
        graph = self.host.tracer.call_graph
        try:
            box = self.host.run_direct(request, self._chain, accept or _runs_sync, _run_direct)
        except ModelyardError as e:  # the request does not fit the model
            graph.record(self.model_name, request.model_name, time.monotonic_ns() - t0, True)
            text = f"Model {request.model_name} - Error when running inference: {e.message}"
            error = ModelyardError(text, e.code)
            return self.pb_response(InferResponse(request.model_name, "", error=error))
        if box is None:
            return None
        failed = not box or box[0].error is not None
        graph.record(self.model_name, request.model_name, time.monotonic_ns() - t0, failed)
        if not box:
            error = InternalError("model returned no response")
            return self.pb_response(InferResponse(request.model_name, "", error=error))
        return self.pb_response(box[0], request.output_device)

    def _start(
        self,
        request: InferRequest,
        decoupled: bool,
        sink: Any,
        chain: frozenset[str],
        caller: str = "",
        parents: tuple[RequestContext, ...] = (),
    ) -> Callable[[], None]:
        """On the loop thread: run the BLS request; ``sink((pb_response, final))`` per reply.
        Returns the function that cancels it (on the loop thread)."""

        def emit(resp: InferResponse, final: bool) -> None:
            sink((self.pb_response(resp, request.output_device), final))

        return start_bls(
            self.host, request, decoupled, chain, emit, caller, parents, self.model_name
        )

    def _calling(self) -> None:
        # The model makes calls that wait for the server: never run it inline on the loop.
        if self.instance is not None:
            self.instance.calls_out = True

    @staticmethod
    def _reply(replies: Any, core_request: InferRequest) -> tuple[Any, bool]:
        """The next reply of a call, waiting within its bound; a timeout error after it."""
        try:
            item: tuple[Any, bool] = replies.get(timeout=reply_wait_s(core_request.timeout_us))
        except queue_mod.Empty:
            return timeout_response(pb), True
        return item

    def _check_bls(self) -> None:
        # Not from initialize or finalize (model_calls.py); threads a model starts have a
        # runtime without an instance.
        if self.instance is not None:
            check_bls(pb, self.instance.phase)

    def exec(self, request: Any, decoupled: bool) -> Any:
        self._check_bls()
        self._calling()
        forked = forked_text(self._pid)
        if forked:
            return forked_response(pb, forked, decoupled)
        if on_loop(self.loop):
            raise pb.TritonModelException(
                "exec() would block the server's event loop: in `async def execute` use "
                "`await request.async_exec()`"
            )
        core_request = self._core_request(request)
        if not decoupled and not core_request.timeout_us:
            direct = self._direct(core_request)
            if direct is not None:
                return direct
        replies: queue_mod.SimpleQueue[tuple[Any, bool]] = queue_mod.SimpleQueue()
        caller = getattr(TLS, "instance", "")
        cancels: list[Callable[[], None]] = []
        args = (core_request, decoupled, replies.put, self._chain, caller, PARENTS.get())
        self.loop.call_soon_threadsafe(lambda: cancels.append(self._start(*args)))
        if not decoupled:
            response, _final = self._reply(replies, core_request)
            return response

        # (a cancel is queued on the loop after the start, so the start has run by then)
        def cancel() -> None:
            self.loop.call_soon_threadsafe(lambda: cancels[0]())

        return ResponseStream(lambda: self._reply(replies, core_request), cancel)

    def async_exec(self, request: Any, decoupled: bool) -> Any:
        self._check_bls()
        self._calling()
        forked = forked_text(self._pid)
        if forked:
            return resolved(forked_response(pb, forked, decoupled))
        core_request = self._core_request(request)
        if on_loop(self.loop):
            if not decoupled and not core_request.timeout_us:
                # An idle target whose short sync execute cannot block on the loop runs right
                # here, as a direct exec() does on a model's thread (InProcessInstance.inline_ok).
                direct = self._direct(core_request, _runs_inline)
                if direct is not None:
                    done: asyncio.Future[Any] = self.loop.create_future()
                    done.set_result(direct)
                    return done
            return self._async_exec(core_request, decoupled, PARENTS.get())
        # Called on another thread: the instance's own loop (async execute), or a loop a
        # model runs itself. The direct path is safe here (on a loop, only for a target that
        # runs short: the loop's other requests wait meanwhile); the ordinary one runs on the
        # server's loop.
        if not decoupled and not core_request.timeout_us:
            accept = _runs_inline if asyncio.events._get_running_loop() is not None else None
            direct = self._direct(core_request, accept)
            if direct is not None:
                return resolved(direct)
        return self._async_exec_from_thread(core_request, decoupled, PARENTS.get())

    async def _async_exec_from_thread(
        self, core_request: InferRequest, decoupled: bool, parents: tuple[RequestContext, ...]
    ) -> Any:
        started = asyncio.run_coroutine_threadsafe(
            self._async_exec(core_request, decoupled, parents, streams=True), self.loop
        )
        return await asyncio.wrap_future(started)

    async def _async_exec(
        self,
        core_request: InferRequest,
        decoupled: bool,
        parents: tuple[RequestContext, ...],
        streams: bool = False,
    ) -> Any:
        """On the server's loop. A decoupled call's stream comes with its first response, as
        Triton's does, when ``streams`` (it is read on another thread, while this loop
        delivers the rest); else once the call has ended: a plain `for` over it on this very
        loop could never be given later responses."""
        replies: queue_mod.SimpleQueue[tuple[Any, bool]] = queue_mod.SimpleQueue()
        done: asyncio.Future[None] = self.loop.create_future()

        def sink(item: tuple[Any, bool]) -> None:
            replies.put(item)
            _response, final = item
            if (final or streams) and not done.done():
                done.set_result(None)

        cancel = self._start(core_request, decoupled, sink, frozenset(), "", parents)
        await done
        if not decoupled:
            response, _final = replies.get()
            return response
        if streams:

            def cancel_there() -> None:
                self.loop.call_soon_threadsafe(cancel)

            return ResponseStream(lambda: self._reply(replies, core_request), cancel_there)
        return ResponseStream(replies.get, cancel)

    # the rest of pb_utils.Runtime ---------------------------------------------------------

    def open_span(self, name: str, attributes: dict[str, Any]) -> ModelSpan:
        """``modelyard.tracing.span`` for an in-process model."""
        return ModelSpan(self.host, name, attributes)

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        instance = self.instance.name if self.instance is not None else ""
        self.host.log(ModelLogRecord(level, message, filename, line, instance))

    def _control(self, op: str, coro: Any) -> Any:
        self._calling()
        forked = forked_text(self._pid)
        if forked:
            coro.close()
            instance = self.instance.name if self.instance is not None else ""
            raise pb.TritonModelException(control_error_text(op, instance, forked))
        if on_loop(self.loop):
            coro.close()
            raise pb.TritonModelException("model control from the event loop thread would block it")
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=600)
        except ModelyardError as e:
            instance = self.instance.name if self.instance is not None else ""
            raise pb.TritonModelException(control_error_text(op, instance, e.message)) from None

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        self._control("load", self.host.load_model(name, config or None, files or None))

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        self._control("unload", self.host.unload_model(name, unload_dependents))

    def is_model_ready(self, name: str, version: str) -> bool:
        forked = forked_text(self._pid)
        if forked:
            instance = self.instance.name if self.instance is not None else ""
            raise pb.TritonModelException(control_error_text("ready", instance, forked))
        if on_loop(self.loop):  # cannot wait here: liveness only, no model's is_ready()
            return self.host.model_ready(name, version)
        ready = asyncio.run_coroutine_threadsafe(
            self.host.check_model_ready(name, version), self.loop
        )
        return bool(ready.result(timeout=60))

    def model_dir(self) -> str:
        return self._model_dir or os.getcwd()


def _runs_sync(instance: Any) -> bool:
    # Only in-process instances with a sync execute have ``sync_execute`` set.
    return bool(getattr(instance, "sync_execute", False))


def _runs_inline(instance: Any) -> bool:
    # In-process instances whose execute may run on the event loop (see inline_ok).
    return bool(getattr(instance, "inline_ok", False))


def _run_direct(instance: Any, ctx: RequestContext) -> None:
    """Run a directly claimed request on this thread (ModelHost.run_direct's ``run``): the
    batch whose execute makes the call cancels it."""
    parents = PARENTS.get()
    unlink = link_to_parents(parents, ctx) if parents else None
    try:
        cast("InProcessInstance", instance).run_direct([ctx])
    finally:
        if unlink is not None:
            unlink()


def core_tensor(t: Any) -> Tensor:
    """A model's ``pb_utils.Tensor`` as the server's request tensor; a GPU tensor keeps its
    device memory (no copy: another in-process model may take it as it is)."""
    gpu = t._gpu
    if gpu is not None:
        return Tensor(t.name(), TRITON_CODE_TO_NAME[gpu.code], gpu.shape, device=gpu)
    a = t._array  # (a host tensor: its array, BF16 as ml_dtypes' bfloat16)
    return Tensor(t.name(), datatype_of(a.dtype), tuple(a.shape), a)


def pb_tensor(t: Tensor, placement: int) -> Any:
    """A server tensor as the ``pb_utils.Tensor`` a model gets, on the GPU ``placement``
    names (model_calls.target_device), the same device memory where it is there already."""
    device = t.device
    if device is None and placement < 0 and t.data is not None:  # (a host tensor stays one)
        return pb.Tensor._from_server(t.name, t.data)
    target = target_device(placement, None if device is None else device.device_id)
    if target is not None and isinstance(device, DeviceMemory) and device.device_id == target:
        if device.shape != t.shape:  # (a config's reshape)
            device = dataclasses.replace(device, shape=t.shape)
        return pb.Tensor._from_device(t.name, device)
    return placed(pb.Tensor._from_server(t.name, host_data(t)), target)


def on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    # The non-raising lookup: get_running_loop() raises on every model thread, per BLS call.
    return asyncio.events._get_running_loop() is loop


class ModelSpan:
    """A span an in-process model opened; a no-op outside a traced request. Inside it, BLS
    calls and (OpenTelemetry mode) plain OpenTelemetry API spans hang under it."""

    __slots__ = ("_attributes", "_host", "_name", "_otel", "_span", "_token")

    def __init__(self, host: ModelHost, name: str, attributes: dict[str, Any]) -> None:
        self._host = host
        self._name = name
        self._attributes = attributes
        self._token: contextvars.Token[tuple[RequestTrace, int] | None] | None = None
        self._span: Span | None = None
        self._otel: object | None = None

    def __enter__(self) -> None:
        current = CURRENT.get()
        if current is None:
            return
        trace, parent = current
        span = self._span = Span(self._name, trace.model, parent, time.monotonic_ns(), 0, False)
        self._token = CURRENT.set((trace, span.span_id))
        self._otel = self._host.tracer.activate(trace.trace, span.span_id)

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        span, token = self._span, self._token
        if span is None or token is None:
            return
        self._host.tracer.deactivate(self._otel)
        trace, _ = CURRENT.get() or (None, 0)
        CURRENT.reset(token)
        if error is not None:
            self._attributes = {**self._attributes, "exception": f"{type(error).__name__}: {error}"}
        if trace is not None:
            trace.model_span(
                span.span_id,
                span.parent_id or 0,
                span.name,
                span.start_ns,
                time.monotonic_ns(),
                self._attributes,
            )


def first_traced(batch: list[RequestContext]) -> RequestTrace | None:
    for ctx in batch:
        if ctx.trace is not None:
            trace: RequestTrace = ctx.trace
            return trace
    return None
