"""``--model-control-mode poll``: rescan the repositories every ``--repository-poll-secs``.

Each poll compares a fingerprint of every model folder (path, size and modification time of
each file and folder in it) with the previous poll's:

- a new folder is loaded, a vanished one is unloaded, a changed one is reloaded; models whose
  files did not change are left alone;
- a reload brings the new version up before the old one stops (see ``ModelControl.load``),
  and a failed reload leaves the old version serving;
- a failed load is retried as soon as the model's files change again (Triton 2.51 stops
  noticing changes after one failed load: server#6534).

Only models found in the repositories are managed here; a model a BLS model loaded from
``file:`` overrides is not unloaded by a poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelyard.core.parts import Loads

log = logging.getLogger("modelyard")

Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(model_dir: Path) -> Fingerprint:
    """What changes when any file of the model changes (symlinks followed, as Triton does)."""
    items: list[tuple[str, int, int]] = []
    try:
        st = os.stat(model_dir)
        items.append((str(model_dir), st.st_mtime_ns, 0))  # a move to another repository counts
    except OSError:
        return ()
    for root, dirs, files in os.walk(model_dir, followlinks=True):
        dirs.sort()
        for name in [*dirs, *sorted(files)]:
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:  # vanished while we looked: the next poll sees the result
                continue
            items.append((os.path.relpath(path, model_dir), st.st_mtime_ns, st.st_size))
    return tuple(items)


def snapshot(locations: dict[str, Path]) -> dict[str, Fingerprint]:
    return {name: fingerprint(path) for name, path in locations.items()}


class RepositoryPoller:
    def __init__(self, core: Loads, interval: float) -> None:
        self.core = core
        self.interval = max(0.05, interval)
        self.seen: dict[str, Fingerprint] = {}
        self._task: asyncio.Task[None] | None = None

    def prime(self) -> None:
        """Remember the repositories as the first load finds them."""
        self.seen = snapshot(dict(self.core.registry.locations))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # a poll must never end polling
                log.exception("failed to poll the model repositories")

    async def poll(self) -> None:
        """One rescan: load what was added or changed, unload what was removed."""
        registry = self.core.registry
        registry.scan()
        now = await asyncio.to_thread(snapshot, dict(registry.locations))
        added = sorted(set(now) - set(self.seen))
        removed = sorted(set(self.seen) - set(now))
        changed = sorted(n for n in set(now) & set(self.seen) if now[n] != self.seen[n])
        self.seen = now
        for name in removed:
            log.info("model '%s' was removed from the repository: unloading", name)
            await self.core.unload_model(name, from_model=True)  # refused to clients in poll mode
        for name in changed:
            log.info("model '%s' changed in the repository: reloading", name)
        from modelyard.core.ensembles import ensembles_last

        for group in ensembles_last(registry.locations, [*added, *changed]):  # steps first
            await asyncio.gather(*(self._load(n) for n in group))

    async def _load(self, name: str) -> None:
        try:
            await self.core.load(name)
        except Exception as e:  # logged and shown in the index by the core
            log.debug("poll: load of '%s' failed: %s", name, e)
