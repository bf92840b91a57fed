"""Which models exist (repository folders) and what state each is in; with
``--model-namespacing``, which model a name means.

Models are kept by key (``ModelLocation.key``): their name, or with namespacing and a name
several repositories hold, ``<repository>::<name>``. A request names a model by its name
alone; with namespacing :meth:`ModelRegistry.find` answers as Triton 2.51's
``FindModelIdentifier`` does (an unknown name, a name whose models were all unloaded, a name
held by several loaded models), and ensembles call the copy in their own repository first
(:meth:`ModelRegistry.step_key`).
"""

from __future__ import annotations

import logging
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from modelyard.config.repository import namespaced_key, scan_repositories
from modelyard.errors import InvalidArgument, ModelyardError, NotFound

if TYPE_CHECKING:
    from modelyard.core.model_version import ModelVersion

log = logging.getLogger("modelyard")


@dataclass(eq=False)
class ModelEntry:
    name: str  # the registry's key (the model's name unless namespacing qualifies it)
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    state: str = ""  # "" (never loaded), LOADING, READY, UNLOADING, UNAVAILABLE
    reason: str = ""
    # Versions of the last failed load or unload: the index keeps listing them, as Triton.
    last_versions: list[int] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        """Nothing loaded and nothing loading or unloading."""
        return not self.versions and self.state in ("", "UNAVAILABLE")

    @property
    def unloaded(self) -> bool:
        """Unloaded (by a request or a poll): Triton drops such a model from the models a
        name may mean."""
        return self.state == "UNLOADING" or self.reason == "unloaded"


class UnresolvedName(InvalidArgument):
    """With namespacing, a name that means no model or several (Triton's INVALID_ARG)."""


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """Triton's ``ModelIdentifier``: the namespace (the repository as given, with namespacing;
    else "") and the model's name."""

    namespace: str
    name: str

    @property
    def label(self) -> str:
        """How Triton's messages and logs name the model (``<namespace>::<name>``)."""
        return namespaced_key(self.namespace, self.name)


class ModelRegistry:
    def __init__(self, repositories: list[str], namespacing: bool = False):
        self.repositories = [Path(r) for r in repositories]
        self._given = [str(r) for r in repositories]  # namespaces: the paths as given
        self.namespacing = namespacing
        self.locations: dict[str, Path] = {}
        self.errors: dict[str, str] = {}  # models that cannot load as found (e.g. duplicates)
        self.entries: dict[str, ModelEntry] = {}
        # Every key a scan found, kept when its folder goes (its entry may outlive it).
        self.identities: dict[str, ModelIdentity] = {}
        # With namespacing: each name several repositories held at some scan, and its keys.
        self.shared: dict[str, set[str]] = {}

    def scan(self) -> None:
        found = scan_repositories(self._given, self.namespacing, frozenset(self.shared))
        self.locations = {key: Path(loc.path) for key, loc in found.items()}
        self.errors = {key: str(loc.error) for key, loc in found.items() if not loc.loadable}
        for key, loc in found.items():
            self.identities[key] = ModelIdentity(loc.namespace, loc.name)
            if loc.qualified:
                self.shared.setdefault(loc.name, set()).add(key)

    def entry(self, name: str) -> ModelEntry:
        e = self.entries.get(name)
        if e is None:
            e = self.entries[name] = ModelEntry(name)
        return e

    # -- names and keys ----------------------------------------------------------------------

    def identity(self, key: str) -> ModelIdentity:
        return self.identities.get(key) or ModelIdentity("", key)

    def name_of(self, key: str) -> str:
        """The model's name (what its config, statistics and the index call it)."""
        identity = self.identities.get(key)
        return identity.name if identity is not None else key

    def label(self, key: str) -> str:
        """The model as Triton's messages name it: with namespacing ``<repository>::<name>``."""
        return self.identity(key).label if self.namespacing else key

    def keys_named(self, name: str, among: Container[str]) -> list[str]:
        """The models a load (``among`` the locations) or an unload (``among`` the entries)
        of ``name`` acts on: with namespacing, the copy in every repository, as Triton loads
        and unloads a name in every namespace; else ``name``."""
        keys = sorted(k for k in self.shared.get(name, ()) if k in among)
        return keys or [name]

    def find(self, name: str) -> ModelEntry | None:
        """The model a request's ``name`` means. Without namespacing its entry or None; with
        it, Triton's answers when the name means no model or several (ModelyardError)."""
        entry = self.entries.get(name)
        if not self.namespacing or (entry is not None and name not in self.shared):
            return entry
        return self.entries[self._resolve(name)]

    def lookup(self, name: str) -> ModelEntry | None:
        """:meth:`find`, with None where it raises."""
        try:
            return self.find(name)
        except ModelyardError:
            return None

    def _resolve(self, name: str) -> str:
        candidates = [k for k in (*sorted(self.shared.get(name, ())), name) if k in self.entries]
        if not candidates:
            raise UnresolvedName(f"Request for unknown model: '{name}' is not found")
        known = [k for k in candidates if not self.entries[k].unloaded]
        if not known:
            raise NotFound(f"Identifier of model '{name}' is not found in global map")
        if len(known) > 1:
            raise UnresolvedName(
                f"There are {len(known)} identifiers of model '{name}' in global map, model "
                "namespace must be provided to resolve ambiguity."
            )
        return known[0]

    # -- ensembles ---------------------------------------------------------------------------

    def namespace_at(self, model_dir: str | Path) -> str:
        """With namespacing, the namespace of the repository model folder ``model_dir`` is
        in ("" for a folder of no repository: a load from file overrides)."""
        if self.namespacing:
            where = Path(model_dir)
            for key, path in self.locations.items():
                if path == where:
                    return self.identity(key).namespace
        return ""

    def step_key(self, name: str, namespace: str) -> str | None:
        """The model an ensemble step naming ``name`` calls, for an ensemble in ``namespace``:
        with namespacing the copy in the ensemble's own repository, else the only copy there
        is (Triton links steps so); None when there is none, or several and none of them in
        the ensemble's repository (Triton's 'not available or ambiguous')."""

        def present(key: str) -> bool:
            entry = self.entries.get(key)
            if entry is not None and not entry.unloaded:
                return True
            return key in self.locations and key not in self.errors

        keys = self.shared.get(name) if self.namespacing else None
        if not keys:  # (a name in two repositories without namespacing: not available)
            known = name in self.entries or (name in self.locations and name not in self.errors)
            return name if known else None
        own = namespaced_key(namespace, name)
        if own in keys and present(own):
            return own
        found = [k for k in (*sorted(keys), name) if present(k)]
        return found[0] if len(found) == 1 else None
