"""Coordination of model loads and unloads: how many run at once, one at a time per model,
and the private folders of ``file:`` overrides.

- ``--model-load-thread-count N``: at most N loads run at once; the others wait their turn.
  A load asked for by a model (``pb_utils.load_model``, e.g. from ``initialize``) does not
  wait for a slot: its caller already holds one, and waiting could deadlock.
- Loads and unloads of one model are serialised (explicit requests, poll mode, BLS models).
- A model loaded from a ``file:`` override owns its temporary folder until it is unloaded
  or replaced by another load.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from modelyard.core import file_override

DEFAULT_LOAD_THREADS = 4  # Triton's --model-load-thread-count default


class ModelLoads:
    def __init__(self, threads: int = DEFAULT_LOAD_THREADS) -> None:
        self.threads = max(1, threads)
        self._slots: asyncio.Semaphore | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._override_dirs: dict[str, Path] = {}

    def _semaphore(self) -> asyncio.Semaphore:
        if self._slots is None:  # created on the server's loop, not at import
            self._slots = asyncio.Semaphore(self.threads)
        return self._slots

    def lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    @asynccontextmanager
    async def slot(self, from_model: bool = False) -> AsyncIterator[None]:
        if from_model:
            yield
            return
        async with self._semaphore():
            yield

    def prepare(self, name: str, config: Any | None, files: dict[str, bytes] | None) -> Path | None:
        """The private model folder for a load with ``file:`` overrides, or None without."""
        if not files:
            return None
        if config is None:
            raise file_override.load_failed(name, file_override.CONFIG_REQUIRED)
        return file_override.materialise(name, files)

    def adopt(self, name: str, model_dir: Path | None) -> Path | None:
        """A load of ``name`` succeeded from ``model_dir`` (None: from the repository); return
        the folder of the load it replaced, for removal once that load's versions are gone."""
        old = self._override_dirs.pop(name, None)
        if model_dir is not None:
            self._override_dirs[name] = model_dir
        return old if old != model_dir else None

    def take(self, name: str) -> Path | None:
        """``name`` is being unloaded: its override folder, for removal once it is gone."""
        return self._override_dirs.pop(name, None)

    def release_all(self) -> None:
        for name in list(self._override_dirs):
            file_override.remove(self._override_dirs.pop(name, None))
