"""In-process Python instances: the model runs inside the server process.

Sync ``execute`` runs on one dedicated thread per instance (so ``breakpoint()`` and debuggers
work, and the event loop keeps serving); ``async def execute`` runs on the server's event
loop, several requests in flight at once, unless its code names a call that blocks until the
server answers (a blocking ``exec()``, model control, a decoupled call whose stream a plain
``for`` reads): then on an event loop of the instance's own (``model_loop.py``), where it
may wait as in Triton's stub. BLS hands numpy arrays to the core with no copy
and no IPC. Each model's modules are imported under a private package name, and sibling
modules it imports are taken out of ``sys.modules`` afterwards, so two models with their
own ``helper.py`` each keep theirs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import traceback
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import triton_python_backend_utils as pb
from modelyard.backends.instance import Instance
from modelyard.backends.python.protocol import release_flags
from modelyard.backends.python.protocol.error_text import batch_error, format_exception
from modelyard.backends.python.protocol.model_calls import (
    Failure,
    check_returned,
    gpu_inputs,
    initialize_args,
    model_class,
    no_execute_text,
    output_names,
    release_rescheduled,
    response_parts,
)
from modelyard.backends.python.server.embedded import embed
from modelyard.backends.python.server.inprocess_runtime import (
    CURRENT,
    PARENTS,
    TLS,
    InProcessRuntime,
    core_tensor,
    first_traced,
    on_loop,
    pb_tensor,
)
from modelyard.backends.python.server.isolation import import_isolated, scan
from modelyard.backends.python.server.model_loop import ModelLoop
from modelyard.backends.python.server.readiness import UserReadiness, check_result
from modelyard.backends.python.server.reschedule import reschedule
from modelyard.errors import InternalError, ModelyardError
from modelyard.serving.context import RequestContext
from modelyard.serving.host import ModelHost
from modelyard.types import AS_PRODUCED, HOST_OUTPUTS, InferResponse, Tensor, datatype_of, host_data

if TYPE_CHECKING:
    from modelyard.backends.python.server.process_instance import WorkerSpec
    from modelyard.tracing.trace import RequestTrace

log = logging.getLogger("modelyard")

# An async_exec() on the server's event loop runs the target's sync execute right there (no
# thread hop) only while its executions stay this short on average: longer ones would hold
# up every frontend, and run on the instance's thread instead.
INLINE_MAX_S = 0.001
_EWMA = 0.25  # weight of the newest execution in the running average
# An execution this long shows the model can wait (on I/O, a lock): it never runs inline again
# (inline, the wait would hold up every frontend).
INLINE_NEVER_S = 0.01


class InProcessInstance(Instance):
    def __init__(self, spec: WorkerSpec, host: ModelHost):
        self.spec = spec
        self.name = spec.key
        self.host = host
        self.model: Any = None
        self._has_is_ready = False
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"modelyard-{spec.instance_name}")
        self.runtime: InProcessRuntime | None = None
        self._outputs: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        # Where an async execute that may block on the server runs (else: the server's loop).
        self._model_loop: ModelLoop | None = None
        self.sync_execute = False
        self._no_execute = ""  # Triton's error for every request when the model has no execute
        self.iterative = release_flags.is_iterative(spec.config_json)
        self.gpu_inputs = gpu_inputs(json.loads(spec.config_json))  # (checked at load)
        self._user_ready = UserReadiness(self.name, self._probe_is_ready)
        self._ready_thread: ThreadPoolExecutor | None = None  # runs a sync is_ready()
        # Whether execute may run inline on the event loop (see inline_ok): the model's code
        # names no call that waits for the server, it has made none, and it runs short.
        self._leaf = False
        self.calls_out = False  # set by the runtime on the model's first BLS or control call
        self._waits = False  # an execution took INLINE_NEVER_S or longer
        # The sync execute returned a coroutine (Triton awaits it): it never runs inline,
        # where nothing could await it.
        self._returns_coroutine = False
        self._run_s = INLINE_MAX_S  # running average of execute's duration
        self._runs = 0
        self.phase = "starting"  # initialize -> ready -> finalize; BLS only when ready

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        rt = self.runtime

        def call() -> Any:
            with pb.runtime_context(rt):
                return fn(*args)

        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        spec = self.spec
        self.runtime = InProcessRuntime(self.host, loop, os.path.dirname(spec.model_file), self)
        if pb.get_runtime() is None:
            # Threads a model starts see no context runtime; give them one that reaches the host.
            pb.set_runtime(InProcessRuntime(self.host, loop))
        self._outputs = output_names(spec.config_json)
        # (the folder's digest: with --model-namespacing two models may share name and version)
        folder = zlib.crc32(os.path.dirname(os.path.dirname(spec.model_file)).encode())
        package = f"_modelyard_inprocess.{spec.model_name}_v{spec.version}_{spec.key}"
        package += f"_{folder:08x}"
        self.runtime.package = package
        embed()  # sys.argv [''] and whole-line stdout/stderr, as Triton's stub gives a model
        files: list[str] = []
        try:
            module = await self._in_thread(import_isolated, spec.model_file, package, files)
            calls = scan(files)
            self._leaf = not calls.waits
            self.model = await self._in_thread(model_class(module, spec.model_file))
            self._has_is_ready = hasattr(self.model, "is_ready")
            if not hasattr(self.model, "execute"):
                self._no_execute = no_execute_text(spec.model_file)
            self.sync_execute = not asyncio.iscoroutinefunction(
                getattr(self.model, "execute", None)
            )
            if not self.sync_execute and calls.blocks:
                self._model_loop = ModelLoop(f"modelyard-{spec.instance_name}-loop")
            if hasattr(self.model, "initialize"):
                self.phase = "initialize"
                result = await self._in_thread(self.model.initialize, initialize_args(spec))
                if asyncio.iscoroutine(result):
                    await self._await_model(result)
            self.phase = "ready"
        except ModelyardError:
            raise
        except Failure as f:
            raise ModelyardError(f.message, f.code) from None
        except BaseException as e:
            raise InternalError(format_exception(e)) from None

    async def check_ready(self) -> str | None:
        if self.model is None or not self._has_is_ready:
            return None
        return await self._user_ready.check()

    async def _probe_is_ready(self) -> bool:
        rt = self.runtime

        def call() -> Any:
            with pb.runtime_context(rt):
                return self.model.is_ready()

        try:
            if asyncio.iscoroutinefunction(self.model.is_ready):
                with pb.runtime_context(rt):
                    result = await self.model.is_ready()
            else:  # on a thread of its own, as Triton's stub: execute may be running
                if self._ready_thread is None:
                    self._ready_thread = ThreadPoolExecutor(1, f"modelyard-{self.name}-is-ready")
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self._ready_thread, call)
                if asyncio.iscoroutine(result):
                    result = await result
        except Exception as e:  # the model's code may raise anything
            raise ModelyardError(format_exception(e)) from None
        return check_result(result)

    async def stop(self) -> None:
        self.phase = "finalize"
        if self._ready_thread is not None:
            self._ready_thread.shutdown(wait=False)
        if self.model is not None and hasattr(self.model, "finalize"):
            try:
                result = await self._in_thread(self.model.finalize)
                if asyncio.iscoroutine(result):
                    await self._await_model(result)
            except BaseException as e:
                log.info("finalize of %s raised: %s", self.name, format_exception(e))
        self._thread.shutdown(wait=False)
        if self._model_loop is not None:
            self._model_loop.close()

    async def _await_model(self, coro: Any) -> Any:
        """Await a coroutine of the model's where its async execute runs (its own loop), or
        on the server's loop when its execute is sync."""
        if self._model_loop is None:
            return await self._in_runtime(coro)
        return await self._model_loop.run(self._in_runtime(coro))

    async def _in_runtime(self, coro: Any) -> Any:
        with pb.runtime_context(self.runtime):
            return await coro

    # -- execute ------------------------------------------------------------------------

    @property
    def inline_ok(self) -> bool:
        """A sync execute that may run inline on the event loop (an async_exec() there, or
        any request where the host's loop serves this model alone: ``execute_on_loop``): it
        cannot block on the loop (its code names no BLS or model-control call, and it made
        none) and its executions have been short: on average, and never long."""
        return (
            self.sync_execute
            and self._leaf
            and not self.calls_out
            and not self._waits
            and not self._returns_coroutine
            and self._runs > 0
            and self._run_s < INLINE_MAX_S
        )

    def _timed(self, seconds: float) -> None:
        if seconds >= INLINE_NEVER_S:
            self._waits = True
        self._runs += 1
        self._run_s = seconds if self._runs == 1 else self._run_s + _EWMA * (seconds - self._run_s)

    def _request(self, ctx: RequestContext, direct: bool = False) -> Any:
        r = ctx.request
        assert self.runtime is not None
        loop = self.runtime.loop
        names = ctx.output_names if ctx.output_names is not None else self._outputs

        def deliver(
            resp: Any, flags: int, _ctx: RequestContext = ctx, _names: list[str] = names
        ) -> None:
            core_resp = self._core_response(_ctx, resp, bool(flags & 1), _names)
            if direct or on_loop(loop):
                _ctx.send(core_resp)
            else:
                loop.call_soon_threadsafe(_ctx.send, core_resp)

        sender = pb.InferenceResponseSender(  # type: ignore[attr-defined]
            deliver, self.spec.decoupled, lambda: ctx.cancelled
        )
        if self.gpu_inputs:  # (FORCE_CPU_ONLY_INPUT_TENSORS "no")
            inputs = [pb_tensor(t, AS_PRODUCED) for t in r.inputs]
        else:
            inputs = [
                pb.Tensor._from_server(t.name, host_data(t) if t.data is None else t.data)
                for t in r.inputs
            ]
        return pb.InferenceRequest._from_server(
            request_id=r.id,
            correlation_id=r.correlation_id,
            model_name=self.spec.model_name,
            model_version=self.spec.version,
            flags=r.flags,
            inputs=inputs,
            requested_output_names=names,
            parameters=r.parameters or None,
            timeout=r.timeout_us,
            response_sender=sender,
            trace_context=None if ctx.trace is None else ctx.trace.context(),
        )

    def _core_response(
        self, ctx: RequestContext, resp: Any, final: bool, names: list[str]
    ) -> InferResponse:
        r = ctx.request
        out = InferResponse(r.model_name, str(self.spec.version), r.id, final=final)
        if resp is None:
            out.flag_only = True
            return out
        parts = response_parts(resp, names)
        if parts.error is not None:
            out.error = ModelyardError(*parts.error)
            out.model_error = True
            return out
        keep_device = r.output_device != HOST_OUTPUTS  # (a BLS caller's request)
        for t in parts.outputs:
            gpu = t._gpu
            if gpu is not None and keep_device:
                out.outputs.append(core_tensor(t))
                continue
            arr = t._array if gpu is None else t._host_array()
            out.outputs.append(Tensor(t.name(), datatype_of(arr.dtype), tuple(arr.shape), arr))
        if parts.parameters:
            out.parameters = dict(parts.parameters)
        return out

    def _collect(self, batch: list[RequestContext], requests: list[Any], returned: Any) -> None:
        """Check what execute returned (model_calls.py), send each response, and hand the
        requests the model rescheduled back to the scheduler (iterative sequences)."""
        returned = check_returned(pb, self.spec.decoupled, self.name, requests, returned)
        if returned is not None:
            for ctx, req, resp in zip(batch, requests, returned, strict=True):
                if resp is None:
                    continue
                try:
                    req._response_sender._update_state(
                        resp, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                    )
                except pb.TritonModelException as e:
                    log.error("%s", e)
                    continue
                ctx.send(self._core_response(ctx, resp, True, req._requested_output_names))
        for i in release_rescheduled(pb, self.iterative, requests):
            reschedule(batch[i])

    def _fail(self, batch: list[RequestContext], detail: str) -> None:
        self._fail_with(batch, InternalError(batch_error(self.name, detail)))

    @staticmethod
    def _fail_with(batch: list[RequestContext], err: ModelyardError) -> None:
        for ctx in batch:
            r = ctx.request
            ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=err))

    async def execute(self, batch: list[RequestContext]) -> None:
        if self._no_execute:
            self._fail_with(batch, InternalError(self._no_execute))
            return
        if self.host.execute_on_loop and self.inline_ok:
            self.run_direct(batch)  # (it builds the model's requests itself)
            return
        requests = [self._request(ctx) for ctx in batch]
        rt = self.runtime

        chain = frozenset({self.name}).union(*(ctx.chain for ctx in batch))

        parents = tuple(batch)
        traced = first_traced(batch)

        def run() -> Any:
            TLS.chain, TLS.instance = chain, self.name
            token = PARENTS.set(parents)
            t0 = time.perf_counter()
            try:
                with pb.runtime_context(rt):
                    if traced is not None:
                        return self._traced_execute(traced, batch, requests)
                    return self.model.execute(requests)
            finally:
                self._timed(time.perf_counter() - t0)
                PARENTS.reset(token)
                TLS.chain, TLS.instance = frozenset(), ""

        if not self.sync_execute:
            coro = self._run_async(batch, requests, parents, traced)
            if self.iterative:  # released (maybe rescheduled) when execute returns
                await coro
                return
            # Real concurrency: the instance takes the next batch while this one awaits.
            task = asyncio.get_running_loop().create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        try:
            returned = await asyncio.get_running_loop().run_in_executor(self._thread, run)
            if asyncio.iscoroutine(returned):
                self._returns_coroutine = True
                await self._finish(batch, requests, returned)
                return
            self._collect(batch, requests, returned)
        except Failure as e:
            self._fail(batch, e.message)
        except BaseException as e:
            self._fail(batch, format_exception(e))

    def run_direct(self, batch: list[RequestContext]) -> None:
        """Run a sync execute on the calling thread (a direct BLS call; see InProcessRuntime)."""
        if self._no_execute:
            self._fail_with(batch, InternalError(self._no_execute))
            return
        requests = [self._request(ctx, direct=True) for ctx in batch]
        outer: frozenset[str] = getattr(TLS, "chain", frozenset())
        outer_instance = getattr(TLS, "instance", "")
        TLS.chain = outer.union({self.name}, *(ctx.chain for ctx in batch))
        TLS.instance = self.name
        token = PARENTS.set(tuple(batch))
        traced = first_traced(batch)
        rt = self.runtime
        assert rt is not None
        t0 = time.perf_counter()
        try:
            with pb.runtime_context(rt):
                if traced is not None:
                    returned = self._traced_execute(traced, batch, requests)
                else:
                    returned = self.model.execute(requests)
            self._timed(time.perf_counter() - t0)
            self._collect(batch, requests, returned)
        except Failure as e:
            self._fail(batch, e.message)
        except BaseException as e:
            self._fail(batch, format_exception(e))
        finally:
            PARENTS.reset(token)
            TLS.chain, TLS.instance = outer, outer_instance

    # -- tracing (only for batches with a traced request) ------------------------------------

    def _enter_trace(self, traced: RequestTrace) -> tuple[Any, object | None]:
        """The model's spans, BLS calls and plain OpenTelemetry spans hang under the traced
        request's compute span while its execute runs."""
        token = CURRENT.set((traced, traced.parent_span))
        otel = self.host.tracer.activate(traced.trace, traced.parent_span)
        return token, otel

    def _leave_trace(self, entered: tuple[Any, object | None]) -> None:
        token, otel = entered
        self.host.tracer.deactivate(otel)
        CURRENT.reset(token)

    def _traced_execute(
        self, traced: RequestTrace, batch: list[RequestContext], requests: list[Any]
    ) -> Any:
        entered = self._enter_trace(traced)
        try:
            now = time.monotonic_ns()
            for ctx in batch:
                if ctx.trace is not None:
                    ctx.trace.t_input_end = now
            return self.model.execute(requests)
        finally:
            now = time.monotonic_ns()
            for ctx in batch:
                if ctx.trace is not None:
                    ctx.trace.t_output_start = now
            self._leave_trace(entered)

    async def _run_async(
        self,
        batch: list[RequestContext],
        requests: list[Any],
        parents: tuple[RequestContext, ...],
        traced: RequestTrace | None,
    ) -> None:
        execute = self._execute_async(requests, parents, traced)
        if self._model_loop is not None:
            execute = self._model_loop.run(execute)
        await self._finish(batch, requests, execute)

    async def _execute_async(
        self, requests: list[Any], parents: tuple[RequestContext, ...], traced: RequestTrace | None
    ) -> Any:
        """The model's execute (on its own loop, or the server's), with the batch as the
        parent of its BLS calls and, traced, its spans under the request's."""
        token = PARENTS.set(parents)
        span = self._enter_trace(traced) if traced is not None else None
        try:
            with pb.runtime_context(self.runtime):
                return await self.model.execute(requests)
        finally:
            if span is not None:
                self._leave_trace(span)
            PARENTS.reset(token)

    async def _finish(self, batch: list[RequestContext], requests: list[Any], coro: Any) -> None:
        try:
            returned = await coro
            self._collect(batch, requests, returned)
        except Failure as e:
            self._fail(batch, e.message)
        except BaseException as e:
            if self.spec.decoupled:
                log.error("%s", "".join(traceback.format_exception(e)))
            self._fail(batch, format_exception(e))
