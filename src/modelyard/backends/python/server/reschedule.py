"""A request the model released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` goes back to
its scheduler (iterative sequences), or ends with Triton's error where that is not allowed
(see protocol/release_flags.py)."""

from __future__ import annotations

from modelyard.backends.python.protocol.release_flags import NOT_CONFIGURED
from modelyard.errors import InvalidArgument
from modelyard.serving.context import RequestContext
from modelyard.types import InferResponse


def reschedule(ctx: RequestContext) -> None:
    """Server side: hand a request the model rescheduled back to its scheduler."""
    if ctx.done:
        return
    ctx.on_cancel = None  # the next execution installs its own
    if ctx.reschedule is None:
        r = ctx.request
        ctx.send(
            InferResponse(
                r.model_name, r.model_version, r.id, error=InvalidArgument(NOT_CONFIGURED)
            )
        )
        return
    ctx.reschedule(ctx)
