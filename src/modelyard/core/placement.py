"""Where the versions of a load run: the part of model control that differs between one
server and a Ray cluster, handed to the core when it is built (never by subclassing it).

``ModelControl`` does what every load and unload has in common (one load per model at a time,
the load slots, ``file:`` overrides, states and Triton's error texts, reloads that keep the
old versions serving, draining). A ``VersionPlacement`` starts the versions a load selects:
``LocalPlacement`` here, through the one loading pipeline; the Ray controller deploys Serve
applications instead, and a replica starts its own model only. ``ControlEvents`` hears when
the serving versions change (the Ray controller publishes its table on each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from modelyard.core.loader import load_model

if TYPE_CHECKING:
    from modelyard.core.model_version import ModelVersion
    from modelyard.core.parts import Loads


class VersionPlacement(Protocol):
    async def start(
        self,
        core: Loads,
        name: str,
        location: str,
        override: Any | None,
        files: dict[str, bytes] | None,
    ) -> list[ModelVersion]:
        """Start the versions a load of ``name`` (a registry key) selects from the model
        folder ``location`` (the load's private folder when it has ``files``: the load
        request's ``file:`` overrides) and ``override`` (its config, if any); raise the
        ModelyardError (or VersionLoadError, EnsembleLoadError) that says why not."""
        ...


class ControlEvents(Protocol):
    """What model control reports as it changes which versions serve."""

    def switched(self, name: str) -> None:
        """A load of ``name`` succeeded: its new versions serve, the old ones drain."""
        ...

    def unloading(self, name: str) -> None:
        """An unload of ``name`` begins: no request may go to it from now on."""
        ...

    def unloaded(self, name: str) -> None:
        """That unload is over (its versions are gone, or it failed)."""
        ...


class LocalPlacement:
    """One server's placement: the versions start in this process (``core/loader.py``)."""

    async def start(
        self,
        core: Loads,
        name: str,
        location: str,
        override: Any | None,
        files: dict[str, bytes] | None,
    ) -> list[ModelVersion]:
        model = core.registry.name_of(name)  # (a key with namespacing: the model is its name)
        return await load_model(model, location, core.options.load, core, override)
