"""Serving a model's BLS and model-control calls through the host (serving/host.py), in both
execution modes, like any client request.

Each call carries the chain of instances blocked waiting on it (the caller, and whoever waits
on the caller's current batch). The scheduler uses it to answer a call that could never run
(every instance of the target is in the chain) with an error instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from modelyard import logs
from modelyard.backends.python.protocol import framing
from modelyard.backends.python.protocol.messages import (
    Bls,
    BlsResponse,
    ControlResult,
    ErrorCode,
    LoadModel,
    QueryModelReady,
    Response,
    UnloadModel,
)
from modelyard.backends.python.server.packing import unpack_tensor
from modelyard.errors import Cancelled, ModelyardError
from modelyard.serving.context import RequestContext
from modelyard.serving.host import ModelHost, ModelLogRecord
from modelyard.types import AS_PRODUCED, InferRequest, InferResponse, RequestedOutput

if TYPE_CHECKING:
    from modelyard.backends.python.server.process_instance import PythonWorker

log = logging.getLogger("modelyard")

ControlRequest = LoadModel | UnloadModel | QueryModelReady


def start_bls(
    host: ModelHost,
    request: InferRequest,
    decoupled: bool,
    chain: frozenset[str],
    emit: Callable[[InferResponse, bool], None],
    caller: str = "",
    parents: Sequence[RequestContext] = (),
    caller_model: str = "",
) -> Callable[[], None]:
    """Start one BLS request from the event loop thread; every outcome reaches
    ``emit(response, final)``, errors as error responses, exactly one with final=True.
    Never raises. No task per call: responses are relayed as the core delivers them.

    ``parents`` are the requests whose execution made the call: once all of them are
    cancelled, so is the call (see ``link_to_parents``). Returns the function that cancels
    the call (``ResponseIterator.cancel()``; on the loop thread, a no-op once it ended).
    Every call counts in the host's BLS call graph (``caller_model`` -> the callee)."""
    name = request.model_name
    graph = host.tracer.call_graph
    t0 = time.monotonic_ns()

    def deliver(resp: InferResponse, final: bool) -> None:
        if final:
            graph.record(caller_model, name, time.monotonic_ns() - t0, resp.error is not None)
        emit(resp, final)

    done = False
    timer: asyncio.TimerHandle | None = None
    ctx: RequestContext | None = None
    unlink: Callable[[], None] | None = None

    def error(text: str, code: ErrorCode) -> None:
        err = ModelyardError(text, code)
        deliver(InferResponse(name, request.model_version, request.id, error=err), True)

    def on_response(resp: InferResponse) -> None:
        nonlocal done
        if done:
            return
        final = resp.final or not decoupled
        if final:
            done = True
            if timer is not None:
                timer.cancel()
            if unlink is not None:
                unlink()
        deliver(resp, final)

    def on_timeout() -> None:
        nonlocal done
        if not done:
            done = True
            if ctx is not None:
                ctx.cancel()
            error("Request timeout expired", ErrorCode.UNAVAILABLE)

    try:
        if not decoupled and host.is_decoupled(name, request.model_version):
            raise ModelyardError(
                f"Model {name} is using the decoupled. The current BLS request call doesn't "
                "support models using the decoupled transaction policy. Please use "
                "'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled "
                "models.'"
            )
        if parents and all(p.cancelled for p in parents):
            raise Cancelled("Request was cancelled")
        if request.timeout_us > 0:
            # Beyond Triton, the timeout bounds the whole call, not only queueing.
            timer = asyncio.get_running_loop().call_later(request.timeout_us / 1e6, on_timeout)
        ctx = host.submit(request, on_response, chain, caller)
        if parents and not done:
            unlink = link_to_parents(parents, ctx)
    except ModelyardError as e:
        if timer is not None:
            timer.cancel()
        done = True
        # Errors before the target ran carry Triton's BLS prefix; the target's own errors
        # come through its responses unchanged. No such model or version: Triton's stub asks
        # whether it is ready first, and words it so.
        text, code = e.message, e.code
        if code == ErrorCode.NOT_FOUND:
            text = f"Failed for execute the inference request. Model '{name}' is not ready."
            code = ErrorCode.INTERNAL
        error(f"Model {name} - Error when running inference: {text}", code)
    except Exception as e:  # never leave the caller waiting
        log.exception("BLS call to '%s' failed", name)
        done = True
        error(f"BLS request failed: {e}", ErrorCode.INTERNAL)

    def cancel() -> None:
        if not done and ctx is not None:
            ctx.cancel()  # the callee sees is_cancelled(); a queued call ends as CANCELLED

    return cancel


def link_to_parents(parents: Sequence[RequestContext], child: RequestContext) -> Callable[[], None]:
    """Cancel ``child`` (a BLS call) once every one of ``parents`` (the batch whose execution
    made it) is cancelled; returns the function that undoes the link when the call ends."""

    def on_parent_cancel() -> None:
        if parents and all(p.cancelled for p in parents):
            child.cancel()

    # With one parent (a batch of one, the usual case) its cancellation is enough.
    hook = child.cancel if len(parents) == 1 else on_parent_cancel
    tokens = [(p, p.add_cancel_hook(hook)) for p in parents]
    on_parent_cancel()  # a parent cancelled meanwhile (in-process calls link from any thread)

    def unlink() -> None:
        for p, token in tokens:
            p.remove_cancel_hook(token)

    return unlink


