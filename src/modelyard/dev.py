"""``modelyard dev REPOSITORY``: the server for writing models.

It is ``serve`` (same flags, same endpoints) with Python models in this process, so
``breakpoint()`` and IDE debuggers stop in ``execute``, and a watcher (``watchfiles``) on the
repositories: when a model's files change, that model alone reloads (changes are gathered
for a moment first, so a save of several files is one reload); a new folder loads, a removed
one unloads. A reload brings the new version up before the old one stops, so a broken edit
keeps the last good version serving. Each load and reload is logged with its time, and each
failure with the file, line and source line of the mistake.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelyard.error_location import describe
from modelyard.errors import ModelyardError
from modelyard.server import serve
from modelyard.server_config import ServerConfig
from modelyard.serving import model_errors

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")

# Changes are gathered until none came for STEP_MS (at most DEBOUNCE_MS), then the models
# they touch reload: a save shows up well within a second.
STEP_MS = 50
DEBOUNCE_MS = 400


def run_dev(config: ServerConfig) -> int:
    """Serve ``config`` (``dev``'s flags: serve's, its repository first) as the dev server."""
    config = in_process(config)
    # A source edited within the second its bytecode was cached could load stale code.
    sys.dont_write_bytecode = True
    log.addFilter(_one_report_per_failed_load)
    repositories = config.core.repositories
    return serve(config, setup=lambda core: _start(core, repositories))


def in_process(config: ServerConfig) -> ServerConfig:
    """``config`` with Python models in this process (debuggers, ``breakpoint()``), unless
    ``--backend-config python,execution-mode=...`` says otherwise; a model's own
    EXECUTION_ENV_PATH still wins."""
    load = config.core.load
    python = {"execution-mode": "in-process", **load.settings("python")}
    load = dataclasses.replace(load, backend_settings={**load.backend_settings, "python": python})
    return dataclasses.replace(config, core=dataclasses.replace(config.core, load=load))


def _one_report_per_failed_load(record: logging.LogRecord) -> bool:
    """dev reports a failed load itself, at the file and line with the source; the server's
    one-line form of the same failure (its escaped traceback) would say it twice."""
    return not (
        record.module == "model_control" and record.getMessage().startswith("failed to load")
    )


async def _start(core: InferenceServer, repositories: list[str]) -> Watcher:
    for entry in core.registry.entries.values():
        if not entry.versions and entry.reason:  # the initial load's failures, pointed at
            log.error("model '%s' is not serving:", entry.name)
            for line in describe(entry.reason):
                log.error("%s", line)
    model_errors.listen(ExecuteErrors())
    watcher = Watcher(core, [Path(r).absolute() for r in repositories])
    await watcher.start()
    log.info("watching %s for changes", ", ".join(repositories))
    return watcher


class ExecuteErrors:
    """Prints a failed ``execute`` once, at the model's file and line: every request of the
    batch fails with the same message, and only the first of them is shown."""

    def __init__(self, window_s: float = 1.0) -> None:
        self._window_s = window_s
        self._last: tuple[str, str] = ("", "")
        self._at = 0.0

    def __call__(self, model: str, message: str) -> None:
        now = time.monotonic()
        if (model, message) == self._last and now - self._at < self._window_s:
            return
        self._last, self._at = (model, message), now
        log.error("model '%s': execute failed:", model)
        for line in describe(message):
            log.error("%s", line)


class Watcher:
    """Reloads the models whose files change under ``repositories``."""

    def __init__(self, core: InferenceServer, repositories: list[Path]) -> None:
        self.core = core
        self.repositories = repositories
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start watching; returns once changes are seen (awatch sets up its inotify watch
        synchronously in its first step, which the one loop round here lets run: an edit made
        after "watching ... for changes" is never missed)."""
        self._task = asyncio.get_running_loop().create_task(self._run())
        await asyncio.sleep(0)

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 5.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._task.cancel()

    async def _run(self) -> None:
        from watchfiles import awatch

        async for changes in awatch(
            *self.repositories,
            stop_event=self._stop,
            step=STEP_MS,
            debounce=DEBOUNCE_MS,
        ):
            try:
                await self.apply(path for _change, path in changes)
            except Exception:  # a failed reload must never end watching
                log.exception("reloading after a change failed")

    def models_of(self, paths: Iterable[str]) -> dict[str, set[str]]:
        """The models the changed ``paths`` belong to, with the files that changed."""
        touched: dict[str, set[str]] = {}
        for path in paths:
            p = Path(path)
            for repo in self.repositories:
                try:
                    parts = p.relative_to(repo).parts
                except ValueError:
                    continue
                if parts:
                    files = touched.setdefault(parts[0], set())
                    if p.exists() or not p.parent.exists():  # not an editor's passing file
                        files.add("/".join(parts[1:]) or parts[0])
                break
        return touched

    async def apply(self, paths: Iterable[str]) -> None:
        """Reload the models ``paths`` belong to; load new ones, unload removed ones."""
        touched = self.models_of(paths)
        if not touched:
            return
        core = self.core
        core.registry.scan()
        present = [n for n in sorted(touched) if n in core.registry.locations]
        for name in sorted(set(touched) - set(present)):
            entry = core.registry.entries.get(name)
            if entry is not None and entry.versions:
                await core.unload_model(name, from_model=True)
                log.info("model '%s' was removed: unloaded", name)
        from modelyard.core.ensembles import ensembles_last

        for group in ensembles_last(core.registry.locations, present):  # steps first
            await asyncio.gather(*(self._reload(n, touched[n]) for n in group))

    async def _reload(self, name: str, files: set[str]) -> None:
        entry = self.core.registry.entries.get(name)
        serving = sorted(entry.versions) if entry is not None else []
        what = "reloading" if serving else "loading"
        log.info("%s '%s' (changed: %s)", what, name, ", ".join(sorted(files)) or "files")
        started = time.monotonic()
        try:
            await self.core.load(name)
        except ModelyardError as e:
            took = time.monotonic() - started
            kept = f"; version {serving[-1]} keeps serving" if serving else ""
            action = "reload" if serving else "load"
            log.error("%s of '%s' failed after %.2f s%s:", action, name, took, kept)
            for line in describe(_reason(self.core, name, e)):
                log.error("%s", line)
            return
        entry = self.core.registry.entries.get(name)
        versions = sorted(entry.versions) if entry is not None else []
        log.info(
            "%s '%s' version %s in %.2f s",
            "reloaded" if serving else "loaded",
            name,
            ", ".join(map(str, versions)),
            time.monotonic() - started,
        )


_LOAD_FAILED = re.compile(r"^load failed for model '[^']*': version \d+ is at UNAVAILABLE state: ")


def _reason(core: Any, name: str, error: ModelyardError) -> str:
    """What went wrong, without the load API's wrapper around the model's own reason."""
    entry = core.registry.entries.get(name)
    if entry is not None and not entry.versions and entry.reason:
        return str(entry.reason)
    return _LOAD_FAILED.sub("", error.message).rstrip(";\n")
