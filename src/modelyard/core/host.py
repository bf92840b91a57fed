"""The core's :class:`~modelyard.serving.host.ModelHost`: what the backends get of one
server's :class:`~modelyard.core.api.InferenceServer` (requests, the in-process direct path
with the core's own lookup, validation and statistics, model control, readiness, logs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from modelyard import logs
from modelyard.core.registry import UnresolvedName
from modelyard.core.validation import validate
from modelyard.errors import ModelyardError, NotFound
from modelyard.scheduling.default import DefaultScheduler
from modelyard.serving.context import RequestContext
from modelyard.serving.host import ModelLogRecord
from modelyard.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from modelyard.core.parts import Hosted


class CoreHost:
    def __init__(self, core: Hosted):
        self._core = core
        # The calls every BLS request makes go straight to the core (no extra frame), but
        # with namespacing: see _submit_by_name.
        named = core.options.namespacing
        self.submit = self._submit_by_name if named else core.submit
        self.is_decoupled = self._is_decoupled_by_name if named else core.is_decoupled
        self.model_ready = core.model_ready
        self.check_model_ready = core.check_model_ready
        self.tracer = core.tracer
        self.execute_on_loop = False

    def _submit_by_name(
        self,
        request: InferRequest,
        on_response: Callable[[InferResponse], None],
        chain: frozenset[str] = frozenset(),
        caller: str = "",
    ) -> RequestContext:
        """A BLS call by a name that means no model or several is answered as Triton's stub
        answers it, which asks whether the model is ready first: not found (not ready)."""
        try:
            return self._core.submit(request, on_response, chain, caller)
        except UnresolvedName as e:
            raise NotFound(e.message) from None

    def _is_decoupled_by_name(self, name: str, version: str = "") -> bool:
        try:
            return self._core.is_decoupled(name, version)
        except UnresolvedName as e:
            raise NotFound(e.message) from None

    def run_direct(
        self,
        request: InferRequest,
        chain: frozenset[str],
        accept: Callable[[Any], bool],
        run: Callable[[Any, RequestContext], None],
    ) -> list[InferResponse] | None:
        try:
            mv = self._core.get_version(request.model_name, request.model_version)
        except ModelyardError:
            return None
        sched = mv.scheduler
        if mv.decoupled or not isinstance(sched, DefaultScheduler):
            return None
        instance = sched.try_claim(accept)
        if instance is None:
            return None
        try:
            try:
                names = validate(request, mv.signature)  # ModelyardError: the caller words it
            except ModelyardError:
                mv.stats.live.refusal(time.monotonic_ns())  # the dashboard's count only
                raise
            if not request.model_version:
                request.model_version = str(mv.version)
            box: list[InferResponse] = []
            ctx = RequestContext(request, names, box.append, chain=chain)
            t0 = time.monotonic_ns()
            ctx.t_queued = ctx.t_start = t0
            if request.trace is not None:  # a BLS call of a traced request
                ctx.t_received = t0
                ctx.trace = request.trace.start_request(request, mv.version, False, True)
            run(instance, ctx)
            t1 = time.monotonic_ns()
            if not box:  # answered through a response sender via the loop (rare)
                return None if ctx.done else box
            if mv.stats.first_responses:  # (the context has no statistics on this path)
                mv.stats.record_first_response(t0, t1)
            if box[0].error is None:
                mv.stats.record_success(t0, t0, t0, t1, 1)
                mv.stats.record_execution(1, t1 - t0)
            else:
                mv.stats.record_failure(t0, t1)
            return box
        finally:
            sched.release_claimed(instance)

    async def load_model(
        self, name: str, config: str | None, files: dict[str, bytes] | None
    ) -> None:
        await self._core.load_model(name, config, files, from_model=True)

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        await self._core.unload_model(name, unload_dependents, from_model=True)

    def log(self, record: ModelLogRecord) -> None:
        logs.model_line(record.level, record.message, record.filename, record.line)
