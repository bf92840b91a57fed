"""Loading an ensemble (``platform: "ensemble"``): its config, its step models, its scheduler.

As in Triton, the step models must be loaded first: in explicit mode loading an ensemble loads
the step models it names that are not loaded yet; while the server starts, the ensemble waits
for the step models loading beside it. A step model that is not available fails the ensemble
with Triton's message. With ``--model-namespacing`` a step calls the copy of its model in the
ensemble's own repository, else the only copy there is (``ModelRegistry.step_key``), chosen
again for every request, so a copy that appears or goes is followed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelyard.config import render
from modelyard.config.normalize import normalize_config
from modelyard.config.pbtxt import parse_config_text
from modelyard.config.repository import available_versions, namespaced_key, select_versions
from modelyard.config.validate import validate_config
from modelyard.core.model_version import ModelVersion
from modelyard.core.validation import ModelSignature, signature_from_config
from modelyard.errors import InvalidArgument, ModelyardError
from modelyard.scheduling.ensemble import EnsembleScheduler, Step, SubmitFn, steps_from_config
from modelyard.serving.context import RequestContext
from modelyard.serving.stats import ModelStats
from modelyard.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from modelyard.core.parts import Loads

# A step model still loading is waited for this long (model initialization can be slow).
STEP_LOAD_WAIT_S = 600.0


class EnsembleLoadError(InvalidArgument):
    """An ensemble whose steps do not fit its step models. Triton answers the load with
    ``load failed for model '<m>': <message>\n`` and lists the ensemble with no state."""


async def load_ensemble(name: str, model_dir: str, cfg: Any, core: Loads) -> list[ModelVersion]:

    cfg = normalize_config(cfg, name, model_dir=model_dir)
    validate_config(cfg)
    versions = select_versions(cfg, available_versions(model_dir))
    steps = steps_from_config(cfg)
    models = sorted({s.model for s in steps})
    registry = core.registry
    namespace = registry.namespace_at(model_dir)
    keys = {m: registry.step_key(m, namespace) for m in models}
    missing = [m for m in models if keys[m] is None]
    for model in models:
        key = keys[model]
        if key is not None:
            await _ensure_loaded(core, name, key)
            await _load_other_copies(core, model, key)
    if missing:
        raise EnsembleLoadError(
            f"ensemble {namespaced_key(namespace, name)} contains models that are not "
            f"available or ambiguous: {', '.join(missing)}"
        )
    steps = [
        replace(step, decoupled=_check_step(core, name, step, str(keys[step.model])))
        for step in steps
    ]
    for cfg_step in cfg.ensemble_scheduling.step:  # (rendered by the config endpoint)
        cfg_step.model_namespace = registry.identity(str(keys[cfg_step.model_name])).namespace
    # Triton derives the ensemble's transaction policy from its steps: decoupled if one is.
    cfg.model_transaction_policy.decoupled = any(step.decoupled for step in steps)
    signature = signature_from_config(cfg)
    out: list[ModelVersion] = []
    for v in sorted(versions, reverse=True):
        submit = _submit_in(core, namespace) if registry.namespacing else core.submit
        sched = EnsembleScheduler(name, steps, submit, list(signature.outputs))
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


def _loading_at_start(core: Loads, model: str) -> bool:
    """Whether the server's start-up load includes ``model`` (and has not reached it yet)."""
    if core.started:
        return False
    opts = core.options
    named = core.registry.name_of(model) in opts.load_models
    return opts.control_mode != "explicit" or "*" in opts.load_models or named


async def _ensure_loaded(core: Loads, ensemble: str, model: str) -> None:
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
            await core.load(model, from_model=True)  # the ensemble's load holds a slot
        except ModelyardError:
            pass  # reported below as the ensemble's dependency error
    entry = core.registry.entries.get(model)
    if entry is None or entry.state != "READY":
        raise EnsembleLoadError(
            f"ensemble '{ensemble}' depends on '{core.registry.name_of(model)}' whose required "
            "version -1 is not loaded"
        )


async def _load_other_copies(core: Loads, model: str, key: str) -> None:
    """In explicit mode Triton loads a step's model in every repository holding it (it
    polls the name), not only the copy the ensemble calls: so do we, failures ignored."""
    registry = core.registry
    if core.options.control_mode != "explicit" or model not in registry.shared:
        return
    for other in registry.keys_named(model, registry.locations):
        entry = registry.entries.get(other)
        if other != key and (entry is None or entry.idle):
            try:
                await core.load(other, from_model=True)
            except ModelyardError:
                pass  # (its index entry tells why)


def _submit_in(core: Loads, namespace: str) -> SubmitFn:
    """Submit an ensemble's step requests to the copy of each step model the ensemble in
    ``namespace`` calls, looked up per request."""
    registry = core.registry

    def submit(
        request: InferRequest, on_response: Callable[[InferResponse], None]
    ) -> RequestContext:
        key = registry.step_key(request.model_name, namespace)
        if key is not None:
            request.model_name = key  # (a step's own request: nobody else reads the name)
        return core.submit(request, on_response)

    return submit


def _check_step(core: Loads, ensemble: str, step: Step, key: str) -> bool:
    """Check the step against its model (``key``); return whether that model is decoupled."""
    try:
        mv = core.get_version(key, step.version)
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
