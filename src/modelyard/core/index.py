"""The repository index (Triton's ``RepositoryIndex``): every model the repositories hold or
the server knows, with its versions, state and reason.

Ordered as Triton orders its model identifiers: by namespace, then name. Without namespacing
every namespace is "", so by name; with ``--model-namespacing`` repository by repository, a
name several repositories hold listed once in each.
"""

from __future__ import annotations

from typing import Any

from modelyard.core.health import version_state
from modelyard.core.registry import ModelRegistry


def repository_index(registry: ModelRegistry, ready_only: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    keys = set(registry.locations) | set(registry.entries)
    for key in sorted(keys, key=lambda k: (registry.identity(k).namespace, registry.name_of(k))):
        name = registry.name_of(key)
        entry = registry.entries.get(key)
        if entry is not None and entry.idle and key not in registry.locations:
            continue  # as in Triton: its folder is gone (poll removals, deleted after unload)
        if entry is None or (not entry.versions and entry.state == ""):
            if not ready_only:
                error = registry.errors.get(key)  # e.g. in two repositories
                out.append(
                    {"name": name, "state": "UNAVAILABLE", "reason": error}
                    if error
                    else {"name": name}
                )
            continue
        if entry.versions:
            for v, mv in sorted(entry.versions.items()):
                state, reason = version_state(entry, mv)
                item = {"name": name, "version": str(v), "state": state}
                if reason:
                    item["reason"] = reason
                if not ready_only or state == "READY":
                    out.append(item)
        elif not ready_only:
            last = [str(v) for v in entry.last_versions] or [""]
            for ver in last:  # Triton keeps listing the versions the model had
                item = {"name": name, "state": entry.state}
                if ver:
                    item = {"name": name, "version": ver, "state": entry.state}
                if entry.reason:
                    item["reason"] = entry.reason
                out.append(item)
    return out
