"""Frontend-side protocol extensions applied around a core inference: classification, and the
shared-memory check used while the core has no shared-memory support."""

from __future__ import annotations

from typing import Any

from modelyard.errors import NotFound
from modelyard.frontends.grpc.codec import Decoded
from modelyard.frontends.http.classify import classify  # pure numpy; shared by both frontends
from modelyard.types import InferRequest, InferResponse

_REGION = "shared_memory_region"


def check_shared_memory(core: Any, request: InferRequest) -> None:
    """Without the core's shared-memory extension no region can be registered, so a request
    naming one names an unknown region (Triton's NOT_FOUND, as the HTTP frontend answers)."""
    if hasattr(core, "shm_register"):
        return
    for t in request.inputs:
        region = t.parameters.get(_REGION)
        if region is not None:
            raise NotFound(f"Unable to find shared memory region: '{region}'")
    for out in request.outputs or ():
        region = out.parameters.get(_REGION)
        if region is not None:
            raise NotFound(f"Unable to find shared memory region: '{region}'")


def prepare(core: Any, decoded: Decoded) -> None:
    """Checks to run on a decoded request before it goes to the core."""
    if decoded.shm:
        check_shared_memory(core, decoded.request)


def classify_outputs(core: Any, response: InferResponse, classes: dict[str, int]) -> None:
    """Replace each output the client asked ``class_count`` for with its top-k classes."""
    cfg = core.model_config(response.model_name, response.model_version)
    batching = int(cfg.max_batch_size) > 0
    labels_of = getattr(core, "output_labels", None)
    for i, tensor in enumerate(response.outputs):
        k = classes.get(tensor.name)
        if not k:
            continue
        labels = None
        if labels_of is not None:
            labels = labels_of(response.model_name, response.model_version, tensor.name)
        response.outputs[i] = classify(tensor, k, batching, labels)
