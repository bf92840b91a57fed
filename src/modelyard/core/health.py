"""Model and server readiness that tell the truth.

As Triton 26 (``TritonModel::IsReady``): a loaded model version is ready while every one of
its instances is, i.e. its worker is live and initialized (not dead, not restarting) and the
model's own ``is_ready()``, when it has one, says so. The synchronous checks look at
liveness only and run no model code; the ``check_*`` coroutines also ask the models
(bounded: readiness.py). Triton logs why a model is not ready at verbose level 1; so do we.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelyard.core.model_version import ModelVersion
    from modelyard.core.registry import ModelEntry

log = logging.getLogger("modelyard")


def version_trouble(mv: ModelVersion) -> str:
    """Why a loaded version cannot serve as it should ("" when every instance is healthy)."""
    for instance in mv.instances:
        if not instance.healthy:
            return instance.not_ready_reason or f"instance '{instance.name}' is not healthy"
    return ""


async def check_version(mv: ModelVersion) -> str:
    """``version_trouble``, then each instance's own readiness check (concurrently)."""
    trouble = version_trouble(mv)
    if not trouble:
        results = await asyncio.gather(*(i.check_ready() for i in mv.instances))
        trouble = next((r for r in results if r), "")
    if trouble:
        log.debug("Model '%s' version %d is not ready: %s", mv.name, mv.version, trouble)
    return trouble


def version_state(entry: ModelEntry, mv: ModelVersion) -> tuple[str, str]:
    """The state and reason the repository index shows for one version: READY but with an
    instance down (its worker restarting) is UNAVAILABLE, with the reason."""
    if entry.state == "READY":
        trouble = version_trouble(mv)
        if trouble:
            return "UNAVAILABLE", trouble
    return entry.state, entry.reason


def counts_as_ready(entry: ModelEntry) -> bool:
    """What strict server readiness asks of one model (Triton: READY, or unloaded)."""
    if entry.state == "" and not entry.versions:
        return True  # never tried to load
    if entry.state != "READY":
        return entry.reason == "unloaded"
    return not any(version_trouble(mv) for mv in entry.versions.values())


async def check_entry(entry: ModelEntry) -> bool:
    """``counts_as_ready``, then the models' own readiness checks of a READY model."""
    if not counts_as_ready(entry):
        return False
    if entry.state != "READY":
        return True
    results = await asyncio.gather(*(check_version(mv) for mv in entry.versions.values()))
    return not any(results)
