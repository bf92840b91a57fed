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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import modelyard
from modelyard.backends.python.protocol import framing, inbox, tensor_pool
from modelyard.backends.python.protocol.messages import (
    AsyncExecuted,
    Autocomplete,
    Bls,
    BlsCancel,
    ErrorReply,
    Executed,
    Finalize,
    ForgetRegions,
    Free,
    Init,
    LoadModel,
    Log,
    Metrics,
    ModelSetup,
    QueryModelReady,
    Ready,
    Result,
    Send,
    ServerMessage,
    SpanEnd,
    UnloadModel,
    WorkerMessage,
    decode_worker_message,
)
from modelyard.backends.python.server import child_process, packing
from modelyard.backends.python.server.bls import WorkerCalls
from modelyard.backends.python.server.exec_env import ExecEnv
from modelyard.backends.python.server.restart import RestartPolicy
from modelyard.backends.python.server.worker_health import WorkerHealth
from modelyard.backends.python.server.worker_requests import WorkerRequests, error_response
from modelyard.errors import Cancelled, InternalError, ModelyardError
from modelyard.serving import shm_regions
from modelyard.serving.context import RequestContext
from modelyard.serving.host import ModelHost

log = logging.getLogger("modelyard")

_worker_ids = itertools.count(1)
WORKER_MODULE = "modelyard.backends.python.worker"  # the worker process's entry (__main__.py)
# Workers by the prefix of their own segment pool: a FREE for a segment of one worker that
# another worker viewed (a reply sent straight to it, inbox.py) reaches its owner this way.
_by_pool: dict[str, PythonWorker] = {}


@dataclass
class WorkerSpec:
    """Everything a worker needs to import and initialize the model."""

    model_name: str
    version: int
    model_dir: str  # <repo>/<model>
    model_file: str  # <repo>/<model>/<version>/model.py
    instance_name: str  # Triton's (model_instance_name): the same on each GPU of a group
    instance_kind: str  # "CPU" / "GPU" / "MODEL"
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
    instance_key: str = ""  # unique within the model when the name is not (config/placement.py)

    @property
    def key(self) -> str:
        """The instance's name inside modelyard (deadlock registry, logs, isolation)."""
        return self.instance_key or self.instance_name


