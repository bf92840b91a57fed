"""Which loaded models depend on a model: ensembles whose ``ensemble_scheduling`` steps name
it, directly or through other ensembles (``unload_dependents``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def step_models(config: Any) -> set[str]:
    """The models an ensemble config's steps call (empty for any other model)."""
    if config is None or not config.HasField("ensemble_scheduling"):
        return set()
    return {step.model_name for step in config.ensemble_scheduling.step if step.model_name}


def dependents(name: str, configs: Mapping[str, Iterable[Any]]) -> list[str]:
    """Every model whose ensemble steps reach ``name``, nearest first (an ensemble before an
    ensemble that calls it), ``name`` itself excluded. ``configs`` maps each loaded model to
    the configs of its loaded versions."""
    uses: dict[str, set[str]] = {
        model: set().union(*(step_models(c) for c in cfgs)) for model, cfgs in configs.items()
    }
    found: list[str] = []
    frontier = [name]
    while frontier:
        target = frontier.pop(0)
        for model in sorted(uses):
            if target in uses[model] and model != name and model not in found:
                found.append(model)
                frontier.append(model)
    return found
