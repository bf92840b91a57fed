"""Request release flags set by a model (``request.set_release_flags``): the model side, the
same in both execution modes (``server/reschedule.py`` is the server side).

``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` asks for the request to be executed again
(Triton's iterative sequences). Only a model configured with
``sequence_batching { iterative_sequence: true }`` may do it; its scheduler re-queues the
request on the same instance. Anywhere else the release is refused as Triton refuses it, and
(beyond Triton, where the client would wait forever) the request ends with that error.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("modelyard")

RESCHEDULE = 2  # TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


def is_iterative(config_json: str) -> bool:
    """Whether the model's (Triton JSON) config enables iterative sequence batching."""
    if not config_json:
        return False
    seq = json.loads(config_json).get("sequence_batching") or {}
    return bool(seq.get("iterative_sequence", False))


def rescheduled(requests: list[Any]) -> list[int]:
    """Indices of the pb_utils requests the model released with RESCHEDULE."""
    return [i for i, r in enumerate(requests) if r._release_flags & RESCHEDULE]


def returned_for_rescheduled(response: Any) -> str:
    """Triton's error for a response returned for a rescheduled request (must be None)."""
    return (
        "Expected a None object in the execute function return list for reschduled request, "
        f"found type '{type(response)}'."
    )


def refuse(pb: Any, requests: list[Any], indices: list[int]) -> None:
    """Model side, for a model that may not reschedule: log Triton's error and end each
    request with it through its response sender (unless the model already closed it)."""
    for i in indices:
        request = requests[i]
        log.error("Failed to release request: %s", NOT_CONFIGURED)
        request._release_flags = 1
        error = pb.TritonError(NOT_CONFIGURED, pb.TritonError.INVALID_ARG)
        try:
            request.get_response_sender().send(
                pb.InferenceResponse(error=error), flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        except pb.TritonModelException:
            pass  # already answered and closed