class PythonWorker(WorkerRequests, WorkerHealth):
    """The Instance for one worker process: its process, channel and shared-memory pool
    (here), the requests it runs (worker_requests.py), and its health (worker_health.py)."""

    def __init__(self, spec: WorkerSpec, host: ModelHost | None = None):
        self.spec = spec
        self.name = spec.key
        self.calls = WorkerCalls(self, host)  # BLS, model control and logs of the model
        self._wid = next(_worker_ids)
        self._prefix = f"modelyard-{os.getpid()}-{self._wid}"
        tensor_pool.sweep_dead_servers()  # what killed servers left in /dev/shm
        self._pool = tensor_pool.ShmPool(self._prefix + "-s", enabled=spec.shm_enabled)
        # Where other workers send this one's BLS replies ("" for none; see inbox.py).
        self.inbox = inbox.inbox_path(str(self._wid))
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
        self._proc: child_process.ChildProcess | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._call_ids = itertools.count(1)
        # request key -> context, while a response may still come
        self._live: dict[int, RequestContext] = {}
        self._async_batches: dict[int, list[int]] = {}  # execute call id -> request keys
        self._batch_keys: dict[int, list[int]] = {}  # ... while the batch runs
        self._early_results: dict[int, AsyncExecuted] = {}  # read before their Executed
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
        _by_pool[self._prefix + "-w"] = self  # (again after a restart: close() removed it)
        # Wait for READY from now on: it may arrive while the connection is still being set
        # up (when the loop was busy meanwhile), and must not be dropped then.
        self._calls[0] = self._loop.create_future()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args = (str(child.fileno()), self._prefix + "-w", self.inbox)
        env = self.spec.exec_env
        if env is not None:
            command, environ = env.command(*args), env.environ
        else:
            command = [self.spec.python, "-m", WORKER_MODULE, *args]
            environ = _worker_env()
        try:
            self._proc = child_process.spawn(command, environ, (child.fileno(),))
        finally:
            child.close()
        _, proto = await self._loop.create_unix_connection(
            lambda: framing.FrameProtocol(self._on_frame, self._on_lost, decode_worker_message),
            sock=parent,
        )
        self._proto = proto
        self._alive = True
        await self._call(None, self.spec.start_timeout, "start")

    async def autocomplete(self, config: dict[str, Any]) -> dict[str, Any]:
        """Run the model's auto_complete_config on ``config`` (Triton's dict shape)."""
        setup = self._setup()
        result: dict[str, Any] = await self._call(
            lambda call_id: Autocomplete(call_id, setup, config),
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
        setup = self._setup()
        result = await self._call(
            lambda call_id: Init(call_id, setup), self.spec.init_timeout, "initialize"
        )
        self._has_is_ready = bool(result)
        self._initialized = True

    async def stop(self) -> None:
        """Finalize and end the worker (finalize bounded at 30 s, as for an unload);
        shutdown bounds it by its own deadline from outside, then calls :meth:`abort`."""
        self._stopping = True
        self._sup.cancel()
        if self._alive:
            try:
                await self._call(Finalize, 30.0, "finalize")
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
        _by_pool.pop(self._prefix + "-w", None)
        if self.inbox:
            with contextlib.suppress(OSError):
                os.unlink(self.inbox)

    def kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()

    def _setup(self) -> ModelSetup:
        s = self.spec
        return ModelSetup(
            model_name=s.model_name,
            version=s.version,
            model_dir=s.model_dir,
            model_file=s.model_file,
            instance_name=s.instance_name,
            instance_kind=s.instance_kind,
            device_id=s.device_id,
            config_json=s.config_json,
            decoupled=s.decoupled,
            shm=s.shm_enabled,
        )

    # -- messages ----------------------------------------------------------------------------

    def send(self, message: ServerMessage) -> None:
        proto = self._proto
        if proto is None:
            raise InternalError(f"Stub process '{self.name}' is not healthy.")
        if self._to_free:
            proto.send(Free(self._to_free))
            self._to_free = []
        proto.send(message)

    async def _call(
        self, request: Callable[[int], ServerMessage] | None, timeout: float | None, what: str
    ) -> Any:
        """Send ``request(call_id)`` and wait (``timeout``) for its answer; None: wait for the
        worker's Ready."""
        assert self._loop is not None
        call_id = next(self._call_ids) if request is not None else 0
        fut: asyncio.Future[Any] = self._calls.get(call_id) or self._loop.create_future()
        self._calls[call_id] = fut
        try:
            if request is not None:
                self.send(request(call_id))
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            self.kill()
            raise InternalError(
                f"{what} of model instance '{self.name}' did not finish within {timeout:g} s"
            ) from None
        except InternalError as e:
            if self._alive or self._stopping or self._started:
                raise  # the restart loop (a started worker) says how its process ended
            # Lost before it ever served (start, auto-complete, initialize): nobody else
            # will say how the process ended, and that is the one clue to why.
            how = await self._reap(False)
            raise InternalError(f"{e.message} Its worker {how}." if how else e.message) from None
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
            self.send(Metrics(call_id))
            result: list[dict[str, Any]] = await asyncio.wait_for(fut, timeout)
            return result
        except (asyncio.TimeoutError, ModelyardError, ConnectionError):
            return []
        finally:
            self._calls.pop(call_id, None)

    def _on_frame(self, msg: WorkerMessage) -> None:
        # (the frequent kinds are tested first)
        if type(msg) is Executed:
            self.on_executed(msg)
        elif type(msg) is Send:
            self._on_send(msg.key, msg.response, msg.flags)
        elif type(msg) is Bls:
            self.calls.bls(msg)
        elif type(msg) is Free:
            self._on_free(msg.segments)
        elif type(msg) is Result:
            self._answer(msg.call_id, msg.value, msg.error)
        elif type(msg) is AsyncExecuted:
            self._on_async_results(msg)
        elif type(msg) is Log:
            self.calls.log(msg.level, msg.message, msg.filename, msg.line)
        elif type(msg) is Ready:
            fut = self._calls.get(0)
            if fut is not None and not fut.done():
                fut.set_result(None)
        elif type(msg) is BlsCancel:
            self.calls.cancel(msg.call_id)
        elif type(msg) is LoadModel or type(msg) is UnloadModel or type(msg) is QueryModelReady:
            self.calls.control(msg)
        elif type(msg) is SpanEnd:
            self._on_span(msg)

    def _on_free(self, names: list[str]) -> None:
        """Segments the worker no longer views: of its pool here, or of another worker's (a
        reply that worker sent it directly), handed on to that worker."""
        own = self._pool.prefix
        others: dict[str, list[str]] = {}
        for name in names:
            prefix = tensor_pool.owner(name)
            if prefix != own:
                others.setdefault(prefix, []).append(name)
        if not others:
            self._pool.release(names)
            return
        self._pool.release([n for n in names if tensor_pool.owner(n) == own])
        for prefix, theirs in others.items():
            worker = _by_pool.get(prefix)
            if worker is not None:
                worker.take_back(theirs)

    def release_export(self, name: str) -> None:
        # From any thread (a finalizer): the owner's FREE is sent from the loop.
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # (loop closed: the workers are going)
                loop.call_soon_threadsafe(self._on_free, [name])

    def take_back(self, names: list[str]) -> None:
        """Segments of this worker's pool another process no longer views."""
        if self._proto is not None:
            with contextlib.suppress(ConnectionError):
                self._proto.send(Free(names))

    def _answer(self, call_id: int, value: Any, error: ErrorReply | None) -> None:
        fut = self._calls.get(call_id)
        if fut is not None and not fut.done():
            if error is not None:
                fut.set_exception(ModelyardError(*error))
            else:
                fut.set_result(value)

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
            ctx.send(error_response(ctx, err))
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
                self._proto.send(ForgetRegions([token]))

    def _flush_free(self) -> None:
        self._flush_scheduled = False
        if self._to_free and self._proto is not None:
            names, self._to_free = self._to_free, []
            with contextlib.suppress(ConnectionError):
                self._proto.send(Free(names))


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # The worker must import this very modelyard and pb_utils, wherever they are installed.
    here = os.path.dirname(os.path.dirname(os.path.abspath(modelyard.__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
