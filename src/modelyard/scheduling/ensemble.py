"""Ensemble scheduling: a request to an ensemble runs its steps as ordinary core requests.

Each step starts as soon as every ensemble tensor it reads exists (data flow, so independent
steps run at the same time); its outputs become ensemble tensors under the names of its
``output_map``. The ensemble answers once every step has finished, with the outputs the client
asked for. A step that fails ends the ensemble request with the step's error, prefixed as
Triton does: ``in ensemble '<name>', <message>``; steps already running finish on their own,
no further step starts.

Nothing here knows the core: the loader passes ``submit`` (``InferenceServer.submit``) and
the call graph, where each step counts as an ensemble -> step model edge.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from modelyard.errors import ModelyardError
from modelyard.scheduling.base import refusal
from modelyard.serving.context import RequestContext
from modelyard.serving.stats import ModelStats
from modelyard.tracing.stores import ENSEMBLE, CallGraph
from modelyard.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InferResponse,
    ParamValue,
    RequestedOutput,
    Tensor,
)

SubmitFn = Callable[[InferRequest, Callable[[InferResponse], None]], RequestContext]


@dataclass(frozen=True, slots=True)
class Step:
    model: str
    version: str  # "" = the latest ready version (model_version -1)
    inputs: tuple[tuple[str, str], ...]  # (model input, ensemble tensor)
    outputs: tuple[tuple[str, str], ...]  # (model output, ensemble tensor)
    decoupled: bool = False  # the step model may answer any number of times


def steps_from_config(cfg: Any) -> list[Step]:
    """The steps of a (validated) ``ensemble_scheduling``, maps in a stable order."""
    return [
        Step(
            model=s.model_name,
            version="" if s.model_version < 0 else str(s.model_version),
            inputs=tuple(sorted(s.input_map.items())),
            outputs=tuple(sorted(s.output_map.items())),
        )
        for s in cfg.ensemble_scheduling.step
    ]


class EnsembleScheduler:
    def __init__(
        self, model_name: str, steps: list[Step], submit: SubmitFn, output_names: list[str]
    ) -> None:
        self.model_name = model_name
        self.steps = steps
        self.output_names = output_names
        self._submit = submit
        self.downstream = _downstream(steps)
        self.stats: ModelStats | None = None  # set by the loader
        self.call_graph: CallGraph | None = None  # set by the loader
        self._running = 0
        self._closed = False
        self._shutdown = False
        self._idle: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0

    @property
    def pending(self) -> int:
        return 0  # ensemble requests never queue here; their steps queue at the step models

    def submit(self, ctx: RequestContext) -> None:
        if self._closed and not (self._shutdown and ctx.nested):
            raise refusal(self.model_name, ctx, self._shutdown)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.get_ident()
        ctx.t_queued = ctx.t_start = time.monotonic_ns()
        self._running += 1
        if self._idle is not None:
            self._idle.clear()
        _Run(self, ctx).advance()

    def _finished(self) -> None:
        self._running -= 1
        if self._running == 0 and self._idle is not None:
            self._idle.set()

    def call_on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """Step responses may arrive on a model's thread; ensemble state lives on the loop."""
        if threading.get_ident() == self._thread or self._loop is None:
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    def close(self, shutdown: bool = False) -> None:
        if not self._closed:
            self._closed, self._shutdown = True, shutdown

    def abort(self, queued: ModelyardError, running: ModelyardError) -> None:
        """Nothing queues here: the step models answer the steps still running."""
        self.close(shutdown=True)

    async def drain(self, timeout: float) -> bool:
        self.close()
        if self._running == 0:
            return True
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False


class _Flow:
    """One set of ensemble tensors. A request starts with one; each response of a decoupled
    step starts a new flow (its parent's tensors plus that response's outputs) in which the
    steps downstream of it run. Tensors the parent gains later reach its children too."""

    __slots__ = ("children", "emitted", "running", "tensors", "waiting")

    def __init__(self, tensors: dict[str, Tensor], waiting: list[int]) -> None:
        self.tensors = tensors
        self.waiting = waiting
        self.running = 0
        self.children: list[_Flow] = []
        self.emitted = False


