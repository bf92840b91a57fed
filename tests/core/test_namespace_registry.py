"""The pure part of ``--model-namespacing``: how the repositories are keyed, which model a name
means (Triton 2.51's answers), which copy an ensemble step calls (tests/core/test_namespacing.py
checks the same through the server and against the reference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.config.repository import scan_repositories
from modelyard.core.registry import ModelRegistry, UnresolvedName
from modelyard.errors import ErrorCode, ModelyardError
from tests.core.namespace_repos import ambiguous


def _repos(root: Path) -> tuple[str, str]:
    for repo, names in (("a", ("shared", "only_a")), ("b", ("shared", "only_b"))):
        for name in names:
            (root / repo / name).mkdir(parents=True)
    return str(root / "a"), str(root / "b")


def _registry(root: Path, namespacing: bool = True) -> ModelRegistry:
    registry = ModelRegistry(list(_repos(root)), namespacing)
    registry.scan()
    return registry


def _load(registry: ModelRegistry, *keys: str) -> None:
    for key in keys:
        registry.entry(key).state = "READY"


def test_a_shared_name_is_keyed_per_repository(tmp_path: Path) -> None:
    a, b = _repos(tmp_path)
    found = scan_repositories([a, b], namespacing=True)
    assert sorted(found) == sorted([f"{a}::shared", f"{b}::shared", "only_a", "only_b"])
    assert found[f"{b}::shared"].namespace == b and found["only_a"].namespace == a
    assert all(loc.loadable for loc in found.values())
    # without namespacing: one location, not loadable
    assert not scan_repositories([a, b])["shared"].loadable


def test_keys_stay_when_one_copy_goes(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    (tmp_path / "a" / "shared").rmdir()
    registry.scan()
    assert sorted(registry.locations) == sorted([f"{tmp_path}/b::shared", "only_a", "only_b"])


def test_a_name_means_one_loaded_model_or_is_refused(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    a, b = f"{tmp_path}/a::shared", f"{tmp_path}/b::shared"
    with pytest.raises(UnresolvedName, match="Request for unknown model: 'shared' is not found"):
        registry.find("shared")  # nothing loaded yet
    _load(registry, a)
    assert registry.find("shared") is registry.entries[a]  # one copy loaded: that one
    _load(registry, b)
    with pytest.raises(UnresolvedName) as e:
        registry.find("shared")
    assert e.value.message == ambiguous("shared") and e.value.code == ErrorCode.INVALID_ARG
    for key in (a, b):
        registry.entries[key].state, registry.entries[key].reason = "UNAVAILABLE", "unloaded"
    with pytest.raises(ModelyardError) as gone:
        registry.find("shared")
    assert gone.value.code == ErrorCode.NOT_FOUND
    assert gone.value.message == "Identifier of model 'shared' is not found in global map"
    assert registry.lookup("shared") is None
    assert registry.label(a) == a and registry.label("only_a") == f"{tmp_path}/a::only_a"


def test_without_namespacing_a_name_is_its_key(tmp_path: Path) -> None:
    registry = _registry(tmp_path, namespacing=False)
    assert registry.find("shared") is None and registry.label("shared") == "shared"
    assert registry.keys_named("shared", registry.locations) == ["shared"]
    assert registry.step_key("shared", "") is None  # in two repositories: not available
    assert registry.step_key("only_a", "") == "only_a"


def test_a_step_calls_its_own_repositorys_copy_else_the_only_one(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    a, b = f"{tmp_path}/a", f"{tmp_path}/b"
    assert registry.namespace_at(Path(a) / "only_a") == a
    assert registry.step_key("shared", a) == f"{a}::shared"
    assert registry.step_key("shared", b) == f"{b}::shared"
    assert registry.step_key("shared", "") is None  # no copy of its own, two others
    assert registry.step_key("only_b", a) == "only_b"
    (tmp_path / "a" / "shared").rmdir()
    registry.scan()
    assert registry.step_key("shared", a) == f"{b}::shared"  # the only copy left
    assert registry.keys_named("shared", registry.locations) == [f"{b}::shared"]
