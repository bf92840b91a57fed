"""The per-request context that core, schedulers and backends pass along.

The scheduler hands an instance a batch of :class:`RequestContext`; the instance delivers each
request's responses through ``ctx.send`` (exactly one final response per request, or several
for decoupled models).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelyard.errors import Cancelled, ErrorCode
from modelyard.serving import model_errors
from modelyard.serving.deadlock import release
from modelyard.types import InferResponse as InferResponseCls

if TYPE_CHECKING:
    from modelyard.serving.deadlock import Placed
    from modelyard.serving.stats import ModelStats
    from modelyard.tracing.trace import RequestTrace
    from modelyard.types import InferRequest, InferResponse

log = logging.getLogger("modelyard")

ResponseCallback = Callable[["InferResponse"], None]
_hook_ids = itertools.count(1)


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
    # Instances blocked until this request completes (BLS callers); see backends/python/server/bls.py.
    chain: frozenset[str] = frozenset()
    batch_size: int = 1  # the request's own batch dimension (1 for non-batching models)
    # For a blocking BLS call: the instance whose execute waits on it, and where it queued
    # (a scheduler with instances of its own; None for ensembles and iterative sequences,
    # which the deadlock check takes as able to progress).
    caller: str = ""
    scheduler: Placed | None = None
    nested: bool = False  # made by a request in flight (BLS call, ensemble step)
    # Timing (ns, time.monotonic_ns) for statistics.
    t_queued: int = 0
    t_start: int = 0

    on_cancel: Callable[[], None] | None = None
    # More listeners (BLS calls this request made, see backends/python/server/bls.py), by token.
    cancel_hooks: dict[int, Callable[[], None]] | None = None
    # Set by schedulers that can run a request again (iterative sequences): the model released
    # it with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE.
    reschedule: Callable[[RequestContext], None] | None = None
    # The request's trace (modelyard.tracing.trace.RequestTrace) when it is traced.
    trace: RequestTrace | None = None

    def cancel(self) -> None:
        """The client went away: the model's ``is_cancelled()`` turns true, and the BLS calls
        the request made are cancelled too. A request still queued ends at once with a
        CANCELLED error (the scheduler skips it)."""
        if self.cancelled:
            return
        self.cancelled = True
        if self.t_queued and not self.t_start and not self.done:
            r = self.request
            err = Cancelled("Request was cancelled")
            self.send(InferResponseCls(r.model_name, r.model_version, r.id, error=err))
            if self.on_cancel is not None:  # staged in a worker: its model sees it cancelled
                self.on_cancel()
        elif self.on_cancel is not None and not self.done:
            self.on_cancel()
        hooks = self.cancel_hooks
        if hooks:
            self.cancel_hooks = None
            for hook in list(hooks.values()):
                hook()

    def add_cancel_hook(self, hook: Callable[[], None]) -> int:
        if self.cancel_hooks is None:
            self.cancel_hooks = {}
        token = next(_hook_ids)
        self.cancel_hooks[token] = hook
        return token

    def remove_cancel_hook(self, token: int) -> None:
        if self.cancel_hooks is not None:
            self.cancel_hooks.pop(token, None)

    # Statistics for the request (set by the core); recorded when the final response passes.
    stats: ModelStats | None = None
    t_received: int = 0

    # An error response from the model (InferenceResponse(error=...)) was sent: the request
    # counts as failed (reason BACKEND), not as a success as in Triton 2.51.
    failed: bool = False
    # Triton's failure reason when it is not the error's (an ensemble's failed step: OTHER).
    fail_reason: str = ""
    # An iterative sequence's own: its inputs before control inputs, and whether it last ran
    # already cancelled (scheduling/iterative.py).
    own_inputs: int = 0
    ran_cancelled: bool = False
    responded: bool = False  # a response has been sent (the first one is timed)

    def send(self, response: InferResponse) -> None:
        if self.done:
            return
        if self.trace is not None:
            self.trace.on_response(self, response)
        if response.model_error:
            self.failed = True
        t1 = 0
        if not self.responded and not response.flag_only:  # Triton: no response, no time
            self.responded = True
            if self.stats is not None and self.stats.first_responses:
                t1 = time.monotonic_ns()
                self.stats.record_first_response(self.t_received, t1)
        if response.final:
            self.done = True
            if self.caller:
                release(self)
            if self.stats is not None:
                t1 = t1 or time.monotonic_ns()
                if response.error is None and not self.failed:
                    self.stats.record_success(
                        self.t_received, self.t_queued, self.t_start, t1, self.batch_size
                    )
                else:
                    reason = self._fail_reason(response)
                    self.stats.record_failure(self.t_received, t1, reason)
                    if reason == "BACKEND" and not self.failed and response.error is not None:
                        model_errors.report(response.model_name, response.error.message)
        try:
            self.on_response(response)
        except Exception:  # the sender (an instance, a scheduler) must not die of a sink's fault
            log.exception("delivering a response of '%s' failed", response.model_name)

    def _fail_reason(self, response: InferResponse) -> str:
        """Triton's reason label: cancelled, refused before running (queue full, timed out in
        the queue), failed while running, or another cause the sender names."""
        reason: str | None = self.fail_reason or None
        if reason:
            return reason
        code = response.error.code if response.error is not None else None
        if code is ErrorCode.CANCELLED:
            return "CANCELED"
        if self.failed:  # the model ran and answered with an error
            return "BACKEND"
        if not self.t_start:
            return "REJECTED" if code is ErrorCode.UNAVAILABLE else "OTHER"
        return "BACKEND"
