"""Loading and unloading models (the model repository extension, start-up, reloads): one load
per model at a time, at most ``--model-load-thread-count`` at once, a reload keeps the old
versions serving until the new ones are up.

A part of :class:`~modelyard.core.api.InferenceServer`, which delegates its model control
here; where a load's versions run is the ``VersionPlacement`` it is built with
(``core/placement.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelyard.core.ensembles import EnsembleLoadError
from modelyard.core.file_override import remove as remove_override
from modelyard.core.index import repository_index
from modelyard.core.loading import ModelLoads
from modelyard.core.model_version import ModelVersion
from modelyard.core.response_cache import attach as attach_cache
from modelyard.errors import InvalidArgument, ModelyardError, Unavailable, VersionLoadError
from modelyard.serving.first_response import histogram_for
from modelyard.serving.summaries import LatencySummaries

if TYPE_CHECKING:
    from modelyard.core.parts import Loads
    from modelyard.core.placement import ControlEvents, VersionPlacement
    from modelyard.core.response_cache import ResponseCache

log = logging.getLogger("modelyard")


class ModelControl:
    def __init__(
        self,
        core: Loads,
        placement: VersionPlacement,
        events: ControlEvents | None = None,
        response_cache: ResponseCache | None = None,
    ) -> None:
        self.core = core  # what the placement loads for (ensembles, BLS, the host)
        self.options = core.options
        self.registry = core.registry
        self.placement = placement
        self.events = events
        self.response_cache = response_cache
        self.loads = ModelLoads(core.options.load_threads)
        # Replaced or unloaded versions still draining, by the task retiring them.
        self.retiring: dict[asyncio.Future[None], list[ModelVersion]] = {}

    async def load(
        self,
        name: str,
        override: Any | None = None,
        files: dict[str, bytes] | None = None,
        from_model: bool = False,
    ) -> None:
        """Load (or reload) ``name`` now, whatever the control mode (start-up, polling,
        ``dev``, ``check``, ``modelyard.testing``, an ensemble's steps): raises the load's
        ModelyardError. ``load_model`` is the model-repository API's checked entry. One load
        per model at a time, at most ``--model-load-thread-count`` at once; ``files``
        materialise in a private folder."""
        async with self.loads.lock(name):
            async with self.loads.slot(from_model):
                # (written off the event loop: override files may be large)
                model_dir = await asyncio.to_thread(self.loads.prepare, name, override, files)
                try:
                    old = await self._load_locked(name, override, files, model_dir)
                except BaseException:
                    remove_override(model_dir)  # the folder of the serving load stays
                    entry = self.registry.entries.get(name)
                    if (
                        model_dir is not None
                        and entry is not None
                        and not entry.versions
                        and name not in self.registry.locations
                    ):
                        del self.registry.entries[name]  # no ghost of a model that never was
                    raise
            replaced_dir = self.loads.adopt(name, model_dir)
        # The new versions serve; the old ones drain their requests, then finalize, holding
        # neither a load slot nor the model's lock.
        await self._retire(list(old.values()), replaced_dir, from_model)

    async def _load_locked(
        self, name: str, override: Any | None, files: dict[str, bytes] | None, model_dir: Any
    ) -> dict[int, ModelVersion]:
        """Load the new versions and switch requests to them; return the replaced ones."""
        location = model_dir if model_dir is not None else self.registry.locations.get(name)
        if location is None:
            raise ModelyardError(f"failed to load '{name}', failed to poll from model repository")
        if name in self.registry.errors and model_dir is None:  # the index tells why
            raise ModelyardError(f"failed to load '{name}', failed to poll from model repository")
        entry = self.registry.entry(name)
        # A reload keeps the old versions serving (and READY) until the new ones are up.
        if not entry.versions:
            entry.state, entry.reason = "LOADING", ""
        log.info("loading: %s", name)
        started = time.monotonic()
        try:
            versions = await self.placement.start(self.core, name, str(location), override, files)
        except EnsembleLoadError as e:
            if not entry.versions:  # Triton lists such an ensemble with no state
                entry.state, entry.reason = "", ""
            log.error("failed to load '%s': %s", name, e.message)
            raise InvalidArgument(f"load failed for model '{name}': {e.message}\n") from None
        except VersionLoadError as e:
            if not entry.versions:
                entry.state, entry.reason = "UNAVAILABLE", e.reason
                entry.last_versions = [e.version]
            log.error("failed to load '%s' version %d: %s", name, e.version, e.reason)
            raise InvalidArgument(f"load failed for model '{name}': {e.message}") from None
        except ModelyardError as e:
            if not entry.versions:
                entry.state, entry.reason = "UNAVAILABLE", e.message
            log.error("failed to load '%s': %s", name, e.message)
            raise
        except Exception as e:
            if not entry.versions:
                entry.state, entry.reason = "UNAVAILABLE", f"{type(e).__name__}: {e}"
            log.exception("failed to load '%s'", name)
            raise ModelyardError(f"failed to load '{name}': {e}") from e
        old = entry.versions
        namespace = self.registry.identity(name).namespace  # ("" without namespacing)
        for mv in versions:
            mv.stats.namespace = namespace
            attach_cache(mv, self.response_cache)
            if self.options.metrics.summaries:
                mv.stats.summaries = LatencySummaries(cached=mv.stats.cache_enabled)
            histograms = self.options.metrics.histograms
            mv.stats.track_first_responses(
                histogram_for(mv.config) if histograms else None, live=mv.decoupled
            )
        entry.versions = {mv.version: mv for mv in versions}
        entry.state, entry.reason = "READY", ""
        took = time.monotonic() - started
        for mv in versions:
            log.info("successfully loaded '%s' version %d in %.2f s", name, mv.version, took)
        if self.events is not None:
            self.events.switched(name)  # the new versions serve; the old ones drain
        return old

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        self.registry.scan()
        return repository_index(self.registry, ready_only)

    def _require_explicit(self) -> None:
        if self.options.control_mode != "explicit":
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

    async def load_model(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        from_model: bool = False,
    ) -> None:
        # Models may load what they depend on in every control mode (beyond Triton).
        if not from_model:
            self._require_explicit()
        from modelyard.config.repository import validate_model_name

        validate_model_name(name)
        if files and not config:
            from modelyard.core.file_override import CONFIG_REQUIRED, load_failed

            raise load_failed(name, CONFIG_REQUIRED)
        override = None
        if config:
            from modelyard.config.pbtxt import config_from_json

            override = config_from_json(config)
        self.registry.scan()
        # With namespacing a name loads in every repository holding it, as in Triton.
        keys = [name] if files else self.registry.keys_named(name, self.registry.locations)
        if len(keys) == 1:
            await self.load(keys[0], override, files, from_model)
            return
        loads = [self.load(k, override, None, from_model) for k in keys]
        failed = [r for r in await asyncio.gather(*loads, return_exceptions=True) if r]
        if failed:
            raise failed[0]

    async def unload_model(
        self, name: str, unload_dependents: bool = False, from_model: bool = False
    ) -> None:
        if not from_model:
            self._require_explicit()
        names = self.registry.keys_named(name, self.registry.entries)  # (all its namespaces)
        if unload_dependents:  # ensembles first, so none calls a model that is going away
            from modelyard.core.dependents import dependents

            configs = {
                n: [mv.config for mv in e.versions.values()]
                for n, e in self.registry.entries.items()
            }
            names = [*dependents(name, configs), *names]
        for n in names:
            async with self.loads.lock(n):
                if self.events is None:
                    await self._unload(n, from_model)
                    continue
                self.events.unloading(n)
                try:
                    await self._unload(n, from_model)
                finally:
                    self.events.unloaded(n)

    async def _unload(self, name: str, from_model: bool = False) -> None:
        """Stop taking requests for ``name``, drain in-flight ones, then finalize."""
        entry = self.registry.entries.get(name)
        if entry is None:
            return
        if not entry.versions:
            # A model that failed to load keeps its reason (Triton 2.51); others are unloaded.
            if entry.state != "UNAVAILABLE":
                entry.state, entry.reason = "UNAVAILABLE", "unloaded"
            return
        versions, entry.versions = entry.versions, {}
        entry.last_versions = sorted(versions)
        entry.state, entry.reason = "UNLOADING", ""

        def unloaded() -> None:
            if not entry.versions:  # (not loaded again meanwhile)
                entry.state, entry.reason = "UNAVAILABLE", "unloaded"

        await self._retire(list(versions.values()), self.loads.take(name), from_model, unloaded)

    async def _retire(
        self,
        versions: list[ModelVersion],
        folder: Path | None,
        from_model: bool,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Drain ``versions`` (no longer served), finalize them, remove their override
        ``folder`` and call ``then``. A model's own control call does not wait for it: its
        request may be among those draining (a model reloading or unloading itself from
        execute), and Triton answers it once the new versions serve. Shutdown waits for
        what is still retiring (core/shutdown.py)."""

        async def retire() -> None:
            await asyncio.gather(*(mv.stop(self.options.exit_timeout) for mv in versions))
            remove_override(folder)
            if then is not None:
                then()

        task = asyncio.ensure_future(retire())
        self.retiring[task] = versions
        task.add_done_callback(self.retiring.pop)
        if not from_model:
            await asyncio.shield(task)
