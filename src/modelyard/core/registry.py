"""Which models exist (repository folders) and what state each is in."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from modelyard.config.repository import scan_repositories

if TYPE_CHECKING:
    from modelyard.core.model_version import ModelVersion

log = logging.getLogger("modelyard")


@dataclass(eq=False)
class ModelEntry:
    name: str
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    state: str = ""  # "" (never loaded), LOADING, READY, UNLOADING, UNAVAILABLE
    reason: str = ""
    # Versions of the last failed load or unload: the index keeps listing them, as Triton.
    last_versions: list[int] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        """Nothing loaded and nothing loading or unloading."""
        return not self.versions and self.state in ("", "UNAVAILABLE")


class ModelRegistry:
    def __init__(self, repositories: list[str]):
        self.repositories = [Path(r) for r in repositories]
        self.locations: dict[str, Path] = {}
        self.errors: dict[str, str] = {}  # models that cannot load as found (e.g. duplicates)
        self.entries: dict[str, ModelEntry] = {}

    def scan(self) -> None:
        found = scan_repositories(self.repositories)
        self.locations = {name: Path(loc.path) for name, loc in found.items()}
        self.errors = {name: str(loc.error) for name, loc in found.items() if not loc.loadable}

    def entry(self, name: str) -> ModelEntry:
        e = self.entries.get(name)
        if e is None:
            e = self.entries[name] = ModelEntry(name)
        return e
