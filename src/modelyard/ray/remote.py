"""The scheduler of a remote model version: each request goes to one of the version's
replicas, over a connection of our own once their ports are known (``ray/direct.py``), else
through the Serve deployment's handle (``infer`` for one response, ``infer_stream`` for a
decoupled model's stream); to a replica on this node when one runs here.

The caller's core has already validated the request (with the model's own messages); the
replica validates again and runs it with its own scheduler. A request whose inputs are all
under 100 KiB travels inside Serve's gRPC message (``_by_reference=False``: about half the
cost of a call through Ray's task path, benchmarks/RESULTS.md); one with a larger input goes
by reference: Ray puts its arrays in the object store, and the receiver gets a read-only view
of them, with no copy on either side. A cancelled request cancels the Ray call (the replica's
request sees ``is_cancelled()``); Ray's failures become error responses with Triton's codes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import ray.exceptions
from ray import serve
from ray.serve import exceptions as serve_exceptions

from modelyard.errors import Cancelled, InternalError, ModelyardError, Unavailable
from modelyard.ray.direct import ASK_TIMEOUT_S, Routes
from modelyard.ray.table import DEPLOYMENT, VersionRecord
from modelyard.scheduling.base import refusal
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse, StagedOnHost, host_data

log = logging.getLogger("modelyard")


class RemoteScheduler:
    """Forwards each request to the deployment of one model version (see the module doc)."""

    def __init__(self, record: VersionRecord, decoupled: bool) -> None:
        self.record = record
        self.decoupled = decoupled
        self._handle: Any = None
        self._stream: Any = None
        self._grpc: Any = None
        self._grpc_stream: Any = None
        self._calls: set[asyncio.Task[None]] = set()
        self._direct: dict[int, RequestContext] = {}  # requests under way on the direct path
        self._ids = itertools.count()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._shutdown = False
        # Serve must see a sequence model's requests (its sticky router) and an autoscaled
        # model's (its autoscaler counts them): those always take the handle.
        self._routes: Routes | None = None
        if not (record.sticky or record.autoscaled):
            self._routes = Routes(self._ask_endpoints, _this_node())

    @property
    def pending(self) -> int:
        return 0  # requests queue in the replicas (their schedulers count them)

    def handle(self, ctx: RequestContext | None = None, large: bool = False) -> Any:
        """The deployment's handle (streaming for a decoupled model's requests; Serve's gRPC
        transport unless an input is large); for a sequence model's request, one that routes
        by its correlation id."""
        if self._handle is None:
            # No existence check: it would block the loop on Serve's controller; the table
            # only lists running applications.
            # Same node first: a replica here serves the call without crossing nodes (Serve's
            # locality-aware routing; any replica when none here has room).
            self._handle = serve.get_deployment_handle(
                DEPLOYMENT, app_name=self.record.app, _check_exists=False
            ).options(_prefer_local_routing=True)
            self._grpc = self._handle.options(_by_reference=False)
            self._stream = self._handle.options(stream=True)
            self._grpc_stream = self._grpc.options(stream=True)
        if ctx is None:
            return self._handle
        if large:  # through the object store: no copy into a message
            handle = self._stream if self.decoupled else self._handle
        else:  # in the message, by Serve's gRPC transport: half the handle's cost
            handle = self._grpc_stream if self.decoupled else self._grpc
        if self.record.sticky and ctx.request.correlation_id:
            # Every router hashes the same key over the same replicas: one sequence, one replica.
            handle = handle.options(session_id=str(ctx.request.correlation_id))
        return handle

    async def _ask_endpoints(self) -> list[Any]:
        results: list[Any] = await (
            self.handle()
            .broadcast("endpoint")
            .results_async(timeout_s=ASK_TIMEOUT_S, return_exceptions=True)
        )
        return results

    def submit(self, ctx: RequestContext) -> None:
        if self._closed and not (self._shutdown and ctx.nested):
            raise refusal(self.record.name, ctx, self._shutdown)
        now = time.monotonic_ns()
        ctx.t_queued = ctx.t_start = now  # from here on a cancel reaches the replica
        request = _wire(ctx.request)
        large = _large(request)
        if self._routes is not None and not large and self._send_direct(ctx, request):
            return
        handle = self.handle(ctx, large)
        try:
            if self.decoupled:
                call = handle.infer_stream.remote(request)
            else:
                call = handle.infer.remote(request)
        except Exception as e:
            raise ray_error(e, self.record) from None
        ctx.on_cancel = call.cancel
        task = asyncio.get_running_loop().create_task(self._relay(ctx, call))
        self._calls.add(task)
        self._idle.clear()
        task.add_done_callback(self._call_done)
        if ctx.cancelled:  # cancelled before the call existed
            call.cancel()

    def _send_direct(self, ctx: RequestContext, request: InferRequest) -> bool:
        """Send ``request`` over a connection of ours to a replica (ray/direct.py); False
        when none is open yet or the request cannot go that way (the handle takes it)."""
        assert self._routes is not None
        conn = self._routes.pick()
        if conn is None:
            return False
        key = next(self._ids)

        def finished() -> None:
            if self._direct.pop(key, None) is not None and self._quiet():
                self._idle.set()

        def on_response(resp: InferResponse) -> None:
            if resp.final:
                finished()
            ctx.send(resp)

        try:
            rid = conn.send(request, on_response)
        except Exception as e:  # not picklable as it is: Ray's serializer may manage
            log.debug("request to '%s' not sent directly: %s", self.record.name, e)
            return False
        self._direct[key] = ctx
        self._idle.clear()

        def cancel() -> None:  # as the handle's path: the replica is told, the caller answered
            if conn.cancel(rid):
                finished()
                r = ctx.request
                ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=_cancelled()))

        ctx.on_cancel = cancel
        if ctx.cancelled:  # cancelled before it was sent
            cancel()
        return True

    def _quiet(self) -> bool:
        return not self._calls and not self._direct

    def _call_done(self, task: asyncio.Task[None]) -> None:
        self._calls.discard(task)
        if self._quiet():
            self._idle.set()

    async def _relay(self, ctx: RequestContext, call: Any) -> None:
        r = ctx.request
        try:
            if self.decoupled:
                async for resp in call:
                    ctx.send(resp)
                    if resp.final:
                        break
            else:
                ctx.send(await call)
        except asyncio.CancelledError:
            if not ctx.cancelled:
                raise  # this task itself was cancelled (shutdown)
            ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=_cancelled()))
        except Exception as e:
            ctx.send(
                InferResponse(r.model_name, r.model_version, r.id, error=ray_error(e, self.record))
            )
        finally:
            if not ctx.done:  # a stream that ended without its final response
                err = Unavailable(f"the response stream of model '{r.model_name}' ended early")
                ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=err))

    def close(self, shutdown: bool = False) -> None:
        if not self._closed:
            self._closed, self._shutdown = True, shutdown
            if self._routes is not None:
                self._routes.close()

    async def drain(self, timeout: float) -> bool:
        self.close()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def abort(self, queued: ModelyardError, running: ModelyardError) -> None:
        self.close(shutdown=True)
        for task in list(self._calls):
            task.cancel()
        for ctx in list(self._direct.values()):
            ctx.cancel()


_NODE: list[str] = []


def _this_node() -> str:
    """The Ray node this process runs on (asked once)."""
    if not _NODE:
        _NODE.append(ray.get_runtime_context().get_node_id())
    return _NODE[0]


def _cancelled() -> Cancelled:
    return Cancelled("Request was cancelled")


# Ray's own line between a value passed inline and one put in the object store
# (max_direct_call_object_size): a request with an input this large goes by reference.
LARGE_INPUT = 100 * 1024


def _large(request: InferRequest) -> bool:
    for t in request.inputs:
        size = (
            t.data.nbytes
            if t.data is not None
            else len(t.raw)
            if t.raw is not None
            else LARGE_INPUT * (t.device is not None)
        )
        if size >= LARGE_INPUT:
            return True
    return False


def _wire(request: InferRequest) -> InferRequest:
    """What crosses to the replica: the validated request (shared-memory bindings are local to
    a process and are not served on a cluster)."""
    if request.shm_inputs or request.shm_outputs:
        raise InternalError("client shared memory is not available on a Ray cluster")
    for t in request.inputs:
        if t.device is not None and not isinstance(t.device, StagedOnHost):
            # GPU memory of this process: the replica gets a host copy that remembers its GPU
            t.device = StagedOnHost(t.device.device_id, host_data(t))
    return request


def ray_error(e: BaseException, record: VersionRecord) -> ModelyardError:
    """The error response for a Ray failure of a call to ``record``'s deployment."""
    where = f"model '{record.name}' version {record.version}"
    if isinstance(e, ModelyardError):
        return e
    if isinstance(e, serve_exceptions.RequestCancelledError | ray.exceptions.TaskCancelledError):
        return _cancelled()
    if isinstance(e, ray.exceptions.RayActorError):
        return Unavailable(
            f"{where}: the replica running the request died ({type(e).__name__}); "
            "Ray replaces it, retry the request"
        )
    if isinstance(e, serve_exceptions.DeploymentUnavailableError):
        return Unavailable(f"{where} is no longer deployed")
    if isinstance(e, serve_exceptions.BackPressureError):
        return Unavailable(f"{where}: every replica is at its request limit")
    if isinstance(e, ray.exceptions.RayTaskError):
        cause = e.cause if isinstance(e.cause, BaseException) else e
        if isinstance(cause, ModelyardError):
            return cause
        log.error("call to %s failed: %s", where, e)
        return InternalError(f"{where}: {type(cause).__name__}: {cause}")
    log.error("call to %s failed: %r", where, e)
    return InternalError(f"{where}: {type(e).__name__}: {e}")
