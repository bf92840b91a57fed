"""``--backend-config BACKEND,KEY=VALUE`` items, by backend (each backend reads its own keys)."""

from __future__ import annotations

from collections.abc import Sequence


def parse_backend_config(items: Sequence[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for item in items:
        backend, sep, setting = item.partition(",")
        key, eq, value = setting.partition("=")
        if not sep or not eq or not backend or not key:
            raise SystemExit(f"--backend-config expects BACKEND,KEY=VALUE, got '{item}'")
        out.setdefault(backend, {})[key] = value
    return out
