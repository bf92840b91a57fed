"""The one interface every backend's instances implement.

The scheduler hands an instance a batch of :class:`RequestContext`; the instance delivers each
request's responses through ``ctx.send`` (exactly one final response per request, or several
for decoupled models) and returns when ``execute`` has returned in the model.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from modelyard.serving.context import RequestContext


class Instance(abc.ABC):
    """One model instance: a worker process, an in-process object, an ORT session..."""

    name: str

    @abc.abstractmethod
    async def start(self) -> None:
        """Load and initialize; raise ModelyardError with the model's message on failure."""

    @abc.abstractmethod
    async def execute(self, batch: list[RequestContext]) -> None:
        """Run one batch; responses go to each context's ``send``."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Finalize and release everything; never raises."""

    # Called (no arguments) when the instance becomes healthy again after a restart; set by
    # the scheduler that owns the instance, so requests it held back can go.
    health_listener: Callable[[], None] | None = None

    @property
    def healthy(self) -> bool:
        """Initialized and live: a batch handed over now runs."""
        return True

    @property
    def not_ready_reason(self) -> str:
        """Why the instance is not healthy ("" when it is)."""
        return ""

    async def check_ready(self) -> str | None:
        """None when ready, else why not (the model's own readiness check included, for
        instances that have one). Bounded: never waits long on the model."""
        return None if self.healthy else self.not_ready_reason

    def abort(self) -> None:
        """The shutdown deadline passed: release what the instance holds now (kill its
        process), without waiting for the model. Requests still in flight were answered."""
        return None
