"""Loading an ensemble (``platform: "ensemble"``): its config, its step models, its scheduler.

As in Triton, the step models must be loaded first: in explicit mode loading an ensemble loads
the step models it names that are not loaded yet; while the server starts, the ensemble waits
for the step models loading beside it. A step model that is not available fails the ensemble
with Triton's message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelyard.config import render
from modelyard.config.normalize import normalize_config
from modelyard.config.pbtxt import parse_config_text
from modelyard.config.repository import available_versions, select_versions
from modelyard.config.validate import validate_config
from modelyard.core.model_version import ModelVersion
from modelyard.core.validation import ModelSignature, signature_from_config
from modelyard.errors import InvalidArgument, ModelyardError
from modelyard.scheduling.ensemble import EnsembleScheduler, Step, steps_from_config
from modelyard.serving.stats import ModelStats

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

# A step model still loading is waited for this long (model initialization can be slow).
STEP_LOAD_WAIT_S = 600.0


class EnsembleLoadError(InvalidArgument):
    """An ensemble whose steps do not fit its step models. Triton answers the load with
    ``load failed for model '<m>': <message>\n`` and lists the ensemble with no state."""


async def load_ensemble(
    name: str, model_dir: str, cfg: Any, core: InferenceServer
) -> list[ModelVersion]:

    cfg = normalize_config(cfg, name, model_dir=model_dir)
    validate_config(cfg)
    versions = select_versions(cfg, available_versions(model_dir))
    steps = steps_from_config(cfg)
    models = sorted({s.model for s in steps})
    missing = [
        m for m in models if m not in core.registry.locations and m not in core.registry.entries
    ]
    for model in models:
        if model not in missing:
            await _ensure_loaded(core, name, model)
    if missing:
        raise EnsembleLoadError(
            f"ensemble {name} contains models that are not available or "
            f"ambiguous: {', '.join(missing)}"
        )
    steps = [replace(step, decoupled=_check_step(core, name, step)) for step in steps]
    # Triton derives the ensemble's transaction policy from its steps: decoupled if one is.
    cfg.model_transaction_policy.decoupled = any(step.decoupled for step in steps)
    signature = signature_from_config(cfg)
    out: list[ModelVersion] = []
    for v in sorted(versions, reverse=True):
        sched = EnsembleScheduler(name, steps, core.submit, list(signature.outputs))
        sched.stats = ModelStats(name, str(v))
        sched.call_graph = core.call_graph
        out.append(
            ModelVersion(
                name=name,
                version=v,
                config=cfg,
                config_json=render.config_to_json(cfg),
                signature=signature,
                decoupled=bool(cfg.model_transaction_policy.decoupled),
                instances=[],
                scheduler=sched,
                stats=sched.stats,
            )
        )
    return out


def _loading_at_start(core: InferenceServer, model: str) -> bool:
    """Whether the server's start-up load includes ``model`` (and has not reached it yet)."""
    if core._started:
        return False
    opts = core.options
    return opts.control_mode != "explicit" or "*" in opts.load_models or model in opts.load_models


async def _ensure_loaded(core: InferenceServer, ensemble: str, model: str) -> None:
    deadline = time.monotonic() + STEP_LOAD_WAIT_S
    while True:
        entry = core.registry.entries.get(model)
        state = entry.state if entry is not None else ""
        if state == "READY":
            return
        waiting = state in ("LOADING", "UNLOADING") or (
            state == "" and _loading_at_start(core, model)
        )
        if not waiting:
            break
        if time.monotonic() > deadline:
            break
        # Load time only: a step model loading beside the ensemble is checked on every tick.
        await asyncio.sleep(0.02)
    if core.options.control_mode == "explicit" and model in core.registry.locations:
        try:
            await core._load(model, from_model=True)  # the ensemble's load holds a slot
        except ModelyardError:
            pass  # reported below as the ensemble's dependency error
    entry = core.registry.entries.get(model)
    if entry is None or entry.state != "READY":
        raise EnsembleLoadError(
            f"ensemble '{ensemble}' depends on '{model}' whose required version -1 is not loaded"
        )


def _check_step(core: InferenceServer, ensemble: str, step: Step) -> bool:
    """Check the step against its model; return whether that model is decoupled."""
    try:
        mv = core.get_version(step.model, step.version)
    except ModelyardError:
        raise EnsembleLoadError(
            f"ensemble '{ensemble}' depends on '{step.model}' whose required version "
            f"{step.version or -1} is not loaded"
        ) from None
    sig: ModelSignature = mv.signature
    for model_input, tensor in step.inputs:
        if model_input not in sig.inputs:
            raise EnsembleLoadError(
                f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping to non-existing "
                f"input {model_input} in model {step.model}"
            )
    for model_output, tensor in step.outputs:
        if model_output not in sig.outputs:
            raise EnsembleLoadError(
                f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped from non-existing "
                f"output {model_output} in model {step.model}"
            )
    return bool(mv.decoupled)


def ensembles_last(locations: Mapping[str, Path], names: list[str]) -> list[list[str]]:
    """``names`` in two groups to load one after the other: other models, then ensembles
    (an ensemble needs its step models loaded)."""
    plain: list[str] = []
    ensembles: list[str] = []
    for name in names:
        (ensembles if _is_ensemble(locations.get(name)) else plain).append(name)
    return [g for g in (plain, ensembles) if g]


def _is_ensemble(model_dir: Path | None) -> bool:
    if model_dir is None:
        return False
    try:
        text = (model_dir / "config.pbtxt").read_text(errors="replace")
    except OSError:
        return False
    if "ensemble" not in text:  # cheap test first: most configs are not ensembles
        return False
    try:
        return bool(parse_config_text(text, str(model_dir / "config.pbtxt")).platform == "ensemble")
    except ModelyardError:
        return False