class _Run:
    """One ensemble request on its way through the steps."""

    __slots__ = ("active", "ctx", "done", "held", "keys", "root", "running", "sched")

    def __init__(self, sched: EnsembleScheduler, ctx: RequestContext) -> None:
        self.sched = sched
        self.ctx = ctx
        self.root = _Flow({t.name: t for t in ctx.request.inputs}, list(range(len(sched.steps))))
        self.running: dict[int, RequestContext | None] = {}  # step requests in flight
        self.keys = 0
        self.active = 0  # steps started and not finished (a decoupled one: until its final)
        self.held: InferResponse | None = None  # sent when the next one comes, or as final
        self.done = False
        ctx.on_cancel = self._cancel

    def advance(self, flow: _Flow | None = None) -> None:
        """Start every step of ``flow`` whose inputs exist; answer when nothing is left."""
        flow = flow or self.root
        steps = self.sched.steps
        ready = [i for i in flow.waiting if all(t in flow.tensors for _, t in steps[i].inputs)]
        for i in ready:
            if self.done:
                return
            if i not in flow.waiting:  # started by a nested advance (a step answered at once)
                continue
            flow.waiting.remove(i)
            self._start(flow, i)
        self._emit_if_complete(flow)
        self._finish_if_idle()

    def _start(self, flow: _Flow, index: int) -> None:
        step = self.sched.steps[index]
        r = self.ctx.request
        inputs = [_renamed(flow.tensors[t], name) for name, t in step.inputs]
        request = InferRequest(
            step.model,
            inputs,
            step.version,
            r.id,
            outputs=[RequestedOutput(name) for name, _ in step.outputs],
            parameters=dict(r.parameters),
            correlation_id=r.correlation_id,
            flags=r.flags,
            priority=r.priority,
            timeout_us=r.timeout_us,
            trace=None if self.ctx.trace is None else self.ctx.trace.step_link(),
        )
        key = self.keys = self.keys + 1
        self.running[key] = None
        flow.running += 1
        self.active += 1
        graph, caller, t0 = self.sched.call_graph, r.model_name, time.monotonic_ns()

        def on_response(resp: InferResponse) -> None:
            if resp.final and graph is not None:
                failed = resp.error is not None
                graph.record(caller, step.model, time.monotonic_ns() - t0, failed, ENSEMBLE)
            self.sched.call_on_loop(self._step_response, flow, index, key, resp)

        try:
            sub = self.sched._submit(request, on_response)
            if key in self.running:
                self.running[key] = sub
        except ModelyardError as e:
            if graph is not None:  # refused (bad inputs, unavailable): a failed step
                graph.record(caller, step.model, time.monotonic_ns() - t0, True, ENSEMBLE)
            self.running.pop(key, None)
            flow.running -= 1
            self.active -= 1
            self._fail(e)

    def _step_response(self, flow: _Flow, index: int, key: int, resp: InferResponse) -> None:
        if key not in self.running or self.done:
            return
        if resp.final:
            del self.running[key]
            flow.running -= 1
            self.active -= 1
        if resp.error is not None:
            self._fail(resp.error)
            return
        if not resp.flag_only:
            step = self.sched.steps[index]
            produced = {t.name: t for t in resp.outputs}
            outputs: dict[str, Tensor] = {}
            for name, ens in step.outputs:
                tensor = produced.get(name)
                if tensor is None:
                    self._fail(
                        ModelyardError(f"model '{resp.model_name}' did not produce output '{name}'")
                    )
                    return
                outputs[ens] = _renamed(tensor, ens)
            if step.decoupled:
                below = self.sched.downstream[index]
                child = _Flow({**flow.tensors, **outputs}, [j for j in flow.waiting if j in below])
                flow.children.append(child)
                self.advance(child)
            else:
                self._add(flow, outputs)
        self._emit_if_complete(flow)
        self._finish_if_idle()

    def _add(self, flow: _Flow, tensors: dict[str, Tensor]) -> None:
        """New tensors of ``flow`` (and of the flows it started), then the steps they allow."""
        flow.tensors.update(tensors)
        for child in flow.children:
            self._add(child, {k: v for k, v in tensors.items() if k not in child.tensors})
        if not self.done:
            self.advance(flow)

    def _emit_if_complete(self, flow: _Flow) -> None:
        """A flow holding every requested output answers once (the last answer is final)."""
        if self.done or flow.emitted:
            return
        ctx, r = self.ctx, self.ctx.request
        names = ctx.output_names if ctx.output_names is not None else self.sched.output_names
        if not all(n in flow.tensors for n in names):
            return
        flow.emitted = True
        # Triton's ensemble responses carry the request's sequence parameters.
        params: dict[str, ParamValue] = {
            "sequence_id": r.correlation_id,
            "sequence_start": bool(r.flags & SEQUENCE_START),
            "sequence_end": bool(r.flags & SEQUENCE_END),
        }
        outputs = [flow.tensors[n] for n in sorted(names)]
        resp = InferResponse(r.model_name, r.model_version, r.id, outputs, params, final=False)
        if self.held is not None:
            ctx.send(self.held)
        self.held = resp

    def _finish_if_idle(self) -> None:
        if self.done or self.active:
            return
        self.done = True
        ctx, r = self.ctx, self.ctx.request
        if self.held is not None:
            self.held.final = True
            ctx.send(self.held)
        else:  # a decoupled step that answered nothing: only the final flag
            ctx.send(InferResponse(r.model_name, r.model_version, r.id, flag_only=True))
        stats = self.sched.stats
        if stats is not None:
            stats.record_execution(ctx.batch_size, time.monotonic_ns() - ctx.t_start)
        self.sched._finished()

    def _fail(self, error: ModelyardError) -> None:
        if self.done:
            return
        self.done = True
        ctx, r = self.ctx, self.ctx.request
        if self.held is not None:
            ctx.send(self.held)
        err = ModelyardError(f"in ensemble '{r.model_name}', {error.message}", error.code)
        ctx.fail_reason = "OTHER"  # Triton's reason for a failed ensemble request
        ctx.send(InferResponse(r.model_name, r.model_version, r.id, error=err))
        stats = self.sched.stats
        if stats is not None and not self.running:
            # Triton 2.51 records a failed ensemble request a second time when the failing
            # step was the last one running (with steps still in flight it records it once).
            stats.record_failure(ctx.t_received, time.monotonic_ns(), "OTHER")
        self.sched._finished()

    def _cancel(self) -> None:
        for sub in list(self.running.values()):
            if sub is not None:
                sub.cancel()


def _downstream(steps: list[Step]) -> list[set[int]]:
    """For each step, the steps that read its outputs, directly or through other steps."""
    direct = [
        {
            j
            for j, other in enumerate(steps)
            if {t for _, t in other.inputs} & {t for _, t in s.outputs}
        }
        for s in steps
    ]
    out: list[set[int]] = []
    for i in range(len(steps)):
        seen: set[int] = set()
        todo = list(direct[i])
        while todo:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                todo.extend(direct[j])
        out.append(seen)
    return out


def _renamed(t: Tensor, name: str) -> Tensor:
    return Tensor(name, t.datatype, t.shape, t.data, t.raw, t.parameters, t.device)
