"""The test harness's :class:`~modelyard.serving.host.ModelHost`: where the BLS calls of a model
under test go.

- To a **fake** the test gave (``bls={"name": fake}``): ``fake(request)`` gets the
  ``pb_utils.InferenceRequest`` as a model would receive it and returns an
  ``InferenceResponse``, a list of them (a decoupled call streams them, the last one final),
  or raises (the caller gets an error response naming the fake). A sync ``exec()`` runs it
  on the caller's thread; ``async_exec()`` and decoupled calls on the harness's event loop.
- To **another model of the repository**, loaded in-process on first use by the core (the
  server's own loading, scheduling and direct path).
- Anything else is an error response naming the model.

Model control, readiness and log lines are the core's (core/host.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import triton_python_backend_utils as pb
from modelyard.core.host import CoreHost
from modelyard.core.loader import read_config
from modelyard.errors import Cancelled, ErrorCode, InternalError, ModelyardError
from modelyard.serving.context import RequestContext, ResponseCallback
from modelyard.types import InferRequest, InferResponse, Tensor, datatype_of, host_data

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")

FakeResult = Any  # pb.InferenceResponse | Sequence[pb.InferenceResponse] | None
Fake = Callable[[Any], FakeResult]


class HarnessHost:
    """BLS to fakes or to repository models loaded on first use (see the module's doc)."""

    def __init__(
        self, core: InferenceServer, fakes: Mapping[str, Fake], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._core = core
        self._core_host = CoreHost(core)
        self.fakes = dict(fakes)
        self._loop = loop
        self._loads: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.model_ready = core.model_ready
        self.check_model_ready = core.check_model_ready
        self.load_model = self._core_host.load_model
        self.unload_model = self._core_host.unload_model
        self.log = self._core_host.log
        self.tracer = core.tracer  # BLS calls count in its call graph, as on the server
        self.execute_on_loop = False

    # -- which model answers ------------------------------------------------------------

    def _loaded(self, name: str) -> bool:
        entry = self._core.registry.entries.get(name)
        return entry is not None and bool(entry.versions)

    def _first_use(self, name: str) -> bool:
        """A repository model nobody has called yet (its load has not been asked for)."""
        return name in self._core.registry.locations and name not in self._loads

    def _known(self, name: str) -> bool:
        registry = self._core.registry
        return name in registry.entries or name in registry.locations

    @staticmethod
    def unknown(name: str) -> ModelyardError:
        # Triton's text for a BLS call to a model that is not there (start_bls words a
        # server's own NOT_FOUND so), with what the harness knows of why.
        return ModelyardError(
            f"Failed for execute the inference request. Model '{name}' is not ready. (the "
            "test gave no BLS fake for it and its repository has no such model)",
            ErrorCode.INTERNAL,
        )

    async def ensure_loaded(self, name: str) -> None:
        """Load a repository model once, on its first call (on the loop); a failed load is
        logged by the core and leaves the model without versions."""
        future = self._loads.get(name)
        if future is None:
            future = self._loads[name] = asyncio.ensure_future(self._load(name))
        await asyncio.shield(future)

    async def _load(self, name: str) -> None:
        if self._loaded(name):
            return
        try:
            await self._core.load(name)
        except ModelyardError as e:  # the caller gets the core's answer: no versions
            log.debug("BLS target '%s' did not load: %s", name, e.message)

    # -- ModelHost ----------------------------------------------------------------------

    def is_decoupled(self, name: str, version: str = "") -> bool:
        if name in self.fakes:
            return False  # a fake answers either way
        if self._first_use(name):  # not loaded yet: as its config says
            try:
                location = self._core.registry.locations[name]
                return bool(
                    read_config(name, str(location), None).model_transaction_policy.decoupled
                )
            except ModelyardError:
                return False
        if not self._known(name):
            raise self.unknown(name)
        return self._core.is_decoupled(name, version)

    def submit(
        self,
        request: InferRequest,
        on_response: ResponseCallback,
        chain: frozenset[str] = frozenset(),
        caller: str = "",
    ) -> RequestContext:
        name = request.model_name
        fake = self.fakes.get(name)
        if fake is not None:
            ctx = RequestContext(request, None, on_response)
            responses = call_fake(fake, request, decoupled=True)
            for resp in responses:
                ctx.send(resp)
            return ctx
        if self._first_use(name):
            return self._submit_after_load(request, on_response, chain, caller)
        if not self._known(name):
            raise self.unknown(name)
        return self._core.submit(request, on_response, chain, caller)

    def run_direct(
        self,
        request: InferRequest,
        chain: frozenset[str],
        accept: Callable[[Any], bool],
        run: Callable[[Any, RequestContext], None],
    ) -> list[InferResponse] | None:
        name = request.model_name
        fake = self.fakes.get(name)
        if fake is not None:  # on the caller's thread, like a direct call
            return call_fake(fake, request, decoupled=False)
        if self._first_use(name):
            if asyncio.events._get_running_loop() is self._loop:
                return None  # the loop cannot wait for the load: the ordinary path does
            # a model thread: it may wait for the load
            asyncio.run_coroutine_threadsafe(self.ensure_loaded(name), self._loop).result()
        return self._core_host.run_direct(request, chain, accept, run)

    def _submit_after_load(
        self,
        request: InferRequest,
        on_response: ResponseCallback,
        chain: frozenset[str],
        caller: str,
    ) -> RequestContext:
        """On the loop, which cannot wait: the call stands in a context of its own until the
        model is loaded, then goes to the core (a cancel meanwhile ends it as cancelled)."""
        name = request.model_name
        proxy = RequestContext(request, None, on_response)

        async def go() -> None:
            await self.ensure_loaded(name)
            if proxy.cancelled:
                error: ModelyardError = Cancelled("Request was cancelled")
                proxy.send(InferResponse(name, request.model_version, request.id, error=error))
                return
            try:
                ctx = self._core.submit(request, proxy.send, chain, caller)
            except ModelyardError as e:  # as start_bls words it
                text = f"Model {name} - Error when running inference: {e.message}"
                error = ModelyardError(text, e.code)
                proxy.send(InferResponse(name, request.model_version, request.id, error=error))
                return
            proxy.on_cancel = ctx.cancel

        task = self._loop.create_task(go())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return proxy


def call_fake(fake: Fake, request: InferRequest, decoupled: bool) -> list[InferResponse]:
    """Run a fake on ``request``: its responses as the core's, the last one final (a
    flag-only final when it returned none). Whatever goes wrong is an error response."""
    name = request.model_name
    try:
        result = fake(_pb_request(request))
        if result is None:
            results: Sequence[Any] = []
        elif isinstance(result, pb.InferenceResponse):
            results = [result]
        else:
            results = list(result)
        bad = [r for r in results if not isinstance(r, pb.InferenceResponse)]
        if bad:
            raise TypeError(f"expected InferenceResponse objects, got {type(bad[0]).__name__}")
        if not decoupled and len(results) != 1:
            raise TypeError(
                f"a BLS call that is not decoupled takes exactly one response, got {len(results)}"
            )
    except Exception as e:  # the test's fake may raise anything: the caller sees it
        error = InternalError(f"BLS fake for model '{name}' failed: {type(e).__name__}: {e}")
        return [InferResponse(name, request.model_version, request.id, error=error)]
    wanted = {o.name for o in request.outputs} if request.outputs else None
    out = [_core_response(request, r, wanted) for r in results]
    if not out:
        out = [InferResponse(name, request.model_version, request.id, flag_only=True)]
    for resp in out[:-1]:
        resp.final = False
    return out


def _pb_request(request: InferRequest) -> Any:
    """The request as a model receives it (what a fake is called with)."""
    inputs = [pb.Tensor._from_server(t.name, host_data(t)) for t in request.inputs]
    names = [o.name for o in request.outputs] if request.outputs else []
    return pb.InferenceRequest._from_server(
        request_id=request.id,
        correlation_id=request.correlation_id,
        model_name=request.model_name,
        model_version=int(request.model_version or -1),
        flags=request.flags,
        inputs=inputs,
        requested_output_names=names,
        parameters=request.parameters or None,
        timeout=request.timeout_us,
        response_sender=pb.InferenceResponseSender(None),  # type: ignore[attr-defined]
    )


def _core_response(request: InferRequest, resp: Any, wanted: set[str] | None) -> InferResponse:
    out = InferResponse(request.model_name, request.model_version, request.id)
    err = resp.error()
    if err is not None:
        out.error = ModelyardError(err.message(), _code(err.code()))
        out.model_error = True
        return out
    for t in resp.output_tensors():
        if wanted is None or t.name() in wanted:
            arr = t._host_array()
            out.outputs.append(Tensor(t.name(), datatype_of(arr.dtype), tuple(arr.shape), arr))
    if resp._params:
        out.parameters = dict(resp._params)
    return out


def _code(code: Any) -> ErrorCode:
    return code if isinstance(code, ErrorCode) else ErrorCode.INTERNAL