class WorkerCalls:
    """The calls one worker process makes of the server: BLS requests (and their
    cancellation), model control and log lines, served through ``host``. Without a host (a
    worker outside a server) BLS and model control are refused and logs go to the log."""

    def __init__(self, worker: PythonWorker, host: ModelHost | None):
        self.worker = worker
        self.host = host
        self._tasks: set[asyncio.Task[None]] = set()
        # Decoupled BLS calls still streaming, by call id: their cancel functions.
        self._streams: dict[int, Callable[[], None]] = {}

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        if self.host is None:
            logs.model_line(level, message, filename, line)
            return
        self.host.log(ModelLogRecord(level, message, filename, line, self.worker.name))

    def bls(self, msg: Bls) -> None:
        worker, host, call_id = self.worker, self.host, msg.call_id
        if host is None:
            error = ("BLS is not available in this server build", ErrorCode.UNSUPPORTED)
            self._reply(call_id, Response([], None, error), True)
            return
        try:
            request = self._request(msg)
        except ModelyardError as e:
            self._reply(call_id, Response([], None, (e.message, e.code)), True)
            return
        chain = worker.waiting_chain() if msg.blocking else frozenset()
        parents = worker.live_requests(msg.parents)
        if msg.span is not None:  # made in a traced request: a child of its span
            traced = worker.live_requests(msg.span[:1])
            if traced and traced[0].trace is not None:
                request.trace = traced[0].trace.link(msg.span[1])
        ended = False

        def emit(resp: InferResponse, final: bool) -> None:
            nonlocal ended
            if final:
                ended = True
                self._streams.pop(call_id, None)
            if not resp.delivered:  # (the worker that ran it answered the caller itself)
                self._reply(call_id, self._payload(resp), final)

        if not msg.decoupled and worker.inbox:
            request.reply_to = (worker.inbox, call_id)
        caller = worker.name if msg.blocking else ""
        cancel = start_bls(
            host, request, msg.decoupled, chain, emit, caller, parents, worker.spec.model_name
        )
        if msg.decoupled and not ended:  # (a call that already ended has nothing to cancel)
            self._streams[call_id] = cancel

    def cancel(self, call_id: int) -> None:
        """The model cancelled its decoupled BLS call ``call_id`` (ResponseIterator.cancel())."""
        cancel = self._streams.get(call_id)
        if cancel is not None:
            cancel()

    def control(self, msg: ControlRequest) -> None:
        task = asyncio.get_running_loop().create_task(self._control(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _control(self, msg: ControlRequest) -> None:
        ready = False
        try:
            if self.host is None:
                raise ModelyardError("model control is not available")
            if type(msg) is LoadModel:
                await self.host.load_model(msg.name, msg.config or None, msg.files or None)
            elif type(msg) is UnloadModel:
                await self.host.unload_model(msg.name, msg.unload_dependents)
            elif type(msg) is QueryModelReady:
                ready = await self.host.check_model_ready(msg.name, msg.version)
        except ModelyardError as e:
            self._send_control(ControlResult(msg.call_id, e.message, False))
            return
        except Exception as e:
            self._send_control(ControlResult(msg.call_id, f"{type(e).__name__}: {e}", False))
            return
        self._send_control(ControlResult(msg.call_id, "", ready))

    def _send_control(self, result: ControlResult) -> None:
        with contextlib.suppress(ModelyardError, ConnectionError):
            self.worker.send(result)

    def _request(self, msg: Bls) -> InferRequest:
        worker = self.worker
        inputs = [unpack_tensor(p, worker.mapper, worker.release_export) for p in msg.inputs]
        outputs = [RequestedOutput(n) for n in msg.outputs] or None
        return InferRequest(
            model_name=msg.model_name,
            inputs=inputs,
            model_version=msg.model_version,
            id=msg.request_id,
            outputs=outputs,
            parameters=dict(msg.parameters),
            correlation_id=msg.correlation_id,
            flags=msg.flags,
            timeout_us=msg.timeout_us,
            # (a GPU output of an in-process callee stays marked with its GPU: the calling
            # worker places it as its preferred_memory asks)
            output_device=AS_PRODUCED,
        )

    def _payload(self, resp: InferResponse) -> Response | None:
        if resp.flag_only:
            return None
        if resp.error is not None:
            return Response([], None, (resp.error.message, resp.error.code))
        tensors = [self.worker.pack_tensor(t) for t in resp.outputs]
        return Response(tensors, resp.parameters, None)

    def _reply(self, call_id: int, payload: Response | None, final: bool) -> None:
        try:
            try:
                self.worker.send(BlsResponse(call_id, payload, final))
            except framing.ENCODE_ERRORS as e:  # e.g. a parameter no UTF-8 can hold
                error = (f"the response cannot be sent to the model: {e}", ErrorCode.INTERNAL)
                self.worker.send(BlsResponse(call_id, Response([], None, error), final))
        except (ModelyardError, ConnectionError):
            pass  # the caller's process is gone
