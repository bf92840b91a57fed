"""Frontend-side protocol extensions applied around a core inference: classification."""

from __future__ import annotations

from typing import Any

from modelyard.frontends.classify import classify
from modelyard.types import InferResponse


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
