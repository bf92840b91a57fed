"""Detecting BLS calls that could never be served.

A model instance blocked in a sync BLS call waits on one request. A request queued at a
model can progress if some instance of that model is idle, busy computing, or blocked on a
request that can itself progress. When a blocking BLS request must queue, the scheduler asks
whether it can progress; if not (every path leads back into the cycle), it is refused at
once with an error instead of hanging. This catches a model calling itself with every
instance busy, A→B→A, and cycles spread over several instances.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from modelyard.serving.context import RequestContext

# instance name -> the BLS request its blocked execute waits on
WAITING: dict[str, RequestContext] = {}


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Placed(Protocol):
    """A scheduler as the deadlock check sees it."""

    def instances_busy(self) -> Iterable[tuple[_Named, bool]]:
        """Every instance of the model with whether it is busy."""


def can_progress(
    ctx: RequestContext, sched: Placed, visiting: frozenset[str] = frozenset()
) -> bool:
    for instance, busy in sched.instances_busy():
        if not busy:
            return True
        name = instance.name
        if name in visiting:
            continue  # leads back into the cycle being explored
        waited = WAITING.get(name)
        if name == ctx.caller:
            waited = ctx
        if waited is None:
            return True  # computing: it will finish and take the next request
        target = waited.scheduler
        if target is None or can_progress(waited, target, visiting | {name}):
            return True
    return False


def register(ctx: RequestContext) -> None:
    if ctx.caller:
        WAITING[ctx.caller] = ctx


def release(ctx: RequestContext) -> None:
    if ctx.caller and WAITING.get(ctx.caller) is ctx:
        del WAITING[ctx.caller]
