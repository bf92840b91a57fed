"""Server side of one Python model instance running in its own worker process.

The worker (the worker part, ``worker/stub.py``) is a fresh interpreter started with
``-m modelyard.backends.python.worker``; it talks to us over a Unix socket pair (framing.py) and
moves large tensors through shared memory (tensor_pool.py). One ``execute`` runs at a time per instance, as in Triton.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import modelyard
from modelyard import logs
from modelyard.backends.python.protocol import framing, tensor_pool
from modelyard.backends.python.server import packing
from modelyard.backends.python.server.exec_env import ExecEnv
from modelyard.backends.python.server.reschedule import reschedule
from modelyard.backends.python.server.restart import RestartPolicy
from modelyard.backends.python.server.worker_health import WorkerHealth
from modelyard.errors import Cancelled, ErrorCode, InternalError, ModelyardError
from modelyard.serving import shm_regions
from modelyard.serving.context import RequestContext
from modelyard.types import InferResponse, Tensor

log = logging.getLogger("modelyard")

_worker_ids = itertools.count(1)
WORKER_MODULE = "modelyard.backends.python.worker"  # the worker process's entry (__main__.py)


@dataclass
class WorkerSpec:
    """Everything a worker needs to import and initialize the model."""

    model_name: str
    version: int
    model_dir: str  # <repo>/<model>
    model_file: str  # <repo>/<model>/<version>/model.py
    instance_name: str
    instance_kind: str  # "CPU" / "MODEL"
    device_id: int
    config_json: str  # the complete config, Triton's JSON
    decoupled: bool
    python: str = sys.executable
    shm_enabled: bool = True
    start_timeout: float = 30.0
    init_timeout: float = 600.0
    pipeline: bool = True  # may hold one staged batch behind the running one
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    exec_env: ExecEnv | None = None  # EXECUTION_ENV_PATH: run in that environment


class WorkerHandlers:
    """Hooks a worker calls back into the server for (BLS, logging, model control)."""

    def on_log(self, level: int, message: str, filename: str, line: int, instance: str) -> None:
        logs.model_line(level, message, filename, line)

    def on_bls(self, worker: PythonWorker, call_id: int, payload: Any) -> None:
        worker.send_bls_error(
            call_id, "BLS is not available in this server build", ErrorCode.UNSUPPORTED
        )

    def on_bls_cancel(self, worker: PythonWorker, call_id: int) -> None:
        """The model cancelled its decoupled BLS call ``call_id`` (ResponseIterator.cancel())."""

    def on_control(self, worker: PythonWorker, call_id: int, payload: Any) -> None:
        worker.send(
            framing.CONTROL_RESULT, call_id, False, (ErrorCode.UNSUPPORTED, "model control is not available")
        )


class PythonWorker(WorkerHealth):
    def __init__(self, spec: WorkerSpec, handlers: WorkerHandlers | None = None):
        self.spec = spec
        self.name = spec.instance_name
        self.handlers = handlers or WorkerHandlers()
        self._wid = next(_worker_ids)
        self._prefix = f"modelyard-{os.getpid()}-{self._wid}"
        self._pool = tensor_pool.ShmPool(self._prefix + "-s", enabled=spec.shm_enabled)
        self.mapper = tensor_pool.ShmMapper(self._on_segment_released)
        self._running: list[RequestContext] = []
        # A batch sent while another runs: the worker starts it the moment the running one
        # ends, without waiting for this process to notice and dispatch (see can_stage).
        self._staged: list[RequestContext] | None = None
        self._inflight = 0
        self.can_stage = spec.pipeline
        self._to_free: list[str] = []
        self._flush_scheduled = False
        self._proto: framing.FrameProtocol | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._call_ids = itertools.count(1)
        # request key -> context, while a response may still come
        self._live: dict[int, RequestContext] = {}
        self._async_batches: dict[int, list[int]] = {}  # execute call id -> request keys
        self._early_results: dict[int, tuple[bool, Any]] = {}  # RESPONSES before RESULT
        self._keys = itertools.count(1)
        self._alive = False  # the process is connected
        self._initialized = False  # ... and its model's initialize succeeded
        self._stopping = False
        self._started = False  # initialized once: a worker that dies from now on restarts
        self._init_health()
        # Client shm regions this worker may have mapped (protocol/client_regions.py), by token.
        self._region_tokens: set[int] = set()
        self._direct_outputs = (spec.config_json, packing.direct_outputs(spec.config_json))
        shm_regions.on_region_released(self._region_released)

    # -- lifecycle ---------------------------------------------------------------------------

    async def spawn(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Wait for READY from now on: it may arrive while the connection is still being set
        # up (when the loop was busy meanwhile), and must not be dropped then.
        self._calls[0] = self._loop.create_future()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args = (str(child.fileno()), self._prefix + "-w")
        env = self.spec.exec_env
        if env is not None:
            command, environ = env.command(*args), env.environ
        else:
            command = [self.spec.python, "-m", WORKER_MODULE, *args]
            environ = _worker_env()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *command, pass_fds=(child.fileno(),), env=environ
            )
        finally:
            child.close()
        _, proto = await self._loop.create_unix_connection(
            lambda: framing.FrameProtocol(self._on_message, self._on_lost), sock=parent
        )
        self._proto = proto
        self._alive = True
        await self._call(framing.READY, None, self.spec.start_timeout, "start")

    async def autocomplete(self, config: dict[str, Any]) -> dict[str, Any]:
        """Run the model's auto_complete_config on ``config`` (Triton's dict shape)."""
        result: dict[str, Any] = await self._call(
            framing.AUTOCOMPLETE,
            (self._spec_payload(), config),
            self.spec.init_timeout,
            "auto-complete",
        )
        return result

    async def start(self) -> None:
        if self._proto is None:
            await self.spawn()
        await self._initialize()
        self._started = True

    async def _initialize(self) -> None:
        result = await self._call(framing.INIT, self._spec_payload(), self.spec.init_timeout,
                                  "initialize")  # fmt: skip
        self._has_is_ready = bool(result)
        self._initialized = True

    async def stop(self) -> None:
        """Finalize and end the worker (finalize bounded at 30 s, as for an unload);
        shutdown bounds it by its own deadline from outside, then calls :meth:`abort`."""
        self._stopping = True
        self._sup.cancel()
        if self._alive:
            try:
                await self._call(framing.FINALIZE, None, 30.0, "finalize")
            except ModelyardError as e:
                log.warning("finalize of %s: %s", self.name, e.message)
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        if self._proc is not None:
            try:
                await asyncio.wait_for(self._proc.wait(), 10.0)
            except asyncio.TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        self._alive = False
        self._pool.close()
        tensor_pool.sweep(self._prefix + "-")

    def kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()

    def _spec_payload(self) -> dict[str, Any]:
        s = self.spec
        return {
            "model_name": s.model_name, "version": s.version, "model_dir": s.model_dir,
            "model_file": s.model_file, "instance_name": s.instance_name,
            "instance_kind": s.instance_kind, "device_id": s.device_id,
            "config_json": s.config_json, "decoupled": s.decoupled, "shm": s.shm_enabled,
        }  # fmt: skip

    # -- messages ----------------------------------------------------------------------------

    def send(self, *message: Any) -> None:
        if self._proto is None:
            raise InternalError(f"Stub process '{self.name}' is not healthy.")
        if self._to_free:
            self._proto.send((framing.FREE, self._to_free))
            self._to_free = []
        self._proto.send(message)

    async def _call(self, kind: str, payload: Any, timeout: float | None, what: str) -> Any:
        assert self._loop is not None
        call_id = next(self._call_ids) if kind != framing.READY else 0
        fut: asyncio.Future[Any] = self._calls.get(call_id) or self._loop.create_future()
        self._calls[call_id] = fut
        try:
            if kind != framing.READY:
                self.send(kind, call_id, payload)
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            self.kill()
            raise InternalError(
                f"{what} of model instance '{self.name}' did not finish within {timeout:g} s"
            ) from None
        finally:
            self._calls.pop(call_id, None)

    async def metrics_snapshot(self, timeout: float = 2.0) -> list[dict[str, Any]]:
        """The custom metrics (pb_utils.MetricFamily) this worker's model holds; [] if the
        worker does not answer in time (a scrape must not hang on one worker)."""
        if self._proto is None or self._loop is None:
            return []
        call_id = next(self._call_ids)
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._calls[call_id] = fut
        try:
            self.send(framing.METRICS, call_id)
            result: list[dict[str, Any]] = await asyncio.wait_for(fut, timeout)
            return result
        except (asyncio.TimeoutError, ModelyardError, ConnectionError):
            return []
        finally:
            self._calls.pop(call_id, None)

    async def _execute_call(self, items: list[Any]) -> tuple[int, Any]:
        # No timer on the hot path: a worker that dies fails this call through _on_lost, and
        # a hung model is bounded by the caller's timeout (client deadline, BLS timeout).
        assert self._loop is not None
        call_id = next(self._call_ids)
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._calls[call_id] = fut
        try:
            self.send(framing.EXECUTE, call_id, items)
            return call_id, await fut
        finally:
            self._calls.pop(call_id, None)

    def _on_message(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == framing.SEND:
            self._on_send(msg[1], msg[2], msg[3])
        elif kind == framing.RESULT:
            fut = self._calls.get(msg[1])
            if fut is not None and not fut.done():
                ok, payload = msg[2], msg[3]
                if ok:
                    fut.set_result(payload)
                else:
                    code, text = payload
                    fut.set_exception(ModelyardError(text, code))
        elif kind == framing.READY:
            fut = self._calls.get(0)
            if fut is not None and not fut.done():
                fut.set_result(None)
        elif kind == framing.FREE:
            self._pool.release(msg[1])
        elif kind == framing.RESPONSES:
            self._on_async_results(msg[1], msg[2], msg[3])
        elif kind == framing.LOG:
            self.handlers.on_log(msg[1], msg[2], msg[3], msg[4], self.name)
        elif kind == framing.BLS:
            self.handlers.on_bls(self, msg[1], msg[2])
        elif kind == framing.BLS_CANCEL:
            self.handlers.on_bls_cancel(self, msg[1])
        elif kind == framing.CONTROL:
            self.handlers.on_control(self, msg[1], msg[2])

    def _on_lost(self) -> None:
        was_alive = self._alive
        self._alive = False
        self._proto = None
        err: ModelyardError = InternalError(f"Stub process '{self.name}' is not healthy.")
        if self._stopping:  # cut off by an unload or shutdown, not by a crash
            err = Cancelled(f"Request was cancelled: model instance '{self.name}' stopped")
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(err)
        for ctx in list(self._live.values()):
            ctx.send(_error_response(ctx, err))
        self._live.clear()
        self._async_batches.clear()
        self._early_results.clear()
        self._initialized = False
        if was_alive and not self._stopping and self._loop is not None and self._started:
            self._sup.crashed(self._recovered)

    def _on_segment_released(self, name: str) -> None:
        # Runs wherever the last view died (any thread); FREE rides on the next frame we send
        # or is flushed shortly after.
        self._to_free.append(name)
        loop = self._loop
        if loop is not None and not self._flush_scheduled:
            self._flush_scheduled = True
            try:
                loop.call_soon_threadsafe(self._flush_free)
            except RuntimeError:
                pass  # loop closed: the pool is going away anyway

    def _region_released(self, token: int) -> None:
        # Runs in whichever thread unregistered the region.
        if token in self._region_tokens and self._loop is not None:
            self._region_tokens.discard(token)
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._send_forget, token)

    def _send_forget(self, token: int) -> None:
        if self._proto is not None:
            with contextlib.suppress(ConnectionError):
                self._proto.send((framing.FORGET_REGIONS, [token]))

    def _flush_free(self) -> None:
        self._flush_scheduled = False
        if self._to_free and self._proto is not None:
            names, self._to_free = self._to_free, []
            with contextlib.suppress(ConnectionError):
                self._proto.send((framing.FREE, names))

    # -- execution ---------------------------------------------------------------------------

    def waiting_chain(self) -> frozenset[str]:
        """This instance plus every instance waiting on the batch it is running."""
        chain = {self.name}
        for ctx in self._running:
            chain |= ctx.chain
        return frozenset(chain)

    def pack_tensor(self, t: Tensor) -> tensor_pool.Packed:
        assert t.data is not None
        return tensor_pool.pack(t.name, t.datatype, t.data, self._pool)

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
                    ctx.send(_error_response(ctx, err))
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
            call_id, results = await self._execute_call(items)
        except ModelyardError as e:
            self._fail(keys, e)
            return
        finally:
            self._inflight -= 1
            self._finished(batch)
            if self._alive:  # the worker lived through a batch: its next crash is news
                self._sup.served = True
        if results == framing.ASYNC_ACCEPTED:
            # `async def execute`: the coroutine runs on in the worker and this instance
            # takes the next batch; results come later in a RESPONSES frame (which may
            # have been read already, in the same chunk as the RESULT frame).
            early = self._early_results.pop(call_id, None)
            self._async_batches[call_id] = keys
            if early is not None:
                self._on_async_results(call_id, *early)
            return
        self._deliver(keys, results)

    def _finished(self, batch: list[RequestContext]) -> None:
        """``batch`` left the worker: a staged batch is the running one now."""
        if self._staged is batch:  # failed before the one ahead of it finished
            self._staged = None
            return
        self._running = []
        if self._staged is not None:
            self._running, self._staged = self._staged, None
            now = time.monotonic_ns()
            for ctx in self._running:
                if not ctx.done:
                    ctx.t_start = now

    def live_requests(self, keys: Any) -> list[RequestContext]:
        """The requests still in flight among ``keys`` (a BLS call's parent batch)."""
        live = self._live
        return [ctx for ctx in (live.get(k) for k in keys) if ctx is not None]

    def _deliver(self, keys: list[int], results: Any) -> None:
        again: list[int] = []
        if isinstance(results, tuple):  # the model rescheduled some requests
            results, again = results
        for key, result in zip(keys, results, strict=False):
            ctx = self._live.get(key)
            if ctx is None:
                continue
            if result is not None:
                ctx.send(self._unpack_response(ctx, result, final=True))
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
                self._proto.send((framing.CANCEL, [key]))

    def _fail(self, keys: list[int], err: ModelyardError) -> None:
        for key in keys:
            ctx = self._live.pop(key, None)
            if ctx is not None:
                ctx.send(_error_response(ctx, err))

    def _on_async_results(self, call_id: int, ok: bool, payload: Any) -> None:
        keys = self._async_batches.pop(call_id, None)
        if keys is None:
            if call_id in self._calls:  # execute's RESULT is not consumed yet
                self._early_results[call_id] = (ok, payload)
            return
        if ok:
            self._deliver(keys, payload)
        else:
            self._fail(keys, ModelyardError(payload[1], payload[0]))

    def _pack_request(self, key: int, ctx: RequestContext) -> tuple[Any, ...]:
        return packing.pack_request(key, ctx, self._pool, self._region_tokens,
                                    self._may_write_outputs())  # fmt: skip

    def _may_write_outputs(self) -> bool:
        # The spec's config may change after __init__ (a worker spawned for auto-complete).
        config, ok = self._direct_outputs
        if config is not self.spec.config_json:
            ok = packing.direct_outputs(self.spec.config_json)
            self._direct_outputs = (self.spec.config_json, ok)
        return ok

    def _unpack_response(self, ctx: RequestContext, payload: Any, final: bool) -> InferResponse:
        return packing.unpack_response(ctx, payload, final, str(self.spec.version), self.mapper)

    def _on_send(self, key: int, payload: Any, flags: int) -> None:
        ctx = self._live.get(key)
        if ctx is None:
            return
        final = bool(flags & 1)
        if payload is None:
            if final:
                self._live.pop(key, None)
                ctx.send(InferResponse(ctx.request.model_name, str(self.spec.version),
                                       ctx.request.id, final=True, flag_only=True))  # fmt: skip
            return
        resp = self._unpack_response(ctx, payload, final)
        if final:
            self._live.pop(key, None)
        ctx.send(resp)

    def send_bls_error(self, call_id: int, message: str, code: ErrorCode) -> None:
        self.send(framing.BLS_RESPONSE, call_id, ("err", message, code), True)


def _error_response(ctx: RequestContext, err: ModelyardError) -> InferResponse:
    r = ctx.request
    return InferResponse(r.model_name, r.model_version, r.id, error=err, final=True)


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # The worker must import this very modelyard and pb_utils, wherever they are installed.
    here = os.path.dirname(os.path.dirname(os.path.abspath(modelyard.__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


Callback = Callable[[], None]
