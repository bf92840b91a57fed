"""The one interface every backend's instances implement, and the per-request context.

The scheduler hands an instance a batch of :class:`RequestContext`; the instance delivers each
request's responses through ``ctx.send`` (exactly one final response per request, or several
for decoupled models) and returns when ``execute`` has returned in the model.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelyard.core.stats import ModelStats
    from modelyard.types import InferRequest, InferResponse

ResponseCallback = Callable[["InferResponse"], None]


@dataclass(eq=False, slots=True)
class RequestContext:
    """A validated request on its way through scheduler and instance.

    ``request.inputs`` hold decoded numpy data. ``output_names`` is what the model should
    produce (every output when the client asked for none). ``on_response`` receives each
    response; the last one has ``final=True``.
    """

    request: InferRequest
    output_names: list[str] | None
    on_response: ResponseCallback
    cancelled: bool = False
    done: bool = False
    # Instances blocked until this request completes (BLS callers); see core/bls.py.
    chain: frozenset[str] = frozenset()
    batch_size: int = 1  # the request's own batch dimension (1 for non-batching models)
    # For a blocking BLS call: the instance whose execute waits on it, and where it queued.
    caller: str = ""
    scheduler: Any = None
    # Timing (ns, time.monotonic_ns) for statistics.
    t_queued: int = 0
    t_start: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    on_cancel: Callable[[], None] | None = None

    def cancel(self) -> None:
        """The client went away: the model's ``is_cancelled()`` turns true; nothing more is
        delivered to the caller."""
        if self.cancelled:
            return
        self.cancelled = True
        if self.on_cancel is not None and not self.done:
            self.on_cancel()

    # Statistics for the request (set by the core); recorded when the final response passes.
    stats: ModelStats | None = None
    t_received: int = 0

    def send(self, response: InferResponse) -> None:
        if self.done:
            return
        if response.final:
            self.done = True
            if self.caller:
                from modelyard.scheduling.deadlock import release

                release(self)
            if self.stats is not None:
                t1 = time.monotonic_ns()
                if response.error is None:
                    self.stats.record_success(self.t_received, self.t_queued, self.t_start, t1,
                                              self.batch_size)  # fmt: skip
                else:
                    self.stats.record_failure(self.t_received, t1)
        self.on_response(response)


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

    @property
    def healthy(self) -> bool:
        return True
